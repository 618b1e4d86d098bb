"""Drive a real JupyterLab in Debian's headless Chromium with Playwright; independent of pooltk.

- :func:`find_chromium` -- the system browser (``/usr/bin/chromium``, or ``$POOLTK_CHROMIUM``);
  Playwright never downloads one.
- :class:`JupyterLabServer` -- JupyterLab on 127.0.0.1, a free port, no token, with its
  own settings: an ``overrides.json`` that turns off the news / update pop-up, autosave
  (the committed notebooks must never get outputs written back) and cell windowing (every
  cell stays in the page), a private workspaces folder (no restored layout) and
  ``expose_app_in_browser`` so tests can read the notebook model the kernel filled.
  Stopping it shuts its kernels down through the REST API, then ends the server's
  process session.
- :func:`chromium_page` -- a Playwright page in that browser, closed afterwards.
- :class:`LabNotebook` -- open a notebook, wait for the kernel to be idle, Run All from the
  menu, wait for every code cell to finish, read error outputs and execution counts from
  the notebook model, move an ipywidgets slider with the keyboard, take screenshots.

[Note: what the assertions read]
Outputs are read from the notebook model in the page (``window.jupyterapp``), i.e. what
the kernel sent, not from pixels. Clicking Run All before the kernel reports idle can hang
here, so :meth:`LabNotebook.open` waits for idle first.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

__all__ = [
    "CHROMIUM_ARGS",
    "BrowserUnavailable",
    "JupyterLabServer",
    "LabNotebook",
    "browser_required",
    "chromium_page",
    "find_chromium",
    "free_port",
]

CHROMIUM_ARGS: tuple[str, ...] = (
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--disable-quic",
)
"""Flags the system Chromium runs with here (no sandbox in containers, no network chatter)."""

OVERRIDES: dict[str, dict[str, Any]] = {
    "@jupyterlab/apputils-extension:notification": {"fetchNews": "false", "checkForUpdates": False},
    "@jupyterlab/docmanager-extension:plugin": {"autosave": False},
    "@jupyterlab/notebook-extension:tracker": {"windowingMode": "none"},
}
"""JupyterLab settings overrides written to the server's private ``overrides.json``."""


class BrowserUnavailable(RuntimeError):
    """The browser (or Playwright, or JupyterLab) cannot be had on this machine."""


def browser_required() -> bool:
    """True when a missing browser must fail the tests: ``CI`` or ``POOLTK_REQUIRE_BROWSER=1``."""

    def truthy(name: str) -> bool:
        return os.environ.get(name, "").strip().lower() not in ("", "0", "false", "no")

    return truthy("CI") or truthy("POOLTK_REQUIRE_BROWSER")


def find_chromium() -> Path:
    """The system Chromium, or :class:`BrowserUnavailable` saying how to install it."""
    path = Path(os.environ.get("POOLTK_CHROMIUM", "/usr/bin/chromium"))
    if not (path.is_file() and os.access(path, os.X_OK)):
        raise BrowserUnavailable(
            f"Chromium not found at {path}; required Debian's chromium package. "
            "Fix: scripts/install_browser (apt-get install -y chromium chromium-driver), "
            "or set POOLTK_CHROMIUM to a Chromium binary."
        )
    return path


