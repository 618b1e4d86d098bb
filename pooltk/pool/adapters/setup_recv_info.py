"""torch 2.12-2.14: per-direction ``_setup_*_recv_info`` (manual frontend) layout."""

from __future__ import annotations

import inspect

from pooltk.pool.adapters import Layout, eager_layout, stage_classes

FAMILY = "setup-recv-info"


def detect() -> Layout | str:
    found = stage_classes(FAMILY)
    if isinstance(found, str):
        return found
    stage_mod, (_base, _manual, _traced, recv_info) = found
    if hasattr(recv_info, "allocate_buffer"):
        return f"{FAMILY}: _RecvInfo allocates lazily (that is the lazy layout)"
    params = inspect.signature(recv_info.__init__).parameters
    if "tensor_meta" not in params:
        return f"{FAMILY}: _RecvInfo has no tensor_meta (older layout)"
    if "buffer" not in params:
        return f"{FAMILY}: _RecvInfo takes no buffer (buffers are not made at setup)"
    return eager_layout(
        FAMILY,
        stage_mod,
        manual_forward="_setup_forward_recv_info",
        traced_forward="_prepare_forward_infra",
        grad="_setup_backward_recv_info",
    )
