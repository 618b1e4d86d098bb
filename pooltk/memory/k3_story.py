"""The Kimi-K3 story: the PR's measured OOM and headroom beside the model's verdicts, and why they agree or differ.

[Note: the Kimi-K3 story]
Published (NVIDIA-NeMo/Automodel PR #3780): the stock 2k shape (pp 8, 64 microbatches, micro
batch 2 x 2048 tokens, hidden 7168, bf16, 1F1B) "OOMs during step 1 on 64 GB200 nodes (by only
56 MiB, measured)"; the pooled run (Automodel's ring, slack 2) peaks at 139.6 GiB "(44 GiB
headroom)". Read here as: 139.6 GiB is ``max_memory_allocated`` on the rank that logs (Automodel's
benchmark line), and the headroom is the capacity minus it (184.31 - 139.6 = 44.71 GiB agrees with
"44" on the one GB200 capacity, :data:`pooltk.memory.fits.GB200`).

The model's verdict: everything but receive buffers is anchored on the published pooled peak
(the K3 model is not one pooltk can build: its KDA and MLA layers and its widening stage
boundary are not the decoder's), receive buffers come from the analytic model
(:func:`pooltk.memory.model.model_memory`, 416 MiB a set by default: the published "~52 GiB on
middle stages" over 128 sets), and the stated overhead of [Note: an honest verdict] is added. The
anchor's stage is not published, so both readings are shown: the fullest pooled stage, and
stage 0 (the rank that logs). ``56 MiB`` is exactly one bf16 (2, 2048, 7168) hidden state, so it
is read as the size of the allocation that failed (torch's "Tried to allocate 56.00 MiB"), which
bounds the shortfall from above; it is not a margin the model can be held to.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from pooltk.config import PoolConfig
from pooltk.memory.fits import GB200, Device, ReferencePeak, fit_report, get_device
from pooltk.memory.model import MemoryModel, PipelineShape, model_memory
from pooltk.memory.replay.estimate import MemoryEstimate
from pooltk.memory.tensors import Boundary
from pooltk.memory.verdict import DEFAULT_OVERHEAD, Overhead

if TYPE_CHECKING:  # pragma: no cover
    import pandas as pd

__all__ = ["K3_PUBLISHED", "K3Story", "StoryRow", "k3_receive_model", "k3_story"]

GIB = 2**30
MIB = 2**20

PR = "NVIDIA-NeMo/Automodel PR #3780 (description)"
K3_PUBLISHED: dict[str, tuple[float, str]] = {
    "pooled_peak_gib": (
        139.6,
        f"{PR}: 2k x GBS4096 + recv pool, peak mem 139.6 GiB; '256-GPU production evidence: mem 139.6 GiB'",
    ),
    "headroom_gib": (44.0, f"{PR}: '(44 GiB headroom measured)'"),
    "stock_oom_mib": (
        56.0,
        f"{PR}: 'the shape OOMs during step 1 on 64 GB200 nodes (by only 56 MiB, measured)'",
    ),
    "stock_middle_stage_gib": (
        52.0,
        f"{PR}: '64 buffer sets per direction, ~52 GiB on middle stages'",
    ),
}
"""The published figures of the story, each with its source."""

HIDDEN_STATE_MIB = 2 * 2048 * 7168 * 2 / MIB
"""One bf16 (2, 2048, 7168) hidden state: 56 MiB."""


def k3_receive_model() -> MemoryModel:
    """The PR's 2k shape with 416 MiB a set (52 GiB / 128 sets, derived), under the PR's pool (Automodel's ring, slack 2)."""
    shape = PipelineShape(pp=8, n_microbatches=64)
    per_set = round(K3_PUBLISHED["stock_middle_stage_gib"][0] * GIB / 128)
    return model_memory(
        shape,
        Boundary.opaque(per_set, name="k3_boundary_52gib_over_128"),
        PoolConfig(slack=2),
        policy="automodel",
    )


@dataclass(kw_only=True, slots=True, frozen=True)
class StoryRow:
    """One claim: what was published, what the model gives, whether they agree."""

    claim: str
    """What is compared."""
    published: str
    """The published figure, as stated."""
    modelled: str
    """The model's figure."""
    agrees: bool | None
    """Within the published figure's rounding; ``None`` where the two are not comparable."""
    note: str
    """How the modelled figure was made."""


@dataclass(kw_only=True, slots=True, frozen=True)
class K3Story:
    """The Kimi-K3 story on one device. See [Note: the Kimi-K3 story]."""

    device: Device
    """The one capacity judged against."""
    overhead: Overhead
    """What is added to every modelled peak."""
    rows: tuple[StoryRow, ...]
    """The claims, published beside modelled."""
    sentence: str
    """Why they agree or differ, in one sentence."""

    def to_frame(self) -> pd.DataFrame:
        """One row per claim: ``claim``, ``published``, ``modelled``, ``agrees``, ``note``."""
        import pandas as pd

        return pd.DataFrame.from_records(
            [
                {
                    "claim": r.claim,
                    "published": r.published,
                    "modelled": r.modelled,
                    "agrees": r.agrees,
                    "note": r.note,
                }
                for r in self.rows
            ]
        )

    def to_dict(self) -> dict[str, Any]:
        """Plain JSON-able dict."""
        return {
            "device": {"name": self.device.name, "capacity_bytes": self.device.capacity_bytes},
            "overhead_bytes": self.overhead.total_bytes,
            "sentence": self.sentence,
            "rows": [
                {
                    "claim": r.claim,
                    "published": r.published,
                    "modelled": r.modelled,
                    "agrees": r.agrees,
                    "note": r.note,
                }
                for r in self.rows
            ],
        }


def _stock_worst(
    receive: MemoryModel, device: Device, peak_bytes: int, stage: int | None
) -> tuple[int, int, int]:
    """(worst stage, its stock peak, the base) with the pooled peak anchored on ``stage`` (None: the fullest)."""
    ref = ReferencePeak(
        peak_bytes=peak_bytes,
        variant="pooled",
        config=receive.config,
        policy=receive.policy,
        sharing=receive.sharing,
        stage=stage,
        source=PR,
    )
    report = fit_report(
        receive.shape,
        list(receive.boundaries),
        receive.config,
        device,
        ref,
        policy=receive.policy,
        sharing=receive.sharing,
    )
    worst = report.worst("stock")
    return worst.stage, worst.peak_bytes, report.base_bytes


def k3_story(
    *,
    receive: MemoryModel | None = None,
    estimate: MemoryEstimate | None = None,
    device: Device | str | float = GB200,
    overhead: Overhead = DEFAULT_OVERHEAD,
) -> K3Story:
    """The PR's OOM and headroom beside the model's verdicts, with one sentence. See [Note: the Kimi-K3 story].

    ``receive``: the receive-buffer model of the PR's shape (default :func:`k3_receive_model`; a
    preset's model, e.g. the published-widths one, may be passed). ``estimate``: a whole-stage
    replay at K3's published widths, shown beside the measured peak when given.
    """
    dev = get_device(device)
    receive = receive or k3_receive_model()
    peak = round(K3_PUBLISHED["pooled_peak_gib"][0] * GIB)
    o = overhead.total_bytes
    headroom = dev.capacity_bytes - peak
    rows = [
        StoryRow(
            claim="pooled 2k headroom",
            published="44 GiB",
            modelled=f"{headroom / GIB:.2f} GiB "
            f"({(headroom - o) / GIB:.2f} GiB after the {o / GIB:.2f} GiB overhead)",
            agrees=abs(headroom / GIB - K3_PUBLISHED["headroom_gib"][0]) < 1.0,
            note=f"capacity {dev.gib:.2f} GiB - the measured 139.6 GiB peak: the PR's headroom leaves the overhead out",
        )
    ]
    margins = []
    for label, stage in (("the fullest pooled stage", None), ("stage 0 (the rank that logs)", 0)):
        worst, stock_peak, base = _stock_worst(receive, dev, peak, stage)
        margin = dev.capacity_bytes - stock_peak - o
        margins.append((label, worst, margin, stock_peak))
        rows.append(
            StoryRow(
                claim=f"stock 2k, anchored on {label}",
                published="OOM in step 1 ('by only 56 MiB')",
                modelled=f"stage {worst}: {stock_peak / GIB:.2f} GiB + {o / GIB:.2f} GiB overhead: "
                + (
                    f"OOM by {-margin / GIB:.2f} GiB"
                    if margin < 0
                    else f"fits, {margin / GIB:.2f} GiB free"
                ),
                agrees=margin < 0,
                note=f"base {base / GIB:.2f} GiB (139.6 GiB less the anchor stage's pooled receive "
                f"buffers) + stage {worst}'s stock receive buffers {receive.stage_bytes(worst, 'stock') / GIB:.2f} GiB",
            )
        )
    if estimate is not None:
        rep = estimate.worst("pooled" if "pooled" in estimate.variants else "stock")
        rows.append(
            StoryRow(
                claim=f"whole-stage replay at K3's widths ({rep.variant}, fullest rank {rep.rank})",
                published="139.6 GiB (pooled, measured)",
                modelled=f"{rep.peak.bytes / GIB:.2f} GiB",
                agrees=None,
                note="pooltk's decoder at the published widths, not K3's own layers: "
                + "; ".join(estimate.not_modelled[:2]),
            )
        )
    both_oom = all(m < 0 for _, _, m, _ in margins)
    saved = max(receive.saved_bytes(i, "pooled") for i in range(receive.shape.pp))
    if both_oom and rows[0].agrees:
        sentence = (
            f"They agree: the PR's 44 GiB headroom is the {dev.gib:.2f} GiB capacity minus the pooled run's "
            f"allocated 139.6 GiB, and giving back the up to {saved / GIB:.1f} GiB of receive buffers the ring "
            f"removes, plus the {o / GIB:.2f} GiB the process holds outside its tensors, puts stock "
            f"{-max(m for _, _, m, _ in margins) / GIB:.1f} to {-min(m for _, _, m, _ in margins) / GIB:.1f} GiB "
            f"over whichever stage the peak was logged on; the '56 MiB' is one {HIDDEN_STATE_MIB:.0f} MiB hidden "
            "state, most likely the allocation that failed, so only the sign of the margin can be checked."
        )
    else:
        reasons = [
            f"anchored on {label}, stock {'fits' if m >= 0 else 'OOMs'} ({m / GIB:+.2f} GiB)"
            for label, _, m, _ in margins
        ]
        sentence = (
            "They differ: "
            + "; ".join(reasons)
            + ", against the PR's measured OOM, because the model assumes "
            "every stage holds the anchor's non-buffer memory and the overhead is the stated default, not this run's."
        )
    return K3Story(device=dev, overhead=overhead, rows=tuple(rows), sentence=sentence)
