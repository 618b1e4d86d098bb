"""One spelling of a schedule name: pooltk.analysis.catalog.schedule_key, used by the model and the
analysis."""

from __future__ import annotations

import pytest

from pooltk.analysis.catalog import ALLOWLIST, CATALOG, resolve_schedule, schedule_key
from pooltk.memory.model import PipelineShape, UnpoolableScheduleError


@pytest.mark.parametrize(
    "spelling", ["1f1b", "1F1B", " Schedule1F1B ", "schedule_1f1b", "SCHEDULE-1F1B"]
)
def test_every_spelling_of_1f1b_has_one_key_and_is_the_pool_allowlist(spelling):
    assert schedule_key(spelling) == "1f1b" and schedule_key(spelling) in ALLOWLIST
    assert PipelineShape(pp=2, n_microbatches=4, schedule=spelling).schedule == "1f1b"
    assert PipelineShape(pp=2, n_microbatches=4, schedule=spelling).poolable


def test_a_class_an_instance_and_torchs_name_give_the_same_key():
    from torch.distributed.pipelining import schedules as s

    assert schedule_key(s.ScheduleGPipe) == schedule_key("GPipe") == "gpipe"
    assert (
        schedule_key(s.ScheduleInterleaved1F1B)
        == schedule_key("Interleaved1F1B")
        == "interleaved1f1b"
    )
    assert schedule_key(None) is None


def test_catalog_names_have_distinct_keys_and_resolve_through_them():
    keys = [schedule_key(name) for name in CATALOG]
    assert len(set(keys)) == len(keys)
    for name in CATALOG:
        assert resolve_schedule(f"Schedule{name}".upper())[0] == name


def test_the_model_takes_every_analysed_schedule_by_its_key_and_refuses_what_it_does_not_cover():
    interleaved = PipelineShape(pp=2, n_microbatches=4, schedule="interleaved_1f1b")
    assert (interleaved.schedule, interleaved.poolable, interleaved.stages_per_rank) == (
        "interleaved1f1b",
        True,
        2,
    )
    assert not PipelineShape(pp=2, n_microbatches=4, schedule="GPipe").poolable
    with pytest.raises(UnpoolableScheduleError, match="found 'nope'"):
        PipelineShape(pp=2, n_microbatches=4, schedule="nope")
