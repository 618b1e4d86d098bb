"""Does it fit, drawn: every fits view of notebooks 01 and 03 draws one verdict of the fits module.

[Note: one verdict rule in the notebooks]
The notebooks judge nothing themselves: every "fits" they print or draw is a verdict of
:mod:`pooltk.memory.fits` ([Note: one verdict]), the whole-stage replay's or the anchored
receive-buffer model's, with the stated overhead (:data:`pooltk.memory.fits.DEFAULT_OVERHEAD`)
on one capacity (GB200: :data:`pooltk.memory.fits.GB200`), so the explorer, the Kimi-K3 story and
the whole-stage section agree. Figures draw tensor peaks from zero against two labelled lines,
the capacity and the capacity less the overhead: a bar above the lower line is an OOM.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from pooltk.memory.fits import DEFAULT_OVERHEAD, FIT_VARIANTS, GIB, Verdict
from pooltk.nb import canvas, style

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

    from pooltk.studies.kimi_k3 import K3Story

__all__ = ["capacity_lines", "fits_bars", "grouped_bars", "k3_story_figure", "short_source"]


def short_source(source: str) -> str:
    """The first clause of a source, for a line label (the full text stays in the tables)."""
    pr = re.search(r"([A-Za-z][\w-]*(?:/[\w-]+)?) PR #(\d+)", source)
    if pr:
        return f"{pr.group(1).split('/')[-1]} PR #{pr.group(2)}"
    if "out-of-memory message" in source:
        return "torch's OOM message"
    head = source.split(":", 1)[0].split(";", 1)[0].split(" (", 1)[0].strip()
    return head if len(head) <= 48 else head[:45] + "..."


def capacity_lines(ax: Any, verdict: Verdict) -> list[Any]:
    """The capacity (dashed) and the capacity less the stated overhead (dotted), labelled with
    their sources. Returns the two lines (legend handles)."""
    dev, over = verdict.device, verdict.overhead
    total = 0 if over is None else over.total_bytes
    said = "none" if over is None else short_source(over.source)
    said = "CUDA context, NCCL: stated" if over is DEFAULT_OVERHEAD else said
    cap = ax.axhline(
        dev.gib,
        color=style.colour("capacity"),
        ls="--",
        lw=1.2,
        zorder=4,
        label=f"{dev.name} capacity {dev.gib:.2f} GiB ({short_source(dev.source)})",
    )
    usable = dev.gib - total / GIB
    low = ax.axhline(
        usable,
        color=style.colour("capacity_less_overhead"),
        ls=":",
        lw=1.4,
        zorder=4,
        label=f"less the overhead {total / GIB:.2f} GiB: {usable:.2f} GiB ({said})",
    )
    return [cap, low]


def _peak_line(ax: Any, ref: Any, label: str) -> Any:
    """The reference peak a verdict is anchored to, dash-dotted, labelled ``label``."""
    color = style.colour("measured_peak")
    return ax.axhline(ref.peak_bytes / GIB, color=color, ls="-.", lw=1.1, zorder=4, label=label)


def grouped_bars(
    ax: Any, frame: Any, value: str, variants: Sequence[str], *, at: str = "stage"
) -> None:
    """One bar group per ``at`` (stage or rank), one bar per variant in its series colour."""
    import numpy as np

    groups = sorted(frame[at].unique())
    x = np.arange(len(groups))
    width = 0.84 / len(variants)
    for k, variant in enumerate(variants):
        part = frame[frame.variant == variant].set_index(at).reindex(groups)
        ax.bar(
            x + (k - (len(variants) - 1) / 2) * width,
            part[value].fillna(0).to_numpy(),
            width,
            color=style.colour(variant),
            label=style.label(variant),
        )
    ax.set_xticks(x, [str(g) for g in groups])


def fits_bars(verdict: Verdict, *, oom: Any = None) -> Figure:
    """An anchored verdict's tensor peak per stage and variant, from zero, against the capacity,
    the capacity less the overhead and the reference peak it is anchored to (each labelled with
    its source); with ``oom`` (the source's own OOM margin) a note where stock stopped."""
    frame = verdict.to_frame()
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 5.0))
    drawn = [v for v in FIT_VARIANTS if v in set(frame.variant)]
    grouped_bars(ax, frame, "tensor_gib", drawn, at="rank")
    dev, ref = verdict.device, verdict.reference
    ax.set_ylim(0, max(frame.tensor_gib.max(), dev.gib) * 1.12)
    lines = capacity_lines(ax, verdict)
    anchor = _peak_line(
        ax,
        ref,
        f"anchor: {ref.variant} peak {ref.peak_bytes / GIB:.1f} GiB on stage "
        f"{verdict.reference_stage} ({short_source(ref.source)})",
    )
    if oom is not None:
        text = (
            f"{short_source(oom.source)} measured: the stock run went out of memory in step 1 "
            f"('by only {oom.value:g} MiB')"
        )
        place = {"xycoords": "axes fraction", "ha": "left", "va": "top"}
        ax.annotate(text, xy=(0.01, 0.985), fontsize="x-small", color="#C44E52", **place)
    ax.set_ylabel("tensor peak per stage, anchored (GiB)")
    ax.set_xlabel(f"stage (index; pp={frame['rank'].nunique()})")
    ax.set_title(
        f"does each stage fit on {dev.name}? Receive buffers modelled,\nthe rest from the "
        "anchor (assumed the same on every stage)",
        fontsize=9.5,
    )
    handles = [*style.legend_handles(drawn), *lines, anchor]
    style.legend_below(fig, handles, ncol=2, fontsize="x-small")
    return fig


def k3_story_figure(story: K3Story) -> Figure:
    """The Kimi-K3 story's two anchored verdicts (:func:`pooltk.studies.kimi_k3.k3_story`), stock
    and pooled per stage, one panel per reading of the anchor; each panel's title its verdict."""
    fig, axes = canvas.subplots(1, 2, figsize=(style.FIGURE_WIDTH_IN, 4.8), sharey=True)
    lines: list[Any] = []
    for ax, (label, verdict) in zip(axes, story.anchored):
        grouped_bars(ax, verdict.to_frame(), "tensor_gib", ("stock", "automodel"), at="rank")
        lines = capacity_lines(ax, verdict)
        ref = verdict.reference
        measured = _peak_line(
            ax,
            ref,
            f"measured pooled peak {ref.peak_bytes / GIB:g} GiB ({short_source(ref.source)})",
        )
        worst = verdict.worst("stock")
        ax.set_title(f"anchored on {label}:\nstock stage {worst.rank} {worst.text}", fontsize=9)
        ax.set_xlabel("stage (index)")
        ax.set_ylim(0, story.device.gib * 1.12)
    axes[0].set_ylabel("tensor peak per stage, modelled (GiB)")
    fig.suptitle(
        f"Kimi-K3 2k on {story.device.name}: the PR measured stock out of memory in step 1 "
        f"({short_source(story.rows[1].source)}); the model, with the stated overhead",
        fontsize=9.5,
    )
    handles = [*style.legend_handles(("stock", "automodel")), *lines, measured]
    style.legend_below(fig, handles, ncol=2, fontsize="x-small")
    return fig
