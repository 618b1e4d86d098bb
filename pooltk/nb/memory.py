"""Figures and the interactive explorer of notebook 01 (memory per stage), and notebook 06's
measured saving.

The notebook stays thin: every figure is one call here, and the widget callback is
:func:`explore` (compute, record in an :class:`ExplorerState`) followed by
:func:`render_explorer` (print the lines, draw, save). Tests call :func:`explore` directly and
assert on what it recorded. The whole-stage replay is :mod:`pooltk.nb.whole_stage`; the fits views
(one verdict, one capacity) are drawn by :mod:`pooltk.nb.fits`.

[Note: the explorer carries no calibration]
The explorer models what the user chose, never another model's calibration or measurements:

- it starts from a *source*: a Kimi-K3 study preset, a model of
  :data:`pooltk.memory.replay.presets.ESTIMATE_PRESETS` (Llama-3-70B: its config.json read as a
  file would be), or a config file; the widgets' pp / M / rows / seq / hidden / dtype resize it
  with :meth:`pooltk.memory.source.Preset.resized` ([Note: no calibration carried]: a new hidden
  size or dtype drops a fitted remainder, any change drops the published figures), and the
  boundaries are the resized preset's own (``boundaries_for(shape)``);
- *boundary MiB / set* replaces the tensors by an opaque set only when it differs from both the
  source's set and the resized one (the control follows the dimensions, so a stale value left by
  another source is never read as a choice);
- the fits view needs a reference that belongs to what is modelled: a peak the user gave (a
  number, or a run log's largest ``mem_gib``), the whole-stage replay of the same model and
  shape (:attr:`ExplorerState.replayed`), or the source's own published peak at its own shape.
  Otherwise it says why there is none and how to get one; it never borrows Kimi-K3's 139.6 GiB.
"""

from __future__ import annotations

import re
import dataclasses
import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_number
from pooltk.config import PoolConfig
from pooltk.memory.configs import Overrides, load_config
from pooltk.memory.fits import (
    DEVICES,
    FIT_VARIANTS,
    ReferencePeak,
    Verdict,
    anchored,
    get_device,
    of_estimate,
    published_peak,
)
from pooltk.memory.model import (
    Boundary,
    MemoryModel,
    MemoryModelError,
    PipelineShape,
    middle_stage,
    model_memory,
    slack_sweep,
)
from pooltk.memory.replay.estimate import VARIANT_TITLES
from pooltk.memory.replay.presets import ESTIMATE_PRESETS
from pooltk.memory.source import Preset
from pooltk.nb import canvas, style
from pooltk.nb.common import control
from pooltk.nb.fits import fits_bars, grouped_bars, short_source
from pooltk.nb.whole_stage import WholeStage, receive_source
from pooltk.studies.kimi_k3 import PRESETS, get_preset

if TYPE_CHECKING:  # pragma: no cover
    from matplotlib.figure import Figure

__all__ = [
    "VARIANTS",
    "VARIANT_LABELS",
    "ExplorerState",
    "FigureOfMerit",
    "explore",
    "explorer_controls",
    "explorer_sources",
    "measured_vs_modelled_figure",
    "render_explorer",
    "slack_heatmap",
    "stage_bars",
]

VARIANTS: tuple[str, ...] = FIT_VARIANTS
"""The variants the per-stage bars and the fits view draw, in drawing order (keys of
:data:`pooltk.nb.style.SERIES`)."""
VARIANT_LABELS: dict[str, str] = {key: style.label(key) for key in VARIANTS}
"""Legend label of each variant (from the one series map)."""


# --------------------------------------------------------------------------- figures


def stage_bars(model: MemoryModel) -> Figure:
    """Per-stage receive-buffer GiB (both directions) of each variant of :data:`VARIANTS`, from
    zero."""
    frame = model.to_frame()
    frame = frame[frame.variant.isin(VARIANTS)]
    per_stage = frame.groupby(["stage", "variant"], as_index=False, sort=False)["gib"].sum()
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 4.6))
    grouped_bars(ax, per_stage, "gib", VARIANTS)
    cfg, shape = model.config, model.shape
    ax.set_ylim(0, per_stage["gib"].max() * 1.08)
    ax.set_ylabel("receive buffers per stage (GiB)")
    ax.set_xlabel(f"stage (index; pp={shape.pp}, M={shape.n_microbatches}, {shape.schedule})")
    ax.set_title(
        f"receive buffers per stage, both directions: slack {cfg.slack} (Automodel's ring and "
        f"pooltk's), grad slack {cfg.grad_slack} (pooltk)",
        fontsize=10,
    )
    style.legend_below(fig, ax.get_legend_handles_labels()[0], ncol=3)
    return fig


