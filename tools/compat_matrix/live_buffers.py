"""Count live receive buffers per stage in a parity rank, where torch allocates one per receive
(2.15's layout).

The matrix's checks name this module as the parity launch's prelude, so every rank imports it
before it starts (``pooltk.parity.run_parity(..., prelude=...)``). On import it installs its
counters only when both ``POOLTK_COMPAT_LIVE_DIR`` (where to write) and ``POOLTK_PARITY_RANK``
(set by the launcher in each rank) are present, and only on a torch whose ``_RecvInfo`` has
``allocate_buffer``; anywhere else importing it changes nothing.

Each buffer from ``_RecvInfo.allocate_buffer`` is counted live until torch drops it (a
``weakref.finalize`` on the tensor: tensors keep their Python object while torch holds them).
Keys are ``"<variant>/<direction>"``: variants run one after another in a launch, so the n-th
stage built is variant n; the direction is the one of the ``get_*_recv_ops`` call that
allocated. Whenever a peak rises, ``rank<r>.json`` in the live dir is rewritten with
``{"peak": {key: count}, "bytes": one buffer's storage bytes}``.
"""

from __future__ import annotations

import contextlib
import json
import os
import weakref
from pathlib import Path
from typing import Any

LIVE_DIR_ENV = "POOLTK_COMPAT_LIVE_DIR"
RANK_ENV = "POOLTK_PARITY_RANK"


def install(out: Path) -> bool:
    """Count torch's live receive buffers into ``out``; False where torch has no allocate_buffer."""
    from torch.distributed.pipelining import stage as sm

    from pooltk.pool.torch_compat.bind import Hooks, bind

    info = getattr(sm, "_RecvInfo", None)
    if info is None or not callable(getattr(info, "allocate_buffer", None)):
        return False
    state: dict[str, Any] = {"gen": -1, "dir": None, "live": {}, "peak": {}}

    def built(stage: Any, call: Any) -> None:
        state["gen"] += 1  # variants run one after another: the n-th stage built is variant n

    def receiving(direction: str) -> Any:
        @contextlib.contextmanager
        def around(stage: Any, call: Any) -> Any:
            state["dir"] = direction
            try:
                yield
            finally:
                state["dir"] = None

        return around

    def dead(key: str) -> None:
        state["live"][key] -= 1

    def allocated(recv_info: Any, call: Any, t: Any) -> Any:
        key = "%d/%s" % (state["gen"], state["dir"] or "other")
        state["live"][key] = state["live"].get(key, 0) + 1
        if state["live"][key] > state["peak"].get(key, 0):
            state["peak"][key] = state["live"][key]
            peak = {"peak": state["peak"], "bytes": t.untyped_storage().nbytes()}
            out.write_text(json.dumps(peak))
        weakref.finalize(t, dead, key)  # tensors keep their Python object while torch holds them
        return t

    stage_hooks = {
        "__init__": Hooks(before=built),
        "get_fwd_recv_ops": Hooks(around=receiving("forward")),
        "get_bwd_recv_ops": Hooks(around=receiving("grad")),
    }
    bind(sm._PipelineStageBase, stage_hooks, tag="compat-live-buffers")
    bind(info, {"allocate_buffer": Hooks(after=allocated)}, tag="compat-live-buffers")
    return True


def _install_in_rank() -> None:
    live_dir, rank = os.environ.get(LIVE_DIR_ENV), os.environ.get(RANK_ENV)
    if live_dir and rank is not None:
        install(Path(live_dir) / f"rank{rank}.json")


_install_in_rank()
