"""The parity report as text: the table ``pooltk parity`` and ``pooltk report`` print."""

from __future__ import annotations

from dataclasses import asdict, dataclass, replace
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pooltk.parity.launch import ParityReport

__all__ = [
    "PASSING",
    "VERDICTS",
    "Judgement",
    "ThreeWay",
    "exit_code",
    "format_report",
    "judge",
    "run_three_way",
    "verdict_line",
]


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**10:.1f} KiB" if n < 2**20 else f"{n / 2**20:.2f} MiB"


def _sets_cell(label: str, recv: dict[str, dict[str, int]]) -> str:
    """``s1 4+4 1.5 KiB``: the sets held forward + grad and their bytes (a direction absent: 0)."""
    from pooltk.analysis.lifetimes import DIRECTIONS

    f, g = (recv.get(d, {"sets": 0, "bytes": 0}) for d in DIRECTIONS)
    return f"{label} {f['sets']}+{g['sets']} {_fmt_bytes(f['bytes'] + g['bytes'])}"


def format_report(report: ParityReport) -> str:
    """The parity report as the text table ``pooltk parity`` prints."""
    w = max([34] + [len(v.name) + 1 for v in report.variants])
    lines = _verdict_lines(report, w) + _buffer_lines(report, w) + _usage_lines(report, w)
    lines += _notes(report)
    lines.append(f"\nbitwise_equal: {report.bitwise_equal}")
    return "\n".join(lines)


def _verdict_lines(report: ParityReport, w: int) -> list[str]:
    """The shape, then one row per variant: bitwise, max differences, step time."""
    spec = report.spec
    lines = [
        f"parity pp{spec.pp} x {spec.microbatches} microbatches x {spec.steps} steps "
        f"(boundary tensor {_fmt_bytes(report.boundary_bytes)} per microbatch), wall "
        f"{report.wall_s:.1f} s",
        f"{'variant':{w}} {'bitwise':>8} {'max|dparam|':>12} {'max|dloss|':>11} {'step ms':>8}",
    ]
    for v in report.variants:
        bw = "ref" if v.reference is None else ("yes" if v.bitwise_equal else "NO")
        dp = "" if v.params_max_abs_diff is None else f"{v.params_max_abs_diff:.3g}"
        dl = "" if v.losses_max_abs_diff is None else f"{v.losses_max_abs_diff:.3g}"
        lines.append(f"{v.name:{w}} {bw:>8} {dp:>12} {dl:>11} {v.median_step_time_s * 1e3:8.1f}")
    return lines


def _buffer_lines(report: ParityReport, w: int) -> list[str]:
    """Receive storages per stage, and per rank where a rank runs several stages (each storage
    once: a rank-shared ring's slots too)."""
    lines = ["\nreceive buffers per stage (sets fwd+grad, bytes):"]
    for v in report.variants:
        cells = [_sets_cell(f"s{s}", v.recv[s]) for s in sorted(v.recv)]
        lines.append(f"  {v.name:{w - 2}} " + " | ".join(cells))
    multi = [v for v in report.variants if v.rank_recv and len(v.recv) > len(v.rank_recv)]
    if multi:
        lines.append(
            "\nreceive buffers per rank (distinct storages over the rank's stages, sets fwd+grad, "
            "bytes):"
        )
        for v in multi:
            cells = [_sets_cell(f"r{r}", v.rank_recv[r]) for r in sorted(v.rank_recv)]
            lines.append(f"  {v.name:{w - 2}} " + " | ".join(cells))
    return lines


def _usage_lines(report: ParityReport, w: int) -> list[str]:
    """What each ring held at once in the last step, beside stock and the live set; a WARNING
    where a ring saved nothing."""
    used = [v for v in report.variants if any(v.usage.values())]
    if not used:
        return []
    lines = [
        "\nsets held at once in the last step (pooled rings; fwd / grad: held of stock, live set + "
        "slack):"
    ]
    for v in used:
        cells = [f"s{s} " + _usage_cell(v.usage[s]) for s in sorted(v.usage)]
        lines.append(f"  {v.name:{w - 2}} " + " | ".join(cells))
        for s in sorted(v.usage):
            for u in v.usage[s]:
                if u["held_sets"] >= u["stock"] and u["ring"] < u["stock"]:
                    lines.append(
                        f"  WARNING {v.name} stage {s} {u['direction']}: the ring saved nothing "
                        f"({u['held_sets']} sets held, stock {u['stock']}; {u['rehomes']} "
                        "re-homes); the pooltk log names the holder and the fix"
                    )
    return lines


