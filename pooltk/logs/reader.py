"""Read log files, folders and ``.gz`` into one tidy table: :func:`read_logs`.

Each file's format is detected from its lines (:func:`detect_format`), read by that family's
reader, and tagged with ``run``, ``source_file`` and ``format``. See [Note: what happens to a
line] in :mod:`pooltk.logs._common` for how every line is accounted for.

Errors: a file named explicitly that is empty, unreadable, or has no line of any supported
format raises :class:`LogFormatError` naming it. Inside a folder such files are listed in
:attr:`LogTable.unrecognised` instead (folders hold READMEs and configs too), but a folder
that yields no row at all raises.
"""

from __future__ import annotations

import gzip
import re
import zlib
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import check_int
from pooltk.logs import automodel_bench, automodel_jsonl, automodel_text, decoration, runs, torchtitan, torchtitan_jsonl
from pooltk.logs._common import ParseResult, SkippedLine
from pooltk.logs.errors import LogFormatError
from pooltk.logs.runinfo import RunInfo, read_sidecar, sidecar_paths
from pooltk.logs.schema import concat_frames, to_frame

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = [
    "FORMATS",
    "MAX_BYTES",
    "FileReport",
    "LogTable",
    "detect_format",
    "read_log_file",
    "read_logs",
    "run_name",
]

FORMATS: tuple[str, ...] = (
    automodel_text.FORMAT,
    automodel_jsonl.FORMAT,
    automodel_bench.FORMAT,
    automodel_bench.SUMMARY_FORMAT,
    torchtitan.FORMAT,
    torchtitan_jsonl.FORMAT,
)
"""Log families pooltk reads."""

_LOG_SUFFIXES = {".log", ".txt", ".out", ".err", ".jsonl", ".json", ".stdout", ".stderr"}
_GENERIC_STEMS = {"training", "validation", "train", "run", "log", "logs", "stdout", "stderr", "output", "out", "console"}
_DETECT_LINES = 200_000


@dataclass(kw_only=True, slots=True)
class FileReport:
    """How one file was read: its format and what became of each of its lines."""

    path: str
    """The file."""
    run: str
    """Run the rows were tagged with."""
    format: str
    """Detected (or given) format."""
    n_lines: int
    """Lines in the file."""
    n_rows: int
    """Rows it produced (train and val)."""
    n_skipped: int
    """Step-like lines that could not be parsed (see skipped_by_reason)."""
    skipped_by_reason: dict[str, int]
    """Skipped lines counted by reason."""
    skipped_examples: list[SkippedLine]
    """The first skipped lines, with line numbers."""
    n_meta: int
    """Lines run facts were taken from."""
    n_other: int
    """Lines that are neither rows, skipped nor meta (warnings, dumps, tracebacks)."""
    n_nonfinite: int
    """Rows with a NaN or infinite loss (kept: a diverged run logs them)."""
    notes: list[str]
    """Things to know about the figures (bases, conventions)."""
    meta: dict[str, Any]
    """Run facts found in the file."""
    n_folded: int = 0
    """Rows folded into an identical row of the same run (one line printed by several ranks; counted in n_rows)."""
    runs: list[str] = field(default_factory=list)
    """The runs the file's rows belong to (more than one when it holds a restart; see pooltk.logs.runs)."""
    run_boundaries: list[str] = field(default_factory=list)
    """Where and why each run after the first began."""
    decorations: tuple[str, ...] = ()
    """Line decorations found and removed (srun, kubectl, compose, torchrun, ...)."""
    n_decorated: int = 0
    """Lines that carried a decoration."""

    def to_dict(self) -> dict[str, Any]:
        """A flat dict (skipped examples as 'line: reason' strings)."""
        return {
            "path": self.path,
            "run": self.run,
            "format": self.format,
            "n_lines": self.n_lines,
            "n_rows": self.n_rows,
            "n_skipped": self.n_skipped,
            "skipped_by_reason": dict(self.skipped_by_reason),
            "skipped_examples": [f"{s.line}: {s.reason}" for s in self.skipped_examples],
            "n_meta": self.n_meta,
            "n_other": self.n_other,
            "n_nonfinite": self.n_nonfinite,
            "n_folded": self.n_folded,
            "runs": list(self.runs),
            "run_boundaries": list(self.run_boundaries),
            "decorations": list(self.decorations),
            "notes": list(self.notes),
        }


