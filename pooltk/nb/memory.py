"""Figures and the interactive explorer of notebook 01 (memory vs slack).

The notebook stays thin: every figure is one call here, and the widget callback is
:func:`explore` (compute, record in an :class:`ExplorerState`) followed by
:func:`render_explorer` (print the figure-of-merit line, draw, save). Tests call
:func:`explore` directly and assert on what it recorded.

Imports matplotlib / seaborn / ipywidgets inside the functions that draw.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk.config import PoolConfig
from pooltk.memory.model import (
    Boundary,
    MemoryModel,
    MemoryModelError,
    PipelineShape,
    middle_stage,
    model_memory,
    slack_sweep,
)
from pooltk.studies.kimi_k3.presets import PRESETS, get_preset

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = [
    "VARIANT_LABELS",
    "ExplorerState",
    "FigureOfMerit",
    "explore",
    "explorer_controls",
    "lifetime_timeline",
    "render_explorer",
    "slack_heatmap",
    "stage_bars",
]

VARIANT_LABELS: dict[str, str] = {
    "stock": "stock torch",
    "automodel": "automodel policy",
    "tight": "pooltk tight",
    "live_set": "live-set minimum",
}
"""Legend labels for the variants drawn in the bar chart, in drawing order."""


# --------------------------------------------------------------------------- figures


def stage_bars(model: MemoryModel, *, ax: Any = None, title: str | None = None) -> Figure:
    """Per-stage receive-buffer GiB (both directions) for stock, automodel, tight and live set."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    frame = model.to_frame()
    frame = frame[frame.variant.isin(list(VARIANT_LABELS))]
    per_stage = frame.groupby(["stage", "variant"], as_index=False, sort=False)["gib"].sum()
    per_stage["variant"] = per_stage["variant"].map(VARIANT_LABELS)
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 4))
    else:
        fig = ax.figure
    sns.barplot(data=per_stage, x="stage", y="gib", hue="variant", hue_order=list(VARIANT_LABELS.values()), ax=ax)
    cfg = model.config
    ax.set_ylabel("receive buffers per stage (GiB, 2**30 B)")
    ax.set_xlabel(f"stage (pp={model.shape.pp}, M={model.shape.n_microbatches}, {model.shape.schedule})")
    ax.set_title(title or f"stock vs pooled: slack={cfg.slack}, grad_slack={cfg.grad_slack} (tight); automodel slack={cfg.slack}")
    ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), fontsize="small", frameon=False)
    return fig


