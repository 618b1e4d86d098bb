"""Real configs: Automodel YAML whose model comes from a `_target_` class, HF config.json, flags
over files."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest
import yaml

from pooltk.memory.configs import (
    ConfigKeyError,
    Overrides,
    load_automodel_config,
    load_config,
    load_hf_config,
)
from pooltk.memory.known_models import known_model_config
from pooltk.memory.model import MemoryModelError

CONFIGS = Path(__file__).resolve().parents[2] / "data" / "configs"
AUTOMODEL = CONFIGS / "kimi_k3_gb200_2k_automodel.yaml"
HF = CONFIGS / "kimi_k3_text_config.json"
K3 = "nemo_automodel.components.models.kimi_k3.config.KimiK3TextConfig"


def test_the_k3_yaml_without_hidden_size_reads_7168_from_the_known_class_table():
    cfg = yaml.safe_load(AUTOMODEL.read_text())
    assert "hidden_size" not in cfg["model"]["config"] and cfg["model"]["config"]["_target_"] == K3
    p = load_automodel_config(AUTOMODEL)
    assert p.hidden == 7168 and p.shape.n_microbatches == 64 and p.shape.pp == 8
    assert p.boundary.forward_bytes == 56 * 2**20
    assert any("table of known model configs" in s and "0.7.0" in s for s in p.sources)


def test_an_importable_config_class_is_read_and_built_with_the_yaml_arguments(
    tmp_path, monkeypatch
):
    pkg = tmp_path / "fakemodels"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("__version__ = '9.9'\n")
    (pkg / "cfg.py").write_text(
        textwrap.dedent("""
        class TinyConfig:
            def __init__(self, hidden_size=1234, num_hidden_layers=3, torch_dtype="float32"):
                self.hidden_size, self.torch_dtype = hidden_size, torch_dtype
    """)
    )
    monkeypatch.syspath_prepend(str(tmp_path))
    cfg = yaml.safe_load(AUTOMODEL.read_text())
    cfg["model"] = {"config": {"_target_": "fakemodels.cfg.TinyConfig"}}
    p = load_automodel_config(cfg)
    assert p.hidden == 1234 and p.boundary.activations[0].dtype == "float32"
    assert any("imported (fakemodels 9.9)" in s for s in p.sources)
    cfg["model"]["config"]["hidden_size"] = 512
    assert load_automodel_config(cfg).hidden == 512  # a value in the file beats the class default
    cfg["model"]["config"]["no_such_arg"] = 1
    del cfg["model"]["config"]["hidden_size"]
    with pytest.raises(ConfigKeyError, match=r"'model.config'.*TinyConfig.*raised TypeError"):
        load_automodel_config(cfg)
    sys.modules.pop("fakemodels.cfg", None), sys.modules.pop("fakemodels", None)


def test_an_unknown_config_class_names_the_field_and_the_fix():
    cfg = yaml.safe_load(AUTOMODEL.read_text())
    cfg["model"]["config"]["_target_"] = "nowhere.models.UnknownConfig"
    with pytest.raises(ConfigKeyError) as err:
        load_automodel_config(cfg)
    assert err.value.key == "model.config._target_" and "Overrides.hidden" in err.value.fix
    assert "not importable" in err.value.found and "KimiK3TextConfig" in err.value.required


def test_flags_always_override_the_file():
    p = load_automodel_config(
        AUTOMODEL,
        Overrides(hidden=4096, seq_len=1024, micro_batch=1, pp=4, microbatches=16, dtype="fp32"),
    )
    assert (p.hidden, p.seq_len, p.shape.pp, p.shape.n_microbatches) == (4096, 1024, 4, 16)
    assert p.boundary.forward_bytes == 1 * 1024 * 4096 * 4
    assert any("overridden" in s for s in p.sources)


def test_a_yaml_with_neither_hidden_size_nor_class_asks_for_hidden():
    cfg = yaml.safe_load(AUTOMODEL.read_text())
    cfg["model"] = {"torch_dtype": "bfloat16"}
    with pytest.raises(
        ConfigKeyError, match=r"'model.config.hidden_size'.*Fix: add .*Overrides\.hidden"
    ):
        load_automodel_config(cfg)
    assert load_automodel_config(cfg, Overrides(hidden=7168)).hidden == 7168


@pytest.mark.parametrize(
    "field,value", [("hidden", 0), ("seq_len", -2), ("pp", 0), ("microbatches", True)]
)
def test_zero_negative_or_bool_sizes_are_refused_naming_the_field(field, value):
    with pytest.raises(
        MemoryModelError,
        match=rf"Overrides\.{field}: found .*required an integer >= 1"
        rf".*Fix: give Overrides\.{field}",
    ):
        Overrides(**{field: value})


def test_hf_config_json_gives_the_model_and_flags_give_the_pipeline(tmp_path):
    p = load_hf_config(HF, Overrides(pp=8, microbatches=64, micro_batch=2, seq_len=2048))
    assert (
        p.hidden
        == json.loads(HF.read_text())["hidden_size"]
        == known_model_config(K3).defaults["hidden_size"]
    )
    assert (
        p.boundary.forward_bytes == 56 * 2**20
        and load_config(HF, Overrides(pp=8, microbatches=64, micro_batch=2, seq_len=2048)).hidden
        == 7168
    )
    with pytest.raises(
        MemoryModelError, match=r"found no Overrides\.seq_len.*Fix: e\.g\. Overrides\.pp=8 "
    ):
        load_hf_config(HF, Overrides(pp=8, microbatches=64))
    nested = tmp_path / "config.json"
    nested.write_text(json.dumps({"text_config": {"hidden_size": 2048, "torch_dtype": "float16"}}))
    q = load_config(nested, Overrides(pp=2, microbatches=4, seq_len=16))
    assert q.hidden == 2048 and q.boundary.activations[0].dtype == "float16"
    empty = tmp_path / "empty.json"
    empty.write_text("{}")
    with pytest.raises(
        ConfigKeyError, match=r"'hidden_size': found nothing .*Fix: .*Overrides\.hidden"
    ):
        load_config(empty, Overrides(pp=2, microbatches=4, seq_len=16))
    broken = tmp_path / "broken.json"
    broken.write_text("{hidden")
    with pytest.raises(MemoryModelError, match=r"not valid JSON at line 1"):
        load_config(broken)


def test_the_k3_table_matches_the_class_when_it_is_importable():
    mod = pytest.importorskip("nemo_automodel.components.models.kimi_k3.config")
    obj = mod.KimiK3TextConfig()
    for key, value in known_model_config(K3).defaults.items():
        assert getattr(obj, key) == value, key


def test_the_library_names_override_fields_and_never_a_command_line_flag():
    # Flags belong to the CLI (pooltk.cli.memory maps Overrides.<field> to --<field>); a notebook or
    # a script calling the library is told the field it passed.
    from pooltk.memory.configs import load_overrides, pipeline_from_overrides

    for call in (
        lambda: load_overrides(Overrides(pp=8, microbatches=8)),
        lambda: pipeline_from_overrides(Overrides(pp=8, microbatches=8, dp=2, seq_len=4)),
        lambda: load_hf_config(HF, Overrides(pp=8, microbatches=64)),
        lambda: Overrides(seq_len=0),
    ):
        with pytest.raises(MemoryModelError) as err:
            call()
        assert "Overrides." in str(err.value) and " --" not in str(err.value), str(err.value)


def test_one_builder_gives_the_shape_from_fields_for_flags_and_config_json_alike():
    from pooltk.memory.configs import load_overrides, pipeline_from_overrides

    o = Overrides(pp=8, global_batch=4096, micro_batch=2, dp=32, seq_len=2048, hidden=7168)
    shape, rows = pipeline_from_overrides(o)
    assert (shape.n_microbatches, rows) == (64, 2)
    assert load_overrides(o).shape == shape == load_hf_config(HF, o).shape
    assert (
        pipeline_from_overrides(Overrides(pp=2, microbatches=4, seq_len=8))[1] == 1
    )  # rows default 1