@dataclass(kw_only=True, slots=True)
class LogTable:
    """Everything read from a set of logs: the step table, per-file reports, per-run facts."""

    steps: pd.DataFrame
    """One row per logged step (and rank, and validation) of every run; see pooltk.logs.schema."""
    files: list[FileReport]
    """One report per file read."""
    runs: dict[str, RunInfo]
    """Facts per run (from the logs and sidecars)."""
    unrecognised: list[str] = field(default_factory=list)
    """Files inside folders that are no supported format, each with the reason."""

    def to_frame(self) -> pd.DataFrame:
        """The step table."""
        return self.steps

    def files_frame(self) -> pd.DataFrame:
        """One row per file: format, counts of rows, skipped, meta and other lines."""
        import pandas as pd

        rows = []
        for f in self.files:
            d = f.to_dict()
            d["skipped_by_reason"] = "; ".join(f"{k} x{v}" for k, v in f.skipped_by_reason.items())
            d["skipped_examples"] = "; ".join(d["skipped_examples"][:3])
            d["notes"] = " | ".join(f.notes)
            rows.append(d)
        return pd.DataFrame(rows)

    @property
    def n_skipped(self) -> int:
        """Skipped lines over all files."""
        return sum(f.n_skipped for f in self.files)


_RANK_IN_NAME_RE = re.compile(r"[._-]?(?:global_|local_)?rank[_-]?(\d+)(?=$|[._-])", re.IGNORECASE)
_STAMP_IN_NAME_RE = re.compile(r"\.\d{8}-\d{6}(?:-[A-Z0-9]{6})?$")
_RANK_DIR_RE = re.compile(r"^(?:\d+|rank[_-]?\d+)$", re.IGNORECASE)


def rank_in_name(path: Path) -> int | None:
    """The rank a per-rank file's name states (``rank3.log``, ``training.global_rank_3.<stamp>.jsonl``), or None."""
    m = _RANK_IN_NAME_RE.search(path.name)
    return int(m.group(1)) if m else None


def run_name(path: Path) -> str:
    """The run a file belongs to: its stem without ``_training``/``_validation*``/``_summary``, or its folder's name.

    ``cpu_seq512_stock_training.jsonl`` -> ``cpu_seq512_stock``; ``out/run7/training.jsonl`` ->
    ``run7``; ``torchtitan-1.log`` -> ``torchtitan-1``. Per-rank files of one run share it: a
    rank in the name (``job_rank3.log``, torchtitan's ``training.global_rank_3.<stamp>.jsonl``)
    and its timestamp are dropped, and rank folders (``logs/job/3/stdout.log``, torchrun's
    ``--log-dir`` layout) and ``structured_logs`` are climbed over.
    """
    name = path.name
    if name.endswith(".gz"):
        name = name[:-3]
    stem = name.rsplit(".", 1)[0] if "." in name else name
    stem = _STAMP_IN_NAME_RE.sub("", _RANK_IN_NAME_RE.sub("", stem)) or stem
    lowered = stem.lower()
    for marker in ("_training", "-training", ".training", "_validation", "-validation", ".validation", "_summary", "-summary"):
        i = lowered.find(marker)
        if i > 0:
            stem = stem[:i]
            break
    if stem.lower() in _GENERIC_STEMS or stem.lower().startswith("validation"):
        parent = path.resolve().parent
        while parent.name and (_RANK_DIR_RE.match(parent.name) or parent.name in ("structured_logs", "logs")) and parent.parent != parent:
            parent = parent.parent
        return parent.name or stem
    return stem


MAX_BYTES = 1 << 30
"""Largest file (after decompression) read in one piece: 1 GiB. The reader holds a file's bytes, its
line index and its rows at once (several times the file's size), so a larger file is refused with
a fix rather than risking the machine's memory."""


def _too_big(path: Path, size: int, limit: int, what: str) -> LogFormatError:
    return LogFormatError(str(path), 0, found=f"{what} of {size / 2**30:.2f} GiB", required=f"at most {limit / 2**30:.2f} GiB per file",
                          fix="split it at line boundaries (split -C 512M FILE part_) and read the parts as one folder, "
                              "or pass max_bytes= if the machine has the memory")


