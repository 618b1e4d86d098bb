"""Automodel-style YAML configs: the example reads as the published shape; bad keys name
themselves."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from pooltk.memory.model import MemoryModelError
from pooltk.memory.configs import ConfigKeyError, load_automodel_config

EXAMPLE = Path(__file__).resolve().parents[2] / "data" / "configs" / "kimi_k3_gb200_2k_example.yaml"


@pytest.fixture
def cfg() -> dict:
    return yaml.safe_load(EXAMPLE.read_text())


def _without(cfg: dict, dotted: str) -> dict:
    out = copy.deepcopy(cfg)
    node = out
    *head, last = dotted.split(".")
    for part in head:
        node = node[part]
    del node[last]
    return out


def _with(cfg: dict, dotted: str, value) -> dict:
    out = copy.deepcopy(cfg)
    node = out
    *head, last = dotted.split(".")
    for part in head:
        node = node.setdefault(part, {})
    node[last] = value
    return out


def test_example_config_reads_as_the_published_2k_shape():
    p = load_automodel_config(EXAMPLE)
    assert (p.shape.pp, p.shape.n_microbatches, p.shape.schedule) == (8, 64, "1f1b")
    assert p.boundary.forward_bytes == 56 * 2**20
    assert (p.config.slack, p.policy) == (2, "automodel")
    assert p.model().stage_gib(3, "stock") == 7.0


def test_microbatches_come_from_global_batch_and_dp_when_local_batch_is_absent(cfg):
    p = load_automodel_config(_without(cfg, "step_scheduler.local_batch_size"))
    assert p.shape.n_microbatches == 64


def test_the_issue_spelling_of_pp_size_is_accepted_and_a_conflict_is_named(cfg):
    moved = _with(_without(cfg, "distributed.pp_size"), "distributed.pipeline.pp_size", 4)
    assert load_automodel_config(moved).shape.pp == 4
    with pytest.raises(
        ConfigKeyError,
        match=r"'distributed.pipeline.pp_size'.*distributed.pp_size=8.*required one pipeline size",
    ):
        load_automodel_config(_with(cfg, "distributed.pipeline.pp_size", 4))


@pytest.mark.parametrize(
    "key",
    [
        "dataset.seq_len",
        "model.config.hidden_size",
        "distributed.pipeline.pp_microbatch_size",
        "step_scheduler.global_batch_size",
        "distributed.pp_size",
    ],
)
def test_a_missing_key_is_named_with_what_is_expected(cfg, key):
    with pytest.raises(
        ConfigKeyError,
        match=rf"config key '{key}': found nothing \(missing\); required .*integer >= 1"
        rf".*Fix: add `{key}: ",
    ):
        load_automodel_config(_without(cfg, key))


@pytest.mark.parametrize(
    "key,value",
    [
        ("dataset.seq_len", "2k"),
        ("distributed.pipeline.pp_microbatch_size", 0),
        ("model.config.hidden_size", 7168.0),
        ("step_scheduler.global_batch_size", True),
    ],
)
def test_a_key_of_the_wrong_type_is_named_with_what_is_expected(cfg, key, value):
    with pytest.raises(
        ConfigKeyError, match=rf"config key '{key}': found {value!r} .*required .*integer >= 1"
    ):
        load_automodel_config(_with(cfg, key, value))


def test_bad_slack_dtype_and_schedule_keys_are_named(cfg):
    with pytest.raises(
        ConfigKeyError, match=r"'distributed.pipeline.pp_recv_buffer_pool_slack': found -1"
    ):
        load_automodel_config(_with(cfg, "distributed.pipeline.pp_recv_buffer_pool_slack", -1))
    with pytest.raises(ConfigKeyError, match=r"'model.torch_dtype': found 'bf17'.*required one of"):
        load_automodel_config(_with(cfg, "model.torch_dtype", "bf17"))
    with pytest.raises(
        ConfigKeyError, match=r"'distributed.pipeline.pp_schedule_csv'.*no CSV schedule"
    ):
        load_automodel_config(_with(cfg, "distributed.pipeline.pp_schedule_csv", "order.csv"))
    with pytest.raises(
        MemoryModelError, match=r"schedule: found 'zigzag_1f1b'.*required one of 1F1B"
    ):
        load_automodel_config(_with(cfg, "distributed.pipeline.pp_schedule", "zigzag_1f1b"))


def test_a_multi_stage_schedule_reads_with_automodels_default_two_stages_per_rank(cfg):
    # Automodel's default for a multi-stage schedule without a layer split is 2 stages per rank.
    shape = load_automodel_config(
        _with(cfg, "distributed.pipeline.pp_schedule", "interleaved_1f1b")
    ).shape
    assert (shape.schedule, shape.pp, shape.stages_per_rank, shape.num_stages) == (
        "interleaved1f1b",
        8,
        2,
        16,
    )
    assert shape.pool_mode == "auto"


def test_neither_local_batch_nor_dp_is_named(cfg):
    bare = _without(_without(cfg, "step_scheduler.local_batch_size"), "distributed.dp_size")
    with pytest.raises(
        ConfigKeyError, match=r"'step_scheduler.local_batch_size'.*no distributed.dp_size either"
    ):
        load_automodel_config(bare)


def test_non_dividing_batch_sizes_in_a_config_are_a_clear_error(cfg):
    with pytest.raises(MemoryModelError, match=r"local_batch / micro_batch: found 128 / 3"):
        load_automodel_config(_with(cfg, "distributed.pipeline.pp_microbatch_size", 3))


def test_files_that_are_not_yaml_mappings_say_so(tmp_path):
    bad = tmp_path / "bad.yaml"
    bad.write_text("distributed: [pp_size: 8\n")
    with pytest.raises(MemoryModelError, match=r"not valid YAML at line"):
        load_automodel_config(bad)
    listy = tmp_path / "list.yaml"
    listy.write_text("- 1\n- 2\n")
    with pytest.raises(MemoryModelError, match=r"holds a list, not a mapping"):
        load_automodel_config(listy)
    with pytest.raises(MemoryModelError, match=r"config file: found .*missing.yaml"):
        load_automodel_config(tmp_path / "missing.yaml")
