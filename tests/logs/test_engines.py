"""The fast reader gives exactly what the per-line definitions it was built from give
([Note: the oracle] in tests/logs/oracle.py), and ``engine="python"`` (every line read by the
format's Python reader of one line) gives the same too.

These tests read the same bytes three ways, on generated logs with damaged lines, on hand-picked
awkward numbers and on the fixtures and real logs, and require identical tables and identical
per-file reports.
"""

from __future__ import annotations

import json
import tempfile
from contextlib import contextmanager
from pathlib import Path

import oracle  # noqa: E402  (tests/logs/oracle.py)
import pandas as pd
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from pooltk.logs import LogFormatError, read_log_file, records

SETTINGS = settings(
    max_examples=50,
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
FIX = Path(__file__).resolve().parent / "fixtures"


@contextmanager
def _per_line_definitions():
    """Records read by the oracle's per-line definitions instead of pooltk's reader."""
    saved = records.read_records
    records.read_records = oracle.read_records
    try:
        yield
    finally:
        records.read_records = saved


def _read(path: Path, engine: str = "auto", *, by_oracle: bool = False):
    """The table read from ``path``, or the error's text."""
    try:
        if not by_oracle:
            return read_log_file(path, engine=engine)
        with _per_line_definitions():
            return read_log_file(path)
    except LogFormatError as err:
        return str(err)


def _three_ways(path: Path):
    """(the oracle's reading, pooltk's); ``engine="python"`` is required to equal pooltk's."""
    by_oracle, python, auto = _read(path, by_oracle=True), _read(path, "python"), _read(path)
    _assert_same(python, auto)
    return by_oracle, auto


def _both(text: str, name: str):
    """Read ``text`` by the oracle and by pooltk; returns ((table or error), (table or error))."""
    with tempfile.TemporaryDirectory() as d:
        p = Path(d) / name
        p.write_text(text, encoding="utf-8", errors="surrogateescape")
        return _three_ways(p)


def _assert_same(slow, fast):
    if isinstance(slow, str) or isinstance(fast, str):
        assert slow == fast
        return
    pd.testing.assert_frame_equal(slow.steps, fast.steps)
    assert [f.to_dict() for f in slow.files] == [f.to_dict() for f in fast.files]


def _text_line(
    step,
    loss="9.5000",
    lr="6.39e-05",
    tps="8000.00(2000.00/gpu)",
    nlt="65536",
    epoch="0",
    stamp=None,
):
    stamp = stamp or f"2026-10-01 10:{step // 60 % 60:02d}:{step % 60:02d}"
    return (
        f"{stamp} | INFO | root | step {step} | epoch {epoch} | loss {loss} | "
        f"grad_norm 2.2188 | lr {lr} | "
        f"mem 40.25 GiB | tps {tps} | num_label_tokens {nlt}"
    )


def _json_line(n, **over):
    rec = {
        "step": n,
        "epoch": 0,
        "timestamp": "2026-10-01T10:00:00.000Z",
        "loss": 2.5,
        "grad_norm": 1.25,
        "lr": 1e-05,
        "mem": 22.5,
        "tps": 1000.0,
        "tps_per_gpu": 250.0,
        "mfu": None,
        "num_tokens_per_step": 2000,
        "num_label_tokens": 500,
    }
    text = json.dumps(rec)
    for key, raw in over.items():  # splice a raw token in place of the value
        old = json.dumps({key: rec[key]})[1:-1]
        text = text.replace(old, f'"{key}": {raw}')
    return text


@pytest.mark.parametrize(
    "field",
    [
        {"loss": "nan"},
        {"loss": "N/A"},
        {"loss": "1_000"},
        {"loss": "TRUE"},
        {"loss": "1.2.3"},
        {"loss": "-0"},
        {"loss": ".5"},
        {"loss": "5."},
        {"loss": "1e400"},
        {"loss": "0.1000000000000000055511151231257827"},
        {"lr": "6.39E-05"},
        {"lr": "6.39e+05"},
        {"nlt": "5.0"},
        {"nlt": "5e2"},
        {"nlt": "+5"},
        {"nlt": "05"},
        {"nlt": "9223372036854775808"},
        {"epoch": "-1"},
        {"tps": "8000.00(2000.00/gpu"},
        {"tps": "8000.00((2000.00/gpu)"},
        {"tps": "1,000.00(250.00/gpu)"},
        {"stamp": "2026-02-30 10:00:00"},
        {"stamp": "2026-10-01 24:00:00"},
    ],
)
def test_awkward_text_values_read_the_same_both_ways(field):
    lines = [_text_line(i) for i in range(1, 6)]
    lines[2] = _text_line(3, **field)
    slow, fast = _both("\n".join(lines) + "\n", "a.log")
    _assert_same(slow, fast)


@pytest.mark.parametrize(
    "field",
    [
        {"loss": "NaN"},
        {"loss": "Infinity"},
        {"loss": "-0"},
        {"loss": "-0.0"},
        {"loss": "05"},
        {"loss": "+1"},
        {"loss": "1."},
        {"loss": ".5"},
        {"loss": "1.e5"},
        {"loss": "1E5"},
        {"loss": "1e+05"},
        {"loss": "1e-05"},
        {"loss": "null"},
        {"loss": "true"},
        {"loss": '"2.5"'},
        {"loss": "1" * 400},
        {"grad_norm": "null"},
        {"mfu": "1.5"},
        {"mfu": "nul"},
        {"epoch": "1.0"},
        {"epoch": "1e0"},
        {"epoch": "-0"},
        {"epoch": "007"},
        {"num_label_tokens": "99999999999999999999"},
        {"step": "3.0"},
        {"timestamp": '"2026-10-01T10:00:00Z"'},
        {"timestamp": "null"},
        {"lr": "1.4000000000000001e-05"},
        {"tps": "12345678901234567890"},
    ],
)
def test_awkward_json_values_read_the_same_both_ways(field):
    lines = [_json_line(i) for i in range(5)]
    lines[2] = _json_line(2, **field)
    slow, fast = _both("\n".join(lines) + "\n", "x_training.jsonl")
    _assert_same(slow, fast)


def test_the_fixtures_read_the_same_both_ways():
    for path in sorted(FIX.rglob("*")):
        if path.suffix in (".log", ".jsonl", ".json"):
            _assert_same(*_three_ways(path))


def _python_reads(mod, lines: list[str], tmp_path: Path, name: str):
    """(the table, how many lines the format's Python reader of one line was given)."""
    calls = []
    saved = mod.records_in
    mod.records_in = lambda line: calls.append(line) or saved(line)
    try:
        path = tmp_path / name
        path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return read_log_file(path), len(calls)
    finally:
        mod.records_in = saved


def test_the_fast_path_really_reads_canonical_lines(tmp_path):
    """Guard against a fast path that silently declines everything (the equality tests would still
    pass): of 500 lines of a format's usual layout, Python reads only the sample that chose it."""
    from pooltk.logs import automodel_jsonl, automodel_text, torchtitan

    cases = [
        (automodel_text, [_text_line(i) for i in range(1, 501)], "a.log"),
        (automodel_jsonl, [_json_line(i) for i in range(500)], "a_training.jsonl"),
        (torchtitan, [_titan_line(s, mfu="N/A") for s in range(1, 501)], "titan.log"),
    ]
    for mod, lines, name in cases:
        table, calls = _python_reads(mod, lines, tmp_path, name)
        assert len(table.steps) == 500 and calls <= records._SAMPLE, (mod.FORMAT, calls)
    steps = _python_reads(torchtitan, cases[2][1], tmp_path, "titan.log")[0].steps
    assert steps["mfu_pct_logged"].isna().all() and steps["mem_gib"].iloc[0] == 169.10
    steps = _python_reads(automodel_jsonl, cases[1][1], tmp_path, "b_training.jsonl")[0].steps
    assert steps["mfu_pct_logged"].isna().all() and steps["loss"].iloc[0] == 2.5


finite = st.floats(min_value=-1e12, max_value=1e12, allow_nan=False, allow_infinity=False)
token = st.one_of(
    finite.map(repr),
    finite.map(lambda x: f"{x:.4f}"),
    finite.map(lambda x: f"{x:.2e}"),
    st.integers(-(10**20), 10**20).map(str),
    st.sampled_from(["nan", "inf", "-inf", "N/A", "", "1.", ".5", "05", "+3", "1e5"]),
    st.text(alphabet="0123456789.eE+-", min_size=1, max_size=12),
)


@SETTINGS
@given(tokens=st.lists(st.tuples(token, token, token), min_size=1, max_size=8), data=st.data())
def test_random_numbers_in_text_lines_read_the_same_both_ways(tokens, data):
    lines = [
        _text_line(i + 1, loss=a, lr=b, nlt=c if data.draw(st.booleans()) else "1")
        for i, (a, b, c) in enumerate(tokens)
    ]
    lines += [_text_line(len(lines) + 1)]
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(lines) - 1))
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    slow, fast = _both("\n".join(lines) + "\n", "r.log")
    _assert_same(slow, fast)


