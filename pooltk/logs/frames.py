"""From found records to the step table: decoration columns, pandas dtypes, runs, folded copies,
pool columns."""

from __future__ import annotations

from typing import Any

from pooltk.logs import decoration, runs
from pooltk.logs._common import ParseResult
from pooltk.logs.files import rank_in_name
from pooltk.logs.records import Found
from pooltk.logs.schema import COLUMNS, concat_frames

__all__ = ["constant_where", "from_result", "split_runs", "to_pandas"]


def from_result(result: ParseResult) -> Found:
    """Rows a per-file reader (the benchmark summary) collected in ``result.rows``, as found
    records."""
    import polars as pl

    cols = result.rows.columns()
    frame = pl.DataFrame(cols, strict=False) if cols else pl.DataFrame()
    if "line" not in frame.columns:
        frame = frame.with_columns(pl.lit(0, dtype=pl.Int64).alias("line"))
    return Found(frame=frame.with_columns(pl.lit("", dtype=pl.String).alias("prefix")))


_FIXED = {
    "%Y-%m-%dT%H:%M:%S%.fZ": ("%Y-%m-%dT%H:%M:%S", ".", "Z", range(1, 10)),
    "%Y-%m-%d %H:%M:%S,%3f": ("%Y-%m-%d %H:%M:%S", ",", "", range(3, 4)),
}
"""Formats read as fixed-width seconds (the engine's fast path) plus the fraction's digits when
every value has the same width: Automodel JSONL's ``...T10:00:00.123Z``, torchtitan's ``,123``,
RFC 3339 collector times ``...T10:00:00.123456789Z``."""


def _as_written(parsed: Any, values: Any) -> Any:
    """Parsed datetimes whose year is not the four digits their text starts with become null (the
    formats that start with ``%Y``): polars reads ``%Y`` from any number of digits (a cut
    ``026-10-01`` is year 26), and at nanoseconds a year outside 1678-2261 wraps to a wrong date.
    Python's ``strptime`` reads four digits, and the oracle with it."""
    import polars as pl

    written = values.str.slice(0, 4).cast(pl.Int32, strict=False)
    return pl.select(pl.when(parsed.dt.year() == written).then(parsed)).to_series()


def _fixed_width(values: Any, fmt: str | None) -> Any:
    """``values`` as datetime64[ns] by the fixed-width path, or None where it does not apply."""
    import polars as pl

    if values.dtype != pl.String or fmt not in _FIXED:
        return None
    head, sep, tail, widths = _FIXED[fmt]
    whole = values.drop_nulls()
    if not whole.len():
        return None
    width = int(whole.str.len_bytes().max())
    digits = width - 20 - len(tail)
    if (
        digits not in widths
        or int(whole.str.len_bytes().min()) != width
        or not (whole.str.slice(19, 1) == sep).all()
    ):
        return None
    if tail and not whole.str.ends_with(tail).all():
        return None
    secs = values.str.slice(0, 19).str.to_datetime(head, strict=False, time_unit="ns")
    secs = _as_written(secs, values)
    frac = values.str.slice(20, digits)
    if not frac.drop_nulls().str.contains(r"^\d+$").all():
        return None
    fine = secs.is_not_null()
    if int(fine.sum()) != whole.len():
        return None
    ns = pl.Series(frac.cast(pl.Int64, strict=False) * 10 ** (9 - digits)).cast(pl.Duration("ns"))
    return (secs + ns).cast(pl.Datetime("ns")).to_numpy()


def _times(values: Any, fmt: str | None) -> Any:
    """Strings (or datetimes) as naive UTC/host-clock datetime64[ns] numpy values (NaT where
    unreadable)."""
    import polars as pl

    fixed = _fixed_width(values, fmt)
    if fixed is not None:
        return fixed
    if values.dtype == pl.String:
        parsed = values.str.to_datetime(fmt, strict=False, time_unit="ns") if fmt else None
        if parsed is not None and fmt.startswith("%Y"):
            parsed = _as_written(parsed, values)
        if parsed is None or parsed.null_count() > values.null_count():
            try:  # at microseconds, then datetime64[ns]'s years alone (no wrapped dates)
                guess = values.str.to_datetime(strict=False, time_unit="us", time_zone="UTC")
            except Exception:  # noqa: BLE001 - polars cannot infer a format from these strings
                guess = pl.Series([None] * values.len(), dtype=pl.Datetime("us", "UTC"))
            guess = guess.dt.replace_time_zone(None)
            guess = pl.select(pl.when(guess.dt.year().is_between(1678, 2261)).then(guess))
            guess = guess.to_series().cast(pl.Datetime("ns"))
            parsed = guess if parsed is None else pl.select(pl.coalesce(parsed, guess)).to_series()
        values = parsed
    if values.dtype == pl.Null:
        values = values.cast(pl.Datetime("ns"))
    if getattr(values.dtype, "time_zone", None):
        values = values.dt.convert_time_zone("UTC").dt.replace_time_zone(None)
    return values.cast(pl.Datetime("ns")).to_numpy()


