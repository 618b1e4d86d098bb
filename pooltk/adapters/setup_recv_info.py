"""torch 2.12-2.14: per-direction ``_setup_*_recv_info`` (manual frontend) layout."""

from __future__ import annotations

import inspect

from pooltk.adapters import Layout, SetupTarget, missing_hot_methods

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
    needed = [
        (manual, "_setup_forward_recv_info"),
        (traced, "_prepare_forward_infra"),
        (base, "_setup_backward_recv_info"),
    ]
    missing = [f"{cls.__name__}.{name}" for cls, name in needed if name not in cls.__dict__]
    if missing:
        return f"{FAMILY}: missing {', '.join(missing)}"
    params = inspect.signature(recv_info.__init__).parameters
    if "tensor_meta" not in params:
        return f"{FAMILY}: _RecvInfo has no tensor_meta (older layout)"
    if "buffer" not in params:
        return f"{FAMILY}: _RecvInfo takes no buffer (buffers are not made at setup)"
    hot = missing_hot_methods(base)
    if hot:
        return f"{FAMILY}: stage base lacks {', '.join(hot)}"
    lazy_ok = callable(getattr(stage_mod, "_make_tensor_from_meta", None))
    return Layout(
        name=FAMILY,
        setup_targets=(
            SetupTarget(owner=manual, name="_setup_forward_recv_info", direction="forward",
                        infos_attr="args_recv_info", alloc_free=lazy_ok),
            SetupTarget(owner=traced, name="_prepare_forward_infra", direction="forward",
                        infos_attr="args_recv_info", alloc_free=lazy_ok),
            SetupTarget(owner=base, name="_setup_backward_recv_info", direction="grad",
                        infos_attr="grad_recv_info", alloc_free=lazy_ok),
        ),
        note=f"layout {FAMILY!r}: PipelineStage._setup_forward_recv_info, _PipelineStage._prepare_forward_infra, "
        f"_PipelineStageBase._setup_backward_recv_info"
        + ("" if lazy_ok else " (no _make_tensor_from_meta: all M sets are made, then K kept)"),
    )
