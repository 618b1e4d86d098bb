"""pooltk in torchtitan's trainer, with no change to torchtitan's source.

Replace ``-m torchtitan.train`` by ``-m pooltk.integrations.torchtitan`` in the launch line;
every other argument is torchtitan's own::

    torchrun --nproc-per-node 2 -m pooltk.integrations.torchtitan \\
        --pooltk.slack 2 \\
        --module llama3 --config llama3_debugmodel --parallelism.pipeline_parallel_degree 2 ...

Each rank installs pooltk before torchtitan builds its stages, then runs ``torchtitan.train``
as ``__main__`` (``runpy``), exactly as ``python -m torchtitan.train`` would. pooltk's options
are ``--pooltk.<field> VALUE`` (removed from the arguments torchtitan sees) or environment
variables ``POOLTK_<FIELD>`` (``POOLTK_SLACK=2``); fields: ``slack``, ``grad_slack``, ``release``
(true/false), ``schedule`` (``1f1b`` or ``auto``), ``enable``
(false: run torchtitan stock through the same entry), ``device`` (``auto``: torchtitan's own
choice; ``cpu``: see [Note: torchtitan device]). Flags win over the environment.

[Note: torchtitan device]
torchtitan 0.3.0 picks its device once, at import of ``torchtitan.tools.utils``, as
``_get_available_device_type() or "cuda"``, and has no config field for it, so on a machine
without an accelerator it asks for CUDA. ``--pooltk.device cpu`` imports that module with
torch's ``_get_available_device_type`` answering ``cpu`` and ``_get_device_module("cpu")``
answering :func:`pooltk.integrations.cpu_device.cpu_device_module` (``torch.cpu`` plus the five
memory functions torchtitan's metrics call; both restored right after), before any other
torchtitan module binds ``device_type``; nothing else changes. It applies with
``--pooltk.enable false`` too, so stock and pooled runs go through the same entry.

[Note: torchtitan gating]
torchtitan builds its schedule from ``--parallelism.pipeline_parallel_schedule`` with torch's
``get_schedule_class``; pooltk observes the schedule that sets each stage up, so with
``schedule=1f1b`` (default) only ``Schedule1F1B`` stages are pooled and other schedules keep
stock buffers with pooltk's warning; ``schedule=auto`` pools every schedule pooltk analyses.
[Note: install line in the trainer log]
pooltk installs before torchtitan configures logging, so the ``pooltk`` logger's install line
(``pooltk: installed (...)``, the line ``pooltk logs`` tags a run as pooled by) would go to no
handler. When that is so, the entry logs the install report's lines again on rank 0 (``RANK``)
right after torchtitan's ``init_logger`` has run, so they land in the trainer's own log next to
its banner. With ``--pooltk.enable false`` it logs ``pooltk: not installed (reason=...)`` there,
so a stock run through the entry is tagged stock rather than unknown.
"""

from __future__ import annotations

import importlib
import logging
import os
import runpy
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pooltk._validate import InputError, check_choice, check_int
from pooltk.config import PoolConfig
from pooltk.integrations.common import import_trainer

__all__ = ["PIP", "PROVEN", "TitanPoolOptions", "force_device", "install", "main", "options_from"]

PROVEN: dict[str, str] = {"torchtitan": "0.3.0", "torch": "2.14.1"}
"""The versions this entry was proven on (bitwise parity, scripts/integration)."""

PIP = 'pip install "torch==2.14.1" && pip install "torch==2.14.1" "torchtitan==0.3.0" triton'
"""How to get the trainer (torchtitan 0.3.0 calls torch 2.14 APIs and imports triton)."""

FIELDS: tuple[str, ...] = ("enable", "slack", "grad_slack", "release", "schedule", "device")
DEVICES: tuple[str, ...] = ("auto", "cpu")
_TRUE, _FALSE = ("1", "true", "yes", "on"), ("0", "false", "no", "off")


@dataclass(kw_only=True, slots=True, frozen=True)
class TitanPoolOptions:
    """pooltk's settings for one torchtitan launch."""

    enable: bool = True
    """False runs torchtitan stock through the same entry (the A/B baseline)."""

    config: PoolConfig = PoolConfig()
    """The pool's config (``--pooltk.slack/grad_slack/release``)."""

    schedule: str = "1f1b"
    """``1f1b`` (pool Schedule1F1B only) or ``auto``; see [Note: torchtitan gating]."""

    device: str = "auto"
    """``auto`` (torchtitan's choice) or ``cpu``; see [Note: torchtitan device]."""


def _bool(what: str, text: str) -> bool:
    low = text.strip().lower()
    if low in _TRUE or low in _FALSE:
        return low in _TRUE
    raise InputError(
        what, found=repr(text), required="true or false", fix=f"pass {what} true (or false)."
    )


