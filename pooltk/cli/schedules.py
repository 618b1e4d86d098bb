"""``pooltk schedules``: live receive buffers per stage, derived from torch's schedule order.

For each schedule x (pp, vpp, M[, defer_pp_recv]) prints one block: per stage and
direction the buffer sets stock torch allocates, the live peak (the smallest safe ring)
and the tight ring with slack; then per rank the same summed over the rank's stages, the
rank-shared rings (``sharing="rank"``: one ring per rank and direction, K = the
rank's live set + slack, from :func:`pooltk.analysis.sharing.rank_rings`) and the rank's live
set; under each block the slot totals when a rank's stages share pools (the granularities of
the upstream proposal). ``--set-mib MIB`` adds bytes (sets x MIB, one boundary size for every
stage; ``pooltk memory`` models boundaries that differ). ``--json`` prints everything as JSON,
``--csv FILE`` writes the tidy table.

Single-stage schedules (1F1B, GPipe) always run vpp 1 and the V schedules (ZBVZeroBubble,
DualPipeV) vpp 2, whatever ``--vpp`` says; ``--defer-pp-recv`` applies to the multi-stage
runtime schedules only.

The tables are records through :func:`pooltk.cli.tables.render` (no pandas: the torch-only
install runs this command); only ``--validate``, which trains on gloo, needs the lab extra.
"""

from __future__ import annotations

import argparse
import csv
import json
import sys
from pathlib import Path
from typing import Any

from pooltk._validate import InputError, check_output, write_output
from pooltk.cli.errors import FlagError, fail, from_lab
from pooltk.cli.tables import Column, render

__all__ = ["register", "run"]


# ---- flags -------------------------------------------------------------------------------------


def register(parser: argparse.ArgumentParser) -> None:
    _add_shape_flags(parser)
    _add_ring_flags(parser)
    _add_validate_flags(parser)
    out = parser.add_mutually_exclusive_group()
    out.add_argument(
        "--json", action="store_true", help="print tables, slot totals and refusals as JSON"
    )
    out.add_argument(
        "--csv",
        metavar="FILE",
        help="also write the tidy per-stage table to FILE (with --validate: only if "
        "every claim holds; python -m pooltk.parity.schedule_check --check FILE re-checks one)",
    )


def _add_shape_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schedule",
        nargs="+",
        metavar="NAME",
        help="torch schedule names, case-insensitive (default: every schedule this torch ships)",
    )
    parser.add_argument(
        "--pp", nargs="+", type=int, default=[4], metavar="N", help="pipeline ranks (default 4)"
    )
    parser.add_argument(
        "--vpp",
        nargs="+",
        type=int,
        metavar="V",
        help="stages per rank for multi-stage schedules (default 2)",
    )
    parser.add_argument(
        "--microbatches",
        nargs="+",
        type=int,
        metavar="M",
        help="microbatches per step (default 8)",
    )
    parser.add_argument(
        "--defer-pp-recv",
        choices=("off", "on", "both"),
        help="torch 2.13+'s late receive posting for runtime schedules (default off)",
    )
    parser.add_argument(
        "--forward-only", action="store_true", help="an eval step: no backward, no grad receives"
    )


def _add_ring_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--slack", type=int, help="forward ring slack for the tight column (default 2)"
    )
    parser.add_argument(
        "--grad-slack", type=int, help="grad ring slack for the tight column (default 1)"
    )
    parser.add_argument(
        "--set-mib",
        type=float,
        metavar="MIB",
        help="bytes of one buffer set, MiB: adds GiB per stage and per rank (sets x MIB)",
    )


def _add_validate_flags(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--validate",
        action="store_true",
        help="run every selected schedule on real gloo ranks with schedule='auto' (stock / "
        "measure / slack-0 ring per --pp and M = factor x pp) and a ring one short that the "
        "guard must stop; prints the table",
    )
    parser.add_argument(
        "--factors",
        nargs="+",
        type=int,
        metavar="F",
        help="with --validate: M = F x 2pp (default 1 2 4)",
    )
    parser.add_argument(
        "--no-guard-checks", action="store_true", help="with --validate: skip the guard launches"
    )


