"""The matrix as a Markdown table: one line per release row, every cell a single line."""

from __future__ import annotations

from typing import Any

from tools.compat_matrix.judge import pooled_variants

HEADER = (
    "| release | torch build | layout | outcome | parity | receive buffers per stage, fwd+grad "
    "sets (s0 s1 s2 s3), bytes | guard catches | tests | time |"
)


def _kib(n: int | None) -> str:
    return "-" if n is None else f"{n / 1024:.0f}"


def _sets_cell(sets: dict[str, list[int]]) -> str:
    return " ".join(f"{f}+{g}" for _, (f, g) in sorted(sets.items(), key=lambda kv: int(kv[0])))


def bytes_cell(row: dict[str, Any]) -> str:
    b = row.get("bytes") or {}
    if not b:
        return "-"
    stock, pooled, released = b.get("stock"), b.get("pooled"), b.get("released")
    if (
        released
    ):  # the default policy's run where there is one; a stable pick either way (JSON sorts keys)
        name = next((n for n in sorted(released) if n.startswith("tight-s2")), min(released))
        first = released[name]
        return (
            f"stock {b['stock_method']}: {_sets_cell(stock['sets'])} = {_kib(stock['total'])} KiB; "
            f"released ({name}): {_sets_cell(first['sets'])} = {_kib(first['total'])} KiB"
        )
    if pooled is None:
        return (
            f"stock {b['stock_method']}: {_sets_cell(stock['sets'])} = {_kib(stock['total'])} KiB; "
            "pooled: none (stood down)"
        )
    return (
        f"stock {_sets_cell(stock['sets'])} = {_kib(stock['total'])} KiB; "
        f"pooled {_sets_cell(pooled['sets'])} = {_kib(pooled['total'])} KiB"
    )


def guard_cell(row: dict[str, Any]) -> str:
    neg = row.get("negative")
    if not neg:
        return "-"
    if not row.get("installed") or row.get("probe", {}).get("mode") == "release":
        return "n/a (no rings; both controls ran bitwise equal to stock)"

    def one(key_off: str, key_on: str) -> str:
        off, on = neg[key_off], neg[key_on]
        caught = (
            "PoolOverrunError" if on.get("error") == "PoolOverrunError" else f"NOT caught ({on})"
        )
        return f"guard off: diverged {off.get('max_abs_diff', 0):.1e}; guard on: {caught}"

    return (
        f"short ring: {one('guard_off_short', 'guard_on_short')}. GPipe forced: "
        f"{one('guard_off_gpipe', 'guard_on_gpipe')}"
    )


def parity_cell(row: dict[str, Any]) -> str:
    p = row.get("parity")
    if not p or "variants" not in p:
        return "-"
    pooled = pooled_variants(p)
    eq = sum(bool(v["bitwise_equal"]) for v in pooled)
    return f"{'bitwise' if p['bitwise_equal'] else 'DIFFERS'} ({eq}/{len(pooled)} variants)"


def tests_cell(row: dict[str, Any]) -> str:
    t = row.get("tests")
    if not t:
        return "-"

    def one(name: str) -> str:
        r = t[name]
        s = f"{r.get('passed', 0)} passed"
        if r.get("failed") or r.get("errors"):
            s += f", {r.get('failed', 0) + r.get('errors', 0)} failed"
        if r.get("skipped"):
            s += f", {r.get('skipped')} skipped"
        return s

    return f"compat {one('compat')}; unit {one('unit')}"


def timing_cell(row: dict[str, Any]) -> str:
    t = row["timings_s"]
    dl = t.get("download", 0)
    return (
        f"{t['total_without_download']:.0f} s (env {t.get('env', 0):.0f}, "
        f"checks {t.get('checks', 0):.0f}); "
        f"download {dl:.0f} s" + (" (cached)" if row.get("download", {}).get("cached") else "")
    )


def cell(text: str, limit: int) -> str:
    """One table cell: a single line, no pipes, at most ``limit`` characters."""
    flat = " ".join(str(text).replace("|", "/").split())
    return flat if len(flat) <= limit else flat[: limit - 3] + "..."


def layout_cell(row: dict[str, Any]) -> str:
    layout = row.get("layout") or "-"
    if row.get("expected_layout") and row.get("layout") != row.get("expected_layout"):
        layout += f" (expected {row['expected_layout']})"
    if row.get("installed") and row.get("probe", {}).get("mode") == "release":
        layout += ", installed (release only: no rings)"
    elif row.get("installed"):
        layout += ", installed" + (
            " (K sets only)" if row.get("alloc_free") else " (all M made, K kept)"
        )
    elif row.get("layout"):
        layout += ", stood down"
    return layout


def table(rows: list[dict[str, Any]]) -> str:
    """The Markdown table of judged rows (each with ``outcome`` and ``problems``), in the given
    order."""
    lines = [HEADER, "|" + "---|" * 9]
    for r in rows:
        outcome = r["outcome"] + (
            ": " + cell("; ".join(r["problems"]), 400) if r["outcome"] == "FAIL" else ""
        )
        release = r["release"] + (f" (measured {r['measured']})" if r.get("measured") else "")
        lines.append(
            f"| {release} | {r.get('torch_version', '-')} | {layout_cell(r)} | {outcome} | "
            f"{parity_cell(r)} | {bytes_cell(r)} | {guard_cell(r)} | {tests_cell(r)} | "
            f"{timing_cell(r)} |"
        )
    return "\n".join(lines)
