"""Honest verdicts: the estimate plus a stated overhead against one named capacity; the Kimi-K3 story beside the PR."""

from __future__ import annotations

import pytest
import torch

from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.fits import GB200
from pooltk.memory.k3_story import HIDDEN_STATE_MIB, k3_story
from pooltk.memory.model import MemoryModelError, PipelineShape
from pooltk.memory.replay.estimate import estimate_memory
from pooltk.memory.verdict import DEFAULT_OVERHEAD, Overhead, calibrated_overhead, fits_verdict

GIB = 2**30


@pytest.fixture(scope="module")
def estimate():
    torch.set_num_threads(1)
    cfg = decoder_config(
        {
            "model_type": "llama",
            "hidden_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 24,
            "vocab_size": 40,
        }
    )
    return estimate_memory(
        decoder_builder(cfg, rows=1, seq_len=8),
        PipelineShape(pp=2, n_microbatches=2),
        variants=("stock", "pooled"),
    )


def test_the_default_overhead_names_each_part_and_its_source():
    assert (
        DEFAULT_OVERHEAD.cuda_context_bytes == 400 * 2** 20
        and DEFAULT_OVERHEAD.nccl_bytes == round(1.6e9)
    )
    assert DEFAULT_OVERHEAD.allocator_bytes == 0
    assert (
        "pytorch/pytorch#109888" in DEFAULT_OVERHEAD.source
        and "NVIDIA/nccl#864" in DEFAULT_OVERHEAD.source
    )


def test_a_verdict_is_estimate_plus_overhead_against_the_capacity(estimate):
    tiny = fits_verdict(
        estimate, 1e-3
    )  # 1 MiB of device: the tiny model's 1-2 MiB does not fit with any overhead
    for row in tiny.rows:
        assert (
            row.needed_bytes
            == estimate.replay(row.rank, row.variant).peak.bytes + DEFAULT_OVERHEAD.total_bytes
        )
        assert row.margin_bytes == round(1e-3 * GIB) - row.needed_bytes and not row.fits
    big = fits_verdict(estimate, "gb200")
    assert big.device is GB200 and all(r.fits for r in big.rows)
    assert any("not modelled" in line for line in big.lines()) and set(big.summary()) == {
        "stock",
        "pooled",
    }
    assert big.to_frame().columns.tolist()[:4] == [
        "rank",
        "variant",
        "estimate_gib",
        "overhead_gib",
    ]


def test_a_run_log_calibrates_the_allocator_share(estimate):
    est = estimate.replay(0, "pooled").peak.bytes
    reserved = calibrated_overhead(
        logged_peak_bytes=est + 3 * GIB,
        basis="max_reserved",
        estimate_peak_bytes=est,
        source="run.log",
    )
    assert reserved.allocator_bytes == 3 * GIB and "run.log" in reserved.source
    high = calibrated_overhead(
        logged_peak_bytes=est - GIB, basis="max_reserved", estimate_peak_bytes=est, source="x"
    )
    assert high.allocator_bytes == 0 and "the estimate is higher" in high.source
    allocated = calibrated_overhead(
        logged_peak_bytes=est + GIB, basis="max_allocated", estimate_peak_bytes=est, source="y"
    )
    assert allocated.allocator_bytes == 0 and "+1.00 GiB from the estimate" in allocated.source
    with pytest.raises(MemoryModelError, match=r"^basis: found 'rss'"):
        calibrated_overhead(logged_peak_bytes=1, basis="rss", estimate_peak_bytes=1, source="z")
    with pytest.raises(MemoryModelError, match=r"^Overhead.nccl_bytes: found -1"):
        Overhead(cuda_context_bytes=0, nccl_bytes=-1, allocator_bytes=0, source="")


def test_the_k3_story_shows_the_prs_oom_and_headroom_beside_the_model_and_says_why_they_agree():
    story = k3_story()
    frame = story.to_frame()
    assert story.device.gib == pytest.approx(184.31)
    assert (
        frame.loc[0, "published"] == "44 GiB"
        and "44.71 GiB" in frame.loc[0, "modelled"]
        and frame.loc[0, "agrees"]
    )
    stock = frame[frame.claim.str.startswith("stock 2k")]
    assert len(stock) == 2 and stock.agrees.all() and stock.modelled.str.contains("OOM by").all()
    assert (
        story.sentence.startswith("They agree:")
        and "56 MiB" in story.sentence
        and HIDDEN_STATE_MIB == 56
    )
    without_overhead = k3_story(
        overhead=Overhead(cuda_context_bytes=0, nccl_bytes=0, allocator_bytes=0, source="none")
    )
    assert without_overhead.sentence.startswith(
        "They differ:"
    )  # anchored on the fullest stage stock then fits by 23 MiB


def test_the_k3_story_takes_a_replay_beside_the_measured_peak(estimate):
    story = k3_story(estimate=estimate)
    row = story.rows[-1]
    assert (
        row.agrees is None
        and row.published.startswith("139.6 GiB")
        and "not K3's own layers" in row.note
    )
