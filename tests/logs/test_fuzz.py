"""Property-based fuzzing of the log readers (hypothesis).

Logs are generated from the format strings, then damaged the ways real logs are: lines cut
short, colour codes, rank prefixes and interleaved ranks, NaN/inf values, empty files, binary
garbage, very long lines. The properties:

- the only exception a reader raises is :class:`LogFormatError`, and it names the file;
- a table is never silently empty: no error means at least one row;
- every line is accounted for: rows + skipped + meta + other = lines in the file;
- every undamaged step line comes back with its exact values.
"""

from __future__ import annotations

import json
import math
import tempfile
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pooltk._validate import InputError
from pooltk.logs import LogFormatError, read_log_file, read_logs
from tools.jsonl_writer import write_training_jsonl

SETTINGS = settings(
    max_examples=60,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)

ANSI = ["\x1b[31m", "\x1b[32m", "\x1b[39m", "\x1b[0m", "\x1b[38;2;54;234;195m"]

finite = st.floats(min_value=1e-3, max_value=1e6, allow_nan=False, allow_infinity=False)
any_loss = st.one_of(finite, st.sampled_from([math.nan, math.inf, -math.inf]))


@st.composite
def step_records(draw, min_size=1, max_size=12):
    n = draw(st.integers(min_size, max_size))
    start = draw(st.integers(0, 1000))
    return [
        {
            "step": start + i,
            "loss": draw(any_loss),
            "grad_norm": draw(finite),
            "lr": draw(st.floats(1e-7, 1e-2)),
            "mem": draw(st.floats(0.01, 190.0)),
            "tps": draw(finite),
            "per": draw(finite),
            "nlt": draw(st.integers(1, 10**7)),
        }
        for i in range(n)
    ]


def automodel_line(r, *, colour=False):
    level = "\x1b[32mINFO\x1b[0m" if colour else "INFO"
    return (
        f"2026-10-01 10:00:{r['step'] % 60:02d} | {level} | root | step {r['step']} | epoch 0 | "
        f"loss {r['loss']:.4f} | grad_norm {r['grad_norm']:.4f} | lr {r['lr']:.2e} | "
        f"mem {r['mem']:.2f} GiB | tps {r['tps']:.2f}({r['per']:.2f}/gpu) | "
        f"num_label_tokens {r['nlt']}"
    )


def torchtitan_line(r, *, rank=0, colour=False):
    c = ANSI if colour else [""] * 5
    loss = "-1.00000" if r.get("placeholder") else f"{r['loss']:8.5f}"
    return (
        f"[rank{rank}]:[titan] 2026-10-02 08:00:{r['step'] % 60:02d},{r['step'] % 1000:03d} - "
        "root - INFO - "
        f"{c[0]}step: {r['step']:2}  {c[1]}loss: {loss}  grad_norm: {r['grad_norm']:7.4f}  "
        f"{c[4]}memory: {r['mem']:5.2f}GiB({r['mem'] / 1.87:.2f}%)  tps: {round(r['tps']):,}  "
        f"tflops: {r['per']:,.2f}  mfu: 1.00%{c[2]}"
    )


def jsonl_line(r):
    return json.dumps(
        {
            "step": r["step"],
            "epoch": 0,
            "timestamp": "2026-10-01T10:00:00.000Z",
            "loss": r["loss"],
            "grad_norm": r["grad_norm"],
            "lr": r["lr"],
            "mem": r["mem"],
            "tps": r["tps"],
            "tps_per_gpu": r["per"],
            "mfu": None,
            "num_tokens_per_step": 100,
            "num_label_tokens": r["nlt"],
        }
    )


RENDER = {"automodel": automodel_line, "torchtitan": torchtitan_line, "jsonl": jsonl_line}
SUFFIX = {"automodel": ".log", "torchtitan": ".log", "jsonl": ".jsonl"}


