"""Everything the notebooks and ``pooltk report`` draw: one module per notebook topic, plus the
shared helpers of :mod:`~pooltk.nb.common`. Imports pandas, matplotlib and seaborn; the pool and
the analysis never import this package."""

from pooltk.nb.common import (
    REPORT_DIR_ENV,
    NotebookEnv,
    report_dir,
    save_figure,
    setup,
    show_frame,
    show_inputs,
)

__all__ = [
    "REPORT_DIR_ENV",
    "NotebookEnv",
    "report_dir",
    "save_figure",
    "setup",
    "show_frame",
    "show_inputs",
]
