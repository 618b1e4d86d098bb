"""Which files are read, and which run each belongs to: runs as a user means them.

[Note: files into runs]
- A file's run is its stem without ``_training`` / ``_validation*`` / ``_summary``, a rank in the
  name and a rotation number, or, for generic names (``training.jsonl``, ``stdout.log``), its
  folder's name, climbing over rank folders, ``attempt_N`` and ``logs``-like folders.
- *torchrun's ``--log-dir`` tree* (``DefaultLogsSpecs``:
  ``<log_dir>/<rdzv_id>_<random>/attempt_<restart>/<local_rank>/{stdout,stderr}.log``,
  ``error.json`` where a worker raised, and ``filtered_{stdout,stderr}.log`` in the attempt folder:
  the tee'd ranks' lines matching ``duplicate_*_filters``): the run is the ``<rdzv_id>_<random>``
  folder; rows that name no rank take the folder's *local* rank (torchrun numbers the folders, and
  its ``[<role><local_rank>]:`` console prefixes, so); each attempt (an elastic restart) is its own
  launch, ``<run>#k`` in attempt order when the tree holds several. ``error.json``, empty stream
  files and the filtered copies (beside the rank folders they copy) are left out and listed with
  why. Several nodes' trees are several runs: each node's folder has its own random suffix, and the
  local ranks repeat.
- *Per-rank files*: files of one folder whose names differ only in one number (``rank_0.log`` ..
  ``rank_7.log``, ``rankN.log``, ``srun -o out-%j-%t.txt``, Azure ML's ``std_log_process_N.txt``)
  are one run; the number is the rank of rows that name none.
- *Different folders are different runs*: when two folders would give the same run name, each
  run is named by its path from their common folder (``jobA/train`` and ``jobB/train``).
- *Rotated files* (``train.log.1``, ``train.log.2.gz``) are read with their run, oldest first.
"""

from __future__ import annotations

import os
import re
from collections import defaultdict
from collections.abc import Iterable
from pathlib import Path

from pooltk.logs.errors import LogFormatError

__all__ = ["expand", "left_out", "rank_in_name", "run_name", "torchrun_place", "unique_runs"]

_LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".jsonl", ".json", ".stdout", ".stderr"}
_COMPRESSED = {".gz", ".bz2", ".xz", ".zst", ".zstd"}
_GENERIC_STEMS = {
    "training",
    "validation",
    "train",
    "run",
    "log",
    "logs",
    "stdout",
    "stderr",
    "output",
    "out",
    "console",
    "rank",
    "std_log_process",
    "std_log",
    "process",
    "worker",
    "node",
    "task",
}
_CLIMB_DIRS = re.compile(
    r"^(?:\d+|rank[_-]?\d+|attempt_\d+|structured_logs|logs|user_logs|azureml-logs)$", re.IGNORECASE
)
_RANK_IN_NAME_RE = re.compile(r"[._-]?(?:global_|local_)?rank[_-]?(\d+)(?=$|[._-])", re.IGNORECASE)
_STAMP_IN_NAME_RE = re.compile(r"\.(\d{8}-\d{6})(?:-[A-Z0-9]{6})?$")
_ROTATED_RE = re.compile(
    r"^(?P<base>.+?\.(?:log|txt|out|err|jsonl|stdout|stderr))\.(?P<n>\d{1,4})$"
)
_MARKERS = (
    "_training",
    "-training",
    ".training",
    "_validation",
    "-validation",
    ".validation",
    "_summary",
    "-summary",
)
"""What a run's stem ends before (the first in this order found after its first character)."""
_LAST_NUMBER_RE = re.compile(r"^(?P<head>.*?)(?P<n>\d+)(?P<tail>\D*)$")
_ATTEMPT_RE = re.compile(r"^attempt_(\d+)$")
_TORCHRUN_RANK_FILES = frozenset({"stdout.log", "stderr.log", "error.json"})
_TORCHRUN_FILTERED = frozenset({"filtered_stdout.log", "filtered_stderr.log"})


def _plain_name(path: Path) -> tuple[str, int]:
    """(the name without compression and rotation suffixes, the rotation number: 0 for the live
    file)."""
    name = path.name
    for ext in _COMPRESSED:
        if name.endswith(ext):
            name = name[: -len(ext)]
            break
    m = _ROTATED_RE.match(name)
    return (m.group("base"), int(m.group("n"))) if m else (name, 0)


def rank_in_name(path: str | Path) -> int | None:
    """The rank a per-rank file's name states (``rank3.log``,
    ``training.global_rank_3.<stamp>.jsonl``), or None."""
    m = _RANK_IN_NAME_RE.search(_plain_name(Path(path))[0])
    return int(m.group(1)) if m else None


def torchrun_place(path: str | Path) -> tuple[int, int | None] | None:
    """(attempt, local rank) of a file in torchrun's ``--log-dir`` tree (rank None for the attempt's
    filtered copies), or None for any other file; see [Note: files into runs]."""
    p = Path(path)
    name = _plain_name(p)[0]
    if (
        name in _TORCHRUN_RANK_FILES
        and p.parent.name.isdigit()
        and (m := _ATTEMPT_RE.match(p.parent.parent.name))
    ):
        return int(m.group(1)), int(p.parent.name)
    if name in _TORCHRUN_FILTERED and (m := _ATTEMPT_RE.match(p.parent.name)):
        return int(m.group(1)), None
    return None


