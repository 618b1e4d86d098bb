"""``pooltk report``: the main job. A probe, a pp4 parity check, buffer tables, every notebook.

Writes under the output folder (default ``reports/``): ``summary.md`` (the probe, the parity
verdict and tables, one line per notebook), ``parity_pp4.json``, ``buffers_pp4.csv``,
``memory_kimi_k3_2k.csv``, ``<notebook>.html`` (a failed notebook too, with its error),
``figures/*.png`` (saved by the notebooks through :func:`pooltk.nb.common.save_figure`:
``POOLTK_REPORT_DIR`` points there while they run) and ``logs/<notebook>.kernel.log``.
Progress is one line per step; on a terminal, a live cell counter.

[Note: no silent stall]
Notebooks run on nbclient as it is: one ``NotebookClient`` per notebook, ``async_execute`` in one
event loop, ``--jobs`` at a time, with nbclient's cell timeout and its public hooks. One upstream
behaviour is worked around, in one function, :func:`_poll_in_slices`: nbclient waits for a cell's
``execute_reply`` with a single ``get_msg`` of the shell channel lasting the whole cell timeout,
and pyzmq's asyncio poll under it is woken by zmq's edge-triggered notifications, else only at
its timeout, where a last ``poll(0)`` reads what came. With four kernels on one loop a wakeup can
be missed: the reply is there, yet the wait lasts the whole timeout and then *succeeds* (issue
#20: 625 s for a 30-40 s notebook, twice in six runs; with plain nbclient, notebook 01's widget
cell took 600.00 s to its reply, both processes idle in ``epoll_wait``, and the notebook ended OK
after 654.6 s). Polled in slices of :data:`POLL_SLICE_S`, a missed wakeup costs one slice.
A wait that truly gets nothing still ends at the cell timeout, with nbclient's error, and loudly:
:class:`_Awaited` follows the run through nbclient's hooks, so the error names the notebook, the
cell (index and first line) and what was awaited (the kernel to start, its ``kernel_info`` reply,
the cell's ``execute_reply``, the kernel to shut down).
"""

from __future__ import annotations

import glob
import json
import math
import os
import re
import sys
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import Future, ThreadPoolExecutor
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

__all__ = [
    "LOGS_NOTEBOOK",
    "NotebookRun",
    "ReportConfig",
    "ReportResult",
    "closing_line",
    "describe",
    "find_notebooks",
    "inject_parameters",
    "logs_parameters",
    "notebook_client",
    "run_notebook",
    "run_notebook_async",
    "run_report",
]

Progress = Callable[[str], None]

LOGS_NOTEBOOK = "notebooks/03_kimi_k3_gb200_1k_vs_2k.ipynb"
"""The analysis notebook ``pooltk report --logs`` executes on the user's logs."""

POLL_SLICE_S = 1.0
"""Longest single poll of a kernel channel, seconds ([Note: no silent stall])."""


def _require_file(flag: str, path: Path | None, what: str) -> None:
    if path is not None and not Path(path).is_file():
        raise ValueError(
            f"{flag}: found {str(path)!r}, which is not a file; required {what}. "
            "Fix: check the path."
        )


@dataclass(kw_only=True, slots=True, frozen=True)
class ReportConfig:
    """What ``pooltk report`` does."""

    out: Path = Path("reports")
    """Folder everything is written to (created)."""
    notebooks: str = "notebooks/*.ipynb"
    """Glob of the notebooks to execute; a relative glob starts from the working directory."""
    summary: bool = True
    """Run the probe, the pp4 parity check and the buffer tables first."""
    parity_pp: int = 4
    parity_microbatches: int = 16
    parity_steps: int = 3
    jobs: int = 4
    """Notebooks executed at once (each in its own kernel, all in one event loop)."""
    notebook_timeout_s: float = 600.0
    """Per-cell time bound; past it the notebook fails naming the cell and what it awaited."""
    logs: tuple[Path, ...] = ()
    """The user's logs: when given, only the analysis notebook runs, on them (no summary)."""
    run_info: Path | None = None
    """A JSON file of run facts for ``logs`` (see pooltk.nb.logs.load_run_info)."""
    expected: Path | None = None
    """A CSV of the figures expected of ``logs`` (see pooltk.nb.expected)."""

    def __post_init__(self) -> None:
        from pooltk._validate import check_int, check_number

        check_int("jobs", self.jobs, low=1, fix="--jobs 1 or 2", error=ValueError)
        for path in self.logs:
            if not Path(path).exists():
                raise ValueError(
                    f"--logs: found {str(path)!r}, which does not exist; required a log file or "
                    "folder. Fix: check the path (relative paths start from the current folder)."
                )
        _require_file("--expected", self.expected, "a CSV of expected figures")
        _require_file("--run-info", self.run_info, "a JSON file of run facts")
        check_number("notebook timeout", self.notebook_timeout_s, error=ValueError)


