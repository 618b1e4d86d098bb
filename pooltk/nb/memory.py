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

from pooltk.analysis.rings import RingRule
from pooltk.memory.model import (
    Boundary,
    MemoryModel,
    MemoryModelError,
    PipelineShape,
    middle_stage,
    model_memory,
    slack_sweep,
)
from pooltk.memory.configs import Overrides, load_config
from pooltk.memory.fits import DEVICES, FitReport, ReferencePeak, fit_report, published_peak
from pooltk.memory.model import TensorSpec
from pooltk.memory.source import Preset
from pooltk.nb import style
from pooltk.studies.kimi_k3.presets import PRESETS, get_preset

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = [
    "VARIANTS",
    "VARIANT_LABELS",
    "ExplorerState",
    "FigureOfMerit",
    "HIDDEN_SIZED",
    "explore",
    "explorer_controls",
    "fits_bars",
    "measured_vs_modelled_figure",
    "pr_figures",
    "resize_boundary",
    "render_explorer",
    "slack_heatmap",
    "stage_bars",
]

VARIANTS: tuple[str, ...] = ("stock", "stock_lazy", "lazy_released", "automodel", "tight", "live_set")
"""The variants the per-stage bars and the fits view draw, in drawing order (keys of :data:`pooltk.nb.style.SERIES`)."""
VARIANT_LABELS: dict[str, str] = {key: style.label(key) for key in VARIANTS}
"""Legend label of each variant (from the one series map)."""


# --------------------------------------------------------------------------- figures


def _grouped_bars(ax: Any, frame: Any, value: str, variants: Sequence[str]) -> None:
    """One bar group per stage, one bar per variant in its series colour (labelled for the legend)."""
    import numpy as np

    stages = sorted(frame["stage"].unique())
    x = np.arange(len(stages))
    width = 0.84 / len(variants)
    for k, variant in enumerate(variants):
        part = frame[frame.variant == variant].set_index("stage").reindex(stages)
        ax.bar(x + (k - (len(variants) - 1) / 2) * width, part[value].fillna(0).to_numpy(), width,
               color=style.colour(variant), label=style.label(variant))
    ax.set_xticks(x, [str(s) for s in stages])


def stage_bars(model: MemoryModel, *, ax: Any = None, title: str | None = None) -> Figure:
    """Per-stage receive-buffer GiB (both directions) of each variant of :data:`VARIANTS`, from zero."""
    import matplotlib.pyplot as plt

    frame = model.to_frame()
    frame = frame[frame.variant.isin(VARIANTS)]
    per_stage = frame.groupby(["stage", "variant"], as_index=False, sort=False)["gib"].sum()
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(style.FIGURE_WIDTH_IN, 4.6))
    else:
        fig = ax.figure
    _grouped_bars(ax, per_stage, "gib", VARIANTS)
    cfg, shape = model.config, model.shape
    ax.set_ylim(0, per_stage["gib"].max() * 1.08)
    ax.set_ylabel("receive buffers per stage (GiB)")
    ax.set_xlabel(f"stage (index; pp={shape.pp}, M={shape.n_microbatches}, {shape.schedule})")
    ax.set_title(title or f"receive buffers per stage, both directions: slack {cfg.slack} (Automodel's ring and "
                 f"pooltk's), grad slack {cfg.grad_slack} (pooltk)", fontsize=10)
    if own:
        handles, _ = ax.get_legend_handles_labels()
        style.legend_below(fig, handles, ncol=3)
    return fig


