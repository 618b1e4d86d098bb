"""Run-log analysis: Automodel and torchtitan logs into one tidy table, and metrics on a stated
basis.

Reading::

    from pooltk.logs import read_logs
    table = read_logs(["runs/k3_2k/", "torchtitan.log.gz"])
    table.steps        # one row per step (and rank) of every run; units in column names
    table.files_frame()  # per file: format detected, rows, skipped lines by reason

Each record is found by its own signature wherever it stands in a line (several per line, behind
any prefix; :mod:`pooltk.logs.records`); what stands before it becomes ``rank``/``task``/``host``/
``pod``/``collector_time`` columns where a known launcher or collector wrote it
(:mod:`pooltk.logs.decoration`). Compressed files, UTF-16 and log envelopes (docker, CloudWatch,
GCP) are opened by :mod:`pooltk.logs.source`; per-rank files, job folders, torchrun ``--log-dir``
trees and rotated files become runs by :mod:`pooltk.logs.files`; restarts and pasted runs inside a
file become separate runs and pool install lines become
``pooled``/``pool_impl``/``slack``/``layout`` (:mod:`pooltk.logs.runs`).

Metrics (tok/s per physical GPU, steady-state windows, MFU with its basis, headroom, the 1F1B
bubble) live in :mod:`pooltk.logs.metrics`; the published Kimi-K3 figures and their claims in
:mod:`pooltk.studies.kimi_k3`. (Automodel's JSONL writer, which regenerates shipped runs, is
``tools/jsonl_writer.py``.)

Needs pandas, numpy and polars (the ``lab`` extra; zstandard for ``.zst``); imports no torch
(the core ``pooltk`` package never imports this).
"""

from __future__ import annotations

from pooltk.logs.errors import LogFormatError
from pooltk.logs.reader import (
    FORMATS,
    MAX_BYTES,
    FileReport,
    LogTable,
    detect_format,
    read_log_file,
    read_logs,
    run_name,
)
from pooltk.logs.runinfo import RunInfo
from pooltk.logs.schema import COLUMNS

__all__ = [
    "COLUMNS",
    "FORMATS",
    "FileReport",
    "LogFormatError",
    "LogTable",
    "MAX_BYTES",
    "RunInfo",
    "detect_format",
    "read_log_file",
    "read_logs",
    "run_name",
]
