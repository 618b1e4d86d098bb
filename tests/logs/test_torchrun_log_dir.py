"""Issue 27: torchrun's ``--log-dir`` tree is read as the run it is: the rank from each file's
folder, each attempt (an elastic restart) its own launch, torchrun's error files and filtered copies
left out with the reason.

The trees are written here in the layout torch's ``DefaultLogsSpecs.reify`` documents
(torch/distributed/elastic/multiprocessing/api.py):
``<log_dir>/<rdzv_id>_<random>/attempt_<restart>/<local_rank>/{stdout,stderr}.log``, ``error.json``
where a worker raised, and ``attempt_<restart>/filtered_{stdout,stderr}.log`` holding the tee'd
ranks' lines that match the duplicate filters, each behind ``[<role><local_rank>]:``. Each rank's
file holds a real log from ../shared/reference/logs (the format fixtures when it is absent); every
rank must read to its steps.
"""

from __future__ import annotations

import functools
import gzip
import json
import re
from pathlib import Path

import pandas as pd
import pytest

from pooltk.cli import main
from pooltk.logs import read_logs
from pooltk.logs import read_log_file

from _real_logs import VALUES  # noqa: E402  (tests/logs/_real_logs.py)

_RANKS = re.compile(r"^(?:\[[A-Za-z_]*\d+\]:)+")


@functools.cache
def _read(src: Path) -> pd.DataFrame:
    return read_log_file(src).steps


def _bare(src: Path) -> str:
    """The log as the worker wrote it to its own stream: no console prefix (torchrun adds it only
    when tee-ing)."""
    return "".join(
        _RANKS.sub("", ln) for ln in src.read_text(encoding="utf-8").splitlines(keepends=True)
    )


def _tree(
    root: Path,
    src: Path,
    *,
    ranks: int = 2,
    attempts: tuple[int, ...] = (0,),
    stream: str = "stderr.log",
    error_on: int | None = None,
    filtered: bool = False,
    gz: bool = False,
) -> Path:
    run = (
        root / "logs" / "job42_k3j9x1qz"
    )  # tempfile.mkdtemp(prefix=f"{rdzv_run_id}_"): the id and 8 random characters
    for attempt in attempts:
        folder = run / f"attempt_{attempt}"
        for r in range(ranks):
            d = folder / str(r)
            d.mkdir(parents=True)
            other = "stdout.log" if stream == "stderr.log" else "stderr.log"
            (d / other).write_text("")  # torchrun makes both files; one stays empty
            data = _bare(src).encode()
            (d / (stream + (".gz" if gz else ""))).write_bytes(gzip.compress(data) if gz else data)
            if error_on == r:
                (d / "error.json").write_text(
                    json.dumps(
                        {
                            "message": {
                                "message": "RuntimeError: CUDA error: an illegal memory access",
                                "extraInfo": {"py_callstack": "...", "timestamp": "1747700000"},
                            }
                        }
                    )
                )
        if filtered:
            body = "".join(
                f"[default{r}]:{ln}"
                for r in range(ranks)
                for ln in _bare(src).splitlines(keepends=True)
                if "step" in ln
            )
            (folder / f"filtered_{stream}").write_text(body)
    return root / "logs"


def _per_rank(table, what: str, src: Path, ranks: int) -> None:
    plain = _read(src)
    s = table.steps
    assert sorted(set(s["rank"].astype(int))) == list(range(ranks)), what
    for r in range(ranks):
        mine = s[s["rank"] == r]
        assert len(mine) == len(plain), (what, r)
        pd.testing.assert_frame_equal(
            mine[VALUES].reset_index(drop=True),
            plain[VALUES].reset_index(drop=True),
            check_categorical=False,
            obj=f"{what} rank {r}",
        )


@pytest.mark.parametrize("stream", ["stderr.log", "stdout.log"])
def test_each_ranks_stream_in_a_torchrun_log_dir_tree_reads_to_its_steps_with_the_rank_from_its_folder(  # noqa: E501
    base_logs, tmp_path, stream
):
    for src in base_logs:
        root = tmp_path / src.stem / stream
        table = read_logs(_tree(root, src, ranks=3, stream=stream))
        what = f"{src.name} in {stream}"
        assert set(table.steps["run"].astype(str)) == {"job42_k3j9x1qz"}, what
        _per_rank(table, what, src, 3)
        assert "rank from its folder" in table.run_sources["job42_k3j9x1qz"], what
        assert all("empty" in u for u in table.unrecognised), (
            what
        )  # each rank's other, empty stream


