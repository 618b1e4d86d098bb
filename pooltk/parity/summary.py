"""The parity report as text: the table ``pooltk parity`` and ``pooltk report`` print."""

from __future__ import annotations

from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from pooltk.parity.launch import ParityReport

__all__ = ["format_report"]


def _fmt_bytes(n: int) -> str:
    return f"{n / 2**10:.1f} KiB" if n < 2**20 else f"{n / 2**20:.2f} MiB"


def format_report(report: ParityReport) -> str:
    """The parity report as the text table ``pooltk parity`` prints."""
    lines: list[str] = []
    lines.append(f"parity pp{report.spec.pp} x {report.spec.microbatches} microbatches x {report.spec.steps} steps "
          f"(boundary tensor {_fmt_bytes(report.boundary_bytes)} per microbatch), wall {report.wall_s:.1f} s")
    lines.append(f"{'variant':34} {'bitwise':>8} {'max|dparam|':>12} {'max|dloss|':>11} {'step ms':>8}")
    for v in report.variants:
        bw = "ref" if v.reference is None else ("yes" if v.bitwise_equal else "NO")
        dp = "" if v.params_max_abs_diff is None else f"{v.params_max_abs_diff:.3g}"
        dl = "" if v.losses_max_abs_diff is None else f"{v.losses_max_abs_diff:.3g}"
        lines.append(f"{v.name:34} {bw:>8} {dp:>12} {dl:>11} {v.median_step_time_s * 1e3:8.1f}")
    lines.append("\nreceive buffers per stage (sets fwd+grad, bytes):")
    for v in report.variants:
        cells = []
        for s in sorted(v.recv):
            f, g = v.recv[s]["forward"], v.recv[s]["grad"]
            cells.append(f"s{s} {f['sets']}+{g['sets']} {_fmt_bytes(f['bytes'] + g['bytes'])}")
        lines.append(f"  {v.name:32} " + " | ".join(cells))
    for v in report.variants:
        if v.pooled and all(not r for r in v.rings.values()):
            why = next((g for g in v.gate.values() if g), None) or "install() did not pool on this torch (run `pooltk probe` for why)"
            lines.append(f"note: {v.name} held no ring on any stage (ran stock): {why}")
    lines.append(f"\nbitwise_equal: {report.bitwise_equal}")
    return "\n".join(lines)
