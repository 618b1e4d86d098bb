"""`pooltk memory`: presets, explicit flags, YAML configs, JSON, and errors that name the
problem."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from pooltk.cli import main

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "data" / "configs" / "kimi_k3_gb200_2k_example.yaml"


def _run(capsys, *argv: str) -> tuple[int, str, str]:
    rc = main(["memory", *argv])
    out = capsys.readouterr()
    return rc, out.out, out.err


def test_preset_table_shows_every_column_with_units(capsys):
    rc, out, _ = _run(capsys, "--preset", "kimi-k3-gb200-2k-calibrated")
    assert rc == 0
    assert (
        "stock" in out
        and "automodel" in out
        and "tight" in out
        and "live set" in out
        and "saved (automodel)" in out
    )
    assert "GIB (2**30 bytes)" in out
    stage3 = next(line for line in out.splitlines() if line.split()[:1] == ["3"])
    assert (
        "64+64 = 52.00" in stage3
        and "7+7 = 5.69" in stage3
        and "7+2 = 3.66" in stage3
        and "5+1 = 2.44" in stage3
    )
    assert stage3.split()[-1] == "46.31"


def test_json_carries_exact_bytes_per_stage_and_direction(capsys):
    rc, out, _ = _run(capsys, "--preset", "kimi-k3-gb200-2k-calibrated", "--json")
    assert rc == 0
    data = json.loads(out)
    assert data["stages"][3]["stock_bytes"] == 52 * 2**30
    row = next(r for r in data["rows"] if r["stage"] == 3 and r["direction"] == "forward")
    assert (row["stock_sets"], row["automodel_sets"], row["tight_sets"], row["live_set_sets"]) == (
        64,
        7,
        7,
        5,
    )
    assert data["config"]["policy"] == "automodel" and data["shape"]["n_microbatches"] == 64
    assert "calibrated" in data["source"]["assumption"].lower()


def test_overrides_change_the_policy_and_slack(capsys):
    rc, out, _ = _run(
        capsys,
        "--preset",
        "kimi-k3-gb200-2k-calibrated",
        "--policy",
        "tight",
        "--slack",
        "0",
        "--grad-slack",
        "0",
        "--json",
    )
    data = json.loads(out)
    assert (
        rc == 0
        and data["stages"][3]["pooled_bytes"]
        == 6 * 416 * 2**20
        == data["stages"][3]["live_set_bytes"]
    )


def test_explicit_flags_from_batch_sizes(capsys):
    rc, out, _ = _run(
        capsys,
        "--pp",
        "8",
        "--global-batch",
        "4096",
        "--micro-batch",
        "2",
        "--dp",
        "32",
        "--seq-len",
        "2048",
        "--hidden",
        "7168",
        "--dtype",
        "bf16",
        "--json",
    )
    data = json.loads(out)
    assert (
        rc == 0
        and data["shape"]["n_microbatches"] == 64
        and data["stages"][3]["stock_bytes"] == 7 * 2**30
    )


def test_boundary_override_in_mib(capsys):
    rc, out, _ = _run(
        capsys,
        "--pp",
        "4",
        "--microbatches",
        "8",
        "--seq-len",
        "16",
        "--hidden",
        "32",
        "--boundary-mib",
        "1",
        "--json",
    )
    assert rc == 0 and json.loads(out)["stages"][1]["stock_bytes"] == 16 * 2**20


def test_config_file(capsys):
    rc, out, _ = _run(capsys, "--config", str(EXAMPLE), "--json")
    data = json.loads(out)
    assert rc == 0 and data["shape"]["pp"] == 8 and data["shape"]["n_microbatches"] == 64
    assert data["stages"][3]["stock_bytes"] == 7 * 2**30


def test_config_with_a_missing_key_names_it(capsys, tmp_path):
    bad = tmp_path / "k3.yaml"
    bad.write_text(EXAMPLE.read_text().replace("  seq_len: 2048\n", ""))
    rc, out, err = _run(capsys, "--config", str(bad))
    assert rc == 2 and out == ""
    assert (
        "config key 'dataset.seq_len': found nothing (missing)" in err
        and "Fix: add `dataset.seq_len:" in err
    )


@pytest.mark.parametrize(
    "argv,needle",
    [
        (
            ["--pp", "8", "--microbatches", "4", "--seq-len", "8", "--hidden", "8"],
            "required M >= pp",
        ),
        (
            ["--pp", "8", "--microbatches", "8", "--seq-len", "0", "--hidden", "8"],
            "seq-len: found 0; required an integer >= 1",
        ),
        (
            [
                "--pp",
                "8",
                "--microbatches",
                "8",
                "--seq-len",
                "8",
                "--hidden",
                "8",
                "--dtype",
                "bf17",
            ],
            "error: --dtype: found 'bf17'",
        ),
        (
            [
                "--pp",
                "8",
                "--global-batch",
                "4000",
                "--micro-batch",
                "3",
                "--dp",
                "32",
                "--seq-len",
                "8",
                "--hidden",
                "8",
            ],
            "required a whole number of microbatches",
        ),
        (
            [
                "--pp",
                "8",
                "--microbatches",
                "8",
                "--seq-len",
                "8",
                "--hidden",
                "8",
                "--schedule",
                "gpipe",
            ],
            "--allow-unpoolable",
        ),
        (
            [
                "--pp",
                "8",
                "--microbatches",
                "8",
                "--seq-len",
                "8",
                "--hidden",
                "8",
                "--schedule",
                "zigzag",
            ],
            "found 'zigzag'",
        ),
        (["--preset", "kimi-k3-gb200-2k-hidden", "--pp", "4"], "exactly one of --preset, --config"),
        ([], "exactly one of --preset"),
        (["--pp", "8", "--microbatches", "8"], "no --seq-len, --hidden"),
        (
            ["--pp", "8", "--microbatches", "8", "--dp", "2", "--seq-len", "8", "--hidden", "8"],
            "drop --microbatches, or drop --global-batch and --dp",
        ),
        (
            ["--config", str(REPO / "data" / "configs" / "kimi_k3_text_config.json"), "--pp", "8"],
            "Fix: e.g. --pp=8 --microbatches=64",
        ),
        (["--preset", "kimi-k3-gb200-2k-hidden", "--slack", "-1"], "error: --slack: found -1"),
        (
            ["--preset", "kimi-k3-gb200-2k-hidden", "--schedule", "zbvzerobubble", "--vpp", "3"],
            "error: --vpp: found 3 under ZBVZeroBubble; required 2",
        ),
        (
            [
                "--pp",
                "4",
                "--microbatches",
                "1",
                "--seq-len",
                "4",
                "--hidden",
                "8",
                "--schedule",
                "dualpipev",
            ],
            "shape under DualPipeV: found pp=4 M=1 schedule=dualpipev vpp=2 (8 stages); "
            "required a shape torch's schedule accepts",
        ),
    ],
)
def test_bad_input_exits_2_with_found_required_fix(capsys, argv, needle):
    rc, out, err = _run(capsys, *argv)
    assert rc == 2 and out == ""
    assert needle in err and "Fix:" in err and "Traceback" not in err
    assert "Overrides." not in err  # the library names its fields; the command line shows its flags


def test_gpipe_with_the_pool_standing_down(capsys):
    rc, out, _ = _run(
        capsys,
        "--pp",
        "4",
        "--microbatches",
        "8",
        "--seq-len",
        "2",
        "--hidden",
        "2",
        "--schedule",
        "gpipe",
        "--allow-unpoolable",
    )
    assert rc == 0 and "cannot be pooled" in out


def test_list_presets_shows_provenance(capsys):
    rc, out, _ = _run(capsys, "--list-presets")
    assert rc == 0
    for name in (
        "kimi-k3-gb200-2k-calibrated",
        "kimi-k3-gb200-2k-hidden",
        "kimi-k3-gb200-1k-calibrated",
        "kimi-k3-gb200-1k-hidden",
    ):
        assert name in out
    assert (
        "[published] stock_middle_stage_gib = 52 gib" in out
        and "[derived] set_mib = 416 mib" in out
    )


def test_installed_entry_point_runs_the_command():
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "pooltk",
            "memory",
            "--preset",
            "kimi-k3-gb200-2k-calibrated",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=120,
        cwd=REPO,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["stages"][3]["saved_bytes"] == (128 - 14) * 416 * 2**20


def test_an_unknown_preset_names_the_flag(capsys):
    rc, out, err = _run(capsys, "--preset", "nope")
    assert rc == 2 and out == ""
    assert err.startswith(
        "pooltk memory: error: --preset: found 'nope'; "
        "required one of 'kimi-k3-gb200-2k-calibrated'"
    )
    assert "Fix: run `pooltk memory --list-presets`" in err


def test_a_multi_stage_schedule_answers_per_rank_with_rank_shared_rings(capsys):
    from pooltk.analysis.lifetimes import lifetimes, shared_slots

    argv = (
        "--pp",
        "4",
        "--microbatches",
        "16",
        "--seq-len",
        "4",
        "--hidden",
        "8",
        "--schedule",
        "interleaved1f1b",
        "--vpp",
        "2",
        "--slack",
        "0",
        "--grad-slack",
        "0",
    )
    rc, out, _ = _run(capsys, *argv, "--json")
    data = json.loads(out)
    assert (
        rc == 0
        and data["shape"]["stages_per_rank"] == 2
        and len(data["stages"]) == 8
        and len(data["ranks"]) == 4
    )
    set_bytes = 4 * 8 * 2  # one bf16 (1, 4, 8) set
    # slack 0: the rank-shared rings are the rank's live set, which the analysis counts on its own
    slots = shared_slots(lifetimes("Interleaved1F1B", pp=4, n_microbatches=16, stages_per_rank=2))
    assert sum(r["shared_bytes"] for r in data["ranks"]) == slots.per_rank_direction * set_bytes
    assert all(r["pooled_bytes"] == r["shared_bytes"] <= r["tight_bytes"] for r in data["ranks"])
    assert sum(r["stock_bytes"] for r in data["ranks"]) == sum(
        s["stock_bytes"] for s in data["stages"]
    )
    rc, text, _ = _run(capsys, *argv)
    assert rc == 0 and "per rank" in text and "rank-shared" in text and "0 (r0)" in text
    rc, out, _ = _run(capsys, *argv, "--sharing", "stage", "--json")
    assert all(r["pooled_bytes"] == r["tight_bytes"] for r in json.loads(out)["ranks"])


def test_v_schedule_handoffs_show_stock_m_and_nothing_pooled(capsys):
    rc, out, _ = _run(
        capsys,
        "--pp",
        "4",
        "--microbatches",
        "8",
        "--seq-len",
        "4",
        "--hidden",
        "8",
        "--schedule",
        "ZBVZeroBubble",
        "--json",
    )
    rows = [r for r in json.loads(out)["rows"] if r["handoff"]]
    assert rc == 0 and [(r["stage"], r["direction"]) for r in rows] == [(3, "grad"), (4, "forward")]
    assert all(
        r["stock_sets"] == 8 and r["pooled_sets"] == 0 and r["pooled_bytes"] == 0 for r in rows
    )


@pytest.fixture
def widths_preset():
    """The published-widths preset, as `pooltk memory --preset` finds it."""
    from pooltk.studies.kimi_k3 import get_preset

    return get_preset("kimi-k3-gb200-2k-widths")


def test_the_widths_preset_prints_every_boundary_and_its_difference_from_the_calibration(
    capsys, widths_preset
):
    rc, out, _ = _run(
        capsys, "--preset", widths_preset.name, "--compare", "kimi-k3-gb200-2k-calibrated"
    )
    assert rc == 0 and "boundaries (they differ per stage):" in out
    assert "    6 (stage 6 -> 7): " in out and "448.0 MiB per forward set" in out
    section = out[out.index("beside kimi-k3-gb200-2k-calibrated") :]
    stage3 = next(line for line in section.splitlines() if line.split()[:1] == ["3"])
    assert stage3.split()[1:4] == [
        "38.50",
        "52.00",
        "-13.50",
    ]  # 64 x (5 + 6) x 56 MiB against 128 x 416 MiB
    rc, out, _ = _run(capsys, "--preset", widths_preset.name, "--json")
    bounds = json.loads(out)["boundaries"]
    assert [b["forward_set_bytes"] // (56 * 2**20) for b in bounds] == [3, 4, 5, 6, 7, 7, 8]


def test_the_widths_preset_follows_a_schedule_with_more_stages(capsys, widths_preset):
    rc, out, _ = _run(
        capsys, "--preset", widths_preset.name, "--schedule", "interleaved1f1b", "--json"
    )
    data = json.loads(out)
    assert rc == 0 and len(data["boundaries"]) == 15
    # boundaries of different widths never share a ring: each ring holds one set size
    for ring in data["rings"]:
        widths = {
            data["boundaries"][s - 1 if ring["direction"] == "forward" else s]["forward_set_bytes"]
            for s in ring["stages"]
        }
        assert len(widths) == 1