def free_port() -> int:
    """A TCP port on 127.0.0.1 that was free a moment ago."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class JupyterLabServer:
    """JupyterLab serving ``root_dir`` on 127.0.0.1 for one test session. Use as a context
    manager."""

    def __init__(
        self,
        root_dir: Path,
        *,
        python: str = sys.executable,
        startup_timeout_s: float = 90.0,
        env: dict[str, str] | None = None,
    ) -> None:
        self.root_dir = Path(root_dir).resolve()
        self.python = python
        self.startup_timeout_s = startup_timeout_s
        self.env = dict(env or {})
        """Variables added to the server's environment (its kernels inherit them)."""
        self.port = 0
        self.proc: subprocess.Popen[bytes] | None = None
        self._tmp: Path | None = None
        self._log: Any = None

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    @property
    def log_path(self) -> Path:
        assert self._tmp is not None
        return self._tmp / "jupyterlab.log"

    def log_tail(self, n: int = 4000) -> str:
        try:
            return self.log_path.read_text(errors="replace")[-n:]
        except (OSError, AssertionError):
            return ""

    def __enter__(self) -> JupyterLabServer:
        self.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()

    def start(self) -> None:
        self._tmp = Path(tempfile.mkdtemp(prefix="pooltk-lab-"))
        dirs = {
            name: self._tmp / name
            for name in ("settings", "app-settings", "workspaces", "runtime", "config")
        }
        for d in dirs.values():
            d.mkdir()
        (dirs["app-settings"] / "overrides.json").write_text(json.dumps(OVERRIDES, indent=2))
        env = dict(
            os.environ,
            JUPYTERLAB_SETTINGS_DIR=str(dirs["settings"]),
            JUPYTERLAB_WORKSPACES_DIR=str(dirs["workspaces"]),
            JUPYTER_RUNTIME_DIR=str(dirs["runtime"]),
            JUPYTER_CONFIG_DIR=str(dirs["config"]),
            PYTHONUNBUFFERED="1",
        )
        env.update(self.env)
        env.pop("JUPYTER_TOKEN", None)
        self.port = free_port()
        cmd = [
            self.python,
            "-m",
            "jupyterlab",
            "--no-browser",
            "--ServerApp.ip=127.0.0.1",
            f"--ServerApp.port={self.port}",
            "--ServerApp.port_retries=0",
            "--IdentityProvider.token=",
            "--ServerApp.password=",
            f"--ServerApp.root_dir={self.root_dir}",
            f"--LabApp.app_settings_dir={dirs['app-settings']}",
            f"--LabApp.user_settings_dir={dirs['settings']}",
            f"--LabApp.workspaces_dir={dirs['workspaces']}",
            "--LabApp.expose_app_in_browser=True",
            "--LabApp.check_for_updates_class=jupyterlab.NeverCheckForUpdate",
            "--LabApp.extension_manager=readonly",  # no PyPI lookups from the extension manager
        ]
        if hasattr(os, "geteuid") and os.geteuid() == 0:  # containers often run as root
            cmd.append("--allow-root")
        self._log = open(self.log_path, "wb")
        self.proc = subprocess.Popen(
            cmd,
            stdout=self._log,
            stderr=subprocess.STDOUT,
            stdin=subprocess.DEVNULL,
            env=env,
            cwd=self.root_dir,
            start_new_session=True,
        )
        deadline = time.monotonic() + self.startup_timeout_s
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise BrowserUnavailable(
                    f"JupyterLab exited with {self.proc.returncode} while starting:\n"
                    f"{self.log_tail()}"
                )
            with contextlib.suppress(OSError, urllib.error.URLError):
                with urllib.request.urlopen(f"{self.url}/api/status", timeout=2) as r:
                    if r.status == 200:
                        return
            time.sleep(0.25)
        self.stop()
        raise BrowserUnavailable(
            f"JupyterLab did not answer /api/status within {self.startup_timeout_s:g} s:\n"
            f"{self.log_tail()}"
        )

    def _api(self, method: str, path: str) -> Any:
        req = urllib.request.Request(f"{self.url}{path}", method=method)
        with urllib.request.urlopen(req, timeout=10) as r:
            body = r.read()
        return json.loads(body) if body else None

    def kernels(self) -> list[dict[str, Any]]:
        """The kernels the server runs (REST ``/api/kernels``)."""
        return list(self._api("GET", "/api/kernels") or [])

    def stop(self) -> None:
        """Shut the kernels down, end the server (SIGTERM, then SIGKILL of its session), remove the
        temp dirs."""
        if self.proc is not None and self.proc.poll() is None:
            with contextlib.suppress(OSError, urllib.error.URLError, ValueError):
                for k in self.kernels():
                    self._api("DELETE", f"/api/kernels/{k['id']}")
            with contextlib.suppress(ProcessLookupError):
                os.killpg(self.proc.pid, signal.SIGTERM)
            try:
                self.proc.wait(timeout=15)
            except subprocess.TimeoutExpired:
                with contextlib.suppress(ProcessLookupError):
                    os.killpg(self.proc.pid, signal.SIGKILL)
                self.proc.wait(timeout=10)
        if self._log is not None:
            self._log.close()
            self._log = None
        if self._tmp is not None:
            shutil.rmtree(self._tmp, ignore_errors=True)
            self._tmp = None