def options_from(
    argv: Sequence[str], env: Mapping[str, str] | None = None
) -> tuple[TitanPoolOptions, list[str]]:
    """Split pooltk's options from torchtitan's arguments.

    Returns the options and the arguments left for torchtitan, in their order.

    Raises:
        InputError: an unknown ``--pooltk.`` field, a flag without a value, or a bad value.
    """
    env = os.environ if env is None else env
    raw = {f: env[f"POOLTK_{f.upper()}"] for f in FIELDS if f"POOLTK_{f.upper()}" in env}
    rest = _take_pooltk_flags(list(argv), raw)
    enable = _bool("--pooltk.enable", raw.get("enable", "true"))
    ints = {}
    for key, default in (("slack", 2), ("grad_slack", 1)):
        text = str(raw.get(key, default))
        ints[key] = check_int(
            f"--pooltk.{key}",
            int(text) if text.lstrip("-").isdigit() else text,
            low=0,
            fix="use 0 for the live-set limit or a small positive integer.",
        )
    release = _bool("--pooltk.release", raw.get("release", "true"))
    schedule = check_choice(
        "--pooltk.schedule",
        raw.get("schedule", "1f1b"),
        ("1f1b", "auto"),
        fix="use 1f1b (pool 1F1B only) or auto (every schedule pooltk analyses).",
    )
    device = check_choice(
        "--pooltk.device",
        raw.get("device", "auto"),
        DEVICES,
        fix="use auto (torchtitan picks) or cpu (CPU/gloo runs).",
    )
    config = PoolConfig(slack=ints["slack"], grad_slack=ints["grad_slack"], release=release)
    return TitanPoolOptions(enable=enable, config=config, schedule=schedule, device=device), rest


def _take_pooltk_flags(args: list[str], raw: dict[str, str]) -> list[str]:
    """The arguments that are not ``--pooltk.<field>`` flags, in their order; each flag's value
    text goes into ``raw`` by field (a later flag wins, and flags win over the environment).

    Raises:
        InputError: an unknown field, or a flag without a value.
    """
    rest: list[str] = []
    i = 0
    while i < len(args):
        arg = args[i]
        if arg.startswith("--pooltk."):
            key, eq, value = arg[len("--pooltk.") :].partition("=")
            key = key.replace("-", "_")
            check_choice(
                "--pooltk.<field>",
                key,
                FIELDS,
                fix="use one of the fields listed, e.g. --pooltk.slack 2.",
            )
            if not eq:
                if i + 1 >= len(args):
                    raise InputError(
                        f"--pooltk.{key}",
                        found="no value",
                        required="a value after the flag",
                        fix=f"write --pooltk.{key} VALUE.",
                    )
                value, i = args[i + 1], i + 1
            raw[key] = value
        else:
            rest.append(arg)
        i += 1
    return rest


def force_device(device: str) -> None:
    """Make torchtitan run on ``device`` (``cpu``); ``auto`` leaves its
    choice. [Note: torchtitan device]

    Raises:
        InputError: torchtitan's device module was already imported with another device.
    """
    if device == "auto":
        return
    name = "torchtitan.tools.utils"
    if name not in sys.modules:
        import torch._utils as torch_utils

        from pooltk.integrations.cpu_device import cpu_device_module

        found_type, found_module = (
            torch_utils._get_available_device_type,
            torch_utils._get_device_module,
        )
        module = cpu_device_module()
        torch_utils._get_available_device_type = lambda: device
        torch_utils._get_device_module = lambda kind=None: (
            module if kind in (None, device) else found_module(kind)
        )
        try:
            importlib.import_module(name)
        finally:
            torch_utils._get_available_device_type, torch_utils._get_device_module = (
                found_type,
                found_module,
            )
    found = sys.modules[name].device_type
    if found != device:
        raise InputError(
            "--pooltk.device",
            found=f"torchtitan already imported with device {found!r}",
            required=f"{device!r} chosen before torchtitan.tools.utils is imported",
            fix="launch through python -m pooltk.integrations.torchtitan, not after importing "
            "torchtitan.",
        )


def install(options: TitanPoolOptions):
    """Install pooltk in this rank as ``options`` say; returns the InstallReport (None if
    disabled)."""
    if not options.enable:
        return None
    import pooltk

    return pooltk.install(options.config, schedule=options.schedule)


def log_after_trainer_logger(lines: Sequence[tuple[int, str]]) -> None:
    """Log ``(level, message)`` lines on rank 0 once torchtitan's ``init_logger`` has run.

    See [Note: install line in the trainer log].
    """
    module = importlib.import_module("torchtitan.tools.logging")
    original = module.init_logger

    def init_logger(*args, **kwargs):
        result = original(*args, **kwargs)
        if os.environ.get("RANK", "0") == "0":
            for level, message in lines:
                logging.getLogger("pooltk").log(level, message)
        return result

    module.init_logger = init_logger


def main(argv: Sequence[str] | None = None) -> None:
    """The launcher: install pooltk in this rank, then run ``torchtitan.train`` as ``__main__``."""
    options, rest = options_from(sys.argv[1:] if argv is None else argv)
    import_trainer("torchtitan", trainer="torchtitan", pip=PIP)
    force_device(options.device)
    unheard = not logging.getLogger("pooltk").hasHandlers()
    report = install(options)
    if unheard:
        lines = (
            [(e.level, e.message) for e in report.events]
            if report is not None
            else [
                (
                    logging.WARNING,
                    "pooltk: not installed (reason=--pooltk.enable false: torchtitan runs stock)",
                )
            ]
        )
        log_after_trainer_logger(lines)
    sys.argv = ["torchtitan.train", *rest]
    runpy.run_module("torchtitan.train", run_name="__main__", alter_sys=True)


if __name__ == "__main__":  # pragma: no cover - exercised under torchrun
    main()
