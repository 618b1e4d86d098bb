"""A parity spec refuses, before any launch, what its ranks would fail on or silently run
differently: each refusal names the field and the rule (no rank is started here)."""

from __future__ import annotations

import math

import pytest

from pooltk.config import PoolConfig
from pooltk.parity.experiments import Harness
from pooltk.parity.spec import ParitySpec, Variant, default_variants


def _spec(**variant) -> ParitySpec:
    return ParitySpec(pp=2, microbatches=4, variants=(Variant(name="v", **variant),))


@pytest.mark.parametrize(
    "fields, named",
    [
        # each was a TypeError or AttributeError from inside the check, or passed it
        ({"stages_per_rank": "2"}, "Variant v: stages_per_rank: found '2' (str)"),
        ({"stages_per_rank": 1.5}, "Variant v: stages_per_rank: found 1.5 (float)"),
        ({"microbatches": "8"}, "Variant v: microbatches: found '8' (str)"),
        ({"microbatches": math.inf}, "Variant v: microbatches: found inf (float)"),
        ({"microbatches": -1}, "Variant v: microbatches: found -1;"),  # was '1F1B needs >= pp'
        ({"schedule": None}, "Variant v: schedule found None"),
        # one name's letters, a name no rank knows, an aux no rank knows: every rank failed
        ({"bodies": "bv"}, "Variant v: bodies found 'bv'"),
        ({"bodies": ("block", "nope")}, "Variant v: bodies found ('block', 'nope')"),
        ({"aux": "both"}, "Variant v: aux found 'both'"),
        ({"config": {"slack": 1}}, "Variant v: config found {'slack': 1}"),
        # every rank's install refused it, naming force=True
        (
            {"pooled": True, "config": Harness(forward_shortfall=1)},
            "Variant v: found forward_shortfall=1 without force=True",
        ),
        # torch refused it in every rank: 'ZBV requires exactly 2 stages per rank'
        (
            {"schedule": "ZBVZeroBubble", "stages_per_rank": 3},
            "Variant v: stages_per_rank found 3 for ScheduleZBVZeroBubble; required exactly 2",
        ),
    ],
    ids=lambda x: repr(x)[:60] if isinstance(x, dict) else None,
)
def test_a_variant_a_rank_would_fail_on_is_refused_naming_its_field(fields, named):
    with pytest.raises(ValueError) as info:
        _spec(**fields)
    assert str(info.value).startswith(named), info.value


@pytest.mark.parametrize("lr", [math.nan, math.inf, -0.1, "0.05", None])
def test_a_learning_rate_that_is_not_a_finite_number_at_least_0_is_refused(lr):
    """nan and inf were taken as a learning rate; a str or a negative one failed in every rank."""
    with pytest.raises(
        ValueError, match=r"^ParitySpec.lr: found .*; required a finite number >= 0"
    ):
        ParitySpec(lr=lr, variants=default_variants())


@pytest.mark.parametrize("seed", ["0", 1.5, None])
def test_a_seed_that_is_not_an_integer_is_refused(seed):
    with pytest.raises(ValueError, match=r"^ParitySpec.seed: found .*; required an integer"):
        ParitySpec(seed=seed, variants=default_variants())


def test_one_variant_not_in_a_tuple_is_refused_naming_variants():
    with pytest.raises(ValueError, match=r"^ParitySpec.variants: found Variant\(.*a tuple of"):
        ParitySpec(variants=Variant(name="v"))  # was: 'Variant' object is not iterable


def test_default_variants_reads_one_frontend_or_config_as_one_not_its_letters():
    """frontends='tracing' made variants of frontends 't', 'r', 'a', ...; one PoolConfig was 'not
    iterable'."""
    assert default_variants(frontends="tracing") == default_variants(frontends=("tracing",))
    one = PoolConfig(slack=1)
    assert default_variants(one) == default_variants([one])
    with pytest.raises(ValueError, match="stages_per_rank: found '2' \\(str\\)"):
        default_variants(stages_per_rank="2")


def test_good_variants_still_build():
    spec = ParitySpec(
        pp=2,
        microbatches=4,
        lr=0.0,
        seed=-3,
        variants=(
            Variant(name="f", bodies=["block", "view"], aux="pass", microbatches=2),
            Variant(name="z", schedule="ZBVZeroBubble", stages_per_rank=2),
            Variant(name="s", pooled=True, force=True, config=Harness(forward_shortfall=1)),
        ),
    )
    assert [v.name for v in spec.variants] == ["f", "z", "s"]
