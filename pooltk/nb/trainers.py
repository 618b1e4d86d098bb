"""Notebook views of the trainer integration suite (notebooks/05_trainers_side_by_side.ipynb).

The table is the one ``scripts/integration`` writes (``reports/integration/<trainer>/rows.csv``):
one row per (trainer, pipeline size, variant, stage). The recorded run ships as package data
(``pooltk/integrations/data/trainers_*.csv``, a link to ``data/validation/``) so the notebook
runs headless without the trainer venvs.

[Note: what the columns prove]
``losses_equal_stock`` / ``params_equal_stock`` compare float bit patterns and a sha256 of every
parameter byte with the stock run of the same schedule (same seeds), so True means bitwise
equality, not closeness. ``claim_ok`` is the suite's verdict for the variant: bitwise equality
for pooled variants, silent divergence for Automodel's pool forced under GPipe, and
``PoolOverrunError`` on some rank for pooltk forced under GPipe. ``eval_equal_stock`` (the
``*_alias_eval`` variants only) compares a sha256 of the merged output of one forward-only step
whose last stage returns a view of its received input with the stock run of that step; the
suite's verdict for Automodel's pool there is a silent difference, for pooltk bitwise equality.
Records since ``trainers_2026-12-01b`` also judge three ways (``equal_fresh``, ``verdict``,
``reason``: [Note: trainer verdicts] in tools/integration/run_suite.py); rows with
``pool_impl == "fresh"`` (a new buffer per receive) are references, not pooled.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd
    from matplotlib.figure import Figure

__all__ = [
    "COLUMNS_SIDE_BY_SIDE",
    "bytes_figure",
    "claims",
    "load_logs",
    "load_table",
    "recorded_tables",
    "side_by_side",
]

SIDE_BY_SIDE: dict[str, tuple[str, str]] = {
    "stock": ("stock", "stock"),
    "automodel_pool_s2": ("automodel pool (slack 2)", "automodel"),
    "automodel_pool_s0": ("automodel pool (slack 0)", "automodel_s0"),
    "pooltk_tight": ("pooltk tight (slack 2, grad 1)", "tight"),
    "pooltk_automodel_policy": ("pooltk automodel policy", "pooltk_automodel"),
    "pooltk_live": ("live set (pooltk slack 0)", "live_set"),
}
"""Each variant :func:`side_by_side` shows -> its column and its series in :mod:`pooltk.nb.style`
(one colour in every panel)."""
COLUMNS_SIDE_BY_SIDE = [column for column, _ in SIDE_BY_SIDE.values()]
REQUIRED = (
    "trainer",
    "pp",
    "variant",
    "stage",
    "recv_bytes",
    "losses_equal_stock",
    "params_equal_stock",
    "step_time_ratio",
    "outcome",
    "claim_ok",
)


LOG_REQUIRED = (
    "pp",
    "variant",
    "n_steps",
    "first_step",
    "last_step",
    "pool_read",
    "pool_expected",
    "claim_ok",
)


def recorded_tables(kind: str = "rows") -> list[str]:
    """Names of the recorded tables shipped with pooltk, oldest first.

    ``kind="rows"``: the suite's rows (``trainers_<date>.csv``); ``"logs"``: what ``pooltk logs``
    read from each torchtitan launch's own log (``trainers_<date>_logs.csv``).
    """
    folder = resources.files("pooltk.integrations") / "data"
    names = [
        p.name
        for p in folder.iterdir()
        if p.name.startswith("trainers_") and p.name.endswith(".csv")
    ]
    return sorted(n for n in names if n.endswith("_logs.csv") == (kind == "logs"))


def _newest(kind: str, what: str, required: str, fix: str) -> "pd.DataFrame":
    """The newest recorded table of ``kind`` (:func:`recorded_tables`); refused when none ships."""
    import pandas as pd

    names = recorded_tables(kind)
    if not names:
        raise InputError(what, found="none shipped", required=required, fix=fix)
    with (resources.files("pooltk.integrations") / "data" / names[-1]).open() as f:
        return pd.read_csv(f)


def _checked(
    table: "pd.DataFrame", what: str, columns: tuple[str, ...], fix: str
) -> "pd.DataFrame":
    missing = [c for c in columns if c not in table.columns]
    if missing:
        raise InputError(what, found=f"missing {missing}", required=", ".join(columns), fix=fix)
    return table


def load_logs() -> "pd.DataFrame":
    """The newest recorded logs table: per torchtitan launch, the steps and pool tag ``pooltk logs``
    read."""
    run = (
        "run TRAINERS=torchtitan bash scripts/integration; read "
        "reports/integration/torchtitan/logs.csv."
    )
    table = _newest("logs", "recorded logs table", "a trainers_*_logs.csv", run)
    record = "record logs.csv written by tools/integration/titan_suite.py."
    return _checked(table, "logs table columns", LOG_REQUIRED, record)


def load_table(path: str | Path | None = None) -> "pd.DataFrame":
    """The suite's table: ``path`` (a rows.csv from scripts/integration) or the newest recorded
    one."""
    import pandas as pd

    if path is None:
        fix = "run bash scripts/integration and pass reports/integration/<trainer>/rows.csv."
        table = _newest("rows", "recorded trainer table", "a trainers_*.csv", fix)
    else:
        path = Path(path)
        if not path.is_file():
            raise InputError(
                "trainer table",
                found=str(path),
                required="an existing rows.csv",
                fix="run bash scripts/integration first, or call load_table() for the recorded "
                "run.",
            )
        table = pd.read_csv(path)
    fix = "pass a rows.csv written by tools/integration/run_suite.py."
    return _checked(table, "trainer table columns", REQUIRED, fix)


def side_by_side(table: "pd.DataFrame") -> "pd.DataFrame":
    """Receive bytes per stage: stock, Automodel's pool, pooltk, the live set (one row per
    stage)."""
    rows = table[table["variant"].isin(SIDE_BY_SIDE) & (table["outcome"] == "ok")].copy()
    rows["column"] = rows["variant"].map({v: c for v, (c, _) in SIDE_BY_SIDE.items()})
    wide = rows.pivot_table(
        index=["trainer", "pp", "stage"], columns="column", values="recv_bytes", aggfunc="first"
    )
    return wide[[c for c in COLUMNS_SIDE_BY_SIDE if c in wide.columns]].reset_index()


def claims(table: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (trainer, pp, variant): parity, outcome, worst step-time ratio, the suite's
    verdict."""

    def _all(s):
        vals = [v for v in s if v == v and v != ""]
        return all(str(v) == "True" for v in vals) if vals else None

    def _worst(s):
        from pooltk.parity.summary import VERDICTS

        vals = [v for v in s if isinstance(v, str) and v in VERDICTS]
        return max(vals, key=VERDICTS.index) if vals else ""

    grouped = table.groupby(["trainer", "pp", "variant"], sort=False)
    out = grouped.agg(
        schedule=("schedule", "first"),
        pool_impl=("pool_impl", "first"),
        losses_equal_stock=("losses_equal_stock", _all),
        params_equal_stock=("params_equal_stock", _all),
        **(
            {"eval_equal_stock": ("eval_equal_stock", _all)}
            if "eval_equal_stock" in table.columns
            else {}
        ),
        step_time_ratio_max=("step_time_ratio", "max"),
        outcome=("outcome", lambda s: ", ".join(sorted(set(map(str, s))))),
        **({"verdict": ("verdict", _worst)} if "verdict" in table.columns else {}),
        claim_ok=("claim_ok", lambda s: all(str(v) == "True" for v in s)),
    )
    return out.reset_index()


