"""Logs as launchers and collectors write them: every decoration reads to the same steps, ranks
kept.

Sources: the real logs under ../shared/reference/logs when present, else the format fixtures in
tests/logs/fixtures. Decorated copies are generated here (never committed).
"""

from __future__ import annotations

import gzip

import numpy as np
import pandas as pd
import pytest

from pooltk.logs import LogFormatError, read_log_file, read_logs
from pooltk.logs.decoration import columns

from _real_logs import FIX  # noqa: E402  (tests/logs/_real_logs.py)
from _real_logs import VALUES as _VALUES  # noqa: E402


def _decorate(raw: bytes, how: str, *, task: int = 3) -> bytes:
    lines = raw.split(b"\n")
    tail = lines.pop() if lines and lines[-1] == b"" else None
    out = []
    for i, ln in enumerate(lines):
        if how == "srun":
            out.append(b"%3d: " % task + ln)
        elif how == "kubectl":
            out.append(
                b"2026-09-14T10:%02d:%02d.%09dZ " % (i // 60 % 60, i % 60, i * 7919 % 10**9) + ln
            )
        elif how == "compose":
            out.append(b"trainer-%d  | " % task + ln)
        elif how == "torchrun":
            out.append(b"[default%d]:" % task + ln)
        elif how == "indent":
            out.append(b"    " + ln)
        elif how == "crlf":
            out.append(ln + b"\r")
        elif how == "ansi":
            out.append(b"\x1b[32m" + ln + b"\x1b[0m")
        elif how == "stacked":
            out.append(b"2026-09-14T10:00:00.5+00:00 %d: [rank%d]:" % (task, task) + ln)
    if tail is not None:
        out.append(tail)
    return b"\n".join(out)


DECORATIONS = ("srun", "kubectl", "compose", "torchrun", "indent", "crlf", "ansi", "stacked")


@pytest.mark.parametrize("how", DECORATIONS)
def test_every_decoration_reads_to_the_same_steps_as_the_undecorated_file(base_logs, tmp_path, how):
    for src in base_logs:
        plain = read_log_file(src).steps
        dst = tmp_path / f"{how}_{src.name}"
        dst.write_bytes(_decorate(src.read_bytes(), how))
        got = read_log_file(dst)
        deco = got.steps
        assert len(deco) == len(plain), (src.name, how)
        pd.testing.assert_frame_equal(
            deco[_VALUES].reset_index(drop=True),
            plain[_VALUES].reset_index(drop=True),
            check_categorical=False,
            obj=f"{src.name} {how}",
        )
        assert list(deco["line"]) == list(plain["line"])  # line numbers stay the file's
        assert got.n_skipped == read_log_file(src).n_skipped
        if how in ("srun", "compose"):
            assert set(deco["task"].dropna()) == {3}
        if how in (
            "torchrun",
            "stacked",
        ):  # the innermost rank prefix wins (a file's own [rank0]: stays rank 0)
            assert set(deco["rank"].dropna()) == (
                {3} if plain["rank"].isna().all() else set(plain["rank"].dropna())
            )


def test_one_file_from_many_ranks_becomes_one_table_with_a_rank_column(tmp_path):
    src = (FIX / "automodel_text_current.log").read_bytes()
    parts = [_decorate(src, "srun", task=t).split(b"\n") for t in range(8)]
    mixed = b"\n".join(
        ln for group in zip(*parts, strict=True) for ln in group
    )  # interleaved line by line
    path = tmp_path / "all_ranks.log"
    path.write_bytes(mixed)
    table = read_log_file(path)
    single = read_log_file(FIX / "automodel_text_current.log").steps
    s = table.steps
    assert sorted(set(s["task"])) == list(range(8))
    for t in range(8):
        mine = s[s["task"] == t]
        assert list(mine["step"]) == list(single["step"]) and list(mine["loss"]) == list(
            single["loss"]
        )
    assert table.files[0].runs == ["all_ranks"]


def test_decorations_before_a_record_become_columns_innermost_rank_winning():
    import polars as pl

    prefixes = pl.Series(
        [
            "",
            "  3: [rank3]:",
            "2026-01-02T03:04:05.123456789Z trainer-2  | [default1]:",
            "12: [rank3]:[rank0]:",
        ]
    )
    got, kinds = columns(prefixes)
    assert got["rank"].to_list() == [None, 3, 1, 0] and got["task"].to_list() == [None, 3, 2, 12]
    assert got["collector_time"].to_list()[2] == "2026-01-02T03:04:05.123456789Z"
    assert {"srun", "torchrun", "rfc3339", "compose"} <= set(kinds)


def test_binary_input_is_a_clear_error_not_a_crash(tmp_path):
    path = tmp_path / "model.log"
    path.write_bytes(bytes(np.random.default_rng(0).integers(0, 256, 200_000, dtype=np.uint8)))
    with pytest.raises(LogFormatError) as err:
        read_log_file(path)
    assert "found" in str(err.value) and "Fix:" in str(err.value)


def test_a_truncated_gzip_is_a_clear_error(tmp_path):
    packed = gzip.compress((FIX / "automodel_text_current.log").read_bytes())
    path = tmp_path / "cut.log.gz"
    path.write_bytes(packed[: len(packed) // 2])
    with pytest.raises(LogFormatError, match="gzip"):
        read_log_file(path)


def test_a_ten_megabyte_line_is_counted_not_fatal(tmp_path):
    src = (FIX / "automodel_text_current.log").read_bytes()
    path = tmp_path / "long_line.log"
    path.write_bytes(b"x" * (10 << 20) + b"\n" + src)
    table = read_log_file(path)
    plain = read_log_file(FIX / "automodel_text_current.log")
    assert len(table.steps) == len(plain.steps)
    f = table.files[0]
    assert f.n_lines == plain.files[0].n_lines + 1
    assert f.n_row_lines + f.n_skipped_lines + f.n_meta + f.n_other == f.n_lines


def test_every_line_is_accounted_for_in_decorated_real_logs(base_logs, tmp_path):
    for src in base_logs:
        dst = tmp_path / src.name
        dst.write_bytes(_decorate(src.read_bytes(), "stacked"))
        f = read_logs([dst]).files[0]
        assert f.n_row_lines + f.n_skipped_lines + f.n_meta + f.n_other == f.n_lines, src.name


def test_a_two_gigabyte_file_is_refused_before_reading_with_a_fix(tmp_path):
    big = tmp_path / "huge.log"
    with big.open("wb") as f:  # sparse: 2 GB of size, nothing written
        f.truncate(2 * 10**9)
    with pytest.raises(
        LogFormatError, match=r"a file of 1\.86 GiB; required at most 1\.00 GiB"
    ) as err:
        read_log_file(big)
    assert "split -C" in err.value.fix
    (tmp_path / "ok.log").write_bytes((FIX / "automodel_text_current.log").read_bytes())
    table = read_logs(tmp_path)  # inside a folder: listed as not read, the rest is read
    assert (
        len(table.unrecognised) == 1
        and "huge.log" in table.unrecognised[0]
        and len(table.steps) > 0
    )


def test_a_gzip_that_inflates_past_the_limit_is_refused_while_decompressing(tmp_path):
    path = tmp_path / "bomb.log.gz"
    path.write_bytes(gzip.compress(b"x" * (3 << 20)))
    with pytest.raises(LogFormatError, match="decompressed content"):
        read_log_file(path, max_bytes=1 << 20)


def test_concatenated_gzip_members_read_as_one_file(tmp_path):
    raw = (FIX / "automodel_text_current.log").read_bytes()
    path = tmp_path / "two.log.gz"
    path.write_bytes(gzip.compress(raw) + gzip.compress(raw))
    assert len(read_log_file(path).files[0].runs) == 2


def test_a_file_of_few_distinct_prefixes_reads_each_prefix_as_alone():
    """Over 10,000 prefixes of a few kinds are read once per distinct prefix; the columns must be
    those of reading the prefixes in pieces small enough to be read one by one (torchrun, srun,
    mpirun, pdsh, kubectl)."""
    import polars as pl

    kinds = [
        "[rank3]:",
        "  7: [default2]:",
        "[1,5]<stdout>:",
        "node-12: [rank1]:",
        "[pod/trainer-0/main] ",
        "",
        None,
        "2026-05-20T02:22:58.123456789Z  11: ",
        "noise [x] ",
    ]
    prefixes = pl.Series([kinds[(i * 7) % len(kinds)] for i in range(12_001)], dtype=pl.String)
    whole, seen = columns(prefixes)
    pieces = [columns(prefixes.slice(k, 5_000)) for k in range(0, prefixes.len(), 5_000)]
    assert set(seen) == {k for _, ks in pieces for k in ks} and {
        "torchrun",
        "srun",
        "mpirun",
        "pdsh",
        "kubectl_prefix",
    } <= set(seen)
    for col, values in whole.items():
        assert values.to_list() == pl.concat([p[col] for p, _ in pieces]).to_list(), col
    assert (
        whole["rank"][0] == 3
        and whole["task"][1] == 11
        and whole["host"][3] == "node-12"
        and whole["rank"][3] == 1
    )