@dataclass(kw_only=True, slots=True)
class NotebookRun:
    """One notebook, executed and converted."""

    path: Path
    html: Path | None
    """The HTML written (also for a failed run), ``None`` if even that failed."""
    seconds: float
    """Wall time of execution and conversion."""
    error: str | None
    """The first error (cell and message), ``None`` when it ran clean."""
    figures: list[Path] = field(default_factory=list)
    """PNGs this notebook saved under ``figures/`` (names start with its number)."""

    @property
    def ok(self) -> bool:
        return self.error is None


@dataclass(kw_only=True, slots=True)
class ReportResult:
    """Everything ``pooltk report`` produced."""

    out: Path
    summary_md: Path
    notebooks: list[NotebookRun]
    """One per notebook, in glob order."""
    parity_equal: bool | None
    """The pp4 parity verdict; ``None`` when the summary was skipped or the run failed."""
    parity_error: str | None
    """Why the parity check failed to run, else ``None``."""
    timings: dict[str, float]
    """Seconds per phase (``probe``, ``notebooks``, ``parity``, ``tables``) and ``total``."""

    @property
    def ok(self) -> bool:
        notebooks_ok = all(n.ok for n in self.notebooks)
        return notebooks_ok and self.parity_error is None and self.parity_equal is not False


# --------------------------------------------------------------------------- one notebook


def find_notebooks(pattern: str) -> list[Path]:
    """Notebooks matching ``pattern`` (sorted), or ValueError naming the glob and the folder."""
    found = sorted(Path(p) for p in glob.glob(pattern) if p.endswith(".ipynb"))
    if not found:
        raise ValueError(
            f"--notebooks: found no notebook matching {pattern!r} from {Path.cwd()}; required at "
            "least one .ipynb. Fix: run from the repository root, or pass "
            "--notebooks 'path/to/*.ipynb'."
        )
    return found


def inject_parameters(nb: Any, parameters: dict[str, Any]) -> None:
    """Put ``parameters`` in a cell right after the one tagged ``parameters``, with papermill.

    papermill's ``parameterize_notebook`` writes the cell (tagged ``injected-parameters``) and
    records the values in the metadata; ``nb`` is changed in place. A notebook without a
    ``parameters`` cell is refused (papermill would put the values before the defaults).
    """
    from papermill.parameterize import parameterize_notebook

    if not any("parameters" in c.get("metadata", {}).get("tags", []) for c in nb.cells):
        raise ValueError(
            "notebook: found no cell tagged 'parameters'; required one (papermill's convention). "
            "Fix: tag the notebook's parameter cell 'parameters'."
        )
    nb.metadata.setdefault("papermill", {"parameters": {}})  # what papermill's own loader adds
    for cell in nb.cells:
        cell.metadata.setdefault("tags", [])
    done = parameterize_notebook(
        nb,
        parameters,
        comment="Parameters injected by pooltk report",
        kernel_name="python3",
        language="python",
    )
    nb.cells, nb.metadata = done.cells, done.metadata