def slack_heatmap(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig,
    *,
    slacks: Iterable[int] = range(0, 9),
    ax: Any = None,
) -> Figure:
    """Stage x slack heatmap of pooled GiB per stage under ``config``'s policy."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sweep = slack_sweep(shape, boundaries, list(slacks), config)
    grid = sweep.pivot(index="stage", columns="slack", values="pooled_gib")
    if ax is None:
        fig, ax = plt.subplots(figsize=(10, 0.45 * shape.pp + 2))
    else:
        fig = ax.figure
    sns.heatmap(grid, annot=True, fmt=".1f", cmap="viridis", cbar_kws={"label": "pooled GiB (2**30 B)"}, ax=ax)
    extra = f", grad_slack={config.grad_slack}" if config.policy == "tight" else ""
    ax.set_title(f"pooled receive buffers per stage ({config.policy}{extra}); stock middle stage "
                 f"{sweep[sweep.stage == middle_stage(shape.pp)].stock_gib.iloc[0]:.1f} GiB")
    ax.set_xlabel("forward slack")
    ax.set_ylabel("stage")
    return fig


def lifetime_timeline(
    *,
    pp: int = 4,
    n_microbatches: int = 8,
    stage: int = 1,
    schedules: Sequence[str] = ("1F1B", "GPipe"),
) -> Figure:
    """Forward receive-buffer lifetimes on ``stage`` for each schedule, coloured by ring slot.

    Each bar is one microbatch's buffer from receive post to release (thin: posted, not yet
    read; thick: held for the backward). Slots are ``microbatch mod K`` with ``K`` = the 1F1B
    live set of the stage; a red cross marks a receive that would overwrite a buffer still
    live in the same slot (:func:`pooltk.analysis.lifetimes.overwrites`). The step line counts live
    buffers: under 1F1B it never exceeds ``K``; under GPipe it climbs to ``M``.
    """
    import matplotlib.pyplot as plt
    import seaborn as sns

    from pooltk.analysis import lifetimes as sch

    base = sch.live_sets(schedules[0], pp=pp, n_microbatches=n_microbatches)[(stage, "forward")]
    k = max(1, base)
    fig, axes = plt.subplots(len(schedules), 1, figsize=(10, 2.4 * len(schedules) + 0.6), sharex=False)
    axes = [axes] if len(schedules) == 1 else list(axes)
    palette = sns.color_palette("tab10", k)
    for ax, name in zip(axes, schedules):
        spans = [b for b in sch.lifetimes(name, pp=pp, n_microbatches=n_microbatches) if b.stage == stage and b.direction == "forward"]
        bad = sch.overwrites(spans, k)
        for b in spans:
            colour = palette[b.microbatch % k]
            ax.plot([b.post, b.consume], [b.microbatch] * 2, color=colour, lw=2, solid_capstyle="butt")
            ax.plot([b.consume, b.release], [b.microbatch] * 2, color=colour, lw=7, solid_capstyle="butt")
        by_mb = {b.microbatch: b for b in spans}
        for o in bad:
            ax.plot(by_mb[o.overwritten_by].post, o.microbatch, marker="x", color="red", ms=10, mew=2.5)
        end = max(b.release for b in spans) + 1
        live = [sum(b.post <= t <= b.release for b in spans) for t in range(end)]
        twin = ax.twinx()
        twin.step(range(end), live, where="post", color="black", lw=1, alpha=0.6)
        twin.set_ylim(0, n_microbatches + 1)
        twin.set_ylabel("live buffers")
        twin.grid(False)
        ax.set_ylim(n_microbatches - 0.5, -0.5)
        ax.set_ylabel("microbatch")
        ax.set_title(
            f"{name}: stage {stage} of {pp}, M={n_microbatches}: peak live {max(live)}; "
            f"ring of K={k} overwrites {len(bad)} live buffer(s)"
        )
    axes[-1].set_xlabel(f"position in rank {stage}'s action order (receive post .. release)")
    fig.tight_layout()
    return fig


# --------------------------------------------------------------------------- the explorer


@dataclass(kw_only=True, slots=True, frozen=True)
class FigureOfMerit:
    """The number the explorer prints after every update."""

    stage: int
    """The stage reported (the middle stage of the current pp)."""
    stock_gib: float
    """Stock receive buffers on that stage, GiB (2**30)."""
    pooled_gib: float
    """Pooled receive buffers on that stage under the chosen policy, GiB."""
    saved_gib: float
    """Stock minus pooled, GiB."""
    policy: str
    """The policy the pooled figure uses."""
    slack: int
    """Forward slack."""
    grad_slack: int
    """Grad slack (tight policy)."""

    def line(self) -> str:
        """e.g. ``stage 3 pooled: 5.69 GiB, saved 46.31 GiB of 52.00 GiB stock (automodel, slack 2)``."""
        extra = f", grad slack {self.grad_slack}" if self.policy == "tight" else ""
        return (
            f"stage {self.stage} pooled: {self.pooled_gib:.2f} GiB, saved {self.saved_gib:.2f} GiB "
            f"of {self.stock_gib:.2f} GiB stock ({self.policy}, slack {self.slack}{extra})"
        )


@dataclass(kw_only=True, slots=True)
class ExplorerState:
    """What the explorer computed last; the notebook's widgets only display it."""

    last_inputs: dict[str, Any] | None = None
    """The inputs of the last update, as passed."""
    last_result: MemoryModel | None = None
    """The model of the last update (``None`` when the inputs were rejected)."""
    last_error: str | None = None
    """The error message when the last inputs were rejected, else ``None``."""
    figure_of_merit: FigureOfMerit | None = None
    """The middle-stage figure of the last successful update."""
    history: list[FigureOfMerit] = field(default_factory=list)
    """Every successful update's figure of merit, in order."""


