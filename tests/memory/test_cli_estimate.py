"""`pooltk memory --estimate`: the whole-stage table, the verdict against a named capacity, JSON, and errors naming flags."""

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
            "memory",
            "--estimate",
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
            "memory",
            "--estimate",
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
        (["--estimate"], "estimate source: found neither"),
        (["--estimate", "--variants", "stock,fresh"], "variants: found ['fresh']"),
        (["--estimate", "--ranks", "0,x"], "--ranks: found '0,x'"),
        (
            ["--estimate", "--preset", "kimi-k3-gb200-2k-calibrated"],
            "required one of llama3-70b-pp8",
        ),
    ],
)
def test_bad_input_exits_2_naming_what_to_change(tiny, capsys, argv, needle):
    extra = (
        ["--config", tiny, "--pp", "2", "--microbatches", "2", "--seq-len", "8"]
        if "--variants" in argv or "--ranks" in argv
        else []
    )
    rc = main(["memory", *argv, *extra])
    err = capsys.readouterr().err
    assert rc == 2 and needle in err and "Traceback" not in err


def test_the_k3_story_prints_the_published_figures_beside_the_model(capsys):
    rc = main(["memory", "--k3-story"])
    out = capsys.readouterr().out
    assert (
        rc == 0
        and "OOM in step 1 ('by only 56 MiB')" in out
        and "They agree:" in out
        and "184.31 GiB" in out
    )
