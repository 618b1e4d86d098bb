"""The whole-stage replay: what each category holds, where the peak is, what it refuses, and the
analytic model beside it."""

from __future__ import annotations

import pytest
import torch
from torch import nn

import pooltk
from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.model import MemoryModelError, PipelineShape
from pooltk.memory.replay.estimate import estimate_memory
from pooltk.memory.replay.run import Training, rank_stages, replay_rank
from pooltk.memory.replay.stages import StageSpec

CFG = decoder_config(
    {
        "model_type": "llama",
        "hidden_size": 16,
        "num_hidden_layers": 4,
        "num_attention_heads": 2,
        "num_key_value_heads": 1,
        "intermediate_size": 24,
        "vocab_size": 40,
    }
)
SET = 1 * 8 * 16 * 2  # one bf16 (1, 8, 16) hidden state


@pytest.fixture(autouse=True)
def _one_thread():
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


def _params(stage: int, n: int, builder) -> tuple[int, int]:
    """(parameter bytes, trainable parameter count) of one stage, built without the replay."""
    from torch._subclasses.fake_tensor import FakeTensorMode

    with FakeTensorMode():
        module = builder(stage, n).module
        return (
            sum(p.numel() * p.element_size() for p in module.parameters())
            + sum(b.numel() * b.element_size() for b in module.buffers()),
            sum(1 for _ in module.parameters()),
        )


def test_each_category_holds_what_it_says_on_every_rank():
    shape = PipelineShape(pp=4, n_microbatches=8)
    builder = decoder_builder(CFG, rows=1, seq_len=8)
    est = estimate_memory(builder, shape, variants=("stock", "pooled"))
    for rep in est.replays:
        weights, count = _params(rep.stages[0], 4, builder)
        assert rep.at_peak["parameters"] == weights
        trainable = weights - 8 * 4 * 8  # the rotary table (8 positions x 4 complex64) is a buffer
        assert (
            rep.at_peak["optimizer"] == 2 * trainable + 4 * count
        )  # AdamW: two states and a float32 step each
        assert rep.category_max["gradients"] == trainable
        assert rep.category_max["recv_buffers"] - est.modelled_receive_bytes(
            rep.rank, rep.variant
        ) in range(0, 64)
        assert rep.between_steps["gradients"] == rep.between_steps["activations"] == 0
    frame = est.receive_frame()
    assert (frame[frame.variant == "stock"].difference_bytes == 0).all()
    stock = {r.rank: r for r in est.replays if r.variant == "stock"}
    assert (
        stock[1].at_peak["recv_buffers"] == 2 * 8 * SET
    )  # M forward and M grad sets, allocated at setup
    # 1F1B keeps min(M, N - i) microbatches' activations on stage i: stage 1 holds more than stage 2
    assert stock[1].category_max["activations"] > stock[2].category_max["activations"]


def test_the_peak_says_where_in_the_step_it_is_and_the_timeline_covers_every_action():
    rep = replay_rank(
        decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=4), 0
    )
    assert rep.peak.step == 0 and rep.peak.phase in ("forward", "backward", "loss", "optimizer")
    assert rep.peak.describe().startswith("step 0, ")
    actions = [(p.phase, p.microbatch) for p in rep.timeline]
    assert actions.count(("forward", 3)) == 1 and actions[-1] == ("step_end", -1)
    assert [p.position for p in rep.timeline] == sorted(p.position for p in rep.timeline)
    assert max(sum(p.by_category.values()) for p in rep.timeline) <= rep.peak.bytes


def test_one_step_after_the_optimizer_warm_up_is_the_steady_state():
    builder, shape = decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=4)
    one = replay_rank(builder, shape, 1, training=Training(steps=1))
    two = replay_rank(builder, shape, 1, training=Training(steps=2))
    assert dict(one.at_peak) == dict(two.at_peak) and one.peak.bytes == two.peak.bytes


def test_activation_checkpointing_keeps_less_for_the_backward():
    shape = PipelineShape(pp=2, n_microbatches=4)
    plain = replay_rank(decoder_builder(CFG, rows=1, seq_len=8), shape, 0)
    ckpt = replay_rank(decoder_builder(CFG, rows=1, seq_len=8, checkpointing=True), shape, 0)
    assert ckpt.category_max["activations"] < plain.category_max["activations"]


def test_a_moe_decoder_with_expert_parallelism_holds_experts_over_ep():
    moe = decoder_config(
        {
            "model_type": "qwen2_moe",
            "hidden_size": 16,
            "num_hidden_layers": 2,
            "num_attention_heads": 2,
            "intermediate_size": 24,
            "vocab_size": 40,
            "num_experts": 8,
            "num_experts_per_tok": 2,
            "moe_intermediate_size": 8,
            "shared_expert_intermediate_size": 16,
        }
    )
    shape = PipelineShape(pp=2, n_microbatches=2)
    one = replay_rank(decoder_builder(moe, rows=1, seq_len=8), shape, 1, variant="stock")
    four = replay_rank(decoder_builder(moe, rows=1, seq_len=8, ep=4), shape, 1, variant="stock")
    assert (
        one.at_peak["parameters"] - four.at_peak["parameters"] == 3 * 6 * 16 * 8 * 2
    )  # 6 of 8 experts' w1 w2 w3 gone


