"""torch 2.15: receive buffers allocated per receive and dropped when consumed.

Upstream already keeps only live buffers, so a ring would save nothing: pooltk stands
down (installed=False) and the report says why.
"""

from __future__ import annotations

import importlib

from pooltk.adapters import Layout

FAMILY = "lazy"


def detect() -> Layout | str:
    try:
        mod = importlib.import_module("torch.distributed.pipelining._recv_buffers")
    except ImportError:
        return f"{FAMILY}: no torch.distributed.pipelining._recv_buffers"
    info = getattr(mod, "_RecvInfo", None)
    if info is None or not all(hasattr(info, m) for m in ("allocate_buffer", "take_buffer")):
        return f"{FAMILY}: _recv_buffers has no _RecvInfo.allocate_buffer/take_buffer"
    return Layout(
        name=FAMILY,
        setup_targets=(),
        stands_down=True,
        note=f"layout {FAMILY!r}: this torch allocates receive buffers per receive and drops them when consumed, "
        "so only live buffers exist already; pooltk stands down (stock behaviour is already pooled-equivalent)",
    )
