"""The replay on fake tensors allocates, byte for byte per category, what the same replay allocates
on real CPU tensors.

Small widths (real tensors must fit here), one decoder layer per stage, torch's own schedules on a
fake process group; every rank, stock and pooled (and, on one shape, torch 2.15's per-receive
buffers and the live set). Equal at the peak, for each category's own maximum, and between steps:
the fake run is what vouches for the estimate at full widths.
"""

from __future__ import annotations

import pytest
import torch

from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.model import PipelineShape
from pooltk.memory.replay.run import replay_rank


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _builder(stages: int):
    cfg = decoder_config(
        {
            "model_type": "llama",
            "hidden_size": 16,
            "num_hidden_layers": stages,
            "num_attention_heads": 2,
            "num_key_value_heads": 1,
            "intermediate_size": 24,
            "vocab_size": 40,
        }
    )
    return decoder_builder(cfg, rows=1, seq_len=8)


def _same(shape: PipelineShape, variants: tuple[str, ...]) -> list[tuple[int, str, int]]:
    builder = _builder(shape.num_stages)
    seen = []
    for rank in range(shape.pp):
        for variant in variants:
            fake = replay_rank(builder, shape, rank, variant=variant, fake=True)
            real = replay_rank(builder, shape, rank, variant=variant, fake=False)
            where = f"{shape.describe()} rank {rank} {variant}"
            assert dict(fake.at_peak) == dict(real.at_peak), where
            assert dict(fake.category_max) == dict(real.category_max), where
            assert dict(fake.between_steps) == dict(real.between_steps), where
            assert (fake.peak.bytes, fake.peak.phase, fake.peak.microbatch) == (
                real.peak.bytes,
                real.peak.phase,
                real.peak.microbatch,
            ), where
            seen.append((rank, variant, fake.peak.bytes))
    return seen


@pytest.mark.parametrize("pp,m", [(2, 4), (2, 32), (4, 8)])
def test_1f1b_fake_equals_real_per_category(pp, m):
    seen = _same(PipelineShape(pp=pp, n_microbatches=m), ("stock", "pooled"))
    stock = {r: b for r, v, b in seen if v == "stock"}
    pooled = {r: b for r, v, b in seen if v == "pooled"}
    assert all(pooled[r] <= stock[r] for r in stock) and any(pooled[r] < stock[r] for r in stock)


@pytest.mark.parametrize("pp,m", [(2, 4), (4, 8)])
def test_interleaved_1f1b_fake_equals_real_per_category(pp, m):
    _same(PipelineShape(pp=pp, n_microbatches=m, schedule="interleaved1f1b"), ("stock", "pooled"))


def test_torch_2_15s_buffers_and_the_live_set_fake_equal_real_too():
    _same(PipelineShape(pp=4, n_microbatches=4), ("stock_lazy", "live_set"))
