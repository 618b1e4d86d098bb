"""The three torch layout families as facts: which method makes each kind of receive buffer.

The one home of these facts outside the adapter modules themselves (which detect a family by
its distinguishing features, ``told_apart_by``, and whose table of the methods that make buffers
the eager families' cells read): the mechanism notebook and docs/torch-compat.md
show them as one table, a row per kind of receive buffer (:data:`ROLES`) and a column per family
(:func:`layout_rows`).

[Note: one method, two families]
The tracing frontend (``pipeline()``, class ``_PipelineStage``) makes its forward receive buffers
in ``_PipelineStage._prepare_forward_infra`` on both eager families: torch never gave that
frontend a ``_setup_forward_recv_info``. So that method is one row with the same cell under
``prepare-infra`` and ``setup-recv-info``, not a marker of either: what tells the two apart is
the manual frontend's forward method, the gradients' method and the form of ``_RecvInfo``.
Other methods exist on several releases without making buffers there (``_prepare_backward_infra``
is defined from 2.11 to 2.15; from 2.12 it only calls ``_setup_backward_recv_info``): a family's
cells name where its buffers are made, which the recorded shapes of the real wheels
(``tests/compat/layouts``) confirm.

[Note: the PR's 2.12 line]
Automodel PR #3780 says its pool adapts "the torch >= 2.13 layout
(_setup_forward/backward_recv_info) and the 2.12 line in current NGC containers
(_prepare_forward/backward_infra)". The released 2.12 wheels (2.12.0 and 2.12.1 are the same for
pipelining; 2.12.1's shape is recorded) already make their buffers in ``_setup_forward_recv_info`` /
``_setup_backward_recv_info``, so by release the boundary is 2.11 -> 2.12, not 2.12 -> 2.13. The NGC
"2.12" the PR met must be a pre-release build of the 2.12 line (NGC containers ship torch built from
the main branch, versioned ``2.12.0a0+<commit>``) from before that change; no NGC container was
available here, so that build is not measured. pooltk detects by feature, never by version, so such
a build is handled by the ``prepare-infra`` adapter whatever its version string says.
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass

from pooltk.pool.torch_compat.layouts import EAGER_OWNERS, EAGER_SETUP

__all__ = ["FAMILIES", "ROLES", "Family", "Marker", "layout_rows", "markdown_table"]


@dataclass(frozen=True, slots=True, kw_only=True)
class Marker:
    """One definition a family's torch has: ``owner.attr`` in ``module`` (``owner`` empty: a module
    attribute)."""

    module: str
    """Dotted module path inside torch."""
    owner: str
    """Class defining ``attr`` in its own ``__dict__``; empty for a module-level name."""
    attr: str
    """Method or name."""

    @property
    def where(self) -> str:
        """``Class.method`` or ``module.name``, for tables."""
        return (
            f"{self.owner}.{self.attr}"
            if self.owner
            else f"{self.module.rsplit('.', 1)[-1]}.{self.attr}"
        )

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


ROLES: tuple[str, ...] = (
    "forward buffers, manual frontend (PipelineStage)",
    "forward buffers, tracing frontend (pipeline())",
    "gradient buffers",
    "stage-0 inputs",
)
"""The kinds of receive buffer a family makes somewhere, in table order (one row each)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Family:
    """A torch layout family as pooltk.pool.torch_compat knows it."""

    name: str
    """The adapter's layout name (``Layout.name``)."""
    torch: str
    """The releases it covers."""
    releases: tuple[str, ...]
    """The real releases measured to have it (docs/torch-compat.md's matrix; shapes in
    tests/compat/layouts)."""
    what_pooltk_does: str
    """One line: what the pool does on this family."""
    makes: tuple[Marker, Marker, Marker]
    """Where the buffers of the first three :data:`ROLES` are made, in that order."""
    stage0: Marker | str
    """What stands for stage 0's inputs (the fourth role): a marker, or the form of
    ``_RecvInfo``."""
    told_apart_by: str
    """The features detection checks (``pooltk.pool.torch_compat.layouts.detect``)."""
    note: str = ""
    """What else is known of the family's releases (see [Note: the PR's 2.12 line])."""

    @property
    def markers(self) -> tuple[Marker, ...]:
        """Every definition this family's cells name, each once."""
        found = [*self.makes, *([self.stage0] if isinstance(self.stage0, Marker) else [])]
        return tuple(dict.fromkeys(found))


_STAGE = "torch.distributed.pipelining.stage"
_LAZY = "torch.distributed.pipelining._recv_buffers"
_ALLOCATE = Marker(module=_LAZY, owner="_RecvInfo", attr="allocate_buffer")


