"""The gloo parity notebook (02): run stock vs pooled from widgets, draw and tabulate the result.

The notebook stays thin: one :class:`ParityPanel` (widgets, a run button, the last result
in a :class:`ParityState`), one :func:`run_negative_controls` call, and one function per
figure or table. Tests call :meth:`ParityPanel.run` / :func:`run_check` and read the state.

- :func:`run_check` -- one parity launch (stock + pooled) for the widget values, recorded
  in a :class:`ParityState` (a rejected input or a failed launch is recorded, not raised);
- :func:`loss_figure`, :func:`param_sum_frame`, :func:`bytes_frame`, :func:`bytes_figure`;
- :func:`run_negative_controls` -- ring one short and GPipe forced, guard off (one launch:
  both diverge) and guard on (one launch each: both stopped by ``PoolOverrunError``),
  the three launches run side by side; :func:`divergence_frame`,
  :func:`divergence_figure` and :func:`outcome_frame` show them;
- :func:`run_three_way_models` -- stock, fresh (a new buffer per receive) and pooled for models
  that keep something of their received input, judged three ways; :func:`three_way_frame`
  and :func:`three_way_figure` show them.

Imports pandas / matplotlib / ipywidgets inside the functions that need them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from pooltk import PoolConfig, PoolOverrunError
from pooltk.nb import canvas, style
from pooltk.parity import (
    ParityRankError,
    ParityReport,
    ParitySpec,
    ParityTimeoutError,
    default_variants,
    run_parity,
)
from pooltk.parity.controls import ControlOutcome, run_negative_controls
from pooltk.parity.tables import bytes_frame, stock_of

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "DEFAULTS",
    "ParityPanel",
    "ParityState",
    "ParitySummary",
    "bytes_figure",
    "bytes_frame",
    "divergence_figure",
    "divergence_frame",
    "loss_figure",
    "outcome_frame",
    "param_sum_frame",
    "parity_spec",
    "render_check",
    "run_check",
    "run_negative_controls",
    "run_three_way_models",
    "three_way_figure",
    "three_way_frame",
]

DEFAULTS: dict[str, Any] = dict(
    pp=4, microbatches=8, steps=2, slack=2, grad_slack=1, frontend="manual"
)
"""The widget defaults: a pp4 launch that finishes in seconds (startup dominates)."""


# --------------------------------------------------------------------------- one check


@dataclass(kw_only=True, slots=True, frozen=True)
class ParitySummary:
    """The headline of one parity check."""

    pp: int
    """Stages (= ranks)."""
    microbatches: int
    """Microbatches per step."""
    steps: int
    """Optimizer steps per variant."""
    config: str
    """The pool config, as :meth:`PoolConfig.describe` prints it."""
    bitwise_equal: bool
    """Every pooled variant's losses and per-stage parameter sums equal stock bit for bit."""
    params_max_abs_diff: float
    """Largest |pooled - stock| parameter difference over stages and pooled variants."""
    stock_bytes: int
    """Receive-buffer bytes stock torch held, summed over stages and directions (first frontend)."""
    pooled_bytes: int
    """Receive-buffer bytes the pool held, same sum."""
    matches_model: bool
    """Measured pooled bytes equal :func:`pooltk.memory.model.expected_bytes` for every stage and
    direction."""
    wall_s: float
    """Wall time of the launch (spawn, init, all variants)."""

    @property
    def saved_bytes(self) -> int:
        return self.stock_bytes - self.pooled_bytes

    def line(self) -> str:
        verdict = (
            "BITWISE EQUAL"
            if self.bitwise_equal
            else f"NOT EQUAL (max |dparam| {self.params_max_abs_diff:.3g})"
        )
        return (
            f"pp{self.pp} x {self.microbatches} microbatches x {self.steps} steps, "
            f"{self.config}: {verdict}; "
            f"receive buffers {self.stock_bytes / 2**10:,.0f} KiB stock -> "
            f"{self.pooled_bytes / 2**10:,.0f} KiB "
            f"pooled (saved {self.saved_bytes / 2**10:,.0f} KiB, "
            f"model {'matches' if self.matches_model else 'DIFFERS'}); "
            f"wall {self.wall_s:.1f} s"
        )


