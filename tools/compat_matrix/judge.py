"""A release's verdict from its row: pooled-bitwise, released-bitwise, stands-down, or FAIL with
every problem found.

``released-bitwise`` is the lazy layout (torch 2.15): no rings (torch allocates per receive), the
last-stage release installed, every run bitwise equal to stock, and the last stage's peak of live
receive buffers down from M (stock) to at most :data:`RELEASED_LAST_STAGE_PEAK`.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

OUTCOMES = ("pooled-bitwise", "released-bitwise", "stands-down", "FAIL")

RELEASED_LAST_STAGE_PEAK = 2
"""The last stage's live forward receive buffers with the release on torch 2.15: the one being
computed and the next microbatch's, whose receive 2.15 posts before this one's backward (measured
on 2.15.0, gloo pp4 M8 and M16; stock holds M)."""


@dataclass(frozen=True, slots=True, kw_only=True)
class Verdict:
    """The outcome of one release and why."""

    outcome: str
    """One of OUTCOMES."""
    problems: list[str]
    """Every problem found; empty unless the outcome is FAIL."""
    layout: str | None = None
    """The layout family ``pooltk probe`` detected (None when the checks never produced a row)."""
    installed: bool | None = None
    """Whether ``install()`` pooled (None when the checks never produced a row)."""

    def row_fields(self) -> dict[str, Any]:
        """The keys a published row carries (layout and installed only when the checks ran)."""
        out: dict[str, Any] = {"outcome": self.outcome, "problems": list(self.problems)}
        if self.layout is not None or self.installed is not None:
            out["layout"], out["installed"] = self.layout, self.installed
        return out


def pooled_variants(parity: dict) -> list[dict]:
    return [v for v in parity.get("variants", []) if v["pooled"]]


def any_ring(variant: dict) -> bool:
    return any(r for r in variant["rings"].values())


def judge(row: dict[str, Any]) -> Verdict:
    """Judge one release's row (what its checks wrote, plus ``expected_layout``, or ``error``)."""
    if "error" in row:
        return Verdict(outcome="FAIL", problems=[row["error"]])
    problems: list[str] = []
    probe = row["probe"]
    layout, installed = probe.get("layout"), bool(probe.get("installed"))

    def verdict(outcome: str) -> Verdict:
        return Verdict(
            outcome=outcome if not problems else "FAIL",
            problems=problems,
            layout=layout,
            installed=installed,
        )

    wrong_layout = layout != row["expected_layout"]
    if wrong_layout:
        problems.append(
            f"layout {layout!r} detected, {row['expected_layout']!r} expected for this release"
        )
    for name in (
        "compat",
        "unit",
    ):  # the release's own venv runs both; a failure there is a failure
        res = row["tests"][name]
        if res.get("failed") or res.get("errors") or not res.get("passed"):
            problems.append(f"tests/{name}: {res}")
    pos, neg = row["parity"], row["negative"]
    raised = [
        f"{name}: {res['error']}: {res.get('message', '')[:300]}"
        for name, res in [("parity", pos), *neg.items()]
        if "error" in res
        and not (name.startswith("guard_on") and res.get("error") == "PoolOverrunError")
    ]
    problems += raised
    if raised or wrong_layout:
        return verdict(
            "FAIL"
        )  # nothing to judge past a run that raised; a failed test hides no other problem
    if installed and probe.get("mode") == "release":
        return _judge_release(row, pos, neg, problems, verdict)
    if installed:
        if not pos["bitwise_equal"]:
            problems.append("pooled runs are not bitwise equal to stock")
        for v in pooled_variants(pos):
            if not any_ring(v):
                problems.append(f"{v['name']}: installed but no stage holds a ring")
            if not v["bytes_exact"]:
                problems.append(f"{v['name']}: receive bytes differ from K sets x set bytes")
            if row.get("alloc_free") and not v["alloc_exact"]:
                problems.append(f"{v['name']}: setup allocated more than the K sets")
        for key in ("guard_off_short", "guard_off_gpipe"):
            r = neg[key]
            if r.get("bitwise_equal") is not False or not (r.get("max_abs_diff") or 0) > 0:
                problems.append(f"{key}: expected silent divergence without the guard, got {r}")
        for key in ("guard_on_short", "guard_on_gpipe"):
            if neg[key].get("error") != "PoolOverrunError":
                problems.append(f"{key}: expected PoolOverrunError, got {neg[key]}")
        return verdict("pooled-bitwise")
    if not layout or not probe.get("reason"):
        problems.append("not installed without a known layout and a reason")
    for res in [
        pos,
        neg["guard_off_short"],
        neg["guard_off_gpipe"],
        neg["guard_on_short"],
        neg["guard_on_gpipe"],
    ]:
        if res.get("error"):
            problems.append(f"stood down but a run raised {res['error']}")
        elif res.get("bitwise_equal") is not True:
            problems.append("stood down but a run was not bitwise equal to stock")
    if any(any_ring(v) for v in pooled_variants(pos)):
        problems.append("stood down but some stage holds a ring")
    return verdict("stands-down")


def _judge_release(
    row: dict[str, Any], pos: dict, neg: dict, problems: list[str], verdict: Any
) -> Verdict:
    """The lazy layout with the release installed (see the module docstring)."""
    if not pos["bitwise_equal"]:
        problems.append("released runs are not bitwise equal to stock")
    if any(any_ring(v) for v in pooled_variants(pos)):
        problems.append("mode=release but some stage holds a ring")
    for key in ("guard_off_short", "guard_off_gpipe", "guard_on_short", "guard_on_gpipe"):
        r = neg[key]
        if r.get("error") or r.get("bitwise_equal") is not True:
            problems.append(f"{key}: without rings every run must equal stock, got {r}")
    released = (row.get("bytes") or {}).get("released") or {}
    stock = ((row.get("bytes") or {}).get("stock") or {}).get("sets") or {}
    if not released or not stock:
        problems.append("no live receive buffers were counted for the released variants")
    else:
        last = str(max(int(s) for s in stock))
        own = (row.get("bytes") or {}).get("stock_variants") or {}
        for name, counted in released.items():
            twin = (
                "stock/" + name.split("/", 1)[1] if "/" in name else ""
            )  # the stock run of the same frontend
            was = (own.get(twin) or {}).get("sets", stock)[last][0]
            peak = counted["sets"][last][0]
            # an eval step between training steps computes losses whose graphs (no backward ever
            # runs) keep that step's inputs: the bound is the training step's, checked on the
            # training-only variants
            bound = RELEASED_LAST_STAGE_PEAK if not name.endswith("+eval") else was - 1
            if not peak or peak > bound or peak >= was:
                problems.append(
                    f"{name}: last stage peak {peak} live forward buffers with the release "
                    f"(its stock run {was}); required <= {bound} and below stock"
                )
    return verdict("released-bitwise")
