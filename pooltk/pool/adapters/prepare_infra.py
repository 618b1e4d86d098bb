"""torch <= 2.11: buffers made inside ``_prepare_forward_infra`` / ``_prepare_backward_infra``.

[Note: prepare-infra layout]
Read from the real torch 2.11.0 ``torch/distributed/pipelining/stage.py``:

- ``_RecvInfo(input_name, source, buffer)``: the buffer is made eagerly and passed in;
  stage-0 inputs are ``_RootArgPlaceholder`` objects (no ``buffer``), not ``_RecvInfo``;
- manual frontend: ``PipelineStage._prepare_forward_infra(num_microbatches, args, kwargs)``
  runs shape inference (``torch.zeros_like`` on the inputs, a no-grad forward), then
  makes one buffer per microbatch with ``_make_tensor_from_meta`` and sets
  ``requires_grad`` when the stage has a backward;
- tracing frontend: ``_PipelineStage._prepare_forward_infra`` calls
  ``_create_act_recv_info()`` once per microbatch, which makes each buffer with
  ``_make_tensor_from_meta``;
- gradients: ``_PipelineStageBase._prepare_backward_infra(num_microbatches)`` sets
  ``self.chunks`` and calls ``_create_grad_recv_info`` per microbatch (both frontends
  make the buffer with ``_make_tensor_from_meta``).

``_make_tensor_from_meta`` is a module-level function of ``stage.py`` and, inside these
setup calls, is used for receive buffers only (shape inference uses ``zeros_like``), so
the same shape-only placeholder swap as in the setup-recv-info layout applies: only the
K ring sets are ever allocated. Where the function is missing, torch makes all M sets
and the ring keeps K (a transient at setup, reported by ``alloc_free=False``).
"""

from __future__ import annotations

import inspect

from pooltk.pool.adapters import Layout, eager_layout, stage_classes

FAMILY = "prepare-infra"


def _takes_buffer(recv_info: type) -> bool:
    """True when ``_RecvInfo`` is built around an eagerly made ``buffer`` (the <= 2.11 form)."""
    try:
        params = inspect.signature(recv_info.__init__).parameters
    except (TypeError, ValueError):
        return False
    return "buffer" in params and "tensor_meta" not in params


def detect() -> Layout | str:
    found = stage_classes(FAMILY)
    if isinstance(found, str):
        return found
    stage_mod, (base, _manual, _traced, recv_info) = found
    if "_setup_backward_recv_info" in base.__dict__:
        return f"{FAMILY}: _setup_backward_recv_info present (newer layout)"
    if not hasattr(stage_mod, "_RootArgPlaceholder"):
        return f"{FAMILY}: no _RootArgPlaceholder (root args are not the <= 2.11 form)"
    if not _takes_buffer(recv_info):
        return f"{FAMILY}: _RecvInfo is not built around an eager buffer argument"
    return eager_layout(FAMILY, stage_mod, manual_forward="_prepare_forward_infra",
                        traced_forward="_prepare_forward_infra", grad="_prepare_backward_infra")
