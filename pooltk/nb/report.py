"""``pooltk report``: the main job. Probe, a pp4 parity check, per-stage buffer tables, then every notebook.

Writes under the output folder (default ``reports/``):

- ``summary.md`` -- what this torch is (probe), the pp4 parity verdict, the measured
  per-stage receive-buffer table of that run next to the model, the Kimi-K3 2k per-stage
  table, and one line per notebook (time, status, HTML, figures);
- ``parity_pp4.json`` (the full parity report), ``buffers_pp4.csv``, ``memory_kimi_k3_2k.csv``;
- ``<notebook>.html`` -- every notebook executed headless on its shipped defaults (nbclient,
  working directory ``notebooks/``), converted with nbconvert; a notebook that fails is
  still written, with its error, and the job exits non-zero;
- ``figures/*.png`` -- the key figures, saved by the notebooks themselves through
  :func:`pooltk.nb.save_figure` (``POOLTK_REPORT_DIR`` points there while they run).

Progress goes to ``progress`` (one line per step; on a terminal, a live cell counter), and
each notebook's line carries its wall time. Imports nbclient / nbconvert / papermill / pandas
inside the functions that need them.

[Note: no silent stall]
nbclient waits for a cell's ``execute_reply`` with one ``poll`` of the shell socket lasting the
whole cell timeout (600 s). pyzmq's asyncio ``poll`` ends at its timeout with a last
non-blocking ``poll(0)``; so when the event loop misses the wakeup of a reply that did arrive
(zmq's notifications are edge-triggered, and four kernels share the loop here), the wait lasts
the full timeout and then *succeeds*: the kernel and the report both sit idle for ~600 s and the
run still ends OK (what issue #20 saw: 625 s for a 30-40 s notebook, twice in six runs).
Reproduced with plain nbclient, all seven notebooks four at a time on a loaded 2-core machine:
notebook 01's widget cell (25, ``interactive_output``) took 600.00 s from its start to its
reply, both processes idle in ``epoll_wait``, and the notebook ended OK after 654.6 s.
Hence every wait on a kernel channel is cut into polls of at most :data:`POLL_SLICE_S`
(:func:`_sliced_polls`): a missed wakeup costs one slice, never the timeout. A wait that truly
gets nothing still ends at the cell timeout, and then loudly: :class:`_Phase` knows the
notebook, the cell (index and first line) and what was awaited (kernel start, the
``kernel_info`` reply, the cell's ``execute_reply``, kernel shutdown), and the error says so.
"""

from __future__ import annotations

import glob
import json
import os
import sys
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

__all__ = [
    "LOGS_NOTEBOOK",
    "NotebookRun",
    "ReportConfig",
    "ReportResult",
    "describe",
    "find_notebooks",
    "inject_parameters",
    "notebook_client",
    "run_notebook",
    "run_notebook_async",
    "run_report",
]

Progress = Callable[[str], None]

LOGS_NOTEBOOK = "notebooks/03_kimi_k3_gb200_1k_vs_2k.ipynb"
"""The analysis notebook ``pooltk report --logs`` executes on the user's logs."""

POLL_SLICE_S = 1.0
"""Longest single poll of a kernel channel, seconds (see [Note: no silent stall])."""