def _usage_cell(rows: list[dict]) -> str:
    """``held/stock (live L, ring K)`` forward ; grad, ``-`` for a direction without a ring."""
    by = {u["direction"]: u for u in rows}
    parts = []
    for u in (by.get("forward"), by.get("grad")):
        parts.append(
            f"{u['held_sets']}/{u['stock']} (live {u['live']}, ring {u['ring']})" if u else "-"
        )
    return " ; ".join(parts)


def _notes(report: ParityReport) -> list[str]:
    """A pooled variant that held no ring (and why); what the fresh variant compares."""
    lines = []
    for v in report.variants:
        if v.pooled and all(not r for r in v.rings.values()):
            why = next((g for g in v.gate.values() if g), None)
            why = why or "install() did not pool on this torch (run `pooltk probe` for why)"
            lines.append(f"note: {v.name} held no ring on any stage (ran stock): {why}")
    if any(not v.pooled and v.reference is not None for v in report.variants):
        lines.append(
            "note: fresh/... is stock torch with a new buffer per receive (torch 2.15's "
            "semantics); its 'bitwise' column compares it with stock (NO: stock's numbers depend "
            "on its buffer reuse)"
        )
    return lines


# ---------------------------------------------------------------------------------------
# Three-way judging: pooled vs stock vs fresh.
#
# [Note: three-way verdicts]
# Stock torch <= 2.14 hands microbatch c the same receive buffer every step, so stock's own
# numbers can depend on that reuse (hooks registered on a received input pile up across
# steps, pytorch issue #185331; a tensor a model keeps across a step is overwritten by the
# next step's receive). ``fresh`` (stock with a newly allocated buffer per receive, torch
# 2.15's semantics; pooltk.parity.fresh) is what a correct pool must give. Each pooled variant
# gets one verdict:
#
# - ``equal``: pooled == stock bitwise (params, every loss, merged outputs, what hooks kept);
# - ``explained``: pooled == fresh bitwise while stock != fresh: stock's numbers depend on
#   buffer reuse, and the reason where pooltk can name it;
# - ``loud``: the pooled run raised an error naming pooltk (a pooltk error class, or a
#   message that names pooltk);
# - ``unnamed``: the pooled run raised an error that does not name pooltk while stock and
#   fresh ran (a defect: every error pooltk causes must name it);
# - ``outside``: pooled differs from fresh with no error, for a model whose numbers hang on
#   something neither torch nor pooltk promises (a cache keyed by a received tensor's address:
#   ``pooltk.parity.models.OUTSIDE_CONTRACT`` names each such class and why). Not a pass, not a
#   defect;
# - ``silent``: pooled differs from fresh with no error (a defect; must never happen);
# - ``invalid``: stock or fresh itself failed (the model, not the pool), never a pass.
#
# One launch runs fresh, stock and pooled (fresh first: the launcher compares losses with
# the last unpooled variant of a run key, which must be stock). It answers pooled vs stock and
# fresh vs stock. Only where both differ from stock is pooled vs fresh unknown; a second
# launch (fresh, then pooled with ``compare_to="fresh"``) answers it.
# ---------------------------------------------------------------------------------------

VERDICTS: tuple[str, ...] = (
    "equal",
    "explained",
    "loud",
    "outside",
    "unnamed",
    "silent",
    "invalid",
)
"""Every verdict of [Note: three-way verdicts], best first."""
PASSING: tuple[str, ...] = ("equal", "explained", "loud")
"""Verdicts that keep the pool's promise (bitwise like fresh, or a loud error naming pooltk)."""
_POOLTK_ERRORS = ("PoolOverrunError", "PoolSetupError", "FreshError")
HOOKS_REASON = "hooks registered on a received input pile up across steps (pytorch issue #185331)"
KEPT_REASON = (
    "a tensor the model kept of a received input was overwritten by a later receive "
    "into the same buffer"
)


