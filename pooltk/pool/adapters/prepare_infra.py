"""torch <= 2.11: buffers made inside ``_prepare_forward_infra`` / ``_prepare_backward_infra``.

[Note: prepare-infra layout]
``_RecvInfo(input_name, source, buffer)`` wraps an eagerly made buffer; stage-0 inputs are
``_RootArgPlaceholder``. Forward buffers are made in ``_prepare_forward_infra`` of both frontends (after shape
inference), gradients' in ``_PipelineStageBase._prepare_backward_infra``; only ``_make_tensor_from_meta``'s
allocations become placeholders ([Note: placeholders without patching]), so shape inference is untouched.
"""

from __future__ import annotations

import inspect

from pooltk.pool.adapters import Layout, eager_layout, stage_classes

FAMILY = "prepare-infra"


def detect() -> Layout | str:
    found = stage_classes(FAMILY)
    if isinstance(found, str):
        return found
    stage_mod, (base, _manual, _traced, recv_info) = found
    if "_setup_backward_recv_info" in base.__dict__:
        return f"{FAMILY}: _setup_backward_recv_info present (newer layout)"
    if not hasattr(stage_mod, "_RootArgPlaceholder"):
        return f"{FAMILY}: no _RootArgPlaceholder (root args are not the <= 2.11 form)"
    try:
        params = inspect.signature(recv_info.__init__).parameters
    except (TypeError, ValueError):
        params = {}
    if "buffer" not in params or "tensor_meta" in params:
        return f"{FAMILY}: _RecvInfo is not built around an eager buffer argument"
    return eager_layout(
        FAMILY,
        stage_mod,
        manual_forward="_prepare_forward_infra",
        traced_forward="_prepare_forward_infra",
        grad="_prepare_backward_infra",
    )
