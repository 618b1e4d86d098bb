"""tools/compat_matrix without building a venv or downloading anything.

Judging and rendering run on the real rows of the published matrix (docs/compat/), which the
old scripts/compat_matrix measured and rendered: the moved code must judge and render them the
same. Publishing writes into a temporary page; arguments are resolved from given environments.
"""

from __future__ import annotations

import copy
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from tools.compat_matrix import checks, cli, live_buffers, space  # noqa: E402
from tools.compat_matrix.fetch import (  # noqa: E402
    COMPLETE_STAMP,
    constraints_without_torch,
    pip_env,
)
from tools.compat_matrix.judge import judge  # noqa: E402
from tools.compat_matrix.publish import matrix_doc, merge_rows, publish  # noqa: E402
from tools.compat_matrix.spec import BEGIN, END  # noqa: E402
from tools.compat_matrix.table import table  # noqa: E402

DOC = REPO / "docs" / "torch-compat.md"
RECORDED = sorted((REPO / "docs" / "compat").glob("matrix-*.json"))[
    -1
]  # the newest published matrix
VERDICT_KEYS = ("outcome", "problems", "layout", "installed")


@pytest.fixture(scope="module")
def recorded() -> dict:
    return json.loads(RECORDED.read_text())


def _row(recorded: dict, release: str) -> dict:
    """A recorded row as the checks left it: a deep copy without the keys the judge sets."""
    row = next(r for r in recorded["releases"] if r["release"] == release)
    return {k: v for k, v in copy.deepcopy(row).items() if k not in VERDICT_KEYS}


# ----------------------------------------------------------------------------- judging


@pytest.mark.parametrize("release", ["2.11.0", "2.12.1", "2.13.0", "2.14.1", "2.15.0"])
def test_judging_each_recorded_row_again_gives_its_published_verdict(recorded, release):
    published = next(r for r in recorded["releases"] if r["release"] == release)
    assert judge(_row(recorded, release)).row_fields() == {k: published[k] for k in VERDICT_KEYS}


def test_a_pooled_release_with_bitwise_parity_and_both_controls_caught_is_pooled_bitwise(recorded):
    v = judge(_row(recorded, "2.11.0"))
    assert (v.outcome, v.problems, v.layout, v.installed) == (
        "pooled-bitwise",
        [],
        "prepare-infra",
        True,
    )


def test_the_lazy_release_installed_takes_its_last_stage_down_from_m_and_is_released_bitwise(
    recorded,
):
    v = judge(_row(recorded, "2.15.0"))
    assert (v.outcome, v.problems, v.layout, v.installed) == ("released-bitwise", [], "lazy", True)


def test_a_released_row_whose_last_stage_still_holds_m_buffers_fails(recorded):
    row = _row(recorded, "2.15.0")
    last = str(max(int(s) for s in row["bytes"]["stock"]["sets"]))
    for counted in row["bytes"]["released"].values():
        counted["sets"][last][0] = row["bytes"]["stock"]["sets"][last][0]
    v = judge(row)
    assert v.outcome == "FAIL" and any("last stage peak" in p for p in v.problems)


def test_a_row_whose_unit_tests_failed_in_its_env_fails(recorded):
    row = _row(recorded, "2.13.0")
    row["tests"]["unit"].update(failed=1, failures=["tests.unit.test_x::test_y: AssertionError"])
    v = judge(row)
    assert v.outcome == "FAIL" and any(p.startswith("tests/unit") for p in v.problems)


def test_a_failed_test_does_not_hide_a_setup_that_made_more_than_the_ring(recorded):
    row = _row(recorded, "2.12.1")
    assert row["alloc_free"] and judge(row).outcome != "FAIL"
    row["tests"]["compat"].update(failed=1, failures=["tests.compat.test_x::test_y: TypeError"])
    pooled = next(v for v in row["parity"]["variants"] if v["pooled"])
    pooled["alloc_exact"] = False
    v = judge(row)
    assert v.outcome == "FAIL" and any(p.startswith("tests/compat") for p in v.problems)
    assert f"{pooled['name']}: setup allocated more than the K sets" in v.problems, v.problems


def test_a_pooled_release_whose_guard_let_an_overrun_through_fails(recorded):
    row = _row(recorded, "2.12.1")
    row["negative"]["guard_on_gpipe"] = {
        "bitwise_equal": True,
        "max_abs_diff": 0.0,
        "pooled": True,
        "variants": [],
    }
    v = judge(row)
    assert v.outcome == "FAIL"
    assert [p for p in v.problems if p.startswith("guard_on_gpipe: expected PoolOverrunError")]


