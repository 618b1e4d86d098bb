"""Notebook 01's "The whole stage": a named model replayed rank by rank on fake tensors, drawn and
judged.

One call, :func:`whole_stage_estimate`, replays the chosen ranks of an estimate preset
(:data:`pooltk.memory.replay.presets.ESTIMATE_PRESETS`) under every variant
(:func:`pooltk.memory.replay.estimate.estimate_memory`) and judges them on one device
(:func:`pooltk.memory.fits.of_estimate`). The figures draw what it holds:
:func:`stacked_figure` (per rank, one bar per variant stacked by what holds the memory at the
rank's peak, against the capacity and the capacity less the stated overhead) and
:func:`timeline_figure` (one rank through the step, stock beside pooled).

[Note: the quick whole stage]
Replay time grows with layers x microbatches (widths cost nothing): Llama-3-70B's 80 layers at
32 microbatches take minutes for three ranks and four variants. ``quick=True`` (notebook 01's
default; its ``FULL_WHOLE_STAGE`` parameter opts out) replays the same model and ranks with at most
``max(pp, 8)`` microbatches and at most 512 tokens a row, so the section runs in the suite; every
figure and table then says so (:attr:`WholeStage.scale`), and its numbers are of that smaller step,
not the preset's.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk.memory.errors import MemoryModelError
from pooltk.memory.replay.estimate import VARIANT_TITLES, MemoryEstimate, estimate_memory
from pooltk._validate import check_int
from pooltk.memory.fits import Verdict, get_device, of_estimate
from pooltk.memory.replay.presets import EstimatePreset, estimate_preset
from pooltk.memory.replay.run import REPLAY_VARIANTS
from pooltk.memory.replay.tracker import CATEGORIES
from pooltk.nb import canvas, style
from pooltk.nb.fits import capacity_lines
from pooltk.studies.kimi_k3 import named_estimates

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

    from pooltk.memory.source import Preset

__all__ = [
    "QUICK_MAX_SEQ",
    "QUICK_MIN_MICROBATCHES",
    "VARIANT_TICKS",
    "VARIANT_SERIES",
    "WholeStage",
    "receive_source",
    "stacked_figure",
    "timeline_figure",
    "whole_stage_estimate",
]

GIB = 2**30

QUICK_MIN_MICROBATCHES = 8
"""``quick``: at most ``max(pp, 8)`` microbatches ([Note: the quick whole stage])."""
QUICK_MAX_SEQ = 512
"""``quick``: at most 512 tokens a row."""

VARIANT_TICKS: dict[str, str] = {
    "stock": "stock torch\n<= 2.14",
    "stock_lazy": "torch 2.15\n(lazy buffers)",
    "pooled": "pooltk\nrings",
    "live_set": "pooltk rings\nslack 0",
}
"""Short x tick of each replayed variant (the full titles:
:data:`pooltk.memory.replay.estimate.VARIANT_TITLES`)."""

VARIANT_SERIES: dict[str, str] = {
    "stock": "stock",
    "stock_lazy": "stock_lazy",
    "pooled": "tight",
    "live_set": "live_set",
}
"""The series (:data:`pooltk.nb.style.SERIES`) each replayed variant is drawn as: the pooled replay
runs pooltk's tight rings."""


