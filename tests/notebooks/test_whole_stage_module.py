"""Notebook 01's whole-stage section and the fits views, checked without a kernel, small decoder.

A four-layer Llama-shaped decoder (hidden 64) replays in seconds; what it checks is what the
notebook does with Llama-3-70B: the quick switch, the stacked and timeline figures (through the
same figure checks every notebook figure passes), the verdict on the one GB200 capacity, and the
explorer's fits view standing on the replay only when the model and shape are the replayed ones.
Notebook 03's capacity is the same GB200.
"""

from __future__ import annotations

import dataclasses
from pathlib import Path
from types import MappingProxyType

import pytest

pytest.importorskip("pandas")
mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")

import figure_checks  # noqa: E402

from pooltk.memory.fits import GB200  # noqa: E402
from pooltk.memory.replay.presets import LLAMA3_70B, estimate_preset  # noqa: E402
from pooltk.nb import fits as fv  # noqa: E402
from pooltk.nb import memory as mp  # noqa: E402
from pooltk.nb import whole_stage as ws  # noqa: E402

REPO = Path(__file__).resolve().parents[2]
TINY = dataclasses.replace(
    estimate_preset("llama3-70b-pp8"),
    name="tiny-llama",
    config=MappingProxyType(
        {
            **LLAMA3_70B,
            "hidden_size": 64,
            "intermediate_size": 128,
            "num_attention_heads": 4,
            "num_key_value_heads": 2,
            "num_hidden_layers": 4,
            "vocab_size": 256,
        }
    ),
    pp=4,
    microbatches=16,
    rows=1,
    seq_len=1024,
    source="a four-layer Llama-3-shaped decoder (test)",
)


@pytest.fixture(scope="module")
def whole() -> ws.WholeStage:
    return ws.whole_stage_estimate(TINY, ranks=(0, 2), quick=True, jobs=1)


def test_quick_replays_fewer_microbatches_and_tokens_and_says_so(whole: ws.WholeStage) -> None:
    assert (whole.preset.microbatches, whole.preset.seq_len) == (
        8,
        512,
    )  # max(pp, 8) microbatches, 512 tokens
    assert (whole.estimate.shape.n_microbatches, whole.estimate.ranks) == (8, (0, 2))
    assert "quick" in whole.scale and "the preset is 16 of 1 x 1024" in whole.scale
    assert whole.inputs()["replayed"] == whole.scale
    full = ws.whole_stage_estimate(TINY, ranks=(3,), variants=("stock",), jobs=1)
    assert "the preset's own shape" in full.scale and full.estimate.shape.n_microbatches == 16


def test_the_verdict_is_on_the_one_gb200_capacity_with_the_stated_overhead(
    whole: ws.WholeStage,
) -> None:
    v = whole.verdict
    assert v.device is GB200 and v.overhead.total_bytes > 0
    assert {(r.rank, r.variant) for r in v.rows} == {
        (r, x) for r in (0, 2) for x in whole.estimate.variants
    }
    for r in v.rows:
        assert r.tensor_bytes == whole.estimate.replay(r.rank, r.variant).peak.bytes


def test_the_tables_name_what_each_rank_holds_and_the_receive_check_is_exact_for_stock(
    whole: ws.WholeStage,
) -> None:
    peaks = whole.peak_table()
    assert set(peaks.holds) == {"embedding + layer 0", "layer 2"}
    check = whole.receive_check()
    assert (check[check.variant == "stock torch <= 2.14"].difference_bytes == 0).all()


def test_the_stacked_and_timeline_figures_pass_the_figure_checks(whole: ws.WholeStage) -> None:
    import matplotlib.pyplot as plt

    stacked = ws.stacked_figure(whole)
    assert figure_checks.figure_problems(stacked) == []
    ax = stacked.axes[0]
    labels = {t.get_text() for t in ax.get_xticklabels()}
    assert labels == {ws.VARIANT_TICKS[v] for v in whole.estimate.variants}
    heights = sum(
        p.get_height() for p in ax.patches if p.get_x() < 0.5
    )  # the stock bar of rank 0, stacked
    assert heights == pytest.approx(whole.estimate.replay(0, "stock").peak.bytes / 2**30, rel=1e-9)
    capacity = [ln for ln in ax.get_lines() if ln.get_label().startswith("gb200 capacity")]
    assert capacity and capacity[0].get_ydata()[0] == pytest.approx(GB200.gib)
    timeline = ws.timeline_figure(whole, rank=2)
    assert figure_checks.figure_problems(timeline) == []
    with pytest.raises(ValueError, match=r"^timeline: found rank 1"):
        ws.timeline_figure(whole, rank=1)
    plt.close("all")