def test_a_pooled_release_that_stayed_equal_without_the_guard_fails(recorded):
    row = _row(recorded, "2.14.1")
    row["negative"]["guard_off_short"].update(bitwise_equal=True, max_abs_diff=0.0)
    v = judge(row)
    assert v.outcome == "FAIL"
    assert [p for p in v.problems if p.startswith("guard_off_short: expected silent divergence")]


def test_pooled_runs_that_differ_from_stock_fail(recorded):
    row = _row(recorded, "2.13.0")
    row["parity"]["bitwise_equal"] = False
    assert judge(row).problems == ["pooled runs are not bitwise equal to stock"]


def test_a_stood_down_release_where_a_stage_holds_a_ring_fails(recorded):
    row = _row(recorded, "2.15.0")
    row["probe"].update(
        installed=False, mode="stock"
    )  # as with release=False: pooltk stands down on 2.15
    pooled = next(v for v in row["parity"]["variants"] if v["pooled"])
    pooled["rings"]["1"] = [3, 2]
    v = judge(row)
    assert v.outcome == "FAIL" and v.problems == ["stood down but some stage holds a ring"]


def test_a_layout_other_than_the_one_expected_for_the_release_fails(recorded):
    row = _row(recorded, "2.12.1")
    row["expected_layout"] = "prepare-infra"
    v = judge(row)
    assert v.outcome == "FAIL" and v.layout == "setup-recv-info"
    assert v.problems[0].startswith("layout 'setup-recv-info' detected, 'prepare-infra' expected")


def test_a_row_whose_checks_never_ran_fails_with_its_error_and_no_layout():
    row = {
        "release": "2.99.0",
        "expected_layout": None,
        "timings_s": {},
        "error": "RuntimeError: pip said no",
    }
    fields = judge(row).row_fields()
    assert fields == {"outcome": "FAIL", "problems": ["RuntimeError: pip said no"]}


# ----------------------------------------------------------------------------- rendering


def test_the_table_rendered_from_the_recorded_rows_is_the_one_on_the_docs_page(recorded):
    block = DOC.read_text().split(BEGIN, 1)[1].split(END, 1)[0]
    assert RECORDED.name in block  # the page's table is of this recording
    on_page = [ln for ln in block.splitlines() if ln.startswith("|")]
    assert table(recorded["releases"]).splitlines() == on_page


def test_a_failed_row_renders_its_problems_in_its_outcome_cell_on_one_line_without_pipes():
    row = {
        "release": "2.99.0",
        "expected_layout": None,
        "timings_s": {"total_without_download": 3.0},
        "error": "RuntimeError: command failed | exit 1\nsecond line",
    }
    row.update(judge(row).row_fields())
    lines = table([row]).splitlines()
    assert len(lines) == 3
    assert lines[2].startswith(
        "| 2.99.0 | - | - | FAIL: RuntimeError: command failed / exit 1 second line |"
    )
    assert lines[2].count("|") == lines[0].count("|")


# ----------------------------------------------------------------------------- publishing


def test_publishing_rewrites_only_what_lies_between_the_markers_and_writes_the_json(
    recorded, tmp_path
):
    page = tmp_path / "page.md"
    page.write_text(f"# head\nkept above\n{BEGIN}\nstale table\n{END}\nkept below\n")
    doc = matrix_doc(recorded["releases"], date="2030-01-02", argv=["--releases", "2.13.0"])
    path, updated = publish(doc, out_dir=tmp_path / "compat", page=page)
    assert updated and path == tmp_path / "compat" / "matrix-2030-01-02.json"
    assert json.loads(path.read_text()) == json.loads(json.dumps(doc))
    text = page.read_text()
    assert text.startswith(
        f"# head\nkept above\n{BEGIN}\nMeasured 2030-01-02 with `python -m tools.compat_matrix`"
    )
    assert text.endswith(f"{END}\nkept below\n")
    assert "stale table" not in text and f"Source: `{path}`" in text
    assert table(recorded["releases"]) in text


def test_publishing_leaves_a_page_without_markers_untouched(recorded, tmp_path):
    page = tmp_path / "page.md"
    page.write_text("no markers here\n")
    doc = matrix_doc(recorded["releases"], date="2030-01-02", argv=[])
    _, updated = publish(doc, out_dir=tmp_path, page=page)
    assert not updated and page.read_text() == "no markers here\n"


