"""pooltk report's closing line tells its own work from imports and from what the process ran before pooltk."""

from pooltk.cli.report import finished_line


def test_setup_before_pooltk_is_not_counted_as_the_reports_time():
    # bash scripts/main: bootstrap ran 60 s in this process, then exec'd pooltk; 2 s of imports, 100 s of work
    line = finished_line(100.0, since_start=163.0, cli_s=102.0)
    assert line.startswith("pooltk report finished: 100.0 s of report work, 2.0 s parsing and imports, 61.0 s in "
                           "this process before pooltk's command line was imported"), line
    assert "setup step" in line


def test_without_proc_the_line_gives_pooltks_own_time_only():
    line = finished_line(10.0, since_start=None, cli_s=10.5)
    assert line == "pooltk report finished: 10.0 s of report work, 0.5 s parsing and imports"
