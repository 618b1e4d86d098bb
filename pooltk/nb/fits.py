"""Does it fit: the fits views notebooks 01 and 03 draw, every one on the same rule and the same capacity.

[Note: one verdict rule in the notebooks]
Every "fits" a notebook prints is ``tensor peak + stated overhead <= capacity``, the rule of
:mod:`pooltk.memory.verdict` ([Note: an honest verdict]):

- the *tensor peak* is either the whole-stage replay's (:func:`pooltk.memory.verdict.fits_verdict`)
  or the receive-buffer model anchored on a reference peak (:func:`pooltk.memory.fits.fit_report`,
  [Note: the fits model]: everything but receive buffers taken from the reference, assumed the
  same on every stage);
- the *overhead* is :data:`pooltk.memory.verdict.DEFAULT_OVERHEAD` (CUDA context, NCCL; stated with
  its source) in both cases, so the explorer, the Kimi-K3 story and the whole-stage section agree;
- the *capacity* is one :class:`~pooltk.memory.fits.Device` (GB200: :data:`pooltk.memory.fits.GB200`).

A reference peak counts only where it belongs: the source's own published figure at its own
shape, or a peak the user gave (a number, a run log). A resized preset carries none
([Note: no calibration carried]). Figures draw tensor peaks from zero against two labelled lines,
the capacity and the capacity less the overhead: a bar above the lower line is an OOM.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pooltk.memory.fits import FitReport, ReferencePeak, fit_report, published_peak
from pooltk.memory.model import Boundary, PipelineShape
from pooltk.config import PoolConfig
from pooltk.memory.verdict import DEFAULT_OVERHEAD, FitsVerdict, Overhead, RankVerdict
from pooltk.nb import canvas, style

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from pooltk.memory.k3_story import K3Story
    from pooltk.memory.source import Preset

__all__ = [
    "ANCHORED_NOT_MODELLED",
    "FIT_VARIANTS",
    "anchored_verdict",
    "capacity_lines",
    "device_choices",
    "fits_bars",
    "grouped_bars",
    "k3_story_figure",
    "pr_figures",
    "short_source",
]

GIB = 2**30

FIT_VARIANTS: tuple[str, ...] = (
    "stock",
    "stock_lazy",
    "lazy_released",
    "automodel",
    "tight",
    "live_set",
)
"""The receive-model variants a fits view draws, in drawing order (keys of :data:`pooltk.nb.style.SERIES`)."""

ANCHORED_NOT_MODELLED: tuple[str, ...] = (
    "everything but receive buffers: taken from the reference peak and assumed the same on every stage "
    "(1F1B keeps min(M, N - i) microbatches of activations on stage i, and the first and last stages hold the "
    "embedding and head: the whole-stage replay models that)",
)
"""What a fits view anchored on a reference peak leaves out ([Note: the fits model])."""


def anchored_verdict(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig,
    device: Any,
    reference: ReferencePeak,
    *,
    overhead: Overhead = DEFAULT_OVERHEAD,
    **kwargs: Any,
) -> tuple[FitReport, FitsVerdict]:
    """The receive-buffer model anchored on ``reference``, and its verdict with ``overhead`` on ``device``.

    The verdict's rows are per stage (a rank under single-stage schedules) and variant of
    :data:`FIT_VARIANTS`; ``estimate_bytes`` is the anchored tensor peak. ``kwargs`` go to
    :func:`pooltk.memory.fits.fit_report`. See [Note: one verdict rule in the notebooks].
    """
    report = fit_report(
        shape,
        boundaries if isinstance(boundaries, Boundary) else list(boundaries),
        config,
        device,
        reference,
        **kwargs,
    )
    rows = tuple(
        RankVerdict(
            rank=r.stage,
            variant=r.variant,
            estimate_bytes=r.peak_bytes,
            overhead_bytes=overhead.total_bytes,
            capacity_bytes=r.capacity_bytes,
        )
        for r in report.rows
        if r.variant in FIT_VARIANTS
    )
    return report, FitsVerdict(
        device=report.device, overhead=overhead, rows=rows, not_modelled=ANCHORED_NOT_MODELLED
    )


def pr_figures(preset: Preset | None) -> dict[str, Any]:
    """The preset's own published measured peak and OOM margin, by name (``peak`` GiB, ``oom`` MiB).

    Each a :class:`pooltk.memory.source.Figure` with its source; a preset without them (a resized
    one, a config file) gives an empty dict.
    """
    if preset is None:
        return {}
    found = {"peak": published_peak(preset)}
    try:
        found["oom"] = preset.figure("oom_margin_mib")
    except KeyError:
        pass
    return {k: v for k, v in found.items() if v is not None}


def short_source(source: str) -> str:
    """The first clause of a source, for a line label (the full text stays in the tables)."""
    import re

    pr = re.search(r"([A-Za-z][\w-]*(?:/[\w-]+)?) PR #(\d+)", source)
    if pr:
        return f"{pr.group(1).split('/')[-1]} PR #{pr.group(2)}"
    if "out-of-memory message" in source:
        return "torch's OOM message"
    head = source.split(":", 1)[0].split(";", 1)[0].split(" (", 1)[0].strip()
    return head if len(head) <= 48 else head[:45] + "..."


def capacity_lines(ax: Any, verdict: FitsVerdict) -> list[Any]:
    """The capacity (dashed) and the capacity less the stated overhead (dotted), labelled with their sources.

    Returns the two lines (legend handles).
    """
    dev, over = verdict.device, verdict.overhead
    cap = ax.axhline(
        dev.gib,
        color=style.colour("capacity"),
        ls="--",
        lw=1.2,
        zorder=4,
        label=f"{dev.name} capacity {dev.gib:.2f} GiB ({short_source(dev.source)})",
    )
    usable = dev.gib - over.total_bytes / GIB
    low = ax.axhline(
        usable,
        color=style.colour("capacity_less_overhead"),
        ls=":",
        lw=1.4,
        zorder=4,
        label=f"less the overhead {over.total_bytes / GIB:.2f} GiB: {usable:.2f} GiB ({_overhead_source(over)})",
    )
    return [cap, low]


def _overhead_source(over: Overhead) -> str:
    """``CUDA context, NCCL: stated`` for the default; the calibration's own words otherwise (shortened)."""
    if over is DEFAULT_OVERHEAD:
        return "CUDA context, NCCL: stated"
    return short_source(over.source)