# ---- the layout the tables always had ----------------------------------------------------------


def _number(key: str, header: str, text: Any = str) -> Column:
    """A column of counts or GiB: right-aligned, with a place for a sign before its header."""
    return Column(key, " " + header, text=text)


def _gib_columns(set_mib: float | None, headers: tuple[tuple[str, str], ...]) -> list[Column]:
    """With ``--set-mib``, a GiB column (sets x MIB) per ``(key, header)``; none without it."""
    if set_mib is None:
        return []
    gib = set_mib / 1024
    return [_number(key, header, text=lambda sets: f"{sets * gib:,.2f}") for key, header in headers]


def _table(records: list[dict[str, Any]], columns: list[Column]) -> str:
    return "\n".join(render(records, columns, gap=" "))


# ---- the command -------------------------------------------------------------------------------


_TABLE_FLAGS = {
    "vpp": "--vpp",
    "microbatches": "--microbatches",
    "slack": "--slack",
    "grad_slack": "--grad-slack",
    "set_mib": "--set-mib",
    "forward_only": "--forward-only",
    "defer_pp_recv": "--defer-pp-recv",
}
"""Flags of the analysed tables; --validate runs its own grid (M = F x 2pp, each schedule's own
stages per rank, slack 0, training steps)."""
_VALIDATE_FLAGS = {"factors": "--factors", "no_guard_checks": "--no-guard-checks"}
_DEFAULTS = {"vpp": [2], "microbatches": [8], "defer_pp_recv": "off", "factors": [1, 2, 4]}


def _ignored(args: argparse.Namespace) -> str | None:
    """The flags the chosen mode would ignore, in found / required / fix words; None: none."""
    other = _TABLE_FLAGS if args.validate else _VALIDATE_FLAGS
    given = [
        flag
        for name, flag in other.items()
        if getattr(args, name) is not None and getattr(args, name) is not False  # 0 is given
    ]
    if not given:
        return None
    if args.validate:
        why = (
            "which --validate does not use (its grid: M = F x 2pp, each schedule's own stages "
            "per rank, slack 0, training steps)"
        )
        fix = "drop them, or drop --validate for the analysed tables"
    else:
        why = "which only --validate uses"
        fix = "add --validate, or drop them"
    return f"found {', '.join(given)} {why}; required flags of one mode. Fix: {fix}."


def run(args: argparse.Namespace) -> int:
    ignored = _ignored(args)
    if ignored is not None:
        return fail("schedules", ignored)
    try:
        csv_path = check_output("--csv", args.csv) if args.csv else None
    except InputError as exc:
        return fail("schedules", exc)
    unset = {name: default for name, default in _DEFAULTS.items() if getattr(args, name) is None}
    args = argparse.Namespace(**{**vars(args), **unset})
    if args.validate:
        return _validate(args, csv_path)
    from pooltk.analysis.lifetimes import ScheduleAnalysisError
    from pooltk.config import PoolConfig

    defaults = PoolConfig()
    slack = defaults.slack if args.slack is None else args.slack
    grad_slack = defaults.grad_slack if args.grad_slack is None else args.grad_slack
    problem = _flag_problem(args, slack, grad_slack)
    if problem is not None:
        return fail("schedules", problem)
    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    try:
        rows, refused = _sweep(args, config)
    except ScheduleAnalysisError as exc:  # an unknown schedule name
        return fail("schedules", exc)
    if not rows:
        for r in refused:
            print(f"refused {_label(r)}: {r['reason']}", file=sys.stderr)
        return fail("schedules", "no schedule shape could be analysed (reasons above).")
    blocks = _blocks(rows)
    totals = [_totals(block, key, args.forward_only, config) for key, block in blocks.items()]
    if csv_path is not None:
        try:
            write_output("--csv", csv_path, lambda path: _write_csv(rows, path))
        except InputError as exc:
            return fail("schedules", exc, code=1)
    if args.json:
        _print_json(rows, totals, refused, config, args.set_mib)
        return 0
    for total, (key, block) in zip(totals, blocks.items()):
        _print_block(key, block, total, args, config)
    for r in refused:
        print(f"refused {_label(r)}: {r['reason']}")
    if args.csv:
        print(f"wrote {args.csv}")
    return 0