@dataclass(kw_only=True, slots=True, frozen=True)
class ReportConfig:
    """What ``pooltk report`` does."""

    out: Path = Path("reports")
    """Folder everything is written to (created)."""
    notebooks: str = "notebooks/*.ipynb"
    """Glob of the notebooks to execute; a relative glob starts from the working directory (the
    default is meant to be run from the repository root, as ``bash scripts/main`` does)."""
    summary: bool = True
    """Run the probe, the pp4 parity check and the buffer tables first."""
    parity_pp: int = 4
    """Stages of the parity check."""
    parity_microbatches: int = 16
    """Microbatches of the parity check."""
    parity_steps: int = 3
    """Optimizer steps per variant of the parity check."""
    jobs: int = 4
    """Notebooks executed at once (each in its own kernel, all in one event loop)."""
    notebook_timeout_s: float = 600.0
    """Per-cell time bound for a notebook; past it the notebook fails naming the cell and what it awaited."""
    logs: tuple[Path, ...] = ()
    """The user's log files or folders: when given, only the analysis notebook runs, on them (no probe, no parity)."""
    run_info: Path | None = None
    """A JSON file of run facts for ``logs`` (see pooltk.nb.logs.load_run_info)."""
    expected: Path | None = None
    """A CSV of the figures expected of ``logs`` (see pooltk.nb.expected), judged in the analysis notebook."""

    def __post_init__(self) -> None:
        from pooltk._validate import check_int

        check_int("jobs", self.jobs, low=1, fix="--jobs 1 or 2", error=ValueError)
        for p in self.logs:
            if not Path(p).exists():
                raise ValueError(
                    f"--logs: found {str(p)!r}, which does not exist; required a log file or folder. "
                    "Fix: check the path (relative paths start from the current folder)."
                )
        if self.expected is not None and not Path(self.expected).is_file():
            raise ValueError(
                f"--expected: found {str(self.expected)!r}, which is not a file; required a CSV of expected "
                "figures. Fix: check the path."
            )
        if self.run_info is not None and not Path(self.run_info).is_file():
            raise ValueError(
                f"--run-info: found {str(self.run_info)!r}, which is not a file; required a JSON file of run facts. "
                "Fix: check the path."
            )
        if not self.notebook_timeout_s > 0:
            raise ValueError(
                f"notebook timeout: found {self.notebook_timeout_s!r}; required > 0 seconds."
            )


@dataclass(kw_only=True, slots=True)
class NotebookRun:
    """One notebook, executed and converted."""

    path: Path
    """The notebook executed."""
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
    """The output folder."""
    summary_md: Path
    """``summary.md``."""
    notebooks: list[NotebookRun]
    """One per notebook, in glob order."""
    parity_equal: bool | None
    """The pp4 parity verdict; ``None`` when the summary was skipped or the run failed."""
    parity_error: str | None
    """Why the parity check failed to run, else ``None``."""
    timings: dict[str, float]
    """Seconds per phase (``probe``, ``parity``, ``tables``, ``notebooks``) and ``total``."""

    @property
    def ok(self) -> bool:
        return (
            all(n.ok for n in self.notebooks)
            and self.parity_error is None
            and self.parity_equal is not False
        )

    def to_frame(self) -> Any:  # -> pandas.DataFrame
        import pandas as pd

        return pd.DataFrame(
            [
                {
                    "notebook": n.path.name,
                    "ok": n.ok,
                    "seconds": round(n.seconds, 1),
                    "html": str(n.html) if n.html else None,
                    "figures": len(n.figures),
                    "error": n.error,
                }
                for n in self.notebooks
            ]
        )


# --------------------------------------------------------------------------- notebooks


def find_notebooks(pattern: str) -> list[Path]:
    """Notebooks matching ``pattern`` (sorted), or ValueError naming the glob and the working directory."""
    found = sorted(Path(p) for p in glob.glob(pattern) if p.endswith(".ipynb"))
    if not found:
        raise ValueError(
            f"--notebooks: found no notebook matching {pattern!r} from {Path.cwd()}; required at least "
            "one .ipynb. Fix: run from the repository root, or pass --notebooks 'path/to/*.ipynb'."
        )
    return found


def _first_error(nb: Any) -> str | None:
    import re

    for i, cell in enumerate(nb.cells):
        for out in cell.get("outputs", []):
            if out.get("output_type") == "error":
                tb = re.sub(r"\x1b\[[0-9;]*m", "", "\n".join(out.get("traceback", [])))
                return f"cell {i}: {out.get('ename')}: {out.get('evalue')}\n{tb[-1500:]}"
    return None