@dataclass(kw_only=True, slots=True)
class ParityState:
    """What the parity panel computed last; the widgets only display it."""

    last_inputs: dict[str, Any] | None = None
    """The inputs of the last run."""
    last_report: ParityReport | None = None
    """The report of the last run (``None`` when it was rejected or failed)."""
    last_error: str | None = None
    """Why the last run was rejected or failed, else ``None``."""
    summary: ParitySummary | None = None
    """Headline of the last successful run."""
    history: list[ParitySummary] = field(default_factory=list)
    """Every successful run's headline, in order."""


def parity_spec(
    *,
    pp: int,
    microbatches: int,
    steps: int,
    slack: int,
    grad_slack: int = 1,
    frontend: str = "manual",
    timeout_s: float = 180.0,
) -> ParitySpec:
    """Stock vs pooled (one config) under 1F1B for ``frontend`` (``manual``, ``tracing`` or
    ``both``).

    Raises:
        ValueError: a bad field (named, with what is required), including M < pp.
    """
    from pooltk.memory.model import PipelineShape

    # M >= pp, positive sizes: clear errors
    PipelineShape(pp=pp, n_microbatches=microbatches, schedule="1f1b")
    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    if frontend not in ("manual", "tracing", "both"):
        raise ValueError(f"frontend: found {frontend!r}; required 'manual', 'tracing' or 'both'.")
    frontends = ("manual", "tracing") if frontend == "both" else (frontend,)
    return ParitySpec(
        pp=pp,
        microbatches=microbatches,
        steps=steps,
        timeout_s=timeout_s,
        variants=default_variants([config], frontends=frontends),
    )


def _summarise(report: ParityReport, config: PoolConfig) -> ParitySummary:
    frame = bytes_frame(report)
    pooled = [v for v in report.variants if v.pooled]
    return ParitySummary(
        pp=report.spec.pp,
        microbatches=report.spec.microbatches,
        steps=report.spec.steps,
        config=config.describe(),
        bitwise_equal=report.bitwise_equal,
        params_max_abs_diff=max((v.params_max_abs_diff or 0.0) for v in pooled) if pooled else 0.0,
        stock_bytes=int(frame.stock_bytes.sum()),
        pooled_bytes=int(frame.pooled_bytes.sum()),
        matches_model=bool(frame.matches_model.all()),
        wall_s=report.wall_s,
    )


def run_check(state: ParityState, **inputs: Any) -> ParityReport | None:
    """One parity launch for the widget values (see :func:`parity_spec`); recorded in ``state``.

    Rejected inputs and failed launches (a rank error, the time bound, an overrun) are
    recorded in ``state.last_error`` with their message and return ``None``.
    """
    values = {**DEFAULTS, **inputs}
    state.last_inputs = values
    state.last_report, state.summary = None, None
    try:
        spec = parity_spec(**values)
        report = run_parity(spec)
    except (ValueError, ParityRankError, ParityTimeoutError, PoolOverrunError) as exc:
        state.last_error = f"{type(exc).__name__}: {exc}"
        return None
    config = PoolConfig(slack=values["slack"], grad_slack=values["grad_slack"])
    state.last_report, state.last_error = report, None
    state.summary = _summarise(report, config)
    state.history.append(state.summary)
    return report


def render_check(state: ParityState) -> None:
    """Print the headline (or the error), show the tables and draw the figures of the last run.

    Drawn off pyplot: a widget callback (see [Note: widget callbacks draw off pyplot]).
    """
    from pooltk.nb import common as nb

    if state.last_report is None:
        print(f"parity run rejected or failed:\n{state.last_error}")
        return
    report = state.last_report
    print(state.summary.line())  # type: ignore[union-attr]
    with canvas.off_pyplot():
        fig = loss_figure(report)
        nb.save_figure(fig, "02_parity_losses")
        nb.show_figure(fig)
        nb.show_frame(
            param_sum_frame(report),
            "parameter sum per stage after each step: stock vs pooled",
            float_format="{:.9g}",
        )
        nb.show_frame(
            bytes_frame(report),
            "receive-buffer bytes per stage and direction, measured, and the model's "
            "pooled bytes (pooltk.memory.model.expected_bytes)",
            float_format="{:,.0f}",
        )
        fig = bytes_figure(report)
        nb.save_figure(fig, "02_parity_bytes")
        nb.show_figure(fig)