@dataclass(kw_only=True, slots=True, frozen=True)
class WholeStage:
    """A named model replayed rank by rank, and its verdict on one device."""

    preset: EstimatePreset
    """What was replayed (the named preset, with fewer microbatches and tokens when ``quick``)."""
    named: EstimatePreset
    """The named preset as published (its full shape)."""
    quick: bool
    """Whether the replay is the suite's smaller step ([Note: the quick whole stage])."""
    estimate: MemoryEstimate
    """Every replayed rank and variant."""
    verdict: Verdict
    """The verdict on the chosen device, with the stated overhead."""

    @property
    def scale(self) -> str:
        """What was replayed, and how it differs from the named preset."""
        p, n = self.preset, self.named
        step = f"pp {p.pp}, {p.microbatches} microbatches of {p.rows} x {p.seq_len} tokens"
        if (p.microbatches, p.seq_len, p.rows, p.pp) == (n.microbatches, n.seq_len, n.rows, n.pp):
            return f"{step} (the preset's own shape)"
        why = "quick: the suite's smaller step" if self.quick else "overridden"
        return f"{step} ({why}; the preset is {n.microbatches} of {n.rows} x {n.seq_len})"

    def inputs(self) -> dict[str, str]:
        """What was replayed, for :func:`pooltk.nb.common.show_inputs`."""
        est = self.estimate
        return {
            "model": est.model,
            "replayed": self.scale,
            "ranks": ", ".join(map(str, est.ranks)),
            "variants": "; ".join(VARIANT_TITLES[v] for v in est.variants),
            "pooled variant": est.config.describe(),
            "training": f"optimizer {est.training.optimizer} ({est.training.optimizer_impl}), "
            f"{est.training.steps} measured step(s)",
            "source": self.preset.source,
            **({"notes": "; ".join(est.notes)} if est.notes else {}),
        }

    def peak_table(self) -> pd.DataFrame:
        """One row per (rank, variant): what the rank holds, its peak (GiB) and where in the step it
        happens."""
        frame = self.estimate.peak_frame("gib")
        names = self.estimate.stage_names
        frame["holds"] = [
            " | ".join(names[int(s)] for s in str(st).split(",")) for st in frame["stages"]
        ]
        frame["variant"] = frame["variant"].map(VARIANT_TITLES)
        keep = [
            "rank",
            "holds",
            "variant",
            "peak_gib",
            "activations_gib",
            "recv_buffers_gib",
            "where",
        ]
        return frame[keep]

    def receive_check(self) -> pd.DataFrame:
        """The replayed receive buffers beside the analytic model, per rank and variant (MiB)."""
        frame = self.estimate.receive_frame()
        out = frame.assign(
            variant=frame["variant"].map(VARIANT_TITLES),
            replayed_mib=frame.replayed_bytes / 2**20,
            modelled_mib=frame.modelled_bytes / 2**20,
        )
        return out[["rank", "variant", "replayed_mib", "modelled_mib", "difference_bytes"]]

    def matches(self, name: str, shape: Any, boundaries: Sequence[Any]) -> bool:
        """Whether the explorer's ``name`` at ``shape`` with ``boundaries`` is what was replayed.

        Same source name, pipeline and microbatches, and every boundary carrying tensors of the
        same shapes and dtypes as the replayed stages' inputs.
        """
        est = self.estimate
        if name != self.named.name or (shape.pp, shape.n_microbatches, shape.schedule_name) != (
            est.shape.pp,
            est.shape.n_microbatches,
            est.shape.schedule_name,
        ):
            return False
        mine = [tuple((t.shape, t.dtype) for t in b.activations) for b in boundaries]
        theirs = [tuple((t.shape, t.dtype) for t in b.activations) for b in est.receive.boundaries]
        return mine == theirs


def _named(preset: str | EstimatePreset) -> EstimatePreset:
    """A named estimate: a model of the explorer's, or Kimi-K3's widths (its study's)."""
    if isinstance(preset, EstimatePreset):
        return preset
    return estimate_preset(preset, named_estimates())


def whole_stage_estimate(
    preset: str | EstimatePreset = "llama3-70b-pp8",
    *,
    ranks: Sequence[int] | None = None,
    quick: bool = False,
    device: Any = "gb200",
    jobs: int = 2,
    variants: Sequence[str] = REPLAY_VARIANTS,
    microbatches: int | None = None,
    seq_len: int | None = None,
) -> WholeStage:
    """Replay ``ranks`` (default: all) of the named ``preset`` under ``variants`` and judge them on
    ``device``.

    ``quick``: the suite's smaller step ([Note: the quick whole stage]); ``microbatches`` /
    ``seq_len`` override the preset's (after ``quick``). ``jobs`` replays that many (rank, variant)
    pairs at once in fresh processes (1: in this one).
    """
    named = _named(preset)
    device = get_device(device)  # a bad name is said before minutes of replay, not after
    fix = "give how many replays run at once, e.g. 2 (1: this one)."
    check_int("jobs", jobs, low=1, fix=fix, error=MemoryModelError)
    m, seq = named.microbatches, named.seq_len
    if quick:
        m, seq = min(m, max(named.pp, QUICK_MIN_MICROBATCHES)), min(seq, QUICK_MAX_SEQ)
    m = m if microbatches is None else microbatches  # 0 is a value to refuse, not "unset"
    seq = seq if seq_len is None else seq_len
    replayed = dataclasses.replace(named, microbatches=m, seq_len=seq)
    inputs = replayed.inputs()
    if ranks is not None:
        bad = [r for r in ranks if not (isinstance(r, int) and 0 <= r < inputs.shape.pp)]
        if bad:
            raise MemoryModelError(
                "ranks",
                found=repr(bad),
                required=f"ranks in 0..{inputs.shape.pp - 1}",
                fix=f"pick ranks of the {inputs.shape.pp}-stage pipeline, e.g. (0, "
                f"{inputs.shape.pp // 2 - 1}, {inputs.shape.pp - 1}).",
            )
    tasks = (len(ranks) if ranks is not None else inputs.shape.pp) * len(variants)
    est = estimate_memory(
        inputs.builder,
        inputs.shape,
        config=inputs.config,
        variants=variants,
        ranks=ranks,
        model=inputs.description,
        jobs=max(1, min(jobs, tasks)),
    )
    return WholeStage(
        preset=replayed, named=named, quick=quick, estimate=est, verdict=of_estimate(est, device)
    )


