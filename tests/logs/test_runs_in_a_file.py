"""Runs, not files: restarts come back as separate runs with every step; copies fold only within a
run.

Also the pool a run used: Automodel's and pooltk's install lines become the pooled columns.
"""

from __future__ import annotations

import pytest

from pooltk.logs import read_log_file, read_logs

from _real_logs import FIX, run_of  # noqa: E402  (tests/logs/_real_logs.py)


def test_a_log_concatenated_with_itself_is_two_runs_with_all_steps(base_logs, tmp_path):
    for src in base_logs:
        plain = read_log_file(src)
        n = len(plain.steps[plain.steps["kind"] == "train"])
        if n < 2:
            continue
        raw = src.read_bytes()
        path = tmp_path / f"twice_{src.name}"
        path.write_bytes(raw + (b"" if raw.endswith(b"\n") else b"\n") + raw)
        table = read_log_file(path)
        s = table.steps
        run = run_of(path)
        assert table.files[0].runs == [f"{run}#1", f"{run}#2"], src.name
        assert len(s) == 2 * len(plain.steps), (
            src.name
        )  # nothing dropped, nothing deduplicated across runs
        for name in table.files[0].runs:
            mine = s[s["run"] == name]
            assert list(mine["step"]) == list(plain.steps["step"]) and list(
                mine["loss"].fillna(-9)
            ) == list(plain.steps["loss"].fillna(-9))
        assert table.files[0].n_folded == 0


def test_a_restart_that_resumes_later_is_split_at_its_start_up_banner(tmp_path):
    head = "2026-09-14 10:00:00,000 - root - INFO - torchtitan version: 0.3.0\n"
    line = (
        "2026-09-14 10:00:{s:02d},000 - torchtitan.trainer - INFO - step: {s:2}  loss: {l:7.4f}  "
        "memory: 10.00GiB(5.00%)  tps: 1,000  tflops: 1.00  mfu: 1.00%\n"
    )
    first = head + "".join(line.format(s=s, l=10 - s / 10) for s in range(1, 8))
    second = head.replace("10:00:00", "10:01:00") + "".join(
        line.format(s=s, l=9 - s / 10).replace("10:00:", "10:01:") for s in range(8, 15)
    )
    path = tmp_path / "restart.log"
    path.write_text(first + second)
    table = read_log_file(path)
    s = table.steps
    assert table.files[0].runs == ["restart#1", "restart#2"]
    assert list(s.loc[s["run"] == "restart#1", "step"]) == list(range(1, 8))
    assert list(s.loc[s["run"] == "restart#2", "step"]) == list(range(8, 15))
    assert "banner" in table.files[0].run_boundaries[0]


def test_identical_copies_from_ranks_without_a_prefix_fold_within_a_run_only(tmp_path):
    line = (
        "2026-09-14 10:00:{s:02d},000 - root - INFO - step: {s:2}  loss: 5.0000  "
        "memory: 10.00GiB(5.00%)  tps: 1,000  mfu: 1.00%\n"
    )
    run = "".join(line.format(s=s) * 4 for s in range(1, 6))  # 4 ranks print each step identically
    path = tmp_path / "copies.log"
    path.write_text(run + run.replace("10:00:", "10:02:"))
    table = read_log_file(path)
    s = table.steps
    assert table.files[0].runs == ["copies#1", "copies#2"]
    assert len(s) == 10 and table.files[0].n_folded == 30
    assert list(s["step"]) == [1, 2, 3, 4, 5] * 2


def test_rows_that_differ_are_never_folded(tmp_path):
    line = (
        "2026-09-14 10:00:{s:02d},000 - root - INFO - step: {s:2}  loss: {l}  "
        "memory: 10.00GiB(5.00%)  tps: 1,000  mfu: 1.00%\n"
    )
    path = tmp_path / "pp.log"
    path.write_text(
        "".join(line.format(s=s, l="-1.0000") + line.format(s=s, l="4.5000") for s in range(1, 4))
    )
    s = read_log_file(path).steps
    assert len(s) == 6 and s["loss"].notna().sum() == 3


