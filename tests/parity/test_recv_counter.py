"""RecvCounter ([Note: counting receive storages]): what a stage's receives land in, counted by weak
reference."""

from __future__ import annotations

import torch
import torch.distributed as dist

from pooltk.parity.recv_counter import RecvCounter


class _Op:
    def __init__(self, tensor: torch.Tensor) -> None:
        self.op, self.tensor = dist.irecv, tensor


class _Stage:
    """Hands each receive the buffer ``make(chunk)`` gives (stock, a ring, or a fresh one per
    receive)."""

    def __init__(self, make) -> None:
        self.make = make

    def get_fwd_recv_ops(self, chunk: int) -> list:
        return [_Op(self.make(chunk))]

    def get_bwd_recv_ops(self, chunk: int) -> list:
        return []


def _run(stage: _Stage, steps: int = 2, m: int = 8) -> dict:
    counter = RecvCounter()
    counter.watch(stage)
    for _ in range(steps):
        counter.start_step()
        for c in range(m):
            stage.get_fwd_recv_ops(c)
    return counter.as_dict()["forward"]


def test_a_ring_of_k_buffers_counts_k_at_once_and_k_per_step():
    ring = [torch.empty(4) for _ in range(3)]
    got = _run(_Stage(lambda c: ring[c % 3]))
    assert (got["peak"], got["max_step_distinct"], got["distinct"], got["receives"]) == (
        3,
        3,
        3,
        16,
    )


def test_stock_buffers_kept_per_microbatch_count_m():
    stock = [torch.empty(4) for _ in range(8)]
    got = _run(_Stage(lambda c: stock[c]))
    assert (got["peak"], got["max_step_distinct"]) == (8, 8)


def test_a_fresh_buffer_per_receive_freed_after_use_is_churn_not_peak():
    got = _run(_Stage(lambda c: torch.empty(4)))  # nothing keeps it: freed before the next receive
    assert got["peak"] == 1 and got["max_step_distinct"] == 8 and got["distinct"] == 16


def test_re_homed_storages_still_held_raise_the_peak():
    ring, held = [torch.empty(4) for _ in range(2)], []

    def rehoming(
        c: int,
    ) -> torch.Tensor:  # a ring that gives every slot a new storage and a holder keeps the old
        held.append(ring[c % 2])
        ring[c % 2] = torch.empty(4)
        return ring[c % 2]

    got = _run(_Stage(rehoming))
    assert got["peak"] == 16 and got["max_step_distinct"] == 8