@contextlib.contextmanager
def chromium_page(*, width: int = 1440, height: int = 1800) -> Iterator[Any]:
    """A Playwright page in the system Chromium (headless), closed on exit."""
    chromium = find_chromium()
    try:
        from playwright.sync_api import sync_playwright
    except ImportError as exc:
        raise BrowserUnavailable(
            f"playwright (Python) is not importable ({exc}). Fix: pip install playwright "
            "(no 'playwright install': the system Chromium is used)."
        ) from exc
    with sync_playwright() as p:
        try:
            browser = p.chromium.launch(
                executable_path=str(chromium), args=list(CHROMIUM_ARGS), headless=True
            )
        except Exception as exc:  # playwright raises its own Error type
            raise BrowserUnavailable(
                f"Chromium at {chromium} did not start under Playwright: {exc}"
            ) from exc
        try:
            page = browser.new_page(viewport={"width": width, "height": height})
            yield page
        finally:
            browser.close()


# JavaScript run in the page against the exposed JupyterLab app (see
# [Note: what the assertions read]).
_JS_STATE = """
(path) => {
  const app = window.jupyterapp;
  if (!app) return {ready: false, why: 'window.jupyterapp missing'};
  let w = null;
  for (const x of app.shell.widgets('main')) {
    if (x.context && x.context.path === path && x.content && x.content.model) { w = x; break; }
  }
  if (!w || !w.sessionContext) return {ready: false, why: 'no notebook panel for ' + path};
  const kernel = w.sessionContext.session && w.sessionContext.session.kernel;
  const cells = [];
  const model = w.content.model;
  for (let i = 0; i < model.cells.length; i++) {
    const c = model.cells.get(i);
    const j = c.toJSON();
    const outputs = (j.outputs || []).map(o => ({
      type: o.output_type, ename: o.ename || null, evalue: o.evalue || null,
      text: o.output_type === 'stream' ? String(o.text).slice(0, 2000) : null}));
    cells.push({type: c.type, \
count: j.execution_count === undefined ? null : j.execution_count, outputs: outputs});
  }
  return {ready: true, kernel: kernel ? kernel.status : null, cells: cells};
}
"""