class ParityPanel:
    """Widgets for :func:`run_check` plus a run button and an output area.

    ``panel.widget`` is what the notebook displays; ``panel.run()`` runs with the current
    widget values and renders into the calling cell (the button renders into the panel's
    own output area); ``panel.state`` keeps what was computed.
    """

    def __init__(self, **defaults: Any) -> None:
        import ipywidgets as w

        from pooltk.nb.common import control

        d = {**DEFAULTS, **defaults}
        size = {"label_px": 130, "width_px": 440}
        sliders = {
            "pp": ("pp (ranks)", 2, 6),
            "microbatches": ("microbatches M", 2, 32),
            "steps": ("optimizer steps", 1, 5),
            "slack": ("slack", 0, 4),
            "grad_slack": ("grad slack", 0, 2),
        }
        self.state = ParityState()
        self.controls: dict[str, Any] = {
            key: control("IntSlider", text, value=d[key], min=low, max=high, **size)
            for key, (text, low, high) in sliders.items()
        }
        frontends = ["manual", "tracing", "both"]
        self.controls["frontend"] = control(
            "Dropdown", "frontend", options=frontends, value=d["frontend"], **size
        )
        self.button = w.Button(description="run parity", button_style="primary", icon="play")
        self.out = w.Output()
        self.button.on_click(self._clicked)
        self.widget = w.VBox([*self.controls.values(), self.button, self.out])

    def values(self) -> dict[str, Any]:
        return {k: c.value for k, c in self.controls.items()}

    def run(self) -> ParityReport | None:
        """Run with the current widget values; print and draw the result."""
        print(f"launching {self.values()['pp']} gloo ranks ...", flush=True)
        report = run_check(self.state, **self.values())
        render_check(self.state)
        return report

    def _clicked(self, _button: Any) -> None:
        self.button.disabled, self.button.description = True, "running ..."
        try:
            with self.out:
                self.out.clear_output()
                self.run()
        finally:
            self.button.disabled, self.button.description = False, "run parity"


# --------------------------------------------------------------------------- tables and figures


def param_sum_frame(report: ParityReport) -> pd.DataFrame:
    """Per pooled variant, stage and step: stock and pooled parameter sums, bitwise equal,
    difference."""
    import pandas as pd

    rows = []
    for v in report.variants:
        if not v.pooled:
            continue
        ref = stock_of(report, v.name)
        for stage in sorted(v.param_sums):
            for step, (p, s) in enumerate(zip(v.param_sums[stage], ref.param_sums[stage])):
                rows.append(
                    {
                        "variant": v.name,
                        "stage": stage,
                        "step": step,
                        "stock_sum": s,
                        "pooled_sum": p,
                        "bitwise_equal": p == s,
                        "abs_diff": abs(p - s),
                    }
                )
    return pd.DataFrame(rows)


def _mb_losses(v) -> list[float]:
    return [x for step in v.losses for x in step]


def _draw_losses(top: Any, diff: Any, report: ParityReport) -> float:
    """Stock's losses as lines and each pooled variant's as circles (``top``), pooled - stock
    (``diff``); returns the largest |pooled - stock|."""
    worst = 0.0
    for v in report.variants:
        if not v.pooled:
            ys = _mb_losses(v)
            top.plot(
                range(len(ys)), ys, lw=2, color=style.colour("stock"), label=f"stock ({v.name})"
            )
    markers = iter("osD^v<>")
    for v in (v for v in report.variants if v.pooled):
        ys, ref = _mb_losses(v), _mb_losses(stock_of(report, v.name))
        mk = next(markers)
        top.plot(
            range(len(ys)),
            ys,
            ls="none",
            marker=mk,
            ms=6,
            mfc="none",
            color=style.colour("tight"),
            label=f"pooled ({v.name})",
        )
        d = [a - b for a, b in zip(ys, ref)]
        worst = max(worst, max((abs(x) for x in d), default=0.0))
        diff.plot(
            range(len(d)),
            d,
            marker=mk,
            ms=4,
            lw=1,
            color=style.colour("tight"),
            label=f"pooled ({v.name})",
        )
    return worst


def _label_losses(top: Any, diff: Any, report: ParityReport, worst: float) -> None:
    """The verdict (bitwise equal or the largest difference) in both panels' titles, the labels."""
    if worst == 0:
        diff.set_ylim(-1, 1)
    top.set_ylabel("loss (last stage, MSE)")
    verdict = (
        "Pooled training is bitwise equal to stock: every microbatch's loss matches exactly"
        if worst == 0
        else f"Pooled training differs from stock: max |pooled - stock| loss {worst:.3g}"
    )
    top.set_title(
        f"{verdict}\n(pp{report.spec.pp} 1F1B, {report.spec.steps} steps of "
        f"{report.spec.microbatches} microbatches; dotted: optimizer step)",
        fontsize=10,
    )
    diff.set_ylabel("pooled - stock (loss)")
    diff.set_title(
        "bitwise equal: every difference exactly 0"
        if worst == 0
        else f"NOT equal: max |pooled - stock| = {worst:.3g}",
        fontsize=9.5,
    )
    diff.set_xlabel("microbatch (index, steps in order)")