def _read_bytes(path: Path, max_bytes: int = MAX_BYTES) -> bytes:
    """The file's bytes, .gz decompressed; refused past ``max_bytes`` (before reading, or while decompressing)."""
    try:
        size = path.stat().st_size
    except OSError as err:
        raise LogFormatError(str(path), 0, found=f"an unreadable file ({err.strerror or err})",
                             required="a readable log file", fix="check the path and its permissions") from None
    if size > max_bytes:
        raise _too_big(path, size, max_bytes, "a file")
    try:
        data = path.read_bytes()
    except OSError as err:
        raise LogFormatError(str(path), 0, found=f"an unreadable file ({err.strerror or err})",
                             required="a readable log file", fix="check the path and its permissions") from None
    if path.suffix == ".gz" or data[:2] == b"\x1f\x8b":
        try:
            inflate = zlib.decompressobj(16 + zlib.MAX_WBITS)
            out = inflate.decompress(data, max_bytes + 1)
            if len(out) > max_bytes:
                raise _too_big(path, len(out), max_bytes, "decompressed content of more than")
            if not inflate.eof:
                raise EOFError("the compressed stream ends before its end marker")
            if inflate.unused_data:  # concatenated gzip members (cat a.gz b.gz)
                out += gzip.decompress(inflate.unused_data)
                if len(out) > max_bytes:
                    raise _too_big(path, len(out), max_bytes, "decompressed content of more than")
            data = out
        except (OSError, EOFError, zlib.error) as err:
            raise LogFormatError(str(path), 0, found=f"a damaged gzip file ({err})", required="a complete .gz file",
                                 fix="re-copy the file, or gunzip what is left and read the plain text") from None
    return data


def _split_lines(text: str) -> list[str]:
    """Lines split on newline only (so line numbers match editors); no trailing empty line."""
    lines = text.split("\n")
    if lines and lines[-1] == "":
        lines.pop()
    return lines


def detect_format(lines: Sequence[str], *, path: str = "<lines>", text: str | None = None) -> str:
    """The format of a log from its lines; raises :class:`LogFormatError` when none fits.

    JSONL: the first non-blank line is a JSON object with ``step`` (for a ``.jsonl`` file, any of
    the first 20 non-blank lines, so a damaged first record does not hide the rest). Otherwise the first line
    (of the first 200,000) that carries a family's signature decides: benchmark-recipe lines,
    Automodel step lines, torchtitan metric lines.
    """
    if text is not None and automodel_bench.looks_like_summary(text):
        return automodel_bench.SUMMARY_FORMAT
    first = next((ln for ln in lines if ln.strip()), None)
    if first is None:
        raise LogFormatError(path, 0, found="an empty file (no non-blank line)", required="log lines",
                             fix="point at the run's log (it may not have been flushed yet)")
    if torchtitan_jsonl.looks_like(first):
        return torchtitan_jsonl.FORMAT
    if automodel_jsonl.looks_like(first):
        return automodel_jsonl.FORMAT
    if path.removesuffix(".gz").endswith(".jsonl"):
        # a .jsonl whose first record is damaged: the next records decide
        head = [ln for ln in lines[:200] if ln.strip()][:20]
        if any(torchtitan_jsonl.looks_like(ln) for ln in head):
            return torchtitan_jsonl.FORMAT
        if any(automodel_jsonl.looks_like(ln) for ln in head):
            return automodel_jsonl.FORMAT
    for line in lines[:_DETECT_LINES]:
        if automodel_bench.looks_like(line):
            return automodel_bench.FORMAT
        if automodel_text.looks_like(line):
            return automodel_text.FORMAT
        if torchtitan.looks_like(line):
            return torchtitan.FORMAT
    shown = min(len(lines), _DETECT_LINES)
    raise LogFormatError(
        path, 0,
        found=f"no line of a supported format in the first {shown} line(s) (first line: {first[:80]!r})",
        required=f"one of {', '.join(FORMATS)}",
        fix="check this is a training log; give format= explicitly if detection is wrong, or report the format",
    )


_HEAD_BYTES = 1 << 22