def left_out(files: list[Path]) -> dict[Path, str]:
    """Files of a folder that are not read, with why: torchrun's error files, and its filtered
    copies of lines the rank folders beside them hold."""
    out: dict[Path, str] = {}
    ranked = {
        f.resolve().parent.parent
        for f in files
        if (at := torchrun_place(f)) and at[1] is not None and _plain_name(f)[0] != "error.json"
    }
    for f in files:
        at = torchrun_place(f)
        if at is None:
            continue
        if _plain_name(f)[0] == "error.json":
            out[f] = (
                f"torchrun's error file of local rank {at[1]} "
                "(the worker's exception, written when it raised): not a log"
            )
        elif at[1] is not None and f.stat().st_size == 0:
            out[f] = (
                f"empty: local rank {at[1]} wrote nothing to this stream "
                "(torchrun makes the file either way)"
            )
        elif at[1] is None and f.resolve().parent in ranked:
            out[f] = (
                "torchrun's filtered copy of the tee'd ranks' lines "
                "(--log-dir with duplicate filters): "
                "the same lines are read from the rank folders beside it"
            )
    return out


def _run_root(f: Path) -> Path:
    """The folder a file's run is named after: its own, climbing over rank folders,
    ``attempt_N`` and ``logs``-like folders."""
    parent = f.resolve().parent
    while parent.name and _CLIMB_DIRS.match(parent.name) and parent.parent != parent:
        parent = parent.parent
    return parent


def _joined(why: str, more: str) -> str:
    """Why a file is in its run, ``more`` added."""
    return f"{why}; {more}" if why else more


def run_name(path: Path) -> str:
    """The run one file belongs to on its own; see [Note: files into runs].

    ``cpu_seq512_stock_training.jsonl`` -> ``cpu_seq512_stock``; ``out/run7/training.jsonl`` ->
    ``run7``; ``torchtitan-1.log`` -> ``torchtitan-1``; ``job/train.log.1`` -> ``job``.
    """
    name = _plain_name(Path(path))[0]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    stem = _STAMP_IN_NAME_RE.sub("", _RANK_IN_NAME_RE.sub("", stem)) or stem
    lowered = stem.lower()
    for marker in _MARKERS:
        i = lowered.find(marker)
        if i > 0:
            stem = stem[:i]
            break
    low = stem.lower().rstrip("_-.")
    if low in _GENERIC_STEMS or low.startswith("validation"):
        return _run_root(Path(path)).name or stem
    return stem


def unique_runs(files: list[Path]) -> dict[Path, tuple[str, int | None, str]]:
    """Per file: (run name, rank its name gives or None, why it joined its run ('' when alone))."""
    per_folder: dict[Path, list[Path]] = defaultdict(list)
    for f in files:
        per_folder[f.resolve().parent].append(f)
    plan: dict[Path, tuple[str, int | None, str]] = {}
    for group in per_folder.values():
        plan.update(_folder_plan(group))
    _launches(plan)
    _attempts(plan)
    _named_by_path(plan)
    for f, (name, rank, why) in plan.items():
        if rank is None and (r := rank_in_name(f)) is not None:
            plan[f] = (name, r, why)
    return plan


def _folder_plan(group: list[Path]) -> dict[Path, tuple[str, int | None, str]]:
    """The plan of one folder's files: per-rank files one run, each other file its own."""
    shapes: dict[tuple[str, str], list[tuple[Path, int]]] = defaultdict(list)
    for f in group:
        m = _LAST_NUMBER_RE.match(_plain_name(f)[0])
        if m and _plain_name(f)[1] == 0:
            shapes[(m.group("head"), m.group("tail"))].append((f, int(m.group("n"))))
    ranked = {
        f: (n, head)
        for (head, _), members in shapes.items()
        if _per_rank(head, [n for _, n in members])
        for f, n in members
    }
    plan: dict[Path, tuple[str, int | None, str]] = {}
    for f in group:
        if f in ranked:
            n, head = ranked[f]
            stem = _RANK_WORD_RE.sub("", head.rstrip("_-."))
            generic = (
                not stem
                or stem.lower() in _GENERIC_STEMS
                or stem.lower().endswith(("rank", "process"))
            )
            name = (_run_root(f).name or stem) if generic else stem
            why = f"per-rank files of one folder ({head}N{f.suffix}): rank from the file name"
            plan[f] = (name, n, why)
        else:
            base, rot = _plain_name(f)
            plan[f] = (run_name(f), None, f"rotated files of {base} joined in order" if rot else "")
    return plan


