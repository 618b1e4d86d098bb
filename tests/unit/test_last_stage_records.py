"""The recorded last-stage re-homes (data/validation/last_stage_rehomes_2026-12-01.csv, issue 17).

The table was made by ``python -m tools.last_stage`` (the command is in data/validation/README.md):
pp2 1F1B gloo launches, 3 steps, M 8 / 16 / 64, the parity model and a plain ``nn.Linear`` + MSE last
stage on 3-D and 2-D input, tight slack 0 and 2 with the last-stage release on and off, beside stock.
These tests hold the recorded claims; one small live launch re-checks the main claim on this torch.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.last_stage import heads  # noqa: E402
from tools.last_stage.records import FIELDS, MODELS, Record, read_csv, variants, write_csv  # noqa: E402

CSV = REPO / "data" / "validation" / "last_stage_rehomes_2026-12-01.csv"
MS = (8, 16, 64)
SLACKS = (0, 2)


@pytest.fixture(scope="module")
def records() -> list[Record]:
    return read_csv(CSV)


def _pooled(records, *, slack, release, stage=1):
    return [r for r in records if r.variant == "pooled" and r.slack == slack and r.release == release
            and r.stage == stage]


def test_the_table_covers_every_model_m_slack_and_release_from_one_code_version(records):
    assert {r.code for r in records} and len({r.code for r in records}) == 1
    assert len({r.torch for r in records}) == 1
    assert not next(iter({r.code for r in records})).endswith("+dirty")
    seen = {(r.model, r.microbatches, r.variant, r.slack, r.release, r.stage, r.direction) for r in records}
    want = set()
    for model in MODELS:
        for m in MS:
            want |= {(model, m, "stock", None, None, 0, "grad"), (model, m, "stock", None, None, 1, "forward")}
            for slack in SLACKS:
                for release in (True, False):
                    want |= {(model, m, "pooled", slack, release, 0, "grad"),
                             (model, m, "pooled", slack, release, 1, "forward")}
    assert seen == want
    assert len(records) == len(want)
    assert all(r.pp == 2 and r.schedule.lower() == "1f1b" and r.steps == 3 for r in records)


def test_with_the_release_the_last_stage_rehomes_nothing_at_slack_2_for_every_model_and_m(records):
    rows = _pooled(records, slack=2, release=True)
    assert {(r.model, r.microbatches) for r in rows} == {(mo, m) for mo in MODELS for m in MS}
    for r in rows:
        assert (r.rehomes, r.rehomed_bytes) == (0, 0), r
        assert r.storages == r.ring_sets == 3, r  # K_f = min(M, W + slack) = 1 + 2 on the last stage
        assert r.counted_bytes == r.storage_bytes == 3 * r.set_bytes, r


def test_without_the_release_the_last_stage_rehomes_at_slack_2_in_the_same_launches(records):
    # "before" and "after" come from the same launch (same code, same process group)
    for r in _pooled(records, slack=2, release=False):
        assert r.rehomes > 0 and r.rehomed_bytes == r.rehomes * r.set_bytes, r
    # the counts grow with M: the kept graphs hold the step's received inputs until it ends
    for model in MODELS:
        counts = [next(r.rehomes for r in _pooled(records, slack=2, release=False) if r.model == model
                       and r.microbatches == m) for m in MS]
        assert counts == sorted(counts) and counts[0] < counts[-1], (model, counts)


def test_at_slack_0_the_release_leaves_the_last_stage_no_rehome_unless_its_output_is_a_view(records):
    # K_f = 1 on the last stage: the slot is re-posted right after its own microbatch's backward. The
    # release (loss detached in place) and the done receive ops pointed at the resting alias leave no
    # holder, except where the stage output is a view (nn.Linear on 3-D input on torch <= 2.14): torch's
    # 1F1B step still holds the previous output in a local, and a view's graph cannot be cut in place.
    for r in _pooled(records, slack=0, release=True):
        assert r.ring_sets == r.storages == 1, r
        expected = r.steps * (r.microbatches - 1) if r.model == "linear3d" else 0
        assert r.rehomes == expected, r
        assert r.counted_bytes == r.set_bytes * (1 + r.rehomes), r
    for r in _pooled(records, slack=0, release=False):  # without the release the kept graphs hold every input
        assert r.rehomes >= r.steps * (r.microbatches - 1) - r.steps, r


def test_the_first_stage_gradient_ring_never_rehomes(records):
    rows = [r for r in records if r.variant == "pooled" and r.stage == 0]
    assert rows and all(r.direction == "grad" and r.rehomes == 0 and r.ring_sets == r.storages == 2 for r in rows)


def test_every_pooled_run_is_bitwise_equal_to_stock(records):
    pooled = [r for r in records if r.variant == "pooled"]
    assert pooled and all(r.bitwise_equal is True for r in pooled)
    assert all(r.bitwise_equal is None for r in records if r.variant == "stock")


def test_stock_holds_one_storage_per_microbatch_and_counted_bytes_add_every_rehomed_storage(records):
    for r in records:
        assert r.counted_bytes == r.storage_bytes + r.rehomed_bytes, r
        assert r.storage_bytes == r.storages * r.set_bytes, r
        assert r.set_bytes == r.rows_per_microbatch * r.seq_len * r.hidden * 4, r
        if r.variant == "stock":
            assert (r.storages, r.rehomes, r.ring_sets) == (r.microbatches, 0, None), r


def test_the_validation_readme_names_the_command_that_made_the_table(repo_root):
    text = (repo_root / "data" / "validation" / "README.md").read_text()
    assert "last_stage_rehomes_2026-12-01.csv" in text
    assert "python -m tools.last_stage --microbatches 8 16 64 --slack 0 2 --steps 3 --csv " \
           "data/validation/last_stage_rehomes_2026-12-01.csv" in text


def test_read_csv_names_a_missing_column(tmp_path):
    bad = tmp_path / "t.csv"
    bad.write_text("model,pp\nparity,2\n")
    with pytest.raises(ValueError, match="columns found .*required .*python -m tools.last_stage"):
        read_csv(bad)


def test_records_round_trip_through_the_csv(tmp_path, records):
    path = tmp_path / "again.csv"
    write_csv(records, path)
    assert read_csv(path) == records
    assert path.read_text().splitlines()[0].split(",") == list(FIELDS)


def test_the_linear_prelude_makes_only_the_last_stage_a_plain_linear_over_2d_batches(monkeypatch):
    import torch

    from pooltk.parity import worker
    from pooltk.parity.models import ToyModel

    monkeypatch.setattr(worker, "make_stage_module", worker.make_stage_module)  # restored after the test
    monkeypatch.setattr(worker, "make_batch", worker.make_batch)
    monkeypatch.setattr(sys, "argv", ["zygote", "1", "2", "/tmp/unused", "0"])
    heads.patch(two_d=True)
    first = worker.make_stage_module(hidden=8, layers_per_stage=1, stage_index=0, seed=0)
    last = worker.make_stage_module(hidden=8, layers_per_stage=1, stage_index=1, seed=0)
    again = worker.make_stage_module(hidden=8, layers_per_stage=1, stage_index=1, seed=0)
    assert isinstance(first, ToyModel) and isinstance(last, heads.LinearHead)
    assert all(torch.equal(a, b) for a, b in zip(last.parameters(), again.parameters()))  # seeded, not global RNG
    x, y = worker.make_batch(rows=4, seq_len=3, hidden=8, step=0, seed=0)
    assert x.shape == y.shape == (12, 8)
    h = x.clone().requires_grad_(True)
    assert last(h).grad_fn is not None and not last(h)._is_view()  # 2-D: a plain addmm, no view


def test_the_linear_prelude_refuses_a_process_without_the_zygote_arguments(monkeypatch):
    monkeypatch.setattr(sys, "argv", ["python"])
    with pytest.raises(RuntimeError, match="no world size.*run_parity"):
        heads.patch(two_d=False)


def test_variants_name_the_slack_and_the_release():
    names = [v.name for v in variants((0, 2))]
    assert names == ["stock", "tight-s0-release", "tight-s0-norelease", "tight-s2-release", "tight-s2-norelease"]
    assert [v.config.release for v in variants((2,))[1:]] == [True, False]


@pytest.mark.dist
def test_live_linear3d_last_stage_with_the_release_rehomes_nothing_and_stays_bitwise_equal():
    from pooltk.pool.adapters import detect
    from tools.last_stage.records import measure

    layout = detect().layout
    if layout is None or layout.per_receive:
        pytest.skip("no rings on this torch (lazy layout): the compat matrix counts its live receive buffers instead")

    rows = measure("linear3d", 8, slacks=(2,), steps=2, hidden=16, seq_len=4, timeout_s=120)
    last = {r.release: r for r in rows if r.variant == "pooled" and r.stage == 1}
    assert last[True].rehomes == 0 and last[True].bitwise_equal is True
    assert last[False].bitwise_equal is True
    if last[True].ring_sets:  # eager layout (torch <= 2.14): the ring's slots; the kept graphs re-home them
        assert last[True].storages == last[True].ring_sets
        assert last[False].rehomes > 0