def logs_parameters(config: ReportConfig) -> dict[str, Any]:
    """The analysis notebook's parameters for ``--logs`` (absolute paths: it runs in its folder)."""
    parameters: dict[str, Any] = {
        "LOG_PATHS": [str(Path(p).resolve()) for p in config.logs],
        "EXPECTED_FIGURES": [],  # the notebook's inline examples are about pooltk's own runs
    }
    if config.run_info is not None:
        parameters["RUN_INFO_FILE"] = str(Path(config.run_info).resolve())
    if config.expected is not None:
        parameters["EXPECTED_FILE"] = str(Path(config.expected).resolve())
    return parameters


def _poll_in_slices(kernel_client: Any, slice_s: float = POLL_SLICE_S) -> None:
    """Work around a missed wakeup lasting a whole cell timeout ([Note: no silent stall]).

    Upstream: nbclient's ``NotebookClient._async_poll_for_reply`` waits for ``execute_reply`` with
    one ``shell_channel.get_msg(timeout=<cell timeout>)`` (``_async_poll_output_msg`` reads IOPub
    with ``timeout=None``), and jupyter_client's ``AsyncZMQSocketChannel.get_msg`` is one pyzmq
    asyncio ``poll``, woken by zmq's edge-triggered notifications, else only at its timeout.
    Here both channels' ``get_msg`` poll at most ``slice_s`` at a time until the caller's
    timeout, so a reply whose wakeup was missed is read within one slice; ``queue.Empty`` still
    comes at the caller's timeout.
    """
    from queue import Empty

    def in_slices(get_msg: Any) -> Any:
        async def get_msg_in_slices(timeout: float | None = None) -> dict[str, Any]:
            deadline = None if timeout is None else time.monotonic() + timeout
            while True:
                left = slice_s if deadline is None else deadline - time.monotonic()
                try:
                    return await get_msg(timeout=max(0.0, min(slice_s, left)))
                except Empty:
                    if deadline is not None and time.monotonic() >= deadline:
                        raise

        return get_msg_in_slices

    for channel in (kernel_client.shell_channel, kernel_client.iopub_channel):
        channel.get_msg = in_slices(channel.get_msg)


def notebook_client(nb: Any, *, cwd: Path, timeout_s: float, **options: Any) -> Any:
    """nbclient's ``NotebookClient`` for ``nb`` (kernel ``python3``, working folder ``cwd``), its
    channels polled in slices ([Note: no silent stall]); ``options`` go to the client (hooks, ...).

    What every notebook pooltk executes runs through: ``pooltk report`` and the notebook tests.
    """
    from nbclient import NotebookClient

    caller_hook = options.pop("on_notebook_start", None)

    def kernel_started(**kwargs: Any) -> None:
        _poll_in_slices(client.kc)
        if caller_hook is not None:
            caller_hook(**kwargs)

    client = NotebookClient(
        nb,
        timeout=math.ceil(timeout_s),
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(cwd).resolve())}},
        on_notebook_start=kernel_started,
        **options,
    )
    return client


class _Awaited:
    """What a notebook's run waits for, and since when, kept by nbclient's hooks; the progress."""

    def __init__(self, path: Path, cells: list[Any], progress: Progress | None) -> None:
        self.path, self.cells, self.progress = path, cells, progress
        self.to_run = sum(c.cell_type == "code" and bool(c.source.strip()) for c in cells)
        self.cells_run = 0
        self.waiting_for("the kernel to start")

    def waiting_for(self, what: str, cell_index: int | None = None) -> None:
        self.what, self.cell_index, self.since = what, cell_index, time.monotonic()

    def hooks(self) -> dict[str, Callable[..., None]]:
        return {
            "on_notebook_start": lambda **_: self.waiting_for("the kernel's kernel_info reply"),
            "on_cell_execute": self.cell_sent,
            "on_cell_executed": self.cell_replied,
        }

    def cell_sent(self, cell_index: int, **_: Any) -> None:
        self.waiting_for("the cell's execute_reply from the kernel", cell_index)

    def cell_replied(self, **_: Any) -> None:
        self.cells_run += 1
        last = self.cells_run >= self.to_run
        self.waiting_for("the kernel to shut down" if last else "the next cell to start")
        if self.progress is not None:
            self.progress(f"  {self.path.name}: cell {self.cells_run}/{self.to_run}")

    def describe(self) -> str:
        where = ""
        if self.cell_index is not None:
            lines = self.cells[self.cell_index].source.splitlines()
            first_line = next((line for line in lines if line.strip()), "")
            where = f" at cell {self.cell_index} ({first_line[:60]!r})"
        waited_s = time.monotonic() - self.since
        return f"{self.path.name}{where}: waited {waited_s:.0f} s for {self.what}"