def _draw_trainer_panel(ax: Any, trainer: str, pp: int, part: "pd.DataFrame") -> list[str]:
    """One (trainer, pp): a bar group per stage of every series it has (KiB); returns those
    series' columns."""
    import numpy as np

    from pooltk.nb import style

    series_of = dict(SIDE_BY_SIDE.values())
    present = [c for c in COLUMNS_SIDE_BY_SIDE if c in part.columns and part[c].notna().any()]
    x = np.arange(len(part))
    width = 0.84 / len(present)
    for k, column in enumerate(present):
        ax.bar(
            x + (k - (len(present) - 1) / 2) * width,
            part[column].fillna(0) / 2**10,
            width,
            color=style.colour(series_of[column]),
            label=column,
        )
    ax.set_xticks(x, [str(s) for s in part["stage"]])
    ax.set_ylim(0, float(part[present].max().max()) / 2**10 * 1.1)
    ax.set_title(f"{trainer}, pp{pp}", fontsize=10)
    ax.set_xlabel("stage (index)")
    ax.set_ylabel("receive buffers (KiB)")
    return present


def bytes_figure(table: "pd.DataFrame") -> "Figure":
    """Receive KiB per stage, one panel per (trainer, pp): stock, Automodel's pool, pooltk, the live
    set.

    Every series has its one colour in every panel ([Note: one colour per series] in
    :mod:`pooltk.nb.style`); a panel leaves out what its trainer lacks (Automodel's pool has no
    torchtitan column) and the one legend lists every series any panel drew.
    """
    from pooltk.nb import canvas, style

    wide = side_by_side(table)
    groups = list(wide.groupby(["trainer", "pp"], sort=False))
    cols = 2
    rows = -(-len(groups) // cols)
    fig, axes = canvas.subplots(
        rows, cols, figsize=(style.FIGURE_WIDTH_IN, 2.9 * rows + 1.3), squeeze=False
    )
    drawn: set[str] = set()
    for ax, ((trainer, pp), part) in zip(axes.flat, groups):
        drawn.update(_draw_trainer_panel(ax, trainer, pp, part))
    for ax in axes.flat[len(groups) :]:
        ax.set_visible(False)
    order = [c for c in COLUMNS_SIDE_BY_SIDE if c in drawn]
    handles = [
        next(h for ax in axes.flat for h, lab in zip(*ax.get_legend_handles_labels()) if lab == c)
        for c in order
    ]
    fig.suptitle(
        "receive buffers per stage inside the real trainers, measured on the ranks (M=8)",
        fontsize=10.5,
    )
    style.legend_below(fig, handles, ncol=3)
    return fig
