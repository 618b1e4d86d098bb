"""torch 2.15: receive buffers allocated per receive and released when consumed.

[Note: lazy layout]
Read from the real torch 2.15.0 wheel: ``_RecvInfo`` (``_recv_buffers.py``, imported by
``stage.py``) holds no buffer at setup; ``_get_recv_ops`` calls ``allocate_buffer`` right
before posting each receive, and ``_retrieve_recv_activations`` / ``_retrieve_recv_grads``
``take_buffer()`` it into the computation, leaving the descriptor empty. So torch holds
only the receives in flight plus what autograd still needs; there is no per-microbatch
pre-allocation left for a ring to replace, and pooltk stands down (installed=False).

Measured on 2.15.0 (gloo, pp4, M=8, Schedule1F1B, stock; ``scripts/compat_matrix``):
peak live receive buffers per stage are forward 0/3/2/8 and grad 2/2/1/0. The middle
stages hold the 1F1B in-flight depth. The last stage keeps all M inputs alive until the
step ends: the schedule keeps every microbatch's loss (``_internal_losses``) and each
loss's autograd graph still references its input leaf. A ring cannot change that retention;
the release can ([Note: releasing what the schedule keeps] in pooltk/pool/release.py), so on
this layout pooltk installs the release alone (no rings).

Detection is by feature: the ``_RecvInfo`` class the stage module uses has
``allocate_buffer`` and ``take_buffer`` (looked up on ``stage`` first, then on the
``_recv_buffers`` module, in case either moves).
"""

from __future__ import annotations

import importlib

from pooltk.pool.adapters import Layout

FAMILY = "lazy"

_LAZY_METHODS = ("allocate_buffer", "take_buffer")


def _lazy_recv_info() -> type | None:
    """The stage module's ``_RecvInfo`` if it allocates lazily, else ``_recv_buffers``' one, else None."""
    candidates = []
    for name in ("stage", "_recv_buffers"):
        try:
            mod = importlib.import_module(f"torch.distributed.pipelining.{name}")
        except ImportError:
            continue
        candidates.append(getattr(mod, "_RecvInfo", None))
    for info in candidates:
        if isinstance(info, type) and all(callable(getattr(info, m, None)) for m in _LAZY_METHODS):
            return info
    return None


def detect() -> Layout | str:
    info = _lazy_recv_info()
    if info is None:
        return f"{FAMILY}: no _RecvInfo with allocate_buffer/take_buffer (receive buffers are made at setup)"
    return Layout(
        name=FAMILY,
        setup_targets=(),
        per_receive=True,
        note=f"layout {FAMILY!r}: this torch allocates each receive buffer right before its receive "
        f"({info.__module__}._RecvInfo.allocate_buffer) and hands it to the computation when consumed "
        "(take_buffer), so no per-microbatch buffers are pre-allocated and a ring has nothing to replace",
    )
