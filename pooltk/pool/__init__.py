"""The pool: torch, the standard library, ``pooltk.config`` and ``pooltk._validate``, and of the
analysis only the schedule catalog (``plans`` and ``sharing`` load for ``schedule="auto"`` alone).

Reading order: ``ring`` (K sets, the invariant, a slot's ownership), ``holders`` (copy on
conflict), ``stage`` (what each torch stage method does under the pool), ``gating`` (may a stage
be pooled), ``release`` and ``handoff``, ``install`` (the public surface and the report),
``events`` and ``errors``; ``torch_compat`` is the only home of torch's names. This package
re-exports nothing (``pooltk`` itself does).
"""
