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
``PoolOverrunError`` on some rank for pooltk forced under GPipe.
"""

from __future__ import annotations

from importlib import resources
from pathlib import Path
from typing import TYPE_CHECKING

from pooltk._validate import InputError

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["COLUMNS_SIDE_BY_SIDE", "claims", "load_table", "recorded_tables", "side_by_side"]

SIDE_BY_SIDE: dict[str, str] = {
    "stock": "stock",
    "automodel_pool_s2": "automodel pool (slack 2)",
    "automodel_pool_s0": "automodel pool (slack 0)",
    "pooltk_tight": "pooltk tight (slack 2, grad 1)",
    "pooltk_automodel_policy": "pooltk automodel policy",
    "pooltk_live": "live set (pooltk slack 0)",
}
COLUMNS_SIDE_BY_SIDE = list(SIDE_BY_SIDE.values())
REQUIRED = ("trainer", "pp", "variant", "stage", "recv_bytes", "losses_equal_stock", "params_equal_stock",
            "step_time_ratio", "outcome", "claim_ok")


def recorded_tables() -> list[str]:
    """Names of the recorded tables shipped with pooltk, oldest first."""
    folder = resources.files("pooltk.integrations") / "data"
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("trainers_") and p.name.endswith(".csv"))


def load_table(path: str | Path | None = None) -> "pd.DataFrame":
    """The suite's table: ``path`` (a rows.csv from scripts/integration) or the newest recorded one."""
    import pandas as pd

    if path is None:
        names = recorded_tables()
        if not names:
            raise InputError("recorded trainer table", found="none shipped", required="a trainers_*.csv",
                             fix="run bash scripts/integration and pass reports/integration/<trainer>/rows.csv.")
        with (resources.files("pooltk.integrations") / "data" / names[-1]).open() as f:
            table = pd.read_csv(f)
    else:
        path = Path(path)
        if not path.is_file():
            raise InputError("trainer table", found=str(path), required="an existing rows.csv",
                             fix="run bash scripts/integration first, or call load_table() for the recorded run.")
        table = pd.read_csv(path)
    missing = [c for c in REQUIRED if c not in table.columns]
    if missing:
        raise InputError("trainer table columns", found=f"missing {missing}", required=", ".join(REQUIRED),
                         fix="pass a rows.csv written by tools/integration/run_suite.py.")
    return table


def side_by_side(table: "pd.DataFrame") -> "pd.DataFrame":
    """Receive bytes per stage: stock, Automodel's pool, pooltk, the live set (one row per stage)."""
    rows = table[table["variant"].isin(SIDE_BY_SIDE) & (table["outcome"] == "ok")].copy()
    rows["column"] = rows["variant"].map(SIDE_BY_SIDE)
    wide = rows.pivot_table(index=["trainer", "pp", "stage"], columns="column", values="recv_bytes",
                            aggfunc="first")
    return wide[[c for c in COLUMNS_SIDE_BY_SIDE if c in wide.columns]].reset_index()


def claims(table: "pd.DataFrame") -> "pd.DataFrame":
    """One row per (trainer, pp, variant): parity, outcome, worst step-time ratio, the suite's verdict."""
    def _all(s):
        vals = [v for v in s if v == v and v != ""]
        return bool(vals) and all(str(v) == "True" for v in vals) if vals else None

    grouped = table.groupby(["trainer", "pp", "variant"], sort=False)
    out = grouped.agg(schedule=("schedule", "first"), pool_impl=("pool_impl", "first"),
                      losses_equal_stock=("losses_equal_stock", _all),
                      params_equal_stock=("params_equal_stock", _all),
                      step_time_ratio_max=("step_time_ratio", "max"),
                      outcome=("outcome", lambda s: ", ".join(sorted(set(map(str, s))))),
                      claim_ok=("claim_ok", lambda s: all(str(v) == "True" for v in s)))
    return out.reset_index()
