"""Your own expected figures, judged against your runs the way notebook 03 judges the Kimi-K3
claims.

A small table, one row per figure: ``name`` (what you expect, in words), ``run`` (the run's name as
``pooltk logs`` reads it), ``quantity`` (one of :data:`QUANTITIES`), ``value`` (as you would write
it: ``495.7``, ``~135``), ``unit``, ``source`` (where the number comes from) and, optionally,
``tolerance`` (``5%`` relative, or an absolute amount in the unit). Rows come from a CSV file or a
list of dicts (notebook 03's ``EXPECTED_FIGURES``); :func:`judge` reads each figure off the run's
summary (:func:`pooltk.logs.metrics.summarize`) and returns the same
:class:`~pooltk.studies.kimi_k3.Ledger` the K3 claims use, so both tables read alike.

[Note: agreement of expected figures]
As in the claims ledger ([Note: agreement] in :mod:`pooltk.studies.kimi_k3`): a plain number
agrees when the run's figure rounds to it at the precision it was written with (half a unit in
its last digit: ``0.645`` is met by 0.6446 and 0.6454); a number written with ``~`` or ``about``
agrees within 5 %; a ``tolerance`` given in the row replaces either rule. The rule applied is
written in the row. Bad input (an unknown run or quantity, a unit that is not the quantity's, a
value that is not a number) is refused with what was found, what is required and the fix.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import InputError
from pooltk.studies.kimi_k3 import Claim, Ledger

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "ABSENT_RUNS",
    "APPROX_TOLERANCE",
    "COLUMNS",
    "QUANTITIES",
    "ExpectedFigure",
    "expected_frame",
    "judge",
    "judged_frame",
    "load_expected",
]

QUANTITIES: dict[str, tuple[str, tuple[str, ...]]] = {
    "tok_per_s_per_gpu": (
        "tokens/s per physical GPU, steady window",
        ("tok/s/GPU", "tok/s per GPU", "tokens/s/GPU"),
    ),
    "mfu_pct": ("MFU on the FLOPs basis and peak given", ("%",)),
    "peak_mem_gib": ("peak memory as the log measures it", ("GiB",)),
    "step_time_median_s": ("median seconds per step, steady window", ("s",)),
    "final_loss": ("the loss of the last step", ("", "loss")),
    "n_steps": ("training steps logged", ("steps",)),
}
"""What a figure may be about: quantity (a column of the run summary) -> (what it is, units
accepted)."""
COLUMNS: tuple[str, ...] = ("name", "run", "quantity", "value", "unit", "source")
"""Required columns; ``tolerance`` is optional."""
APPROX_TOLERANCE = 0.05
"""Relative tolerance of a figure written with ``~`` or ``about`` (no tolerance of its own)."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ExpectedFigure:
    """One figure you expect a run to show."""

    name: str
    """What you expect, in words."""
    run: str
    """The run it is about."""
    quantity: str
    """A key of :data:`QUANTITIES`."""
    value: str
    """The value as written (its precision and any ``~`` matter)."""
    unit: str
    """Its unit (one :data:`QUANTITIES` accepts for the quantity)."""
    source: str
    """Where the number comes from."""
    tolerance: str = ""
    """``5%``, an absolute amount in the unit, or empty for the default rule."""

    @property
    def number(self) -> float:
        """The value as a float."""
        return float(_NUMBER.search(self.value).group(0))  # type: ignore[union-attr]

    @property
    def approximate(self) -> bool:
        """Written with ``~`` or ``about``."""
        return self.value.strip().lower().startswith(("~", "about"))

    def rule(self) -> tuple[str, float]:
        """The agreement rule in words and the largest |difference| it allows (see [Note: agreement
        of expected figures])."""
        tol = self.tolerance.strip()
        if tol.endswith("%"):
            rel = float(tol[:-1]) / 100
            return f"within {tol} (given)", abs(self.number) * rel
        if tol:
            return f"within {tol} {self.unit} (given)".replace("  ", " "), float(tol)
        if self.approximate:
            allowed = abs(self.number) * APPROX_TOLERANCE
            return f"within {APPROX_TOLERANCE:.0%} (written approximate)", allowed
        digits = _NUMBER.search(self.value).group(0)  # type: ignore[union-attr]
        decimals = len(digits.split(".", 1)[1]) if "." in digits else 0
        allowed = 0.5 * 10 ** (-decimals) + 1e-12
        return f"rounds to {digits} (half a unit in the last digit written)", allowed


_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")


def _fail(row: int, field: str, found: str, required: str, fix: str) -> InputError:
    return InputError(f"expected figure {row} {field}", found=found, required=required, fix=fix)