def grouped_bars(ax: Any, frame: Any, value: str, variants: Sequence[str]) -> None:
    """One bar group per stage, one bar per variant in its series colour (labelled for the legend)."""
    import numpy as np

    stages = sorted(frame["stage"].unique())
    x = np.arange(len(stages))
    width = 0.84 / len(variants)
    for k, variant in enumerate(variants):
        part = frame[frame.variant == variant].set_index("stage").reindex(stages)
        ax.bar(
            x + (k - (len(variants) - 1) / 2) * width,
            part[value].fillna(0).to_numpy(),
            width,
            color=style.colour(variant),
            label=style.label(variant),
        )
    ax.set_xticks(x, [str(s) for s in stages])


def fits_bars(
    report: FitReport,
    verdict: FitsVerdict,
    *,
    published: dict[str, Any] | None = None,
    variants: Sequence[str] = FIT_VARIANTS,
    ax: Any = None,
    title: str | None = None,
) -> Figure:
    """Per-stage anchored tensor peak of each variant from zero, against the capacity and the capacity less the overhead.

    Lines, each labelled with its source: the capacity, the capacity less the stated overhead, the
    reference peak the model is anchored to; with ``published["oom"]`` (the source's own published
    OOM) a note where the stock run stopped. See [Note: one verdict rule in the notebooks].
    """
    frame = report.to_frame()
    own = ax is None
    if own:
        fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 5.0))
    else:
        fig = ax.figure
    drawn = [v for v in variants if v in set(frame.variant)]
    grouped_bars(ax, frame, "peak_gib", drawn)
    dev, ref = report.device, report.reference
    ax.set_ylim(0, max(frame.peak_gib.max(), dev.gib) * 1.12)
    lines = capacity_lines(ax, verdict)
    ref_gib = ref.peak_bytes / GIB
    anchor = ax.axhline(
        ref_gib,
        color=style.colour("measured_peak"),
        ls="-.",
        lw=1.1,
        zorder=4,
        label=f"anchor: {ref.variant} peak {ref_gib:.1f} GiB on stage {report.reference_stage} "
        f"({short_source(ref.source)})",
    )
    oom = (published or {}).get("oom")
    if oom is not None:
        ax.annotate(
            f"{short_source(oom.source)} measured: the stock run went out of memory in step 1 "
            f"('by only {oom.value:g} MiB')",
            xy=(0.01, 0.985),
            xycoords="axes fraction",
            fontsize="x-small",
            color="#C44E52",
            ha="left",
            va="top",
        )
    ax.set_ylabel("tensor peak per stage, anchored (GiB)")
    ax.set_xlabel(f"stage (index; pp={frame.stage.nunique()})")
    ax.set_title(
        title
        or f"does each stage fit on {dev.name}? Receive buffers modelled,\nthe rest from the anchor "
        "(assumed the same on every stage)",
        fontsize=9.5,
    )
    if own:
        handles = [*style.legend_handles(drawn), *lines, anchor]
        style.legend_below(fig, handles, ncol=2, fontsize="x-small")
    return fig