@SETTINGS
@given(tokens=st.lists(st.tuples(token, token, token), min_size=1, max_size=8), data=st.data())
def test_random_numbers_in_json_records_read_the_same_both_ways(tokens, data):
    lines = [
        _json_line(i, loss=a, mfu=b or "null", num_label_tokens=c or "1")
        for i, (a, b, c) in enumerate(tokens)
    ]
    lines += [_json_line(len(lines))]
    if data.draw(st.booleans()):
        i = data.draw(st.integers(0, len(lines) - 1))
        lines[i] = lines[i][: data.draw(st.integers(0, len(lines[i])))]
    slow, fast = _both("\n".join(lines) + "\n", "r_training.jsonl")
    _assert_same(slow, fast)


@pytest.mark.parametrize("where", ["crlf", "cr_in_level", "cr_in_value"])
def test_carriage_returns_read_the_same_both_ways(where):
    lines = [_text_line(i) for i in range(1, 6)]
    if where == "crlf":
        text = "\r\n".join(lines) + "\r\n"
    else:
        lines[2] = (
            lines[2].replace("INFO", "IN\rFO")
            if where == "cr_in_level"
            else lines[2].replace("loss 9.5000", "loss 9.5\r000")
        )
        text = "\n".join(lines) + "\n"
    slow, fast = _both(text, "cr.log")
    _assert_same(slow, fast)
    js = "\r\n".join(_json_line(i) for i in range(5)) + "\r\n"
    _assert_same(*_both(js, "cr_training.jsonl"))


