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
"""

from __future__ import annotations

import argparse
import json
import sys
from typing import Any

__all__ = ["register", "run"]


def register(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--schedule",
        nargs="+",
        metavar="NAME",
        default=None,
        help="torch schedule names, case-insensitive (default: every schedule this torch ships)",
    )
    parser.add_argument(
        "--pp", nargs="+", type=int, default=[4], metavar="N", help="pipeline ranks (default 4)"
    )
    parser.add_argument(
        "--vpp",
        nargs="+",
        type=int,
        default=[2],
        metavar="V",
        help="stages per rank for multi-stage schedules (default 2)",
    )
    parser.add_argument(
        "--microbatches",
        nargs="+",
        type=int,
        default=[8],
        metavar="M",
        help="microbatches per step (default 8)",
    )
    parser.add_argument(
        "--defer-pp-recv",
        choices=("off", "on", "both"),
        default="off",
        help="torch 2.13+'s late receive posting for runtime schedules (default off)",
    )
    parser.add_argument(
        "--forward-only", action="store_true", help="an eval step: no backward, no grad receives"
    )
    parser.add_argument(
        "--slack",
        type=int,
        default=None,
        help="forward ring slack for the tight column (default 2)",
    )
    parser.add_argument(
        "--grad-slack",
        type=int,
        default=None,
        help="grad ring slack for the tight column (default 1)",
    )
    parser.add_argument(
        "--set-mib",
        type=float,
        default=None,
        metavar="MIB",
        help="bytes of one buffer set, MiB: adds GiB per stage and per rank (sets x MIB)",
    )
    parser.add_argument(
        "--validate",
        action="store_true",
        help="run every selected schedule on real gloo ranks with schedule='auto' (stock / measure / slack-0 "
        "ring per --pp and M = factor x pp) and a ring one short that the guard must stop; prints the table",
    )
    parser.add_argument(
        "--factors",
        nargs="+",
        type=int,
        default=[1, 2, 4],
        metavar="F",
        help="with --validate: M = F x 2pp (default 1 2 4)",
    )
    parser.add_argument(
        "--no-guard-checks", action="store_true", help="with --validate: skip the guard launches"
    )
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


def _fail(message: str) -> int:
    print(f"pooltk schedules: error: {message}", file=sys.stderr)
    return 2


def _label(r: dict[str, Any]) -> str:
    defer = " defer_pp_recv" if r["defer_pp_recv"] else ""
    return f"{r['schedule']} pp{r['pp']} vpp{r['vpp']} M{r['n_microbatches']}{defer}"


def _ranks(table: Any, prog: Any, spans: Any, config: Any) -> list[dict[str, Any]]:
    """Per rank: its stages, per-stage sets summed, the rank-shared rings and the rank's live set."""
    from functools import partial

    from pooltk.analysis.sharing import rank_rings
    from pooltk.pool.ring import ring_size

    rings = rank_rings(prog, spans, partial(ring_size, config=config))
    out = []
    for rank in sorted(set(prog.stage_to_rank.values())):
        part = table[table["rank"] == rank]
        mine = [r for r in rings if r.rank == rank]
        out.append(
            {
                "rank": rank,
                "stages": sorted(int(s) for s in part["stage"].unique()),
                "stock": int(part["stock_buffers"].sum()),
                "stock_lazy": int(part["lazy_buffers"].sum()),
                "tight": int(part["tight"].sum()),
                "live_per_stage": int(part["live_peak"].sum()),
                "shared": sum(r.size for r in mine),
                "rank_live": sum(r.live for r in mine),
                "rings": [
                    {
                        "direction": r.direction,
                        "stages": list(r.stages),
                        "live": r.live,
                        "size": r.size,
                        "shared": len(r.stages) > 1,
                    }
                    for r in mine
                ],
            }
        )
    return out


def _totals(
    table: Any,
    name: str,
    pp: int,
    vpp: int,
    m: int,
    defer: bool,
    forward_only: bool,
    config: Any = None,
) -> dict[str, Any]:
    from pooltk.analysis.lifetimes import ScheduleShape, analyse, shared_slots
    from pooltk.config import PoolConfig

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
    ranks = _ranks(table, prog, spans, config or PoolConfig())
    return {
        "schedule": name,
        "pp": pp,
        "vpp": vpp,
        "n_microbatches": m,
        "defer_pp_recv": defer,
        "stock": int(table["stock_buffers"].sum()),
        "stock_lazy": int(table["lazy_buffers"].sum()),
        "per_stage_direction": slots.per_stage_direction,
        "per_rank_direction": slots.per_rank_direction,
        "per_rank": slots.per_rank,
        "tight": int(table["tight"].sum()),
        "shared": sum(r["shared"] for r in ranks),
        "ranks": ranks,
    }


