"""The original PR's two lifetime facts, each shown by a small in-process torch run (notebook 00).

Automodel PR #3780 states two facts its ring rests on:

1. "a forward recv buffer is live from irecv-post until that chunk's backward consumes the stage
   input (AC recompute reads it)": :func:`reuse_point` overwrites a received input, as the next
   receive into its slot would, either after the microbatch's backward (the ring's rule) or between
   its forward and its backward, with and without activation checkpointing, and compares every
   gradient with a fresh buffer's;
2. "grad accumulation on reused leaf buffers is impossible upstream -- stage_backward() harvests
   input grads and sets val.grad = None per chunk": :func:`leaf_reuse` runs torch's own
   ``stage_backward`` twice on one reused leaf and compares the gradient it hands upstream with a
   fresh leaf's, next to a plain ``backward`` that keeps ``.grad``.

[Note: a receive does not bump the version counter]
On gloo and NCCL a receive writes into its buffer without bumping the tensor's version counter
(torch-layouts.md, measured on 2.11-2.14), so autograd cannot see a premature overwrite. The
experiments write through ``tensor.data`` for that reason: same storage, no bump, as the receive.
The "guard's bump" case writes through the tensor itself, which bumps it (what pooltk's guard does
after each post): autograd then refuses the backward instead of computing from wrong data.

Each run is a few small CPU tensors (no process group); seeds are fixed, so the numbers repeat.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_int
from pooltk.nb import canvas, style

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "GRADIENTS",
    "REUSE_CASES",
    "LeafReuse",
    "ReuseRow",
    "leaf_reuse",
    "leaf_reuse_figure",
    "reuse_frame",
    "reuse_point",
    "reuse_point_figure",
]

REUSE_CASES: dict[str, str] = {
    case: style.label(f"reuse_{case}") for case in ("after", "before", "before_ac", "bumped")
}
"""The cases of :func:`reuse_point`: key -> what happened to the received buffer (its series'
label in :mod:`pooltk.nb.style`)."""
GRADIENTS: tuple[str, ...] = (
    "layer 1 weight",
    "layer 1 bias",
    "layer 2 weight",
    "layer 2 bias",
    "input (sent upstream)",
)
"""The gradients :func:`reuse_point` compares, in order."""


@dataclass(frozen=True, slots=True, kw_only=True)
class ReuseRow:
    """One gradient of one case of :func:`reuse_point`."""

    case: str
    """A key of :data:`REUSE_CASES`."""
    gradient: str
    """One of :data:`GRADIENTS`."""
    max_abs_diff: float | None
    """Largest |this case's gradient - a fresh buffer's|; ``None`` when autograd refused."""
    error: str | None
    """Autograd's error (first line) when it refused, else ``None``."""
    scale: float = 0.0
    """Largest |gradient| of a fresh buffer: the scale ``max_abs_diff`` is read against."""


def _sizes(hidden: int, rows: int) -> None:
    """The toy stage's sizes, each a whole number >= 1 (torch's own error is about max())."""
    check_int("hidden", hidden, low=1, fix="e.g. hidden=8.")
    check_int("rows", rows, low=1, fix="e.g. rows=4.")


def _stage(hidden: int) -> object:
    import torch

    return torch.nn.Sequential(
        torch.nn.Linear(hidden, hidden), torch.nn.Tanh(), torch.nn.Linear(hidden, hidden)
    )


def _gradients_after(
    stage: Any, x_a: Any, x_b: Any, grad_out: Any, case: str | None
) -> list[Any] | str:
    """Run ``stage`` on ``x_a`` received into a leaf buffer, overwrite that buffer with ``x_b``
    where ``case`` says, and backward ``grad_out``.

    Returns every parameter's gradient and the buffer's, or autograd's error (its first line)
    when it refuses. ``case`` ``None`` never overwrites: the fresh buffer.
    """
    import torch
    from torch.utils.checkpoint import checkpoint

    stage.zero_grad(set_to_none=True)
    buffer = x_a.clone().requires_grad_(True)
    out = checkpoint(stage, buffer, use_reentrant=False) if case == "before_ac" else stage(buffer)
    if case in ("before", "before_ac"):
        buffer.data.copy_(x_b)  # a receive: same storage, no version bump
    elif case == "bumped":
        with torch.no_grad():
            buffer.copy_(x_b)  # bumps the version counter, as the guard does
    try:
        out.backward(grad_out)
    except RuntimeError as exc:
        return str(exc).splitlines()[0]
    if case == "after":
        buffer.data.copy_(x_b)  # the ring's rule: the next receive lands after the backward
    return [p.grad.clone() for p in stage.parameters()] + [buffer.grad.clone()]