def inject_parameters(nb: Any, parameters: dict[str, Any]) -> None:
    """Put ``parameters`` in a cell right after the one tagged ``parameters``, with papermill.

    papermill's ``parameterize_notebook`` writes the cell (tagged ``injected-parameters``, one
    assignment per name in papermill's Python translation) and records the values in the
    notebook's metadata; ``nb`` is changed in place. A notebook without a ``parameters`` cell is
    refused (papermill would put the values at the top, before the defaults they override).
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


def _sliced_polls(channel: Any, slice_s: float = POLL_SLICE_S) -> None:
    """Make ``channel.get_msg(timeout)`` poll at most ``slice_s`` at a time until ``timeout`` (None: for ever).

    Each slice ends in pyzmq's final non-blocking check, so a reply whose wakeup the event loop
    missed is read within one slice. ``queue.Empty`` still comes at the caller's timeout.
    """
    from queue import Empty

    get_msg = channel.get_msg

    async def sliced_get_msg(timeout: float | None = None) -> dict[str, Any]:
        deadline = None if timeout is None else time.monotonic() + timeout
        while True:
            wait = (
                slice_s if deadline is None else min(slice_s, max(0.0, deadline - time.monotonic()))
            )
            try:
                return await get_msg(timeout=wait)
            except Empty:
                if deadline is not None and time.monotonic() >= deadline:
                    raise

    channel.get_msg = sliced_get_msg


class _Phase:
    """What a notebook run is waiting for, and since when (see [Note: no silent stall])."""

    def __init__(self, path: Path, cells: list[Any]) -> None:
        self.path, self.cells = path, cells
        self.what, self.cell, self.since = "the kernel to start", None, time.monotonic()

    def set(self, what: str, cell: int | None = None) -> None:
        self.what, self.cell, self.since = what, cell, time.monotonic()

    def ended(self) -> None:
        """nbclient's last hook, which runs before an error propagates: the wait under way stays the one named."""

    def describe(self) -> str:
        where = ""
        if self.cell is not None:
            first = next((ln for ln in self.cells[self.cell].source.splitlines() if ln.strip()), "")
            where = f" at cell {self.cell} ({first[:60]!r})"
        return (
            f"{self.path.name}{where}: waited {time.monotonic() - self.since:.0f} s for {self.what}"
        )

    def __repr__(self) -> str:
        return f"_Phase({self.describe()!r})"


def notebook_client(
    nb: Any, *, cwd: Path, timeout_s: float, on_notebook_start: Any = None, **options: Any
) -> Any:
    """An nbclient ``NotebookClient`` for ``nb`` (kernel ``python3``, working directory ``cwd``) whose kernel
    channels poll in slices ([Note: no silent stall]); ``options`` go to the client (hooks, ...).

    What every notebook pooltk executes runs through: ``pooltk report`` and the notebook tests.
    """
    from nbclient import NotebookClient

    def started(**kw: Any) -> None:
        for channel in (client.kc.shell_channel, client.kc.iopub_channel):
            _sliced_polls(channel)
        if on_notebook_start is not None:
            on_notebook_start(**kw)

    client = NotebookClient(
        nb,
        timeout=int(timeout_s),
        kernel_name="python3",
        resources={"metadata": {"path": str(Path(cwd).resolve())}},
        on_notebook_start=started,
        **options,
    )
    return client


async def run_notebook_async(
    path: Path,
    out: Path,
    *,
    timeout_s: float = 600.0,
    progress: Progress | None = None,
    parameters: dict[str, Any] | None = None,
) -> NotebookRun:
    """Execute ``path`` headless (working directory: its folder) and write ``<out>/<stem>.html``.

    ``POOLTK_REPORT_DIR`` must already point at the figures folder (see :func:`run_report`).
    Never raises for a failing notebook: the error is recorded and the partial HTML written.
    Several may run concurrently in one event loop (each has its own kernel); nbclient's
    clients are not safe to drive from several threads.
    """
    import nbformat
    from nbclient.exceptions import CellExecutionError
    from nbconvert import HTMLExporter

    t0 = time.perf_counter()
    nb = nbformat.read(path, as_version=4)
    if parameters:
        inject_parameters(nb, parameters)
    n_code = sum(c.cell_type == "code" for c in nb.cells)
    done = [0]
    phase = _Phase(path, nb.cells)

    def _started(**_: Any) -> None:
        phase.set("the kernel's kernel_info reply")

    def _cell_start(cell: Any, cell_index: int, **_: Any) -> None:
        phase.set("the cell's execute_reply from the kernel", cell_index)

    def _cell_done(cell: Any, cell_index: int, **_: Any) -> None:
        done[0] += 1
        phase.set("the next cell to start")
        if progress is not None:
            progress(f"  {path.name}: cell {done[0]}/{n_code}")

    client = notebook_client(
        nb,
        cwd=path.parent,
        timeout_s=timeout_s,
        on_notebook_start=_started,
        on_cell_start=_cell_start,
        on_cell_executed=_cell_done,
        on_notebook_complete=lambda **_: phase.ended(),
    )
    error: str | None = None
    logs = out / "logs"
    logs.mkdir(parents=True, exist_ok=True)
    try:
        with open(
            logs / f"{path.stem}.kernel.log", "wb"
        ) as kernel_log:  # kernel stderr (warnings, crashes)
            await client.async_execute(stderr=kernel_log)
    except CellExecutionError:
        pass  # the error output is in the notebook; read below
    except (
        Exception
    ) as exc:  # kernel died, timeout, ...: still write what ran, and say what it waited for
        error = f"{phase.describe()} (cell timeout {timeout_s:g} s): {type(exc).__name__}: {exc}"
    error = error or _first_error(
        nb
    )  # a stall or a dead kernel says so first; else the cell that raised
    html: Path | None = out / f"{path.stem}.html"
    try:
        body, _ = HTMLExporter().from_notebook_node(nb, resources={"metadata": {"name": path.stem}})
        html.write_text(body, encoding="utf-8")  # type: ignore[union-attr]
    except (
        Exception
    ) as exc:  # conversion failed: keep the execution verdict, say why there is no HTML
        html = None
        error = error or f"HTML conversion failed: {type(exc).__name__}: {exc}"
    return NotebookRun(path=path, html=html, seconds=time.perf_counter() - t0, error=error)


