"""One stage of an N-stage pipeline, alone in this process, on a fake process group.

[Note: one stage alone]
torch's fake process group (``torch.testing._internal.distributed.fake_pg.FakeStore`` with backend
``"fake"``) accepts every collective and point-to-point call and moves nothing. A stage whose shapes
are all given (``input_args``, ``output_args``, ``input_grads``, ``output_grads``: torch's static
inference) then runs torch's own schedule with no peers: its receives land in its receive buffers
(pooled or not) with whatever those held, so numbers mean nothing, but every buffer, ring, re-home
and host microsecond is real. The one thing peers are asked for is the schedule's warm-up vote on
the inference mode, which a fake receive answers "dynamic"; :func:`static_schedule` answers it
"static" for this rank's stages. Used by the host-cost benchmark, the GPU check and tests that need
a pooled stage in one process.
"""

from __future__ import annotations

import contextlib
from typing import Any, Callable, Iterator

import torch

from pooltk.memory.replay.seams import set_static, skip_vote

__all__ = ["fake_group", "run_steps", "static_schedule", "static_stage"]


@contextlib.contextmanager
def fake_group(rank: int, world: int) -> Iterator[None]:
    """A fake default process group for the block (this process is ``rank`` of ``world``)."""
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    if dist.is_initialized():
        raise RuntimeError(
            "one_stage.fake_group: found a process group already initialised; required none. "
            "Fix: run the single-stage check in its own process."
        )
    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world)
    try:
        yield
    finally:
        dist.destroy_process_group()


def static_stage(
    module: torch.nn.Module,
    index: int,
    n_stages: int,
    example: torch.Tensor,
    device: torch.device | str = "cpu",
) -> Any:
    """A ``PipelineStage`` whose input, output and both gradients have ``example``'s shape (static
    inference).

    The gradients' shapes are given where torch's ``PipelineStage`` takes them (2.13 on); before
    that, the input and output shapes are all it asks for and it infers nothing across ranks.
    """
    import inspect

    from torch.distributed.pipelining import PipelineStage

    def like(requires_grad: bool = False) -> torch.Tensor:
        return torch.zeros_like(example, device=device).requires_grad_(requires_grad)

    grads: dict[str, Any] = {}
    if "input_grads" in inspect.signature(PipelineStage.__init__).parameters:
        grads = {
            "input_grads": (like() if index > 0 else None,),
            "output_grads": (None if index == n_stages - 1 else like(),),
        }
    return PipelineStage(
        module,
        index,
        n_stages,
        torch.device(device),
        input_args=(like(index > 0),),
        output_args=(like(),),
        **grads,
    )


def static_schedule(
    stage: Any, n_microbatches: int, loss_fn: Callable, schedule_class: Any = None
) -> Any:
    """torch's schedule over ``stage``, its warm-up vote answered "static" (see [Note: one stage
    alone])."""
    from torch.distributed.pipelining import Schedule1F1B

    schedule = (schedule_class or Schedule1F1B)(
        stage, n_microbatches=n_microbatches, loss_fn=loss_fn
    )
    set_static(stage)  # the peers' vote needs real peers: answer it "static" here
    skip_vote(schedule)
    return schedule


def run_steps(schedule: Any, stage: Any, batch: torch.Tensor, steps: int = 1) -> None:
    """``steps`` schedule steps: ``batch`` is the first stage's input and the last stage's
    target."""
    for _ in range(steps):
        schedule.step(
            *((batch,) if stage.is_first else ()), **({"target": batch} if stage.is_last else {})
        )
