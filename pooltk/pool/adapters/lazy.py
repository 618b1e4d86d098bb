"""torch 2.15: receive buffers allocated per receive and released when consumed.

[Note: lazy layout]
``_RecvInfo`` holds no buffer at setup: ``_get_recv_ops`` calls ``allocate_buffer`` right before each receive
and the stage ``take_buffer()``s it: nothing pre-allocated for a ring to replace. The last stage still holds
all M inputs through the schedule's kept graphs, so pooltk installs the release alone ([Note: releasing what
the schedule keeps]). Detected by ``_RecvInfo.allocate_buffer`` and ``take_buffer``.
"""

from __future__ import annotations

import importlib

from pooltk.pool.adapters import Layout

FAMILY = "lazy"


def detect() -> Layout | str:
    for name in ("stage", "_recv_buffers"):
        try:
            info = getattr(
                importlib.import_module(f"torch.distributed.pipelining.{name}"), "_RecvInfo", None
            )
        except ImportError:
            continue
        if isinstance(info, type) and all(
            callable(getattr(info, m, None)) for m in ("allocate_buffer", "take_buffer")
        ):
            return Layout(
                name=FAMILY,
                per_receive=True,
                reason=(
                    f"layout {FAMILY!r}: torch allocates each receive buffer right before its receive "
                    f"({info.__module__}._RecvInfo.allocate_buffer) and hands it over when consumed (take_buffer)"
                ),
            )
    return f"{FAMILY}: no _RecvInfo with allocate_buffer/take_buffer (receive buffers are made at setup)"