def k3_story_figure(story: K3Story, receive: Any = None) -> Figure:
    """The Kimi-K3 story's modelled stock and pooled peaks per stage on its one capacity, one panel per anchor.

    The same arithmetic as :func:`pooltk.memory.k3_story.k3_story` (anchored on the PR's measured
    139.6 GiB pooled peak, either on the fullest pooled stage or on stage 0; receive buffers from
    ``receive``, default :func:`pooltk.memory.k3_story.k3_receive_model`), drawn with the capacity, the
    capacity less the stated overhead and the measured peak; each panel's title carries its verdict.
    """
    from pooltk.memory.k3_story import K3_PUBLISHED, k3_receive_model

    receive = receive or k3_receive_model()
    peak_gib, peak_source = K3_PUBLISHED["pooled_peak_gib"]
    oom_source = K3_PUBLISHED["stock_oom_mib"][1]
    fig, axes = canvas.subplots(1, 2, figsize=(style.FIGURE_WIDTH_IN, 4.8), sharey=True)
    lines: list[Any] = []
    for ax, (label, stage) in zip(
        axes, (("the fullest pooled stage", None), ("stage 0 (the rank that logs)", 0))
    ):
        ref = ReferencePeak.from_gib(
            peak_gib,
            variant="pooled",
            config=receive.config,
            policy=receive.policy,
            sharing=receive.sharing,
            stage=stage,
            source=peak_source,
        )
        report, verdict = anchored_verdict(
            receive.shape,
            list(receive.boundaries),
            receive.config,
            story.device,
            ref,
            overhead=story.overhead,
            policy=receive.policy,
            sharing=receive.sharing,
        )
        frame = report.to_frame()
        grouped_bars(ax, frame, "peak_gib", ("stock", "automodel"))
        lines = capacity_lines(ax, verdict)
        measured = ax.axhline(
            peak_gib,
            color=style.colour("measured_peak"),
            ls="-.",
            lw=1.1,
            zorder=4,
            label=f"measured pooled peak {peak_gib:g} GiB ({short_source(peak_source)})",
        )
        worst = verdict.worst("stock")
        ax.set_title(f"anchored on {label}:\nstock stage {worst.rank} {worst.text}", fontsize=9)
        ax.set_xlabel("stage (index)")
        ax.set_ylim(0, story.device.gib * 1.12)
    axes[0].set_ylabel("tensor peak per stage, modelled (GiB)")
    fig.suptitle(
        f"Kimi-K3 2k on {story.device.name}: the PR measured stock out of memory in step 1 "
        f"({short_source(oom_source)}); the model, with the stated overhead",
        fontsize=9.5,
    )
    handles = [*style.legend_handles(("stock", "automodel")), *lines, measured]
    style.legend_below(fig, handles, ncol=2, fontsize="x-small")
    return fig


def device_choices() -> list[str]:
    """The explorer's device options: ``none`` and one name per capacity (no alias of the same capacity)."""
    from pooltk.memory.fits import DEVICES

    seen: set[int] = set()
    out = ["none"]
    for name, dev in DEVICES.items():
        if dev.capacity_bytes not in seen:
            seen.add(dev.capacity_bytes)
            out.append(name)
    return out