def slack_heatmap(
    shape: PipelineShape,
    boundaries: Boundary | Sequence[Boundary],
    config: PoolConfig,
    *,
    policy: str = "tight",
    slacks: Iterable[int] = range(0, 9),
) -> Figure:
    """Stage x slack heatmap of pooled GiB per stage under ``policy``'s ring size (``tight`` or
    ``automodel``)."""
    import seaborn as sns

    sweep = slack_sweep(shape, boundaries, list(slacks), config, policy=policy)
    grid = sweep.pivot(index="stage", columns="slack", values="pooled_gib")
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 0.42 * shape.pp + 2.2))
    sns.heatmap(
        grid,
        annot=True,
        fmt=".1f",
        cmap="viridis",
        cbar_kws={"label": "pooled receive buffers (GiB)"},
        ax=ax,
    )
    ring = (
        "Automodel's ring size"
        if policy == "automodel"
        else f"pooltk tight, grad slack {config.grad_slack}"
    )
    stock = sweep[sweep.stage == middle_stage(shape.pp)].stock_gib.iloc[0]
    ax.set_title(
        f"pooled receive buffers per stage as the slack grows ({ring}); stock: {stock:.1f} GiB on "
        "the middle stage",
        fontsize=10,
    )
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
        """e.g.
        ``stage 3 pooled: 5.69 GiB, saved 46.31 GiB of 52.00 GiB stock (automodel, slack 2)``."""
        extra = f", grad slack {self.grad_slack}" if self.policy == "tight" else ""
        return (
            f"stage {self.stage} pooled: {self.pooled_gib:.2f} GiB, saved {self.saved_gib:.2f} GiB "
            f"of {self.stock_gib:.2f} GiB stock ({self.policy}, slack {self.slack}{extra})"
        )


@dataclass(kw_only=True, slots=True)
class ExplorerState:
    """What the explorer computed last; the notebook's widgets only display it. See [Note: the
    explorer carries no calibration]."""

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
    origin: Preset | None = None
    """The source the last update started from (a preset, an estimate preset's model, a config
    file)."""
    source: Preset | None = None
    """What the last update modelled: ``origin`` resized to the widgets (no calibration or published
    figure carried)."""
    boundary_note: str | None = None
    """What one buffer set is, and what the resize dropped, in one line."""
    fits: Verdict | None = None
    """The fits view of the last update (tensor peak + stated overhead against one capacity): the
    replay's, or anchored (its ``reference`` set); ``None`` when there is none."""
    fits_basis: str | None = None
    """What the fits view stands on: the reference peak and its source, or the replay."""
    fits_note: str | None = None
    """Why there is no fits view, and how to get one; else ``None``."""
    replayed: WholeStage | None = None
    """A whole-stage replay (notebook 01's section): the fits view uses it when the explorer shows
    the same model and shape."""


def explorer_sources() -> dict[str, Preset]:
    """Every source the explorer offers by name: the Kimi-K3 study presets, then the estimate
    presets' models."""
    out = dict(PRESETS)
    out.update({name: receive_source(p) for name, p in ESTIMATE_PRESETS.items()})
    return out


def _origin(
    state: ExplorerState, preset: str, config_path: str | None, overrides: Overrides
) -> Preset:
    if config_path:  # named by its path (what the user typed), not by the reader's guess
        return dataclasses.replace(load_config(config_path, overrides), name=str(config_path))
    if preset in ESTIMATE_PRESETS:
        return receive_source(preset)
    if state.replayed is not None and preset == state.replayed.named.name:
        return receive_source(state.replayed.named)
    return get_preset(preset)


