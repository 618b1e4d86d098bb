"""Notebook 00 is a lesson: a primer, every term defined before use, the ring's invariant, a recap.

Issue #43's reader knows data parallelism but not pipelining and follows the notebook in
twenty minutes. What can be held mechanically is held here, on the committed file (no kernel):

- its prose before ``## Appendix`` stays within :data:`MAX_WORDS` words, counted as
  ``len(source.split())`` over the markdown cells (the count the issue used: 1,629 before);
- it opens with a primer that draws 1F1B and GPipe side by side and states the saving;
- each term is defined, in bold, in the first cell after the opening question that uses it;
- the ring's invariant is stated in one line, in the cell right before the ring's figure;
- the guard, slack and torch 2.15 each have a section with one figure, and slack's opens with the
  sentence the issue asks for; the version counter is explained in one cell;
- it ends (before the explorer and the appendix) with a recap of six questions.

The numbers the prose states are checked against what the notebook computed by its probe
(``_check_00`` in test_notebooks_execute.py).
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

nbformat = pytest.importorskip("nbformat")

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOK = ROOT / "notebooks" / "00_how_the_ring_works.ipynb"
MAX_WORDS = 1200
TERMS = {
    "stage": r"\bstages?\b",
    "microbatch": r"\bmicrobatch(?:es)?\b",
    "schedule": r"\bschedules?\b",
    "GPipe": r"\bGPipe\b",
    "1F1B": r"\b1F1B\b",
    "split backward": r"\bsplit\b",
    "in flight": r"\bin flight\b",
    "post": r"\bposts?\b",
    "buffer set": r"\bbuffer sets?\b",
    "ring": r"\brings?\b",
    "in-flight depth": r"\bin-flight depth\b",
    "version counter": r"\bversion counter\b",
    "guard": r"\bguard\b",
    "slack": r"\bslack\b",
}
"""Each term the lesson teaches, and how a use of it reads (case-insensitive)."""
RECAP = (
    "in-flight depth",
    "why is k enough",
    "what does slack buy",
    "why does gpipe break",
    "what does the guard do",
    "torch 2.15",
)
"""The six questions the recap answers, in order (as its bold questions read, lower-cased)."""


@pytest.fixture(scope="module")
def cells():
    return nbformat.read(NOTEBOOK, as_version=4).cells


def _lesson(cells) -> list:
    """The cells before the appendix."""
    end = next(
        (i for i, c in enumerate(cells) if c.cell_type == "markdown" and "## Appendix" in c.source),
        len(cells),
    )
    return cells[:end]


def _sections(cells) -> dict[str, list]:
    """``## heading`` -> the cells under it, up to the next ``## `` heading."""
    out: dict[str, list] = {}
    current = None
    for c in cells:
        m = re.match(r"## (.+)", c.source) if c.cell_type == "markdown" else None
        if m:
            current = m.group(1).strip()
            out[current] = []
        if current is not None:
            out[current].append(c)
    return out


def test_the_prose_before_the_appendix_is_at_most_1200_words(cells) -> None:
    words = sum(len(c.source.split()) for c in _lesson(cells) if c.cell_type == "markdown")
    assert words <= MAX_WORDS, f"notebook 00's prose: {words} words; required <= {MAX_WORDS}"


def test_it_opens_with_a_primer_that_draws_1f1b_beside_gpipe_and_states_the_saving(
    cells,
) -> None:
    sections = _sections(cells)
    first = next(iter(sections))
    assert first.lower().startswith("1. primer"), list(sections)
    primer = sections[first]
    code = "\n".join(c.source for c in primer if c.cell_type == "code")
    prose = " ".join(c.source for c in primer if c.cell_type == "markdown")
    assert "primer_timelines(rp, gp)" in code and 'replay("GPipe"' in code
    assert re.search(r"The saving in one sentence: .*stock keeps \d+ sets and the pool \d+", prose)


def test_every_term_is_defined_in_bold_where_it_is_first_used(cells) -> None:
    body = [c for c in _lesson(cells)[1:] if c.cell_type == "markdown"]  # after the question
    for term, use in TERMS.items():
        first = next((c for c in body if re.search(use, c.source, re.I)), None)
        assert first is not None, f"{term!r} is never used"
        bold = re.compile(r"\*\*" + use.replace(r"\b", "") + r"\*\*", re.I)
        defined = next((c for c in body if bold.search(c.source)), None)
        assert defined is not None, f"{term!r} is never defined (in bold)"
        assert body.index(defined) <= body.index(first), (
            f"{term!r} is used before its definition: first in {first.source[:70]!r}, defined in "
            f"{defined.source[:70]!r}"
        )


def test_the_invariant_is_one_line_next_to_the_rings_figure(cells) -> None:
    lesson = _lesson(cells)
    i = next(i for i, c in enumerate(lesson) if "**The invariant, in one line:**" in c.source)
    line = next(ln for ln in lesson[i].source.splitlines() if "**The invariant" in ln)
    assert "slot(c) = slot(c − K)" in line and "c is posted only after c − W's backward" in line
    assert "W = min(M, N − i)" in " ".join(c.source for c in lesson[:i])  # W defined before
    after = next(c for c in lesson[i + 1 :] if c.cell_type == "code")
    assert '"00_slots_1f1b"' in after.source
    assert "**One gradient buffer suffices**" in lesson[i].source


def test_guard_slack_and_torch_2_15_each_have_a_short_section_with_one_figure(cells) -> None:
    sections = _sections(_lesson(cells))
    for key in ("The guard", "What slack buys", "What changed in torch 2.15"):
        (name,) = [s for s in sections if key in s]
        figures = sum(c.source.count("nb.save_figure(") for c in sections[name])
        words = sum(len(c.source.split()) for c in sections[name] if c.cell_type == "markdown")
        assert figures == 1 and words <= 160, (name, figures, words)
    (slack,) = [s for s in sections if "What slack buys" in s]
    lead = next(c for c in sections[slack] if c.cell_type == "markdown").source
    body = lead.split("\n", 1)[1].strip()
    assert body.startswith(
        "**Under 1F1B slack costs one set per stage and buys tolerance, not safety.**"
    )


def test_the_version_counter_is_explained_once(cells) -> None:
    found = [
        c.source[:60]
        for c in _lesson(cells)
        if c.cell_type == "markdown" and "version counter" in c.source.lower()
    ]
    assert len(found) == 1, found


def test_it_ends_with_a_recap_of_six_questions(cells) -> None:
    sections = _sections(_lesson(cells))
    names = list(sections)
    assert "Recap" in names and names.index("Recap") >= len(names) - 2, names
    (recap,) = [c for c in sections["Recap"] if c.cell_type == "markdown"]
    questions = re.findall(r"^\d\. \*\*(.+?\?)\*\*", recap.source, re.M)
    assert len(questions) == len(RECAP), questions
    for asked, want in zip(questions, RECAP):
        assert want in asked.lower(), (asked, want)
