"""Overriding a preset's dimensions carries no other model's calibration or published figures."""

from __future__ import annotations

import pytest

from pooltk.memory.fits import published_peak
from pooltk.memory.model import MemoryModelError
from pooltk.memory.tensors import Boundary
from pooltk.studies.kimi_k3 import get_preset

CAL = get_preset("kimi-k3-gb200-2k-calibrated")


def test_llama_on_the_calibrated_k3_preset_gets_64_mib_a_set_not_k3s_remainder():
    # the trap of issue 29: hidden, rows and seq overridden on the calibrated preset kept a 360 MiB
    # remainder
    llama = CAL.resized(pp=8, microbatches=32, rows=1, seq_len=4096, hidden=8192)
    assert llama.boundary.forward_bytes == 64 * 2**20
    assert [t.name for t in llama.boundary.activations] == ["hidden_states"]
    assert llama.model().stage_bytes(3, "stock") == 4 * 2**30
    assert published_peak(llama) is None and llama.figures == ()
    assert "calibrated_remainder" in llama.assumption and "not carried" in llama.assumption


def test_the_same_model_at_another_micro_batch_keeps_its_bytes_per_token():
    longer = CAL.resized(seq_len=4096)
    assert longer.boundary.forward_bytes == 2 * CAL.boundary.forward_bytes
    assert published_peak(longer) is None  # still another run: the published peak is not its own


def test_a_widths_preset_resizes_every_boundary_and_no_change_is_the_preset_itself():
    widths = get_preset("kimi-k3-gb200-2k-widths")
    wider = widths.resized(hidden=8192)
    assert all(
        b.forward_bytes * 7168 == a.forward_bytes * 8192
        for a, b in zip(widths.boundary_list, wider.boundary_list)
    )
    assert CAL.resized(pp=CAL.shape.pp) is CAL


def test_a_boundary_with_nothing_hidden_sized_cannot_take_a_new_hidden_size():
    import dataclasses

    opaque = dataclasses.replace(CAL, boundary=Boundary.opaque(1024), name="opaque")
    with pytest.raises(
        MemoryModelError, match=r"^preset 'opaque' resized: found no hidden-sized tensor"
    ):
        opaque.resized(hidden=4096)


@pytest.mark.parametrize("dims", [{"rows": 0}, {"seq_len": 0}, {"hidden": 0}, {"dtype": "fp5"}])
def test_a_dimension_no_tensor_can_have_is_refused_never_read_as_keep(dims):
    # rows=0 and seq_len=0 returned the preset unchanged; hidden=0 dropped its calibration
    (name,) = dims
    with pytest.raises(MemoryModelError, match=rf"^{name}: found"):
        CAL.resized(**dims)
