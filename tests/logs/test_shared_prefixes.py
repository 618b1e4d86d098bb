"""Several ranks printing the same unprefixed lines behind a decoration that gives every copy the
same prefix read exactly as the same log undecorated: the copies fold into one row each, a
validation line among them too, and a copy printed a step late starts no run.

The multi-rank logs are built here from the base logs (the format fixtures, and the real logs of
../shared/reference/logs where present): every line as R ranks print it without a prefix, each
rank's copy of a step line after the next rank's, one rank a line late, and a validation record
after a step line. Each decoration is written from its tool's documented output, never from the
reader's patterns:

- journald, ``journalctl -o short`` (the default): ``Dec 05 10:00:00 host python[123]: ``;
- syslog, RFC 3164 section 4.1 (PRI, TIMESTAMP ``Mmm dd hh:mm:ss`` with a space-padded day,
  HOSTNAME, TAG ``ident[pid]:``): ``<34>Dec  5 10:00:00 node7 trainer[4242]: ``;
- Slurm ``srun --label`` (``-l``, "prepend task number to lines of stdout/err"): ``0: ``;
- Open MPI ``mpirun --tag-output`` (``[jobid,rank]<stdout>:``): ``[1,0]<stdout>:``;
- SkyPilot's multi-node output, ``(head, rank=0, pid=..., ip=...)``: the head node's process,
  which launched every local rank;
- torchrun ``--tee 3`` with the default role, ``[{role}{local_rank}]:``: ``[default0]:`` (one
  local worker whose own processes print).
"""

from __future__ import annotations

import re
from pathlib import Path

import pandas as pd
import pytest

from pooltk.logs import read_log_file

from _real_logs import VALUES  # noqa: E402  (tests/logs/_real_logs.py)

RANKS = 4
_TORCHRUN = re.compile(r"^(?:\[[A-Za-z_]*\d+\]:)+")
_TITAN_STEP = re.compile(r"^(.*? - [\w.]+ - INFO - )(?:\x1b\[[\d;]*m)?step:\s*(\d+)\s")
_AUTOMODEL_STEP = re.compile(r"^(.*?)step (\d+) \| epoch (\d+) \| loss ")

DECORATIONS = {
    "journald": lambda i: f"Dec 05 10:{i // 60 % 60:02d}:{i % 60:02d} host python[123]: ",
    "syslog_rfc3164": lambda i: (
        f"<34>Dec  5 10:{i // 60 % 60:02d}:{i % 60:02d} node7 trainer[4242]: "
    ),
    "srun_label": lambda i: "0: ",
    "mpirun_tag_output": lambda i: "[1,0]<stdout>:",
    "skypilot": lambda i: "(head, rank=0, pid=2367, ip=10.0.0.1) ",
    "torchrun_role": lambda i: "[default0]:",
}


def _lines(src: Path) -> list[str]:
    text = src.read_text(encoding="utf-8")
    return [_TORCHRUN.sub("", ln) for ln in text.split("\n")[: -1 if text.endswith("\n") else None]]


def _with_validation(lines: list[str]) -> list[str]:
    """A validation record after the first step record, as the format writes it: torchtitan's
    ``validate step: {:2}  loss: {:7.4f}  memory: ...``, Automodel's ``[val] name "{}" | step {} |
    epoch {} | loss {:.4f} | lr {:.2e} | num_label_tokens {}`` (its logging prefix kept)."""
    for i, line in enumerate(lines):
        if m := _TITAN_STEP.match(line):
            val = f"{m.group(1)}validate step: {m.group(2)}  loss: 9.1234  memory: 1.00GiB(1.00%)"
        elif m := _AUTOMODEL_STEP.match(line):
            val = (
                f'{m.group(1)}[val] name "default" | step {m.group(2)} | epoch {m.group(3)} | '
                "loss 9.1234 | lr 1.00e-05 | num_label_tokens 4096"
            )
        else:
            continue
        return [*lines[: i + 1], val, *lines[i + 1 :]]
    return lines


def _several_ranks(lines: list[str], records: set[int]) -> list[str]:
    """Every line as ``RANKS`` ranks print it: rank 0's copy of a record line comes after the
    other ranks' copies of the record before it (a step late)."""
    out: list[str] = []
    late: list[str] = []
    for n, line in enumerate(lines, start=1):
        if n in records:
            out += [line] * (RANKS - 1) + late
            late = [line]
        else:
            out += [line] * RANKS
    return out + late


def _multi_rank_logs(base_logs: list[Path], tmp_path: Path) -> list[Path]:
    out = []
    for src in base_logs:
        if src.suffix != ".log":  # one process writes a JSONL file: no copies to print
            continue
        lines = _with_validation(_lines(src))
        plain = tmp_path / f"plain_{src.name}"
        plain.write_text("\n".join(lines) + "\n", encoding="utf-8")
        records = set(read_log_file(plain).steps["line"])
        several = tmp_path / f"ranks_{src.name}"
        several.write_text("\n".join(_several_ranks(lines, records)) + "\n", encoding="utf-8")
        out.append(several)
    assert out, "no text base log"
    return out


@pytest.mark.parametrize("how", sorted(DECORATIONS))
def test_copies_behind_one_shared_prefix_read_as_the_undecorated_log(base_logs, tmp_path, how):
    for src in _multi_rank_logs(base_logs, tmp_path):
        plain = read_log_file(src)
        assert plain.files[0].n_folded > 0, src.name  # the undecorated log folds its copies
        dst = tmp_path / f"{how}_{src.name}"
        lines = src.read_text(encoding="utf-8").split("\n")[:-1]
        dst.write_text(
            "".join(DECORATIONS[how](i) + ln + "\n" for i, ln in enumerate(lines)), encoding="utf-8"
        )
        got = read_log_file(dst)
        what = f"{src.name} behind {how}"
        pd.testing.assert_frame_equal(
            got.steps[[*VALUES, "line", "val_name"]].reset_index(drop=True),
            plain.steps[[*VALUES, "line", "val_name"]].reset_index(drop=True),
            check_categorical=False,
            obj=what,
        )
        assert (got.files[0].n_folded, got.files[0].runs) == (
            plain.files[0].n_folded,
            [f"{how}_{plain.files[0].runs[0]}"],
        ), what
        assert (got.steps["kind"] == "val").sum() == (plain.steps["kind"] == "val").sum() > 0, what