def test_the_published_document_records_the_new_command_and_the_parity_shape(recorded):
    doc = matrix_doc(
        recorded["releases"], date="2030-01-02", argv=["--releases", "2.13.0", "--no-publish"]
    )
    assert doc["command"] == "python -m tools.compat_matrix --releases 2.13.0 --no-publish"
    assert doc["spec"] == recorded["spec"]


def test_rows_of_releases_not_rerun_the_same_day_are_kept_in_release_order():
    earlier = [{"release": "2.15.0", "n": "old"}, {"release": "2.11.0", "n": "old"}]
    rows = [{"release": "2.15.0", "n": "new"}, {"release": "2.12.1", "n": "new"}]
    merged = merge_rows(rows, earlier)
    assert [(r["release"], r["n"]) for r in merged] == [
        ("2.11.0", "old"),
        ("2.12.1", "new"),
        ("2.15.0", "new"),
    ]


# ----------------------------------------------------------------------------- arguments


def _options(argv: list[str], environ: dict[str, str]):
    return cli.options(cli.parser().parse_args(argv), argv, environ)


def test_the_cache_dir_flag_wins_over_the_environment(tmp_path):
    opts = _options(
        ["--cache-dir", str(tmp_path / "flag")], {"POOLTK_COMPAT_CACHE": str(tmp_path / "env")}
    )
    assert opts.cache_dir == (tmp_path / "flag").resolve()


def test_the_cache_dir_comes_from_the_environment_then_xdg_then_home(tmp_path):
    assert (
        _options(
            [],
            {
                "POOLTK_COMPAT_CACHE": str(tmp_path / "env"),
                "XDG_CACHE_HOME": str(tmp_path / "x"),
                "HOME": str(tmp_path / "h"),
            },
        ).cache_dir
        == (tmp_path / "env").resolve()
    )
    assert (
        _options([], {"XDG_CACHE_HOME": str(tmp_path / "x"), "HOME": str(tmp_path / "h")}).cache_dir
        == (tmp_path / "x" / "pooltk-compat").resolve()
    )
    assert (
        _options([], {"XDG_CACHE_HOME": "relative/ignored", "HOME": str(tmp_path / "h")}).cache_dir
        == (tmp_path / "h" / ".cache" / "pooltk-compat").resolve()
    )


def test_a_cache_dir_inside_the_repository_is_refused():
    with pytest.raises(cli.UsageError, match="inside the repository; required a folder outside it"):
        _options(["--cache-dir", str(REPO / "wheels")], {})


def test_find_links_flags_repeat_and_win_over_the_environment(tmp_path):
    a, b, c = (tmp_path / n for n in "abc")
    for d in (a, b, c):
        d.mkdir()
    opts = _options(
        ["--find-links", str(a), "--find-links", str(b)], {"POOLTK_COMPAT_FIND_LINKS": str(c)}
    )
    assert opts.find_links == (a.resolve(), b.resolve())


def test_find_links_from_the_environment_split_on_the_path_separator(tmp_path):
    a, b = tmp_path / "a", tmp_path / "b"
    a.mkdir()
    b.mkdir()
    opts = _options([], {"POOLTK_COMPAT_FIND_LINKS": f"{a}{os.pathsep}{os.pathsep}{b}"})
    assert opts.find_links == (a.resolve(), b.resolve())
    assert _options([], {}).find_links == ()


def test_a_find_links_folder_that_does_not_exist_is_refused(tmp_path):
    with pytest.raises(
        cli.UsageError, match=r"--find-links: found .*nope.*; required folders of wheels"
    ):
        _options(["--find-links", str(tmp_path / "nope")], {})
    with pytest.raises(cli.UsageError, match=r"\$POOLTK_COMPAT_FIND_LINKS: found"):
        _options([], {"POOLTK_COMPAT_FIND_LINKS": str(tmp_path / "nope")})


def test_releases_must_be_exact_x_y_z():
    with pytest.raises(
        cli.UsageError, match=r"--releases: found \['2.15'\]; required exact releases"
    ):
        _options(["--releases", "2.13.0", "2.15"], {})


# ----------------------------------------------------------------------------- disk need


def _cached(cache: Path, release: str) -> None:
    d = cache / "wheels" / f"torch-{release}"
    d.mkdir(parents=True)
    (d / COMPLETE_STAMP).write_text("key\n")


