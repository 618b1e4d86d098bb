"""The three torch layout families as facts: where each makes its receive buffers.

The one home of these facts outside the adapter modules themselves (which detect a family by
the same markers): the mechanism notebook and the docs read them from here.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

__all__ = ["FAMILIES", "Family", "Marker"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Marker:
    """One definition a family's torch has: ``owner.attr`` in ``module`` (``owner`` empty: a module attribute)."""

    module: str
    """Dotted module path inside torch."""
    owner: str
    """Class defining ``attr`` in its own ``__dict__``; empty for a module-level name."""
    attr: str
    """Method or name."""

    @property
    def where(self) -> str:
        """``Class.method`` or ``module.name``, for tables."""
        return f"{self.owner}.{self.attr}" if self.owner else f"{self.module.rsplit('.', 1)[-1]}.{self.attr}"

    def defined(self) -> bool:
        """True when the installed torch defines it (never raises)."""
        try:
            mod = importlib.import_module(self.module)
        except ImportError:
            return False
        if not self.owner:
            return hasattr(mod, self.attr)
        cls = getattr(mod, self.owner, None)
        return cls is not None and self.attr in getattr(cls, "__dict__", {})


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """A torch layout family as pooltk's adapters know it."""

    name: str
    """The adapter's layout name (``Layout.name``)."""
    torch: str
    """The releases measured to have it."""
    what_pooltk_does: str
    """One line: what the pool does on this family."""
    markers: tuple[Marker, ...]
    """Where this family makes its receive buffers."""


_STAGE = "torch.distributed.pipelining.stage"
_LAZY = "torch.distributed.pipelining._recv_buffers"

FAMILIES: tuple[Family, ...] = (
    Family(name="prepare-infra", torch="<= 2.11",
           what_pooltk_does="all M sets made while the stage infers shapes; pooltk keeps K and frees the rest "
                            "(transient at setup)",
           markers=(Marker(module=_STAGE, owner="PipelineStage", attr="_prepare_forward_infra"),
                    Marker(module=_STAGE, owner="_PipelineStage", attr="_prepare_forward_infra"),
                    Marker(module=_STAGE, owner="_PipelineStageBase", attr="_prepare_backward_infra"),
                    Marker(module=_STAGE, owner="", attr="_RootArgPlaceholder"))),
    Family(name="setup-recv-info", torch="2.12 - 2.14",
           what_pooltk_does="per-direction setup methods; pooltk makes only K sets during setup and shares them "
                            "across chunks",
           markers=(Marker(module=_STAGE, owner="PipelineStage", attr="_setup_forward_recv_info"),
                    Marker(module=_STAGE, owner="_PipelineStage", attr="_prepare_forward_infra"),
                    Marker(module=_STAGE, owner="_PipelineStageBase", attr="_setup_backward_recv_info"))),
    Family(name="lazy", torch="2.15",
           what_pooltk_does="buffers allocated per receive and dropped when consumed, but the last stage keeps "
                            "all M through the schedule's kept graphs: pooltk installs the release alone (no rings)",
           markers=(Marker(module=_LAZY, owner="_RecvInfo", attr="allocate_buffer"),
                    Marker(module=_LAZY, owner="_RecvInfo", attr="take_buffer"))),
)
"""Every family, oldest first (measured on the real wheels: docs/torch-compat.md)."""
