"""A log file's text as its writer meant it: decompressed, decoded, unwrapped from its envelope.

[Note: what a file is before it is a log]
- *Compression* is told by magic bytes, never by the name: gzip (``1f 8b``, concatenated members
  too), bzip2 (``BZh``), xz (``fd 37 7a 58 5a 00``) and zstd (``28 b5 2f fd``, through the
  ``zstandard`` package). Other archives (zip, 7z, lz4, tar) are refused with their name.
- *Encoding*: a UTF-8 BOM is dropped; UTF-16 (LE or BE) is decoded by its BOM; otherwise UTF-8 with
  undecodable bytes replaced. A file with NUL bytes and no BOM is refused as binary.
- *Envelopes*: a JSON record per line (or one JSON array / ``{"events": [...]}``) that wraps each
  log line is unwrapped, and its fields become decoration columns:

  - docker's ``json-file`` driver: ``{"log": "...\\n", "stream": "stdout", "time": "..."}`` (a
    line longer than 16 KiB comes in several records; only the last ends in a newline, so the
    ``log`` values are concatenated);
  - CloudWatch Logs JSON (``aws logs get-log-events`` / ``filter-log-events`` output, or one
    event per line): ``message``, ``timestamp`` (ms since the epoch), ``logStreamName`` (host);
  - GCP Cloud Logging (``gcloud logging read --format=json``, or a sink's JSONL): ``textPayload``
    or ``jsonPayload.message``, ``timestamp``, ``resource.labels.pod_name`` / ``instance_id``.

  CloudWatch and GCP exports are put in time order (gcloud lists newest first). Line numbers are
  then those of the unwrapped text.
- Line ends: CRLF becomes LF; colour escapes are removed.
"""

from __future__ import annotations

import bz2
import contextlib
import datetime
import json
import lzma
import re
import zlib
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from pooltk.logs.errors import LogFormatError

__all__ = ["MAX_BYTES", "Source", "load", "unwrap"]

MAX_BYTES = 1 << 30
"""Largest file (after decompression) read in one piece: 1 GiB. The reader holds a file's text, its
lines and its rows at once (several times the file's size), so a larger file is refused with a
fix."""

_ANSI_RE = re.compile(rb"\x1b\[[0-9;?]*[ -/]*[@-~]")

_REFUSED_MAGIC = (
    (b"PK\x03\x04", "a zip archive", "unzip it and read the log inside"),
    (b"7z\xbc\xaf\x27\x1c", "a 7z archive", "extract it (7z x) and read the log inside"),
    (b"\x04\x22\x4d\x18", "lz4-compressed data", "decompress it (lz4 -d FILE) and read the text"),
    (b"\x89HDF", "an HDF5 file", "point at the text log, not a checkpoint or trace"),
)


@dataclass(kw_only=True, slots=True)
class Source:
    """A file's text and what its container said about each line."""

    data: bytes
    """The log text as UTF-8 (LF line ends, no BOM, no colour); undecodable bytes are replaced when
    read."""
    compression: str | None = None
    """'gzip', 'bz2', 'xz', 'zstd' or None."""
    encoding: str = "utf-8"
    """How the bytes were decoded."""
    envelope: str | None = None
    """'docker', 'cloudwatch', 'gcp' or None."""
    columns: dict[str, list[Any]] = field(default_factory=dict)
    """Per line of the text, decoration columns the envelope gave ('time', 'host', 'pod',
    'stream')."""

    @property
    def text(self) -> str:
        """The text decoded (undecodable bytes replaced)."""
        return self.data.decode("utf-8", errors="replace")


def _fail(path: Path, found: str, required: str, fix: str) -> LogFormatError:
    return LogFormatError(str(path), 0, found=found, required=required, fix=fix)


def _too_big(path: Path, size: int, limit: int, what: str) -> LogFormatError:
    return _fail(
        path,
        f"{what} of {size / 2**30:.2f} GiB",
        f"at most {limit / 2**30:.2f} GiB per file",
        "split it at line boundaries (split -C 512M FILE part_) and read the parts as one folder, "
        "or pass max_bytes= if the machine has the memory",
    )


_STREAMS = (
    (b"\x1f\x8b", "gzip", lambda: zlib.decompressobj(16 + zlib.MAX_WBITS)),
    (b"BZh", "bz2", bz2.BZ2Decompressor),
    (b"\xfd7zXZ\x00", "xz", lzma.LZMADecompressor),
    (b"\x28\xb5\x2f\xfd", "zstd", None),  # read by the zstandard package (_zstd)
)
"""Compressions by magic bytes: magic, name, a new standard-library decompressor (zstd: none)."""


