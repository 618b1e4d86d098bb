"""The pool: torch, the standard library and pooltk's pure arithmetic (``config``, ``analysis``) only.

Reading order, following one install: :mod:`~pooltk.pool.install` (the public surface),
:mod:`~pooltk.pool.adapters` (where this torch makes receive buffers), :mod:`~pooltk.pool._patch` (the
wrappers; ``_build`` makes a ring), :mod:`~pooltk.pool.gating` (may this stage be pooled),
:mod:`~pooltk.pool.ring` (K sets, slots, ownership, copy on conflict), :mod:`~pooltk.pool.guard` (the loud
errors), then :mod:`~pooltk.pool.release` and :mod:`~pooltk.pool.handoff`. This package re-exports nothing.
"""
