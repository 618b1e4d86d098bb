"""The pool's saving shows in each rank's resident memory as the model says (real gloo processes).

A measurement is checked where it is written ([Note: the claims of a measurement] in
pooltk/parity/measured.py): ``pooltk memory --measure`` writes ``--csv`` only when every claim
holds, ``python -m pooltk.parity.measured --check CSV`` re-checks a file. The tables here are built
by the test from the memory model: a good one passes, each claim broken alone fails by its name. One
live launch measures again.
"""

from __future__ import annotations

import sys

import pytest

pd = pytest.importorskip("pandas")

from pooltk.memory.model import PipelineShape, harness_boundary, model_memory  # noqa: E402
from pooltk.config import PoolConfig  # noqa: E402
from pooltk.parity.measured import (  # noqa: E402
    CLAIMS,
    DEFAULT_SHAPES,
    GOAL,
    RAW_COLUMNS,
    check_measurement,
    default_specs,
    main,
    measured_vs_modelled,
    write_measured,
)
from pooltk.parity.rss import RssSpec  # noqa: E402

SMALL = [RssSpec(pp=4, microbatches=8, seq_len=1024), RssSpec(pp=3, microbatches=6, seq_len=512)]
BASE = (
    300 * 2**20
)  # what stage, batch and activations add besides the receive buffers (the same in both variants)


def good_frame(specs=SMALL, *, reps: int = 2) -> pd.DataFrame:
    """Raw rows as measure_rss would give them, each rank's peak = a base + the model's receive
    bytes."""
    rows, launch = [], 0
    for spec in specs:
        model = model_memory(
            PipelineShape(pp=spec.pp, n_microbatches=spec.microbatches),
            harness_boundary(
                rows=spec.rows_per_microbatch, seq_len=spec.seq_len, hidden=spec.hidden
            ),
            PoolConfig(slack=2, grad_slack=1),
        )
        for rep in range(reps):
            for variant in ("stock", "pooled"):
                pooled = variant == "pooled"
                for stage in range(spec.pp):
                    recv = model.stage_bytes(stage, variant)
                    peak = BASE + recv + rep * 4096
                    rows.append(
                        {
                            "shape": spec.label(),
                            "pp": spec.pp,
                            "microbatches": spec.microbatches,
                            "rows_per_microbatch": spec.rows_per_microbatch,
                            "seq_len": spec.seq_len,
                            "hidden": spec.hidden,
                            "layers_per_stage": spec.layers_per_stage,
                            "steps": spec.steps,
                            "set_bytes": spec.boundary_bytes,
                            "variant": variant,
                            "policy": "tight" if pooled else "",
                            "slack": 2 if pooled else "",
                            "grad_slack": 1 if pooled else "",
                            "rep": rep,
                            "launch": launch,
                            "stage": stage,
                            "baseline_rss_bytes": 200 * 2**20,
                            "hwm_after_setup_bytes": peak,
                            "peak_hwm_bytes": peak + 200 * 2**20,
                            "peak_delta_bytes": peak,
                            "maxrss_bytes": peak + 400 * 2**20,
                            "recv_forward_bytes": recv,
                            "recv_grad_bytes": 0,
                            "recv_forward_sets": recv // spec.boundary_bytes,
                            "recv_grad_sets": 0,
                            "hwm_reset": True,
                            "installed": True if pooled else "",
                            "wall_s": 1.0,
                            "torch": "2.13.0+cpu",
                            "cpus": 2,
                        }
                    )
                launch += 1
    return pd.DataFrame.from_records(rows, columns=list(RAW_COLUMNS))


LABELS = [s.label() for s in SMALL]
LAST = SMALL[0].pp - 1


def _at(frame: pd.DataFrame, column: str, value, **where) -> pd.DataFrame:
    frame = frame.copy()
    mask = pd.Series(True, index=frame.index)
    for k, v in where.items():
        mask &= frame[k] == v
    assert mask.any(), where
    frame.loc[mask, column] = value if not callable(value) else value(frame.loc[mask, column])
    return frame


def _short(stage: int):
    """The pooled peak of ``stage`` raised by 10 % of the modelled saving: the measured saving 10 %
    short."""

    def change(frame: pd.DataFrame) -> pd.DataFrame:
        saving = (
            measured_vs_modelled(frame)
            .set_index(["shape", "stage"])
            .loc[(LABELS[0], stage), "modelled_saving_mib"]
        )
        return _at(
            frame,
            "peak_delta_bytes",
            lambda v: v + int(0.1 * saving * 2**20),
            shape=LABELS[0],
            variant="pooled",
            stage=stage,
        )

    return change