def _rank_view(ranks: list[dict[str, Any]], set_mib: float | None) -> str:
    """The per-rank lines of one block: sets (and GiB with ``--set-mib``) for every policy."""
    import pandas as pd

    view = pd.DataFrame(
        [
            {
                "rank": r["rank"],
                "stages": ",".join(map(str, r["stages"])),
                "stock": r["stock"],
                "stock-lazy": r["stock_lazy"],
                "tight": r["tight"],
                "live": r["live_per_stage"],
                "rank-shared": r["shared"],
                "rank live": r["rank_live"],
                "rings (dir stages: live->K)": " ".join(
                    f"{g['direction'][0]}{'+'.join(map(str, g['stages']))}:{g['live']}->{g['size']}"
                    for g in r["rings"]
                ),
            }
            for r in ranks
        ]
    )
    if set_mib is not None:
        gib = set_mib / 1024
        view = view.assign(
            **{f"{c} GiB": view[c] * gib for c in ("stock", "tight", "rank-shared", "rank live")}
        )
    return (
        "   per rank (a rank holds all its stages; rank-shared: one ring per rank and direction, K = the rank's "
        "live set + slack; rank live: that live set):\n"
        + view.to_string(index=False, float_format=lambda x: f"{x:,.2f}")
    )


def _validate(args: argparse.Namespace) -> int:
    from pooltk.analysis.programs import ScheduleAnalysisError, resolve_schedule
    from pooltk.parity.schedule_check import check_schedules

    try:
        names = tuple(resolve_schedule(n)[0] for n in args.schedule) if args.schedule else None
    except ScheduleAnalysisError as exc:
        return _fail(str(exc))
    result = check_schedules(
        pps=tuple(args.pp),
        factors=tuple(args.factors),
        schedules=names,
        guard_checks=not args.no_guard_checks,
        progress=lambda msg: print(f"[validate] {msg}", file=sys.stderr, flush=True),
    )
    summary = result.summary()
    broken = (
        result.broken()
    )  # [Note: the claims of a validation]: a table written holds every claim
    if args.json:
        print(
            json.dumps(
                {
                    "ok": not broken,
                    "broken": broken,
                    "summary": summary.to_dict(orient="records"),
                    "rows": result.rows,
                    "guard": result.guard,
                    "skipped": result.skipped,
                },
                indent=2,
                default=str,
            )
        )
    else:
        print(summary.to_string(index=False))
        for sk in result.skipped:
            print(f"not run: {sk['schedule']} pp{sk['pp']} M{sk['n_microbatches']}: {sk['reason']}")
        print(
            f"\nall pooled runs bitwise equal, measured peaks = analysed, guard catches: {not broken}"
        )
    if broken:
        tail = f"; nothing written to {args.csv}" if args.csv else ""
        print(
            "\n".join(
                [
                    f"pooltk schedules: error: --validate breaks {len(broken)} claim(s){tail}:",
                    *(f"  {b}" for b in broken),
                ]
            ),
            file=sys.stderr,
        )
        return 1
    if args.csv:
        result.to_frame().to_csv(args.csv, index=False)
    return 0


def _without_pandas() -> int | None:
    """The exit status when pandas is missing (the torch-only install), else None."""
    import importlib.util

    if importlib.util.find_spec("pandas") is not None:
        return None
    return _fail(
        "pandas: found not installed; required: pandas for the schedule tables (the lab extra; the analysis "
        "itself, pooltk.analysis.lifetimes.live_sets, needs torch alone). Fix: pip install 'pooltk[lab]'."
    )