def slack_heatmap(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: RingRule,
    *,
    slacks: Iterable[int] = range(0, 9),
    ax: Any = None,
) -> Figure:
    """Stage x slack heatmap of pooled GiB per stage under ``config``'s ring size."""
    import matplotlib.pyplot as plt
    import seaborn as sns

    sweep = slack_sweep(shape, boundaries, list(slacks), config)
    grid = sweep.pivot(index="stage", columns="slack", values="pooled_gib")
    if ax is None:
        fig, ax = plt.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.42 * shape.pp + 2.2))
    else:
        fig = ax.figure
    sns.heatmap(grid, annot=True, fmt=".1f", cmap="viridis", cbar_kws={"label": "pooled receive buffers (GiB)"},
                ax=ax)
    ring = "Automodel's ring size" if config.policy == "automodel" else f"pooltk tight, grad slack {config.grad_slack}"
    stock = sweep[sweep.stage == middle_stage(shape.pp)].stock_gib.iloc[0]
    ax.set_title(f"pooled receive buffers per stage as the slack grows ({ring}); stock: {stock:.1f} GiB on the middle "
                 "stage", fontsize=10)
    ax.set_xlabel("forward slack (buffer sets beyond the live set)")
    ax.set_ylabel("stage (index)")
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
    source: Preset | None = None
    """The preset or config file the last update started from."""
    fits: FitReport | None = None
    """The fits view of the last update, when a device was chosen and a reference peak is known."""
    fits_note: str | None = None
    """Why there is no fits view (no device chosen, no reference peak), else ``None``."""


HIDDEN_SIZED: frozenset[str] = frozenset({"hidden_states", "attn_res_states"})
"""Tensor names whose width is the model's hidden size (the widths preset stacks ``attn_res_states``)."""


def resize_boundary(boundary: Boundary, *, rows: int | None = None, seq_len: int | None = None,
                    hidden: int | None = None, dtype: str | None = None) -> Boundary:
    """``boundary`` with its ``(rows, seq_len, width)`` tensors resized.

    ``rows`` and ``seq_len`` apply to every tensor of 3 or more dimensions, whose last three are
    ``(rows, seq_len, width)`` (a leading dimension stacks states, e.g. Kimi-K3's
    ``attn_res_states``); ``hidden`` replaces the width of the hidden-sized tensors
    (:data:`HIDDEN_SIZED`) only (a calibrated remainder keeps its bytes per token); ``dtype``
    applies to every tensor. ``None`` keeps a value.
    """
    def one(t: TensorSpec) -> TensorSpec:
        shape = list(t.shape)
        if len(shape) >= 3:
            shape[-3] = rows or shape[-3]
            shape[-2] = seq_len or shape[-2]
            if t.name in HIDDEN_SIZED and hidden:
                shape[-1] = hidden
        return TensorSpec(shape=tuple(shape), dtype=dtype or t.dtype, name=t.name)

    grads = None if boundary.grads is None else tuple(one(t) for t in boundary.grads)
    return Boundary(activations=tuple(one(t) for t in boundary.activations), grads=grads)


def _source(preset: str, config_path: str | None, overrides: Overrides) -> Preset:
    if config_path:
        return load_config(config_path, overrides)
    return get_preset(preset)


