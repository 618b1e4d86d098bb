"""What stands before a record on its line: known launchers' and collectors' fields as columns.

[Note: line decoration]
A reader finds each record by its own signature wherever it stands in a line
(:mod:`pooltk.logs.records`); the text before it is its *prefix*. Launchers and collectors stack
their own prefixes there, and the ones below are read into columns (``rank``, ``task``, ``host``,
``pod``, ``collector_time``); anything else in a prefix is ignored, never an error. Written from
each tool's documented output:

- torchrun ``--tee`` / ``--role NAME``: ``[rank3]:``, ``[default3]:``, ``[NAME3]:`` (``rank``; when
  stacked, the one nearest the record wins, so a file's own ``[rank0]:`` stays rank 0);
- ``mpirun --tag-output``: ``[1,3]<stdout>:``; SageMaker's MPI launcher
  ``[1,mpirank:3,algo-2]<stdout>:`` (``rank``, ``host``);
- SkyPilot: ``(worker1, rank=1, pid=2367, ip=10.0.0.2)``; Ray:
  ``(RayTrainWorker pid=1234, ip=10.0.0.2)`` (``rank`` where given, ``host`` = the ip);
- Slurm ``srun --label``: ``  3: `` (``task``); docker compose ``trainer-3  | `` (``task`` =
  replica);
- ``kubectl logs --prefix``: ``[pod/NAME/CONTAINER] `` (``pod``); stern: ``POD CONTAINER ``
  (``pod``);
- ``kubectl logs --timestamps`` / CRI files / CloudWatch text exports: an RFC 3339 time
  (``collector_time``);
- journald ``-o short-iso`` (``2026-05-20T02:22:58+0000 host ident[pid]: ``) and ``-o short`` /
  RFC 3164 syslog (``<34>May 20 02:22:58 host ident[pid]: ``): ``host`` (and the time when it has a
  year; the ``[pid]`` glued to the ident is no torchrun rank);
- RFC 5424 syslog: ``<165>1 TIME HOST APP PROCID MSGID [SD] `` (``collector_time``, ``host``);
- pdsh: ``host: `` (``host``).

Envelopes (docker json-file, CloudWatch and GCP JSON) give the same columns from their fields
(:mod:`pooltk.logs.source`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["PATTERNS", "columns"]

_TIME = r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:[.,]\d{1,9})?(?:Z|[+-]\d\d:?\d\d)?"
_IDENT = r"[^\s:\[\]]+(?:\[\d+\])?: "

PATTERNS: tuple[tuple[str, str, str, tuple[str | None, ...]], ...] = (
    # (name, literal hint, Rust/Python regex, the column each group fills)
    ("torchrun", "]:", r"\w?\[[A-Za-z_]*\d{1,7}\]:", ("rank",)),  # the last one: see _LAST
    (
        "mpirun",
        "]<std",
        r"\[\d+,(?:mpirank:)?(\d+)(?:,([^\]\s]+))?\]<std(?:out|err|diag)>:",
        ("rank", "host"),
    ),
    (
        "skypilot",
        ", rank=",
        r"\([^()]*?, rank=(\d+)(?:, pid=\d+)?(?:, ip=([^,()\s]+))?\)",
        ("rank", "host"),
    ),
    ("ray", " pid=", r"\((?:\w+ )?pid=\d+(?:, ip=([^,()\s]+))?\)", ("host",)),
    ("srun", ": ", r"(?:^|\s)(\d{1,7}): ", ("task",)),
    ("compose", "| ", r"(?:^|\s)[A-Za-z0-9][A-Za-z0-9_.-]*?[-_](\d{1,5}) *\| ", ("task",)),
    ("kubectl_prefix", "[pod/", r"\[pod/([^/\]\s]+)/[^\]\s]+\] ", ("pod",)),
    (
        "rfc5424",
        "<",
        r"^<\d{1,3}>1 (\S+) (\S+) \S+ \S+ \S+ (?:-|\[.*\]) ?",
        ("collector_time", "host"),
    ),
    ("journald_iso", "T", r"^(" + _TIME + r") (\S+) " + _IDENT, ("collector_time", "host")),
    (
        "syslog",
        ":",
        r"^(?:<\d{1,3}>)?[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d (\S+) " + _IDENT,
        ("host",),
    ),
    ("rfc3339", "T", r"^(" + _TIME + r") ", ("collector_time",)),
    ("pdsh", ": ", r"^([A-Za-z][\w.-]*): ", ("host",)),
    ("stern", "-", r"^([a-z0-9]+(?:-[a-z0-9]+)+) [a-z0-9]+(?:-[a-z0-9]+)* ", ("pod",)),
)
"""Known prefixes; for each column the first pattern (in this order) that fills it wins."""

_LAST = frozenset({"torchrun"})
"""Patterns whose last match in a prefix counts (the innermost ``[rankN]:``), its digits the value:
all matches, then the last (a backtracking ``.*`` before the pattern cost about 1 s per 1 M
prefixes). A match glued to a word (journald's and syslog's ``python3[4242]: ``: a pid) names no
rank."""


def columns(prefixes: Any) -> tuple[dict[str, Any], tuple[str, ...]]:
    """Decoration columns of a polars string Series of prefixes: ({column: Series}, names of the
    kinds seen).

    ``rank`` and ``task`` are Int64, the others strings; a column no prefix fills is left out.
    """
    import polars as pl

    # one launcher's few prefixes: read each once
    if prefixes.len() > 10_000 and prefixes.head(10_000).n_unique() <= 256:
        distinct = prefixes.unique()
        if distinct.len() <= 4096:
            cols, kinds = columns(distinct)
            codes = prefixes.replace_strict(
                distinct, pl.int_range(distinct.len(), eager=True, dtype=pl.UInt32)
            )
            return {k: v.gather(codes) for k, v in cols.items()}, kinds
    nonempty = prefixes.filter(prefixes.str.len_bytes() > 0)
    hinted = [p for p in PATTERNS if nonempty.str.contains(p[1], literal=True).any()]
    if nonempty.len() == 0 or not hinted:
        return {}, ()
    got = pl.LazyFrame({"p": prefixes}).select(_extracted(hinted)).collect()  # in parallel
    out: dict[str, Any] = {}
    kinds: list[str] = []
    for name, _, _, cols in hinted:  # the first pattern (in PATTERNS' order) to fill a column wins
        filled = [
            (c, got[f"{name}:{c}"])
            for c in cols
            if c and got[f"{name}:{c}"].null_count() < got.height
        ]
        for col, values in filled:
            out[col] = out[col].fill_null(values) if col in out else values
        if filled:
            kinds.append(name)
    return out, tuple(kinds)


def _extracted(patterns: Any) -> list[Any]:
    """polars expressions on the prefixes (column ``p``): each pattern's columns, named
    ``<pattern>:<column>``; ``rank`` and ``task`` Int64."""
    import polars as pl

    exprs = []
    for name, _, pattern, cols in patterns:
        if name in _LAST:
            last = pl.col("p").str.extract_all(pattern).list.last()
            values = [last.str.extract(r"^\[[A-Za-z_]*(\d+)\]:$", 1)]
        elif len(cols) == 1:
            values = [pl.col("p").str.extract(pattern, 1)]
        else:
            groups = pl.col("p").str.extract_groups(pattern)
            values = [groups.struct.field(str(g)) for g in range(1, len(cols) + 1)]
        for col, value in zip(cols, values):
            if col is not None:
                typed = value.cast(pl.Int64, strict=False) if col in ("rank", "task") else value
                exprs.append(typed.alias(f"{name}:{col}"))
    return exprs
