"""`pooltk estimate`: the whole-stage table, the verdict against a named capacity, JSON, errors
naming flags, and `pooltk memory --estimate` still running it."""

from __future__ import annotations

import json

import pytest
import torch

from pooltk.cli import main

TINY = {
    "model_type": "llama",
    "hidden_size": 16,
    "num_hidden_layers": 2,
    "num_attention_heads": 2,
    "intermediate_size": 24,
    "vocab_size": 40,
    "torch_dtype": "bfloat16",
}


@pytest.fixture()
def tiny(tmp_path):
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    path = tmp_path / "config.json"
    path.write_text(json.dumps(TINY))
    yield str(path)
    torch.set_num_threads(before)


def test_the_estimate_prints_every_rank_category_and_a_verdict_on_a_named_capacity(tiny, capsys):
    rc = main(
        [
            "estimate",
            "--config",
            tiny,
            "--pp",
            "2",
            "--microbatches",
            "2",
            "--seq-len",
            "8",
            "--variants",
            "stock,pooled",
            "--capacity",
            "h100",
            "--unit",
            "mib",
        ]
    )
    captured = capsys.readouterr()
    assert rc == 0, captured.err
    out = captured.out
    assert (
        "whole-stage estimate: llama: hidden 16" in out
        and "recv_buffers" in out
        and "peak at" in out
    )
    assert (
        "fits on h100: 79.18 GiB" in out
        and "overhead added to every estimate" in out
        and "not modelled:" in out
    )
    assert "[estimate] rank 1 pooled: peak" in captured.err


def test_the_estimate_as_json_carries_the_replays_the_receive_check_and_the_verdict(tiny, capsys):
    rc = main(
        [
            "estimate",
            "--config",
            tiny,
            "--pp",
            "2",
            "--microbatches",
            "2",
            "--seq-len",
            "8",
            "--variants",
            "stock",
            "--ranks",
            "1",
            "--capacity",
            "gb200",
            "--json",
        ]
    )
    data = json.loads(capsys.readouterr().out)
    assert rc == 0 and [r["rank"] for r in data["replays"]] == [1]
    rep = data["replays"][0]
    assert rep["at_peak_bytes"]["recv_buffers"] == rep["modelled_receive_bytes"] == 2 * 8 * 16 * 2
    assert data["fits"]["device"]["name"] == "gb200" and data["fits"]["rows"][0]["fits"]


@pytest.mark.parametrize(
    "argv,needle",
    [
        ([], "estimate source: found neither"),
        (["--variants", "stock,fresh"], "variants: found ['fresh']"),
        (["--ranks", "0,x"], "--ranks: found '0,x'"),
        (["--split", "1,x"], "--split: found '1,x'"),
        (["--overhead-gib", "-1"], "--overhead-gib: found -1.0; required a finite number >= 0"),
        (["--sharing", "stage"], "--sharing: found 'stage'; required rank"),
        (["--preset", "kimi-k3-gb200-2k-calibrated"], "required one of llama3-70b-pp8"),
    ],
)
def test_bad_input_exits_2_naming_what_to_change(tiny, capsys, argv, needle):
    extra = (
        ["--config", tiny, "--pp", "2", "--microbatches", "2", "--seq-len", "8"]
        if argv and argv[0] != "--preset"
        else []
    )
    rc = main(["estimate", *argv, *extra])
    err = capsys.readouterr().err
    last = err.splitlines()[-1]  # after any replay progress
    assert rc == 2 and last.startswith("pooltk estimate: error: ") and "Traceback" not in err
    assert needle in last and "Fix:" in last


def test_memory_estimate_says_where_it_moved_and_runs_it(tiny, capsys):
    argv = ["--config", tiny, "--pp", "2", "--microbatches", "2", "--seq-len", "8"]
    argv += ["--variants", "stock", "--ranks", "1", "--json"]
    rc = main(["memory", "--estimate", *argv])
    moved = capsys.readouterr()
    assert rc == 0 and main(["estimate", *argv]) == 0
    direct = capsys.readouterr()
    assert moved.err.splitlines()[0] == (
        "pooltk: `pooltk memory --estimate` is now `pooltk estimate`; running it"
    )
    assert "memory --estimate" not in direct.err

    def without_times(text: str) -> dict:
        data = json.loads(text)
        for replay in data["replays"]:
            replay.pop("wall_s", None)
        return data

    assert without_times(moved.out) == without_times(direct.out)


def test_memory_estimate_errors_name_the_new_command(capsys):
    rc = main(["memory", "--estimate"])
    err = capsys.readouterr().err.splitlines()
    assert rc == 2 and err[0].startswith("pooltk: `pooltk memory --estimate` is now")
    assert err[1].startswith("pooltk estimate: error: estimate source: found neither")


def test_the_k3_story_prints_the_published_figures_beside_the_model(capsys):
    rc = main(["memory", "--k3-story"])
    out = capsys.readouterr().out
    assert (
        rc == 0
        and "OOM in step 1 ('by only 56 MiB')" in out
        and "They agree:" in out
        and "184.31 GiB" in out
    )


def test_an_abbreviated_estimate_flag_on_memory_names_the_new_command(capsys):
    rc = main(["memory", "--estim"])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("pooltk memory: error: --estimate: found")
    assert "Fix: run `pooltk estimate` with the same flags" in err


def _no_replay(*args, **kwargs):
    raise AssertionError("the replay ran: the bad flag should have been refused before it")


@pytest.mark.parametrize(
    "argv,needle",
    [
        (["--steps", "0"], "--steps: found 0; required an integer >= 1"),
        (["--overhead-gib", "-1"], "--overhead-gib: found -1.0; required a finite number >= 0"),
        (["--capacity", "nodevice"], "--capacity: found 'nodevice'"),
        (["--run-log", "/nonexistent/train.log"], "/nonexistent/train.log"),
        (["--preset", "llama3-70b-pp8"], "--preset: found --preset llama3-70b-pp8 with --config"),
        (["--ep", "0"], "--ep: found 0; required an integer >= 1"),  # was the file's ep
        (["--dtype", "nope"], "--dtype: found 'nope'"),  # was named DecoderConfig.dtype
        (["--dtype", "int8"], "--dtype: found 'int8'; required a floating dtype"),
    ],
)
def test_a_bad_or_conflicting_flag_is_refused_before_the_replay_never_ignored(
    tiny, capsys, monkeypatch, argv, needle
):
    monkeypatch.setattr("pooltk.memory.replay.estimate.estimate_memory", _no_replay)
    shape = ["--pp", "2", "--microbatches", "2", "--seq-len", "8"]
    rc = main(["estimate", "--config", tiny, *shape, *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("pooltk estimate: error: "), err
    assert needle in err and "Fix:" in err


@pytest.mark.parametrize(
    "argv",
    [
        ["--pp", "4"],
        ["--seq-len", "2048", "--dtype", "float32"],
        ["--schedule", "gpipe"],
        ["--split", "torchtitan"],
        ["--checkpointing", "full", "--ep", "2"],
    ],
)
def test_a_preset_refuses_the_shape_and_model_flags_it_would_ignore(capsys, monkeypatch, argv):
    monkeypatch.setattr("pooltk.memory.replay.estimate.estimate_memory", _no_replay)
    rc = main(["estimate", "--preset", "llama3-70b-pp8", *argv])
    err = capsys.readouterr().err
    assert rc == 2 and err.startswith("pooltk estimate: error: --preset: found "), err
    assert all(flag in err for flag in argv if flag.startswith("--")) and "Fix:" in err
