"""One rank of a pipeline in this process: a fake process group (no peers, no communication).

[Note: a fake world]
``torch.distributed``'s ``fake`` backend (registered by
``torch.testing._internal.distributed.fake_pg``, with ``FakeStore``) makes a process group of any
size whose collectives and point-to-point ops complete at once and move no data;
``torch.distributed._tools.fake_collectives`` gives the c10d ops fake-tensor kernels. So one
process can be rank ``r`` of ``pp`` and run torch's own schedule for its stages: every receive
"arrives" into the buffer torch posted for it. Received values are whatever the buffer held
(zeros, or fake), which changes no tensor's size. The default process group is this process's
alone, so a process that already has one is refused rather than disturbed.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator

from pooltk.memory.errors import MemoryModelError

__all__ = ["fake_world"]


@contextlib.contextmanager
def fake_world(rank: int, world_size: int) -> Iterator[None]:
    """Be ``rank`` of ``world_size`` on a fake process group for the block.
    See [Note: a fake world]."""
    import torch.distributed as dist

    if not dist.is_available():
        raise MemoryModelError(
            "torch.distributed",
            found="not available in this torch build",
            required="a build with distributed",
            fix="install a torch wheel from pytorch.org (the CPU wheel has it).",
        )
    if dist.is_initialized():
        raise MemoryModelError(
            "process group",
            found="a default process group already initialised here (backend "
            f"{dist.get_backend()}, world size {dist.get_world_size()})",
            required="none: the replay makes its own fake one for each rank",
            fix="run the estimate in a fresh process (`pooltk estimate`), or call "
            "torch.distributed.destroy_process_group() first.",
        )
    # registers the c10d ops' fake kernels
    import torch.distributed._tools.fake_collectives  # noqa: F401
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=rank, world_size=world_size)
    try:
        yield
    finally:
        dist.destroy_process_group()