def loss_figure(report: ParityReport) -> Figure:
    """Top: every microbatch's loss, stock as a line, each pooled variant as circles. Bottom:
    pooled - stock.

    A line on a plot cannot show bitwise equality; the difference can: exactly 0 at every
    microbatch is what "bitwise equal" means for the losses.
    """
    m = report.spec.microbatches
    fig, (top, diff) = canvas.subplots(
        2,
        1,
        figsize=(style.FIGURE_WIDTH_IN, 5.2),
        sharex=True,
        gridspec_kw={"height_ratios": [2, 1]},
    )
    worst = _draw_losses(top, diff, report)
    for ax in (top, diff):
        for s in range(1, report.spec.steps):
            ax.axvline(s * m - 0.5, color="grey", lw=0.8, ls=":")
    _label_losses(top, diff, report, worst)
    handles, _ = top.get_legend_handles_labels()
    style.legend_below(fig, handles, ncol=min(3, len(handles)))
    return fig


def _bytes_title(frame: pd.DataFrame) -> str:
    """What the pool holds of stock's receive bytes, and whether the model predicts it exactly."""
    saved = (frame.stock_bytes - frame.pooled_bytes).sum() / 2**10
    same = bool((frame.pooled_bytes == frame.model_pooled_bytes).all())
    stock = frame["stock_bytes"].sum() / 2**10
    if same:
        model = "the model predicts every stage's pooled bytes exactly"
    else:
        model = "the model DIFFERS from the measured pooled bytes"
    return (
        f"The pool holds {stock - saved:,.0f} of stock's {stock:,.0f} KiB of receive buffers "
        f"(saves {saved:,.0f} KiB);\n" + model + " (both directions per stage)"
    )


def bytes_figure(report: ParityReport) -> Figure:
    """Measured receive-buffer KiB per stage (both directions), stock and pooled, with the model's
    pooled KiB."""
    import numpy as np

    frame = (
        bytes_frame(report)
        .groupby("stage", as_index=False)[["stock_bytes", "pooled_bytes", "model_pooled_bytes"]]
        .sum()
    )
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 3.8))
    x = np.arange(len(frame))
    measured = (
        ("stock", "stock_bytes", "stock torch, measured"),
        ("tight", "pooled_bytes", "pooled, measured"),
    )
    for k, (key, col, text) in enumerate(measured):
        bars = ax.bar(
            x + (k - 0.5) * 0.38, frame[col] / 2**10, 0.38, color=style.colour(key), label=text
        )
        style.bar_value_labels(ax, bars, "{:,.0f}")
    ax.hlines(
        frame["model_pooled_bytes"] / 2**10,
        x + 0.02,
        x + 0.36,
        colors="black",
        linestyles="--",
        lw=1.5,
        label="pooled, modelled (pooltk.memory.model.expected_bytes)",
        zorder=3,
    )
    ax.set_xticks(x, [str(s) for s in frame["stage"]])
    ax.set_ylim(0, frame["stock_bytes"].max() / 2**10 * 1.2)
    ax.set_xlabel("stage (index)")
    ax.set_ylabel("receive buffers (KiB, 2**10 B)")
    ax.set_title(_bytes_title(frame), fontsize=10)
    style.legend_below(fig, ax.get_legend_handles_labels()[0], ncol=2)
    return fig


# --------------------------------------------------------------------------- negative controls


def _control_of(variant_name: str) -> str:
    """The series of a negative control's variant (its label names the control in tables too)."""
    return "gpipe_forced" if "/gpipe/" in variant_name else "ring_one_short"