def run(args: argparse.Namespace) -> int:
    missing = _without_pandas()
    if missing is not None:
        return missing
    if getattr(args, "validate", False):
        return _validate(args)
    from pooltk.analysis.lifetimes import (
        ScheduleAnalysisError,
        analysable_schedules,
        resolve_schedule,
        sweep_table,
    )
    from pooltk.config import PoolConfig
    from pooltk.memory.sweeps import tight_rings

    defaults = PoolConfig()
    slack = defaults.slack if args.slack is None else args.slack
    grad_slack = defaults.grad_slack if args.grad_slack is None else args.grad_slack
    for flag, values, low in (
        ("--pp", args.pp, 1),
        ("--vpp", args.vpp, 1),
        ("--microbatches", args.microbatches, 1),
        ("--slack", [slack], 0),
        ("--grad-slack", [grad_slack], 0),
    ):
        bad = [v for v in values if v < low]
        if bad:
            return _fail(f"{flag}: found {bad[0]}; required an integer >= {low}.")
    if args.set_mib is not None:
        from pooltk.cli.errors import FlagError, check_flag_positive

        try:
            check_flag_positive(
                "--set-mib", args.set_mib, fix="give the MiB of one receive-buffer set, e.g. 416."
            )
        except FlagError as exc:
            return _fail(str(exc))
    names = args.schedule or list(analysable_schedules())
    try:
        resolved = [resolve_schedule(n)[0] for n in names]
    except ScheduleAnalysisError as exc:
        return _fail(str(exc))
    defers = {"off": [False], "on": [True], "both": [False, True]}[args.defer_pp_recv]
    table, refused = sweep_table(
        resolved,
        pps=args.pp,
        vpps=args.vpp,
        microbatches=args.microbatches,
        defer_pp_recv=defers,
        forward_only=args.forward_only,
    )
    if table.empty:
        for r in refused:
            print(f"refused {_label(r)}: {r['reason']}", file=sys.stderr)
        return _fail("no schedule shape could be analysed (reasons above).")
    table = tight_rings(table, slack=slack, grad_slack=grad_slack)
    keys = ["schedule", "pp", "vpp", "n_microbatches", "defer_pp_recv"]
    config = PoolConfig(slack=slack, grad_slack=grad_slack)
    totals = [
        _totals(group, *key, args.forward_only, config)  # type: ignore[misc]
        for key, group in table.groupby(keys, sort=False)
    ]
    if args.csv:
        table.to_csv(args.csv, index=False)
    if args.json:
        print(
            json.dumps(
                {
                    "slack": slack,
                    "grad_slack": grad_slack,
                    "set_mib": args.set_mib,
                    "rows": table.to_dict(orient="records"),
                    "totals": totals,
                    "refused": refused,
                },
                indent=2,
                default=lambda o: o.item() if hasattr(o, "item") else str(o),
            )
        )
        return 0
    shown = [
        "stage",
        "rank",
        "direction",
        "stock_buffers",
        "lazy_buffers",
        "live_peak",
        "tight",
        "handoff",
    ]
    for total, (key, group) in zip(totals, table.groupby(keys, sort=False)):
        name, pp, vpp, m, defer = key  # type: ignore[misc]
        print(
            f"== {name}  pp={pp} vpp={vpp} M={m}"
            + ("  defer_pp_recv" if defer else "")
            + ("  forward-only" if args.forward_only else "")
            + f"  (tight = live + slack {slack} / grad slack {grad_slack}, at most M)"
        )
        view = group[shown].rename(
            columns={"stock_buffers": "stock", "lazy_buffers": "stock-lazy", "live_peak": "live"}
        )
        view = view.assign(handoff=view["handoff"].map({True: "local", False: ""}))
        if args.set_mib is not None:
            gib = args.set_mib / 1024
            view = view.assign(
                **{"stock GiB": view["stock"] * gib, "tight GiB": view["tight"] * gib}
            )
        print(view.to_string(index=False, float_format=lambda x: f"{x:,.2f}"))
        print(_rank_view(total["ranks"], args.set_mib))
        print(
            f"   sets: stock {total['stock']}, stock-lazy (torch >= 2.15) {total['stock_lazy']}, tight {total['tight']}, "
            f"rank-shared {total['shared']}; "
            "slots at the live peak: "
            f"per stage+direction {total['per_stage_direction']}, shared per rank+direction "
            f"{total['per_rank_direction']}, shared per rank {total['per_rank']}\n"
        )
    for r in refused:
        print(f"refused {_label(r)}: {r['reason']}")
    if args.csv:
        print(f"wrote {args.csv}")
    return 0
