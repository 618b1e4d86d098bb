"""torchtitan's validation lines stay validation under every launcher decoration the reader knows.

Each torchtitan base log gets, after every step line, the line torchtitan's ``log_validation``
prints for that step (``validate step: {:2}  loss: {:7.4f}  memory: {:5.2f}GiB({:.2f}%)``, the
form of issue 32: ``validate step: 1 loss: 12.4699 memory: 69.81GiB(88.17%)``). The file is then
decorated the way each launcher family decorates it, the validation line by the same rank as the
step lines or by another one (the last PP stage logs the loss). Each line keeps torchrun's own
``[rankN]:`` where the log has it, and the launcher's prefix names that rank. The decorated file
must read to the plain file's rows: the same steps, the same kinds, the validation lines never
training steps.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from pooltk.logs import read_log_file

_RANKS = re.compile(r"^(?:\[[A-Za-z_]*\d+\]:)+")
_STEP_LINE = re.compile(r"^(.*? - [\w.]+ - INFO - )(?:\x1b\[[\d;]*m)?step:\s*(\d+)\s")

FAMILIES = {  # family: prefix(rank, line number)
    "journalctl_short": lambda r, i: (
        f"May 20 02:{i // 60 % 60:02d}:{i % 60:02d} node{r} python3[4242]: "
    ),
    "journalctl_short_iso": lambda r, i: (
        f"2026-05-20T02:{i // 60 % 60:02d}:{i % 60:02d}+0000 node{r} python3[4242]: "
    ),
    "syslog_rfc3164": lambda r, i: f"<34>Oct 11 22:14:{i % 60:02d} node{r} trainer[4242]: ",
    "srun_l_torchrun": lambda r, i: f"{r}: [default{r}]:",
    "skypilot": lambda r, i: f"(worker{r}, rank={r}, pid=2367, ip=10.0.0.{r + 1}) ",
    "mpirun_tag_output": lambda r, i: f"[1,{r}]<stdout>:",
    "sagemaker_mpi": lambda r, i: f"[1,mpirank:{r},algo-{r + 1}]<stdout>:",
    "torchrun_role": lambda r, i: f"[trainer{r}]:",
    "srun_task_copy": lambda r, i: f"{r}.0: ",
}


def _with_validation(src: Path) -> list[tuple[int, str]]:
    """``src``'s lines with torchtitan's validation line after each step line, each with the rank
    its ``[rankN]:`` prefix names (0 where none)."""
    out = []
    for line in src.read_text(encoding="utf-8").splitlines():
        ranks = _RANKS.match(line)
        rank = int(re.findall(r"\d+", ranks.group(0))[-1]) if ranks else 0
        out.append((rank, line))
        m = _STEP_LINE.match(_RANKS.sub("", line))
        if m:
            head = ranks.group(0) if ranks else ""
            out.append(
                (
                    rank,
                    f"{head}{m.group(1)}validate step: {m.group(2)} loss: 12.4699 "
                    "memory: 69.81GiB(88.17%)",
                )
            )
    return out


def _kinds(path: Path) -> list[tuple[int, str]]:
    steps = read_log_file(path).steps
    return list(zip(steps["step"].astype(int), steps["kind"]))


@pytest.mark.parametrize("val_rank", [0, 3], ids=["same_rank", "another_rank"])
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_a_decorated_validation_line_is_read_as_validation_never_a_step(
    base_logs, tmp_path, family, val_rank
):
    titan = [p for p in base_logs if "titan" in p.name and p.suffix == ".log"]
    assert titan, "no torchtitan base"
    prefix = FAMILIES[family]
    for src in titan:
        lines = _with_validation(src)
        plain = tmp_path / f"plain_{src.name}"
        plain.write_text("\n".join(ln for _, ln in lines) + "\n", encoding="utf-8")
        want = _kinds(plain)
        assert ("val" in {k for _, k in want}) and ("train" in {k for _, k in want}), src.name
        decorated = tmp_path / f"{family}_{src.name}"
        decorated.write_text(
            "\n".join(
                prefix(rank + val_rank if "validate step:" in ln else rank, i) + ln
                for i, (rank, ln) in enumerate(lines)
            )
            + "\n",
            encoding="utf-8",
        )
        assert _kinds(decorated) == want, (
            f"{src.name} under {family}, validation by rank + {val_rank}"
        )
