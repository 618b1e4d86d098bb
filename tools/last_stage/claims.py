"""What a table of last-stage records must show before it is written: :func:`check` names each
broken claim.

[Note: the claims of a last-stage table]
``python -m tools.last_stage`` measures, then calls :func:`check` on the records; a broken claim
means nothing is written to ``--csv`` and the command exits 1 (the measured table is still printed),
so a file written by the tool holds every claim. ``python -m tools.last_stage --check CSV`` runs the
same check on a written file. ``K_f = min(M, 1 + slack)`` is the last stage's forward ring,
``K_g = min(M, 2)`` stage 0's gradient ring (grad slack 1). The claims, each over every row it
concerns:

- ``covers_the_grid``: one row per (model, M, variant, slack, release, stage, direction that
  receives) of the grid asked for, nothing else; every row of ``pp``, the schedule and the steps
  asked for;
- ``one_code_version``: one pooltk code version and one torch version; ``clean_code`` (when writing
  a record): that version a commit, neither ``+dirty`` nor ``unknown``;
- ``bytes_add_up``: ``set_bytes`` = rows x seq x hidden x 4, ``storage_bytes`` = storages x set,
  ``rehomed_bytes`` = re-homes x set, ``counted_bytes`` = storage + re-homed bytes;
- ``stock_holds_one_storage_per_microbatch``: stock has M storages, no re-home, no ring, no config;
- ``every_pooled_run_bitwise_equal``: every pooled variant equals stock bit for bit;
- ``first_stage_grad_ring_never_rehomes``: stage 0 receives gradients only, into ``K_g`` storages;
- ``release_leaves_the_last_stage_no_rehome`` (slack >= 2): no re-home, ``K_f`` storages, counted
  bytes = the ring's;
- ``without_release_the_last_stage_rehomes`` (slack >= 2): re-homes wherever ``M > K_f``, never
  fewer at a larger M and more at the largest than at the smallest (the kept graphs hold the step's
  inputs);
- ``at_slack_0_only_a_view_output_rehomes``: with the release a ring of 1 re-homes nothing, except a
  stage output that is a view (``linear3d``): one per re-post, ``steps x (M - 1)``; without it at
  least ``steps x (M - 2)``.

Slack 1 was not measured: its rows get the claims that hold for every row, not the last stage's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from pooltk.analysis.lifetimes import DIRECTIONS
from tools.last_stage.records import MODELS, Record

__all__ = ["CLAIMS", "Grid", "check"]


@dataclass(kw_only=True, slots=True, frozen=True)
class Grid:
    """What one run measures: every model x M, stock and each slack with the release on and off."""

    models: tuple[str, ...] = tuple(MODELS)
    """Model names (:data:`tools.last_stage.records.MODELS`)."""
    microbatches: tuple[int, ...] = (8, 16, 64)
    """M of each launch."""
    slacks: tuple[int, ...] = (0, 2)
    """Forward slacks of the pooled variants."""
    steps: int = 3
    """Optimizer steps per launch."""
    pp: int = 2
    """Stages."""
    schedule: str = "1F1B"
    """torch schedule name."""

    def keys(self) -> set[tuple]:
        """(model, M, variant, slack, release, stage, direction) of every row the grid makes."""
        receives = (
            [(0, "grad")]
            + [(s, d) for s in range(1, self.pp - 1) for d in DIRECTIONS]
            + [(self.pp - 1, "forward")]
        )
        configs = [("stock", None, None)] + [
            ("pooled", s, r) for s in self.slacks for r in (True, False)
        ]
        return {
            (mo, m, v, s, r, st, d)
            for mo in self.models
            for m in self.microbatches
            for v, s, r in configs
            for st, d in receives
        }


def _key(r: Record) -> tuple:
    return (r.model, r.microbatches, r.variant, r.slack, r.release, r.stage, r.direction)


def _label(r: Record | tuple) -> str:
    model, m, variant, slack, release, stage, direction = _key(r) if isinstance(r, Record) else r
    config = "" if variant == "stock" else f" s{slack} {'release' if release else 'norelease'}"
    return f"{model} M{m} {variant}{config} stage {stage} {direction}"


def _last(
    records: Sequence[Record], grid: Grid, *, release: bool, slack: Callable[[int], bool]
) -> list[Record]:
    return [
        r
        for r in records
        if r.variant == "pooled"
        and r.stage == grid.pp - 1
        and r.direction == "forward"
        and r.release is release
        and r.slack is not None
        and slack(r.slack)
    ]


def _covers_the_grid(records: Sequence[Record], grid: Grid) -> list[str]:
    seen = [_key(r) for r in records]
    want = grid.keys()
    out = [f"{_label(k)} missing" for k in sorted(want - set(seen), key=str)]
    out += [f"{_label(k)} not asked for" for k in sorted(set(seen) - want, key=str)]
    out += [
        f"{_label(k)} {seen.count(k)} times"
        for k in sorted(set(seen), key=str)
        if seen.count(k) > 1
    ]
    out += [
        f"{_label(r)}: pp {r.pp}, {r.schedule}, {r.steps} steps"
        for r in records
        if (r.pp, r.schedule.lower(), r.steps) != (grid.pp, grid.schedule.lower(), grid.steps)
    ]
    return out


def _one_code_version(records: Sequence[Record], grid: Grid) -> list[str]:
    codes, torches = (
        sorted({r.code or "" for r in records}),
        sorted({r.torch or "" for r in records}),
    )
    out = [f"code versions {codes}"] if len(codes) > 1 or codes == [""] else []
    return out + ([f"torch versions {torches}"] if len(torches) > 1 or torches == [""] else [])


def _clean_code(records: Sequence[Record], grid: Grid) -> list[str]:
    return [
        f"code {c}"
        for c in sorted({r.code or "" for r in records})
        if not c or c == "unknown" or c.endswith("+dirty")
    ]


def _bytes_add_up(records: Sequence[Record], grid: Grid) -> list[str]:
    out = []
    for r in records:
        found = []
        if r.set_bytes != r.rows_per_microbatch * r.seq_len * r.hidden * 4:
            found.append(
                f"set_bytes {r.set_bytes} "
                f"for {r.rows_per_microbatch}x{r.seq_len}x{r.hidden} float32"
            )
        if r.storage_bytes != r.storages * r.set_bytes:
            found.append(f"storage_bytes {r.storage_bytes} for {r.storages} storages")
        if r.rehomed_bytes != r.rehomes * r.set_bytes:
            found.append(f"rehomed_bytes {r.rehomed_bytes} for {r.rehomes} re-homes")
        if r.counted_bytes != r.storage_bytes + r.rehomed_bytes:
            found.append(
                f"counted_bytes {r.counted_bytes} != {r.storage_bytes} + {r.rehomed_bytes}"
            )
        out += [f"{_label(r)}: {', '.join(found)}"] if found else []
    return out


def _stock_holds_one_storage_per_microbatch(records: Sequence[Record], grid: Grid) -> list[str]:
    return [
        f"{_label(r)}: {r.storages} storages, {r.rehomes} re-homes, ring {r.ring_sets}, "
        f"peak {r.peak_live}, bitwise {r.bitwise_equal}"
        for r in records
        if r.variant == "stock"
        and (r.storages, r.rehomes, r.ring_sets, r.peak_live, r.bitwise_equal)
        != (r.microbatches, 0, None, None, None)
    ]


def _every_pooled_run_bitwise_equal(records: Sequence[Record], grid: Grid) -> list[str]:
    return [
        f"{_label(r)}: bitwise_equal {r.bitwise_equal}"
        for r in records
        if r.variant == "pooled" and r.bitwise_equal is not True
    ]


def _first_stage_grad_ring_never_rehomes(records: Sequence[Record], grid: Grid) -> list[str]:
    return [
        f"{_label(r)}: {r.rehomes} re-homes, ring {r.ring_sets}, {r.storages} storages"
        for r in records
        if r.variant == "pooled"
        and r.stage == 0
        and (r.direction, r.rehomes, r.ring_sets, r.storages)
        != ("grad", 0, min(r.microbatches, 2), min(r.microbatches, 2))
    ]


def _release_leaves_the_last_stage_no_rehome(records: Sequence[Record], grid: Grid) -> list[str]:
    out = []
    for r in _last(records, grid, release=True, slack=lambda s: s >= 2):
        k = min(r.microbatches, 1 + r.slack)
        if (r.rehomes, r.ring_sets, r.storages, r.counted_bytes) != (0, k, k, k * r.set_bytes):
            out.append(
                f"{_label(r)}: {r.rehomes} re-homes, ring {r.ring_sets}, {r.storages} storages, "
                f"{r.counted_bytes} counted bytes (ring {k})"
            )
    return out


def _without_release_the_last_stage_rehomes(records: Sequence[Record], grid: Grid) -> list[str]:
    rows = _last(records, grid, release=False, slack=lambda s: s >= 2)
    out = [
        f"{_label(r)}: {r.rehomes} re-homes"
        for r in rows
        if r.microbatches > min(r.microbatches, 1 + r.slack) and r.rehomes <= 0
    ]
    for model, slack in sorted({(r.model, r.slack) for r in rows}):
        counts = [
            r.rehomes
            for r in sorted(rows, key=lambda r: r.microbatches)
            if (r.model, r.slack) == (model, slack)
        ]
        if len(counts) > 1 and not (counts == sorted(counts) and counts[0] < counts[-1]):
            out.append(
                f"{model} s{slack} norelease: re-homes {counts} over M {sorted(grid.microbatches)}"
            )
    return out


def _at_slack_0_only_a_view_output_rehomes(records: Sequence[Record], grid: Grid) -> list[str]:
    out = []
    for r in _last(records, grid, release=True, slack=lambda s: s == 0):
        view = r.steps * (r.microbatches - 1) if r.model == "linear3d" else 0
        if (r.ring_sets, r.storages, r.rehomes, r.counted_bytes) != (
            1,
            1,
            view,
            r.set_bytes * (1 + view),
        ):
            out.append(
                f"{_label(r)}: ring {r.ring_sets}, {r.storages} storages, {r.rehomes} re-homes "
                f"(view rule {view}), {r.counted_bytes} counted bytes"
            )
    for r in _last(records, grid, release=False, slack=lambda s: s == 0):
        if r.rehomes < r.steps * (r.microbatches - 2):
            out.append(
                f"{_label(r)}: {r.rehomes} re-homes, fewer than {r.steps * (r.microbatches - 2)}"
            )
    return out


CLAIMS: dict[str, tuple[str, Callable[[Sequence[Record], Grid], list[str]]]] = {
    "covers_the_grid": (
        "one row per model, M, variant, slack, release, stage and direction asked for",
        _covers_the_grid,
    ),
    "one_code_version": ("one pooltk code version and one torch version", _one_code_version),
    "clean_code": ("a committed code version (no +dirty, not unknown)", _clean_code),
    "bytes_add_up": (
        "set = rows x seq x hidden x 4; storage = storages x set; re-homed = re-homes x set; "
        "counted = storage + re-homed",
        _bytes_add_up,
    ),
    "stock_holds_one_storage_per_microbatch": (
        "stock: M storages, 0 re-homes, no ring, no peak, no bitwise verdict",
        _stock_holds_one_storage_per_microbatch,
    ),
    "every_pooled_run_bitwise_equal": (
        "bitwise_equal True on every pooled row",
        _every_pooled_run_bitwise_equal,
    ),
    "first_stage_grad_ring_never_rehomes": (
        "stage 0 pooled: grad only, 0 re-homes, ring = storages = min(M, 2)",
        _first_stage_grad_ring_never_rehomes,
    ),
    "release_leaves_the_last_stage_no_rehome": (
        "last stage, release, slack >= 2: 0 re-homes, ring = storages = "
        "min(M, 1 + slack), counted = the ring's bytes",
        _release_leaves_the_last_stage_no_rehome,
    ),
    "without_release_the_last_stage_rehomes": (
        "last stage, no release, slack >= 2: re-homes where M > the ring, "
        "never fewer at a larger M, more at the largest than the smallest",
        _without_release_the_last_stage_rehomes,
    ),
    "at_slack_0_only_a_view_output_rehomes": (
        "last stage, slack 0: release: ring = storages = 1, re-homes "
        "steps x (M - 1) for linear3d else 0, counted = set x (1 + re-homes); "
        "no release: re-homes >= steps x (M - 2)",
        _at_slack_0_only_a_view_output_rehomes,
    ),
}
"""Claim name -> (what it requires, the rows that break it). See
[Note: the claims of a last-stage table]."""


def check(records: Sequence[Record], grid: Grid | None = None, *, clean: bool = True) -> list[str]:
    """The broken claims of ``records`` measured over ``grid`` (default: the committed table's), one
    line each.

    ``clean=False`` drops ``clean_code`` (a run not written as a record, or ``--allow-dirty``).
    """
    grid = grid or Grid()
    out = []
    for name, (required, rows) in CLAIMS.items():
        if name == "clean_code" and not clean:
            continue
        found = rows(records, grid)
        if found:
            more = f" (and {len(found) - 1} more)" if len(found) > 1 else ""
            out.append(f"{name}: found {found[0]}{more}; required {required}")
    return out