def _boundary_note(origin: Preset, q: Preset, boundaries: Sequence[Boundary], opaque: bool) -> str:
    sizes = sorted({b.forward_bytes for b in boundaries})
    size = (
        f"{sizes[0] / 2**20:,.1f} MiB a set"
        if len(sizes) == 1
        else f"{sizes[0] / 2**20:,.1f} to {sizes[-1] / 2**20:,.1f} MiB a set, boundary by boundary"
    )
    if opaque:
        return f"boundary: {size}, opaque (boundary MiB / set replaces {q.name}'s tensors)"
    what = (
        " + ".join(t.name or "unnamed" for t in boundaries[0].activations)
        if boundaries
        else "nothing"
    )
    note = f"boundary: {size} ({what}) from {q.name}"
    if q is not origin and "dropped as another model's calibration" in q.assumption:
        note += "; " + q.assumption.rsplit("; ", 1)[-1].rstrip(".") + " (no calibration carried)"
    return note


def _log_peak(path: str) -> tuple[float, str]:
    """The largest ``mem_gib`` a run log reports, and its basis (``max_allocated`` /
    ``max_reserved``)."""
    from pooltk.logs import read_logs

    steps = read_logs(path).steps
    mem = steps["mem_gib"].dropna() if "mem_gib" in steps else None
    if mem is None or mem.empty:
        raise MemoryModelError(
            "reference log",
            found=f"{path}: no peak memory (mem_gib) in its steps",
            required="an Automodel or torchtitan training log that reports peak memory",
            fix="give another log, or type the peak in GiB.",
        )
    basis = str(steps.loc[mem.idxmax(), "mem_basis"]) if "mem_basis" in steps else "peak"
    return float(mem.max()), basis


def _replay_hint(
    state: ExplorerState, origin: Preset, q: Preset, config_path: str | None, device: str
) -> str:
    shape = q.shape
    if config_path:
        rows = (
            q.boundary.activations[0].shape[-3] if len(q.boundary.activations[0].shape) >= 3 else 1
        )
        return (
            f"pooltk estimate --config {config_path} --pp {shape.pp} --microbatches "
            f"{shape.n_microbatches} --micro-batch {rows} --seq-len {q.seq_len} --capacity {device}"
        )
    named = ESTIMATE_PRESETS.get(origin.name) or (
        state.replayed.named
        if state.replayed is not None and state.replayed.named.name == origin.name
        else None
    )
    if named is not None:
        if q is origin:
            return f"pooltk estimate --preset {named.name} --capacity {device}"
        return (
            f"whole_stage.whole_stage_estimate({named.name!r}, "
            f"microbatches={shape.n_microbatches}, seq_len={q.seq_len}), passed as "
            "ExplorerState(replayed=...)"
        )
    return (
        "pooltk builds no model of Kimi-K3's own layers; its published widths replay as "
        "pooltk estimate --preset kimi-k3-gb200-2k --capacity " + device
    )


def _user_reference(
    model: MemoryModel, peak_gib: float | None, log: str | None, variant: str
) -> ReferencePeak | None:
    """The peak the user gave, measured under ``variant`` of this config: a number, or the largest
    ``mem_gib`` of a run log; ``None`` when neither."""
    if peak_gib:
        gib, source = peak_gib, "your peak (explorer field)"
    elif log:
        gib, basis = _log_peak(log)
        source = f"your run log {log} ({basis})"
    else:
        return None
    own = {"config": model.config, "policy": model.policy, "sharing": model.sharing}
    return ReferencePeak.from_gib(gib, variant=variant, source=source, **own)


def _no_reference(
    state: ExplorerState, origin: Preset, q: Preset, config_path: str | None, device: str
) -> str:
    """Why there is no fits view, and how to get one."""
    why = (
        f"{origin.name}'s published peak describes its own run, not this one (not carried)"
        if published_peak(origin) is not None
        else f"{q.name} has no published peak"
    )
    return (
        f"no reference peak for {q.name!r}: {why}. Give your run's peak (GiB) or a run log, "
        f"or replay the whole stage: {_replay_hint(state, origin, q, config_path, device)}"
    )