def test_a_cut_short_layout_in_the_head_is_skipped_when_the_file_goes_on_in_full():
    """The first 1000 step lines lack num_label_tokens, the next 1500 have it: the short ones are
    truncated."""
    short = [_text_line(i).rsplit(" | ", 1)[0] for i in range(1, 1001)]
    full = [_text_line(i) for i in range(1001, 2501)]
    slow, fast = _both("\n".join(short + full) + "\n", "cut.log")
    _assert_same(slow, fast)
    assert fast.files[0].n_skipped == 1000 and fast.files[0].n_rows == 1500


# --------------------------------------------------------------------------- torchtitan


def _titan_line(
    step,
    loss="10.60813",
    gn="49.2500",
    mem="169.10GiB(94.81%)",
    tps="9,891",
    tflops="833.38",
    mfu="37.04%",
    name="root",
    stamp=None,
):
    stamp = stamp or f"2026-05-20 02:{step // 60 % 60:02d}:{step % 60:02d},212"
    return (
        f"[titan] {stamp} - {name} - INFO - step: {step:2}  loss: {loss}  "
        f"grad_norm: {gn}  memory: {mem}  "
        f"tps: {tps}  tflops: {tflops}  mfu: {mfu}"
    )


_TITAN_AWKWARD = [
    {"loss": "-1.0000"},
    {"loss": "nan"},
    {"loss": "1.e5"},
    {"loss": "+1.5"},
    {"loss": "05.50"},
    {"gn": "inf"},
    {"tps": "1,234,567"},
    {"tps": "12,34"},
    {"tps": "1234"},
    {"tps": "1,2,3"},
    {"tflops": "1,234.56"},
    {"tflops": "N/A"},
    {"mfu": "N/A"},
    {"mfu": "37%"},
    {"mem": "5.2GiB"},
    {"mem": "5.20GiB(5%)"},
    {"name": "torchtitan.trainer"},
    {"stamp": "2026-02-30 01:02:03,004"},
    {"stamp": "2026-05-20 02:22:58,21"},
    {"loss": "99999999999999999999.5"},
    {"mem": "1e5GiB"},
    {"mem": "1,000GiB(5%)"},
    {"mem": "5GiB(nan%)"},
    {"mfu": "37.04"},
    {"mfu": "N/A%"},
    {"tps": "N/A"},
    {"gn": "1_000"},
    {"gn": "NaN"},
    {"tflops": "1e3"},
]


