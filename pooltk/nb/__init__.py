"""Everything the notebooks and ``pooltk report`` draw: one module per notebook topic, plus the
shared helpers of :mod:`~pooltk.nb.common`. Imports pandas, matplotlib and seaborn; the pool and
the analysis never import this package."""
