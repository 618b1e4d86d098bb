"""Every ``pooltk ...`` command shown in a code block of README.md or docs/*.md runs, and exits 0.

The commands are read from the documents themselves, so a renamed flag or preset fails here
instead of in a reader's terminal. Synopses (``PATH...``, ``[--flag]``) belong in ``text``
blocks, which are not run.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
SHELL_FENCES = {"", "bash", "sh", "shell", "console"}
POOLTK = Path(sys.executable).with_name("pooltk")


@dataclass(frozen=True, slots=True)
class Command:
    where: str
    """``file:line`` of the command in its document."""
    argv: tuple[str, ...]
    """The command as a shell would split it, comments dropped."""


def documented_commands(paths: list[Path] = DOCS) -> list[Command]:
    """Lines starting with ``pooltk `` (after an optional ``$ ``) inside shell code fences."""
    out = []
    for path in paths:
        fence: str | None = None
        for lineno, line in enumerate(path.read_text().splitlines(), 1):
            m = re.match(r"^\s*```(\w*)", line)
            if m:
                fence = None if fence is not None else m.group(1).lower()
                continue
            if fence not in SHELL_FENCES:
                continue
            text = re.sub(r"^\s*\$\s+", "", line).strip()
            if text.startswith("pooltk "):
                out.append(
                    Command(
                        f"{path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name}"
                        f":{lineno}",
                        tuple(shlex.split(text, comments=True)),
                    )
                )
    return out


COMMANDS = documented_commands()


def test_the_documents_show_commands_to_run() -> None:
    files = {c.where.split(":")[0] for c in COMMANDS}
    assert "README.md" in files, "README.md shows no pooltk command in a code block"
    assert len(COMMANDS) >= 8, [c.where for c in COMMANDS]


def test_the_reader_finds_commands_only_inside_shell_fences(tmp_path: Path) -> None:
    doc = tmp_path / "doc.md"
    doc.write_text(
        "pooltk outside\n```bash\n$ pooltk probe  # a comment\n```\n"
        "```text\npooltk logs PATH...\n```\n"
        "```\npooltk memory --list-presets\n```\n"
    )
    got = documented_commands([doc])
    assert [c.argv for c in got] == [("pooltk", "probe"), ("pooltk", "memory", "--list-presets")]


@pytest.mark.parametrize("command", COMMANDS, ids=[c.where for c in COMMANDS])
def test_documented_command_runs(command: Command) -> None:
    env = {k: v for k, v in os.environ.items() if k != "POOLTK_REPORT_DIR"}
    out = subprocess.run(
        [str(POOLTK), *command.argv[1:]],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=900,
        stdin=subprocess.DEVNULL,
    )
    assert out.returncode == 0, (
        f"{command.where}: `{shlex.join(command.argv)}` exited {out.returncode}\n"
        f"stdout:\n{out.stdout[-2000:]}\nstderr:\n{out.stderr[-3000:]}"
    )