def _named_by_path(plan: dict[Path, tuple[str, int | None, str]]) -> None:
    """The same run name from two folders: two runs, each named by its path from their common
    folder."""
    folders_of: dict[str, set[Path]] = defaultdict(set)
    for f, (name, _, _) in plan.items():
        folders_of[name].add(_run_root(f))
    for name, roots in folders_of.items():
        if len(roots) < 2:
            continue
        common = Path(os.path.commonpath([str(r) for r in roots]))
        for f, (n, rank, why) in list(plan.items()):
            if n == name:
                rel = _run_root(f).relative_to(common).as_posix()
                plan[f] = (
                    f"{rel}/{name}"
                    if rel not in (".", name) and not rel.endswith("/" + name)
                    else rel or name,
                    rank,
                    _joined(why, "the same name in another folder is another run"),
                )


LAUNCH_GAP_S = 60.0
"""Start stamps of one launch's ranks (torchtitan's structured logs) lie within this of the one
before."""


def _launches(plan: dict[Path, tuple[str, int | None, str]]) -> None:
    """Stamped per-rank files of one folder and run
    (``<source>.global_rank_R.<YYYYmmdd-HHMMSS>-<6>.jsonl``) grouped into launches, each its own run
    ``<run>#k``: in stamp order, a file starts a new launch when its stamp is more than
    :data:`LAUNCH_GAP_S` after the previous file's or its rank is already in the launch."""
    from datetime import datetime

    groups: dict[tuple[Path, str], list[tuple[datetime, int | None, Path]]] = defaultdict(list)
    for f, (name, _rank, _) in plan.items():
        if m := _STAMP_IN_NAME_RE.search(_plain_name(f)[0].rsplit(".", 1)[0]):
            groups[(f.resolve().parent, name)].append(
                (datetime.strptime(m.group(1), "%Y%m%d-%H%M%S"), rank_in_name(f), f)
            )
    for (_, name), members in groups.items():
        members.sort(key=lambda m: (m[0], m[2].name))
        k, ranks, last, of = 0, set(), None, {}
        for stamp, rank, f in members:
            if last is None or (stamp - last).total_seconds() > LAUNCH_GAP_S or rank in ranks:
                k, ranks = k + 1, set()
            ranks.add(rank)
            last, of[f] = stamp, k
        if k > 1:
            for f, i in of.items():
                _, rank, why = plan[f]
                why = _joined(why, f"launch {i} of {k} by the files' start stamps")
                plan[f] = (f"{name}#{i}", rank, why)


def _attempts(plan: dict[Path, tuple[str, int | None, str]]) -> None:
    """torchrun tree files: the rank from the folder, and each attempt its own launch when the tree
    holds several."""
    attempts: dict[tuple[Path, str], set[int]] = defaultdict(set)
    for f, (name, rank, why) in list(plan.items()):
        if (at := torchrun_place(f)) is None:
            continue
        attempts[(_run_root(f), name)].add(at[0])
        if at[1] is not None and rank is None:
            from_folder = "torchrun --log-dir tree: each file's rank from its folder (local rank)"
            plan[f] = (name, at[1], _joined(why, from_folder))
    for f, (name, rank, why) in list(plan.items()):
        if (at := torchrun_place(f)) is None or len(
            seen := sorted(attempts[(_run_root(f), name)])
        ) < 2:
            continue
        k = seen.index(at[0]) + 1
        launch = f"attempt_{at[0]}: launch {k} of {len(seen)} (an elastic restart)"
        plan[f] = (f"{name}#{k}", rank, _joined(why, launch))


_RANK_WORDS = ("rank", "process", "proc", "worker", "task", "node", "gpu", "device")
_RANK_WORD_RE = re.compile(
    r"[._-]?(?:global_|local_)?(?:" + "|".join(_RANK_WORDS) + r")$", re.IGNORECASE
)


def _per_rank(head: str, numbers: list[int]) -> bool:
    """Whether files differing only in these numbers are one job's ranks (0..N-1, or a rank word
    before them)."""
    if len(numbers) < 2 or len(set(numbers)) != len(numbers):
        return False
    return sorted(numbers) == list(range(len(numbers))) or head.lower().rstrip("_-.").endswith(
        _RANK_WORDS
    )


def _is_log(f: Path) -> bool:
    base, _ = _plain_name(f)
    return Path(base).suffix in _LOG_SUFFIXES


def _order(f: Path) -> tuple[str, int, str]:
    base, rot = _plain_name(f)
    return (str(f.parent / base), -rot, f.name)  # rotated files oldest first, the live file last


def expand(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Files to read: (path, named explicitly). Folders are walked recursively, sidecars left
    out."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                (
                    f
                    for f in p.rglob("*")
                    if f.is_file()
                    and not f.name.endswith(".meta.json")
                    and not f.name.startswith(".")
                    and _is_log(f)
                ),
                key=_order,
            )
            if not found:
                raise LogFormatError(
                    str(p),
                    0,
                    found="a folder with no log files "
                    "(.log .txt .out .jsonl .json, rotated .log.N, "
                    "or compressed .gz .bz2 .xz .zst of them)",
                    required="log files",
                    fix="point at the folder the run wrote its logs to",
                )
            out.extend((f, False) for f in found)
        elif p.exists():
            out.append((p, True))
        else:
            raise LogFormatError(
                str(p),
                0,
                found="no such file or folder",
                required="an existing path",
                fix="check the path (relative paths start from the current folder)",
            )
    return out