def reuse_point(*, hidden: int = 8, rows: int = 4, seed: int = 0) -> list[ReuseRow]:
    """Overwrite a received input at two points of its life; compare every gradient with a fresh
    one.

    One stage (Linear, Tanh, Linear) receives microbatch ``a`` into a leaf buffer, runs its forward,
    then gets the next stage's output gradient and runs its backward. The next receive into the same
    slot (microbatch ``b``'s data) lands either after that backward or between the forward and the
    backward ([Note: a receive does not bump the version counter]).
    """
    import torch

    _sizes(hidden, rows)
    torch.manual_seed(seed)
    stage = _stage(hidden)
    x_a, x_b, grad_out = (
        torch.randn(rows, hidden),
        torch.randn(rows, hidden),
        torch.randn(rows, hidden),
    )
    fresh = _gradients_after(stage, x_a, x_b, grad_out, None)
    assert not isinstance(fresh, str)
    rows_out = []
    for case in REUSE_CASES:
        got = _gradients_after(stage, x_a, x_b, grad_out, case)
        refused = got if isinstance(got, str) else None
        for i, name in enumerate(GRADIENTS):
            diff = None if refused is not None else float((got[i] - fresh[i]).abs().max())
            scale = float(fresh[i].abs().max())
            rows_out.append(
                ReuseRow(case=case, gradient=name, max_abs_diff=diff, error=refused, scale=scale)
            )
    return rows_out


def reuse_frame(rows: list[ReuseRow]) -> pd.DataFrame:
    """One row per case: max |difference from a fresh buffer| per gradient, or what autograd said.

    The first row is the scale: the largest |gradient| a fresh buffer gives, per gradient.
    """
    import pandas as pd

    scale = {r.gradient: r.scale for r in rows}
    out = [
        {
            "case": "scale: max |gradient| with a fresh buffer",
            **{g: f"{scale[g]:.3g}" for g in GRADIENTS},
            "autograd": "ran",
        }
    ]
    for case, text in REUSE_CASES.items():
        mine = {r.gradient: r for r in rows if r.case == case}
        error = next((r.error for r in mine.values() if r.error), None)
        out.append(
            {
                "case": text,
                **{g: (f"{mine[g].max_abs_diff:.3g}" if error is None else "-") for g in GRADIENTS},
                "autograd": "ran" if error is None else f"refused: {error.split(':')[0]}",
            }
        )
    return pd.DataFrame(out)


def reuse_point_figure(rows: list[ReuseRow]) -> Figure:
    """Grouped bars: per gradient, how far each silent-reuse case is from a fresh buffer (0:
    equal)."""
    import numpy as np

    cases = [c for c in REUSE_CASES if all(r.error is None for r in rows if r.case == c)]
    refused = [c for c in REUSE_CASES if c not in cases]
    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 3.9))
    x = np.arange(len(GRADIENTS))
    width = 0.8 / len(cases)
    top = 0.0
    for k, case in enumerate(cases):
        values = [
            next(r.max_abs_diff for r in rows if r.case == case and r.gradient == g)
            for g in GRADIENTS
        ]
        top = max(top, *values)
        bars = ax.bar(
            x + (k - (len(cases) - 1) / 2) * width,
            values,
            width,
            color=style.colour(f"reuse_{case}"),
            label=REUSE_CASES[case],
        )
        style.bar_value_labels(ax, bars, labels=["0" if v == 0 else f"{v:.2g}" for v in values])
    scale = {r.gradient: r.scale for r in rows}
    ax.set_xticks(x, [f"{g}\n(|gradient| up to {scale[g]:.2g})" for g in GRADIENTS], fontsize=7.5)
    ax.set_ylim(0, top * 1.2 or 1)
    ax.set_xlabel("gradient of the stage (microbatch a), with its own scale")
    ax.set_ylabel("max |Δ gradient| (abs.)")
    note = "; ".join(f"{REUSE_CASES[c]}: autograd refuses the backward" for c in refused)
    ax.set_title(
        "Overwriting the received input before its backward changes the gradients; after it, "
        "nothing (Δ: against a fresh buffer)\n" + (note or "every case ran"),
        fontsize=9.5,
    )
    style.legend_below(fig, ax.get_legend_handles_labels()[0], ncol=1)
    return fig