def _column(values: Any, dtype: str) -> Any:
    import numpy as np
    import pandas as pd
    import polars as pl

    if dtype == "float64":
        return values.cast(pl.Float64, strict=False).fill_null(np.nan).to_numpy()
    if dtype in ("Int64", "int64"):
        v = values.cast(pl.Int64, strict=False)
        data = v.fill_null(0).to_numpy()
        if dtype == "int64":
            return data
        return pd.arrays.IntegerArray(data, v.is_null().to_numpy())
    if dtype == "category":
        v = values.cast(pl.String, strict=False)
        cats = v.drop_nulls().unique().sort().to_list()
        codes = (
            v.replace_strict(cats, list(range(len(cats))), default=-1, return_dtype=pl.Int32)
            .fill_null(-1)
            .to_numpy()
        )
        return pd.Categorical.from_codes(
            codes.astype(np.int32), categories=pd.Index(cats, dtype="str")
        )
    raise ValueError(dtype)


def _decorations(found: Any, src: Any) -> tuple[dict[str, Any], tuple[str, ...], int]:
    """(decoration columns, the kinds seen, rows with a prefix) of one file's found records: what
    their prefixes say, then what the envelope says where they say nothing."""
    import polars as pl

    n = found.height
    if not n:
        return {}, (), 0
    deco, kinds = decoration.columns(found["prefix"])
    if src.columns:
        at = (found["line"] - 1).clip(0, max(len(next(iter(src.columns.values()))) - 1, 0))
        for key, col in (("collector_time", "time"), ("host", "host"), ("pod", "pod")):
            if col in src.columns and any(v is not None for v in src.columns[col]):
                values = pl.Series(src.columns[col], dtype=pl.String).gather(at)
                deco[key] = deco[key].fill_null(values) if key in deco else values
        kinds = (src.envelope, *kinds)
    return deco, kinds, int((found["prefix"].str.len_bytes() > 0).sum())


def to_pandas(
    found: Any,
    result: ParseResult,
    src: Any,
    *,
    run: str,
    path: str,
    fmt: str,
    file_rank: int | None,
) -> tuple[Any, tuple[str, ...], int]:
    """(step table, decoration kinds seen, rows with a prefix) for one file's found records."""
    import numpy as np
    import pandas as pd
    import polars as pl

    from pooltk.logs.schema import _missing

    n = found.height
    deco, kinds, n_decorated = _decorations(found, src)
    cols = {c: found[c] for c in found.columns}
    for key, values in deco.items():  # readers fill only rank of these: a record's own wins
        cols[key] = cols[key].cast(pl.Int64).fill_null(values) if key in cols else values
    named = file_rank if file_rank is not None else rank_in_name(path)
    if named is not None and n and ("rank" not in cols or cols["rank"].null_count() == n):
        cols["rank"] = pl.Series([named] * n, dtype=pl.Int64)
    constants = {"run": run, "source_file": path, "format": fmt}
    data: dict[str, Any] = {}
    for spec in COLUMNS:
        if constants.get(spec.name) is not None:
            data[spec.name] = constant_where(np.ones(n, dtype=bool), constants[spec.name])
        elif spec.name not in cols:
            data[spec.name] = _missing(spec.dtype, n)
        elif spec.dtype == "datetime64[ns]":
            data[spec.name] = _times(
                cols[spec.name],
                result.timestamp_format if spec.name == "timestamp" else "%Y-%m-%dT%H:%M:%S%.fZ",
            )
        elif spec.dtype == "boolean":
            data[spec.name] = pd.array(cols[spec.name].to_list(), dtype="boolean")
        else:
            data[spec.name] = _column(cols[spec.name], spec.dtype)
    # copy=False: no consolidation copy (0.5 s per 1 M rows)
    frame = pd.DataFrame(data, index=pd.RangeIndex(n), copy=False)
    if result.mem_basis is not None:  # the format's basis, on each row with a memory figure
        frame["mem_basis"] = constant_where(frame["mem_gib"].notna(), result.mem_basis)
    return frame, tuple(dict.fromkeys(k for k in kinds if k)), n_decorated