def _records(source: str | Path | Iterable[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The rows of a CSV file (every field text) or of a list of dicts."""
    if not isinstance(source, (str, Path)):
        if not isinstance(source, Iterable):
            raise _not_rows(type(source).__name__)
        rows = list(source)
        odd = sorted({type(r).__name__ for r in rows if not isinstance(r, Mapping)})
        if odd:
            raise _not_rows(f"{type(source).__name__} holding {', '.join(odd)}")
        return [dict(r) for r in rows]
    import pandas as pd

    path = Path(source)
    if not path.is_file():
        raise InputError(
            "expected figures file",
            found=repr(str(path)),
            required="a CSV file with columns " + ", ".join(COLUMNS),
            fix="check EXPECTED_FILE / --expected",
        )
    return pd.read_csv(path, dtype=str, keep_default_na=False).to_dict("records")


def _not_rows(found: str) -> InputError:
    return InputError(
        "expected figures",
        found=found,
        required="a CSV file's path, or a list of dicts with columns " + ", ".join(COLUMNS),
        fix="pass EXPECTED_FILE as a path, or one dict per figure",
    )


def _row_figure(i: int, rec: Mapping[str, Any]) -> ExpectedFigure:
    """Row ``i`` as a figure, its fields stripped; every column of :data:`COLUMNS` required."""
    missing = [c for c in COLUMNS if c not in rec]
    if missing:
        raise _fail(
            i,
            "columns",
            f"missing {missing}",
            f"{', '.join(COLUMNS)} (and optionally tolerance)",
            "add the missing fields",
        )
    return ExpectedFigure(
        **{k: str(rec[k]).strip() for k in COLUMNS},
        tolerance=str(rec.get("tolerance", "") or "").strip(),
    )


def _check_figure(i: int, fig: ExpectedFigure) -> None:
    """Row ``i``'s quantity, unit, value, tolerance and source are ones :func:`judge` can use."""
    if fig.quantity not in QUANTITIES:
        raise _fail(
            i,
            "quantity",
            repr(fig.quantity),
            f"one of {', '.join(QUANTITIES)}",
            "use a summary column",
        )
    units = QUANTITIES[fig.quantity][1]
    if fig.unit not in units:
        raise _fail(
            i,
            "unit",
            f"{fig.unit!r} for {fig.quantity}",
            f"one of {units}",
            "convert the value to the quantity's unit",
        )
    if not _NUMBER.fullmatch(re.sub(r"^(~|about)\s*", "", fig.value.strip(), flags=re.I)):
        raise _fail(
            i,
            "value",
            repr(fig.value),
            "a number, optionally written ~N or about N",
            "write e.g. 0.645",
        )
    tol = fig.tolerance
    if tol and not _NUMBER.fullmatch(tol.removesuffix("%")):
        raise _fail(i, "tolerance", repr(tol), "N% or an absolute amount", "write e.g. 5% or 0.01")
    if not fig.source:
        raise _fail(
            i, "source", "empty", "where the number comes from", "name the log, run or document"
        )


def load_expected(source: str | Path | Iterable[Mapping[str, Any]] | None) -> list[ExpectedFigure]:
    """Your expected figures from a CSV file (the :data:`COLUMNS`, optionally ``tolerance``) or a
    list of dicts.

    ``None`` gives no figures. Every row is checked before anything is judged.
    """
    if source is None:
        return []
    out = []
    for i, rec in enumerate(_records(source), 1):
        fig = _row_figure(i, rec)
        _check_figure(i, fig)
        out.append(fig)
    return out


ABSENT_RUNS = ("refuse", "not applicable")
"""What :func:`judge` does with a figure whose run the logs do not have: refuse it (a typo is an
error), or list it as not applicable (notebook 03's example rows, when you read other logs)."""


def judge(
    expected: Iterable[ExpectedFigure], summary: Any, *, absent_runs: str = "refuse"
) -> Ledger:
    """Each expected figure against the run's figure in ``summary`` (a
    :class:`pooltk.logs.metrics.Summary`); ``absent_runs`` is one of :data:`ABSENT_RUNS`."""
    if absent_runs not in ABSENT_RUNS:
        raise InputError(
            "absent_runs",
            found=repr(absent_runs),
            required=f"one of {list(ABSENT_RUNS)}",
            fix="pass 'refuse' or 'not applicable'",
        )
    frame = summary.to_frame().set_index("run")
    runs = [str(r) for r in frame.index]
    claims = []
    for fig in expected:
        if fig.run not in frame.index:
            if absent_runs == "refuse":
                raise InputError(
                    f"expected figure {fig.name!r} run",
                    found=repr(fig.run),
                    required=f"one of {runs}",
                    fix="name a run as the files table shows it",
                )
            said = (
                f"not applicable: the logs read have no run {fig.run!r} (runs: {', '.join(runs)})"
            )
            inputs, rule, agrees = f"{fig.quantity} of {fig.run}", "-", None
        else:
            got = float(frame.loc[fig.run, fig.quantity])
            rule, allowed = fig.rule()
            basis = QUANTITIES[fig.quantity][0]
            if fig.quantity == "peak_mem_gib":
                basis = f"peak memory: {frame.loc[fig.run, 'mem_basis']}"
            inputs = f"{fig.quantity} of {fig.run} ({basis})"
            agrees = None if math.isnan(got) else abs(got - fig.number) <= allowed
            said = "not in the log" if math.isnan(got) else f"{got:.10g} {fig.unit}".strip()
        claims.append(
            Claim(
                claim=fig.name,
                source=fig.source,
                inputs=inputs,
                published=f"{fig.value} {fig.unit}".strip(),
                pooltk=said,
                agrees=agrees,
                rule=rule,
            )
        )
    return Ledger(claims=tuple(claims))


def expected_frame(expected: Iterable[ExpectedFigure]) -> pd.DataFrame:
    """The figures as a table (what was given)."""
    import pandas as pd

    return pd.DataFrame(
        [
            {
                "name": f.name,
                "run": f.run,
                "quantity": f.quantity,
                "value": f.value,
                "unit": f.unit,
                "source": f.source,
                "tolerance": f.tolerance or "-",
            }
            for f in expected
        ]
    )


def judged_frame(
    expected: Iterable[ExpectedFigure], summary: Any, *, absent_runs: str = "refuse"
) -> pd.DataFrame:
    """:func:`judge` as a table whose columns say what they hold: figure, source, read from,
    expected, your logs, agrees, rule."""
    names = {
        "claim": "figure",
        "inputs": "read from",
        "published": "expected",
        "pooltk": "your logs",
    }
    return judge(expected, summary, absent_runs=absent_runs).to_frame().rename(columns=names)