def _fits(state: ExplorerState, source: Preset, model: MemoryModel, device: str | None,
          reference_peak_gib: float | None) -> None:
    state.fits, state.fits_note = None, None
    if not device or device == "none":
        state.fits_note = "no device chosen"
        return
    if reference_peak_gib:
        reference = ReferencePeak.from_gib(reference_peak_gib, config=model.config, source="explorer field")
    else:
        figure = published_peak(source)
        if figure is None:
            state.fits_note = f"no reference peak for {source.name!r}: enter a measured or published peak (GiB)"
            return
        reference = ReferencePeak.from_gib(figure.value, config=source.config, source=figure.source)
    state.fits = fit_report(model.shape, list(model.boundaries), model.config, device, reference)


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
    config_path: str | None = None,
    rows: int | None = None,
    seq_len: int | None = None,
    hidden: int | None = None,
    dtype: str | None = None,
    device: str | None = None,
    reference_peak_gib: float | None = None,
) -> MemoryModel | None:
    """One widget update: model the shape and record it in ``state``.

    The shape starts from ``config_path`` (an Automodel YAML or config.json; the widgets'
    pp / M / rows / seq / hidden / dtype override it) or else from ``preset``, whose boundary
    tensors are resized by ``rows`` / ``seq_len`` / ``hidden`` / ``dtype``
    (:func:`resize_boundary`; every boundary of a preset whose boundaries differ per stage). ``boundary_mib`` (MiB per buffer set) replaces the tensors when
    it differs from the preset's own set size; ``None`` keeps them. ``device`` (a name in
    :data:`pooltk.memory.fits.DEVICES`, or a GiB figure) adds the fits view, anchored to
    ``reference_peak_gib`` or the preset's published peak. Rejected inputs (e.g. M < pp under
    1F1B, an unknown config class) are recorded in ``state.last_error`` and return ``None``.
    """
    state.last_inputs = dict(
        preset=preset, pp=pp, microbatches=microbatches, slack=slack, grad_slack=grad_slack, policy=policy,
        boundary_mib=boundary_mib, config_path=config_path, rows=rows, seq_len=seq_len, hidden=hidden, dtype=dtype,
        device=device, reference_peak_gib=reference_peak_gib,
    )
    try:
        overrides = Overrides(pp=pp, microbatches=microbatches, micro_batch=rows, seq_len=seq_len, hidden=hidden, dtype=dtype)
        p = _source(preset, config_path, overrides)
        shape = dataclasses.replace(p.shape, pp=pp, n_microbatches=microbatches, global_batch=None, micro_batch=None, dp=None)
        if config_path:
            boundary: Boundary | list[Boundary] = p.boundary
        elif p.varies or p.boundary_rule is not None:  # boundaries that differ per stage: each one resized
            boundary = [resize_boundary(b, rows=rows, seq_len=seq_len, hidden=hidden, dtype=dtype) for b in p.boundaries_for(shape)]
        else:
            boundary = resize_boundary(p.boundary, rows=rows, seq_len=seq_len, hidden=hidden, dtype=dtype)
        if boundary_mib is not None and round(boundary_mib * 2**20) != p.boundary.forward_bytes:
            if not boundary_mib > 0:
                raise MemoryModelError("boundary MiB", found=repr(boundary_mib), required="> 0", fix="pick a positive size.")
            boundary = Boundary.opaque(round(boundary_mib * 2**20), name="boundary_from_widget")
        config = RingRule(slack=slack, grad_slack=grad_slack, policy=policy)  # type: ignore[arg-type]
        # The closed forms equal the walked live sets for 1F1B and GPipe (tests/memory prove it
        # over a grid of shapes); using them keeps a pp/M slider move under 50 ms at N=16, M=256,
        # where a cold walk of the schedule takes about a second.
        model = model_memory(shape, boundary, config, live_source="formula")
        state.source = p
        _fits(state, p, model, device, reference_peak_gib)
    except ValueError as exc:  # MemoryModelError and RingRule's ValueError
        state.last_result, state.last_error, state.fits = None, str(exc), None
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


def pr_figures(preset: Preset | None) -> dict[str, Any]:
    """The preset's published measured peak and OOM margin (Automodel PR #3780 for the Kimi-K3 2k presets), by name.

    Keys ``peak`` (GiB) and ``oom`` (MiB), each a :class:`pooltk.memory.source.Figure` with its
    source; a preset without them gives an empty dict.
    """
    if preset is None:
        return {}
    found = {"peak": published_peak(preset)}
    try:
        found["oom"] = preset.figure("oom_margin_mib")
    except KeyError:
        pass
    return {k: v for k, v in found.items() if v is not None}