def constant_where(mask: Any, value: str) -> Any:
    """A categorical column holding ``value`` where ``mask`` and missing elsewhere."""
    import numpy as np
    import pandas as pd

    codes = np.where(np.asarray(mask), 0, -1).astype(np.int8)
    return pd.Categorical.from_codes(codes, categories=pd.Index([value], dtype="str"))


def _per_run_categorical(values: list[str | None], run_index: Any) -> Any:
    import numpy as np
    import pandas as pd

    cats = sorted({v for v in values if v})
    codes = np.array([cats.index(v) if v else -1 for v in values], dtype=np.int32)
    return pd.Categorical.from_codes(codes[run_index], categories=pd.Index(cats, dtype="str"))


def _other_lines(lines: Any, record_lines: Any) -> Any:
    """0-based indices of the lines that hold no record (where banners and pool lines are looked
    for)."""
    import numpy as np
    import polars as pl

    mask = np.ones(lines.len(), dtype=bool)
    mask[np.asarray(record_lines, dtype=np.int64) - 1] = False
    return pl.Series(np.flatnonzero(mask), dtype=pl.UInt32)


def _banners(lines: Any, other: Any) -> tuple[list[int], Any]:
    """(1-based banner lines, the rank each one's prefix names or -1)."""
    import numpy as np
    import polars as pl

    hit = other.filter(lines.gather(other).str.contains_any(list(runs.BANNERS)))
    if hit.len() == 0:
        return [], None
    texts = lines.gather(hit).to_list()
    prefixes = []
    for t in texts:
        cut = min((t.find(b) for b in runs.BANNERS if b in t), default=0)
        prefixes.append(t[:cut])
    deco, _ = decoration.columns(pl.Series(prefixes, dtype=pl.String))
    ranks = deco["rank"].fill_null(-1).to_numpy() if "rank" in deco else np.full(len(texts), -1)
    return (hit + 1).to_list(), ranks


def split_runs(
    frame: Any, lines: Any, report: Any, info: Any, run_id: str, n_placeholder: int
) -> tuple[Any, dict[str, Any]]:
    """Runs split at restarts, rank copies folded, pool columns; see [Note: run boundaries] in
    pooltk.logs.runs."""
    import numpy as np
    import pandas as pd

    report.n_nonfinite = (
        int((~np.isfinite(frame["loss"].to_numpy(dtype=float))).sum()) - n_placeholder
    )
    other = _other_lines(lines, frame["line"].to_numpy(dtype=np.int64))
    banners, b_rank = _banners(lines, other)
    # one writer (Automodel's rank 0, or one torchtitan rank): no late prints, no copies
    one_writer = report.format.endswith("jsonl")
    seg = runs.segment(frame, banners=banners, banner_ranks=b_rank, one_writer=one_writer)
    report.notes.extend(seg.notes)
    names = [run_id] if seg.n_runs == 1 else [f"{run_id}#{k + 1}" for k in range(seg.n_runs)]
    report.runs = names
    report.run_boundaries = list(seg.reasons)
    if seg.n_runs > 1:
        report.notes.append(
            f"{seg.n_runs} runs in this file (a restart or concatenated logs): "
            + "; ".join(seg.reasons)
        )
        frame["run"] = pd.Categorical.from_codes(
            seg.index.astype(np.int32), categories=pd.Index(names, dtype="str")
        )
    run_infos = _pool_columns(frame, runs.find_pool_lines(lines, other), seg, names, info, report)
    several = frame["rank"].isna() | frame["rank"].isin(list(seg.shared))  # writers per stream
    folded, n = runs.fold_copies(frame[several], 0.0 if one_writer else runs.NODE_SKEW_MAX_S)
    if n:
        frame = concat_frames([frame[~several], folded]).sort_values(
            "line", kind="stable", ignore_index=True
        )
        report.n_folded = n
        report.notes.append(
            f"{n} row(s) were copies of another row of the same run "
            "(several ranks printing one line; "
            "timestamps may differ by the nodes' clock skew) and were folded"
        )
    return frame, run_infos