def test_a_release_needs_its_published_wheel_and_env_sizes_and_no_wheels_once_cached(
    recorded, tmp_path
):
    row = next(r for r in recorded["releases"] if r["release"] == "2.11.0")
    (need,) = space.release_needs(("2.11.0",), tmp_path)
    assert (need.wheel_bytes, need.env_bytes, need.measured) == (
        row["download"]["wheel_dir_bytes"],
        row["env_bytes"],
        True,
    )
    _cached(tmp_path, "2.11.0")
    (need,) = space.release_needs(("2.11.0",), tmp_path)
    assert (need.wheel_bytes, need.env_bytes) == (0, row["env_bytes"])


def test_a_release_never_measured_is_counted_at_the_largest_measured_sizes(recorded, tmp_path):
    rows = recorded["releases"]
    (need,) = space.release_needs(("9.9.9",), tmp_path)
    assert need.measured is False
    assert need.wheel_bytes == max(r["download"]["wheel_dir_bytes"] for r in rows)
    assert need.env_bytes == max(r["env_bytes"] for r in rows)


def test_envs_run_one_at_a_time_so_the_peak_is_the_largest_unless_they_are_kept(tmp_path):
    needs = space.release_needs(("2.11.0", "2.15.0"), tmp_path)
    wheels = sum(n.wheel_bytes for n in needs)
    envs = [n.env_bytes for n in needs]
    assert space.required_bytes(needs, keep_envs=False) == wheels + max(envs) + space.HEADROOM_BYTES
    assert space.required_bytes(needs, keep_envs=True) == wheels + sum(envs) + space.HEADROOM_BYTES


def test_the_ci_check_with_cached_wheels_fits_in_the_8_gb_a_ci_run_found_and_without_them_does_not(
    tmp_path,
):
    # The CI run of 2026-12-01 found 8.3 GB free and was refused by a flat 12 GB floor, with
    # 2.11.0's wheels in the cache: the env alone (4.8 GB measured) needs less than that.
    found = int(8.3e9)
    _cached(tmp_path, "2.11.0")
    assert (
        space.shortfall_message(
            found, space.release_needs(("2.11.0",), tmp_path), keep_envs=False, cache=tmp_path
        )
        is None
    )
    bare = tmp_path / "bare"
    msg = space.shortfall_message(
        found, space.release_needs(("2.11.0",), bare), keep_envs=False, cache=bare
    )
    assert msg is not None
    assert "found 8.3 GB free under" in msg and "required 8.5 GB" in msg
    assert (
        "2.11.0: wheels 2.7 GB + env 4.8 GB" in msg
        and "Fix: free space" in msg
        and "--cache-dir" in msg
    )


def test_a_run_without_the_room_it_needs_exits_2_before_fetching_anything(
    tmp_path, monkeypatch, capsys
):
    from tools.compat_matrix import matrix

    monkeypatch.setattr(matrix.shutil, "disk_usage", lambda p: type("U", (), {"free": 10**9})())
    monkeypatch.setattr(
        matrix, "run_release", lambda *a, **k: pytest.fail("ran a release without room")
    )
    opts = _options(["--releases", "2.11.0", "--cache-dir", str(tmp_path), "--no-publish"], {})
    assert matrix.run_matrix(opts) == 2
    assert "found 1.0 GB free" in capsys.readouterr().err


def test_every_pip_call_reads_no_configuration_file():
    assert pip_env()["PIP_CONFIG_FILE"] == os.devnull


def test_the_envs_keep_the_project_pins_but_not_its_torch_pin(tmp_path):
    pins = constraints_without_torch(tmp_path).read_text().splitlines()
    project = (REPO / "requirements" / "constraints.txt").read_text().splitlines()
    assert not [p for p in pins if p.strip().lower().startswith("torch==")]
    assert [p for p in project if p.strip().lower().startswith("torch==")]  # there was one to drop
    assert set(pins) == {p for p in project if not p.strip().lower().startswith("torch==")}


def test_the_code_names_no_machine_paths():
    code = "\n".join(p.read_text() for p in (REPO / "tools" / "compat_matrix").glob("*.py"))
    for path in ("/work/", "/opt/", "/etc/xdg", "/root/", "/home/"):
        assert path not in code, path


# ----------------------------------------------------------------------------- the checks entry


