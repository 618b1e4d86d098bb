"""Fits or OOM by how much: per-stage peaks anchored to a reference, on GB200 and H100."""

from __future__ import annotations

from pathlib import Path

import pytest

from pooltk.cli import main
from pooltk.config import PoolConfig
from pooltk.memory.fits import DEVICES, ReferencePeak, fit_report, get_device, verdict
from pooltk.memory.model import MemoryModelError
from pooltk.studies.kimi_k3.presets import get_preset

CAL = get_preset("kimi-k3-gb200-2k-calibrated")
PUBLISHED = ReferencePeak.from_gib(139.6, config=PoolConfig(slack=2), policy="automodel")


def _report(device, reference=PUBLISHED, config=CAL.config):
    return fit_report(CAL.shape, CAL.boundary, config, device, reference, policy=CAL.policy)


def test_the_reference_run_reproduces_its_own_peak_and_headroom():
    r = _report("gb200-184.31")
    row = next(x for x in r.rows if x.stage == r.reference_stage and x.variant == "automodel")
    assert row.peak_bytes == PUBLISHED.peak_bytes
    assert row.margin_bytes / 2**30 == pytest.approx(
        184.31 - 139.6
    )  # the published '44 GiB headroom'


def test_stock_needs_the_saved_bytes_on_top_of_the_pooled_peak():
    r = _report("gb200")
    for stage in range(8):
        by = {x.variant: x for x in r.rows if x.stage == stage}
        assert by["stock"].peak_bytes - by["automodel"].peak_bytes == CAL.model().saved_bytes(stage)


def test_the_seed_story_on_stated_assumptions():
    # fullest stage anchored, capacity 184.31: stock sits at the edge (fits by ~23 MiB; published: OOM by 56 MiB)
    edge = _report("gb200-184.31").worst("stock")
    assert -56 * 2**20 < edge.margin_bytes < 64 * 2**20
    # anchored on stage 0 (only rank 0 logs): stock OOMs by 3.23 GiB (receive buffers alone, no overhead)
    rank0 = _report(
        "gb200",
        ReferencePeak.from_gib(139.6, config=PoolConfig(slack=2), policy="automodel", stage=0),
    ).worst("stock")
    assert not rank0.fits and rank0.margin_bytes / 2**30 == pytest.approx(-3.23, abs=0.01)


def test_h100_is_an_oom_for_every_policy_and_says_by_how_much():
    r = _report("h100")
    assert all(not r.worst(v).fits for v in ("stock", "automodel", "tight", "live_set"))
    assert verdict(r.worst("tight").margin_bytes).startswith("OOM by ") and "GiB" in verdict(
        r.worst("tight").margin_bytes
    )


def test_bad_capacities_and_references_are_named():
    with pytest.raises(
        MemoryModelError, match=r"^capacity: found 'tpu9'.*Fix: e.g. gb200"
    ) as raised:
        get_device("tpu9")
    assert "--" not in str(
        raised.value
    )  # the library names its own field; `pooltk memory` names its flag
    with pytest.raises(MemoryModelError, match=r"^capacity: found -1.*required a capacity > 0"):
        get_device(-1)
    heavy = ReferencePeak.from_gib(
        139.6, config=PoolConfig(slack=2), policy="automodel", weights_bytes=100 * 2**30
    )
    with pytest.raises(
        MemoryModelError, match=r"more than the model's weights per GPU \(100.00 GiB\)"
    ):
        _report("h100", heavy)
    with pytest.raises(
        MemoryModelError, match=r"reference peak: found 1.00 GiB, below its own receive buffers"
    ):
        _report("gb200", ReferencePeak.from_gib(1.0))
    with pytest.raises(MemoryModelError, match=r"reference stage: found 9"):
        _report("gb200", ReferencePeak.from_gib(139.6, stage=9))


def test_every_device_has_a_source_and_a_torch_style_capacity():
    assert {"gb200", "h100"} <= set(DEVICES)
    assert all(d.source and 50 < d.gib < 200 for d in DEVICES.values())