class LabNotebook:
    """One notebook open in JupyterLab, driven like a user would (menus, keyboard)."""

    def __init__(self, page: Any, server: JupyterLabServer, name: str) -> None:
        self.page, self.server, self.name = page, server, name

    def state(self) -> dict[str, Any]:
        """Kernel status and, per cell, type, execution count and outputs, from the notebook
        model."""
        return self.page.evaluate(_JS_STATE, self.name)

    def _wait(
        self, what: str, predicate: Any, timeout_s: float, poll_s: float = 0.5
    ) -> dict[str, Any]:
        deadline = time.monotonic() + timeout_s
        last: dict[str, Any] = {}
        while time.monotonic() < deadline:
            last = self.state()
            if last.get("ready") and predicate(last):
                return last
            time.sleep(poll_s)
        raise TimeoutError(
            f"{self.name}: timed out after {timeout_s:g} s waiting for {what}; last state: "
            f"kernel={last.get('kernel')} why={last.get('why')} counts="
            f"{[c['count'] for c in last.get('cells', []) if c['type'] == 'code']}\n"
            f"server log:\n{self.server.log_tail(2000)}"
        )

    def open(self, *, timeout_s: float = 120.0) -> None:
        """Open the notebook and wait until its kernel is idle (status bar and model agree)."""
        # ?reset: start from an empty workspace, so no notebook of an earlier test is restored next
        # to it
        self.page.goto(
            f"{self.server.url}/lab/tree/{self.name}?reset", wait_until="domcontentloaded"
        )
        self.page.locator(".jp-NotebookPanel").first.wait_for(
            state="visible", timeout=timeout_s * 1000
        )
        self._wait("the kernel to be idle", lambda s: s["kernel"] == "idle", timeout_s)
        self.page.locator("#jp-main-statusbar").get_by_text(
            re.compile(r"\|\s*Idle")
        ).first.wait_for(timeout=timeout_s * 1000)

    def run_all(self, *, timeout_s: float = 300.0) -> dict[str, Any]:
        """Run > Run All Cells from the menu bar; wait until every code cell has run and the kernel
        is idle."""
        self.page.locator(".lm-MenuBar-itemLabel", has_text=re.compile(r"^Run$")).first.click()
        self.page.locator(
            ".lm-Menu-itemLabel", has_text=re.compile(r"^Run All Cells$")
        ).first.click()

        def finished(s: dict[str, Any]) -> bool:
            codes = [c for c in s["cells"] if c["type"] == "code"]
            return (
                s["kernel"] == "idle"
                and bool(codes)
                and all(isinstance(c["count"], int) for c in codes)
            )

        return self._wait("Run All to finish", finished, timeout_s)

    def close(self) -> None:
        """Shut this notebook's kernel down (REST: delete its session); the page is left as it
        is."""
        for session in self.server._api("GET", "/api/sessions") or []:
            if session.get("path") == self.name:
                self.server._api("DELETE", f"/api/sessions/{session['id']}")

    def error_outputs(self) -> list[str]:
        """``ename: evalue`` of every error output in the notebook model."""
        return [
            f"cell {i}: {o['ename']}: {o['evalue']}"
            for i, c in enumerate(self.state()["cells"])
            for o in c["outputs"]
            if o["type"] == "error"
        ]

    def slider(self, label: str) -> Any:
        """The ipywidgets slider whose description is exactly ``label``."""
        return self.page.locator(".widget-hslider").filter(
            has=self.page.locator(
                ".widget-label", has_text=re.compile(rf"^\s*{re.escape(label)}\s*$")
            )
        )

    def nudge_slider(self, label: str, key: str = "ArrowRight") -> None:
        """Focus the slider's handle and press ``key`` once, as a keyboard user would."""
        sliders = self.slider(label)
        if sliders.count() != 1:
            raise AssertionError(
                f"{self.name}: expected one slider labelled {label!r}, found {sliders.count()}"
            )
        handle = sliders.first.locator(".noUi-handle").first
        handle.scroll_into_view_if_needed()
        handle.focus()
        self.page.keyboard.press(key)

    def widget_output(self) -> Any:
        """The last ipywidgets Output area (an ``interactive_output``)."""
        return self.page.locator(".widget-output").last

    def widget_text_and_image(self) -> tuple[str, str | None]:
        """Text and the first image ``src`` shown in the last widget Output area."""
        out = self.widget_output()
        img = out.locator("img")
        return out.inner_text(), (img.first.get_attribute("src") if img.count() else None)

    def widget_figure_shown(self, *, timeout_s: float = 30.0) -> dict[str, Any]:
        """Wait until the first image of the last widget Output area is decoded and painted;
        describe it.

        Returns ``complete``, ``natural_width``, ``height`` (its box on the page, px) and ``ink``
        (the share of its on-screen pixels that are not background white, from an element
        screenshot): an image that is in the page but blank on screen (not decoded yet, zero-sized,
        or covered) has ``ink`` near 0.
        """
        import io

        from PIL import Image

        img = self.widget_output().locator("img").first
        img.scroll_into_view_if_needed()
        deadline = time.monotonic() + timeout_s
        info: dict[str, Any] = {}
        while time.monotonic() < deadline:
            info = img.evaluate(
                "e => e.decode().then(() => ({complete: e.complete, natural_width: e.naturalWidth, "
                "height: e.getBoundingClientRect().height}), () => ({complete: false, "
                "natural_width: 0, height: 0}))"
            )
            if (
                info.get("complete")
                and info.get("natural_width", 0) > 0
                and info.get("height", 0) > 0
            ):
                break
            time.sleep(0.3)
        self.page.wait_for_timeout(300)
        shot = Image.open(io.BytesIO(img.screenshot())).convert("L")
        histogram = shot.histogram()  # 256 grey levels
        info["ink"] = sum(histogram[:235]) / max(sum(histogram), 1)
        return info

    def screenshot(self, path: Path, *, at: Any = None) -> Path:
        """Viewport screenshot, optionally scrolled so that locator ``at`` is in view."""
        if at is not None:
            at.scroll_into_view_if_needed()
            self.page.wait_for_timeout(300)
        path.parent.mkdir(parents=True, exist_ok=True)
        self.page.screenshot(path=str(path))
        return path
