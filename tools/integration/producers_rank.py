"""One rank of NeMo Automodel's own LLM recipe on a CPU-only torch (run by producers.py under \
torchrun).

    torchrun --nproc-per-node 2 tools/integration/producers_rank.py --entry pooltk -c recipe.yaml
    torchrun --nproc-per-node 2 tools/integration/producers_rank.py --entry stock -c recipe.yaml

``--entry stock`` runs ``nemo_automodel.recipes.llm.train_ft`` as ``__main__`` (Automodel's own
command); ``--entry pooltk`` runs ``pooltk.integrations.automodel`` as ``__main__`` (the user's
entry: the same recipe with pooltk installed from the YAML's ``distributed.pipeline`` block first).
The other arguments go to the recipe unchanged.

[Note: what the CPU shim changes]
Automodel 0.7.0's recipe assumes a CUDA device in four calls that a CPU-only torch cannot answer
(nothing else in its path needs one; no installed file is changed):

- ``torch.cuda.reset_peak_memory_stats()`` (train_ft.py setup and every log step) raises
  ``AttributeError: module 'torch._C' has no attribute '_cuda_resetPeakMemoryStats'``: on CPU there
  is no peak to reset, so it becomes a no-op;
- ``torch.cuda.current_device()`` (auto_model.py ``_build_model`` and ``from_config``) raises
  ``AssertionError: Torch not compiled with CUDA enabled``: it answers 0, as on the first GPU;
- the device built from it (``torch.device("cuda", 0)`` for ``instantiate_infrastructure``, index
  ``0`` for ``apply_model_infrastructure``) is where the model and the pipeline stages live: on a
  CPU-only torch both functions get ``torch.device("cpu")`` in its place (the functions are wrapped
  where ``auto_model`` and ``train_ft`` bound them; their bodies run unchanged).

``torch.cuda.max_memory_allocated()`` already answers 0 on a CPU torch, so the recipe logs
``mem 0.00 GiB``: CPU memory is not measured by the trainer (not a figure to read). With a CUDA
torch the shim does nothing.
"""

from __future__ import annotations

import argparse
import functools
import runpy
import sys

ENTRIES = {
    "stock": "nemo_automodel.recipes.llm.train_ft",
    "pooltk": "pooltk.integrations.automodel",
}
"""--entry -> the module run as __main__."""


def _cpu_device(device):
    import torch

    if device is None:
        return None
    if isinstance(device, int) or torch.device(device).type == "cuda":
        return torch.device("cpu")
    return device


def _on_cpu(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        if "device" in kwargs:
            kwargs["device"] = _cpu_device(kwargs["device"])
        return fn(*args, **kwargs)

    return wrapper


def cpu_shim() -> bool:
    """Apply [Note: what the CPU shim changes]; returns False (and changes nothing) with a CUDA
    torch."""
    import torch

    if torch.cuda.is_available():
        return False
    torch.cuda.reset_peak_memory_stats = lambda *_a, **_k: None
    torch.cuda.current_device = lambda: 0
    import nemo_automodel._transformers.infrastructure as infrastructure

    originals = {
        name: getattr(infrastructure, name)
        for name in ("instantiate_infrastructure", "apply_model_infrastructure")
    }
    for name, fn in originals.items():
        setattr(infrastructure, name, _on_cpu(fn))
    # modules that bound the originals at import (a module run later as __main__ binds the wrapped
    # ones)
    import nemo_automodel._transformers.auto_model as auto_model
    import nemo_automodel.recipes.llm.train_ft as train_ft

    for module in (auto_model, train_ft):
        for name, fn in originals.items():
            if getattr(module, name, None) is fn:
                setattr(module, name, getattr(infrastructure, name))
    return True


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--entry", choices=sorted(ENTRIES), required=True)
    args, rest = parser.parse_known_args(argv)
    cpu_shim()
    sys.argv = [ENTRIES[args.entry], *rest]
    runpy.run_module(ENTRIES[args.entry], run_name="__main__", alter_sys=True)


if __name__ == "__main__":
    main()
