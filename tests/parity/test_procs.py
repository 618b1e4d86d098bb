"""[Note: one rank launcher] (pooltk.parity.procs): bounded, grace after a failure, whole groups
ended, codes kept."""

from __future__ import annotations

import os
import sys
import time

import pytest

from pooltk.parity.procs import run_processes

PY = sys.executable


def _run(tmp_path, *codes_src: str, **kw):
    argvs = [[PY, "-c", src] for src in codes_src]
    return run_processes(
        argvs, logs=[tmp_path / f"p{i}.log" for i in range(len(argvs))], env=os.environ, **kw
    )


def test_every_process_runs_to_its_end_and_its_exit_status_and_output_are_kept(tmp_path):
    done = _run(tmp_path, "print('zero')", "import sys; print('one'); sys.exit(3)", timeout_s=60)
    assert done.codes == [0, 3] and done.failed and not done.timed_out
    assert (tmp_path / "p0.log").read_text().strip() == "zero" and (
        tmp_path / "p1.log"
    ).read_text().strip() == "one"


def test_after_a_failure_the_others_get_the_grace_period_then_are_ended(tmp_path):
    t0 = time.monotonic()
    done = _run(
        tmp_path,
        "import sys; sys.exit(1)",
        "import time; time.sleep(120)",
        timeout_s=100,
        grace_s=0.5,
    )
    assert done.codes == [1, None] and done.failed and not done.timed_out
    assert time.monotonic() - t0 < 30


def test_without_a_grace_period_a_failure_does_not_end_the_others(tmp_path):
    done = _run(tmp_path, "import sys; sys.exit(1)", "import time; time.sleep(1.5)", timeout_s=60)
    assert done.codes == [1, 0]


def test_a_failure_signal_from_the_caller_counts_like_a_failed_exit(tmp_path):
    flag = tmp_path / "rank0.error.json"
    done = _run(
        tmp_path,
        f"open({str(flag)!r}, 'w').close(); import time; time.sleep(120)",
        timeout_s=100,
        grace_s=0.5,
        failed=flag.exists,
    )
    assert done.codes == [None] and done.failed


def test_at_the_deadline_everything_is_ended_including_what_a_process_forked(tmp_path):
    pidfile = tmp_path / "child.pid"
    src = (
        "import os, time\n"
        "pid = os.fork()\n"
        "if pid == 0:\n    time.sleep(120)\n    os._exit(0)\n"
        f"open({str(pidfile)!r}, 'w').write(str(pid))\n"
        "time.sleep(120)\n"
    )
    t0 = time.monotonic()
    done = _run(tmp_path, src, timeout_s=3)
    assert done.timed_out and done.codes == [None]
    assert time.monotonic() - t0 < 30
    child = int(pidfile.read_text())
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            state = open(f"/proc/{child}/stat").read().rsplit(")", 1)[1].split()[0]
        except OSError:
            break
        if state == "Z":
            break
        time.sleep(0.05)
    else:
        pytest.fail(f"forked child {child} survived the end of its process group")


def test_one_environment_each_or_one_for_all_and_a_mismatch_is_refused(tmp_path):
    envs = [dict(os.environ, WHO=str(i)) for i in range(2)]
    done = run_processes(
        [[PY, "-c", "import os; print(os.environ['WHO'])"]] * 2,
        logs=[tmp_path / "a.log", tmp_path / "b.log"],
        env=envs,
        timeout_s=60,
    )
    assert done.codes == [0, 0]
    assert [(tmp_path / n).read_text().strip() for n in ("a.log", "b.log")] == ["0", "1"]
    with pytest.raises(ValueError, match="one of each per process"):
        run_processes([[PY, "-c", "pass"]], logs=[], env=os.environ, timeout_s=5)
