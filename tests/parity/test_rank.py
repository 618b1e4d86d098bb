"""The one rank entry: its digest, re-home tally and root cause, and every launch through it."""

from __future__ import annotations

import ast
from pathlib import Path
from types import SimpleNamespace

import pytest
import torch

from pooltk.parity.procs import Launch
from pooltk.parity.rank import (
    KINDS,
    RankLaunch,
    digest,
    error_record,
    failed_variant,
    now_running,
    rehomes,
)

PARITY = Path(__file__).resolve().parents[2] / "pooltk" / "parity"


def test_the_digest_tells_apart_one_bit_a_dtype_a_shape_and_an_order() -> None:
    x = torch.arange(12, dtype=torch.float32).reshape(3, 4)
    flipped = x.clone()
    flipped.view(torch.int32)[1, 2] ^= 1  # the lowest mantissa bit of one element
    assert digest(x) == digest(x.clone()) == digest([x]) == digest(x.t().t())
    assert digest(x) != digest(flipped)
    assert digest(x) != digest(x.reshape(4, 3))  # the same bytes, another shape
    assert digest(x) != digest(x.view(torch.int32))  # the same bytes, another dtype
    assert digest([x, flipped]) != digest([flipped, x])


def test_the_digest_reads_every_dtype_by_its_bytes_and_recurses_into_nested_lists() -> None:
    for dtype in (torch.bfloat16, torch.float16, torch.bool, torch.int64):
        t = torch.ones(5, dtype=dtype)
        assert digest(t) == digest(t.clone())
    a, b = torch.zeros(3), torch.tensor([0.0, 0.0, 1.0])
    assert digest([[a], 1]) != digest([[b], 1])  # a nested tensor is hashed, not its repr
    assert digest([[a], 1]) != digest([[a], 2])  # anything else by its repr
    assert digest(torch.zeros(0)) == digest(torch.empty(0))


def test_the_digest_counts_a_dtensor_by_its_local_shard() -> None:
    local = torch.tensor([1.0, 2.0])
    sharded = torch.tensor([9.0, 9.0, 9.0])  # stands in for a DTensor: the digest reads to_local
    sharded.to_local = lambda: local
    assert digest(sharded) == digest(local) != digest(torch.tensor([9.0, 9.0, 9.0]))


def _event(kind: str, stage: int | None, direction: str = "forward", nbytes: int = 8):
    return SimpleNamespace(kind=kind, stage=stage, fields={"direction": direction, "bytes": nbytes})


def test_the_rehome_tally_counts_re_homes_and_bytes_per_stage_and_direction() -> None:
    report = SimpleNamespace(
        events=[
            _event("re-homed", 1, "forward", 64),
            _event("re-homed", 1, "forward", 32),
            _event("re-homed", 1, "backward", 16),
            _event("re-homed", None),  # not a stage's: not counted
            _event("installed", 2),
        ]
    )
    assert rehomes(report) == {
        1: {
            "forward": {"rehomes": 2, "rehomed_bytes": 96},
            "backward": {"rehomes": 1, "rehomed_bytes": 16},
        }
    }
    assert rehomes(None) == {}


def _launch(errors: list[dict]) -> RankLaunch:
    return RankLaunch(
        results=[None, None],
        errors=errors,
        tails={},
        launch=Launch(codes=[1, 1], timed_out=False, failed=True, wall_s=1.0),
    )


def _error(rank: int, t: float, *, overrun=None, peer=False) -> dict:
    return {"rank": rank, "time": t, "overrun": overrun, "peer_connection": peer}


def test_the_root_cause_is_an_overrun_first_then_the_earliest_error_no_peer_echoes() -> None:
    echo, own, later = _error(0, 1.0, peer=True), _error(1, 2.0), _error(2, 3.0)
    assert _launch([echo, own, later]).cause() is own
    overrun = _error(2, 5.0, overrun={"direction": "forward"})
    assert _launch([echo, own, overrun]).cause() is overrun
    assert _launch([echo]).cause() is echo  # only echoes: the earliest
    assert _launch([]).cause() is None


def test_an_error_record_names_what_the_rank_ran_and_marks_a_peers_echo() -> None:
    now_running("variant pooled")
    try:
        raise RuntimeError("Connection reset by peer")
    except RuntimeError as exc:
        record = error_record(3, exc)
    finally:
        now_running(None)
    assert record["rank"] == 3 and record["running"] == "variant pooled"
    assert record["peer_connection"] and record["overrun"] is None
    assert failed_variant(record["traceback"]) == "pooled"


def _calls(tree: ast.AST) -> list[str]:
    names = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            f = node.func
            names.append(f.attr if isinstance(f, ast.Attribute) else getattr(f, "id", ""))
    return names


def test_only_the_rank_entry_joins_a_launched_group_digests_or_tallies_re_homes() -> None:
    """``command.py`` joins torchrun's group, ``one_stage.py`` a fake one: neither is launched."""
    offenders = []
    for path in sorted(PARITY.glob("*.py")):
        if path.name in ("rank.py", "command.py", "one_stage.py"):
            continue
        text = path.read_text()
        calls = _calls(ast.parse(text))
        if "init_process_group" in calls or "sha1" in calls or '"re-homed"' in text:
            offenders.append(path.name)
        if "pooltk.parity." in text and '"-m"' in text:
            offenders.append(f"{path.name} (starts a module of its own)")
    assert offenders == []


@pytest.mark.parametrize("kind", sorted(KINDS))
def test_every_kind_names_a_module_with_a_rank_body(kind: str) -> None:
    import importlib

    assert callable(importlib.import_module(KINDS[kind]).rank_body)
