"""Read log files, folders and compressed logs into one tidy table: :func:`read_logs`.

Each file is loaded (:mod:`pooltk.logs.source`: compression, encoding, envelope), its format is
detected from its records (:func:`detect_format`), every record is found wherever it stands
(:mod:`pooltk.logs.records`), and the rows are tagged with ``run``, ``source_file``, ``format``
and the decoration columns. Files become runs as a user means them (:mod:`pooltk.logs.files`).

Errors: a file named explicitly that is empty, unreadable, or has no record of any supported
format raises :class:`LogFormatError` naming it. Inside a folder such files are listed in
:attr:`LogTable.unrecognised` instead (folders hold READMEs and configs too), but a folder
that yields no row at all raises.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

from pooltk._validate import InputError, check_int
from pooltk.logs import (
    automodel_bench,
    automodel_jsonl,
    automodel_text,
    frames,
    records,
    torchtitan,
    torchtitan_jsonl,
)
from pooltk.logs._common import ParseResult, SkippedLine
from pooltk.logs.errors import LogFormatError
from pooltk.logs.files import expand, left_out, run_name, unique_runs
from pooltk.logs.runinfo import RunInfo, read_sidecar, sidecar_paths
from pooltk.logs.schema import concat_frames
from pooltk.logs.source import MAX_BYTES, Source, load

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

_MODULES = {
    m.FORMAT: m
    for m in (automodel_text, automodel_jsonl, automodel_bench, torchtitan, torchtitan_jsonl)
}
FORMATS: tuple[str, ...] = (
    automodel_text.FORMAT,
    automodel_jsonl.FORMAT,
    automodel_bench.FORMAT,
    automodel_bench.SUMMARY_FORMAT,
    torchtitan.FORMAT,
    torchtitan_jsonl.FORMAT,
)
"""Log families pooltk reads."""

_DETECT_ORDER = (torchtitan_jsonl, automodel_jsonl, automodel_bench, automodel_text, torchtitan)


@dataclass(kw_only=True, slots=True)
class FileReport:
    """How one file was read: its format and what became of each of its lines."""

    path: str
    run: str
    """Run the rows were tagged with."""
    format: str
    """Detected (or given) format."""
    n_lines: int
    """Lines in the file (after unwrapping an envelope)."""
    n_rows: int
    """Rows it produced (train and val)."""
    n_row_lines: int = 0
    """Lines holding at least one row (fewer than n_rows where a line holds several records)."""
    n_skipped_lines: int = 0
    """Lines holding a skipped record and no row. n_row_lines + n_skipped_lines + n_meta + n_other
    == n_lines."""
    n_skipped: int
    """Records that could not be read (see skipped_by_reason)."""
    skipped_by_reason: dict[str, int]
    """Skipped records counted by reason; a reason starting 'truncated' is a record cut short."""
    skipped_examples: list[SkippedLine]
    """The first skipped lines, with line numbers."""
    n_meta: int
    """Lines run facts were taken from."""
    n_other: int
    """Lines that are neither records, skipped nor meta (warnings, dumps, tracebacks)."""
    n_nonfinite: int
    """Rows with a NaN or infinite loss (kept: a diverged run logs them)."""
    notes: list[str]
    """Things to know about the figures (bases, conventions)."""
    meta: dict[str, Any]
    """Run facts found in the file."""
    n_folded: int = 0
    """Rows folded into a copy of the same run (one line printed by several ranks, timestamps within
    the nodes' skew; counted in n_rows; see [Note: run boundaries])."""
    runs: list[str] = field(default_factory=list)
    """The runs the file's rows belong to (more than one when it holds a restart; see
    pooltk.logs.runs)."""
    run_boundaries: list[str] = field(default_factory=list)
    """Where and why each run after the first began."""
    decorations: tuple[str, ...] = ()
    """Prefixes and envelopes found before the records (srun, kubectl, torchrun, docker, ...)."""
    n_decorated: int = 0
    """Rows whose record had text before it on its line."""
    compression: str | None = None
    """'gzip', 'bz2', 'xz', 'zstd' or None."""
    encoding: str = "utf-8"
    """How the bytes were decoded ('utf-8', 'utf-8-sig', 'utf-16-le', 'utf-16-be')."""

    @property
    def n_truncated(self) -> int:
        """Records cut short (a killed job's last line, a JSON record without its end)."""
        return sum(v for k, v in self.skipped_by_reason.items() if k.startswith("truncated"))

    def to_dict(self) -> dict[str, Any]:
        """A flat dict (skipped examples as 'line: reason' strings)."""
        return {
            "path": self.path,
            "run": self.run,
            "format": self.format,
            "n_lines": self.n_lines,
            "n_rows": self.n_rows,
            "n_row_lines": self.n_row_lines,
            "n_skipped_lines": self.n_skipped_lines,
            "n_skipped": self.n_skipped,
            "n_truncated": self.n_truncated,
            "skipped_by_reason": dict(self.skipped_by_reason),
            "skipped_examples": [f"{s.line}: {s.reason}" for s in self.skipped_examples],
            "n_meta": self.n_meta,
            "n_other": self.n_other,
            "n_nonfinite": self.n_nonfinite,
            "n_folded": self.n_folded,
            "runs": list(self.runs),
            "run_boundaries": list(self.run_boundaries),
            "decorations": list(self.decorations),
            "compression": self.compression,
            "encoding": self.encoding,
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
    run_sources: dict[str, str] = field(default_factory=dict)
    """Why each run is the set of files it is (per-rank files of one folder, rotated files, ...)."""

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
        """Skipped records over all files."""
        return sum(f.n_skipped for f in self.files)


def _earliest(path: str, lines: Any, src: Source | None) -> str:
    """The format whose signature is on the earliest line (a tie: :data:`_DETECT_ORDER`), looked
    for in the first thousand lines, else the first 200,000, else anywhere (the earliest hit of any
    format is in the first window that holds one)."""
    for part in (lines.head(1000), lines.head(200_000), lines):
        best: tuple[int, str] | None = None
        for mod in _DETECT_ORDER:
            found = part.str.contains(mod.DETECT).arg_true()
            if found.len() and (best is None or found[0] < best[0]):
                best = (int(found[0]), mod.FORMAT)
        if best is not None:
            return best[1]
    raise _no_format(path, lines, src, lines.len())


def _no_format(path: str, lines: Any, src: Source | None, n: int) -> LogFormatError:
    first = next((t for t in lines.head(1000).to_list() if t.strip()), "")
    env = f"; envelope: {src.envelope}" if src is not None and src.envelope else ""
    if first.lstrip().startswith(("{", "[")) and (src is None or not src.envelope):
        found = (
            f"JSON records of no known kind in {n} line(s) (first: {first[:80]!r}): "
            "not an Automodel or torchtitan "
            "metrics record, nor a known log envelope (docker json-file, CloudWatch, GCP)"
        )
        fix = (
            "if it wraps log lines in another envelope, extract the message field (jq -r .FIELD) "
            "and read that; or pass --format"
        )
    else:
        found = f"no record of a supported format in {n} line(s){env} (first line: {first[:80]!r})"
        fix = (
            "check this is a training log; pass --format (format= in Python) if detection is "
            "wrong, or report the format"
        )
    return LogFormatError(path, 0, found=found, required=f"one of {', '.join(FORMATS)}", fix=fix)


def detect_format(lines: Sequence[str], *, path: str = "<lines>", text: str | None = None) -> str:
    """The format of a log from its lines; raises :class:`LogFormatError` when none fits.

    A JSON summary of the benchmark recipe is recognised as a whole; otherwise the format whose
    record signature appears on the earliest line wins (see each module's ``DETECT``).
    """
    import polars as pl

    if text is not None and automodel_bench.looks_like_summary(text):
        return automodel_bench.SUMMARY_FORMAT
    series = pl.Series("l", list(lines), dtype=pl.String)
    if not any(t.strip() for t in series.head(100_000).to_list()):
        raise _empty(path)
    return _earliest(path, series, None)


def read_log_file(
    path: str | Path,
    *,
    format: str = "auto",  # noqa: A002 - the public keyword, as pandas names it
    run: str | None = None,
    strict: bool = False,
    max_bytes: int = MAX_BYTES,
    engine: str = "auto",
) -> LogTable:
    """Read one log file (plain, compressed, or in an envelope) into a :class:`LogTable`.

    ``strict=True`` turns the first skipped record into a :class:`LogFormatError`; by default
    skipped records are counted in the file's report. ``engine="python"`` reads every record
    with the format's Python reader of one line (``records_in``, the one the fast path leaves
    damaged lines to); ``"auto"`` lets polars read the file's usual layout (the same values:
    tests/logs/test_engines.py compares them).
    """
    (given,) = _log_paths([path], what="path", example="read_log_file('train.log')")
    p = Path(given)
    table, problem = _read_one(
        p, format=format, run=run, strict=strict, max_bytes=max_bytes, engine=engine
    )
    if problem is not None:
        raise problem
    assert table is not None
    return table


def _read_one(
    p: Path,
    *,
    format: str,  # noqa: A002
    run: str | None,
    strict: bool,
    max_bytes: int = MAX_BYTES,
    engine: str = "auto",
    rank: int | None = None,
) -> tuple[LogTable | None, LogFormatError | None]:
    if format != "auto" and format not in FORMATS:
        raise ValueError(
            f"format: found {format!r}; required 'auto' or one of {', '.join(FORMATS)}. "
            "Fix: pass one of those (pooltk logs --list-formats)."
        )
    if engine not in ("auto", "python"):
        raise ValueError(f"engine: found {engine!r}; required 'auto' or 'python'.")
    try:
        src = load(p, check_int("max_bytes", max_bytes, low=1, error=ValueError))
        lines = records.to_lines(src.data)
        fmt = format if format != "auto" else _detect(p, src, lines)
        found, result = _records(p, fmt, src, lines, engine)
        _check_rows(p, fmt, found, result, strict)
    except LogFormatError as err:
        return None, err
    run_id = run or run_name(p)
    frame, kinds, n_decorated = frames.to_pandas(
        found.frame, result, src, run=run_id, path=str(p), fmt=fmt, file_rank=rank
    )
    report = _report(p, run_id, fmt, frame, result, src, kinds, n_decorated)
    info = _sidecar_facts(p, run_id, frame, report, result)
    frame, run_infos = frames.split_runs(
        frame, lines, report, info, run_id, result.n_placeholder_loss
    )
    return LogTable(steps=frame, files=[report], runs=run_infos), None


def _empty(path: str) -> LogFormatError:
    return LogFormatError(
        path,
        0,
        found="an empty file (no non-blank line)",
        required="log lines",
        fix="point at the run's log (it may not have been flushed yet)",
    )


def _detect(p: Path, src: Source, lines: Any) -> str:
    """The file's format: the benchmark's JSON summary, else the earliest record signature."""
    if src.data[:4096].lstrip()[:1] == b"{" and automodel_bench.looks_like_summary(src.text):
        return automodel_bench.SUMMARY_FORMAT
    if src.data.isspace() or not src.data:
        raise _empty(str(p))
    return _earliest(str(p), lines, src)


def _records(p: Path, fmt: str, src: Source, lines: Any, engine: str) -> tuple[Any, ParseResult]:
    """(the file's records, what was made of each line) as its format reads them."""
    result = ParseResult()
    if fmt == automodel_bench.SUMMARY_FORMAT:
        try:
            automodel_bench.parse_summary(src.text, result)
        except ValueError as err:
            raise LogFormatError(
                str(p), 0, found=str(err), required=f"a {fmt} file", fix="check the file"
            ) from None
        return frames.from_result(result), result
    mod = _MODULES[fmt]
    result.timestamp_format, result.mem_basis = mod.TS_FORMAT, mod.MEM_BASIS
    if hasattr(mod, "parse"):  # a format read line by line in Python
        texts = lines.to_list()
        result.n_lines = len(texts)
        mod.parse(enumerate(texts, start=1), result)
        return frames.from_result(result), result
    cut_last = bool(src.data) and not src.data.endswith(b"\n")
    found = records.read_records(mod, lines, result, cut_last=cut_last, fast=engine == "auto")
    mod.finish(found, result, stem=p.name.split(".")[0])
    return found, result


def _check_rows(p: Path, fmt: str, found: Any, result: ParseResult, strict: bool) -> None:
    """Raise where ``strict`` meets a skipped record, or where no record was read."""
    if strict and result.skipped_examples:
        first = result.skipped_examples[0]
        raise LogFormatError(
            str(p),
            first.line,
            found=f"a step line that does not parse ({first.reason})",
            required=f"every record in {fmt} form",
            fix="drop --strict (strict=False) to skip and count such records",
            text=first.text,
        )
    if found.frame.height or fmt == automodel_bench.SUMMARY_FORMAT:
        return
    if result.skipped_examples:
        ex = result.skipped_examples[0]
        why = (
            "the only records are cut short (the job was killed mid-write)"
            if ex.reason.startswith("truncated")
            else f"every {fmt} record is damaged"
        )
        raise LogFormatError(
            str(p),
            ex.line,
            found=f"no complete {fmt} record in {result.n_lines} line(s): {why} "
            f"(skipped {result.n_skipped}: {ex.reason} at line {ex.line})",
            required="at least one complete step record",
            fix="read the file again once the run has logged a step, or check the copy is whole",
        )
    raise LogFormatError(
        str(p),
        0,
        found=f"no complete step record in {result.n_lines} line(s) of {fmt}",
        required="at least one step record",
        fix="check the run got past its first step, "
        "or pass --format (format=) if this is another family",
    )


def _report(
    p: Path,
    run_id: str,
    fmt: str,
    frame: Any,
    result: ParseResult,
    src: Source,
    kinds: tuple[str, ...],
    n_decorated: int,
) -> FileReport:
    row_lines = None if result.n_row_lines is None else set(frame["line"].tolist())
    return FileReport(
        path=str(p),
        run=run_id,
        format=fmt,
        n_lines=result.n_lines,
        n_rows=len(frame),
        n_skipped=result.n_skipped,
        n_row_lines=len(frame) if row_lines is None else result.n_row_lines,
        n_skipped_lines=(
            result.n_skipped if row_lines is None else len(result.skip_lines - row_lines)
        ),
        skipped_by_reason=dict(result.skipped),
        skipped_examples=list(result.skipped_examples),
        n_meta=result.n_meta,
        n_other=result.n_other,
        n_nonfinite=0,
        notes=list(result.notes),
        meta=dict(result.meta),
        decorations=kinds,
        n_decorated=n_decorated,
        compression=src.compression,
        encoding=src.encoding,
    )


def _sidecar_facts(
    p: Path, run_id: str, frame: Any, report: FileReport, result: ParseResult
) -> RunInfo:
    """The run's facts from its log, merged with its ``*.meta.json`` sidecar where there is one."""
    info = RunInfo.from_facts(result.meta, source=str(p), lines=result.meta_lines)
    for sidecar in sidecar_paths(p, run_id.rsplit("/", 1)[-1]):
        if sidecar.is_file():
            facts = read_sidecar(sidecar)
            report.notes.append(f"run facts from sidecar {sidecar.name}")
            basis = facts.extra.get("mem_basis")
            if isinstance(basis, str) and basis:  # the sidecar knows what its 'mem' measures
                frame["mem_basis"] = frames.constant_where(frame["mem_gib"].notna(), basis)
                report.notes.append(f"mem_gib basis from the sidecar: {basis}")
            return info.merged(facts)
    return info


def _join_validation(tables: list[LogTable]) -> None:
    """[Note: validation joins its launch] A file of val rows only (Automodel's
    ``validation.jsonl``) whose run ``X`` a sibling file of its folder splits (``X#1``, ``X#2``: a
    relaunch) has each row put in the latest of those runs whose first train step is not later than
    the row (the same launch); without timestamps its own split (its val step going back) stands,
    named in order."""
    import pandas as pd

    starts: dict[tuple[Path, str], pd.Timestamp] = {}
    for t in tables:
        train = t.steps[t.steps["kind"] == "train"]
        if len(train) and train["timestamp"].notna().all():
            folder = Path(t.files[0].path).parent
            for name, first in (
                train.groupby(train["run"].astype(str), observed=True)["timestamp"].min().items()
            ):
                starts[(folder, name)] = min(first, starts.get((folder, name), first))
    for t in tables:
        f, steps = t.files[0], t.steps
        if not len(steps) or (steps["kind"] != "val").any() or steps["timestamp"].isna().any():
            continue
        folder = Path(f.path).parent
        mine = sorted(
            (
                (at, name)
                for (fo, name), at in starts.items()
                if fo == folder
                and name.startswith(f.run + "#")
                and name[len(f.run) + 1 :].isdigit()
            )
        )
        if len(mine) < 2:
            continue
        at = pd.Series([a for a, _ in mine]).to_numpy(dtype="datetime64[ns]")
        k = (
            at.searchsorted(steps["timestamp"].to_numpy(dtype="datetime64[ns]"), side="right") - 1
        ).clip(0)
        names = [mine[i][1] for i in k]
        info = next(iter(t.runs.values()), RunInfo())
        steps["run"] = pd.Categorical(names)
        f.runs = list(dict.fromkeys(names))
        t.runs = {name: info for name in f.runs}
        f.notes.append(
            "val rows joined by time to the runs of "
            + ", ".join(n for _, n in mine)
            + " (the same launch)"
        )


def read_logs(
    paths: str | Path | Iterable[str | Path],
    *,
    format: str = "auto",  # noqa: A002 - the public keyword, as pandas names it
    strict: bool = False,
    max_bytes: int = MAX_BYTES,
    engine: str = "auto",
) -> LogTable:
    """Read files, folders (recursively) and compressed logs into one :class:`LogTable`.

    Runs are what a user means (:func:`pooltk.logs.files.unique_runs`): a folder's per-rank files
    of one job are one run with the rank from each file's name; the same name in two job folders
    is two runs; rotated files (``train.log.1``) join their run in order. ``engine`` as in
    :func:`read_log_file`.
    """
    example = "read_logs('train.log') or read_logs(['logs/', 'rank1.log'])"
    paths = [paths] if isinstance(paths, (str, os.PathLike)) else paths
    paths = _log_paths(paths, what="paths", example=example)
    found = expand(paths)
    skip = left_out([f for f, explicit in found if not explicit])
    found = [(f, explicit) for f, explicit in found if f not in skip]
    plan = unique_runs([f for f, _ in found])
    tables: list[LogTable] = []
    unrecognised: list[str] = [f"{f}: {why}" for f, why in skip.items()]
    for path, explicit in found:
        run, rank, _ = plan[path]
        table, problem = _read_one(
            path,
            format=format,
            run=run,
            strict=strict,
            max_bytes=max_bytes,
            engine=engine,
            rank=rank,
        )
        if problem is not None:
            if explicit or strict:
                raise problem
            unrecognised.append(str(problem))
            continue
        assert table is not None
        tables.append(table)
    if not tables:
        raise _none_readable(paths, unrecognised)
    _join_validation(tables)
    return _merged(tables, unrecognised, plan)


def _log_paths(paths: Any, *, what: str, example: str) -> list[str | os.PathLike]:
    """The paths a reader is given, each a ``str`` or ``os.PathLike``, at least one."""
    try:
        paths = list(paths)
    except TypeError:
        paths = [paths]  # neither a path nor a list of them: named below
    wrong = [p for p in paths if not isinstance(p, (str, os.PathLike))]
    if wrong or not paths:
        found = f"{wrong[0]!r} ({type(wrong[0]).__name__})" if wrong else "no path"
        raise InputError(
            what,
            found=found,
            required="log files or folders, each a str or pathlib.Path",
            fix=f"e.g. {example}.",
        )
    return paths


def _none_readable(paths: list[str | Path], unrecognised: list[str]) -> LogFormatError:
    """The error for paths among which no file was a log (the first reasons named)."""
    shown = "; ".join(unrecognised[:3])
    return LogFormatError(
        ", ".join(str(p) for p in paths),
        0,
        found=f"no readable log among the files ({shown})",
        required="at least one log of a supported format",
        fix="point at the run's log files",
    )


def _merged(
    tables: list[LogTable], unrecognised: list[str], plan: dict[Path, tuple[str, int | None, str]]
) -> LogTable:
    """The files' tables as one (a run's facts merged over its files)."""
    runs: dict[str, RunInfo] = {}
    for t in tables:
        for name, info in t.runs.items():
            runs[name] = runs[name].merged(info) if name in runs else info
    return LogTable(
        steps=concat_frames([t.steps for t in tables]),
        files=[f for t in tables for f in t.files],
        runs=runs,
        unrecognised=unrecognised,
        run_sources={run: reason for run, _, reason in plan.values() if reason},
    )
