"""A parity launch ends in bounded time with the root cause, leaves no processes, and fails open."""

import json
import os
import subprocess
import sys
import textwrap
import time

import pytest

from pooltk.parity.experiments import Harness
from pooltk.parity import (
    ParityRankError,
    ParitySpec,
    ParityTimeoutError,
    default_variants,
    run_parity,
)

pytestmark = [pytest.mark.dist, pytest.mark.timeout(300)]


def _prelude(tmp_path, monkeypatch, name, body):
    (tmp_path / f"{name}.py").write_text(textwrap.dedent(body))
    monkeypatch.setenv("PYTHONPATH", f"{tmp_path}{os.pathsep}{os.environ.get('PYTHONPATH', '')}")
    return name


def test_unknown_layout_in_the_ranks_fails_open_and_the_run_is_stock_and_correct(
    tmp_path, monkeypatch, no_leftover_ranks
):
    prelude = _prelude(
        tmp_path,
        monkeypatch,
        "move_layout",
        """
        from torch.distributed.pipelining import stage as m
        fn = m.PipelineStage.__dict__["_setup_forward_recv_info"]
        delattr(m.PipelineStage, "_setup_forward_recv_info")
        m._PipelineStageBase._setup_forward_recv_info = fn
    """,
    )
    spec = ParitySpec(
        pp=2, microbatches=4, steps=2, timeout_s=200, variants=default_variants([Harness()])
    )
    report = run_parity(spec, prelude=prelude)
    pooled = report.variants[1]
    assert pooled.bitwise_equal
    assert all(r == {} for r in pooled.rings.values())
    assert pooled.recv[1]["forward"]["sets"] == 4 and pooled.recv[0]["grad"]["sets"] == 4


def test_a_rank_that_raises_is_reported_as_the_root_cause(tmp_path, monkeypatch, no_leftover_ranks):
    prelude = _prelude(
        tmp_path,
        monkeypatch,
        "rank1_raises",
        """
        import sys
        if sys.argv[1] == "1":
            raise RuntimeError("rank one exploded on purpose")
    """,
    )
    spec = ParitySpec(
        pp=2, microbatches=4, steps=1, timeout_s=120, variants=default_variants([Harness()])
    )
    with pytest.raises(ParityRankError) as info:
        run_parity(spec, prelude=prelude)
    assert info.value.rank == 1 and "exploded on purpose" in info.value.message


def test_a_hung_rank_ends_the_launch_at_the_timeout_with_every_rank_killed(
    tmp_path, monkeypatch, no_leftover_ranks
):
    prelude = _prelude(
        tmp_path,
        monkeypatch,
        "rank1_hangs",
        """
        import sys, time
        if sys.argv[1] == "1":
            time.sleep(3600)
    """,
    )
    spec = ParitySpec(
        pp=2, microbatches=4, steps=1, timeout_s=10, variants=default_variants([Harness()])
    )
    t0 = time.monotonic()
    with pytest.raises(ParityTimeoutError, match="timeout_s=10"):
        run_parity(spec, prelude=prelude)
    assert time.monotonic() - t0 < 40


def test_cli_parity_json_reports_bitwise_equal_and_exit_status():
    ok = subprocess.run(
        [
            sys.executable,
            "-m",
            "pooltk",
            "parity",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--steps",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert ok.returncode == 0, ok.stderr
    data = json.loads(ok.stdout)
    assert data["bitwise_equal"] is True
    assert data["ok"] is True and data["verdict"].startswith(
        "verdict:"
    )  # judged three ways (stock, fresh, pooled)
    stages = next(v for v in data["variants"] if v["pooled"])["stages"]
    assert stages["1"]["recv"]["forward"]["sets"] == 3 and stages["0"]["recv"]["grad"]["sets"] == 2
    bad = subprocess.run(
        [
            sys.executable,
            "-m",
            "pooltk",
            "parity",
            "--pp",
            "2",
            "--microbatches",
            "4",
            "--steps",
            "2",
            "--schedule",
            "GPipe",
            "--force",
            "--no-guard",
            "--slack",
            "0",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=200,
    )
    assert bad.returncode == 1
    assert json.loads(bad.stdout)["bitwise_equal"] is False


def test_parity_runs_under_torchrun_with_gloo(no_leftover_ranks):
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            "-m",
            "pooltk.parity",
            "--microbatches",
            "4",
            "--steps",
            "2",
            "--json",
        ],
        capture_output=True,
        text=True,
        timeout=200,
        env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"),
    )
    assert out.returncode == 0, out.stderr[-3000:]
    data = json.loads(out.stdout[out.stdout.index("{") :])
    assert data["bitwise_equal"] is True and data["spec"]["pp"] == 2


def _torchrun(*args: str, timeout: float = 200) -> subprocess.CompletedProcess:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "torch.distributed.run",
            "--standalone",
            "--nproc-per-node",
            "2",
            *args,
        ],
        capture_output=True,
        text=True,
        timeout=timeout,
        env=dict(os.environ, GLOO_SOCKET_IFNAME="lo"),
    )


