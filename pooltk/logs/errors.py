"""The one error the log readers raise for unreadable input: :class:`LogFormatError`.

Every message names the file, the line (1-based; 0 when the problem is the file as a whole),
what was found, what was required, and what to do.
"""

from __future__ import annotations

__all__ = ["LogFormatError"]

_EXCERPT_CHARS = 120


def _excerpt(text: str) -> str:
    """A short, printable excerpt of a log line for an error message."""
    clean = "".join(ch if ch.isprintable() else "\ufffd" for ch in text.rstrip("\r\n"))
    if len(clean) > _EXCERPT_CHARS:
        clean = clean[:_EXCERPT_CHARS] + f"... ({len(clean)} chars)"
    return clean


class LogFormatError(ValueError):
    """A log file (or one line of it) cannot be read as any supported format.

    Attributes ``path``, ``line`` (1-based, 0 for the whole file), ``found``, ``required`` and
    ``fix`` carry the parts of the message for programs; ``str(err)`` is the whole sentence.
    """

    def __init__(
        self, path: str, line: int, *, found: str, required: str, fix: str, text: str | None = None
    ) -> None:
        self.path = str(path)
        self.line = int(line)
        self.found = found
        self.required = required
        self.fix = fix
        self.text = None if text is None else _excerpt(text)
        where = f"{self.path}:{self.line}" if self.line > 0 else self.path
        shown = f" [line: {self.text!r}]" if self.text is not None else ""
        super().__init__(f"{where}: found {found}{shown}; required {required}. Fix: {fix}")