def test_the_checks_module_imports_without_importing_torch():
    out = subprocess.run(
        [
            sys.executable,
            "-c",
            "import sys, tools.compat_matrix.checks; print('torch' in sys.modules)",
        ],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert out.returncode == 0, out.stderr
    assert out.stdout.strip() == "False"


def test_the_checks_refuse_to_run_outside_the_matrix_env_and_say_how_to_run_them(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.delenv(checks.ENV_VAR, raising=False)
    out = tmp_path / "out.json"
    assert checks.main([str(out)]) == 2
    err = capsys.readouterr().err
    assert (
        "found $POOLTK_COMPAT_ENV unset" in err
        and "Fix: python -m tools.compat_matrix --releases" in err
    )
    assert not out.exists()


def test_the_checks_refuse_an_interpreter_other_than_the_env_the_matrix_named(
    tmp_path, monkeypatch, capsys
):
    monkeypatch.setenv(checks.ENV_VAR, str(tmp_path / "envs" / "torch-2.13.0"))
    out = tmp_path / "out.json"
    assert checks.main([str(out)]) == 2
    assert f"found interpreter prefix {sys.prefix}" in capsys.readouterr().err
    assert not out.exists()


def test_the_checks_accept_the_env_the_matrix_named(tmp_path):
    env = tmp_path / "envs" / "torch-2.13.0"
    assert checks.refusal(str(env), {checks.ENV_VAR: str(env)}) is None


# ----------------------------------------------------------------------------- live receive buffers


def test_live_buffers_count_the_peak_of_receive_buffers_alive_per_variant_and_direction(
    tmp_path, monkeypatch
):
    import types

    import torch
    import torch.distributed.pipelining as pkg

    class _RecvInfo:
        def allocate_buffer(self):
            return torch.empty(16)

    class _PipelineStageBase:
        def __init__(self):
            self.held = []

        def get_fwd_recv_ops(self, n):
            self.held += [_RecvInfo().allocate_buffer() for _ in range(n)]

        def get_bwd_recv_ops(self, n):
            self.held += [_RecvInfo().allocate_buffer() for _ in range(n)]

    fake = types.ModuleType("torch.distributed.pipelining.stage")
    fake._RecvInfo, fake._PipelineStageBase = _RecvInfo, _PipelineStageBase
    monkeypatch.setattr(pkg, "stage", fake)
    monkeypatch.setitem(sys.modules, "torch.distributed.pipelining.stage", fake)
    out = tmp_path / "rank0.json"
    assert live_buffers.install(out)
    first = _PipelineStageBase()
    first.get_fwd_recv_ops(3)
    first.held.clear()  # torch drops them: no longer live
    first.get_fwd_recv_ops(2)
    first.get_bwd_recv_ops(1)
    second = _PipelineStageBase()
    second.get_fwd_recv_ops(1)
    assert json.loads(out.read_text()) == {
        "peak": {"0/forward": 3, "0/grad": 1, "1/forward": 1},
        "bytes": 64,
    }


def _variant_from_recorded(fact: dict) -> object:
    """A parity VariantResult stand-in carrying a recorded variant's receive facts."""
    import types

    recv = {
        int(s): {"forward": {"sets": fs, "bytes": fb}, "grad": {"sets": gs, "bytes": gb}}
        for s, ((fs, gs), (fb, gb)) in (
            (s, (fact["sets"][s], fact["bytes"][s])) for s in fact["sets"]
        )
    }
    return types.SimpleNamespace(
        name=fact["name"],
        pooled=fact["pooled"],
        frontend=fact["frontend"],
        schedule=fact["schedule"],
        config=None,
        bitwise_equal=fact["bitwise_equal"],
        params_max_abs_diff=fact["params_max_abs_diff"],
        losses_max_abs_diff=fact["losses_max_abs_diff"],
        recv=recv,
        setup_alloc_bytes={int(s): b for s, b in fact["setup_alloc_bytes"].items()},
        rings={int(s): r for s, r in fact["rings"].items()},
        median_step_time_s=fact["median_step_ms"] / 1e3,
    )


def test_the_checks_find_recorded_stock_receive_bytes_exactly_m_sets_and_a_missing_set_inexact(
    recorded,
):
    row = _row(recorded, "2.13.0")
    boundary = row["parity"]["boundary_bytes"]
    fact = next(v for v in row["parity"]["variants"] if v["name"] == "stock/1f1b/manual")
    again = checks._variant_facts(_variant_from_recorded(fact), boundary, installed=True)
    assert (again["bytes_exact"], again["alloc_exact"]) == (True, True)
    assert {k: again[k] for k in ("sets", "bytes", "setup_alloc_bytes")} == {
        k: fact[k] for k in ("sets", "bytes", "setup_alloc_bytes")
    }
    short = copy.deepcopy(fact)
    short["bytes"]["1"][0] -= boundary  # stage 1 held one forward set fewer than stock's M
    assert (
        checks._variant_facts(_variant_from_recorded(short), boundary, installed=True)[
            "bytes_exact"
        ]
        is False
    )