def test_there_is_one_gb200_capacity_and_it_names_the_figure_it_is_not():
    gb200 = {d.capacity_bytes for name, d in DEVICES.items() if name.startswith("gb200")}
    assert gb200 == {round(184.31 * 2**30)}
    assert "out-of-memory" in DEVICES["gb200"].source and "187.28" in DEVICES["gb200"].source


@pytest.mark.parametrize(
    "device,needle",
    [
        ("gb200", "automodel     fullest stage 1: fits, 44.71 GiB free"),
        ("h100", "tight         fullest stage 1: OOM by 57.58 GiB"),
    ],
)
def test_cli_capacity_answers_for_gb200_and_h100(capsys, device, needle):
    rc = main(["memory", "--preset", "kimi-k3-gb200-2k-calibrated", "--capacity", device])
    out = capsys.readouterr().out
    assert rc == 0 and needle in out and "assumed: every stage holds the same" in out


def test_cli_capacity_without_a_reference_peak_says_how_to_give_one(capsys):
    rc = main(["memory", "--preset", "kimi-k3-gb200-1k-hidden", "--capacity", "h100"])
    err = capsys.readouterr().err
    assert rc == 2 and "--reference-peak-gib" in err and "Traceback" not in err


def test_cli_loads_the_k3_automodel_yaml_and_answers_fits(capsys):
    path = (
        Path(__file__).resolve().parents[2] / "data" / "configs" / "kimi_k3_gb200_2k_automodel.yaml"
    )
    rc = main(
        [
            "memory",
            "--config",
            str(path),
            "--boundary-mib",
            "416",
            "--capacity",
            "gb200",
            "--reference-peak-gib",
            "139.6",
        ]
    )
    out = capsys.readouterr().out
    assert rc == 0 and "pp=8 M=64" in out and "fits on gb200: 184.31 GiB" in out


def test_the_fits_answer_shows_torch_2_15s_own_last_stage_as_the_fullest(capsys):
    # Stock torch >= 2.15 keeps all M forward buffers on the last stage: on the calibrated Kimi-K3 shape
    # (64 x 416 MiB = 26 GiB there) that stage, not a middle one, decides whether stock-lazy fits.
    rc = main(["memory", "--preset", "kimi-k3-gb200-2k-calibrated", "--capacity", "h100"])
    out = capsys.readouterr().out
    assert rc == 0
    lines = {
        line.split(" fullest")[0].strip(): line
        for line in out.splitlines()
        if " fullest stage" in line
    }
    assert "stage 7:" in lines["stock-lazy"] and "stage 1:" in lines["lazy-released"]
    by = {
        k: float(v.split("OOM by ")[1].split()[0])
        for k, v in lines.items()
        if k in ("stock-lazy", "lazy-released")
    }
    # stage 7 stock-lazy holds 64 sets (26.00 GiB); the released fullest stage 1 holds 7 + 1 (3.25 GiB)
    assert by["stock-lazy"] - by["lazy-released"] == pytest.approx(26.00 - 3.25, abs=0.011)


@pytest.mark.parametrize(
    ("argv", "needle"),
    [
        (
            ["--capacity", "tpu9"],
            "pooltk memory: error: --capacity: found 'tpu9'; required one of gb200",
        ),
        (
            ["--capacity", "gb200", "--reference-peak-gib", "-1"],
            "--reference-peak-gib: found -1.0; required a peak > 0 GiB",
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
    # the peak came from the preset, not from --reference-peak-gib: the message must not name that flag
    from pooltk.memory.fits import fit_report

    tiny = ReferencePeak.from_gib(1, config=PoolConfig(slack=2), policy="automodel")
    with pytest.raises(MemoryModelError, match=r"^reference peak: found 1.00 GiB"):
        fit_report(
            get_preset("kimi-k3-gb200-2k-calibrated").shape,
            get_preset("kimi-k3-gb200-2k-calibrated").boundary,
            PoolConfig(),
            "gb200",
            tiny,
        )