def receive_source(preset: str | EstimatePreset) -> Preset:
    """The receive-buffer view of an estimate preset (what the explorer models): its config.json
    read by :func:`pooltk.memory.configs.load_config` at the preset's pipeline, no published
    figure."""
    from pooltk.memory.configs import Overrides, load_config

    p = _named(preset)
    q = load_config(
        dict(p.config),
        Overrides(pp=p.pp, microbatches=p.microbatches, micro_batch=p.rows, seq_len=p.seq_len),
    )
    return dataclasses.replace(
        q,
        name=p.name,
        title=f"{p.name}: {q.title.split(': ', 1)[-1]}",
        sources=(p.source, *q.sources[1:]),
    )


# --------------------------------------------------------------------------- figures


def _drawn_categories(frame: Any) -> list[str]:
    totals = frame.groupby("category")["bytes"].sum()
    return [c for c in CATEGORIES if totals.get(c, 0) > 0]


def _rank_title(est: MemoryEstimate, rank: int) -> str:
    stages = next(r.stages for r in est.replays if r.rank == rank)
    return f"rank {rank}: " + " | ".join(est.stage_names[s] for s in stages)


def stacked_figure(whole: WholeStage) -> Figure:
    """Per rank, one bar per variant, stacked by what holds the memory at the rank's peak (GiB, from
    zero).

    Lines: the device's capacity and the capacity less the stated overhead (their sources in the
    legend; a bar above the lower line does not fit). Each bar's top carries its peak.
    """
    import numpy as np

    est, verdict = whole.estimate, whole.verdict
    frame = est.stacked_frame("gib")
    shown = list(est.ranks)
    cats = _drawn_categories(frame)
    variants = list(est.variants)
    fig, axes = canvas.subplots(
        1, len(shown), figsize=(style.FIGURE_WIDTH_IN, 5.2), sharey=True, squeeze=False
    )
    top = (
        max(float(frame.groupby(["rank", "variant"])["gib"].sum().max()), verdict.device.gib) * 1.1
    )
    lines: list[Any] = []
    for ax, rank in zip(axes[0], shown):
        part = frame[frame["rank"] == rank]
        x = np.arange(len(variants))
        bottom = np.zeros(len(variants))
        last = None
        for cat in cats:
            values = np.array(
                [
                    float(part[(part.variant == v) & (part.category == cat)]["gib"].sum())
                    for v in variants
                ]
            )
            last = ax.bar(
                x, values, 0.7, bottom=bottom, color=style.colour(cat), label=style.label(cat)
            )
            bottom = bottom + values
        if last is not None:
            style.bar_value_labels(ax, last, labels=[f"{b:.1f}" for b in bottom])
        lines = capacity_lines(ax, verdict)
        ax.set_xticks(x, [VARIANT_TICKS.get(v, v) for v in variants], fontsize=7.5)
        ax.set_xlabel("variant (one replay each)", fontsize=9)
        ax.set_title(_rank_title(est, rank), fontsize=8.5)
        ax.set_ylim(0, top)
    axes[0][0].set_ylabel("tensor memory at the rank's peak (GiB)")
    fig.suptitle(f"{whole.named.name}: what each rank holds at its peak\n{whole.scale}", fontsize=9)
    handles = [*style.legend_handles(cats), *lines]
    style.legend_below(fig, handles, ncol=2, fontsize="x-small")
    return fig


def _timeline_rank(
    est: MemoryEstimate, rank: int | None, variants: Sequence[str]
) -> tuple[int, list[str]]:
    """The rank to draw (default: the worst stock peak) and the variants of ``variants``
    replayed."""
    if rank is None:
        rank = est.worst("stock" if "stock" in est.variants else est.variants[0]).rank
    drawn = [v for v in variants if v in est.variants]
    if not drawn or rank not in est.ranks:
        raise MemoryModelError(
            "timeline",
            found=f"rank {rank!r}, variants {list(variants)!r}",
            required=f"a replayed rank ({est.ranks}) and some of {', '.join(est.variants)}",
            fix="draw a rank and variants the estimate replayed.",
        )
    return rank, drawn