def test_one_rank_per_file_joins_into_one_run(tmp_path):
    src = (FIX / "torchtitan_wps_2024.log").read_text()
    for r in range(2):
        (tmp_path / f"job_rank{r}.log").write_text(
            "".join(f"[rank{r}]:" + ln for ln in src.splitlines(keepends=True))
        )
    table = read_logs(tmp_path)
    assert set(table.steps["run"]) == {"job"} and set(table.steps["rank"]) == {0, 1}
    for r in range(2):
        (tmp_path / f"job_rank{r}.log").rename(tmp_path / f"plain_rank{r}.log")
        (tmp_path / f"plain_rank{r}.log").write_text(src)
    table = read_logs(tmp_path)
    assert set(table.steps["run"]) == {"plain"} and set(table.steps["rank"]) == {0, 1}


AUTOMODEL_POOL = (
    "2026-09-14 10:00:00 | INFO | nemo_automodel.components.distributed.pipelining.recv_buffer_pool"
    " | recv_buffer_pool: installed (slack=2, layout=per-direction-setup)\n"
)
POOLTK_POOL = (
    "2026-09-14 10:00:00 | INFO | pooltk | "
    "pooltk: installed (policy=tight, slack=1, grad_slack=1, schedule=Schedule1F1B, "
    "layout=setup-recv-info)\n"
)
POOLTK_STAGE = (
    "2026-09-14 10:00:00 | INFO | pooltk | pooltk: stage 0 pooled (fwd ring 2/8, grad ring 2/8)\n"
)
NOT_POOLED = (
    "2026-09-14 10:00:00 | WARNING | pooltk | "
    "pooltk: not installed (reason=schedule ZBV has no bounded in-flight depth)\n"
)
KEPT_STOCK = (
    "2026-09-14 10:00:00 | WARNING | pooltk | "
    "pooltk: stage 0 kept stock (reason=schedule 'gpipe' is not allowlisted)\n"
    "2026-09-14 10:00:00 | WARNING | pooltk | "
    "pooltk: stage 1 kept stock (reason=schedule 'gpipe' is not allowlisted)\n"
)


@pytest.mark.parametrize(
    ("install", "pooled", "impl", "slack", "layout"),
    [
        (AUTOMODEL_POOL, True, "automodel", 2, "per-direction-setup"),
        (POOLTK_POOL + POOLTK_STAGE, True, "pooltk", 1, "setup-recv-info"),
        (NOT_POOLED, False, "pooltk", None, None),
        (
            POOLTK_POOL + KEPT_STOCK,
            False,
            "pooltk",
            1,
            "setup-recv-info",
        ),  # installed, but the gate kept every stage stock
        ("", None, None, None, None),
    ],
)
def test_pool_install_lines_say_which_runs_were_pooled(
    tmp_path, install, pooled, impl, slack, layout
):
    body = (FIX / "automodel_text_current.log").read_text()
    path = tmp_path / "job.log"
    path.write_text(install + body)
    table = read_log_file(path)
    s = table.steps
    got = s["pooled"].iloc[0]
    assert (
        (got is None or got is s["pooled"].dtype.na_value or str(got) == "<NA>")
        if pooled is None
        else bool(got) is pooled
    )
    assert (s["pool_impl"].iloc[0] if impl else None) == impl or (
        impl is None and s["pool_impl"].isna().all()
    )
    if slack is not None:
        assert int(s["slack"].iloc[0]) == slack and s["layout"].iloc[0] == layout
    f = table.files[0]
    assert f.n_row_lines + f.n_skipped_lines + f.n_meta + f.n_other == f.n_lines
    if install.count("\n") and pooled is not None:
        info = table.runs["job"]
        assert info.extra["pooled"] is pooled