def divergence_frame(report: ParityReport) -> pd.DataFrame:
    """Per control, step and stage: |pooled - stock| parameter sum, and the step's max |loss
    difference|."""
    import pandas as pd

    rows = []
    for v in report.variants:
        if not v.pooled:
            continue
        ref = stock_of(report, v.name)
        for step in range(report.spec.steps):
            dloss = max(abs(a - b) for a, b in zip(v.losses[step], ref.losses[step]))
            for stage in sorted(v.param_sums):
                rows.append(
                    {
                        "control": style.label(_control_of(v.name)),
                        "variant": v.name,
                        "step": step,
                        "stage": stage,
                        "param_sum_abs_diff": abs(
                            v.param_sums[stage][step] - ref.param_sums[stage][step]
                        ),
                        "loss_max_abs_diff": dloss,
                    }
                )
    return pd.DataFrame(rows)


def divergence_figure(report: ParityReport) -> Figure:
    """Guard off: each control's loss per step beside stock's, and how far it drifted, in % of the
    loss.

    Both axes are linear. Left: the mean loss of each step's microbatches, stock as a line and each
    control as markers, on the loss's own scale. Right: the largest |control - stock| microbatch
    loss of each step, as a percentage of stock's mean loss that step (0: bitwise equal).
    """
    stock = next(v for v in report.variants if not v.pooled)
    stock_mean = [sum(step) / len(step) for step in stock.losses]
    steps = list(range(report.spec.steps))
    fig, (losses, drift) = canvas.subplots(1, 2, figsize=(style.FIGURE_WIDTH_IN, 4.0))
    losses.plot(steps, stock_mean, lw=3, color=style.colour("stock"), label=style.label("stock"))
    worst = 0.0
    markers = iter("osD^v")
    for v in report.variants:
        if not v.pooled:
            continue
        key = _control_of(v.name)
        ref = stock_of(report, v.name)
        mean = [sum(step) / len(step) for step in v.losses]
        pct = [
            100 * max(abs(a - b) for a, b in zip(mine, theirs)) / (sum(theirs) / len(theirs))
            for mine, theirs in zip(v.losses, ref.losses)
        ]
        worst = max(worst, *pct)
        mk = next(markers)
        common = dict(marker=mk, color=style.colour(key), label=style.label(key))
        losses.plot(steps, mean, ls="--", ms=7, mfc="none", mew=1.8, **common)
        drift.plot(steps, pct, lw=1.5, ms=5, **common)
    losses.set_ylabel("loss, step mean (MSE)")
    losses.set_title("the loss on its own scale", fontsize=9.5)
    drift.set_ylabel("max |Δ loss| (% of stock's loss)")
    drift.set_title("the drift, as a share of the loss (0: bitwise equal)", fontsize=9.5)
    drift.set_ylim(0, max(worst, 0.1) * 1.2)
    for ax in (losses, drift):
        ax.set_xticks(steps)
        ax.set_xlabel("optimizer step (index)")
    fig.suptitle(
        f"Guard off, nothing fails: from step 1 both controls' losses drift from stock's, by up to "
        f"{worst:.2g}% by step {steps[-1]}\n(pp{report.spec.pp}, M={report.spec.microbatches}; "
        "step 0 matches: its forwards read each buffer before the overwrite)",
        fontsize=10,
    )
    style.legend_below(fig, losses.get_legend_handles_labels()[0], ncol=3, top=0.9)
    return fig


def outcome_frame(outcomes: list[ControlOutcome]) -> pd.DataFrame:
    """Guard on: one readable row per control (caught?, where, which microbatches)."""
    import pandas as pd

    cols = [
        "control",
        "caught",
        "error_type",
        "rank",
        "stage",
        "direction",
        "slot",
        "ring",
        "owner",
        "incoming",
        "wall_s",
    ]
    return pd.DataFrame([{c: getattr(o, c) for c in cols} for o in outcomes], columns=cols)


# ---------------------------------------------------------------- three ways: stock, fresh, pooled

THREE_WAY_MODELS: dict[str, tuple[str, tuple[str, ...]]] = {
    "plain": ("residual blocks, nothing kept", ("block", "block", "block")),
    "hooks": (
        "a gradient hook on the received input, every forward",
        ("block", "grad_hook", "block"),
    ),
    "window": ("the previous step's inputs kept in a list", ("block", "keep_window", "block")),
    "prev": ("the previous microbatch's input kept, detached", ("block", "keep_prev", "block")),
}
"""Models of the three-way comparison: key -> (what the middle stage does, stage bodies)."""