def explore(
    state: ExplorerState,
    *,
    preset: str,
    pp: int,
    microbatches: int,
    slack: int,
    grad_slack: int,
    policy: str,
    boundary_mib: float | None = None,
) -> MemoryModel | None:
    """One widget update: model the shape and record it in ``state``.

    ``boundary_mib`` (MiB per buffer set) replaces the preset's boundary tensors when it
    differs from the preset's own set size; ``None`` keeps them. Rejected inputs (e.g.
    M < pp under 1F1B) are recorded in ``state.last_error`` and return ``None``.
    """
    state.last_inputs = dict(
        preset=preset, pp=pp, microbatches=microbatches, slack=slack, grad_slack=grad_slack, policy=policy, boundary_mib=boundary_mib
    )
    try:
        p = get_preset(preset)
        boundary = p.boundary
        if boundary_mib is not None and round(boundary_mib * 2**20) != boundary.forward_bytes:
            if not boundary_mib > 0:
                raise MemoryModelError("boundary MiB", found=repr(boundary_mib), required="> 0", fix="pick a positive size.")
            boundary = Boundary.opaque(round(boundary_mib * 2**20), name="boundary_from_widget")
        shape = dataclasses.replace(p.shape, pp=pp, n_microbatches=microbatches, global_batch=None, micro_batch=None, dp=None)
        config = PoolConfig(slack=slack, grad_slack=grad_slack, policy=policy)  # type: ignore[arg-type]
        # The closed forms equal the walked live sets for 1F1B and GPipe (tests/memory prove it
        # over a grid of shapes); using them keeps a pp/M slider move under 50 ms at N=16, M=256,
        # where a cold walk of the schedule takes about a second.
        model = model_memory(shape, boundary, config, live_source="formula")
    except ValueError as exc:  # MemoryModelError and PoolConfig's ValueError
        state.last_result, state.last_error = None, str(exc)
        return None
    stage = middle_stage(pp)
    fom = FigureOfMerit(
        stage=stage,
        stock_gib=model.stage_gib(stage, "stock"),
        pooled_gib=model.stage_gib(stage, "pooled"),
        saved_gib=model.saved_gib(stage),
        policy=policy,
        slack=slack,
        grad_slack=grad_slack,
    )
    state.last_result, state.last_error, state.figure_of_merit = model, None, fom
    state.history.append(fom)
    return model


def render_explorer(state: ExplorerState, *, save: bool = True) -> Figure | None:
    """Print the figure-of-merit line (or the error) and draw the per-stage bars of the last update."""
    import matplotlib.pyplot as plt

    from pooltk.nb import common as nb

    if state.last_result is None:
        print(f"rejected: {state.last_error}")
        return None
    print(state.figure_of_merit.line())  # type: ignore[union-attr]
    fig = stage_bars(state.last_result)
    if save:
        nb.save_figure(fig, "01_explorer_stage_bars")
    plt.show()
    return fig


def explorer_controls(preset: str | None = None) -> dict[str, Any]:
    """ipywidgets for :func:`explore`'s keyword arguments, set to ``preset``'s values.

    Choosing another preset resets pp, microbatches, slack, policy and boundary MiB to
    that preset's values. Pass the dict to ``ipywidgets.interactive_output``.
    """
    import ipywidgets as w

    p = get_preset(preset or next(iter(PRESETS)))
    style = {"description_width": "150px"}
    layout = w.Layout(width="520px")
    controls: dict[str, Any] = {
        "preset": w.Dropdown(options=list(PRESETS), value=p.name, description="preset", style=style, layout=layout),
        # pp and M re-walk the schedule for an unseen shape (up to ~1 s at N=16, M=256): update on release.
        "pp": w.IntSlider(value=p.shape.pp, min=2, max=16, description="pp (stages)", continuous_update=False, style=style, layout=layout),
        "microbatches": w.IntSlider(
            value=p.shape.n_microbatches, min=1, max=256, description="microbatches M", continuous_update=False, style=style, layout=layout
        ),
        "slack": w.IntSlider(value=p.config.slack, min=0, max=8, description="slack", style=style, layout=layout),
        "grad_slack": w.IntSlider(value=p.config.grad_slack, min=0, max=4, description="grad slack (tight)", style=style, layout=layout),
        "policy": w.Dropdown(options=["automodel", "tight"], value=p.config.policy, description="policy", style=style, layout=layout),
        "boundary_mib": w.FloatSlider(
            value=p.boundary.forward_bytes / 2**20, min=1, max=1024, step=1, description="boundary MiB / set", style=style, layout=layout
        ),
    }

    def _reset(change: dict[str, Any]) -> None:
        q = get_preset(change["new"])
        controls["pp"].value = q.shape.pp
        controls["microbatches"].value = q.shape.n_microbatches
        controls["slack"].value = q.config.slack
        controls["grad_slack"].value = q.config.grad_slack
        controls["policy"].value = q.config.policy
        controls["boundary_mib"].value = q.boundary.forward_bytes / 2**20

    controls["preset"].observe(_reset, names="value")
    return controls
