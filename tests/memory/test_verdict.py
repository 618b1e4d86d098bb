"""One fits verdict: tensor peak + stated overhead against one named capacity, whether the peak is a
replay's or the receive-buffer model anchored on a reference peak ([Note: one verdict])."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest
import torch

from pooltk.cli import main
from pooltk.config import PoolConfig
from pooltk.memory.decoder.builder import decoder_builder
from pooltk.memory.decoder.config import decoder_config
from pooltk.memory.fits import (
    DEFAULT_OVERHEAD,
    DEVICES,
    GB200,
    Overhead,
    ReferencePeak,
    Verdict,
    anchored,
    calibrated_overhead,
    get_device,
    margin_text,
    of_estimate,
)
from pooltk.memory.model import MemoryModelError, PipelineShape
from pooltk.memory.replay.estimate import estimate_memory
from pooltk.studies.kimi_k3 import get_preset

ROOT = Path(__file__).resolve().parents[2]
GIB = 2**30
CAL = get_preset("kimi-k3-gb200-2k-calibrated")
PUBLISHED = ReferencePeak.from_gib(139.6, config=PoolConfig(slack=2), policy="automodel")


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


def _tensors_alone(device, reference=PUBLISHED, config=CAL.config):
    """``pooltk memory --capacity``'s view: the calibrated preset anchored, no overhead."""
    return anchored(CAL.model(config), device, reference, overhead=None)


# --------------------------------------------------------------------------- one verdict


def test_no_other_module_of_pooltk_defines_a_fits_or_verdict_record():
    # One record type answers "does it fit": a class named *Verdict*, *Fit*, *FitReport* or
    # *FitRow* anywhere else under pooltk/ would be a second decision about the same question.
    found = []
    for path in sorted((ROOT / "pooltk").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.ClassDef) and any(
                word in node.name.lower() for word in ("verdict", "fit")
            ):
                found.append(f"{path.relative_to(ROOT)}:{node.name}")
    assert sorted(found) == ["pooltk/memory/fits.py:Verdict", "pooltk/memory/fits.py:VerdictRow"]


def test_the_fits_module_imports_neither_the_log_reader_nor_the_replay_nor_pandas():
    tree = ast.parse((ROOT / "pooltk" / "memory" / "fits.py").read_text())
    imported = [
        node.module if isinstance(node, ast.ImportFrom) else alias.name
        for node in ast.walk(tree)
        if isinstance(node, (ast.Import, ast.ImportFrom))
        for alias in node.names
    ]
    assert not [m for m in imported if m.startswith(("pooltk.logs", "pooltk.memory.replay"))]
    top = [n for n in tree.body if isinstance(n, (ast.Import, ast.ImportFrom))]
    assert not [n for n in top if "pandas" in ast.unparse(n)]  # pandas only inside to_frame


def test_both_builders_give_the_same_record_and_the_same_rule(estimate):
    replayed = of_estimate(estimate, "gb200")
    held = anchored(CAL.model(), "gb200", PUBLISHED)
    for verdict in (replayed, held):
        assert isinstance(verdict, Verdict) and verdict.overhead is DEFAULT_OVERHEAD
        for row in verdict.rows:
            assert row.needed_bytes == row.tensor_bytes + DEFAULT_OVERHEAD.total_bytes
            assert row.margin_bytes == GB200.capacity_bytes - row.needed_bytes
            assert row.fits == (row.margin_bytes >= 0)
    assert replayed.reference is None and "replay" in replayed.basis
    assert held.reference is PUBLISHED and "anchored on 139.60 GiB" in held.basis
    assert replayed.to_frame().columns.tolist() == held.to_frame().columns.tolist()


def test_verdict_records_hold_sizes_in_the_unit_their_columns_name():
    verdict = anchored(CAL.model(), "gb200", PUBLISHED)
    exact = verdict.to_records("bytes")
    for unit, per in (("gib", 2**30), ("mib", 2**20), ("gb", 10**9)):
        for row, bytes_row in zip(verdict.to_records(unit), exact, strict=True):
            assert row["tensor_" + unit] == bytes_row["tensor_bytes"] / per
            assert row["margin_" + unit] == bytes_row["margin_bytes"] / per
    assert verdict.to_records() == verdict.to_records("gib")
    assert all(isinstance(r["capacity_bytes"], int) for r in exact)  # bytes stay exact


@pytest.mark.parametrize("unit", ["GiB", "tb", ""])
def test_verdict_records_refuse_a_unit_they_cannot_express(unit):
    verdict = anchored(CAL.model(), "gb200", PUBLISHED)
    with pytest.raises(MemoryModelError, match=r"^unit: found .*; required one of 'bytes'.*Fix: "):
        verdict.to_records(unit)


# --------------------------------------------------------------------------- the replay's


