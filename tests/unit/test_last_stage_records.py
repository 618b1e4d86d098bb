"""The last stage's re-homes, measured again on this torch (issue 17): one small live gloo launch.

The recorded table (data/validation/last_stage_rehomes_2026-12-01.csv) is checked where it is
written: ``python -m tools.last_stage`` writes records only when every claim of
tools/last_stage/claims.py holds, and ``python -m tools.last_stage --check CSV`` re-checks a written
file; tests/tools/test_last_stage.py tests those claims and the tool. This launch runs in the compat
matrix (tests/unit) on every torch it covers.
"""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


@pytest.mark.dist
def test_live_linear3d_last_stage_with_the_release_rehomes_nothing_and_stays_bitwise_equal():
    from pooltk.pool.torch_compat.layouts import detect
    from tools.last_stage.records import measure

    layout = detect().layout
    if layout is None or layout.per_receive:
        pytest.skip(
            "no rings on this torch (lazy layout): the compat matrix counts its live receive "
            "buffers instead"
        )

    rows = measure("linear3d", 8, slacks=(2,), steps=2, hidden=16, seq_len=4, timeout_s=120)
    last = {r.release: r for r in rows if r.variant == "pooled" and r.stage == 1}
    assert last[True].rehomes == 0 and last[True].bitwise_equal is True
    assert last[False].bitwise_equal is True
    if last[
        True
    ].ring_sets:  # eager layout (torch <= 2.14): the ring's slots; the kept graphs re-home them
        assert last[True].storages == last[True].ring_sets
        assert last[False].rehomes > 0
