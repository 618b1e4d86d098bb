"""pooltk.parity.worker: a rank's overrun reaches the launcher as fields, found through the
exception chain."""

from __future__ import annotations

from pooltk.parity.rank import find_overrun
from pooltk.pool.errors import PoolOverrunError


def test_an_overrun_wrapped_by_a_schedule_is_found_by_its_type_not_its_text():
    exc = PoolOverrunError(stage=1, direction="forward", slot=0, ring=2, owner=0, incoming=2)
    try:
        try:
            raise exc
        except PoolOverrunError as inner:
            raise RuntimeError("wrapped by a schedule") from inner
    except RuntimeError as outer:
        assert find_overrun(outer) is exc
    assert find_overrun(RuntimeError("PoolOverrunError mentioned in text only")) is None
