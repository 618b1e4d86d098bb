"""Every figure every notebook draws passes the mechanical checks of figure_checks.py.

Each notebook runs once (the session's shared execution, conftest.py), with a recorder that checks
each figure as the kernel prints it: a headline that states something and a title on every panel,
axis labels with units, linear axes (or a label saying which scale and why), no clipped or
overlapping label, no legend over data, one colour per series, bars from zero, a width JupyterLab
shows whole. Across notebooks a series keeps its colour too.

The checker is tested here as well, on figures built to break each rule, so a check that cannot
fail would show.
"""

from __future__ import annotations

from pathlib import Path

import pytest

pytest.importorskip("nbclient")
mpl = pytest.importorskip("matplotlib")
mpl.use("Agg")

import figure_checks  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


@pytest.mark.notebook
@pytest.mark.timeout(600)
@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_every_figure_of_the_notebook_passes_the_figure_checks(executed, path: Path) -> None:
    run = executed(path)
    assert run.error is None, (
        f"{path.name} failed before its figures could be checked:\n{run.error}"
    )
    if "save_figure(" in path.read_text():
        assert run.figures, f"{path.name} draws figures, but the recorder saw none"
    bad = [
        f"{rec.name()}:\n    " + "\n    ".join(rec.problems) for rec in run.figures if rec.problems
    ]
    assert not bad, (
        f"{path.name}: {len(bad)} of {len(run.figures)} figure(s) fail the checks:\n"
        + "\n".join(bad)
    )


@pytest.mark.notebook
@pytest.mark.timeout(1800)
def test_a_series_has_one_colour_in_every_notebook(executed) -> None:
    from pooltk.nb.style import SERIES

    known = {s.label for s in SERIES.values()}
    colours: dict[str, dict[str, str]] = {}
    for path in NOTEBOOKS:
        for rec in executed(path).figures:
            for lab, col in rec.series.items():
                if lab in known:
                    colours.setdefault(lab, {}).setdefault(col, f"{path.stem}: {rec.name()}")
    split = {lab: where for lab, where in colours.items() if len(where) > 1}
    assert not split, "series drawn in more than one colour across notebooks:\n" + "\n".join(
        f"{lab!r}: " + "; ".join(f"{c} in {w}" for c, w in where.items())
        for lab, where in split.items()
    )
    assert colours, "no figure drew a series of pooltk.nb.style.SERIES"


# --------------------------------------------------------------------------- the checker itself


def _fig(**kw):
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=kw.pop("figsize", (6, 3)))
    return fig, ax


def _good(
    ax, title="stage 3 holds the most buffers", xl="stage (index)", yl="receive buffers (GiB)"
):
    ax.set_title(title)
    ax.set_xlabel(xl)
    ax.set_ylabel(yl)


def test_a_well_made_figure_has_no_problems() -> None:
    fig, ax = _fig()
    ax.bar([0, 1, 2], [3, 4, 5], color="#4C72B0", label="stock torch (<= 2.14)")
    ax.set_ylim(0, 10)
    _good(ax)
    ax.legend(loc="upper left")
    fig.tight_layout()
    assert figure_checks.figure_problems(fig) == []


def test_missing_titles_labels_and_units_are_named() -> None:
    fig, ax = _fig()
    ax.plot([0, 1], [0, 1])
    ax.set_xlabel("stage")
    fig.tight_layout()
    problems = "\n".join(figure_checks.figure_problems(fig))
    assert (
        "no title" in problems and "no y label" in problems and "'stage' names no unit" in problems
    )


def test_a_legend_over_bars_is_caught() -> None:
    fig, ax = _fig()
    ax.bar(range(6), [5] * 6, color="#4C72B0", label="stock torch (<= 2.14)")
    ax.set_ylim(0, 5.2)
    _good(ax)
    ax.legend(loc="center")
    fig.tight_layout()
    assert any("legend of axes 0 covers data" in p for p in figure_checks.figure_problems(fig))


def test_a_series_in_two_colours_across_panels_is_caught() -> None:
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(8, 3))
    a.bar([0], [1], color="#4C72B0", label="stock")
    b.bar([0], [1], color="#DD8452", label="stock")
    for ax in (a, b):
        _good(ax)
    fig.tight_layout()
    assert any("'stock' is drawn in 2 colours" in p for p in figure_checks.figure_problems(fig))


def test_colliding_labels_and_a_clipped_title_are_caught() -> None:
    import matplotlib.pyplot as plt

    fig, (a, b) = plt.subplots(1, 2, figsize=(4, 2))
    for ax in (a, b):
        _good(
            ax,
            title="a long title that cannot fit its panel at all",
            yl="a long y label (KiB) " * 3,
        )
    problems = "\n".join(figure_checks.figure_problems(fig))
    assert "overlap" in problems or "runs into" in problems, problems
    assert "clipped" in problems, problems


def test_bars_on_a_log_axis_or_cut_above_zero_are_caught() -> None:
    fig, ax = _fig()
    ax.bar([0, 1], [10, 20], color="#4C72B0", label="a")
    ax.set_yscale("log")
    _good(ax)
    fig.tight_layout()
    assert any("log value axis" in p for p in figure_checks.figure_problems(fig))
    fig, ax = _fig()
    ax.bar([0, 1], [130, 140], color="#4C72B0", label="a")
    ax.set_ylim(120, 150)
    _good(ax)
    fig.tight_layout()
    assert any("leaves out zero" in p for p in figure_checks.figure_problems(fig))


def test_white_labels_spilling_out_and_a_too_wide_figure_are_caught() -> None:
    fig, ax = _fig(figsize=(12, 3))
    ax.bar([0], [1], color="#4C72B0", label="a")
    ax.text(0.5, 1.5, "far above the axes")
    _good(ax)
    fig.tight_layout()
    problems = "\n".join(figure_checks.figure_problems(fig))
    assert "spills out of its axes" in problems and "in wide" in problems, problems


def test_two_legend_entries_that_look_alike_are_caught() -> None:
    fig, ax = _fig()
    ax.plot([0, 1], [0, 1], color="#4C72B0", label="a")
    ax.plot([0, 1], [1, 0], color="#4C72B0", label="b")
    _good(ax)
    ax.legend(loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.tight_layout()
    assert any("look alike" in p for p in figure_checks.figure_problems(fig))


def test_a_log_axis_must_say_so_and_why_and_a_linear_one_need_not() -> None:
    fig, ax = _fig()
    ax.plot([1, 2, 3], [1e-6, 1e-2, 1.0], color="#4C72B0", label="a")
    _good(ax, yl="difference (abs.)")
    ax.set_yscale("log")
    fig.tight_layout()
    assert any("on a log scale" in p for p in figure_checks.figure_problems(fig))
    ax.set_ylabel("diff. (log scale: 6 decades)")
    fig.tight_layout()
    assert figure_checks.figure_problems(fig) == []
    ax.set_yscale("symlog", linthresh=1e-9)
    ax.set_ylabel("difference (abs., symlog)")  # names the scale, not why
    fig.tight_layout()
    assert any("on a symlog scale" in p for p in figure_checks.figure_problems(fig))


def test_a_headline_that_only_names_the_figure_is_caught() -> None:
    fig, ax = _fig()
    ax.plot([0, 1], [0, 1], color="#4C72B0", label="a")
    _good(ax, title="throughput")
    fig.tight_layout()
    assert any("the headline 'throughput'" in p for p in figure_checks.figure_problems(fig))
    fig.suptitle("the pool keeps 9 of 48 sets")
    fig.tight_layout()
    assert not any("headline" in p for p in figure_checks.figure_problems(fig))
