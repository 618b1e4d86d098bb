"""PoolConfig validates every field and says found / required / fix."""

import pytest

from pooltk import PoolConfig


def test_defaults_are_the_documented_ones():
    c = PoolConfig()
    assert (c.slack, c.grad_slack, c.policy, c.guard, c.forward_shortfall) == (2, 1, "tight", True, 0)


@pytest.mark.parametrize(
    "field, value, needle",
    [
        ("slack", -1, "PoolConfig.slack: found -1"),
        ("slack", 1.5, "PoolConfig.slack: found 1.5"),
        ("slack", True, "PoolConfig.slack: found True"),
        ("grad_slack", -2, "PoolConfig.grad_slack: found -2"),
        ("grad_slack", "1", "PoolConfig.grad_slack: found '1'"),
        ("policy", "loose", "PoolConfig.policy: found 'loose'"),
        ("guard", "yes", "PoolConfig.guard: found 'yes'"),
        ("forward_shortfall", -1, "PoolConfig.forward_shortfall: found -1"),
    ],
)
def test_bad_values_raise_valueerror_naming_field_value_and_fix(field, value, needle):
    with pytest.raises(ValueError) as info:
        PoolConfig(**{field: value})
    assert needle in str(info.value)
    assert "Fix:" in str(info.value)


def test_config_is_keyword_only_and_slotted():
    with pytest.raises(TypeError):
        PoolConfig(2)  # type: ignore[misc]
    assert not hasattr(PoolConfig(), "__dict__")


def test_the_policy_names_are_read_from_the_policy_type_and_the_error_names_each_of_them():
    from typing import get_args

    from pooltk.config import POLICIES, Policy

    assert POLICIES == get_args(Policy) == ("tight", "automodel", "measure")
    with pytest.raises(ValueError) as info:
        PoolConfig(policy="loose")
    fix = str(info.value).split("Fix:", 1)[1]
    assert all(repr(p) in fix for p in POLICIES), fix
