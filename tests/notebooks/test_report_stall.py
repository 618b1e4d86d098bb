"""[Note: no silent stall] in pooltk.nb.report: a missed wakeup costs one poll slice, a real stall fails loudly."""

from __future__ import annotations

import asyncio
import time
from queue import Empty

import pytest

nbformat = pytest.importorskip("nbformat")
pytest.importorskip("nbclient")

from pooltk.nb.report import _sliced_polls, describe, run_notebook  # noqa: E402


class MissedWakeupChannel:
    """Like pyzmq's asyncio poll when the loop misses a reply's wakeup: the reply is seen only when a poll ends."""

    def __init__(self, arrives_after_s: float | None) -> None:
        self.arrives_at = None if arrives_after_s is None else time.monotonic() + arrives_after_s
        self.polls: list[float | None] = []

    async def get_msg(self, timeout: float | None = None) -> dict:
        self.polls.append(timeout)
        await asyncio.sleep(3600 if timeout is None else timeout)  # no wakeup: only the timeout ends the poll
        if self.arrives_at is not None and time.monotonic() >= self.arrives_at:  # the final poll(0)
            return {"msg_type": "execute_reply"}
        raise Empty


def test_a_reply_whose_wakeup_is_missed_is_read_within_a_slice_not_at_the_cell_timeout():
    channel = MissedWakeupChannel(arrives_after_s=0.2)
    _sliced_polls(channel, slice_s=0.1)
    t0 = time.monotonic()
    msg = asyncio.run(channel.get_msg(timeout=600))
    assert msg["msg_type"] == "execute_reply"
    assert time.monotonic() - t0 < 5  # unsliced, this poll would have lasted the whole 600 s
    assert max(channel.polls) <= 0.1


def test_a_wait_for_ever_is_sliced_too_and_a_wait_with_nothing_coming_still_ends_at_its_timeout():
    forever = MissedWakeupChannel(arrives_after_s=0.15)
    _sliced_polls(forever, slice_s=0.1)
    assert asyncio.run(forever.get_msg(timeout=None))["msg_type"] == "execute_reply"
    assert None not in forever.polls
    silent = MissedWakeupChannel(arrives_after_s=None)
    _sliced_polls(silent, slice_s=0.1)
    t0 = time.monotonic()
    with pytest.raises(Empty):
        asyncio.run(silent.get_msg(timeout=0.5))
    assert 0.45 <= time.monotonic() - t0 < 5


def _notebook(tmp_path, *sources: str):
    nb = nbformat.v4.new_notebook()
    nb.cells = [nbformat.v4.new_markdown_cell("# a stall")] + [nbformat.v4.new_code_cell(s) for s in sources]
    path = tmp_path / "99_stalls.ipynb"
    nbformat.write(nb, path)
    return path


@pytest.mark.notebook
def test_a_cell_past_the_timeout_fails_naming_the_notebook_the_cell_and_what_it_waited_for(tmp_path):
    path = _notebook(tmp_path, "x = 1", "import time\ntime.sleep(120)")
    run = run_notebook(path, tmp_path / "out", timeout_s=5)
    assert not run.ok
    assert "99_stalls.ipynb at cell 2 ('import time')" in run.error, run.error
    assert "execute_reply" in run.error and "cell timeout 5 s" in run.error, run.error
    assert run.seconds < 90


@pytest.mark.notebook
def test_the_closing_lines_give_each_notebook_its_wall_time(tmp_path):
    from pooltk.nb.report import ReportResult

    path = _notebook(tmp_path, "x = 1")
    run = run_notebook(path, tmp_path / "out", timeout_s=60)
    assert run.ok, run.error
    result = ReportResult(out=tmp_path / "out", summary_md=tmp_path / "out" / "summary.md", notebooks=[run],
                          parity_equal=None, parity_error=None, timings={"total": run.seconds})
    assert f"99_stalls.html ({run.seconds:.1f} s)" in describe(result)