def _decompress(path: Path, data: bytes, max_bytes: int) -> tuple[bytes, str | None]:
    """(plain bytes, the compression found by magic bytes)."""
    for magic, what, fix in _REFUSED_MAGIC:
        if data.startswith(magic):
            required = "a text log, or one compressed with gzip, bzip2, xz or zstd"
            raise _fail(path, what, required, fix)
    _, kind, new = next((s for s in _STREAMS if data.startswith(s[0])), (None, None, None))
    if kind is None:
        return data, None
    try:
        if new is None:
            out = _zstd(path, data, max_bytes)
        else:
            out = _inflate(data, new, max_bytes, members=kind == "gzip")
    except LogFormatError:
        raise
    except Exception as err:  # noqa: BLE001 - each library has its own error type for damaged input
        raise _fail(
            path,
            f"a damaged {kind} file ({err})",
            f"a complete {kind} file",
            f"re-copy the file, or decompress what is left ({kind} -dc) and read the plain text",
        ) from None
    if len(out) > max_bytes:
        raise _too_big(path, len(out), max_bytes, "decompressed content of more than")
    return out, kind


def _inflate(data: bytes, new: Any, max_bytes: int, *, members: bool) -> bytes:
    """``data`` decompressed by ``new()`` decompressors, at most ``max_bytes + 1`` bytes
    (``members``: every concatenated member, as ``cat a.gz b.gz`` makes)."""
    out = b""
    while data and len(out) <= max_bytes:
        unpack = new()
        out += unpack.decompress(data, max_bytes + 1 - len(out))
        if len(out) <= max_bytes and not unpack.eof:
            raise EOFError("the compressed stream ends before its end marker")
        data = unpack.unused_data if members else b""
    return out


def _zstd(path: Path, data: bytes, max_bytes: int) -> bytes:
    """``data`` decompressed by the ``zstandard`` package, at most ``max_bytes + 1`` bytes."""
    try:
        import zstandard
    except ImportError:
        raise _fail(
            path,
            "zstd-compressed data and no 'zstandard' package",
            "the zstandard package to read .zst",
            "pip install zstandard (it is in pooltk's lab extra), or zstd -d FILE",
        ) from None
    reader = zstandard.ZstdDecompressor().stream_reader(data, read_across_frames=True)
    return reader.read(max_bytes + 1)


def _decode(path: Path, data: bytes) -> tuple[bytes, str]:
    """(UTF-8 bytes, the encoding found); UTF-8 is checked byte-wise later (undecodable bytes
    replaced)."""
    if data[:3] == b"\xef\xbb\xbf":
        return data[3:], "utf-8-sig"
    if data[:2] in (b"\xff\xfe", b"\xfe\xff"):
        enc = "utf-16-le" if data[:2] == b"\xff\xfe" else "utf-16-be"
        return data[2:].decode(enc, errors="replace").encode("utf-8", "surrogatepass"), enc
    head = data[:4096]
    controls = sum(
        head.count(bytes([c])) for c in (*range(0, 9), 11, 12, *range(14, 27), *range(28, 32))
    )
    if head.count(b"\x00") > len(head) // 8 or controls > len(head) // 10:
        what = (
            "UTF-16 text without a byte-order mark"
            if head[1::2].count(b"\x00") > len(head) // 3
            else "binary data"
        )
        raise _fail(
            path,
            what,
            "a text log (UTF-8, or UTF-16 with its BOM)",
            "convert it (iconv -f UTF-16LE -t UTF-8 FILE) or point at the text log",
        )
    return data, "utf-8"


def load(path: Path, max_bytes: int = MAX_BYTES) -> Source:
    """The file's text; see [Note: what a file is before it is a log]."""
    try:
        size = path.stat().st_size
        if size > max_bytes:
            raise _too_big(path, size, max_bytes, "a file")
        data = path.read_bytes()
    except OSError as err:
        raise _fail(
            path,
            f"an unreadable file ({err.strerror or err})",
            "a readable log file",
            "check the path and its permissions",
        ) from None
    data, compression = _decompress(path, data, max_bytes)
    data, encoding = _decode(path, data)
    src = unwrap(data)
    if b"\r" in src.data:
        src.data = src.data.replace(b"\r\n", b"\n")
    if b"\x1b" in src.data:
        src.data = _ANSI_RE.sub(b"", src.data)
    src.compression, src.encoding = compression, encoding
    return src


# --------------------------------------------------------------------------- envelopes


def _first_json(text: str) -> Any:
    """The JSON value on the first line of ``text`` (of the whole text where that line opens a
    pretty-printed export), or None."""
    line = text.lstrip().split("\n", 1)[0]
    if line[:1] not in ("{", "["):
        return None
    with contextlib.suppress(ValueError):
        return json.loads(line)
    if line[:1] == "[" or line.strip() == "{":
        with contextlib.suppress(ValueError):
            return json.loads(text)
    return None


def _kind(record: Any) -> str | None:
    if not isinstance(record, dict):
        return None
    if isinstance(record.get("log"), str) and ("stream" in record or "time" in record):
        return "docker"
    if "textPayload" in record or isinstance(record.get("jsonPayload"), dict):
        return "gcp"
    if isinstance(record.get("message"), str) and isinstance(record.get("timestamp"), (int, float)):
        return "cloudwatch"
    return None


