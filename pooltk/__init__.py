"""pooltk: ring-pooled receive buffers for torch.distributed.pipelining.

The public surface imports with torch alone (no pandas, seaborn or Jupyter)::

    import pooltk
    report = pooltk.install(slack=2)          # before stages are set up
    ...
    pooltk.uninstall()

See README.md for the whole toolkit (memory model, parity harness, log analysis).
"""

from pooltk.config import PoolConfig
from pooltk.pool.gating import PoolSetupError
from pooltk.pool.guard import PoolOverrunError, PoolReuseError
from pooltk.pool.install import (
    InstallReport,
    PoolWarning,
    install,
    installed,
    pool_stage,
    pooled,
    probe,
    stage_rings,
    uninstall,
    unpool_stage,
)
from pooltk.pool.state import StageState, stage_state

__all__ = [
    "InstallReport",
    "PoolConfig",
    "PoolOverrunError",
    "PoolReuseError",
    "PoolSetupError",
    "PoolWarning",
    "install",
    "installed",
    "pool_stage",
    "pooled",
    "probe",
    "stage_rings",
    "stage_state",
    "StageState",
    "uninstall",
    "unpool_stage",
]

__version__ = "0.1.0"