def _fits(
    state: ExplorerState,
    origin: Preset,
    q: Preset,
    model: MemoryModel,
    boundaries: Sequence[Boundary],
    device: str | None,
    reference_peak_gib: float | None,
    reference_log: str | None,
    reference_variant: str,
    config_path: str | None,
) -> None:
    """The fits view of the update: on the user's peak, the matching replay, or the source's own
    published peak, in that order ([Note: the explorer carries no calibration])."""
    state.fits = state.fits_basis = state.fits_note = None
    if not device or device == "none":
        state.fits_note = "no device chosen"
        return
    dev, replayed = get_device(device), state.replayed
    try:
        reference = _user_reference(model, reference_peak_gib, reference_log, reference_variant)
    except (MemoryModelError, OSError, ValueError) as exc:
        state.fits_note = f"reference: {exc}"
        return
    if reference is None and replayed and replayed.matches(origin.name, q.shape, boundaries):
        state.fits = of_estimate(replayed.estimate, dev)
        state.fits_basis = f"the whole-stage replay of {replayed.named.name} ({replayed.scale})"
        return
    figure = published_peak(q)
    if reference is None and figure is None:
        state.fits_note = _no_reference(state, origin, q, config_path, dev.name)
        return
    reference = reference or ReferencePeak.from_gib(
        figure.value, variant="pooled", config=q.config, policy=q.policy, source=figure.source
    )
    try:
        state.fits = anchored(model, dev, reference, variants=FIT_VARIANTS)
    except MemoryModelError as exc:
        state.fits_note = f"reference: {exc}"
        return
    state.fits_basis = (
        f"anchored on {reference.peak_bytes / 2**30:.1f} GiB, a {reference.variant} peak "
        f"({short_source(reference.source)}); receive buffers modelled"
    )


def _modelled(
    state: ExplorerState,
    preset: str,
    config_path: str | None,
    boundary_mib: float | None,
    dims: dict[str, Any],
) -> tuple[Preset, Preset, list[Boundary], bool]:
    """(the source, it resized to ``dims``, its boundaries, whether ``boundary_mib`` replaced them
    by an opaque set). See [Note: the explorer carries no calibration]."""
    overrides = Overrides(**{("micro_batch" if k == "rows" else k): v for k, v in dims.items()})
    origin = _origin(state, preset, config_path, overrides)
    q = origin.resized(**dims)
    boundaries = list(q.boundaries_for(q.shape))
    if boundary_mib is None:
        return origin, q, boundaries, False
    fix = "pick a positive size."
    check_number("boundary MiB", boundary_mib, fix=fix, error=MemoryModelError)
    if round(boundary_mib * 2**20) in (origin.boundary.forward_bytes, q.boundary.forward_bytes):
        return origin, q, boundaries, False
    opaque = Boundary.opaque(round(boundary_mib * 2**20), name="boundary_from_widget")
    return origin, q, [opaque] * (q.shape.num_stages - 1), True


def _check_reference_variant(reference_variant: str) -> None:
    """A reference run was measured under stock torch or pooled with this config."""
    if reference_variant not in ("stock", "pooled"):
        raise MemoryModelError(
            "reference variant",
            found=repr(reference_variant),
            required="'stock' or 'pooled'",
            fix="say whether your reference run was stock torch or pooled with this config.",
        )


def _closed_form_model(
    q: Preset, boundaries: list[Boundary], *, slack: int, grad_slack: int, policy: str
) -> MemoryModel:
    """The memory model of ``q``'s shape, its live sets from the closed forms.

    The closed forms equal the walked live sets for 1F1B and GPipe (tests/memory prove it over a
    grid of shapes); using them keeps a pp/M slider move under 50 ms at N=16, M=256, where a cold
    walk of the schedule takes about a second.
    """
    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    return model_memory(q.shape, boundaries, config, policy=policy, live_source="formula")


def _record_rejection(state: ExplorerState, exc: ValueError) -> None:
    """A rejected update: no result, no fits view, the error's message in the explorer's names (the
    library names an override ``Overrides.micro_batch``; the explorer's field is ``rows``)."""
    fields = {"micro_batch": "rows"}
    text = re.sub(r"Overrides\.([a-z_]+)", lambda m: fields.get(m[1], m[1]), str(exc))
    state.last_result, state.last_error = None, text
    state.fits = state.fits_basis = None