@dataclass(kw_only=True, slots=True)
class Judgement:
    """The verdict of one pooled variant (see [Note: three-way verdicts])."""

    variant: str
    """The pooled variant's name."""
    verdict: str
    """One of :data:`VERDICTS`."""
    reason: str = ""
    """For ``explained``: why stock's numbers depend on buffer reuse; for failures, what differed or
    raised."""
    stock: str | None = None
    """The stock variant compared with."""
    fresh: str | None = None
    """The fresh variant compared with."""
    equal_stock: bool | None = None
    """pooled == stock bitwise."""
    equal_fresh: bool | None = None
    """pooled == fresh bitwise (None: not needed, or not measured)."""
    stock_equal_fresh: bool | None = None
    """stock == fresh bitwise: False means stock's own numbers depend on buffer reuse."""
    max_abs_diff_stock: float | None = None
    """Largest parameter difference pooled vs stock."""

    def row(self) -> dict:
        """Every field but the names of the stock and fresh variants compared with."""
        return {k: v for k, v in asdict(self).items() if k not in ("stock", "fresh")}


def same(v) -> bool:  # noqa: ANN001 - a VariantResult with a reference
    """Bitwise equal to its reference: parameters, and every digest (outputs, losses, kept
    tensors)."""
    return bool(v.params_bitwise_equal and v.outputs_bitwise_equal is not False)


def names_pooltk(error_type: str, message: str) -> bool:
    """True when an error names pooltk (one of its error classes, or its name in the message)."""
    return error_type in _POOLTK_ERRORS or "pooltk" in message.lower()


def fresh_of(report: ParityReport, stock_name: str):  # noqa: ANN201 - a VariantResult or None
    """The fresh variant whose reference is ``stock_name`` (None when the launch ran none)."""
    return next((v for v in report.variants if v.reference == stock_name and not v.pooled), None)


def reuse_reason(report: ParityReport, stock_name: str, bodies: tuple[str, ...] = ()) -> str:
    """Why stock's numbers depend on buffer reuse, as far as pooltk can name it.

    Hooks piling up are measured (the most gradient hooks on one stock receive buffer vs on a
    fresh one); a kept tensor is named from the stage bodies when they are known.
    """
    from pooltk.parity.models import STATEFUL_BODIES

    stock, fresh = report.variant(stock_name), fresh_of(report, stock_name)
    reasons = []
    hooks = max((m.get("max_hooks", 0) for s in stock.recv.values() for m in s.values()), default=0)
    fresh_hooks = max(
        (m.get("max_hooks", 0) for s in (fresh.recv if fresh else {}).values() for m in s.values()),
        default=0,
    )
    if hooks > max(1, fresh_hooks):
        reasons.append(
            f"{HOOKS_REASON}: {hooks} hooks on one stock buffer after {report.spec.steps} steps, "
            f"{fresh_hooks} on a fresh one"
        )
    kept = [
        STATEFUL_BODIES[b]
        for b in dict.fromkeys(bodies)
        if b in STATEFUL_BODIES and b != "grad_hook"
    ]
    if kept:
        reasons.append(f"{KEPT_REASON} ({'; '.join(kept)})")
    return "; ".join(reasons) or KEPT_REASON + " (what it was, pooltk cannot name from the run)"


def needs_fresh_comparison(report: ParityReport) -> list[str]:
    """Pooled variants whose comparison with fresh is still open: both pooled and fresh differ from
    stock."""
    out = []
    for v in report.variants:
        if not v.pooled or v.reference is None or same(v):
            continue
        f = fresh_of(report, v.reference)
        if f is not None and not same(f):
            out.append(v.name)
    return out


def fresh_followup(report: ParityReport, names: list[str]) -> tuple:
    """Variants of the second launch for ``names``: each fresh reference, then its pooled variant vs
    fresh."""
    out: list = []
    spec_by_name = {v.name: v for v in report.spec.variants}
    for name in names:
        pooled = spec_by_name[name]
        fresh = spec_by_name[fresh_of(report, report.variant(name).reference).name]
        if fresh not in out:
            out.append(fresh)
        out.append(replace(pooled, name=f"{name}|vs-fresh", compare_to="fresh"))
    return tuple(out)


