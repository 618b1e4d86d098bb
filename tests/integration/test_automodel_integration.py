"""pooltk.integrations.automodel without Automodel installed: key translation, refusal, lazy
import."""

from __future__ import annotations

import subprocess
import sys
import types

import pytest

import pooltk
from pooltk._validate import InputError
from pooltk.integrations import TrainerMissingError, TwoPoolsError
from pooltk.integrations import automodel as am


def _pipeline(**extra):
    block = {
        "pp_schedule": "1f1b",
        "pp_microbatch_size": 1,
        "pp_recv_buffer_pool": True,
        "pp_recv_buffer_pool_slack": 2,
    }
    block.update(extra)
    return block


def test_automodel_keys_alone_leave_automodel_pool_in_charge():
    choice = am.plan(_pipeline())
    assert choice.implementation == "automodel"
    assert choice.config is None and choice.pipeline["pp_recv_buffer_pool"] is True


def test_pooltk_block_makes_pooltk_the_implementation_with_automodel_slack():
    choice = am.plan(
        _pipeline(pp_recv_buffer_pool_slack=0, pooltk={"grad_slack": 0, "release": False})
    )
    assert choice.implementation == "pooltk"
    assert choice.config == pooltk.PoolConfig(slack=0, grad_slack=0, release=False)
    assert choice.schedule == "1f1b"
    # Automodel must neither see the pooltk key nor install its own pool next to pooltk.
    assert "pooltk" not in choice.pipeline and choice.pipeline["pp_recv_buffer_pool"] is False


def test_schedule_auto_gates_on_auto_and_named_schedule_otherwise():
    assert (
        am.plan(_pipeline(pp_schedule="interleaved_1f1b", pooltk={"schedule": "auto"})).schedule
        == "auto"
    )
    assert am.plan(_pipeline(pp_schedule="GPipe", pooltk={})).schedule == "gpipe"


def test_pool_flag_off_means_stock_even_with_pooltk_block():
    choice = am.plan(_pipeline(pp_recv_buffer_pool=False, pooltk={"grad_slack": 1}))
    assert choice.implementation == "stock" and choice.config is None
    assert am.plan(None).implementation == "stock"


@pytest.mark.parametrize(
    "block, what",
    [
        (_pipeline(pp_recv_buffer_pool="yes"), "pp_recv_buffer_pool"),
        (_pipeline(pp_recv_buffer_pool_slack=-1), "pp_recv_buffer_pool_slack"),
        (_pipeline(pooltk={"release": "yes"}), "pooltk.release"),
        (
            _pipeline(pooltk={"policy": "automodel"}),
            "pooltk",
        ),  # a ring no user chooses is not an option
        (_pipeline(pooltk={"slak": 1}), "pooltk"),
        (_pipeline(pooltk={"schedule": "gpipe"}), "pooltk.schedule"),
        (_pipeline(pooltk="tight"), "pooltk"),
        (_pipeline(pp_schedule_csv="s.csv", pooltk={}), "pp_schedule_csv"),
    ],
)
def test_bad_yaml_values_name_key_found_required_fix(block, what):
    with pytest.raises(InputError) as err:
        am.plan(block)
    assert err.value.what == f"distributed.pipeline.{what}"
    assert err.value.found and err.value.required and err.value.fix


def test_apply_on_a_yaml_dict_installs_pooltk_and_rewrites_the_block(clean_install):
    cfg = {"distributed": {"pp_size": 2, "pipeline": _pipeline(pooltk={"grad_slack": 1})}}
    choice, report = am.apply(cfg)
    assert report is not None and pooltk.installed() is not None
    assert report.config == pooltk.PoolConfig(slack=2)
    assert cfg["distributed"]["pipeline"]["pp_recv_buffer_pool"] is False
    assert "pooltk" not in cfg["distributed"]["pipeline"]


class _FakeConfigNode:
    """The two methods of Automodel's ConfigNode that apply() uses, over nested dicts."""

    def __init__(self, d):
        for k, v in d.items():
            self.__dict__[k] = _FakeConfigNode(v) if isinstance(v, dict) else v

    def get(self, key, default=None):
        node = self
        for part in key.split("."):
            if not isinstance(node, _FakeConfigNode) or part not in node.__dict__:
                return default
            node = node.__dict__[part]
        return node

    def to_dict(self):
        return {
            k: v.to_dict() if isinstance(v, _FakeConfigNode) else v
            for k, v in self.__dict__.items()
        }

    def set_by_dotted(self, key, value):
        *path, leaf = key.split(".")
        node = self
        for part in path:
            node = node.__dict__[part]
        node.__dict__[leaf] = value


def test_apply_on_a_config_node_removes_pooltk_key_before_pipeline_config_sees_it(clean_install):
    cfg = _FakeConfigNode({"distributed": {"pipeline": _pipeline(pooltk={"grad_slack": 0})}})
    choice, report = am.apply(cfg)
    assert choice.implementation == "pooltk" and report.installed is pooltk.installed().installed
    assert cfg.get("distributed.pipeline").to_dict() == choice.pipeline
    assert cfg.get("distributed.pipeline.pp_recv_buffer_pool") is False


@pytest.fixture
def fake_original_pool(monkeypatch):
    """Automodel's pool 'installed': a method from its module on torch's PipelineStage."""
    from torch.distributed.pipelining import stage as stage_mod

    module = types.ModuleType(am.POOL_MODULE)
    monkeypatch.setitem(sys.modules, am.POOL_MODULE, module)
    name = (
        "_setup_forward_recv_info"
        if hasattr(stage_mod.PipelineStage, "_setup_forward_recv_info")
        else "_prepare_forward_infra"
    )

    def patched(self, *args, **kwargs):  # pragma: no cover - never called
        raise AssertionError

    patched.__module__ = am.POOL_MODULE
    monkeypatch.setattr(stage_mod.PipelineStage, name, patched)
    return module


def test_refuses_when_automodel_pool_already_installed_naming_both(
    clean_install, fake_original_pool
):
    assert am.original_pool_installed()
    with pytest.raises(TwoPoolsError) as err:
        am.apply({"distributed": {"pipeline": _pipeline(pooltk={})}})
    text = str(err.value)
    assert "install_recv_buffer_pool" in text and "pooltk" in text and "Fix:" in text
    assert pooltk.installed() is None


def test_module_loaded_but_pool_not_installed_is_not_refused(clean_install, monkeypatch):
    monkeypatch.setitem(sys.modules, am.POOL_MODULE, types.ModuleType(am.POOL_MODULE))
    assert not am.original_pool_installed()
    _, report = am.apply({"distributed": {"pipeline": _pipeline(pooltk={})}})
    assert report is not None


def test_import_needs_no_trainer_and_use_names_the_pip_command():
    code = (
        "import sys, pooltk.integrations.automodel as m, pooltk.integrations.torchtitan as t;"
        "assert 'nemo_automodel' not in sys.modules and 'torchtitan' not in sys.modules"
    )
    subprocess.run([sys.executable, "-c", code], check=True)
    try:
        import nemo_automodel  # noqa: F401
    except ImportError:
        with pytest.raises(TrainerMissingError, match="nemo-automodel==0.7.0"):
            am.main([])
    else:  # pragma: no cover - the trainer venv
        pytest.skip("nemo_automodel is importable here")
