"""pooltk report's closing line tells its own work from imports and from what the process ran before
pooltk."""

from pooltk.cli.report import finished_line, time_split


def test_setup_before_pooltk_is_not_counted_as_the_reports_time():
    # bash scripts/main: bootstrap ran 60 s in this process, then exec'd pooltk; 2 s of imports,
    # 100 s of work
    t = time_split(100.0, since_start=163.0, cli_s=102.0)
    assert (t["work"], t["imports"], t["before"]) == (100.0, 2.0, 61.0)
    assert all(
        f"{v:.1f} s" in finished_line(100.0, since_start=163.0, cli_s=102.0)
        for v in (100.0, 2.0, 61.0)
    )


def test_without_proc_only_pooltks_own_time_is_split_and_nothing_is_negative():
    assert time_split(10.0, since_start=None, cli_s=10.5) == {
        "work": 10.0,
        "imports": 0.5,
        "before": None,
    }
    assert (
        time_split(10.0, since_start=9.0, cli_s=9.5)["imports"] == 0.0
    )  # clocks read apart: never below 0
    assert time_split(10.0, since_start=9.0, cli_s=9.5)["before"] == 0.0


def test_the_last_line_says_where_to_start_reading_and_what_the_reports_say(tmp_path):
    from pooltk.nb.report import NotebookRun, ReportResult, closing_line

    runs = [
        NotebookRun(path=tmp_path / f"{n}.ipynb", html=None, seconds=1.0, error=error)
        for n, error in (("00", None), ("01", "cell 3: ValueError"))
    ]
    result = ReportResult(
        out=tmp_path,
        summary_md=tmp_path / "summary.md",
        notebooks=runs,
        parity_equal=True,
        parity_error=None,
        timings={"total": 2.0},
    )
    line = closing_line(result)
    assert line.startswith(f"Start reading at {tmp_path / 'summary.md'}: 1 of 2 notebooks ran")
    assert "bitwise equal" in line and "start-up" not in line
    result.parity_equal = False
    assert "NOT equal" in closing_line(result)