def run_notebook(
    path: Path,
    out: Path,
    *,
    timeout_s: float = 600.0,
    progress: Progress | None = None,
    parameters: dict[str, Any] | None = None,
) -> NotebookRun:
    """:func:`run_notebook_async` for one notebook, from synchronous code."""
    import asyncio

    return asyncio.run(
        run_notebook_async(path, out, timeout_s=timeout_s, progress=progress, parameters=parameters)
    )


def logs_parameters(config: ReportConfig) -> dict[str, Any]:
    """The analysis notebook's parameters for ``--logs`` / ``--run-info`` (absolute paths: it runs in its own folder)."""
    params: dict[str, Any] = {
        "LOG_PATHS": [str(Path(p).resolve()) for p in config.logs],
        "EXPECTED_FIGURES": [],
    }  # the notebook's inline examples are about pooltk's own runs
    if config.run_info is not None:
        params["RUN_INFO_FILE"] = str(Path(config.run_info).resolve())
    if config.expected is not None:
        params["EXPECTED_FILE"] = str(Path(config.expected).resolve())
    return params


async def _run_all(
    paths: list[Path], out: Path, figures: Path, config: ReportConfig, emit: Progress
) -> list[NotebookRun]:
    import asyncio

    gate = asyncio.Semaphore(config.jobs)
    finished = [0]

    async def one(path: Path) -> NotebookRun:
        async with gate:
            params = (
                logs_parameters(config)
                if config.logs and path.name == Path(LOGS_NOTEBOOK).name
                else None
            )
            run = await run_notebook_async(
                path, out, timeout_s=config.notebook_timeout_s, progress=emit, parameters=params
            )
        number = path.stem.split("_", 1)[0]
        run.figures = sorted(figures.glob(f"{number}_*.png"))
        finished[0] += 1
        status = "ok" if run.ok else "FAILED: " + (run.error or "").splitlines()[0]
        emit(
            f"[{finished[0]}/{len(paths)}] {path} {run.seconds:.1f} s, {len(run.figures)} figure(s): {status}"
        )
        return run

    return list(await asyncio.gather(*(one(p) for p in paths)))


# --------------------------------------------------------------------------- summary tables


