"""Measured records of the last stage's copy-on-conflict re-homes (issue 17), one code version.

``python -m tools.last_stage`` runs pp2 1F1B launches of :func:`pooltk.parity.run_parity` for three
last stages -- the parity model (:class:`pooltk.parity.models.ToyModel`), a plain ``nn.Linear`` +
MSE on a 3-D input and the same on a 2-D input (:mod:`tools.last_stage.heads`) -- pooled with slack
0 and 2, each with the last-stage release on and off (``PoolConfig(release=...)``), beside stock,
and writes one row per (model, M, variant, stage, direction) (:mod:`tools.last_stage.records`) when
every claim of :mod:`tools.last_stage.claims` holds; ``--check CSV`` re-checks a written table.
"""

from tools.last_stage.claims import Grid, check
from tools.last_stage.records import MODELS, Record, measure, read_csv, write_csv

__all__ = ["MODELS", "Grid", "Record", "check", "measure", "read_csv", "write_csv"]