def run_three_way_models(
    *,
    microbatches: int = 6,
    steps: int = 3,
    slack: int = 0,
    timeout_s: float = 300.0,
):
    """Stock, fresh (a new buffer per receive) and pooled for each model of
    :data:`THREE_WAY_MODELS`, judged.

    One launch (pp3, 1F1B) for all models, and a second one, pooled vs fresh, for the models
    whose stock numbers differ from fresh. Returns a :class:`pooltk.parity.summary.ThreeWay`.
    """
    from pooltk.parity import Variant
    from pooltk.parity.summary import run_three_way

    variants: tuple = ()
    for key, (_, bodies) in THREE_WAY_MODELS.items():
        variants += (
            Variant(name=f"stock/{key}", bodies=bodies),
            Variant(
                name=f"pooled/{key}",
                bodies=bodies,
                pooled=True,
                config=PoolConfig(slack=slack, grad_slack=0),
            ),
        )
    return run_three_way(
        ParitySpec(
            pp=3,
            microbatches=microbatches,
            steps=steps,
            hidden=8,
            seq_len=3,
            timeout_s=timeout_s,
            variants=variants,
        )
    )


def three_way_frame(three_way) -> pd.DataFrame:  # noqa: ANN001 - a ThreeWay
    """One row per model: stock == fresh, pooled == stock, pooled == fresh, the verdict and why."""
    import pandas as pd

    rows = []
    for j in three_way.judgements:
        key = j.variant.split("/", 1)[1]
        rows.append(
            {
                "model": key,
                "middle stage": THREE_WAY_MODELS.get(key, ("", ()))[0],
                "stock == fresh": j.stock_equal_fresh,
                "pooled == stock": j.equal_stock,
                "pooled == fresh": j.equal_fresh,
                "verdict": j.verdict,
                "reason": j.reason,
            }
        )
    return pd.DataFrame(rows)


def _draw_three_way_panel(ax: Any, report: ParityReport, key: str, verdict: str) -> None:
    """One model: per step, the largest |stock - fresh| and |pooled - fresh| parameter sum."""
    fresh = report.variant(f"fresh/{key}")
    for name, series, look in (
        ("stock", "stock", dict(lw=3, alpha=0.6)),
        ("pooled", "tight", dict(lw=1.5, marker="o")),
    ):
        v = report.variant(f"{name}/{key}")
        dist = [
            max(abs(v.param_sums[r][s] - fresh.param_sums[r][s]) for r in v.param_sums)
            for s in range(report.spec.steps)
        ]
        color, text = style.colour(series), f"|{name} - fresh|"
        ax.plot(range(report.spec.steps), dist, color=color, label=text, **look)
    ax.set_ylim(bottom=0)
    ax.set_title(f"{key}: {verdict}", fontsize=9)
    ax.set_xticks(range(report.spec.steps))


def three_way_figure(three_way) -> Figure:  # noqa: ANN001 - a ThreeWay
    """Per model and step: how far stock and pooled are from fresh (largest |parameter-sum
    difference| over ranks)."""

    report = three_way.report
    keys = [j.variant.split("/", 1)[1] for j in three_way.judgements]
    cols = 2
    rows = -(-len(keys) // cols)
    fig, axes = canvas.subplots(
        rows,
        cols,
        figsize=(style.FIGURE_WIDTH_IN, 2.3 * rows + 1.4),
        squeeze=False,
        sharey=True,
        sharex=True,
    )
    for ax, key, j in zip(axes.flat, keys, three_way.judgements):
        _draw_three_way_panel(ax, report, key, j.verdict)
    for ax in axes.flat[len(keys) :]:
        ax.set_visible(False)
    size = max(
        abs(x)
        for key in keys
        for sums in report.variant(f"fresh/{key}").param_sums.values()
        for x in sums
    )
    top = max(max(line.get_ydata()) for ax in axes.flat for line in ax.get_lines()) or 1.0
    axes[0, 0].set_ylim(0, top * 1.2)
    for ax in axes[:, 0]:
        ax.set_ylabel("|Δ param. sum| (abs.)", fontsize=9)
    for ax in axes[-1, :]:
        ax.set_xlabel("optimizer step (index)")
    fig.suptitle(
        "Pooled stays bitwise equal to fresh (a new buffer per receive) for every model; stock "
        "drifts where a model keeps\nsomething of its received input (largest |Δ| over ranks; "
        f"the parameter sums are up to {size:.2g} in size; pp3 1F1B)",
        fontsize=10,
    )
    style.legend_below(fig, axes[0, 0].get_legend_handles_labels()[0], ncol=2)
    return fig