def test_a_stock_run_and_a_pooled_run_in_one_file_keep_their_own_pool(tmp_path):
    body = (FIX / "torchtitan_wps_2024.log").read_text()
    prefix = "2026-09-14 10:00:00,000 - pooltk - INFO - "
    path = tmp_path / "both.log"
    path.write_text(
        prefix
        + "pooltk: not installed (reason=stock comparison)\n"
        + body
        + prefix
        + (
            "pooltk: installed (policy=automodel, slack=2, grad_slack=2, schedule=Schedule1F1B, "
            "layout=lazy)\n"
        )
        + body
    )
    s = read_log_file(path).steps
    by_run = s.groupby("run", observed=True)["pooled"].first().to_dict()
    assert by_run == {"both#1": False, "both#2": True}


def _titan(step, minute, loss=5.0):
    return (
        f"2026-09-14 10:{minute:02d}:{step % 60:02d},000 - root - INFO - step: {step:2}  "
        f"loss: {loss:7.4f}  "
        "memory: 10.00GiB(5.00%)  tps: 1,000  mfu: 1.00%\n"
    )


def test_a_clock_that_goes_back_while_the_steps_go_on_is_one_run_with_a_note(tmp_path):
    # issue 19: a DST fall-back or a node's skewed clock is not a restart; only steps going back (or
    # a banner) split
    path = tmp_path / "clock.log"
    path.write_text(
        "".join(_titan(s, 30) for s in range(1, 8)) + "".join(_titan(s, 10) for s in range(8, 15))
    )
    table = read_log_file(path)
    assert table.files[0].runs == ["clock"] and table.files[0].run_boundaries == []
    assert any("timestamps went back" in n and "not a restart" in n for n in table.files[0].notes)
    assert list(table.steps["step"]) == list(range(1, 15))


def test_ranks_printing_a_step_late_into_one_stream_are_not_a_restart(tmp_path):
    lines = []
    for s in range(
        1, 20
    ):  # two ranks without a prefix; the second prints each step after the first's next one
        lines.append(_titan(s, 30, loss=5.0))
        if s > 1:
            lines.append(_titan(s - 1, 30, loss=6.0))
    path = tmp_path / "lag.log"
    path.write_text("".join(lines))
    table = read_log_file(path)
    assert table.files[0].runs == ["lag"] and len(table.steps) == 19 + 18


def test_a_rank_whose_own_stream_restarts_splits_only_its_rows(tmp_path):
    body = "".join(f"[rank0]:{_titan(s, 30)}[rank1]:{_titan(s, 30)}" for s in range(1, 6))
    again = "".join(f"[rank0]:{_titan(s, 31)}[rank1]:{_titan(s, 31)}" for s in range(1, 6))
    path = tmp_path / "ranks.log"
    path.write_text(body + again)
    s = read_log_file(path).steps
    assert sorted(set(s["run"])) == ["ranks#1", "ranks#2"]
    for run in ("ranks#1", "ranks#2"):
        mine = s[s["run"] == run]
        assert sorted(set(mine["rank"])) == [0, 1] and len(mine) == 10


def test_pooltks_own_install_line_as_the_pool_logs_it_is_read_back(tmp_path):
    """The contract with pooltk.pool.events: a real install's line, through a user's logging format,
    tags the run."""
    import logging

    import pooltk

    path = tmp_path / "trainer.log"
    handler = logging.FileHandler(path)
    handler.setFormatter(
        logging.Formatter("[titan] %(asctime)s - %(name)s - %(levelname)s - %(message)s")
    )
    logger = logging.getLogger("pooltk")
    logger.addHandler(handler)
    old_level = logger.level
    logger.setLevel(logging.INFO)
    try:
        report = pooltk.install()
    finally:
        pooltk.uninstall()
        logger.removeHandler(handler)
        logger.setLevel(old_level)
        handler.close()
    logged = path.read_text()
    assert "pooltk: installed (" in logged or "pooltk: not installed (" in logged, logged
    with path.open("a") as f:
        f.write((FIX / "torchtitan_wps_2024.log").read_text())
    s = read_log_file(path).steps
    assert s["pooled"].notna().all() and bool(s["pooled"].iloc[0]) is bool(report.installed)
    assert set(s["pool_impl"]) == {"pooltk"}
    if report.installed:
        assert (
            int(s["slack"].iloc[0]) == report.config.slack and s["layout"].iloc[0] == report.layout
        )
