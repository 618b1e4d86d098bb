"""The pool: torch and the standard library only (an import-graph test holds it to that).

Reading order, following one install: :mod:`~pooltk.pool.gating` decides whether a stage may be
pooled, :mod:`~pooltk.pool.adapters` finds where this torch makes receive buffers,
:mod:`~pooltk.pool.sizing` gives K per direction, :mod:`~pooltk.pool.ring` allocates the K sets
and maps chunks to slots, :mod:`~pooltk.pool.guard` owns slots between post and release, and
:mod:`~pooltk.pool.install` patches torch's classes and undoes it exactly.

The public names are re-exported by :mod:`pooltk` itself; this package re-exports nothing, so that
``pooltk.pool.install`` is always the module.
"""