def _first_error(nb: Any) -> str | None:
    for index, cell in enumerate(nb.cells):
        for output in cell.get("outputs", []):
            if output.get("output_type") == "error":
                traceback = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(output.get("traceback", [])))
                message = f"{output.get('ename')}: {output.get('evalue')}"
                return f"cell {index}: {message}\n{traceback[-1500:]}"
    return None


def _write_html(nb: Any, html: Path) -> tuple[Path | None, str | None]:
    """``nb`` as ``html``; or no file and why."""
    from nbconvert import HTMLExporter

    try:
        body, _ = HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": html.stem}})
        html.write_text(body, encoding="utf-8")
    except Exception as exc:
        return None, f"HTML conversion failed: {type(exc).__name__}: {exc}"
    return html, None


async def run_notebook_async(
    path: Path,
    out: Path,
    *,
    timeout_s: float = 600.0,
    progress: Progress | None = None,
    parameters: dict[str, Any] | None = None,
) -> NotebookRun:
    """Execute ``path`` headless (working folder: its own) and write ``<out>/<stem>.html``.

    Never raises for a failing notebook: the error is recorded and the partial HTML written.
    Several may run at once in one event loop (each has its own kernel).
    """
    import nbformat
    from nbclient.exceptions import CellExecutionError

    started = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    if parameters:
        inject_parameters(nb, parameters)
    awaited = _Awaited(path, nb.cells, progress)
    client = notebook_client(nb, cwd=path.parent, timeout_s=timeout_s, **awaited.hooks())
    stalled: str | None = None
    (out / "logs").mkdir(parents=True, exist_ok=True)
    try:
        with open(out / "logs" / f"{path.stem}.kernel.log", "wb") as kernel_stderr:
            await client.async_execute(stderr=kernel_stderr)
    except CellExecutionError:
        pass  # the cell's error output is in the notebook
    except Exception as exc:  # a cell timeout, a dead kernel: say what the run waited for
        stalled = f"{awaited.describe()} (cell timeout {timeout_s:g} s): "
        stalled += f"{type(exc).__name__}: {exc}"
    html, html_error = _write_html(nb, out / f"{path.stem}.html")
    error = stalled or _first_error(nb) or html_error
    return NotebookRun(path=path, html=html, seconds=time.perf_counter() - started, error=error)


def run_notebook(path: Path, out: Path, **options: Any) -> NotebookRun:
    """:func:`run_notebook_async` for one notebook, from synchronous code."""
    import asyncio

    return asyncio.run(run_notebook_async(path, out, **options))


# --------------------------------------------------------------------------- every notebook


async def _run_notebooks(
    paths: list[Path], config: ReportConfig, emit: Progress
) -> list[NotebookRun]:
    """Every notebook, ``config.jobs`` at a time in this event loop, each announced as it ends."""
    import asyncio

    slots = asyncio.Semaphore(config.jobs)
    finished: list[NotebookRun] = []

    async def run_one(path: Path) -> NotebookRun:
        with_logs = bool(config.logs) and path.name == Path(LOGS_NOTEBOOK).name
        async with slots:
            run = await run_notebook_async(
                path,
                config.out,
                timeout_s=config.notebook_timeout_s,
                progress=emit,
                parameters=logs_parameters(config) if with_logs else None,
            )
        number = path.stem.split("_", 1)[0]
        run.figures = sorted((config.out / "figures").glob(f"{number}_*.png"))
        finished.append(run)
        status = "ok" if run.ok else "FAILED: " + (run.error or "").splitlines()[0]
        emit(
            f"[{len(finished)}/{len(paths)}] {path} {run.seconds:.1f} s, "
            f"{len(run.figures)} figure(s): {status}"
        )
        return run

    return list(await asyncio.gather(*(run_one(p) for p in paths)))