def test_gpipe_is_replayed_stock_only_with_a_note():
    est = estimate_memory(
        decoder_builder(CFG, rows=1, seq_len=8),
        PipelineShape(pp=2, n_microbatches=2, schedule="gpipe"),
        variants=("stock", "pooled"),
        ranks=[1],
    )
    assert est.variants == ("stock",) and "GPipe" in est.notes[0]
    assert rank_stages(PipelineShape(pp=4, n_microbatches=8, schedule="zbvzerobubble"), 1) == (1, 6)


class _DataDependent(nn.Module):
    def __init__(self) -> None:
        super().__init__()
        self.w = nn.Linear(16, 16)

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return self.w(x)[torch.nonzero(x[..., 0] > 0, as_tuple=True)].sum() * x


def test_an_op_without_a_fake_implementation_names_the_op_and_the_stage():
    def build(stage: int, n: int) -> StageSpec:
        return StageSpec(
            module=_DataDependent() if stage == 1 else nn.Linear(16, 16),
            inputs=(torch.empty(2, 16, device="meta"),),
            target=torch.empty(2, 16, device="meta"),
            loss_fn=lambda o, t: (o - t).pow(2).mean(),
        )

    with pytest.raises(
        MemoryModelError,
        match=r"^replay of stage 1 \(rank 1\): found op aten\.nonzero\.default.*Fix: ",
    ):
        replay_rank(build, PipelineShape(pp=2, n_microbatches=2), 1)


def test_what_the_replay_refuses_is_named_with_the_fix():
    builder, shape = decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=2)
    with pytest.raises(MemoryModelError, match=r"^variant: found 'fresh'"):
        replay_rank(builder, shape, 0, variant="fresh")
    with pytest.raises(MemoryModelError, match=r"^rank: found 2; required a rank in 0\.\.1"):
        replay_rank(builder, shape, 2)
    with pytest.raises(MemoryModelError, match=r"^stage builder for stage 0: found a Linear"):
        replay_rank(lambda s, n: nn.Linear(2, 2), shape, 0)

    def no_loss(s, n):
        return StageSpec(module=nn.Linear(16, 16), inputs=(torch.empty(2, 16, device="meta"),))

    with pytest.raises(
        MemoryModelError, match=r"^stage builder for stage 1: loss: found no loss_fn"
    ):
        replay_rank(no_loss, shape, 1)
    with pooltk.pooled(slack=1):
        with pytest.raises(
            MemoryModelError,
            match=r"^pooltk: found installed in this process already.*Fix: call pooltk\.uninstall",
        ):
            replay_rank(builder, shape, 0, variant="pooled")


def test_a_process_that_already_has_a_process_group_is_refused_not_disturbed():
    import torch.distributed as dist
    from torch.testing._internal.distributed.fake_pg import FakeStore

    dist.init_process_group("fake", store=FakeStore(), rank=0, world_size=1)
    try:
        with pytest.raises(
            MemoryModelError,
            match=r"^process group: found a default process group already initialised",
        ):
            replay_rank(
                decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=2), 0
            )
        assert dist.is_initialized()
    finally:
        dist.destroy_process_group()


def test_outputs_the_step_returns_are_kept_outputs_never_receive_buffers():
    # torch merges the last stage's outputs after its last action: that copy is the caller's, not a
    # receive buffer
    builder, shape = decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=4)
    kept = replay_rank(builder, shape, 1, training=Training(return_outputs=True))
    plain = replay_rank(builder, shape, 1)
    logits = 1 * 8 * 40 * 2  # one microbatch's bf16 (1, 8, vocab 40) output
    assert kept.category_max["kept_outputs"] >= 2 * 4 * logits  # the M chunks and their merged copy
    assert kept.category_max["recv_buffers"] == plain.category_max["recv_buffers"] == 4 * SET


def test_replays_in_worker_processes_are_the_same_replays_in_the_same_order():
    builder, shape = decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=2)
    here = estimate_memory(builder, shape, variants=("stock", "pooled"), ranks=[1])
    there = estimate_memory(builder, shape, variants=("stock", "pooled"), ranks=[1], jobs=2)
    assert [(r.rank, r.variant, dict(r.at_peak), r.peak.bytes) for r in here.replays] == [
        (r.rank, r.variant, dict(r.at_peak), r.peak.bytes) for r in there.replays
    ]
    with pytest.raises(MemoryModelError, match=r"^jobs: found a builder that does not pickle"):
        estimate_memory(lambda s, n: None, shape, ranks=[0], variants=("stock", "pooled"), jobs=2)


@pytest.mark.parametrize("jobs", [1, 2])
def test_an_estimate_of_no_ranks_is_refused_naming_the_fix(jobs):
    builder, shape = decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=2)
    with pytest.raises(MemoryModelError, match=r"^ranks: found \[\]; required at least one rank"):
        estimate_memory(builder, shape, variants=("stock",), ranks=[], jobs=jobs)


def test_one_variant_named_alone_is_that_variant_not_its_letters():
    builder, shape = decoder_builder(CFG, rows=1, seq_len=8), PipelineShape(pp=2, n_microbatches=2)
    estimate = estimate_memory(builder, shape, variants="stock", ranks=[0], jobs=1)
    assert estimate.variants == ("stock",)  # was refused as ['s', 't', 'o', 'c', 'k']