def test_a_torchrun_tree_with_two_attempts_is_two_launches_each_with_every_rank(
    base_logs, tmp_path
):
    for src in base_logs:
        table = read_logs(_tree(tmp_path / src.stem, src, ranks=2, attempts=(0, 1)))
        names = sorted(set(table.steps["run"].astype(str)))
        assert names == ["job42_k3j9x1qz#1", "job42_k3j9x1qz#2"], src.name
        for name in names:
            mine = table.steps[table.steps["run"] == name]
            assert sorted(set(mine["source_file"].map(lambda p: Path(p).parts[-3]))) == [
                f"attempt_{int(name[-1]) - 1}"
            ]
            _per_rank(type(table)(steps=mine, files=[], runs={}), f"{src.name} {name}", src, 2)
        assert "an elastic restart" in table.run_sources["job42_k3j9x1qz#2"]


def test_torchruns_error_file_and_filtered_copy_are_left_out_with_the_reason_and_rows_not_doubled(
    base_logs, tmp_path
):
    for src in base_logs:
        table = read_logs(_tree(tmp_path / src.stem, src, ranks=2, error_on=1, filtered=True))
        _per_rank(table, f"{src.name} with error.json and filtered_stderr.log", src, 2)
        left = "\n".join(table.unrecognised)
        assert "error.json: torchrun's error file of local rank 1" in left, left
        assert "filtered_stderr.log: torchrun's filtered copy" in left, left


def test_a_filtered_copy_alone_is_read_with_the_ranks_its_prefixes_name(base_logs, tmp_path):
    for src in base_logs:
        logs = _tree(tmp_path / src.stem, src, ranks=2, filtered=True)
        for rank_dir in sorted(logs.glob("*/attempt_0/[0-9]")):
            for f in rank_dir.iterdir():
                f.unlink()
            rank_dir.rmdir()
        table = read_logs(logs)
        _per_rank(table, f"{src.name} filtered only", src, 2)


def test_a_gzipped_torchrun_tree_keeps_the_rank_from_the_folder(base_logs, tmp_path):
    for src in base_logs:
        _per_rank(
            read_logs(_tree(tmp_path / src.stem, src, ranks=2, gz=True)),
            f"{src.name} gzipped",
            src,
            2,
        )


def test_a_rank_the_log_itself_names_wins_over_the_folders_local_rank(base_logs, tmp_path):
    src = next(p for p in base_logs if "titan" in p.name)
    logs = _tree(tmp_path, src, ranks=2)
    for r in range(
        2
    ):  # a trainer printing its global rank (node 1 of 2, 8 ranks a node): [rank8]:, [rank9]:
        f = logs / "job42_k3j9x1qz" / "attempt_0" / str(r) / "stderr.log"
        f.write_text(
            "".join(f"[rank{8 + r}]:{ln}" for ln in f.read_text().splitlines(keepends=True))
        )
    assert sorted(set(read_logs(logs).steps["rank"].astype(int))) == [8, 9]


def test_two_nodes_trees_of_one_job_are_two_runs_each_with_its_local_ranks(base_logs, tmp_path):
    src = base_logs[0]
    for node, suffix in ((0, "k3j9x1qz"), (1, "p0w7c2ma")):
        tree = _tree(tmp_path / f"node{node}", src, ranks=2)
        (tree / "job42_k3j9x1qz").rename(tree / f"job42_{suffix}")
    table = read_logs([tmp_path / "node0", tmp_path / "node1"])
    runs = sorted(set(table.steps["run"].astype(str)))
    assert runs == ["job42_k3j9x1qz", "job42_p0w7c2ma"]
    for name in runs:
        assert sorted(set(table.steps[table.steps["run"] == name]["rank"].astype(int))) == [0, 1]


def test_the_cli_lists_what_it_left_out_of_a_torchrun_tree(base_logs, tmp_path, capsys):
    src = base_logs[0]
    assert main(["logs", str(_tree(tmp_path, src, ranks=2, error_on=0, filtered=True))]) == 0
    out = capsys.readouterr().out
    assert (
        "not read:" in out
        and "error.json: torchrun's error file of local rank 0" in out
        and "filtered copy" in out
    )