def _detect(data: bytes, path: Path) -> tuple[str, list[str], str | None]:
    """(format, the first lines decoded, the whole text when it was decoded)."""
    if len(data) <= _HEAD_BYTES:
        text = data.decode("utf-8", errors="replace")
        lines = _split_lines(text)
        return detect_format(lines, path=str(path), text=text), lines, text
    head = _split_lines(data[:_HEAD_BYTES].decode("utf-8", errors="replace"))[:-1]  # last one may be cut
    try:
        return detect_format(head, path=str(path)), head, None
    except LogFormatError:
        text = data.decode("utf-8", errors="replace")
        lines = _split_lines(text)
        return detect_format(lines, path=str(path), text=text), lines, text


def _parse(fmt: str, data: bytes, head: list[str], text: str | None, path: Path, engine: str) -> tuple[ParseResult, Any]:
    """Run the format's reader over the file; returns (per-line result, vectorised rows or None)."""
    from pooltk.logs._fast import split_lines

    result = ParseResult()
    if fmt == automodel_bench.SUMMARY_FORMAT:
        return automodel_bench.parse_summary(text if text is not None else data.decode("utf-8", "replace"), result), None
    bounds = split_lines(data)
    stem = path.name.removesuffix(".gz").rsplit(".", 1)[0]
    val_name = automodel_jsonl.val_name_from_path(stem) if fmt == automodel_jsonl.FORMAT else None
    fast = None
    if engine == "auto":
        if fmt == automodel_text.FORMAT:
            fast = automodel_text.fast_rows(bounds, head)
        elif fmt == automodel_jsonl.FORMAT:
            fast = automodel_jsonl.fast_rows(bounds, head, val_name=val_name)
        elif fmt == torchtitan.FORMAT:
            fast = torchtitan.fast_rows(data, bounds, head)
    numbered = _numbered(data, bounds, text, None if fast is None else fast.line_index)
    if fmt == automodel_text.FORMAT:
        automodel_text.parse(numbered, result, fast=fast)
    elif fmt == automodel_jsonl.FORMAT:
        automodel_jsonl.parse(numbered, result, val_name=val_name, fast=fast)
    elif fmt == automodel_bench.FORMAT:
        automodel_bench.parse(numbered, result)
    elif fmt == torchtitan.FORMAT:
        torchtitan.parse(numbered, result, fast=fast)
    elif fmt == torchtitan_jsonl.FORMAT:
        torchtitan_jsonl.parse(numbered, result)
    else:
        raise ValueError(f"format: found {fmt!r}; required one of {', '.join(FORMATS)} or 'auto'. Fix: pass one of those.")
    result.n_lines = len(bounds)
    if fast is not None and result.fast_truncated:  # the vectorised layout was the cut-short one
        for i in fast.line_index:
            s, e = int(bounds.starts[i]), int(bounds.ends[i])
            result.skip(int(i) + 1, result.fast_truncated, data[s:e].decode("utf-8", errors="replace"))
        fast = None
    return result, fast


def _numbered(data: bytes, bounds: Any, text: str | None, done: Any) -> Iterable[tuple[int, str]]:
    """(1-based line number, text) of every line the vectorised path did not read."""
    import numpy as np

    n = len(bounds)
    if done is None or done.size == 0:
        lines = _split_lines(text) if text is not None else _split_lines(data.decode("utf-8", errors="replace"))
        return enumerate(lines, start=1)
    mask = np.ones(n, dtype=bool)
    mask[done] = False
    rest = np.flatnonzero(mask)
    starts, ends = bounds.starts[rest], bounds.ends[rest]
    return ((int(i) + 1, data[s:e].decode("utf-8", errors="replace")) for i, s, e in zip(rest, starts, ends, strict=True))


def read_log_file(
    path: str | Path, *, format: str = "auto", run: str | None = None, strict: bool = False, engine: str = "auto",  # noqa: A002
    max_bytes: int = MAX_BYTES,
) -> LogTable:
    """Read one log file (plain or .gz) into a :class:`LogTable`.

    ``strict=True`` turns the first skipped line into a :class:`LogFormatError`; by default
    skipped lines are counted in the file's report. ``engine="python"`` reads every line with
    the per-line reader (the definition of each format); ``"auto"`` first reads canonical step
    lines vectorised (same values, see [Note: fast path equals slow path]).
    """
    p = Path(path)
    table, problem = _read_one(p, format=format, run=run, strict=strict, engine=engine, max_bytes=max_bytes)
    if problem is not None:
        raise problem
    assert table is not None
    return table


