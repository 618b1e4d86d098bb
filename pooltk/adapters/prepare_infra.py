"""torch <= 2.11: buffers made inside ``_prepare_forward_infra`` / ``_prepare_backward_infra``.

The setup calls here also run shape inference, so buffers cannot be made lazily during
the call without risking placeholder tensors in real compute: torch makes all M sets,
the ring keeps K and the rest are freed at once (a transient at setup, reported).
"""

from __future__ import annotations

from pooltk.adapters import Layout, SetupTarget, missing_hot_methods

FAMILY = "prepare-infra"


def detect() -> Layout | str:
    from torch.distributed.pipelining import stage as stage_mod

    base = getattr(stage_mod, "_PipelineStageBase", None)
    manual = getattr(stage_mod, "PipelineStage", None)
    traced = getattr(stage_mod, "_PipelineStage", None)
    if None in (base, manual, traced):
        return f"{FAMILY}: stage classes not found"
    if "_setup_backward_recv_info" in base.__dict__:
        return f"{FAMILY}: _setup_backward_recv_info present (newer layout)"
    if not hasattr(stage_mod, "_RootArgPlaceholder"):
        return f"{FAMILY}: no _RootArgPlaceholder (root args are not the <= 2.11 form)"
    needed = [(manual, "_prepare_forward_infra"), (traced, "_prepare_forward_infra"), (base, "_prepare_backward_infra")]
    missing = [f"{cls.__name__}.{name}" for cls, name in needed if name not in cls.__dict__]
    if missing:
        return f"{FAMILY}: missing {', '.join(missing)}"
    hot = missing_hot_methods(base)
    if hot:
        return f"{FAMILY}: stage base lacks {', '.join(hot)}"
    return Layout(
        name=FAMILY,
        setup_targets=(
            SetupTarget(owner=manual, name="_prepare_forward_infra", direction="forward",
                        infos_attr="args_recv_info", alloc_free=False),
            SetupTarget(owner=traced, name="_prepare_forward_infra", direction="forward",
                        infos_attr="args_recv_info", alloc_free=False),
            SetupTarget(owner=base, name="_prepare_backward_infra", direction="grad",
                        infos_attr="grad_recv_info", alloc_free=False),
        ),
        note=f"layout {FAMILY!r}: _prepare_forward_infra (both frontends), _PipelineStageBase._prepare_backward_infra",
    )
