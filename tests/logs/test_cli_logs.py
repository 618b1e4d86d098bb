"""``pooltk logs``: a summary row per run, CSV and JSON output, and a clear non-zero exit on bad
input."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from pooltk.cli import main

FIX = Path(__file__).resolve().parent / "fixtures"


def test_table_has_one_row_per_run_with_format_and_bases(capsys):
    assert (
        main(
            [
                "logs",
                str(FIX / "bench_run"),
                str(FIX / "torchtitan_wps_2024.log"),
                "--active-params",
                "104e9",
                "--device-capacity-gb",
                "186",
            ]
        )
        == 0
    )
    out = capsys.readouterr().out
    header, first, second = out.splitlines()[:3]
    assert header.split()[:3] == ["run", "format", "steps"]
    assert (
        first.startswith("k3_like")
        and "automodel_bench" in first
        and "655.4" in first
        and "139.90" in first
    )
    assert second.startswith("torchtitan_wps_2024") and "torchtitan" in second
    assert "MFU basis: 655.4 tok/s/GPU x 6 x 104e9 active params / 2250 TFLOP/s" in out
    assert "headroom against 173.23 GiB = 186.00 GB" in out


def test_csv_output(tmp_path, capsys):
    out = tmp_path / "s.csv"
    assert (
        main(
            [
                "logs",
                str(FIX / "automodel_text_current.log"),
                "--csv",
                str(out),
                "--world-size",
                "4",
            ]
        )
        == 0
    )
    f = pd.read_csv(out)
    assert (
        list(f["run"]) == ["automodel_text_current"]
        and f["tok_per_s_per_gpu"].iloc[0] == (8000 + 8100 + 8200 + 8000 + 8000) / 5 / 4
    )  # steps 2..6 over 4 GPUs
    assert f["skipped_lines"].iloc[0] == 1


def test_json_output_has_mfu_for_every_peak_and_file_reports(capsys):
    assert (
        main(
            [
                "logs",
                str(FIX / "bench_run"),
                "--json",
                "--active-params",
                "104e9",
                "--peak-tflops",
                "2250",
                "2500",
            ]
        )
        == 0
    )
    payload = json.loads(capsys.readouterr().out)
    (run,) = payload["runs"]
    assert [m["peak_tflops"] for m in run["mfu_by_peak"]] == [2250.0, 2500.0]
    assert run["run_facts"]["world_size"] == 256
    assert {f["format"] for f in payload["files"]} == {"automodel_bench", "automodel_bench_summary"}


def test_unreadable_input_exits_2_with_file_and_reason(tmp_path, capsys):
    bad = tmp_path / "x.log"
    bad.write_bytes(b"\x00\x01garbage\n")
    assert main(["logs", str(bad)]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith("pooltk logs: error: ")
        and str(bad) in err
        and ("no record of a supported format" in err or "binary data" in err)
    )
    assert main(["logs", str(tmp_path / "missing.log")]) == 2
    assert "no such file or folder" in capsys.readouterr().err
    assert main(["logs", str(FIX / "automodel_text_current.log"), "--strict"]) == 2
    assert "automodel_text_current.log:12" in capsys.readouterr().err


def test_a_benchmark_summary_alone_exits_2_naming_it_and_asking_for_the_log(tmp_path, capsys):
    summary = tmp_path / "k3_like_summary.json"
    summary.write_bytes((FIX / "bench_run" / "k3_like_summary.json").read_bytes())
    for extra in ([], ["--json"], ["--csv", str(tmp_path / "out.csv")]):
        assert main(["logs", str(tmp_path), *extra]) == 2
        err = capsys.readouterr().err
        assert err.startswith("pooltk logs: error: found no step records") and str(summary) in err
        assert "Traceback" not in err and "point at the run's log" in err


def test_bad_flags_exit_2(capsys):
    assert main(["logs", str(FIX / "torchtitan_wps_2024.log"), "--format", "megatron"]) == 2
    assert "--format: found 'megatron'" in capsys.readouterr().err
    assert main(["logs", str(FIX / "torchtitan_wps_2024.log"), "--peak-tflops", "0"]) == 2


@pytest.mark.parametrize(
    "flags,found",
    [
        (["--world-size", "0"], "--world-size: found 0"),  # tok/s per GPU divided by 0
        (["--pp", "0"], "--pp: found 0"),
        (["--global-batch", "0"], "--global-batch: found 0"),
        (["--warmup-steps", "-1"], "--warmup-steps: found -1"),  # 'excluded the first -1'
        (["--flops-per-token", "nan"], "--flops-per-token: found nan"),
        (["--active-params", "inf"], "--active-params: found inf"),  # named FlopsBasis.six_n
        (["--device-capacity-gib", "inf"], "--device-capacity-gib: found inf"),
    ],
)
def test_a_run_fact_or_basis_no_run_can_have_is_refused_naming_its_flag(flags, found, capsys):
    assert main(["logs", str(FIX / "automodel_text_2025_07.log"), *flags]) == 2
    err = capsys.readouterr().err
    assert f"pooltk logs: error: {found}; required " in err and "Fix: " in err


def test_more_warmup_steps_than_the_run_logged_says_what_was_left_out(capsys):
    assert main(["logs", str(FIX / "automodel_text_2025_07.log"), "--warmup-steps", "50"]) == 0
    out = capsys.readouterr().out
    assert "excluded the first 2 logged step(s) (given 50; the run logged 3: the last kept)" in out


def test_json_and_csv_carry_each_runs_pool_columns(tmp_path, capsys):
    body = (FIX / "torchtitan_wps_2024.log").read_text()
    prefix = "2026-09-14 10:00:00,000 - pooltk - INFO - "
    (tmp_path / "pooled.log").write_text(
        prefix
        + (
            "pooltk: installed (policy=tight, slack=2, grad_slack=1, schedule=1f1b, "
            "layout=setup-recv-info)\n"
        )
        + body
    )
    (tmp_path / "unsaid.log").write_text(body)
    assert main(["logs", str(tmp_path), "--json"]) == 0
    runs = {r["run"]: r for r in json.loads(capsys.readouterr().out)["runs"]}
    assert {k: runs["pooled"][k] for k in ("pooled", "pool_impl", "slack", "layout")} == {
        "pooled": True,
        "pool_impl": "pooltk",
        "slack": 2,
        "layout": "setup-recv-info",
    }
    assert runs["unsaid"]["pooled"] is None  # the log does not say: missing, never False
    assert type(runs["pooled"]["slack"]) is int and runs["unsaid"]["slack"] is None  # not 2.0
    out = tmp_path / "runs.csv"
    assert main(["logs", str(tmp_path), "--csv", str(out)]) == 0
    frame = pd.read_csv(out, dtype=str, keep_default_na=False).set_index("run")
    assert frame.loc["pooled", "pooled"] == "True" and frame.loc["pooled", "pool_impl"] == "pooltk"
    assert (frame.loc["pooled", "slack"], frame.loc["unsaid", "slack"]) == ("2", "")


def test_every_pool_warning_pooltk_logs_is_read_back_with_its_rank_and_stage():
    """The contract with pooltk/pool/events.py: each WARNING a ring logs, from rank 0 and from
    another rank."""
    import polars as pl

    from pooltk.logs import runs
    from pooltk.pool import events

    warned = [
        events.event(
            "re-homed",
            stage=3,
            direction="forward",
            slot=0,
            bytes=96,
            holders=1,
            check="views",
            incoming=3,
        ),
        events.event(
            "no-saving",
            stage=2,
            direction="grad",
            held_sets=4,
            stock=4,
            ring=3,
            rehomes=1,
            check="c++",
        ),
        events.event("kept-graph", stage=1, reason="the loss is a view"),
    ]
    lines = [
        f"[rank{r}]:2026-12-04 10:00:0{i},000 - WARNING - "
        + (e.message if r == 0 else e.message.replace("pooltk: ", f"pooltk: [rank {r}] ", 1))
        for i, (r, e) in enumerate(zip((3, 0, 1), warned, strict=True))
    ]
    facts = [p.facts for p in runs.find_pool_lines(pl.Series(lines))]
    assert [(f.get("rank"), f["stage"], f["what"]) for f in facts] == [
        (3, 3, "re-homed"),
        (None, 2, "saved nothing"),
        (1, 1, "kept graph"),
    ]
    assert facts[0]["bytes"] == 96 and (facts[1]["held"], facts[1]["stock"]) == (4, 4)