def _record_result(
    state: ExplorerState, model: MemoryModel, *, pp: int, policy: str, slack: int, grad_slack: int
) -> None:
    """A modelled update: the result and its figure of merit (the middle stage's stock, pooled and
    saved GiB), which joins the history."""
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
    reference_log: str | None = None,
    reference_variant: str = "stock",
) -> MemoryModel | None:
    """One widget update: model the shape and record it in ``state``. See [Note: the explorer
    carries no calibration].

    The source is ``config_path`` (an Automodel YAML or config.json, read with the widgets as
    overrides) or ``preset`` (:func:`explorer_sources`), resized to ``pp`` / ``microbatches`` /
    ``rows`` / ``seq_len`` / ``hidden`` / ``dtype`` by :meth:`~pooltk.memory.source.Preset.resized`.
    ``boundary_mib`` (MiB per buffer set) replaces the tensors by an opaque set when it differs from
    both the source's set and the resized one; ``None`` keeps them. ``device`` (``none`` or a name
    of :data:`pooltk.memory.fits.DEVICES`) adds the fits view, standing on ``reference_peak_gib`` or
    ``reference_log`` (measured under ``reference_variant``: ``stock`` or ``pooled`` with this
    config), else the matching whole-stage replay, else the source's own published peak. Rejected
    inputs (e.g. M < pp under 1F1B, an unknown config class) are recorded in ``state.last_error``
    and return ``None``.
    """
    state.last_inputs = {name: value for name, value in locals().items() if name != "state"}
    dims = dict(pp=pp, microbatches=microbatches, rows=rows, seq_len=seq_len, hidden=hidden)
    try:
        _check_reference_variant(reference_variant)
        origin, q, boundaries, opaque = _modelled(
            state, preset, config_path, boundary_mib, {**dims, "dtype": dtype}
        )
        model = _closed_form_model(q, boundaries, slack=slack, grad_slack=grad_slack, policy=policy)
        state.origin, state.source = origin, q
        state.boundary_note = _boundary_note(origin, q, boundaries, opaque)
        references = (reference_peak_gib, reference_log, reference_variant)
        _fits(state, origin, q, model, boundaries, device, *references, config_path)
    except ValueError as exc:  # MemoryModelError, ConfigKeyError and PoolConfig's ValueError
        _record_rejection(state, exc)
        return None
    _record_result(state, model, pp=pp, policy=policy, slack=slack, grad_slack=grad_slack)
    return model


def explorer_lines(state: ExplorerState) -> list[str]:
    """What the explorer prints: the figure-of-merit line first, then the boundary and the fits view
    (or why none)."""
    if state.last_result is None:
        return [f"rejected: {state.last_error}"]
    out = [state.figure_of_merit.line()]  # type: ignore[union-attr]
    if state.boundary_note:
        out.append("  " + state.boundary_note)
    if state.fits is not None:
        f = state.fits
        out.append(
            f"  fits on {f.device.name} ({f.device.gib:.2f} GiB, {short_source(f.device.source)}), "
            f"tensor peak + {f.overhead.total_bytes / 2**30:.2f} GiB stated overhead; "
            f"{state.fits_basis}:"
        )
        titles = VARIANT_LABELS if f.reference is not None else VARIANT_TITLES
        out += [f"    {titles.get(v, v)}: fullest {text}" for v, text in f.summary().items()]
    elif state.fits_note:
        out.append(f"  fits: {state.fits_note}")
    return out


def render_explorer(state: ExplorerState, *, save: bool = True) -> Figure | None:
    """Print :func:`explorer_lines`, then show the per-stage bars and the fits view's figure, once
    each.

    Drawn off pyplot: a widget callback (see [Note: widget callbacks draw off pyplot]).
    """
    for line in explorer_lines(state):
        print(line)
    if state.last_result is None:
        return None
    with canvas.off_pyplot():
        return _draw_explorer(state, state.last_result, save=save)


def _draw_explorer(state: ExplorerState, result: Any, *, save: bool) -> Figure:
    from pooltk.nb import common as nb

    fig = stage_bars(result)
    if save:
        nb.save_figure(fig, "01_explorer_stage_bars")
    nb.show_figure(fig)
    fits_fig = None
    if state.fits is not None and state.fits.reference is not None:
        fits_fig = fits_bars(state.fits, oom=_oom_margin(state.source))
    elif state.fits is not None and state.replayed is not None:
        from pooltk.nb.whole_stage import stacked_figure

        fits_fig = stacked_figure(state.replayed)
    if fits_fig is not None:
        if save:
            nb.save_figure(fits_fig, "01_explorer_fits")
        nb.show_figure(fits_fig)
    return fig


