"""Tables of a parity report that the CLI, the report and the notebooks share."""

from __future__ import annotations

from typing import TYPE_CHECKING

from pooltk.analysis.lifetimes import DIRECTIONS
from pooltk.parity.experiments import Harness

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

    from pooltk.parity.launch import ParityReport

__all__ = ["bytes_frame", "stock_of"]


def stock_of(report: ParityReport, name: str):  # noqa: ANN201 - a VariantResult
    """The stock reference variant of variant ``name`` (itself when it is stock)."""
    v = report.variant(name)
    return report.variant(v.reference) if v.reference else v


def bytes_frame(report: ParityReport) -> pd.DataFrame:
    """Per stage and direction: measured stock and pooled sets/bytes, the model's pooled bytes,
    saved.

    Uses the first pooled variant and its stock reference. ``model_pooled_bytes`` is
    :func:`pooltk.memory.model.expected_bytes` for the harness's boundary tensor;
    ``matches_model`` compares it with the measurement (distinct storages in the recv infos).
    """
    import pandas as pd

    from pooltk.memory.model import expected_bytes, harness_boundary

    pooled = next(v for v in report.variants if v.pooled)
    stock = stock_of(report, pooled.name)
    spec = report.spec
    harness = Harness(**pooled.config) if pooled.config else Harness()
    # the model knows tight and automodel rings; measure is the tight rule's run
    model = expected_bytes(
        pp=spec.pp,
        n_microbatches=spec.microbatches,
        config=harness.config,
        policy="tight" if harness.policy == "measure" else harness.policy,
        sharing=harness.sharing,
        schedule=pooled.schedule,
        boundaries=harness_boundary(
            rows=spec.rows_per_microbatch, seq_len=spec.seq_len, hidden=spec.hidden
        ),
    )
    rows = []
    for stage in sorted(pooled.recv):
        for d in DIRECTIONS:
            s, p, m = stock.recv[stage][d], pooled.recv[stage][d], model[(stage, d)]
            rows.append(
                {
                    "stage": stage,
                    "direction": d,
                    "stock_sets": s["sets"],
                    "stock_bytes": s["bytes"],
                    "pooled_sets": p["sets"],
                    "pooled_bytes": p["bytes"],
                    "model_pooled_bytes": m.pooled_bytes,
                    "matches_model": p["bytes"] == m.pooled_bytes and s["bytes"] == m.stock_bytes,
                    "saved_bytes": s["bytes"] - p["bytes"],
                }
            )
    return pd.DataFrame(rows)
