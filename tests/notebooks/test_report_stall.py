"""[Note: no silent stall] in pooltk.nb.report: a missed wakeup costs one poll slice, a real stall
fails loudly."""

from __future__ import annotations

import asyncio
import time
from queue import Empty
from types import SimpleNamespace

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from pooltk.nb.report import _poll_in_slices, describe, run_notebook  # noqa: E402


class MissedWakeupChannel:
    """Like pyzmq's asyncio poll when the loop misses a reply's wakeup: the reply is seen only when
    a poll ends."""

    def __init__(self, arrives_after_s: float | None) -> None:
        self.arrives_at = None if arrives_after_s is None else time.monotonic() + arrives_after_s
        self.polls: list[float | None] = []

    async def get_msg(self, timeout: float | None = None) -> dict:
        self.polls.append(timeout)
        await asyncio.sleep(
            3600 if timeout is None else timeout
        )  # no wakeup: only the timeout ends the poll
        if self.arrives_at is not None and time.monotonic() >= self.arrives_at:  # the final poll(0)
            return {"msg_type": "execute_reply"}
        raise Empty


def _sliced(shell: MissedWakeupChannel) -> MissedWakeupChannel:
    """``shell`` as nbclient's kernel client holds it once :func:`_poll_in_slices` has run."""
    iopub = MissedWakeupChannel(arrives_after_s=None)
    _poll_in_slices(SimpleNamespace(shell_channel=shell, iopub_channel=iopub), slice_s=0.1)
    assert iopub.get_msg.__name__ == "get_msg_in_slices"  # both channels are sliced
    return shell


def test_a_reply_whose_wakeup_is_missed_is_read_within_a_slice_not_at_the_cell_timeout():
    channel = _sliced(MissedWakeupChannel(arrives_after_s=0.2))
    t0 = time.monotonic()
    msg = asyncio.run(channel.get_msg(timeout=600))
    assert msg["msg_type"] == "execute_reply"
    assert time.monotonic() - t0 < 5  # unsliced, this poll would have lasted the whole 600 s
    assert max(channel.polls) <= 0.1


def test_a_wait_for_ever_is_sliced_too_and_a_wait_with_nothing_coming_still_ends_at_its_timeout():
    forever = _sliced(MissedWakeupChannel(arrives_after_s=0.15))
    assert asyncio.run(forever.get_msg(timeout=None))["msg_type"] == "execute_reply"
    assert None not in forever.polls
    silent = _sliced(MissedWakeupChannel(arrives_after_s=None))
    t0 = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(silent.get_msg(timeout=0.5))
    assert 0.45 <= time.monotonic() - t0 < 5


def _notebook(tmp_path, *sources: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a stall")] + [
        nbformat.v4.new_code_cell(s) for s in sources
    ]
    path = tmp_path / "99_stalls.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.notebook
def test_a_cell_past_the_timeout_fails_naming_the_notebook_the_cell_and_what_it_waited_for(
    tmp_path,
):
    path = _notebook(tmp_path, "x = 1", "import time\ntime.sleep(120)")
    run = run_notebook(path, tmp_path / "out", timeout_s=5)
    assert not run.ok
    assert "99_stalls.ipynb at cell 2 ('import time')" in run.error, run.error
    assert "execute_reply" in run.error and "cell timeout 5 s" in run.error, run.error
    assert run.seconds < 90


@pytest.mark.notebook
def test_nbclient_runs_as_it_is_with_its_kernel_channels_polled_in_slices(tmp_path):
    from pooltk.nb.report import notebook_client

    seen = []

    def started(**_):
        channels = (client.kc.shell_channel, client.kc.iopub_channel)
        seen.extend(channel.get_msg.__name__ for channel in channels)

    nb = nbformat.read(_notebook(tmp_path, "x = 1"), as_version=4)
    client = notebook_client(nb, cwd=tmp_path, timeout_s=60, on_notebook_start=started)
    client.execute()
    assert seen == [
        "get_msg_in_slices",
        "get_msg_in_slices",
    ]  # the caller's hook ran after the slicing
    assert nb.cells[1].outputs == [] and nb.cells[1].execution_count == 1


@pytest.mark.notebook
def test_the_closing_lines_give_each_notebook_its_wall_time(tmp_path):
    from pooltk.nb.report import ReportResult

    path = _notebook(tmp_path, "x = 1", "", "y = 2")
    progress = []
    run = run_notebook(path, tmp_path / "out", timeout_s=60, progress=progress.append)
    assert run.ok, run.error
    assert progress == [
        "  99_stalls.ipynb: cell 1/2",
        "  99_stalls.ipynb: cell 2/2",
    ]  # the empty cell is not run
    result = ReportResult(
        out=tmp_path / "out",
        summary_md=tmp_path / "out" / "summary.md",
        notebooks=[run],
        parity_equal=None,
        parity_error=None,
        timings={"total": run.seconds},
    )
    assert f"99_stalls.html ({run.seconds:.1f} s)" in describe(result)