def fits_bars(report: FitReport, *, published: dict[str, Any] | None = None, ax: Any = None) -> Figure:
    """Per-stage modelled peak of each variant from zero, against the device's capacity and the published figures.

    Reference lines, each labelled with its source: the device's capacity (``report.device``),
    the published measured pooled peak the model is anchored to, and, with ``published["oom"]``,
    where the PR's stock run stopped (capacity + the published OOM margin).
    """
    import matplotlib.pyplot as plt

    frame = report.to_frame()
    own = ax is None
    if own:
        fig, ax = plt.subplots(figsize=(style.FIGURE_WIDTH_IN, 5.0))
    else:
        fig = ax.figure
    variants = [v for v in VARIANTS if v in set(frame.variant)]
    _grouped_bars(ax, frame, "peak_gib", variants)
    dev, ref = report.device, report.reference
    top = max(frame.peak_gib.max(), dev.gib)
    ax.set_ylim(0, top * 1.18)
    style.reference_line(ax, dev.gib, text=f"{dev.name} capacity {dev.gib:.2f} GiB", source=_short_source(dev.source))
    ref_gib = ref.peak_bytes / 2**30
    style.reference_line(ax, ref_gib, colour_="#1B7837", ls=":", where="left",
                         text=f"anchor: measured {ref.variant} peak {ref_gib:.1f} GiB on stage {report.reference_stage}",
                         source=_short_source(ref.source))
    oom = (published or {}).get("oom")
    if oom is not None:
        ax.annotate(f"{_short_source(oom.source)}: the stock run went out of memory in step 1 by {oom.value:g} MiB\n"
                    f"(it needed its device's capacity + {oom.value / 1024:.2f} GiB)", xy=(0.01, dev.gib),
                    xycoords=("axes fraction", "data"), xytext=(0, 14), textcoords="offset points", fontsize="x-small",
                    color="#C44E52", ha="left", va="bottom")
    ax.set_ylabel("modelled peak per stage (GiB)")
    ax.set_xlabel(f"stage (index; pp={frame.stage.nunique()})")
    ax.set_title(f"does each stage fit on {dev.name}? Peaks modelled from the anchor; every stage assumed to hold "
                 "the same memory besides receive buffers", fontsize=9.5)
    if own:
        handles, _ = ax.get_legend_handles_labels()
        style.legend_below(fig, handles, ncol=3)
    return fig


def _short_source(source: str) -> str:
    """The first clause of a source, for a line label (the full text stays in the tables)."""
    import re

    pr = re.search(r"([A-Za-z][\w-]*) PR #(\d+)", source)
    if pr:
        return f"{pr.group(1)} PR #{pr.group(2)}"
    head = source.split(":", 1)[0].split(";", 1)[0].strip()
    return head if len(head) <= 60 else head[:57] + "..."


def measured_vs_modelled_figure(table: Any) -> Figure:
    """Modelled vs measured saving per stage, one panel per shape (the measured bar spans min..max over pairs).

    The measured saving is each rank's peak resident memory (``VmHWM``), stock minus pooled: process
    memory, not a device allocator's figure. Each pair of bars carries the relative difference.
    """
    import matplotlib.pyplot as plt
    import numpy as np

    shapes = list(dict.fromkeys(table["shape"]))
    fig, axes = plt.subplots(1, len(shapes), figsize=(style.FIGURE_WIDTH_IN, 4.2), sharey=True, squeeze=False)
    top = float(table["saving_max_mib"].max()) * 1.22
    for ax, shape in zip(axes[0], shapes):
        part = table[table["shape"] == shape]
        x = part["stage"].to_numpy()
        ax.bar(x - 0.2, part["modelled_saving_mib"], width=0.4, color=style.colour("modelled"),
               label="modelled (receive buffers the pool does not make)")
        err = [part["measured_saving_mib"] - part["saving_min_mib"], part["saving_max_mib"] - part["measured_saving_mib"]]
        bars = ax.bar(x + 0.2, part["measured_saving_mib"], width=0.4, yerr=err, capsize=3,
                      color=style.colour("measured"), label="measured (peak resident memory, stock - pooled)")
        style.bar_value_labels(ax, bars, labels=[f"{r:+.1%}" for r in part["relative_difference"]])
        ax.set_title(shape.replace(" 2x", "\n2x"), fontsize=8.5)
        ax.set_xlabel("stage (index)")
        ax.set_xticks(x)
        ax.set_ylim(0, top)
    axes[0][0].set_ylabel("saved per stage (MiB)")
    fig.suptitle("the pool's saving per stage: modelled vs measured in each rank's resident memory "
                 "(pp4 1F1B, gloo, slack 2; label: measured vs modelled)", fontsize=9.5)
    handles, _ = axes[0][0].get_legend_handles_labels()
    style.legend_below(fig, handles, ncol=1)
    return fig


