"""The published Kimi-K3 figures carry sources, and the claims ledger recomputes each derived
claim."""

from __future__ import annotations

import pandas as pd
import pytest

from pooltk.studies.kimi_k3 import (
    GB200_DATASHEET,
    PUBLISHED_CSV,
    claims_ledger,
    load_published,
    published_table,
)
from pooltk.logs.metrics import DeviceCapacity


def test_every_published_figure_has_a_source_and_a_unit():
    f = load_published().frame
    assert f["source"].notna().all() and (f["source"].str.len() > 10).all()
    assert f["unit"].notna().all() and f["id"].is_unique
    assert set(f["kind"]) <= {"measured", "expected", "config", "datasheet", "derived-in-source"}


def test_the_published_table_has_the_reports_figures():
    t = published_table().set_index("shape")
    assert t.loc["1k x GBS4096 (kimi_k3_gb200.yaml + #3779 flags)", "tok_per_s_per_gpu"] == 495.7
    assert t.loc["2k x GBS4096 + recv pool (kimi_k3_gb200_2k.yaml)", "peak_mem_gib"] == 139.6
    assert t.loc["2k x GBS4096 on the aligned 104B shape", "iteration_time_s"] == 52.2
    assert t.loc["1k x GBS4096 (kimi_k3_gb200.yaml; 2026-09-04 tree)", "mfu_pct"] == 10.9


def test_ledger_agrees_with_the_arithmetic_claims_and_not_with_the_expectations():
    ledger = claims_ledger()
    agrees = {c.claim: c.agrees for c in ledger.claims}
    assert agrees["MFU of 1k x GBS4096 = 13.7%"] and agrees["MFU of 2k x GBS4096 + pool = 17.1%"]
    assert (
        agrees["2k rows give +24% tok/s/GPU over 1k"]
        and agrees["PP bubble 9.9% (pp8, 64 microbatches)"]
    )
    assert agrees["627.3 tok/s/GPU at 52.2 s/iteration"] and agrees["64 microbatches per step"]
    # measured on the aligned shape: faster, not ~2% slower; +10.6 GiB, not ~1 GiB
    assert ledger["~2% fewer tok/s"].agrees is False and ledger[
        "~2% fewer tok/s"
    ].pooltk.startswith("+1.85%")
    assert ledger["~1 GiB more"].agrees is False and ledger["~1 GiB more"].pooltk == "+10.6 GiB"
    assert ledger["about the same MFU"].agrees is True


def test_headroom_claim_agrees_with_what_torch_reports_and_states_the_datasheet_alternative():
    judged = claims_ledger()["44 GiB headroom"]
    assert judged.agrees is True and "183.6 GiB" in judged.inputs and "184.31 GiB" in judged.inputs
    assert (
        "datasheet 186 GB = 173.2 GiB" in judged.inputs
        and "33.6 GiB against the datasheet" in judged.pooltk
    )
    sheet = claims_ledger(capacity=GB200_DATASHEET)["44 GiB headroom"]
    assert sheet.agrees is False
    assert (
        claims_ledger(capacity=DeviceCapacity.from_gib(183.6, source="implied"))[
            "44 GiB headroom"
        ].agrees
        is True
    )


def test_a_ratio_across_code_trees_is_flagged_and_the_same_tree_gain_stays_the_headline():
    ledger = claims_ledger()
    cross = [c for c in ledger.claims if "627.3 / 392.4" in c.inputs]
    assert len(cross) == 1 and cross[0].claim.startswith("CROSS-TREE") and cross[0].agrees is None
    assert "cross-tree" in cross[0].pooltk and "+24%" in cross[0].pooltk
    assert ledger["2k rows give +24%"].agrees is True


def test_ledger_frame_columns():
    f = claims_ledger().to_frame()
    assert list(f.columns) == ["claim", "source", "inputs", "published", "pooltk", "agrees", "rule"]
    assert set(f["agrees"]) == {"yes", "no", "-"}


def test_a_missing_or_unsourced_csv_is_refused(tmp_path):
    with pytest.raises(FileNotFoundError, match="found no file"):
        load_published(tmp_path / "none.csv")
    bad = pd.read_csv(PUBLISHED_CSV)
    bad.loc[0, "source"] = None
    bad.to_csv(tmp_path / "bad.csv", index=False)
    with pytest.raises(ValueError, match=r"row\(s\) \['k3_1k_seed_tok'\] have no source"):
        load_published(tmp_path / "bad.csv")