def _read_one(p: Path, *, format: str, run: str | None, strict: bool, engine: str = "auto",  # noqa: A002
              max_bytes: int = MAX_BYTES) -> tuple[LogTable | None, LogFormatError | None]:
    import numpy as np
    import pandas as pd

    if format != "auto" and format not in FORMATS:
        raise ValueError(f"format: found {format!r}; required 'auto' or one of {', '.join(FORMATS)}. Fix: pass one of those.")
    if engine not in ("auto", "python"):
        raise ValueError(f"engine: found {engine!r}; required 'auto' or 'python'.")
    try:
        data, deco = decoration.strip(_read_bytes(p, check_int("max_bytes", max_bytes, low=1, error=ValueError)))
        if format == "auto":
            fmt, head, text = _detect(data, p)
        else:
            text = data.decode("utf-8", errors="replace") if len(data) <= _HEAD_BYTES else None
            head = _split_lines(text if text is not None else data[:_HEAD_BYTES].decode("utf-8", errors="replace"))
            fmt = format
    except LogFormatError as err:
        return None, err
    try:
        result, fast = _parse(fmt, data, head, text, p, engine)
    except ValueError as err:  # the JSON summary path: invalid JSON after detection cannot happen, but stay clear
        return None, LogFormatError(str(p), 0, found=str(err), required=f"a {fmt} file", fix="check the file")
    run_id = run or run_name(p)
    n_fast = len(fast) if fast is not None else 0
    n_rows = len(result.rows) + n_fast
    if strict and result.skipped_examples:
        first = result.skipped_examples[0]
        return None, LogFormatError(str(p), first.line, found=f"a step line that does not parse ({first.reason})",
                                    required=f"every step line in {fmt} form", fix="pass strict=False to skip and count such lines",
                                    text=first.text)
    if n_rows == 0 and fmt != automodel_bench.SUMMARY_FORMAT:
        found = f"no complete step line in {result.n_lines} line(s) of {fmt} (skipped {result.n_skipped}"
        found += f": {result.skipped_examples[0].reason} at line {result.skipped_examples[0].line})" if result.skipped_examples else ")"
        return None, LogFormatError(str(p), result.skipped_examples[0].line if result.skipped_examples else 0, found=found,
                                    required="at least one step line", fix="check the run got past its first step")
    constants = {"run": run_id, "source_file": str(p), "format": fmt, "mem_basis": result.mem_basis}
    frame = to_frame(result.rows.columns(), len(result.rows), timestamp_format=result.timestamp_format, **constants)
    if n_fast:
        cols = dict(fast.columns)
        cols["line"] = fast.line_index + 1
        kinds = {"kind": fast.kind}
        quick = to_frame(cols, n_fast, timestamp_format=None, **constants, **kinds)
        if len(result.rows):
            frame = concat_frames([frame, quick]).sort_values("line", kind="stable", ignore_index=True)
        else:
            frame = quick
    frame["mem_basis"] = frame["mem_basis"].where(frame["mem_gib"].notna(), pd.NA)
    n_nonfinite = int((~np.isfinite(frame["loss"].to_numpy(dtype=float))).sum()) - result.n_placeholder_loss
    report = FileReport(
        path=str(p), run=run_id, format=fmt, n_lines=result.n_lines, n_rows=n_rows, n_skipped=result.n_skipped,
        skipped_by_reason=dict(result.skipped), skipped_examples=list(result.skipped_examples), n_meta=result.n_meta,
        n_other=result.n_other, n_nonfinite=n_nonfinite, notes=list(result.notes), meta=dict(result.meta),
        decorations=deco.kinds, n_decorated=deco.n_decorated,
    )
    info = RunInfo.from_facts(result.meta, source=str(p), lines=result.meta_lines)
    for sidecar in sidecar_paths(p, run_id):
        if sidecar.is_file():
            facts = read_sidecar(sidecar)
            info = info.merged(facts)
            report.notes.append(f"run facts from sidecar {sidecar.name}")
            basis = facts.extra.get("mem_basis")
            if isinstance(basis, str) and basis:  # the sidecar knows what its 'mem' measures
                frame["mem_basis"] = _constant_where(frame["mem_gib"].notna(), basis)
                report.notes.append(f"mem_gib basis from the sidecar: {basis}")
            break
    if frame["rank"].isna().all() and len(frame) and (named := rank_in_name(p)) is not None:
        frame["rank"] = pd.array([named] * len(frame), dtype="Int64")
    frame, run_infos = _split_runs(frame, data, deco, report, info, run_id)
    return LogTable(steps=frame, files=[report], runs=run_infos), None