@dataclass(frozen=True, slots=True, kw_only=True)
class LeafReuse:
    """One reused leaf, two microbatches, torch's ``stage_backward`` against a plain backward."""

    diff_stage_backward: tuple[float, float]
    """Per use (first, reuse): max |gradient sent upstream - a fresh leaf's|, via
    ``stage_backward``."""
    diff_plain: tuple[float, float]
    """The same through ``torch.autograd.backward`` reading ``.grad`` (no reset between uses)."""
    grad_after_stage_backward: str
    """What ``leaf.grad`` is after torch's ``stage_backward`` returned (``None``: reset)."""
    scale: float = 0.0
    """Largest |gradient| a fresh leaf sends upstream (either microbatch): the diffs' scale."""


def leaf_reuse(*, hidden: int = 8, rows: int = 4, seed: int = 0) -> LeafReuse:
    """Reuse one leaf for two microbatches; compare the gradients sent upstream with fresh leaves'.

    Raises:
        ImportError: this torch has no ``torch.distributed.pipelining._backward.stage_backward`` (it
            moved); the fact is then unchecked here.
    """
    import torch

    _sizes(hidden, rows)
    try:
        from torch.distributed.pipelining._backward import stage_backward
    except ImportError as exc:  # pragma: no cover - a torch that moved it
        raise ImportError(
            f"leaf_reuse: found no torch.distributed.pipelining._backward.stage_backward in torch "
            f"{torch.__version__}; required torch's own function to test. Fix: update this "
            "experiment to where the function lives now."
        ) from exc
    torch.manual_seed(seed)
    layer = torch.nn.Linear(hidden, hidden)
    inputs = [torch.randn(rows, hidden) for _ in range(2)]
    grads = [torch.randn(rows, hidden) for _ in range(2)]

    def fresh(x: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
        leaf = x.clone().requires_grad_(True)
        layer(leaf).backward(g)
        return leaf.grad.clone()

    want = [fresh(x, g) for x, g in zip(inputs, grads)]
    out: dict[str, list[float]] = {}
    after = "not run"
    for method in ("stage_backward", "plain"):
        leaf = torch.zeros(rows, hidden).requires_grad_(True)
        diffs = []
        for x, g, w in zip(inputs, grads, want):
            leaf.data.copy_(x)  # the next receive into the same slot
            y = layer(leaf)
            if method == "stage_backward":
                sent = stage_backward(y, g, [leaf])[0]
                after = repr(leaf.grad)
            else:
                torch.autograd.backward(y, g)
                sent = leaf.grad
            diffs.append(float((sent - w).abs().max()))
        out[method] = diffs
    return LeafReuse(
        diff_stage_backward=tuple(out["stage_backward"]),
        diff_plain=tuple(out["plain"]),
        grad_after_stage_backward=after,
        scale=max(float(w.abs().max()) for w in want),
    )


def leaf_reuse_figure(result: LeafReuse) -> Figure:
    """Bars per use of the leaf: torch's stage_backward (0 both times) against a plain backward."""
    import numpy as np

    fig, ax = canvas.subplots(figsize=(style.FIGURE_WIDTH_IN, 4.2))
    x = np.arange(2)
    series = (
        ("leaf_stage_backward", result.diff_stage_backward),
        ("leaf_plain", result.diff_plain),
    )
    for k, (key, values) in enumerate(series):
        bars = ax.bar(
            x + (k - 0.5) * 0.38, values, 0.38, color=style.colour(key), label=style.label(key)
        )
        style.bar_value_labels(ax, bars, labels=["0" if v == 0 else f"{v:.2g}" for v in values])
    ax.set_xticks(x, ["first microbatch in the slot", "next microbatch in the same slot"])
    ax.set_ylim(0, max(*result.diff_plain, *result.diff_stage_backward) * 1.25 or 1)
    ax.set_xlabel("use of one receive buffer (a leaf of the stage's autograd graph)")
    ax.set_ylabel("max |Δ grad sent| (abs.)")
    ax.set_title(
        "A reused buffer accumulates nothing: torch's stage_backward sets the leaf's .grad to "
        f"None after each microbatch (.grad after it: {result.grad_after_stage_backward})\n"
        "(Δ: against a fresh "
        f"leaf; the gradient sent upstream is up to {result.scale:.2g} in size)",
        fontsize=9.5,
    )
    style.legend_below(fig, ax.get_legend_handles_labels()[0], ncol=1)
    return fig