def test_every_torchrun_rank_exits_cleanly_with_no_gloo_thread_left(tmp_path, no_leftover_ranks):
    """[Note: a rank's clean exit]: exit status 0 on every rank, no abort, no gloo thread past
    destroy."""
    out = _torchrun(
        "--log-dir",
        str(tmp_path),
        "--redirects",
        "3",
        "-m",
        "pooltk.parity",
        "--microbatches",
        "4",
        "--steps",
        "1",
        "--json",
    )
    assert out.returncode == 0, out.stderr[-3000:]  # torchrun exits 0 only when every rank did
    stderrs = sorted(tmp_path.glob("**/stderr.log"))
    assert len(stderrs) == 2, sorted(tmp_path.rglob("*"))
    for log in stderrs:
        text = log.read_text(errors="replace")
        assert "terminate called" not in text and "Fatal Python error" not in text, text[-3000:]
        assert "outlived destroy_process_group" not in text, text[-3000:]
    report = json.loads(
        next(p for p in tmp_path.glob("**/stdout.log") if "{" in p.read_text()).read_text()
    )
    assert report["bitwise_equal"] is True


def test_under_torchrun_the_pool_log_lines_say_what_happened_on_each_variant(tmp_path):
    """[Note: pool log lines] under a launcher: a trainer's INFO logging shows the install, each
    stage's rings on rank 0, the release, and at uninstall ``unpooled`` (the run WAS pooled), never
    ``kept stock``."""
    script = tmp_path / "logged_parity.py"
    script.write_text(
        textwrap.dedent("""
        import logging, runpy, sys
        logging.basicConfig(level=logging.INFO, format="%(levelname)s %(name)s %(message)s")
        sys.argv = ["pooltk.parity", "--microbatches", "4", "--steps", "1", "--pp", "2"]
        runpy.run_module("pooltk.parity", run_name="__main__")
    """)
    )
    out = _torchrun("--log-dir", str(tmp_path / "logs"), "--redirects", "3", str(script))
    assert out.returncode == 0, out.stderr[-3000:]
    by_rank = {
        p.parent.name: p.read_text(errors="replace")
        for p in (tmp_path / "logs").glob("**/stderr.log")
    }
    assert sorted(by_rank) == ["0", "1"], sorted(by_rank)
    lines = [ln for ln in by_rank["0"].splitlines() if " pooltk " in ln]
    text = "\n".join(lines)
    assert any(
        "pooltk: installed (policy=tight, slack=2" in ln and "mode=rings+release" in ln
        for ln in lines
    ), text
    # stage 0 of pp2 1F1B receives no activations and a grad ring of 1 + grad_slack = 2 of 4
    assert any(
        ln.endswith("pooltk: stage 0 pooled (fwd ring 0/4, grad ring 2/4)") for ln in lines
    ), text
    assert any("pooltk: stage 0 unpooled (reason=" in ln for ln in lines), text
    assert not any("kept stock" in ln for ln in lines), text
    assert not any("pooltk:" in ln for ln in by_rank["1"].splitlines()), (
        "the pool logs on rank 0 only"
    )


def test_the_clean_exit_check_sees_a_process_group_something_still_holds(tmp_path):
    """group_threads_left() names the gloo threads when a kept reference outlives
    destroy_process_group."""
    script = tmp_path / "held_group.py"
    script.write_text(
        textwrap.dedent(
            """
        import sys
        import torch.distributed as dist
        from pooltk.parity.command import group_threads_left

        dist.init_process_group("gloo")
        held = dist.group.WORLD  # a reference of our own keeps the C++ group (and its threads) """
            """alive
        dist.destroy_process_group()
        # one write per line: the ranks share one stdout, and print() writes the line and its
        # end separately, so two ranks' lines interleaved ("FREEDFREED  []")
        sys.stdout.write(f"HELD {group_threads_left()}\\n")
        sys.stdout.flush()
        del held
        sys.stdout.write(f"FREED {group_threads_left()}\\n")
        sys.stdout.flush()
    """
        )
    )
    out = _torchrun(str(script), timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    held = [ln for ln in out.stdout.splitlines() if ln.startswith("HELD")]
    freed = [ln for ln in out.stdout.splitlines() if ln.startswith("FREED")]
    assert len(held) == 2 and all("pt_gloo_runloop" in ln for ln in held), out.stdout
    assert freed == ["FREED []", "FREED []"], out.stdout


def test_no_leftover_ranks_finds_a_marked_process_and_only_while_it_runs(
    owner_token, processes_marked
):
    proc = subprocess.Popen(
        [sys.executable, "-c", "import time; time.sleep(60)", "pooltk.parity-marker"]
    )
    try:
        deadline = time.monotonic() + 10
        while proc.pid not in processes_marked(owner_token) and time.monotonic() < deadline:
            time.sleep(0.05)
        assert proc.pid in processes_marked(owner_token)
        assert proc.pid not in processes_marked("another-test")
    finally:
        proc.kill()
        proc.wait()
    assert proc.pid not in processes_marked(owner_token)