def render_explorer(state: ExplorerState, *, save: bool = True) -> Figure | None:
    """Print the figure-of-merit line (or the error), then show the per-stage bars and the fits view, once each."""
    from pooltk.nb import common as nb

    if state.last_result is None:
        print(f"rejected: {state.last_error}")
        return None
    print(state.figure_of_merit.line())  # type: ignore[union-attr]
    if state.fits is not None:
        for variant, text in state.fits.summary().items():
            print(f"  on {state.fits.device.name} ({state.fits.device.gib:.2f} GiB), {VARIANT_LABELS[variant]}: fullest {text}")
    elif state.fits_note:
        print(f"  fits: {state.fits_note}")
    fig = stage_bars(state.last_result)
    if save:
        nb.save_figure(fig, "01_explorer_stage_bars")
    nb.show_figure(fig)
    if state.fits is not None:
        fits_fig = fits_bars(state.fits, published=pr_figures(state.source))
        if save:
            nb.save_figure(fits_fig, "01_explorer_fits")
        nb.show_figure(fits_fig)
    return fig


def explorer_controls(preset: str | None = None) -> dict[str, Any]:
    """ipywidgets for :func:`explore`'s keyword arguments, set to ``preset``'s values.

    Choosing another preset, or entering a config path (Automodel YAML or config.json), resets
    pp, microbatches, rows, seq, hidden, dtype, slack, policy and boundary MiB to that source's
    values. Pass the dict to ``ipywidgets.interactive_output``.
    """
    import ipywidgets as w

    from pooltk.memory.model import DTYPE_BYTES

    p = get_preset(preset or next(iter(PRESETS)))
    style = {"description_width": "150px"}
    layout = w.Layout(width="520px")
    hidden_t = next((t for t in p.boundary.activations if t.name == "hidden_states"), p.boundary.activations[0])
    controls: dict[str, Any] = {
        "preset": w.Dropdown(options=list(PRESETS), value=p.name, description="preset", style=style, layout=layout),
        "config_path": w.Text(value="", placeholder="path to an Automodel YAML or config.json (Enter)",
                              description="config file", continuous_update=False, style=style, layout=layout),
        # pp and M re-walk the schedule for an unseen shape (up to ~1 s at N=16, M=256): update on release.
        "pp": w.IntSlider(value=p.shape.pp, min=2, max=16, description="pp (stages)", continuous_update=False, style=style, layout=layout),
        "microbatches": w.IntSlider(
            value=p.shape.n_microbatches, min=1, max=256, description="microbatches M", continuous_update=False, style=style, layout=layout
        ),
        "rows": w.BoundedIntText(value=hidden_t.shape[0], min=1, max=1024, description="rows / microbatch", style=style, layout=layout),
        "seq_len": w.BoundedIntText(value=p.seq_len, min=1, max=2**22, description="seq (tokens / row)", style=style, layout=layout),
        "hidden": w.BoundedIntText(value=p.hidden, min=1, max=2**20, description="hidden", style=style, layout=layout),
        "dtype": w.Dropdown(options=list(DTYPE_BYTES), value=hidden_t.dtype, description="dtype", style=style, layout=layout),
        "slack": w.IntSlider(value=p.config.slack, min=0, max=8, description="slack", style=style, layout=layout),
        "grad_slack": w.IntSlider(value=p.config.grad_slack, min=0, max=4, description="grad slack (tight)", style=style, layout=layout),
        "policy": w.Dropdown(options=["automodel", "tight"], value=p.config.policy, description="policy", style=style, layout=layout),
        "boundary_mib": w.FloatSlider(
            value=p.boundary.forward_bytes / 2**20, min=1, max=1024, step=1, description="boundary MiB / set", style=style, layout=layout
        ),
        "device": w.Dropdown(options=["none", *DEVICES], value="gb200", description="device", style=style, layout=layout),
        "reference_peak_gib": w.BoundedFloatText(value=0.0, min=0.0, max=1e4, step=0.1,
                                                 description="reference peak GiB (0: preset's)", style=style, layout=layout),
    }

    def _set_from(q: Preset) -> None:
        t = next((x for x in q.boundary.activations if x.name == "hidden_states"), q.boundary.activations[0])
        controls["pp"].value = q.shape.pp
        controls["microbatches"].value = q.shape.n_microbatches
        controls["rows"].value = t.shape[0] if len(t.shape) == 3 else 1
        controls["seq_len"].value = q.seq_len
        controls["hidden"].value = q.hidden
        controls["dtype"].value = t.dtype
        controls["slack"].value = q.config.slack
        controls["grad_slack"].value = q.config.grad_slack
        controls["policy"].value = q.config.policy
        controls["boundary_mib"].value = min(1024.0, q.boundary.forward_bytes / 2**20)

    def _reset(change: dict[str, Any]) -> None:
        controls["config_path"].value = ""
        _set_from(get_preset(change["new"]))

    def _load(change: dict[str, Any]) -> None:
        if change["new"]:
            try:
                _set_from(load_config(change["new"]))
            except ValueError:
                pass  # explore() records the error for the cell to print

    controls["preset"].observe(_reset, names="value")
    controls["config_path"].observe(_load, names="value")
    return controls