def _pool_columns(
    frame: Any, pool: list, seg: Any, names: list[str], info: Any, report: Any
) -> dict:
    """Each run's facts, with its pool lines' (the last install line in its span of lines sets
    ``pooled``, ``pool_impl``, ``slack``, ``layout``; a sidecar says where no line does); the pool
    columns filled in ``frame``. See [Note: pooled runs] in pooltk.logs.runs."""
    import numpy as np

    from pooltk.logs.runinfo import RunInfo

    if pool:  # readers counted these lines as 'other'; they are run facts
        moved = min(len(pool), report.n_other)
        report.n_other -= moved
        report.n_meta += moved
    lines_col = frame["line"].to_numpy(dtype=np.int64)
    last_line = [
        int(lines_col[seg.index == k].max()) if (seg.index == k).any() else 0
        for k in range(seg.n_runs)
    ]
    run_infos: dict[str, Any] = {}
    pooled = np.full(len(frame), -1, dtype=np.int8)
    impl: list[str | None] = [None] * seg.n_runs
    slack = np.full(seg.n_runs, -1, dtype=np.int64)
    layout: list[str | None] = [None] * seg.n_runs
    for k, name in enumerate(names):
        lo = last_line[k - 1] if k else 0
        hi = last_line[k] if k + 1 < seg.n_runs else 1 << 62
        facts, chosen = _run_pool_facts([pl for pl in pool if lo < pl.line <= hi])
        if chosen is not None:
            pooled[seg.index == k] = 1 if facts["pooled"] else 0
            impl[k] = chosen.impl
            slack[k] = chosen.facts.get("slack", -1)
            layout[k] = chosen.facts.get("layout")
        run_infos[name] = (
            info.merged(RunInfo.from_facts(facts, source=report.path)) if facts else info
        )
    sidecar_pooled = info.extra.get("pooled") if info is not None else None
    if not pool and isinstance(sidecar_pooled, bool):  # the run's sidecar says (pooltk cpu-runs)
        config = info.extra.get("pool_config")
        config = config if isinstance(config, dict) else {}
        pooled[:] = 1 if sidecar_pooled else 0
        impl = ["pooltk" if sidecar_pooled else None] * seg.n_runs
        if isinstance(config.get("slack"), int):
            slack[:] = config["slack"]
        given = info.extra.get("pool_layout")
        layout = [given if isinstance(given, str) else None] * seg.n_runs
        report.notes.append(f"pool facts from the sidecar: pooled={sidecar_pooled}")
    if pool or isinstance(sidecar_pooled, bool):
        _set_pool_columns(frame, seg.index, pooled, impl, slack[seg.index], layout)
    return run_infos


def _set_pool_columns(
    frame: Any, run_index: Any, pooled: Any, impl: list, slack: Any, layout: list
) -> None:
    """The pool columns of ``frame``: ``pooled`` (per row; -1 missing), ``slack`` (per row; -1
    missing), ``pool_impl`` and ``layout`` (per run)."""
    import numpy as np
    import pandas as pd

    frame["pooled"] = pd.array(np.where(pooled < 0, None, pooled == 1).tolist(), dtype="boolean")
    frame["pool_impl"] = _per_run_categorical(impl, run_index)
    frame["slack"] = pd.array(np.where(slack < 0, np.nan, slack), dtype="Float64").astype("Int64")
    frame["layout"] = _per_run_categorical(layout, run_index)


def _run_pool_facts(pool: list) -> tuple[dict[str, Any], Any]:
    """(the facts of one run's pool lines, the install line that sets its columns or None)."""
    facts: dict[str, Any] = {}
    installs = [pl for pl in pool if pl.kind in ("installed", "not_installed")]
    chosen = installs[-1] if installs else None
    if chosen is not None:
        stages = [pl.facts for pl in pool if pl.kind == "stage"]
        # Installed, but every stage that reported kept stock (a schedule the gate refused): not
        # pooled.
        is_pooled = chosen.kind == "installed" and not (
            stages and not any(s.get("pooled") for s in stages)
        )
        facts = {
            "pooled": is_pooled,
            "pool_impl": chosen.impl,
            **{f"pool_{k}": v for k, v in chosen.facts.items()},
        }
        if stages:
            facts["pool_stages"] = stages
    warned = [{"line": pl.line, **pl.facts} for pl in pool if pl.kind == "warning"]
    if warned:
        facts["pool_warnings"] = warned
    return facts, chosen