BREAKS = {
    "covers_the_shapes: a shape missing": (
        "covers_the_shapes",
        lambda f: f[f["shape"] != LABELS[1]],
    ),
    "covers_the_shapes: a rank missing": (
        "covers_the_shapes",
        lambda f: f.drop(f[(f.launch == 1) & (f.stage == 2)].index),
    ),
    "covers_the_shapes: no pooled launch": (
        "covers_the_shapes",
        lambda f: f[(f["shape"] != LABELS[1]) | (f.variant == "stock")],
    ),
    "covers_the_shapes: two pooled configs": (
        "covers_the_shapes",
        lambda f: _at(f, "slack", 3, launch=3),
    ),
    "peaks_start_at_the_baseline": (
        "peaks_start_at_the_baseline",
        lambda f: _at(f, "hwm_reset", False, launch=0, stage=1),
    ),
    "pooled_launches_installed": (
        "pooled_launches_installed",
        lambda f: _at(f, "installed", False, launch=1, stage=0),
    ),
    "counted_equals_modelled": (
        "counted_equals_modelled",
        lambda f: _at(
            f,
            "recv_forward_bytes",
            lambda v: v + SMALL[0].boundary_bytes,
            shape=LABELS[0],
            variant="pooled",
            stage=1,
        ),
    ),
    "every_stage_within_goal": ("every_stage_within_goal", _short(1)),
    "last_stage_within_goal": ("last_stage_within_goal", _short(LAST)),
}


def _names(broken: list[str]) -> list[str]:
    return [line.split(":", 1)[0] for line in broken]


def test_a_measurement_that_holds_every_claim_passes_the_check():
    frame = good_frame()
    table = measured_vs_modelled(frame)
    assert (table["relative_difference"] == 0).all() and len(table) == sum(s.pp for s in SMALL)
    assert check_measurement(frame, shapes=LABELS) == []
    assert check_measurement(frame, shapes=None) == []


@pytest.mark.parametrize("case", list(BREAKS))
def test_each_claim_broken_alone_fails_by_its_name(case):
    name, breaks = BREAKS[case]
    broken = check_measurement(breaks(good_frame()), shapes=LABELS)
    assert _names(broken) == [name], broken
    assert "found" in broken[0] and "required" in broken[0]


def test_every_claim_has_a_case_that_breaks_it():
    assert {name for name, _ in BREAKS.values()} == set(CLAIMS)


def test_a_saving_just_inside_the_goal_holds_and_just_outside_breaks():
    frame = good_frame()
    saving = (
        measured_vs_modelled(frame)
        .set_index(["shape", "stage"])
        .loc[(LABELS[0], 1), "modelled_saving_mib"]
        * 2**20
    )

    def off(share):
        return _at(
            frame,
            "peak_delta_bytes",
            lambda v: v + int(share * saving),
            shape=LABELS[0],
            variant="pooled",
            stage=1,
        )

    assert check_measurement(off(GOAL * 0.99), shapes=LABELS) == []
    assert _names(check_measurement(off(GOAL * 1.01), shapes=LABELS)) == ["every_stage_within_goal"]


def test_a_table_without_a_column_is_named_not_a_traceback():
    broken = check_measurement(good_frame().drop(columns=["hwm_reset"]), shapes=LABELS)
    assert _names(broken) == ["covers_the_shapes"] and "hwm_reset" in broken[0]


def test_each_default_shape_holds_one_gib_of_stock_receive_buffers_on_the_middle_stages():
    for spec in default_specs():
        model = model_memory(
            PipelineShape(pp=spec.pp, n_microbatches=spec.microbatches),
            harness_boundary(
                rows=spec.rows_per_microbatch, seq_len=spec.seq_len, hidden=spec.hidden
            ),
            PoolConfig(),
        )
        assert [model.stage_bytes(s, "stock") for s in range(1, spec.pp - 1)] == [2**30] * (
            spec.pp - 2
        ), spec.label()
    assert len({(m, s) for m, s in DEFAULT_SHAPES}) == len(default_specs()) >= 3