def _read(text: str | bytes, suffix: str):
    """Read ``text`` from a temporary file: (table or None, error or None, path)."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / f"fuzz{suffix}"
        if isinstance(text, bytes):
            p.write_bytes(text)
        else:
            p.write_text(text, encoding="utf-8", errors="surrogateescape")
        try:
            return read_log_file(p), None, str(p)
        except LogFormatError as err:
            return None, err, str(p)


def _check_contract(table, err, path):
    if err is not None:
        assert path in str(err) and err.line >= 0
        assert "required" in str(err) and "Fix:" in str(err)
        return
    assert len(table.steps) >= 1, "a table without error must have rows"
    for rep in table.files:
        assert rep.n_row_lines + rep.n_skipped_lines + rep.n_meta + rep.n_other == rep.n_lines, (
            rep.to_dict()
        )


def _same(a: float, b: float) -> bool:
    return (math.isnan(a) and math.isnan(b)) or a == b


@SETTINGS
@given(kind=st.sampled_from(sorted(RENDER)), records=step_records(), data=st.data())
def test_damaged_logs_give_a_clear_error_or_counted_skips_never_a_crash(kind, records, data):
    lines = [RENDER[kind](r) for r in records]
    damaged: set[int] = set()
    for _ in range(data.draw(st.integers(0, 4))):
        i = data.draw(st.integers(0, len(lines) - 1))
        how = data.draw(
            st.sampled_from(["cut", "garble", "splice", "binary", "long", "blank", "ansi"])
        )
        line = lines[i]
        if how == "cut":
            lines[i] = line[: data.draw(st.integers(0, max(0, len(line) - 1)))]
        elif how == "garble":
            pos = data.draw(st.integers(0, len(line)))
            lines[i] = (
                line[:pos]
                + data.draw(st.text(min_size=1, max_size=20)).replace("\n", " ")
                + line[pos:]
            )
        elif how == "splice":
            other = lines[data.draw(st.integers(0, len(lines) - 1))]
            lines[i] = (
                line[: data.draw(st.integers(0, len(line)))]
                + other[data.draw(st.integers(0, len(other))) :]
            )
        elif how == "binary":
            lines.insert(
                i,
                data.draw(st.binary(min_size=1, max_size=200)).decode("latin-1").replace("\n", " "),
            )
        elif how == "long":
            lines.insert(i, "x" * data.draw(st.integers(10_000, 200_000)))
        elif how == "blank":
            lines.insert(i, "")
        elif how == "ansi":
            lines[i] = data.draw(st.sampled_from(ANSI)) + line
        damaged.add(i)
    table, err, path = _read("\n".join(lines) + "\n", SUFFIX[kind])
    _check_contract(table, err, path)


@SETTINGS
@given(records=step_records(), colour=st.booleans(), data=st.data())
def test_automodel_lines_round_trip_their_printed_values(records, colour, data):
    lines = [automodel_line(r, colour=colour) for r in records]
    table, err, _ = _read("\n".join(lines) + "\n", ".log")
    assert err is None
    s = table.steps
    assert list(s["step"]) == [r["step"] for r in records]
    for (_, row), r in zip(s.iterrows(), records, strict=True):
        assert _same(row["loss"], float(f"{r['loss']:.4f}"))
        assert row["mem_gib"] == float(f"{r['mem']:.2f}") and row["lr"] == float(f"{r['lr']:.2e}")
        assert (
            row["tok_per_s_per_gpu_logged"] == float(f"{r['per']:.2f}")
            and row["num_label_tokens"] == r["nlt"]
        )


@SETTINGS
@given(
    records=step_records(max_size=8), nranks=st.integers(1, 4), colour=st.booleans(), data=st.data()
)
def test_torchtitan_interleaved_ranks_keep_each_ranks_rows(records, nranks, colour, data):
    """All ranks logging to one stream, in any interleaving: one row per (rank, step), values
    intact."""
    streams = []
    for rank in range(nranks):
        rows = [{**r, "placeholder": rank < nranks - 1} for r in records]
        streams.append([torchtitan_line(r, rank=rank, colour=colour) for r in rows])
    merged: list[str] = []
    cursors = [0] * nranks
    while any(c < len(records) for c in cursors):
        live = [k for k in range(nranks) if cursors[k] < len(records)]
        k = data.draw(st.sampled_from(live))
        merged.append(streams[k][cursors[k]])
        cursors[k] += 1
    table, err, path = _read("\n".join(merged) + "\n", ".log")
    _check_contract(table, err, path)
    s = table.steps
    assert len(s) == nranks * len(records)
    last = s[s["rank"] == nranks - 1]
    assert list(last["step"]) == [r["step"] for r in records]
    for got, r in zip(last["loss"], records, strict=True):
        assert _same(got, float(f"{r['loss']:8.5f}"))
    if nranks > 1:
        assert s[s["rank"] == 0]["loss"].isna().all()


@SETTINGS
@given(payload=st.binary(max_size=4000))
def test_binary_garbage_is_a_clear_error(payload):
    table, err, path = _read(payload, ".log")
    _check_contract(table, err, path)


def test_empty_and_blank_files_are_errors_naming_the_file():
    for text in ("", "\n\n\n", "   \n"):
        table, err, path = _read(text, ".log")
        assert table is None and "empty file" in str(err) and path in str(err)


@pytest.mark.parametrize(
    "call,needle",
    [
        (lambda: read_log_file(None), "path: found None (NoneType)"),
        (lambda: read_log_file(3), "path: found 3 (int)"),
        (lambda: read_logs([]), "paths: found no path"),
        (lambda: read_logs(None), "paths: found None (NoneType)"),
        (lambda: read_logs(["a.log", b"b.log"]), "paths: found b'b.log' (bytes)"),
    ],
)
def test_what_is_not_a_path_is_named_before_any_file_is_read(call, needle):
    with pytest.raises(InputError) as refused:
        call()
    assert needle in str(refused.value) and "Fix: e.g. read_log" in str(refused.value)


@SETTINGS
@given(records=step_records(max_size=10))
def test_jsonl_writer_and_reader_round_trip_including_nonfinite_loss(records):
    rows = [
        {
            "step": r["step"],
            "epoch": 0,
            "timestamp": "2026-10-01T10:00:00.000Z",
            "loss": r["loss"],
            "grad_norm": r["grad_norm"],
            "lr": r["lr"],
            "mem": r["mem"],
            "tps": r["tps"],
            "tps_per_gpu": r["per"],
            "mfu": None,
            "num_tokens_per_step": r["nlt"],
            "num_label_tokens": r["nlt"],
        }
        for r in records
    ]
    with tempfile.TemporaryDirectory() as d:
        path = write_training_jsonl(Path(d) / "x_training.jsonl", rows)
        s = read_log_file(path).steps
    assert list(s["step"]) == [r["step"] for r in rows]
    for (_, got), r in zip(s.iterrows(), rows, strict=True):
        assert (
            _same(got["loss"], r["loss"])
            and got["grad_norm"] == r["grad_norm"]
            and got["mem_gib"] == r["mem"]
        )
        assert got["tok_per_s_logged"] == r["tps"] and got["step_time_s"] == pytest.approx(
            r["num_tokens_per_step"] / r["tps"]
        )