def _records(text: str, first: Any) -> list[Any]:
    """The envelope's records: one JSON value per line, or a whole-text array /
    {"events": [...]}."""
    if isinstance(first, list) or (
        isinstance(first, dict) and isinstance(first.get("events"), list)
    ):
        whole = (
            first if text.lstrip().split("\n", 1)[0].strip() == text.strip() else json.loads(text)
        )
        return whole["events"] if isinstance(whole, dict) else whole
    out = []
    for line in text.split("\n"):
        if line.strip():
            try:
                out.append(json.loads(line))
            except ValueError:
                out.append(line)  # a cut or foreign line: kept as text
    return out


def unwrap(data: bytes) -> Source:
    """``data`` with its envelope removed (or unchanged when it has none); see the Note above."""
    start = data[:4096].lstrip()
    opens_records = start[:1] == b"{" or start[1:].lstrip()[:1] in (b"{", b"]", b"")
    if start[:1] not in (b"{", b"[") or not opens_records:  # [rank0]:, [1,0]<stdout>: ...
        return Source(data=data)
    head = data[: data.find(b"\n", 0, 1 << 20) if b"\n" in data[: 1 << 20] else 1 << 20]
    first = _first_json(head.decode("utf-8", errors="replace"))
    if isinstance(first, dict) and _kind(first) is None and "events" not in first:
        return Source(data=data)  # one JSON record per line, of no envelope kind: the log (JSONL)
    text = data.decode("utf-8", errors="replace")
    if first is None:  # a pretty-printed export: the whole text is one JSON value
        first = _first_json(text)
    if isinstance(first, list):
        sample = first[0] if first else None
    elif isinstance(first, dict) and isinstance(first.get("events"), list):
        sample = first["events"][0] if first["events"] else None
    else:
        sample = first
    kind = _kind(sample)
    if kind is None:
        return Source(data=data)
    try:
        records = _records(text, first)
    except ValueError:
        return Source(data=data)
    if kind == "docker":
        return _docker(records)
    return _cloud(records, kind)


def _docker(records: list[Any]) -> Source:
    parts: list[str] = []
    cols: dict[str, list[Any]] = {"time": [], "stream": []}
    pending = ""
    for rec in records:
        if isinstance(rec, dict) and isinstance(rec.get("log"), str):
            piece, stamp, stream = rec["log"], rec.get("time"), rec.get("stream")
        else:  # a cut or foreign line: its text
            piece = (rec if isinstance(rec, str) else json.dumps(rec)) + "\n"
            stamp = stream = None
        pending += piece
        if pending.endswith("\n"):
            cols["time"] += [stamp] * pending.count("\n")
            cols["stream"] += [stream] * pending.count("\n")
            parts.append(pending)
            pending = ""
    if pending:  # the last record was cut before its newline: its text stays unterminated
        parts.append(pending)
        cols["time"].append(None)
        cols["stream"].append(None)
    return Source(
        data="".join(parts).encode("utf-8", "surrogatepass"), envelope="docker", columns=cols
    )


def _cloud(records: list[Any], kind: str) -> Source:
    rows = [_cloud_row(rec, kind) for rec in records]
    stamps = [r[0] for r in rows]
    numbers = all(isinstance(t, (int, float)) for t in stamps)
    if numbers or all(isinstance(t, str) for t in stamps):  # stamps of one kind: comparable
        # gcloud lists newest first; a stable sort keeps equal stamps in order
        rows.sort(key=lambda r: r[0])
    cols: dict[str, list[Any]] = {"time": [], "host": [], "pod": []}
    parts = []
    for raw_stamp, raw_msg, host, pod in rows:
        msg = raw_msg.rstrip("\n")
        n = msg.count("\n") + 1
        stamp = raw_stamp
        if kind == "cloudwatch" and isinstance(stamp, (int, float)):  # ms since the epoch
            utc = datetime.datetime.fromtimestamp(stamp / 1000, tz=datetime.timezone.utc)
            stamp = utc.strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        cols["time"] += [stamp] * n
        cols["host"] += [host] * n
        cols["pod"] += [pod] * n
        parts.append(msg)
    return Source(
        data=("\n".join(parts) + "\n").encode("utf-8", "surrogatepass"), envelope=kind, columns=cols
    )


def _cloud_row(rec: Any, kind: str) -> tuple[Any, str, Any, Any]:
    """(time, message, host, pod) of one CloudWatch or GCP record (of a foreign one: its text)."""
    if not isinstance(rec, dict):
        return None, str(rec), None, None
    if kind == "cloudwatch":
        return rec.get("timestamp"), str(rec.get("message", "")), rec.get("logStreamName"), None
    msg = rec.get("textPayload")
    if msg is None and isinstance(rec.get("jsonPayload"), dict):
        msg = rec["jsonPayload"].get("message")
    labels = (rec.get("resource") or {}).get("labels") or {}
    host = (
        labels.get("instance_id")
        or labels.get("node_name")
        or (rec.get("labels") or {}).get("compute.googleapis.com/resource_name")
    )
    return rec.get("timestamp"), "" if msg is None else str(msg), host, labels.get("pod_name")