def _split_runs(frame: Any, data: bytes, deco: Any, report: FileReport, info: RunInfo, run_id: str) -> tuple[Any, dict[str, RunInfo]]:
    """Decoration ranks and tasks as columns, runs split at restarts, rank copies folded, pool columns.

    See [Note: run boundaries] and [Note: pooled runs] in :mod:`pooltk.logs.runs`.
    """
    import numpy as np
    import pandas as pd

    idx = frame["line"].to_numpy(dtype=np.int64) - 1
    for name, values in (("rank", deco.rank), ("task", deco.task)):
        if values is not None and len(frame):
            named = values[np.clip(idx, 0, values.size - 1)]
            have = frame[name].notna().to_numpy()
            merged = np.where(have, frame[name].to_numpy(dtype=np.float64, na_value=np.nan), named.astype(np.float64))
            frame[name] = pd.array(np.where(merged < 0, np.nan, merged), dtype="Float64").astype("Int64")
    banners = runs.find_banners(data)
    b_rank = None
    if deco.rank is not None and banners:
        b_rank = deco.rank[np.asarray(banners, dtype=np.int64) - 1]
    seg = runs.segment(frame, banners=banners, banner_ranks=b_rank)
    pool = runs.find_pool_lines(data)
    if pool:  # readers counted these lines as 'other'; they are run facts
        moved = min(len(pool), report.n_other)
        report.n_other -= moved
        report.n_meta += moved
    names = [run_id] if seg.n_runs == 1 else [f"{run_id}#{k + 1}" for k in range(seg.n_runs)]
    report.runs = names
    report.run_boundaries = list(seg.reasons)
    if seg.n_runs > 1:
        report.notes.append(f"{seg.n_runs} runs in this file (a restart or concatenated logs): " + "; ".join(seg.reasons))
        frame["run"] = pd.Categorical.from_codes(seg.index.astype(np.int32), categories=pd.Index(names, dtype="str"))
    # each run's span of lines, for the pool lines that belong to it
    lines = frame["line"].to_numpy(dtype=np.int64)
    last_line = [int(lines[seg.index == k].max()) if (seg.index == k).any() else 0 for k in range(seg.n_runs)]
    run_infos: dict[str, RunInfo] = {}
    pooled = np.full(len(frame), -1, dtype=np.int8)
    impl: list[str | None] = [None] * seg.n_runs
    slack = np.full(seg.n_runs, -1, dtype=np.int64)
    layout: list[str | None] = [None] * seg.n_runs
    for k, name in enumerate(names):
        lo = last_line[k - 1] if k else 0
        hi = last_line[k] if k + 1 < seg.n_runs else 1 << 62
        mine = [pl for pl in pool if lo < pl.line <= hi and pl.kind != "stage"]
        facts: dict[str, Any] = {}
        if mine:
            chosen = mine[-1]
            stages = [pl.facts for pl in pool if lo < pl.line <= hi and pl.kind == "stage"]
            # Installed, but every stage that reported kept stock (a schedule the gate refused): not pooled.
            is_pooled = chosen.kind == "installed" and not (stages and not any(s.get("pooled") for s in stages))
            facts = {"pooled": is_pooled, "pool_impl": chosen.impl, **{f"pool_{k2}": v for k2, v in chosen.facts.items()}}
            pooled[seg.index == k] = 1 if is_pooled else 0
            impl[k] = chosen.impl
            if "slack" in chosen.facts:
                slack[k] = chosen.facts["slack"]
            layout[k] = chosen.facts.get("layout")
            if stages:
                facts["pool_stages"] = stages
        run_infos[name] = info.merged(RunInfo.from_facts(facts, source=report.path)) if facts else info
    if pool:
        frame["pooled"] = pd.array(np.where(pooled < 0, None, pooled == 1).tolist(), dtype="boolean")
        frame["pool_impl"] = _per_run_categorical(impl, seg.index)
        frame["slack"] = pd.array(np.where(slack[seg.index] < 0, np.nan, slack[seg.index]), dtype="Float64").astype("Int64")
        frame["layout"] = _per_run_categorical(layout, seg.index)
    unranked = frame["rank"].isna().to_numpy()
    if unranked.sum() > 1:
        folded, n = runs.fold_copies(frame[unranked])
        if n:
            frame = concat_frames([frame[~unranked], folded]).sort_values("line", kind="stable", ignore_index=True)
            report.n_folded = n
            report.notes.append(f"{n} row(s) were identical copies of another row of the same run (several ranks printing one line) and were folded")
    return frame, run_infos


