"""Turning pooltk on inside real trainers, the way their users configure them.

- :mod:`pooltk.integrations.automodel`: NeMo Automodel's ``AutoPipeline`` (its own YAML keys
  ``distributed.pipeline.pp_recv_buffer_pool`` / ``..._slack``, with pooltk as the implementation).
- :mod:`pooltk.integrations.torchtitan`: torchtitan's trainer, with no change to its source
  (``python -m pooltk.integrations.torchtitan`` in place of ``-m torchtitan.train``).

Each module imports its trainer lazily: importing it needs only pooltk and torch, and using
it without the trainer raises :class:`TrainerMissingError` naming the pip command. The exact
versions each entry was proven on are in ``PROVEN`` of each module and in docs/integrations.md.
"""

from pooltk.integrations.common import TrainerMissingError, TwoPoolsError

__all__ = ["TrainerMissingError", "TwoPoolsError"]
