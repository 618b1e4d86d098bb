"""The layout-family facts live once (pooltk.nb.layouts) and agree with detection."""

from __future__ import annotations

from pooltk.pool.torch_compat.layouts import detect
from pooltk.nb.layouts import FAMILIES


def test_the_detected_family_is_listed_and_every_one_of_its_markers_is_defined_here() -> None:
    found = detect().layout
    assert found is not None, detect().reason
    (family,) = [f for f in FAMILIES if f.name == found.name]
    assert all(m.defined() for m in family.markers), [
        m.where for m in family.markers if not m.defined()
    ]