def _flag_problem(args: argparse.Namespace, slack: int, grad_slack: int) -> str | None:
    """What is wrong with the flags, in found / required / fix words; None: nothing."""
    from pooltk.cli.errors import check_flag_int, check_flag_positive

    try:
        for flag, values, low in (
            ("--pp", args.pp, 1),
            ("--vpp", args.vpp, 1),
            ("--microbatches", args.microbatches, 1),
            ("--slack", [slack], 0),
            ("--grad-slack", [grad_slack], 0),
        ):
            for value in values:
                check_flag_int(flag, value, low=low)
        if args.set_mib is not None:
            check_flag_positive(
                "--set-mib", args.set_mib, fix="give the MiB of one receive-buffer set, e.g. 416."
            )
    except FlagError as exc:
        return str(exc)
    return None


def _sweep(args: argparse.Namespace, config: Any) -> tuple[list[dict[str, Any]], list[Any]]:
    """One record per (shape, stage, direction), each with its tight ring; and the refusals."""
    from pooltk.analysis.lifetimes import analysable_schedules, resolve_schedule, sweep_rows
    from pooltk.pool.ring import ring_size

    names = args.schedule or list(analysable_schedules())
    defers = {"off": [False], "on": [True], "both": [False, True]}[args.defer_pp_recv]
    rows, refused = sweep_rows(
        [resolve_schedule(n)[0] for n in names],
        pps=args.pp,
        vpps=args.vpp,
        microbatches=args.microbatches,
        defer_pp_recv=defers,
        forward_only=args.forward_only,
    )
    for row in rows:  # the pool's one slack rule: min(M, ring_min + slack), 0 with no receives
        row["tight"] = ring_size(
            int(row["ring_min"]), int(row["n_microbatches"]), row["direction"], config
        )
    return rows, refused


_BLOCK_KEYS = ("schedule", "pp", "vpp", "n_microbatches", "defer_pp_recv")


def _blocks(rows: list[dict[str, Any]]) -> dict[tuple[Any, ...], list[dict[str, Any]]]:
    """The records of each shape, in the order the sweep met them."""
    blocks: dict[tuple[Any, ...], list[dict[str, Any]]] = {}
    for row in rows:
        blocks.setdefault(tuple(row[k] for k in _BLOCK_KEYS), []).append(row)
    return blocks


def _label(r: dict[str, Any]) -> str:
    defer = " defer_pp_recv" if r["defer_pp_recv"] else ""
    return f"{r['schedule']} pp{r['pp']} vpp{r['vpp']} M{r['n_microbatches']}{defer}"


def _write_csv(rows: list[dict[str, Any]], path: Path) -> None:
    with open(path, "w", newline="") as f:
        writer = csv.DictWriter(f, fieldnames=list(rows[0]), lineterminator="\n")
        writer.writeheader()
        writer.writerows(rows)


def _print_json(
    rows: list[dict[str, Any]],
    totals: list[dict[str, Any]],
    refused: list[Any],
    config: Any,
    set_mib: float | None,
) -> None:
    document = {
        "slack": config.slack,
        "grad_slack": config.grad_slack,
        "set_mib": set_mib,
        "rows": rows,
        "totals": totals,
        "refused": refused,
    }
    print(json.dumps(document, indent=2, default=_plain))


def _plain(value: Any) -> Any:
    """A value JSON does not know: a NumPy scalar as its Python value, anything else as text."""
    return value.item() if hasattr(value, "item") else str(value)


# ---- totals per shape and per rank -------------------------------------------------------------