def _md_table(frame: Any, floatfmt: str = "{:,.2f}") -> str:
    """A pandas frame as a GitHub markdown table (no tabulate dependency)."""
    cols = [str(c) for c in frame.columns]
    lines = ["| " + " | ".join(cols) + " |", "|" + "|".join("---" for _ in cols) + "|"]
    for row in frame.itertuples(index=False):
        cells = [floatfmt.format(v) if isinstance(v, float) else str(v) for v in row]
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _parity_section(config: ReportConfig, out: Path) -> tuple[list[str], Any, str | None]:
    """Run the pp4 parity check; return its markdown lines, the report (or ``None``) and the error."""
    from pooltk import PoolOverrunError
    from pooltk.parity import (
        ParityRankError,
        ParitySpec,
        ParityTimeoutError,
        default_variants,
        run_parity,
    )
    from pooltk.parity.experiments import Harness
    from pooltk.parity.tables import bytes_frame

    configs = [
        Harness(slack=2),
        Harness(slack=0, grad_slack=0),
        Harness(slack=2, policy="automodel"),
    ]
    spec = ParitySpec(
        pp=config.parity_pp,
        microbatches=config.parity_microbatches,
        steps=config.parity_steps,
        timeout_s=240,
        variants=default_variants(configs, frontends=("manual", "tracing")),
    )
    try:
        report = run_parity(spec)
    except (ParityRankError, ParityTimeoutError, PoolOverrunError) as exc:
        msg = f"{type(exc).__name__}: {exc}"
        return [f"## pp{spec.pp} parity\n\n**FAILED to run:** {msg}\n"], None, msg
    (out / "parity_pp4.json").write_text(json.dumps(report.to_dict(), indent=2))
    lines = [
        f"## pp{spec.pp} parity (gloo, CPU)\n",
        f"pp{spec.pp} x {spec.microbatches} microbatches x {spec.steps} steps, wall {report.wall_s:.1f} s: "
        f"**bitwise_equal = {report.bitwise_equal}**\n",
    ]
    rows = []
    for v in report.variants:
        verdict = "ref" if v.reference is None else ("yes" if v.bitwise_equal else "NO")
        rows.append(
            {
                "variant": v.name,
                "bitwise": verdict,
                "max_abs_dparam": ""
                if v.params_max_abs_diff is None
                else f"{v.params_max_abs_diff:.3g}",
                "median_step_ms": round(v.median_step_time_s * 1e3, 1),
            }
        )
    import pandas as pd

    lines += [_md_table(pd.DataFrame(rows), "{:,.1f}"), ""]
    buffers = bytes_frame(report)
    buffers.to_csv(out / "buffers_pp4.csv", index=False)
    lines += [
        "### Receive buffers per stage, measured (first pooled variant: tight slack 2, grad slack 1)\n",
        _md_table(buffers),
        "",
    ]
    return lines, report, None


def _memory_section(out: Path) -> list[str]:
    from pooltk.studies.kimi_k3.presets import get_preset

    preset = get_preset("kimi-k3-gb200-2k-calibrated")
    model = preset.model()
    frame = model.per_stage_frame("gib")
    cols = [
        "stage",
        "stock_forward_sets",
        "stock_grad_sets",
        "stock_gib",
        "automodel_gib",
        "tight_gib",
        "live_set_gib",
        "saved_gib",
    ]
    frame[cols].to_csv(out / "memory_kimi_k3_2k.csv", index=False)
    return [
        f"## Per-stage receive buffers, {preset.name} (modelled)\n",
        f"{preset.shape.describe()}; pool {model.describe()}; boundary {preset.boundary.describe()}. "
        f"GiB = 2**30 B; saved = stock - {model.policy}.\n",
        _md_table(frame[cols]),
        "",
    ]


# --------------------------------------------------------------------------- the job


def _printer(stream: Any = None) -> Progress:
    """Progress lines; on a terminal, cell counters overwrite one line."""
    stream = stream or sys.stdout
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


