"""Installing replaces only the stage methods the adapters name: nothing of torch.Tensor, torch's
modules or other libraries changes (issue #26). Checked on a fake of every real release's pipelining
modules, and on the real torch with a stage set up and stepped while installed.
"""

from __future__ import annotations

import sys
import warnings

import pytest

import pooltk

from _shapes import LAYOUTS, load_shape

RELEASES = sorted(p.stem.removeprefix("torch-") for p in LAYOUTS.glob("torch-*.json"))


def _everything() -> dict[tuple[str, str], object]:
    """Every attribute of every loaded module, and of every class those modules define, by
    identity."""
    out: dict[tuple[str, str], object] = {}
    for name, mod in list(sys.modules.items()):
        if mod is None or name.startswith("pooltk"):
            continue
        try:
            items = list(vars(mod).items())
        except TypeError:
            continue
        for key, value in items:
            if (
                key == "__warningregistry__"
            ):  # the warnings machinery's own record of a warning shown, not a patch
                continue
            out[(name, key)] = value
            if isinstance(value, type) and getattr(value, "__module__", None) == name:
                for ckey, cvalue in list(vars(value).items()):
                    out[(f"{name}.{key}", ckey)] = cvalue
    return out


def _changed(before: dict, after: dict) -> set[tuple[str, str]]:
    """Attributes replaced or removed, and attributes added to a module or class that existed before
    (a submodule imported lazily, which adds itself to its package, is not a change)."""
    import types

    owners = {owner for owner, _ in before}
    changed = {k for k in before if before[k] is not after.get(k, KeyError)}
    return changed | {
        k
        for k in after.keys() - before.keys()
        if k[0] in owners and not isinstance(after[k], types.ModuleType)
    }


def _named_sites() -> set[tuple[str, str]]:
    """The layout's setup methods and every runtime method the adapters name, where their classes
    define them."""
    from pooltk.pool.torch_compat.layouts import detect
    from pooltk.pool.torch_compat.stage_api import (
        HANDOFF_METHODS,
        HOT_METHODS,
        OPTIONAL_HOT_METHODS,
        SEND_METHODS,
        stage_base,
    )

    runtime = HOT_METHODS + SEND_METHODS + HANDOFF_METHODS + OPTIONAL_HOT_METHODS
    sites = {(t.owner, t.name) for t in detect().layout.setup_targets}
    sites |= {(k, n) for n in runtime for k in stage_base().__mro__ if n in k.__dict__}
    return {(f"{owner.__module__}.{owner.__name__}", name) for owner, name in sites}


@pytest.mark.parametrize("release", RELEASES)
def test_install_changes_only_the_stage_methods_the_adapters_name_on_each_release_shape(
    fake_torch, release
):
    fake_torch(load_shape(release))
    import torch

    tensor_before = dict(vars(torch.Tensor))
    before = _everything()
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        report = pooltk.install()
    assert report.installed
    changed = _changed(before, _everything())
    sites = _named_sites()
    assert changed and changed <= sites, sorted(changed - sites)
    assert dict(vars(torch.Tensor)) == tensor_before
    pooltk.uninstall()
    assert not _changed(before, _everything())


def test_a_pooled_step_on_the_real_torch_changes_nothing_but_the_stage_methods():
    """A middle stage set up and stepped while installed, placeholders and ring included: still only
    the named methods differ, also in the middle of its setup call. A stock stage runs the same
    steps first, so what torch's own step changes (lazy imports, caches) is in the baseline."""
    import torch

    from pooltk.parity.one_stage import fake_group, run_steps, static_schedule, static_stage

    def loss(o, t):
        return ((o - t) ** 2).mean()

    during: dict = {}
    batch = torch.randn(16, 4)
    with fake_group(1, 3):
        stock = static_stage(torch.nn.Linear(4, 4), 1, 3, torch.zeros(2, 4))
        run_steps(static_schedule(stock, 8, loss), stock, batch, steps=2)
        before = _everything()
        with pooltk.pooled() as report:
            stage = static_stage(torch.nn.Linear(4, 4), 1, 3, torch.zeros(2, 4))
            schedule = static_schedule(stage, 8, loss)
            # the forward setup method this layout family wraps (torch 2.15's lazy layout wraps
            # none)
            from pooltk.pool.torch_compat.layouts import detect

            names = [
                t.name
                for t in detect().layout.setup_targets
                if t.owner in type(stage).__mro__ and "forward" in t.name
            ][:1]
            for name in names:
                setup = getattr(type(stage), name)

                def watched(
                    self, *args, _setup=setup, **kwargs
                ):  # the process seen from inside the setup
                    during.update(_everything())
                    return _setup(self, *args, **kwargs)

                stage.__dict__[name] = watched.__get__(stage)
            run_steps(schedule, stage, batch, steps=2)
            for name in names:
                stage.__dict__.pop(name)
            assert during or not names, f"the setup {names} ran"
            # pooled: forward W + slack = 2 + 2, grad 1 + 1; torch 2.15's lazy layout only releases
            rings = [] if report.mode == "release" else [4, 2]
            assert [u.ring for u in report.usage()] == rings, report.mode
            sites = _named_sites()
            if names:  # seen from inside the setup call
                assert _changed(before, during) <= sites, sorted(_changed(before, during) - sites)
            assert _changed(before, _everything()) <= sites, sorted(
                _changed(before, _everything()) - sites
            )
        assert not _changed(before, _everything())