def _oom_margin(preset: Preset | None) -> Any:
    """The preset's own published OOM margin (MiB, a :class:`~pooltk.memory.source.Figure`);
    none for a resized preset or a config file."""
    return next((f for f in getattr(preset, "figures", ()) if f.name == "oom_margin_mib"), None)


def _device_choices() -> list[str]:
    """``none`` and one name per capacity (no alias of the same capacity)."""
    first = {}
    for name, dev in DEVICES.items():
        first.setdefault(dev.capacity_bytes, name)
    return ["none", *first.values()]


_widget = functools.partial(control, label_px=170, width_px=540)
"""One explorer control (``ipywidgets.<kind>``), laid out like the others."""


def _hidden_tensor(q: Preset) -> Any:
    """The hidden-state tensor of ``q``'s boundary (its first tensor if none is named so)."""
    acts = q.boundary.activations
    return next((x for x in acts if x.name == "hidden_states"), acts[0])


def _source_values(q: Preset) -> dict[str, Any]:
    """The control values of a source: its shape, dtype, pool and set size."""
    t = _hidden_tensor(q)
    return {
        "pp": q.shape.pp,
        "microbatches": q.shape.n_microbatches,
        "rows": t.shape[-3] if len(t.shape) >= 3 else 1,
        "seq_len": q.seq_len,
        "hidden": q.hidden,
        "dtype": t.dtype,
        "slack": q.config.slack,
        "grad_slack": q.config.grad_slack,
        "policy": q.policy,
        "boundary_mib": q.boundary.forward_bytes / 2**20,
    }


def _controls(sources: list[str], source: str, values: dict[str, Any]) -> dict[str, Any]:
    """Every control: ``source`` chosen among ``sources``, the rest set to its ``values``."""
    from pooltk.memory.model import DTYPE_BYTES

    v, stops = values, {"continuous_update": False}  # pp, M: a cold schedule walk, on release
    return {
        "preset": _widget("Dropdown", "preset or model", options=sources, value=source),
        "config_path": _widget("Text", "config file", value="", placeholder=_CONFIG_HINT, **stops),
        "pp": _widget("IntSlider", "pp (stages)", value=v["pp"], min=2, max=16, **stops),
        "microbatches": _widget(
            "IntSlider", "microbatches M", value=v["microbatches"], min=1, max=256, **stops
        ),
        "rows": _widget("BoundedIntText", "rows / microbatch", value=v["rows"], min=1, max=1024),
        "seq_len": _widget(
            "BoundedIntText", "seq (tokens / row)", value=v["seq_len"], min=1, max=2**22
        ),
        "hidden": _widget("BoundedIntText", "hidden", value=v["hidden"], min=1, max=2**20),
        "dtype": _widget("Dropdown", "dtype", options=list(DTYPE_BYTES), value=v["dtype"]),
        "slack": _widget("IntSlider", "slack", value=v["slack"], min=0, max=8),
        "grad_slack": _widget(
            "IntSlider", "grad slack (tight)", value=v["grad_slack"], min=0, max=4
        ),
        "policy": _widget("Dropdown", "policy", options=["automodel", "tight"], value=v["policy"]),
        # A text field, not a slider: a slider's step would round the set size the dimensions give.
        "boundary_mib": _widget(
            "BoundedFloatText", "boundary MiB / set", value=v["boundary_mib"], min=0.0, max=2.0**20
        ),
        **_fits_controls(),
    }


_CONFIG_HINT = "path to an Automodel YAML or config.json (Enter)"


def _fits_controls() -> dict[str, Any]:
    """The device and the user's reference: a peak, a run log, and what that run was."""
    was = [("stock torch", "stock"), ("pooled, this config", "pooled")]
    log = "your run log (Automodel / torchtitan) for its peak (Enter)"
    return {
        "device": _widget("Dropdown", "device", options=_device_choices(), value="gb200"),
        "reference_peak_gib": _widget(
            "BoundedFloatText", "your peak GiB (0: none)", value=0.0, min=0.0, max=1e4, step=0.1
        ),
        "reference_log": _widget(
            "Text", "your run log", value="", placeholder=log, continuous_update=False
        ),
        "reference_variant": _widget("Dropdown", "your run was", options=was, value="stock"),
    }