def run_report(
    config: ReportConfig = ReportConfig(), *, progress: Progress | None = None
) -> ReportResult:
    """Run the main job (see the module docstring) and return what it produced.

    The pp4 parity check (its ranks are subprocesses) runs in a background thread while the
    notebooks execute, ``config.jobs`` at a time, in one event loop.
    """
    import asyncio

    from pooltk import probe
    from pooltk.parity import format_report

    emit = progress or _printer()
    t_start = time.perf_counter()
    timings: dict[str, float] = {}
    if config.logs:  # the user's logs: the analysis notebook alone, on them
        from dataclasses import replace

        if not Path(LOGS_NOTEBOOK).is_file():
            raise ValueError(
                f"--logs: found no {LOGS_NOTEBOOK} under {Path.cwd()}; required the analysis notebook. "
                "Fix: run pooltk report from the repository root."
            )
        config = replace(config, notebooks=LOGS_NOTEBOOK, summary=False)
        emit(
            f"[logs] {', '.join(str(p) for p in config.logs)}"
            + (f"; run facts from {config.run_info}" if config.run_info else "")
            + (f"; expected figures from {config.expected}" if config.expected else "")
        )
    paths = find_notebooks(config.notebooks)
    out = config.out
    figures = out / "figures"
    figures.mkdir(parents=True, exist_ok=True)
    md = ["# pooltk report\n"]
    parity_lines: list[str] = []
    parity_report: Any = None
    parity_error: str | None = None
    with ThreadPoolExecutor(max_workers=1) as background:
        parity_future = None
        if config.summary:
            t0 = time.perf_counter()
            p = probe()
            emit(
                f"[probe] torch {p.torch_version}: layout {p.layout or 'none'}; install would "
                f"{'work' if p.installed else 'not work'} ({p.reason})"
            )
            md += [
                "## Probe\n",
                f"- torch: {p.torch_version}",
                f"- layout: {p.layout or 'none recognised'}",
                f"- install would work: {p.installed}",
                f"- why: {p.reason}",
                "",
            ]
            timings["probe"] = time.perf_counter() - t0
            emit(
                f"[parity] pp{config.parity_pp} x {config.parity_microbatches} microbatches x "
                f"{config.parity_steps} steps: stock vs tight s2 / tight s0 / automodel s2, manual and tracing "
                "frontends (in the background)"
            )
            t_parity = time.perf_counter()
            parity_future = background.submit(_parity_section, config, out)
        t0 = time.perf_counter()
        emit(f"[notebooks] {len(paths)} notebook(s), {config.jobs} at a time; figures -> {figures}")
        old = os.environ.get("POOLTK_REPORT_DIR")
        os.environ["POOLTK_REPORT_DIR"] = str(figures.resolve())
        try:
            runs = asyncio.run(_run_all(paths, out, figures, config, emit))
        finally:
            if old is None:
                os.environ.pop("POOLTK_REPORT_DIR", None)
            else:
                os.environ["POOLTK_REPORT_DIR"] = old
        timings["notebooks"] = time.perf_counter() - t0
        if parity_future is not None:
            parity_lines, parity_report, parity_error = parity_future.result()
            timings["parity"] = (
                parity_report.wall_s
                if parity_report is not None
                else time.perf_counter() - t_parity
            )
            if parity_report is not None:
                print(format_report(parity_report))
            else:
                emit(f"[parity] FAILED: {parity_error}")
    if config.summary:
        t0 = time.perf_counter()
        md += parity_lines
        md += _memory_section(out)
        timings["tables"] = time.perf_counter() - t0
        emit(f"[tables] buffers_pp4.csv, memory_kimi_k3_2k.csv ({timings['tables']:.1f} s)")
    timings["total"] = time.perf_counter() - t_start
    md += [
        "## Notebooks\n",
        "| notebook | status | seconds | HTML | figures |",
        "|---|---|---|---|---|",
    ]
    for r in runs:
        html = f"[{r.html.name}]({r.html.name})" if r.html else "-"
        figs = ", ".join(f"[{f.name}](figures/{f.name})" for f in r.figures) or "-"
        status = "ok" if r.ok else "FAILED: " + (r.error or "").splitlines()[0].replace("|", "/")
        md.append(f"| {r.path.name} | {status} | {r.seconds:.1f} | {html} | {figs} |")
    shots = sorted((out / "screenshots").glob("*.png"))
    if shots:
        md += ["", "## Browser screenshots (from the JupyterLab test)\n"] + [
            f"- [{s.name}](screenshots/{s.name})" for s in shots
        ]
    md += [
        "",
        "## Wall time\n",
        ", ".join(f"{k} {v:.1f} s" for k, v in timings.items())
        + " (parity runs alongside the notebooks)",
        "",
    ]
    summary = out / "summary.md"
    summary.write_text("\n".join(md), encoding="utf-8")
    parity_equal = parity_report.bitwise_equal if parity_report is not None else None
    return ReportResult(
        out=out,
        summary_md=summary,
        notebooks=runs,
        parity_equal=parity_equal,
        parity_error=parity_error,
        timings=timings,
    )


def describe(result: ReportResult) -> str:
    """The closing lines: where everything went and the wall time."""
    out = result.out
    lines = [f"summary   {result.summary_md}"]
    for r in result.notebooks:
        lines.append(
            f"html      {r.html or '(not written)'} ({r.seconds:.1f} s){'' if r.ok else '  <- FAILED'}"
        )
    figs = sorted((out / "figures").glob("*.png"))
    lines.append(f"figures   {out / 'figures'}/ ({len(figs)} PNG)")
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
        said.append(
            "pp4 gloo parity pooled vs stock "
            + ("bitwise equal" if result.parity_equal else "NOT equal")
        )
    if result.parity_error is not None:
        said.append("the parity check failed to run")
    return (
        f"Start reading at {result.summary_md}: "
        + ", ".join(said)
        + f"; one HTML per notebook in {result.out}/."
    )
