"""torch 2.12-2.14: per-direction ``_setup_*_recv_info`` (manual frontend) layout."""

from __future__ import annotations

import inspect

from pooltk.pool.adapters import Layout, eager_layout

FAMILY = "setup-recv-info"


def detect() -> Layout | str:
    from torch.distributed.pipelining import stage as stage_mod

    base = getattr(stage_mod, "_PipelineStageBase", None)
    manual = getattr(stage_mod, "PipelineStage", None)
    traced = getattr(stage_mod, "_PipelineStage", None)
    recv_info = getattr(stage_mod, "_RecvInfo", None)
    if None in (base, manual, traced, recv_info):
        return f"{FAMILY}: stage classes not found"
    if hasattr(recv_info, "allocate_buffer"):
        return f"{FAMILY}: _RecvInfo allocates lazily (that is the lazy layout)"
    params = inspect.signature(recv_info.__init__).parameters
    if "tensor_meta" not in params:
        return f"{FAMILY}: _RecvInfo has no tensor_meta (older layout)"
    if "buffer" not in params:
        return f"{FAMILY}: _RecvInfo takes no buffer (buffers are not made at setup)"
    return eager_layout(FAMILY, stage_mod, manual_forward="_setup_forward_recv_info",
                        traced_forward="_prepare_forward_infra", grad="_setup_backward_recv_info")