def test_check_of_a_written_file_exits_0_when_it_holds_1_naming_the_claim_2_when_unreadable(
    tmp_path, capsys
):
    good, bad = tmp_path / "good.csv", tmp_path / "bad.csv"
    write_measured(good_frame(), good)
    write_measured(BREAKS["last_stage_within_goal"][1](good_frame()), bad)
    assert main(["--check", str(good), "--any-shapes"]) == 0
    assert main(["--check", str(good)]) == 1  # not the three default shapes
    assert "covers_the_shapes: found shape" in capsys.readouterr().err
    assert main(["--check", str(bad), "--any-shapes"]) == 1
    assert "last_stage_within_goal: found" in capsys.readouterr().err
    assert main(["--check", str(tmp_path / "none.csv")]) == 2
    assert "no such file" in capsys.readouterr().err


@pytest.fixture
def measured(monkeypatch):
    """``pooltk memory --measure`` with its launches replaced by a frame built here (default
    shapes)."""
    import pooltk.parity.measured as measured_module
    import pooltk.parity.rss as rss

    state = {"frame": good_frame(default_specs(), reps=1)}
    monkeypatch.setattr(rss, "measure_rss", lambda specs, config, **kw: [s.label() for s in specs])
    monkeypatch.setattr(measured_module, "launches_frame", lambda launches: state["frame"])
    return state


def test_the_writer_writes_a_measurement_that_holds_every_claim(tmp_path, measured):
    from pooltk.cli import main as pooltk

    out = tmp_path / "m.csv"
    assert pooltk(["memory", "--measure", "--csv", str(out)]) == 0
    assert main(["--check", str(out)]) == 0


def test_the_writer_writes_nothing_when_a_claim_breaks_and_says_which(tmp_path, measured, capsys):
    from pooltk.cli import main as pooltk

    out = tmp_path / "m.csv"
    label = default_specs()[0].label()
    measured["frame"] = _at(
        measured["frame"], "installed", False, shape=label, variant="pooled", stage=0
    )
    assert pooltk(["memory", "--measure", "--csv", str(out)]) == 1
    err = capsys.readouterr().err
    assert not out.exists()
    assert f"nothing written to {out}" in err and "pooled_launches_installed: found" in err


def test_measure_refuses_a_policy_the_pool_does_not_install_before_launching(measured, capsys):
    from pooltk.cli import main as pooltk

    assert pooltk(["memory", "--measure", "--policy", "automodel"]) == 2
    assert "--policy" in capsys.readouterr().err


@pytest.mark.parametrize(
    "flags,needle",
    [
        (  # 128-byte sets stay in glibc's heap: freeing them shows in no resident figure
            ["--pp", "2", "--microbatches", "8", "--seq-len", "4", "--hidden", "4"],
            "buffer sets of 128 bytes, under glibc's mmap threshold of 1,048,576",
        ),
        (  # M = 2 on two stages: every ring holds every microbatch, so there is no ratio to judge
            ["--pp", "2", "--microbatches", "2"],
            "the model saves nothing on stage(s) 0, 1",
        ),
        (["--reps", "0"], "--reps: found 0; required an integer >= 1"),
        # a flag given as 0 is refused, never replaced by the shipped shapes' value (it launched
        # pp 4, 65536 tokens, 2 steps)
        (["--pp", "0"], "--pp: found 0; required an integer >= 2"),
        (["--seq-len", "0"], "--seq-len: found 0; required an integer >= 1"),
        (["--steps", "0"], "--steps: found 0; required an integer >= 1"),
        (["--pp", "4", "--microbatches", "2"], "--microbatches: found 2; required an integer >= 4"),
    ],
)
def test_measure_refuses_a_shape_resident_memory_cannot_judge_before_launching(
    measured, capsys, flags, needle
):
    from pooltk.cli import main as pooltk

    assert pooltk(["memory", "--measure", *flags]) == 2
    err = capsys.readouterr().err
    assert needle in err and "Fix:" in err and "Traceback" not in err


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="reads /proc/self/status")
def test_a_fresh_two_stage_measurement_matches_the_model_within_the_goal():
    from pooltk.parity.measured import launches_frame
    from pooltk.parity.rss import RssSpec, measure_rss

    spec = RssSpec(pp=2, microbatches=8, seq_len=32768, steps=2, timeout_s=300)  # 16 MiB sets
    table = measured_vs_modelled(launches_frame(measure_rss([spec], reps=1)))
    assert (table["counted_saving_mib"] == table["modelled_saving_mib"]).all()
    first = table[table.stage == 0].iloc[0]
    assert abs(first.relative_difference) <= GOAL, table.to_string()
