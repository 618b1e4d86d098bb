"""What a replay builds per stage: the user's module (or pooltk's decoder), one microbatch's inputs,
the loss.

[Note: a stage builder]
A *stage builder* is any callable ``build(stage_index, num_stages) -> StageSpec``. The replay
calls it with its fake mode active, so every parameter the module makes is fake (no memory); a
module built before that, with real tensors, has already spent its memory and is refused. The
spec's ``inputs`` give the shape and dtype of ONE microbatch's inputs to the stage (any device;
``device="meta"`` costs nothing); the replay makes the step's batch (``M`` of them) for stage 0 and
the targets for the last stage, and learns the stage's outputs by running its forward once without
gradients. ``loss_fn(output, target)`` is the last stage's loss.

From the command line a builder is a Python entry point, ``package.module:function``
(:func:`load_builder`); :func:`pooltk.memory.decoder.builder.decoder_builder` is the builder for a
Hugging Face ``config.json``.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from pooltk.memory.errors import MemoryModelError

__all__ = ["StageBuilder", "StageSpec", "load_builder"]


@dataclass(kw_only=True, slots=True)
class StageSpec:
    """One pipeline stage as a builder returns it. See [Note: a stage builder]."""

    module: nn.Module
    """The stage's module, built under the replay's fake mode."""
    inputs: tuple[torch.Tensor, ...]
    """One microbatch's inputs to the stage: shapes and dtypes only (``device="meta"`` is
    enough)."""
    target: torch.Tensor | None = None
    """Last stage: one microbatch's target (shape and dtype)."""
    loss_fn: Callable[[Any, Any], torch.Tensor] | None = None
    """Last stage: ``loss_fn(output, target)``."""
    name: str = ""
    """What the stage holds, for tables (``embedding + layers 0-9``)."""


StageBuilder = Callable[[int, int], StageSpec]
"""``build(stage_index, num_stages) -> StageSpec``; see [Note: a stage builder]."""


def load_builder(entry: str) -> StageBuilder:
    """The stage builder an entry point ``package.module:function`` names (the CLI's
    ``--builder``)."""
    module_name, sep, attr = str(entry).partition(":")
    if not sep or not module_name or not attr:
        raise MemoryModelError(
            "--builder",
            found=repr(entry),
            required="a Python entry point 'package.module:function'",
            fix="e.g. --builder mypkg.stages:build_stage (build_stage(stage_index, num_stages) -> "
            "StageSpec).",
        )
    try:
        module = importlib.import_module(module_name)
    except Exception as exc:  # noqa: BLE001 - any import failure is the user's module not importing
        raise MemoryModelError(
            "--builder",
            found=f"{entry!r}: importing {module_name} raised {type(exc).__name__}: {exc}",
            required="an importable module",
            fix="check the module path and that it imports on its own.",
        ) from None
    fn = getattr(module, attr, None)
    if not callable(fn):
        raise MemoryModelError(
            "--builder",
            found=f"{entry!r}: {module_name} has no callable {attr!r}",
            required="a function build(stage_index, num_stages) -> StageSpec",
            fix=f"define {attr} in {module_name}, or name another function.",
        )
    return fn


def checked_spec(spec: Any, stage: int, num_stages: int, *, fake: bool) -> StageSpec:
    """``spec`` if it is a usable :class:`StageSpec` for ``stage``; else a one-line error saying
    what is wrong."""
    where = f"stage builder for stage {stage}"
    if not isinstance(spec, StageSpec):
        raise MemoryModelError(
            where,
            found=f"a {type(spec).__name__}",
            required="a pooltk.memory.replay.StageSpec",
            fix="return StageSpec(module=..., inputs=(...,), target=..., loss_fn=...).",
        )
    if not isinstance(spec.module, nn.Module):
        raise MemoryModelError(
            f"{where}: module",
            found=type(spec.module).__name__,
            required="a torch.nn.Module",
            fix="return the stage's module.",
        )
    inputs = tuple(spec.inputs) if isinstance(spec.inputs, (tuple, list)) else (spec.inputs,)
    if not inputs or not all(isinstance(t, torch.Tensor) for t in inputs):
        raise MemoryModelError(
            f"{where}: inputs",
            found=repr(spec.inputs)[:80],
            required="a tuple of tensors (one microbatch)",
            fix="e.g. inputs=(torch.empty(1, 4096, 8192, device='meta', dtype=torch.bfloat16),).",
        )
    spec.inputs = inputs
    real = [
        n for n, p in spec.module.named_parameters() if not _is_fake(p) and p.device.type != "meta"
    ]
    if real and fake:
        raise MemoryModelError(
            f"{where}: module",
            found=f"real parameters ({real[0]}, ...) made before the replay",
            required="a module built inside the builder, where the replay's fake mode makes it "
            "free",
            fix="build the module in the builder function, not before it.",
        )
    if stage == num_stages - 1 and (spec.loss_fn is None or spec.target is None):
        raise MemoryModelError(
            f"{where}: loss",
            found="no loss_fn or no target on the last stage",
            required="loss_fn(output, target) and one microbatch's target",
            fix="give the last stage's StageSpec a loss_fn and a target tensor (shape and dtype).",
        )
    return spec


def _is_fake(t: torch.Tensor) -> bool:
    from torch._subclasses.fake_tensor import is_fake

    return is_fake(t)