def test_the_default_overhead_names_each_part_and_its_source():
    assert DEFAULT_OVERHEAD.cuda_context_bytes == 400 * 2**20
    assert DEFAULT_OVERHEAD.nccl_bytes == round(1.6e9) and DEFAULT_OVERHEAD.allocator_bytes == 0
    assert "pytorch/pytorch#109888" in DEFAULT_OVERHEAD.source
    assert "NVIDIA/nccl#864" in DEFAULT_OVERHEAD.source


def test_a_replay_verdict_is_each_ranks_peak_plus_the_overhead_against_the_capacity(estimate):
    tiny = of_estimate(estimate, 1e-3)  # 1 MiB of device: nothing fits with any overhead
    for row in tiny.rows:
        peak = estimate.replay(row.rank, row.variant).peak.bytes
        assert row.tensor_bytes == peak and row.needed_bytes == peak + DEFAULT_OVERHEAD.total_bytes
        assert row.margin_bytes == round(1e-3 * GIB) - row.needed_bytes and not row.fits
    big = of_estimate(estimate, "gb200")
    assert big.device is GB200 and all(r.fits for r in big.rows)
    assert any("not modelled" in line for line in big.lines()) and set(big.summary()) == {
        "stock",
        "pooled",
    }
    assert (
        big.summary()["stock"].startswith("rank ")
        and "+ overhead 1.88 GiB" in (big.summary()["stock"])
    )
    assert big.to_frame().columns.tolist()[:4] == ["rank", "variant", "tensor_gib", "recv_gib"]
    with pytest.raises(MemoryModelError, match=r"^estimate: found dict"):
        of_estimate({}, "gb200")


def test_a_run_logs_peak_calibrates_the_allocator_share(estimate):
    est = estimate.replay(0, "pooled").peak.bytes
    reserved = calibrated_overhead(
        logged_peak_bytes=est + 3 * GIB, basis="max_reserved", estimate_peak_bytes=est, source="r"
    )
    assert reserved.allocator_bytes == 3 * GIB and "(r)" in reserved.source
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


# --------------------------------------------------------------------------- the anchored


def test_the_reference_run_reproduces_its_own_peak_and_headroom():
    v = _tensors_alone("gb200-184.31")
    row = next(x for x in v.rows if x.rank == v.reference_stage and x.variant == "automodel")
    assert row.tensor_bytes == PUBLISHED.peak_bytes
    assert row.margin_bytes / GIB == pytest.approx(184.31 - 139.6)  # the published '44 GiB'


def test_stock_needs_the_saved_bytes_on_top_of_the_pooled_peak():
    v = _tensors_alone("gb200")
    for stage in range(8):
        by = {x.variant: x for x in v.rows if x.rank == stage}
        assert by["stock"].tensor_bytes - by["automodel"].tensor_bytes == CAL.model().saved_bytes(
            stage
        )


def test_the_seed_story_on_stated_assumptions():
    # fullest stage anchored: stock sits at the edge (fits by ~23 MiB; published: OOM by 56 MiB)
    edge = _tensors_alone("gb200-184.31").worst("stock")
    assert -56 * 2**20 < edge.margin_bytes < 64 * 2**20
    # anchored on stage 0 (only rank 0 logs): stock OOMs by 3.23 GiB (receive buffers alone)
    at_0 = ReferencePeak.from_gib(139.6, config=PoolConfig(slack=2), policy="automodel", stage=0)
    rank0 = _tensors_alone("gb200", at_0).worst("stock")
    assert not rank0.fits and rank0.margin_bytes / GIB == pytest.approx(-3.23, abs=0.01)


def test_h100_is_an_oom_for_every_policy_and_says_by_how_much():
    v = _tensors_alone("h100")
    assert all(not v.worst(x).fits for x in ("stock", "automodel", "tight", "live_set"))
    text = margin_text(v.worst("tight").margin_bytes)
    assert text.startswith("OOM by ") and "GiB" in text


def test_bad_capacities_and_references_are_named_by_their_fields():
    with pytest.raises(MemoryModelError, match=r"^capacity: found 'tpu9'.*Fix: e.g. gb200") as e:
        get_device("tpu9")
    assert "--" not in str(e.value)  # the library names its own field; the CLI names its flag
    with pytest.raises(MemoryModelError, match=r"^capacity: found -1.*required a finite capacity"):
        get_device(-1)
    heavy = ReferencePeak.from_gib(139.6, weights_bytes=100 * GIB)
    with pytest.raises(MemoryModelError, match=r"more than the model's weights per GPU \(100.00"):
        _tensors_alone("h100", heavy)
    with pytest.raises(MemoryModelError, match=r"reference peak: found 1.00 GiB, below its own"):
        _tensors_alone("gb200", ReferencePeak.from_gib(1.0))
    with pytest.raises(MemoryModelError, match=r"reference stage: found 9"):
        _tensors_alone("gb200", ReferencePeak.from_gib(139.6, stage=9))


def test_every_device_has_a_source_and_there_is_one_gb200_capacity():
    assert {"gb200", "h100"} <= set(DEVICES)
    assert all(d.source and 50 < d.gib < 200 for d in DEVICES.values())
    gb200 = {d.capacity_bytes for name, d in DEVICES.items() if name.startswith("gb200")}
    assert gb200 == {round(184.31 * GIB)}
    assert "out-of-memory" in GB200.source and "187.28" in GB200.source