def _totals(
    rows: list[dict[str, Any]], key: tuple[Any, ...], forward_only: bool, config: Any
) -> dict[str, Any]:
    """One shape's sets (its ranks' summed), its shared slots at the live peak, and its ranks."""
    from pooltk.analysis.lifetimes import ScheduleShape, analyse, shared_slots

    name, pp, vpp, m, defer = key
    prog, spans = analyse(
        ScheduleShape(
            schedule=name,
            pp=pp,
            n_microbatches=m,
            stages_per_rank=vpp,
            defer_pp_recv=defer,
            forward_only=forward_only,
        )
    )
    slots = shared_slots(spans)
    ranks = _ranks(rows, prog, spans, config)
    return {
        **dict(zip(_BLOCK_KEYS, key)),
        "stock": sum(r["stock"] for r in ranks),
        "stock_lazy": sum(r["stock_lazy"] for r in ranks),
        "per_stage_direction": slots.per_stage_direction,
        "per_rank_direction": slots.per_rank_direction,
        "per_rank": slots.per_rank,
        "tight": sum(r["tight"] for r in ranks),
        "shared": sum(r["shared"] for r in ranks),
        "ranks": ranks,
    }


def _ranks(rows: list[dict[str, Any]], prog: Any, spans: Any, config: Any) -> list[dict[str, Any]]:
    """Per rank: its stages, per-stage sets summed, the rank-shared rings and the rank's live
    set."""
    from functools import partial

    from pooltk.analysis.sharing import rank_rings
    from pooltk.pool.ring import ring_size

    rings = rank_rings(prog, spans, partial(ring_size, config=config))
    out = []
    for rank in sorted(set(prog.stage_to_rank.values())):
        part = [r for r in rows if r["rank"] == rank]
        mine = [ring for ring in rings if ring.rank == rank]
        out.append(
            {
                "rank": rank,
                "stages": sorted({int(r["stage"]) for r in part}),
                "stock": sum(r["stock_buffers"] for r in part),
                "stock_lazy": sum(r["lazy_buffers"] for r in part),
                "tight": sum(r["tight"] for r in part),
                "live_per_stage": sum(r["live_peak"] for r in part),
                "shared": sum(ring.size for ring in mine),
                "rank_live": sum(ring.live for ring in mine),
                "rings": [_ring_record(ring) for ring in mine],
            }
        )
    return out


def _ring_record(ring: Any) -> dict[str, Any]:
    return {
        "direction": ring.direction,
        "stages": list(ring.stages),
        "live": ring.live,
        "size": ring.size,
        "shared": len(ring.stages) > 1,
    }


# ---- one block of text -------------------------------------------------------------------------


def _print_block(
    key: tuple[Any, ...], rows: list[dict[str, Any]], total: dict[str, Any], args: Any, config: Any
) -> None:
    name, pp, vpp, m, defer = key
    print(
        f"== {name}  pp={pp} vpp={vpp} M={m}"
        + ("  defer_pp_recv" if defer else "")
        + ("  forward-only" if args.forward_only else "")
        + f"  (tight = live + slack {config.slack} / grad slack {config.grad_slack}, at most M)"
    )
    print(_stage_view(rows, args.set_mib))
    print(_rank_view(total["ranks"], args.set_mib))
    print(
        f"   sets: stock {total['stock']}, stock-lazy (torch >= 2.15) {total['stock_lazy']}, "
        f"tight {total['tight']}, rank-shared {total['shared']}; slots at the live peak: "
        f"per stage+direction {total['per_stage_direction']}, shared per rank+direction "
        f"{total['per_rank_direction']}, shared per rank {total['per_rank']}\n"
    )


def _stage_view(rows: list[dict[str, Any]], set_mib: float | None) -> str:
    """Per stage and direction: stock, stock-lazy, live and tight sets (and GiB)."""
    columns = [
        _number("stage", "stage"),
        _number("rank", "rank"),
        Column("direction"),
        _number("stock_buffers", "stock"),
        _number("lazy_buffers", "stock-lazy"),
        _number("live_peak", "live"),
        _number("tight", "tight"),
        Column("handoff", text=lambda handoff: "local" if handoff else ""),
        *_gib_columns(set_mib, (("stock_buffers", "stock GiB"), ("tight", "tight GiB"))),
    ]
    return _table(rows, columns)