@contextmanager
def _report_dir(figures: Path) -> Iterator[None]:
    """``POOLTK_REPORT_DIR`` set to ``figures`` while the notebooks run, then put back."""
    before = os.environ.get("POOLTK_REPORT_DIR")
    os.environ["POOLTK_REPORT_DIR"] = str(figures.resolve())
    try:
        yield
    finally:
        if before is None:
            os.environ.pop("POOLTK_REPORT_DIR", None)
        else:
            os.environ["POOLTK_REPORT_DIR"] = before


# --------------------------------------------------------------------------- summary tables


def _md_table(frame: Any, floatfmt: str = "{:,.2f}") -> str:
    """A pandas frame as a GitHub markdown table (no tabulate dependency)."""
    columns = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(columns) + " |", "|" + "|".join("---" for _ in columns) + "|"]
    for row in frame.itertuples(index=False):
        cells = [floatfmt.format(v) if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _probe_lines(emit: Progress) -> list[str]:
    from pooltk import probe

    found = probe()
    works = "work" if found.installed else "not work"
    emit(
        f"[probe] torch {found.torch_version}: layout {found.layout or 'none'}; install would "
        f"{works} ({found.reason})"
    )
    return [
        "## Probe\n",
        f"- torch: {found.torch_version}",
        f"- layout: {found.layout or 'none recognised'}",
        f"- install would work: {found.installed}",
        f"- why: {found.reason}",
        "",
    ]


@dataclass(slots=True)
class _ParityCheck:
    """The pp4 parity check as ``summary.md`` tells it."""

    lines: list[str]
    report: Any  # pooltk.parity.ParityReport, or None when it failed to run
    error: str | None
    seconds: float


def _parity_check(config: ReportConfig) -> _ParityCheck:
    """Run the pp4 parity check and write its JSON and buffer table (in the background)."""
    from pooltk import PoolOverrunError
    from pooltk.parity import ParityRankError, ParitySpec, ParityTimeoutError
    from pooltk.parity import default_variants, run_parity
    from pooltk.parity.experiments import Harness

    started = time.perf_counter()
    harnesses = [
        Harness(slack=2),
        Harness(slack=0, grad_slack=0),
        Harness(slack=2, policy="automodel"),
    ]
    spec = ParitySpec(
        pp=config.parity_pp,
        microbatches=config.parity_microbatches,
        steps=config.parity_steps,
        timeout_s=240,
        variants=default_variants(harnesses, frontends=("manual", "tracing")),
    )
    try:
        report = run_parity(spec)
    except (ParityRankError, ParityTimeoutError, PoolOverrunError) as exc:
        error = f"{type(exc).__name__}: {exc}"
        lines = [f"## pp{spec.pp} parity\n\n**FAILED to run:** {error}\n"]
        return _ParityCheck(lines, None, error, time.perf_counter() - started)
    (config.out / "parity_pp4.json").write_text(json.dumps(report.to_dict(), indent=2))
    return _ParityCheck(_parity_lines(spec, report, config.out), report, None, report.wall_s)


def _parity_lines(spec: Any, report: Any, out: Path) -> list[str]:
    import pandas as pd

    from pooltk.parity.tables import bytes_frame

    rows = []
    for v in report.variants:
        bitwise = "ref" if v.reference is None else ("yes" if v.bitwise_equal else "NO")
        diff = v.params_max_abs_diff
        rows.append(
            {
                "variant": v.name,
                "bitwise": bitwise,
                "max_abs_dparam": "" if diff is None else f"{diff:.3g}",
                "median_step_ms": round(v.median_step_time_s * 1e3, 1),
            }
        )
    buffers = bytes_frame(report)
    buffers.to_csv(out / "buffers_pp4.csv", index=False)
    return [
        f"## pp{spec.pp} parity (gloo, CPU)\n",
        f"pp{spec.pp} x {spec.microbatches} microbatches x {spec.steps} steps, "
        f"wall {report.wall_s:.1f} s: **bitwise_equal = {report.bitwise_equal}**\n",
        _md_table(pd.DataFrame(rows), "{:,.1f}"),
        "",
        "### Receive buffers per stage, measured (first pooled variant: tight slack 2, "
        "grad slack 1)\n",
        _md_table(buffers),
        "",
    ]


def _memory_lines(out: Path) -> list[str]:
    from pooltk.studies.kimi_k3 import get_preset

    preset = get_preset("kimi-k3-gb200-2k-calibrated")
    model = preset.model()
    columns = ["stage", "stock_forward_sets", "stock_grad_sets", "stock_gib"]
    columns += ["automodel_gib", "tight_gib", "live_set_gib", "saved_gib"]
    frame = model.per_stage_frame("gib")[columns]
    frame.to_csv(out / "memory_kimi_k3_2k.csv", index=False)
    return [
        f"## Per-stage receive buffers, {preset.name} (modelled)\n",
        f"{preset.shape.describe()}; pool {model.describe()}; boundary "
        f"{preset.boundary.describe()}. GiB = 2**30 B; saved = stock - {model.policy}.\n",
        _md_table(frame),
        "",
    ]


def _notebook_lines(runs: list[NotebookRun], out: Path) -> list[str]:
    lines = ["## Notebooks\n", "| notebook | status | seconds | HTML | figures |"]
    lines.append("|---|---|---|---|---|")
    for r in runs:
        html = f"[{r.html.name}]({r.html.name})" if r.html else "-"
        figures = ", ".join(f"[{f.name}](figures/{f.name})" for f in r.figures) or "-"
        status = "ok" if r.ok else "FAILED: " + (r.error or "").splitlines()[0].replace("|", "/")
        lines.append(f"| {r.path.name} | {status} | {r.seconds:.1f} | {html} | {figures} |")
    shots = sorted((out / "screenshots").glob("*.png"))
    if shots:
        lines += ["", "## Browser screenshots (from the JupyterLab test)\n"]
        lines += [f"- [{s.name}](screenshots/{s.name})" for s in shots]
    return lines


# --------------------------------------------------------------------------- the job


def _printer() -> Progress:
    """Progress lines; on a terminal, cell counters overwrite one line."""
    stream = sys.stdout
    tty = hasattr(stream, "isatty") and stream.isatty()
    lock = threading.Lock()

    def emit(line: str) -> None:
        with lock:
            if line.startswith("  "):  # a cell counter
                if tty:
                    stream.write("\r\033[K" + line.strip())
                    stream.flush()
                return
            stream.write(("\r\033[K" if tty else "") + line + "\n")
            stream.flush()

    return emit


def _logs_only(config: ReportConfig, emit: Progress) -> ReportConfig:
    """``--logs``: the analysis notebook alone, on the user's logs."""
    if not Path(LOGS_NOTEBOOK).is_file():
        raise ValueError(
            f"--logs: found no {LOGS_NOTEBOOK} under {Path.cwd()}; required the analysis "
            "notebook. Fix: run pooltk report from the repository root."
        )
    line = "[logs] " + ", ".join(str(p) for p in config.logs)
    if config.run_info:
        line += f"; run facts from {config.run_info}"
    if config.expected:
        line += f"; expected figures from {config.expected}"
    emit(line)
    return replace(config, notebooks=LOGS_NOTEBOOK, summary=False)


@contextmanager
def _timed(timings: dict[str, float], phase: str) -> Iterator[None]:
    started = time.perf_counter()
    yield
    timings[phase] = time.perf_counter() - started


def _start_parity(
    config: ReportConfig, background: ThreadPoolExecutor, emit: Progress
) -> Future[_ParityCheck]:
    emit(
        f"[parity] pp{config.parity_pp} x {config.parity_microbatches} microbatches x "
        f"{config.parity_steps} steps: stock vs tight s2 / tight s0 / automodel s2, manual and "
        "tracing frontends (in the background)"
    )
    return background.submit(_parity_check, config)


def _finish_parity(running: Future[_ParityCheck], emit: Progress) -> _ParityCheck:
    from pooltk.parity import format_report

    check = running.result()
    if check.report is not None:
        print(format_report(check.report))
    else:
        emit(f"[parity] FAILED: {check.error}")
    return check


def _run_every_notebook(
    paths: list[Path], config: ReportConfig, emit: Progress
) -> list[NotebookRun]:
    import asyncio

    figures = config.out / "figures"
    emit(f"[notebooks] {len(paths)} notebook(s), {config.jobs} at a time; figures -> {figures}")
    with _report_dir(figures):
        return asyncio.run(_run_notebooks(paths, config, emit))


def _write_summary(
    summary_md: list[str], runs: list[NotebookRun], out: Path, timings: dict[str, float]
) -> Path:
    wall = ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
    summary_md += _notebook_lines(runs, out)
    summary_md += ["", "## Wall time\n", wall + " (parity runs alongside the notebooks)", ""]
    summary = out / "summary.md"
    summary.write_text("\n".join(summary_md), encoding="utf-8")
    return summary


def run_report(
    config: ReportConfig = ReportConfig(), *, progress: Progress | None = None
) -> ReportResult:
    """Run the main job (see the module docstring) and return what it produced.

    The parity check (its ranks are subprocesses) runs in a background thread while the
    notebooks execute, ``config.jobs`` at a time, in one event loop.
    """
    emit = progress or _printer()
    started = time.perf_counter()
    timings: dict[str, float] = {}
    config = _logs_only(config, emit) if config.logs else config
    paths = find_notebooks(config.notebooks)
    (config.out / "figures").mkdir(parents=True, exist_ok=True)
    summary_md, parity = ["# pooltk report\n"], None
    with ThreadPoolExecutor(max_workers=1) as background:
        running = None
        if config.summary:
            with _timed(timings, "probe"):
                summary_md += _probe_lines(emit)
            running = _start_parity(config, background, emit)
        with _timed(timings, "notebooks"):
            runs = _run_every_notebook(paths, config, emit)
        if running is not None:
            parity = _finish_parity(running, emit)
            timings["parity"] = parity.seconds
    if parity is not None:
        with _timed(timings, "tables"):
            summary_md += parity.lines + _memory_lines(config.out)
        emit(f"[tables] buffers_pp4.csv, memory_kimi_k3_2k.csv ({timings['tables']:.1f} s)")
    timings["total"] = time.perf_counter() - started
    parity_report = None if parity is None else parity.report
    return ReportResult(
        out=config.out,
        summary_md=_write_summary(summary_md, runs, config.out, timings),
        notebooks=runs,
        parity_equal=None if parity_report is None else parity_report.bitwise_equal,
        parity_error=None if parity is None else parity.error,
        timings=timings,
    )


def describe(result: ReportResult) -> str:
    """The closing lines: where everything went and the wall time."""
    out = result.out
    lines = [f"summary   {result.summary_md}"]
    for r in result.notebooks:
        failed = "" if r.ok else "  <- FAILED"
        lines.append(f"html      {r.html or '(not written)'} ({r.seconds:.1f} s){failed}")
    figures = sorted((out / "figures").glob("*.png"))
    lines.append(f"figures   {out / 'figures'}/ ({len(figures)} PNG)")
    if result.parity_equal is not None:
        lines.append(f"parity    {out / 'parity_pp4.json'} (bitwise_equal={result.parity_equal})")
    lines.append("wall time " + ", ".join(f"{k} {v:.1f} s" for k, v in result.timings.items()))
    lines.append("result    " + ("OK" if result.ok else "FAILED (see above)"))
    return "\n".join(lines)


def closing_line(result: ReportResult) -> str:
    """The last line ``pooltk report`` prints: where to start reading, and what the reports say."""
    ran = sum(n.ok for n in result.notebooks)
    said = [f"{ran} of {len(result.notebooks)} notebooks ran"]
    if result.parity_equal is not None:
        equal = "bitwise equal" if result.parity_equal else "NOT equal"
        said.append(f"pp4 gloo parity pooled vs stock {equal}")
    if result.parity_error is not None:
        said.append("the parity check failed to run")
    return (
        f"Start reading at {result.summary_md}: {', '.join(said)}; "
        f"one HTML per notebook in {result.out}/."
    )