def judge(
    report: ParityReport,
    followup: ParityReport | None = None,
    bodies: dict[str, tuple[str, ...]] | None = None,
) -> list[Judgement]:
    """One :class:`Judgement` per pooled variant of ``report`` (``followup``: the second launch, if
    run)."""
    out = []
    for v in report.variants:
        if not v.pooled or v.reference is None:
            continue
        f = fresh_of(report, v.reference)
        mine = (bodies or {}).get(v.name, ())
        wanted = f"{v.name}|vs-fresh"
        vf = next((x for x in (followup.variants if followup else ()) if x.name == wanted), None)
        j = Judgement(
            variant=v.name,
            verdict="equal",
            stock=v.reference,
            fresh=f.name if f else None,
            equal_stock=same(v),
            stock_equal_fresh=same(f) if f else None,
            max_abs_diff_stock=v.params_max_abs_diff,
        )
        if j.equal_stock:
            j.equal_fresh = j.stock_equal_fresh
        elif f is None:
            j.verdict = "silent"
            j.reason = "differs from stock; no fresh reference was run to tell why"
        elif j.stock_equal_fresh:
            j.equal_fresh, j.verdict = False, "silent"
            j.reason = _difference(v, "stock and fresh agree")
        elif vf is None:
            j.verdict = "silent"
            j.reason = "differs from stock and fresh differs too; pooled vs fresh not measured"
        elif same(vf):
            j.equal_fresh, j.verdict = True, "explained"
            j.reason = reuse_reason(report, v.reference, mine)
        else:
            j.equal_fresh, j.verdict = False, "silent"
            j.reason = _difference(vf, "differs from fresh too")
        if j.verdict == "silent":
            _outside(j, mine)
        out.append(j)
    return out


def _outside(j: Judgement, bodies: tuple[str, ...]) -> None:
    """Re-judge a ``silent`` verdict as ``outside`` where the model's numbers hang on what nobody
    promises."""
    from pooltk.parity.models import OUTSIDE_CONTRACT

    why = [OUTSIDE_CONTRACT[b] for b in dict.fromkeys(bodies) if b in OUTSIDE_CONTRACT]
    if why:
        j.verdict, j.reason = "outside", "; ".join(why) + f" ({j.reason})"


def _difference(v, context: str) -> str:  # noqa: ANN001
    return (
        f"{context}; pooled params_equal={v.params_bitwise_equal} (max diff "
        f"{v.params_max_abs_diff}), outputs_equal={v.outputs_bitwise_equal}"
    )


def verdict_line(judgements: list[Judgement]) -> str:
    """The one line ``pooltk parity`` prints under its table: the verdicts and, for ``explained``,
    why."""
    if not judgements:
        return "verdict: no pooled variant was judged"
    counts = {k: sum(j.verdict == k for j in judgements) for k in VERDICTS}
    head = "verdict: " + ", ".join(f"{n} {k}" for k, n in counts.items() if n)
    explained = [j for j in judgements if j.verdict == "explained"]
    if explained:
        reasons = "; ".join(dict.fromkeys(j.reason for j in explained))
        head += (
            ". explained: pooled equals fresh (a new buffer per receive, torch 2.15's semantics) "
            f"bitwise; stock's numbers depend on buffer reuse: {reasons}"
        )
    bad = [j for j in judgements if j.verdict not in PASSING]
    if bad:
        head += ". " + "; ".join(f"{j.verdict.upper()} {j.variant}: {j.reason}" for j in bad)
    return head


def exit_code(judgements: list[Judgement]) -> int:
    """0 when every pooled variant is ``equal`` or ``explained``, else 1 (what ``pooltk parity``
    returns)."""
    return 0 if judgements and all(j.verdict in ("equal", "explained") for j in judgements) else 1


@dataclass(kw_only=True, slots=True)
class ThreeWay:
    """A parity run judged three ways: the main launch, the follow-up (if any), the verdicts."""

    report: ParityReport
    followup: ParityReport | None
    judgements: list[Judgement]

    @property
    def ok(self) -> bool:
        return exit_code(self.judgements) == 0

    @property
    def line(self) -> str:
        return verdict_line(self.judgements)


def run_three_way(spec) -> ThreeWay:  # noqa: ANN001 - a ParitySpec
    """Run ``spec`` with a fresh reference beside each stock variant, then pooled vs fresh where
    needed.

    Errors of the launch (``PoolOverrunError``, ``ParityRankError``, ``ParityTimeoutError``)
    propagate, as from :func:`pooltk.parity.run_parity`.
    """
    from pooltk.parity.launch import run_parity
    from pooltk.parity.spec import with_fresh

    if not any(v.buffers == "fresh" for v in spec.variants):
        spec = replace(spec, variants=with_fresh(spec.variants))
    report = run_parity(spec)
    open_names = needs_fresh_comparison(report)
    followup = None
    if open_names:
        followup = run_parity(replace(spec, variants=fresh_followup(report, open_names)))
    bodies = {v.name: v.bodies for v in spec.variants}
    return ThreeWay(report=report, followup=followup, judgements=judge(report, followup, bodies))