def _rank_view(ranks: list[dict[str, Any]], set_mib: float | None) -> str:
    """The per-rank lines of one block: sets (and GiB with ``--set-mib``) for every policy."""
    columns = [
        _number("rank", "rank"),
        Column("stages", text=lambda stages: ",".join(map(str, stages))),
        _number("stock", "stock"),
        _number("stock_lazy", "stock-lazy"),
        _number("tight", "tight"),
        _number("live_per_stage", "live"),
        _number("shared", "rank-shared"),
        _number("rank_live", "rank live"),
        Column("rings", "rings (dir stages: live->K)", text=_rings_text),
        *_gib_columns(
            set_mib,
            (
                ("stock", "stock GiB"),
                ("tight", "tight GiB"),
                ("shared", "rank-shared GiB"),
                ("rank_live", "rank live GiB"),
            ),
        ),
    ]
    return (
        "   per rank (a rank holds all its stages; rank-shared: one ring per rank and direction, "
        "K = the rank's live set + slack; rank live: that live set):\n" + _table(ranks, columns)
    )


def _rings_text(rings: list[dict[str, Any]]) -> str:
    return " ".join(
        f"{g['direction'][0]}{'+'.join(map(str, g['stages']))}:{g['live']}->{g['size']}"
        for g in rings
    )


# ---- --validate (gloo runs; the lab extra) -----------------------------------------------------


def _validate(args: argparse.Namespace, csv_path: Path | None) -> int:
    from pooltk.analysis.programs import ScheduleAnalysisError

    try:
        check = from_lab("pooltk.parity.schedule_check", flag="--validate", needs=("pandas",))
        check.planned_shapes(args.pp, args.factors, args.schedule)  # the flags, before any launch
    except (FlagError, ScheduleAnalysisError) as exc:
        return fail("schedules", exc)
    except InputError as exc:
        return fail("schedules", exc, fields=check.GRID_FLAGS)
    result = check.check_schedules(
        pps=tuple(args.pp),
        factors=tuple(args.factors),
        schedules=args.schedule,
        guard_checks=not args.no_guard_checks,
        progress=lambda msg: print(f"[validate] {msg}", file=sys.stderr, flush=True),
    )
    summary = result.summary().to_dict(orient="records")
    broken = result.broken()  # [Note: the claims of a validation]: a table written holds them all
    if args.json:
        _print_validation_json(result, summary, broken)
    else:
        print(_table(summary, _summary_columns(summary)))
        for sk in result.skipped:
            print(f"not run: {sk['schedule']} pp{sk['pp']} M{sk['n_microbatches']}: {sk['reason']}")
        print(
            "\nall pooled runs bitwise equal, measured peaks = analysed, guard catches: "
            f"{not broken}"
        )
    if broken:
        tail = f"; nothing written to {args.csv}" if args.csv else ""
        heading = f"pooltk schedules: error: --validate breaks {len(broken)} claim(s){tail}:"
        print("\n".join([heading, *(f"  {b}" for b in broken)]), file=sys.stderr)
        return 1
    if csv_path is not None:
        try:
            write_output(
                "--csv", csv_path, lambda path: result.to_frame().to_csv(path, index=False)
            )
        except InputError as exc:
            return fail("schedules", exc, code=1)
    return 0


def _summary_columns(summary: list[dict[str, Any]]) -> list[Column]:
    """The validation summary's columns: text as it is, numbers and verdicts as numbers."""
    first = summary[0] if summary else {}
    return [
        Column(key) if isinstance(value, str) else _number(key, key) for key, value in first.items()
    ]


def _print_validation_json(result: Any, summary: list[dict[str, Any]], broken: list[str]) -> None:
    document = {
        "ok": not broken,
        "broken": broken,
        "summary": summary,
        "rows": result.rows,
        "guard": result.guard,
        "skipped": result.skipped,
    }
    print(json.dumps(document, indent=2, default=str))