def _per_run_categorical(values: list[str | None], run_index: Any) -> Any:
    """A categorical column: ``values[k]`` for every row of run k (missing where None)."""
    import numpy as np
    import pandas as pd

    cats = sorted({v for v in values if v})
    codes = np.array([cats.index(v) if v else -1 for v in values], dtype=np.int32)
    return pd.Categorical.from_codes(codes[run_index], categories=pd.Index(cats, dtype="str"))


def _constant_where(mask: Any, value: str) -> Any:
    """A categorical column holding ``value`` where ``mask`` and missing elsewhere."""
    import numpy as np
    import pandas as pd

    codes = np.where(np.asarray(mask), 0, -1).astype(np.int8)
    return pd.Categorical.from_codes(codes, categories=pd.Index([value], dtype="str"))


def _expand(paths: Iterable[str | Path]) -> list[tuple[Path, bool]]:
    """Files to read: (path, named explicitly). Folders are walked recursively, sidecars left out."""
    out: list[tuple[Path, bool]] = []
    for raw in paths:
        p = Path(raw)
        if p.is_dir():
            found = sorted(
                f for f in p.rglob("*")
                if f.is_file() and not f.name.endswith(".meta.json") and not f.name.startswith(".")
                and (f.suffix in _LOG_SUFFIXES or (f.suffix == ".gz" and Path(f.stem).suffix in _LOG_SUFFIXES))
            )
            if not found:
                raise LogFormatError(str(p), 0, found="a folder with no log files (.log .txt .out .jsonl .json, or .gz of them)",
                                     required="log files", fix="point at the folder the run wrote its logs to")
            out.extend((f, False) for f in found)
        elif p.exists():
            out.append((p, True))
        else:
            raise LogFormatError(str(p), 0, found="no such file or folder", required="an existing path",
                                 fix="check the path (relative paths start from the current folder)")
    return out


def read_logs(
    paths: str | Path | Iterable[str | Path], *, format: str = "auto", strict: bool = False, engine: str = "auto",  # noqa: A002
    max_bytes: int = MAX_BYTES,
) -> LogTable:
    """Read files, folders (recursively) and .gz logs into one :class:`LogTable`.

    Files of one run (``training.jsonl`` and ``validation.jsonl`` in the same folder) share a
    ``run``; facts from a ``*.meta.json`` sidecar next to a log are attached to its run.
    ``engine`` as in :func:`read_log_file`.
    """
    import pandas as pd

    if isinstance(paths, (str, Path)):
        paths = [paths]
    tables: list[LogTable] = []
    unrecognised: list[str] = []
    for path, explicit in _expand(paths):
        table, problem = _read_one(path, format=format, run=None, strict=strict, engine=engine, max_bytes=max_bytes)
        if problem is not None:
            if explicit or strict:
                raise problem
            unrecognised.append(str(problem))
            continue
        assert table is not None
        tables.append(table)
    if not tables:
        shown = "; ".join(unrecognised[:3])
        raise LogFormatError(", ".join(str(p) for p in paths), 0, found=f"no readable log among the files ({shown})",
                             required="at least one log of a supported format", fix="point at the run's log files")
    steps = concat_frames([t.steps for t in tables])
    runs: dict[str, RunInfo] = {}
    for t in tables:
        for name, info in t.runs.items():
            runs[name] = runs[name].merged(info) if name in runs else info
    files = [f for t in tables for f in t.files]
    return LogTable(steps=steps, files=files, runs=runs, unrecognised=unrecognised)