def _wide_of(frame: Any, variant: str) -> Any:
    """One variant's timeline: one row per point of the step, one column per category (GiB)."""
    import numpy as np

    part = frame[frame.variant == variant]
    # one row per category per timeline point, in the step's order (two points may share a storage
    # position)
    part = part.assign(point=np.arange(len(part)) // len(CATEGORIES))
    return part.pivot(index="point", columns="category", values="gib")


def _draw_stack_panel(
    ax: Any, whole: WholeStage, wide: Any, cats: list[str], rank: int, variant: str
) -> list[Any]:
    """One variant's bytes live after every action, stacked by category, with its peak in the
    title; returns the capacity lines' legend entries."""
    import numpy as np

    verdict = whole.verdict
    x = np.arange(len(wide))
    ax.stackplot(
        x,
        *[wide[c].to_numpy() if c in wide else np.zeros(len(wide)) for c in cats],
        colors=[style.colour(c) for c in cats],
        labels=[style.label(c) for c in cats],
        alpha=0.9,
    )
    lines = capacity_lines(ax, verdict)
    rep = whole.estimate.replay(rank, variant)
    ax.set_title(
        f"{VARIANT_TITLES[variant]}: peak {rep.peak.bytes / GIB:.1f} GiB\n"
        f"({rep.peak.phase} of microbatch {rep.peak.microbatch})",
        fontsize=8.5,
    )
    ax.set_xlabel("action of the step (index)", fontsize=8.5)
    ax.set_xlim(0, max(1, len(wide) - 1))
    ax.set_ylim(0, verdict.device.gib * 1.1)
    return lines


def _draw_receive_panel(ax: Any, est: MemoryEstimate, frame: Any) -> list[Any]:
    """Every replayed variant's receive buffers (MiB) on one axis; returns their legend entries."""
    import numpy as np
    from matplotlib.lines import Line2D

    handles, top = [], 0.0
    for variant in est.variants:
        wide = _wide_of(frame, variant)
        recv = (
            wide["recv_buffers"].to_numpy() * 1024
            if "recv_buffers" in wide
            else np.zeros(len(wide))
        )
        top = max(top, float(recv.max()))
        colour = style.colour(VARIANT_SERIES[variant])
        ax.plot(np.arange(len(wide)), recv, color=colour, marker="o", ms=3, drawstyle="steps-post")
        handles.append(
            Line2D(
                [],
                [],
                color=colour,
                marker="o",
                ms=3,
                label=f"receive buffers, {VARIANT_TITLES[variant]}",
            )
        )
    ax.set_ylim(0, max(top, 1.0) * 1.2)
    ax.set_xlim(0, max(1, len(wide) - 1))  # the last variant's step
    ax.set_xlabel(
        "action of the step (index: forwards, backwards, then the optimizer step)", fontsize=8.5
    )
    ax.set_ylabel("receive buffers (MiB)", fontsize=9)
    ax.set_title("the receive buffers alone, after each action", fontsize=8.5)
    return handles


def timeline_figure(
    whole: WholeStage, *, rank: int | None = None, variants: Sequence[str] = ("stock", "pooled")
) -> Figure:
    """One rank through the measured step: bytes live after every action, stacked by category, one
    panel per variant of ``variants``; below, the receive buffers alone (MiB), every replayed
    variant on one axis.

    ``rank`` defaults to the rank with the highest stock peak (the one that decides). Each panel's
    title carries its peak (inside an action, so above the curve's highest point) and where it
    happens.
    """
    est = whole.estimate
    rank, drawn = _timeline_rank(est, rank, variants)
    frame = est.timeline_frame("gib")
    frame = frame[frame["rank"] == rank]
    cats = _drawn_categories(est.stacked_frame("gib").query("rank == @rank"))
    fig = canvas.figure(figsize=(style.FIGURE_WIDTH_IN, 6.6))
    grid = fig.add_gridspec(2, len(drawn), height_ratios=(1.6, 1.0))
    tops = [fig.add_subplot(grid[0, k]) for k in range(len(drawn))]
    for ax in tops[1:]:
        ax.sharey(tops[0])
        ax.tick_params(labelleft=False)
    recv_ax = fig.add_subplot(grid[1, :])
    lines: list[Any] = []
    for ax, variant in zip(tops, drawn):
        lines = _draw_stack_panel(ax, whole, _wide_of(frame, variant), cats, rank, variant)
    recv_handles = _draw_receive_panel(recv_ax, est, frame)
    tops[0].set_ylabel("tensors live (GiB)", fontsize=9)
    for ax in (*tops, recv_ax):
        ax.xaxis.get_major_locator().set_params(integer=True)
    fig.suptitle(
        f"{whole.named.name}, {_rank_title(est, rank)}, through one step\n{whole.scale}", fontsize=9
    )
    handles = [*style.legend_handles(cats), *lines, *recv_handles]
    style.legend_below(fig, handles, ncol=2, fontsize="x-small")
    return fig