def seed_story(devices: Sequence[str] = ("gb200-184.31", "gb200")) -> Any:
    """The seed's memory story reconstructed on stated assumptions, one row per (device, anchor, claim).

    Published (Automodel PR #3780): stock 2k OOMs in step 1 "by only 56 MiB"; the pooled 2k run
    peaks at 139.6 GiB with "44 GiB headroom". Reconstructed from the calibrated preset with
    :func:`pooltk.memory.fits.fit_report`, anchored either on the fullest pooled stage or on
    stage 0 (only rank 0 logs). ``agrees`` is judged within the published figure's rounding:
    the headroom to 1 GiB ("44"), the OOM margin to 0.05 GiB (139.6 has one decimal).
    Columns: ``device``, ``capacity_gib``, ``anchor``, ``claim``, ``published``, ``reconstructed``, ``agrees``.
    """
    import pandas as pd

    cal = get_preset("kimi-k3-gb200-2k-calibrated")
    peak_gib = published_peak(cal).value
    oom_mib = cal.figure("oom_margin_mib").value
    records = []
    for name in devices:
        for anchor, stage in (("fullest pooled stage", None), ("stage 0 (rank 0 logs)", 0)):
            ref = ReferencePeak.from_gib(peak_gib, config=cal.config, stage=stage, source="PR #3780")
            report = fit_report(cal.shape, cal.boundary, cal.config, name, ref)
            pooled = next(r for r in report.rows if r.stage == report.reference_stage and r.variant == "automodel")
            stock = report.worst("stock")
            common = {"device": name, "capacity_gib": report.device.gib, "anchor": anchor}
            records.append({**common, "claim": "pooled 2k headroom", "published": "44 GiB",
                            "reconstructed": f"{pooled.margin_bytes / 2**30:.2f} GiB",
                            "agrees": abs(pooled.margin_bytes / 2**30 - 44) < 1})
            records.append({**common, "claim": "stock 2k in step 1", "published": f"OOM by {oom_mib:g} MiB",
                            "reconstructed": f"stage {stock.stage}: {verdict_text(stock.margin_bytes)}",
                            "agrees": abs(stock.margin_bytes / 2**20 + oom_mib) <= 0.05 * 1024})
    return pd.DataFrame.from_records(records)


def verdict_text(margin_bytes: int) -> str:
    """``fits, N MiB free`` / ``OOM by N MiB`` (see :func:`pooltk.memory.fits.verdict`)."""
    from pooltk.memory.fits import verdict

    return verdict(margin_bytes)
