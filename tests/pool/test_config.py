"""pooltk.config.PoolConfig: what a user chooses, validated with found / required / fix."""

from __future__ import annotations

import pytest

from pooltk import PoolConfig


@pytest.mark.parametrize(
    "field, value",
    [
        ("slack", -1),
        ("slack", 1.5),
        ("slack", True),
        ("grad_slack", -2),
        ("grad_slack", "1"),
        ("release", "yes"),
    ],
)
def test_a_bad_value_names_the_field_and_the_value_found_and_a_fix(field, value):
    with pytest.raises(ValueError) as info:
        PoolConfig(**{field: value})
    text = str(info.value)
    assert f"PoolConfig.{field}" in text and repr(value) in text and "Fix:" in text


def test_a_user_chooses_slack_grad_slack_and_the_release_and_nothing_the_harness_builds():
    for harness_only in ("policy", "guard", "forward_shortfall", "sharing"):
        with pytest.raises(TypeError):
            PoolConfig(**{harness_only: None})
    with pytest.raises(TypeError):
        PoolConfig(2)  # type: ignore[misc] - keyword-only
    assert not hasattr(PoolConfig(), "__dict__")  # slotted