@pytest.mark.parametrize(
    "over", _TITAN_AWKWARD, ids=lambda o: "-".join(f"{k}={v}" for k, v in o.items())
)
def test_torchtitan_awkward_values_read_the_same_both_ways(over):
    lines = [_titan_line(s) for s in range(1, 30)]
    lines[7] = _titan_line(8, **over)
    _assert_same(*_both("\n".join(lines) + "\n", "titan.log"))


@SETTINGS
@given(
    st.lists(
        st.tuples(
            st.integers(0, 10**6),
            st.floats(-2, 1e6, allow_nan=False).map(lambda x: f"{x:.5f}"),
            st.integers(0, 10**9).map(lambda v: f"{v:,}"),
            st.sampled_from(["", "cut", "garble", "val", "noise"]),
        ),
        min_size=1,
        max_size=40,
    )
)
def test_random_torchtitan_logs_read_the_same_both_ways(rows):
    out = ["[titan] 2026-05-20 02:22:30,411 - root - INFO - Starting job: test"]
    for i, (step, loss, tps, damage) in enumerate(rows):
        line = _titan_line(step, loss=loss, tps=tps)
        if damage == "cut":
            line = line[: len(line) // 2]
        elif damage == "garble":
            line = line.replace("  grad_norm", " grad_norm", 1)
        elif damage == "val":
            line = line.replace(" - step:", " - validate step:", 1)
        elif damage == "noise":
            out.append(f"[titan] 2026-05-20 02:22:30,411 - root - WARNING - step {i} had a hiccup")
        out.append(line)
    _assert_same(*_both("\n".join(out) + "\n", "titan.log"))


def test_the_base_logs_read_the_same_both_ways(base_logs):
    for p in base_logs:
        _assert_same(*_three_ways(p))


def test_the_torchtitan_fast_path_reads_every_canonical_line(tmp_path):
    from pooltk.logs import torchtitan

    lines = [_titan_line(s, tps=f"{s * 1001:,}", tflops=f"{s * 37.5:,.2f}") for s in range(1, 500)]
    table, calls = _python_reads(torchtitan, lines, tmp_path, "titan.log")
    steps = table.steps
    assert calls <= records._SAMPLE and len(steps) == 499
    assert steps["tok_per_s_logged"].head(3).to_list() == [1001.0, 2002.0, 3003.0]
    assert steps["tflops_per_gpu_logged"][99] == float(f"{100 * 37.5:,.2f}".replace(",", ""))


@SETTINGS
@given(tokens=st.lists(st.tuples(token, token, token, token), min_size=1, max_size=8))
def test_random_numbers_in_torchtitan_lines_read_the_same_both_ways(tokens):
    lines = [
        _titan_line(i + 1, loss=a, mem=f"{b}GiB({c}%)", mfu=f"{d}%" if i % 2 else d)
        for i, (a, b, c, d) in enumerate(tokens)
    ]
    lines += [_titan_line(len(lines) + 1)]
    _assert_same(*_both("\n".join(lines) + "\n", "titan.log"))


def test_a_torchtitan_mfu_cut_before_its_percent_sign_is_counted_truncated(tmp_path):
    lines = [_titan_line(s) for s in range(1, 5)]
    path = tmp_path / "titan.log"
    path.write_text("\n".join([*lines, lines[-1].removesuffix("%")]) + "\n", encoding="utf-8")
    table = read_log_file(path)
    assert len(table.steps) == 4 and table.files[0].n_truncated == 1


def test_the_reader_benchmarks_stages_name_functions_the_reader_has():
    """``bench_log_reader.py --stages`` times the reader's stages by name: a renamed stage would
    break the benchmark, not the suite, so the suite checks the names."""
    import importlib
    import importlib.util
    from pathlib import Path

    path = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_log_reader.py"
    spec = importlib.util.spec_from_file_location("bench_log_reader", path)
    bench = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(bench)
    missing = [
        f"{module}.{name}"
        for module, name, _ in bench.STAGES
        if not callable(getattr(importlib.import_module(module), name, None))
    ]
    assert not missing, missing
