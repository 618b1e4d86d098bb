"""The whole-stage memory estimate by replay: a stage's real module, torch's own schedule, fake
tensors.

See [Note: one rank's replay] in :mod:`pooltk.memory.replay.run` and the estimate over every rank
and variant in :mod:`pooltk.memory.replay.estimate`.
"""