def explorer_controls(preset: str | None = None) -> dict[str, Any]:
    """ipywidgets for :func:`explore`'s keyword arguments, set to ``preset``'s values.

    Choosing another source (a preset or model, or a config path: Automodel YAML or config.json)
    resets pp, microbatches, rows, seq, hidden, dtype, slack, policy and boundary MiB to its values;
    changing rows, seq, hidden or dtype sets boundary MiB to the resized set ([Note: the explorer
    carries no calibration]). Pass the dict to ``ipywidgets.interactive_output``.
    """
    sources = explorer_sources()
    name = preset or next(iter(sources))
    p = sources[name] if name in sources else get_preset(name)
    controls = _controls(list(dict.fromkeys([*sources, p.name])), p.name, _source_values(p))
    current: dict[str, Preset] = {"origin": p}

    def _set_from(q: Preset) -> None:
        current["origin"] = q
        for key, value in _source_values(q).items():
            controls[key].value = value

    def _reset(change: dict[str, Any]) -> None:
        controls["config_path"].value = ""
        name = change["new"]
        _set_from(receive_source(name) if name in ESTIMATE_PRESETS else get_preset(name))

    def _load(change: dict[str, Any]) -> None:
        if change["new"]:
            try:
                _set_from(load_config(change["new"]))
            except ValueError:
                pass  # explore() records the error for the cell to print

    def _resize(change: dict[str, Any]) -> None:
        dims = {k: controls[k].value for k in ("rows", "seq_len", "hidden", "dtype")}
        try:
            q = current["origin"].resized(**dims)
        except ValueError:
            return  # explore() records the error for the cell to print
        controls["boundary_mib"].value = q.boundary.forward_bytes / 2**20

    controls["preset"].observe(_reset, names="value")
    controls["config_path"].observe(_load, names="value")
    for name in ("rows", "seq_len", "hidden", "dtype"):
        controls[name].observe(_resize, names="value")
    return controls


def measured_vs_modelled_figure(table: Any) -> Figure:
    """Modelled vs measured saving per stage, one panel per shape (the measured bar spans min..max
    over pairs).

    The measured saving is each rank's peak resident memory (``VmHWM``), stock minus pooled: process
    memory, not a device allocator's figure. Each pair of bars carries the relative difference.
    """

    shapes = list(dict.fromkeys(table["shape"]))
    fig, axes = canvas.subplots(
        1, len(shapes), figsize=(style.FIGURE_WIDTH_IN, 4.2), sharey=True, squeeze=False
    )
    top = float(table["saving_max_mib"].max()) * 1.22
    for ax, shape in zip(axes[0], shapes):
        part = table[table["shape"] == shape]
        x = part["stage"].to_numpy()
        ax.bar(
            x - 0.2,
            part["modelled_saving_mib"],
            width=0.4,
            color=style.colour("modelled"),
            label="modelled (receive buffers the pool does not make)",
        )
        err = [
            part["measured_saving_mib"] - part["saving_min_mib"],
            part["saving_max_mib"] - part["measured_saving_mib"],
        ]
        bars = ax.bar(
            x + 0.2,
            part["measured_saving_mib"],
            width=0.4,
            yerr=err,
            capsize=3,
            color=style.colour("measured"),
            label="measured (peak resident memory, stock - pooled)",
        )
        style.bar_value_labels(ax, bars, labels=[f"{r:+.1%}" for r in part["relative_difference"]])
        ax.set_title(shape.replace(" 2x", "\n2x"), fontsize=8.5)
        ax.set_xlabel("stage (index)")
        ax.set_xticks(x)
        ax.set_ylim(0, top)
    axes[0][0].set_ylabel("saved per stage (MiB)")
    fig.suptitle(
        "the pool's saving per stage: modelled vs measured in each rank's resident memory "
        "(pp4 1F1B, gloo, slack 2; label: measured vs modelled)",
        fontsize=9.5,
    )
    style.legend_below(fig, axes[0][0].get_legend_handles_labels()[0], ncol=1)
    return fig