def _made_by(family: str) -> tuple[Marker, Marker, Marker]:
    """Where an eager family makes the buffers of the first three :data:`ROLES`: the adapter's own
    table (``EAGER_OWNERS`` and ``EAGER_SETUP`` of ``pooltk.pool.torch_compat.layouts``), never
    restated here."""
    made = zip(EAGER_OWNERS, EAGER_SETUP[family], strict=True)
    return tuple(Marker(module=_STAGE, owner=owner, attr=attr) for owner, attr in made)


FAMILIES: tuple[Family, ...] = (
    Family(
        name="prepare-infra",
        torch="<= 2.11",
        releases=("2.11.0",),
        what_pooltk_does="all M sets made while the stage infers shapes; pooltk makes only K of "
        "them",
        makes=_made_by("prepare-infra"),
        stage0=Marker(module=_STAGE, owner="", attr="_RootArgPlaceholder"),
        told_apart_by="_RecvInfo(input_name, source, buffer); no _setup_backward_recv_info",
        note="Automodel PR #3780 puts 'the 2.12 line in current NGC containers' here: a "
        "pre-release build (2.12.0a0+...) from before 2.12's change, not measured here; detection "
        "by feature gives it this adapter (see [Note: the PR's 2.12 line])",
    ),
    Family(
        name="setup-recv-info",
        torch="2.12 - 2.14",
        releases=("2.12.1", "2.13.0", "2.14.1"),
        what_pooltk_does="per-direction setup methods; pooltk makes only K sets and shares them "
        "across chunks",
        makes=_made_by("setup-recv-info"),
        stage0="_RecvInfo(..., is_root_arg=True)",
        told_apart_by="_RecvInfo(input_name, source, buffer, tensor_meta, *, is_root_arg); "
        "PipelineStage._setup_forward_recv_info",
        note="the PR says '>= 2.13'; the released 2.12.0 and 2.12.1 are already this family "
        "(tests/compat/layouts/torch-2.12.1.json)",
    ),
    Family(
        name="lazy",
        torch="2.15",
        releases=("2.15.0",),
        what_pooltk_does="buffers made per receive and dropped when consumed, but the last stage "
        "keeps all M through the schedule's kept graphs: pooltk installs the release alone (no "
        "rings)",
        makes=(_ALLOCATE, _ALLOCATE, _ALLOCATE),
        stage0="_RecvInfo(..., is_root_arg=True)",
        told_apart_by="_RecvInfo.allocate_buffer / take_buffer (no buffer at setup)",
    ),
)
"""Every family, oldest first (measured on the real wheels: docs/torch-compat.md)."""


def layout_rows() -> list[dict[str, str]]:
    """The table: one row per role, then ``torch``, ``told apart by``, ``pooltk does`` and ``note``;
    a column per family.

    Each row is ``{"": row name, <family name>: cell, ...}``; a marker cell is ``Class.method``.
    """

    def of(f: Family, i: int) -> Marker | str:
        return f.makes[i] if i < 3 else f.stage0

    rows = []
    for i, role in enumerate(ROLES):
        row = {"": role}
        for k, f in enumerate(FAMILIES):
            x = of(f, i)
            text = x.where if isinstance(x, Marker) else x
            if (
                k and isinstance(x, Marker) and x == of(FAMILIES[k - 1], i)
            ):  # [Note: one method, two families]
                text += f" (the same method as {FAMILIES[k - 1].name}: no family of its own)"
            row[f.name] = text
        rows.append(row)
    rows.append(
        {
            "": "releases (measured)",
            **{f.name: f"{f.torch} ({', '.join(f.releases)})" for f in FAMILIES},
        }
    )
    rows.append({"": "told apart by", **{f.name: f.told_apart_by for f in FAMILIES}})
    rows.append({"": "pooltk does", **{f.name: f.what_pooltk_does for f in FAMILIES}})
    rows.append({"": "note", **{f.name: f.note or "-" for f in FAMILIES}})
    return rows


def _code_then_note(cell: str) -> str:
    """A method cell in code font, the note :func:`layout_rows` may add after it left as text."""
    method, note, rest = cell.partition(" (the same")
    return f"`{method}`{note}{rest}"


def markdown_table() -> str:
    """:func:`layout_rows` as a markdown table (docs/torch-compat.md holds this text)."""
    names = [f.name for f in FAMILIES]
    lines = ["| | " + " | ".join(f"`{n}`" for n in names) + " |", "|---|" + "---|" * len(names)]
    for row in layout_rows():
        cells = [row[n] for n in names]
        if row[""] in ROLES:  # the method in code font, a note on it after
            cells = [_code_then_note(c) for c in cells]
        lines.append(f"| {row['']} | " + " | ".join(c.replace("|", "/") for c in cells) + " |")
    return "\n".join(lines)