# --------------------------------------------------------------------------- the commands


@pytest.mark.parametrize(
    "device,needle",
    [
        ("gb200", "automodel     fullest stage 1: fits, 44.71 GiB free"),
        ("h100", "tight         fullest stage 1: OOM by 57.58 GiB"),
    ],
)
def test_memory_capacity_answers_for_gb200_and_h100(capsys, device, needle):
    rc = main(["memory", "--preset", "kimi-k3-gb200-2k-calibrated", "--capacity", device])
    out = capsys.readouterr().out
    assert rc == 0 and needle in out and "assumed: every stage holds the same" in out


def test_memory_capacity_without_a_reference_peak_says_how_to_give_one(capsys):
    rc = main(["memory", "--preset", "kimi-k3-gb200-1k-hidden", "--capacity", "h100"])
    err = capsys.readouterr().err
    assert rc == 2 and "--reference-peak-gib" in err and "Traceback" not in err


def test_memory_capacity_loads_the_k3_automodel_yaml(capsys):
    path = ROOT / "data" / "configs" / "kimi_k3_gb200_2k_automodel.yaml"
    argv = ["--boundary-mib", "416", "--capacity", "gb200", "--reference-peak-gib", "139.6"]
    rc = main(["memory", "--config", str(path), *argv])
    out = capsys.readouterr().out
    assert rc == 0 and "pp=8 M=64" in out and "fits on gb200: 184.31 GiB" in out


def test_torch_2_15s_own_last_stage_is_the_fullest_for_stock_lazy(capsys):
    # Stock torch >= 2.15 keeps all M forward buffers on the last stage: 64 x 416 MiB = 26 GiB
    # there, so that stage, not a middle one, decides whether stock-lazy fits.
    rc = main(["memory", "--preset", "kimi-k3-gb200-2k-calibrated", "--capacity", "h100"])
    out = capsys.readouterr().out
    lines = {
        line.split(" fullest")[0].strip(): line for line in out.splitlines() if " fullest " in line
    }
    assert rc == 0 and "stage 7:" in lines["stock-lazy"] and "stage 1:" in lines["lazy-released"]
    by = {
        k: float(lines[k].split("OOM by ")[1].split()[0]) for k in ("stock-lazy", "lazy-released")
    }
    # stage 7 stock-lazy holds 64 sets (26.00 GiB); the released fullest stage 1 holds 7 + 1 (3.25)
    assert by["stock-lazy"] - by["lazy-released"] == pytest.approx(26.00 - 3.25, abs=0.011)


def test_memory_capacity_as_json_is_the_one_verdicts_record(capsys):
    import json

    rc = main(
        ["memory", "--preset", "kimi-k3-gb200-2k-calibrated", "--capacity", "gb200", "--json"]
    )
    fits = json.loads(capsys.readouterr().out)["fits"]
    assert rc == 0 and fits["overhead"] is None and fits["reference_stage"] == 1
    assert fits["rows"][0]["rank"] == 0 and fits["rows"][0]["overhead_bytes"] == 0
    assert {r["variant"] for r in fits["rows"]} == {
        "stock",
        "stock_lazy",
        "lazy_released",
        "automodel",
        "tight",
        "live_set",
    }


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (["--capacity", "tpu9"], "pooltk memory: error: --capacity: found 'tpu9'; required one of"),
        (
            ["--capacity", "gb200", "--reference-peak-gib", "-1"],
            "--reference-peak-gib: found -1.0; required a finite peak > 0 GiB",
        ),
        (
            ["--capacity", "gb200", "--reference-peak-gib", "1"],
            "--reference-peak-gib: found 1.00 GiB, below its own receive",
        ),
        (
            ["--capacity", "gb200", "--reference-stage", "9"],
            "--reference-stage: found 9; required a stage (rank) in 0..7",
        ),
        (
            ["--capacity", "gb200", "--reference-variant", "best"],
            "--reference-variant: found 'best'",
        ),
        (
            ["--capacity", "h100", "--weights-gib", "100"],
            "--capacity: found h100: 79.18 GiB; required more than the model's weights",
        ),
    ],
)
def test_fits_errors_from_a_flag_name_the_flag(capsys, argv, needle):
    rc = main(["memory", "--preset", "kimi-k3-gb200-2k-calibrated", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Fix:" in err and "Traceback" not in err


def test_a_published_reference_peak_below_the_buffers_is_not_blamed_on_a_flag():
    # the peak came from the preset, not from --reference-peak-gib: the library names its field
    tiny = ReferencePeak.from_gib(1, config=PoolConfig(slack=2), policy="automodel")
    with pytest.raises(MemoryModelError, match=r"^reference peak: found 1.00 GiB"):
        anchored(CAL.model(PoolConfig()), "gb200", tiny)