def test_the_explorer_stands_on_the_replay_only_for_the_replayed_model_and_shape(
    whole: ws.WholeStage,
) -> None:
    state = mp.ExplorerState(replayed=whole)
    dims = dict(pp=4, microbatches=8, rows=1, seq_len=512, hidden=64, dtype="bfloat16")
    mp.explore(
        state, preset=TINY.name, **dims, slack=2, grad_slack=1, policy="tight", device="gb200"
    )
    assert (
        state.fits is not None
        and state.fits.reference is None
        and "whole-stage replay" in state.fits_basis
    )
    assert {r.tensor_bytes for r in state.fits.rows} == {
        r.peak.bytes for r in whole.estimate.replays
    }
    assert (
        state.last_result.stage_bytes(2, "stock") == 8 * 2 * 512 * 64 * 2
    )  # 8 sets each way, 1 x 512 x 64 bf16
    mp.explore(
        state,
        preset=TINY.name,
        **{**dims, "seq_len": 1024},
        slack=2,
        grad_slack=1,
        policy="tight",
        device="gb200",
    )
    assert (
        state.fits is None and "no reference peak" in state.fits_note
    )  # another shape: the replay is not its own
    assert "whole_stage_estimate('tiny-llama', microbatches=8, seq_len=1024)" in state.fits_note


def test_the_k3_story_figure_draws_the_story_on_its_capacity() -> None:
    import matplotlib.pyplot as plt

    from pooltk.studies.kimi_k3 import k3_story

    story = k3_story()
    fig = fv.k3_story_figure(story)
    assert figure_checks.figure_problems(fig) == []
    titles = [ax.get_title() for ax in fig.axes[:2]]
    margins = [r.pooltk.rsplit(": ", 1)[-1] for r in story.rows[1:3]]
    assert all(m in t for m, t in zip(margins, titles)), (
        titles,
        margins,
    )  # each panel's verdict is the story's
    assert story.device is GB200
    plt.close(fig)


def test_notebook_03_judges_against_the_same_gb200_unless_given_a_capacity() -> None:
    from pooltk.nb import logs as logviews

    assert logviews.capacity_device(None) is GB200
    assert logviews.device_capacity(GB200).gib == GB200.gib
    mine = logviews.capacity_device(79.18)
    assert mine.gib == pytest.approx(79.18) and "DEVICE_CAPACITY_GIB" in mine.source


@pytest.mark.parametrize(
    "given,needle",
    [
        ({"microbatches": 0}, "n_microbatches: found 0"),  # 0 replayed the preset's 16
        ({"seq_len": 0}, "seq_len: found 0"),  # 0 replayed the preset's tokens
        ({"jobs": 0}, "jobs: found 0"),  # 0 replayed in this process
        ({"device": "h1000"}, "capacity: found 'h1000'"),  # said after the replay
    ],
)
def test_a_bad_value_is_refused_before_any_replay_never_read_as_unset(given, needle, monkeypatch):
    def replayed(*args, **kwargs):
        raise AssertionError("replayed before the value was checked")

    monkeypatch.setattr(ws, "estimate_memory", replayed)
    with pytest.raises(ws.MemoryModelError) as refused:
        ws.whole_stage_estimate(TINY, ranks=(0,), variants=("stock",), **{"jobs": 1, **given})
    assert needle in str(refused.value)


def test_the_log_views_name_a_device_or_a_frame_they_cannot_use():
    from pooltk.logs import read_logs
    from pooltk.nb import logs as logviews

    assert logviews.device_capacity("gb200").gib == GB200.gib  # a name, as the CLI takes it
    with pytest.raises(ValueError, match="capacity: found 'h1000'"):  # was an AttributeError
        logviews.device_capacity("h1000")
    steps = read_logs(REPO / "tests" / "logs" / "fixtures" / "automodel_text_2025_07.log").steps
    with pytest.raises(ValueError, match=r"steps: found no column \['tok_per_s_per_gpu'\]"):
        logviews.plot_steps(steps)  # raw steps: pandas' KeyError before
    with pytest.raises(ValueError, match="steps: found no train row"):
        logviews.plot_steps(steps.iloc[0:0], columns=("step_time_s",))  # matplotlib's 0 rows
