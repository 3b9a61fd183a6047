"""The comparison figure's axis: every ratio in view, an interval wider than the axis cut and marked."""

import pandas as pd

from compilebench import plot, report  # it draws with matplotlib's Agg backend: no display needed
from compilebench.analysis import suite


def test_the_ratio_axis_holds_every_ratio_and_is_bounded():
    assert plot.ratio_axis(pd.Series([0.98, 1.02])) == (0.8, 1.25)  # +-25% around 1 at least
    low, high = plot.ratio_axis(pd.Series([0.6, 1.7]))
    assert low < 0.6 and high > 1.7
    assert plot.ratio_axis(pd.Series([0.05, 17.0])) == plot.RATIO_AXIS  # never wider than 1/3x to 3x


LINE = {"headline": "eager_latency", "verdict": "inconclusive"}  # what every line of comparison.csv holds


def test_an_interval_wider_than_the_axis_is_cut_at_the_edge_and_marked():
    compared = pd.DataFrame(
        [
            {
                "label": "M",
                "batch_size": 1,
                "variant": "default",
                "baseline": "a",
                "candidate": "b",
                "margin": 0.05,
                "speedup_ratio": 1.7,
                "speedup_ci_low": 0.4,
                "speedup_ci_high": 7.27,
                **LINE,
                "speedup_verdict": "inconclusive",
            },
            {
                "label": "N",
                "batch_size": 1,
                "variant": "default",
                "baseline": "a",
                "candidate": "b",
                "margin": 0.05,
                "speedup_ratio": 1.02,
                "speedup_ci_low": 0.99,
                "speedup_ci_high": 1.05,
                **LINE,
                "speedup_verdict": "equivalent",
            },
        ]
    )
    figure = plot.comparison_figure(compared, plot.cell_names(compared), 8.0)
    [axis] = [ax for ax in figure.axes if ax.get_visible()]
    assert axis.get_xscale() == "log" and axis.get_xlim()[1] <= plot.RATIO_AXIS[1] + 1e-9
    markers = [line for line in axis.get_lines() if line.get_marker() in ("<", ">") and len(line.get_xdata())]
    assert sorted(line.get_marker() for line in markers) == ["<", ">"]  # both ends of M's interval cut


def test_a_ratio_beyond_the_axis_sits_on_its_edge_marked():
    compared = pd.DataFrame(
        [
            {
                "label": "M",
                "batch_size": 1,
                "variant": "default",
                "baseline": "a",
                "candidate": "b",
                "margin": 0.05,
                "eager_latency_ratio": 9.0,
                "eager_latency_ci_low": 8.0,
                "eager_latency_ci_high": float("nan"),
                **LINE,
                "eager_latency_verdict": "inconclusive",
            },
            {
                "label": "N",
                "batch_size": 1,
                "variant": "default",
                "baseline": "a",
                "candidate": "b",
                "margin": 0.05,
                "eager_latency_ratio": 1.0,
                "eager_latency_ci_low": 0.9,
                "eager_latency_ci_high": 1.1,
                **LINE,
                "eager_latency_verdict": "equivalent",
            },
        ]
    )
    figure = plot.comparison_figure(compared, plot.cell_names(compared), 8.0)  # no negative error bar
    [axis] = [ax for ax in figure.axes if ax.get_visible()]
    assert any(line.get_marker() == ">" and len(line.get_xdata()) for line in axis.get_lines())


def test_each_point_has_its_words_colour_and_a_panel_lists_only_the_cells_it_has(repo_root):
    """Issue 78: `equivalent` and `inconclusive` told apart at a glance; no eager row in a compiled-only panel."""
    from matplotlib.colors import to_hex

    compared = pd.read_csv(repo_root / "tests/fixtures/cold-timed-2026-11-29/results/comparison.csv")
    compared = compared[compared["reference"] == "first"]
    figure = plot.comparison_figure(compared, plot.cell_names(compared), 10.0)
    panels = {ax.get_title().split(":")[0]: ax for ax in figure.axes if ax.get_visible()}
    speedup = panels["speedup"]
    rows = [label.get_text() for label in speedup.get_yticklabels()]
    compiled = compared[compared["variant"] != "eager"]
    assert len(rows) == len(compiled) + 1 and not any(" eager" in row for row in rows)
    assert rows[-1] == plot.SUITE_NAME  # the suite's row last, a diamond
    assert len(panels["eager latency"].get_yticklabels()) == len(compared) + 1  # every cell has eager latency
    colours = {}  # each word drawn in one colour, as the legend names it
    for container in speedup.containers:
        colours[container.get_label()] = to_hex(container.lines[0].get_color())
    words = set(compiled["speedup_verdict"]) | {
        entry["verdict"] for entry in suite.summary(report.read_comparisons(compared)) if entry["metric"] == "speedup"
    }
    assert set(colours) == words and len(set(colours.values())) == len(words)
    if "equivalent" in colours:
        assert colours["equivalent"] == to_hex(plot.VERDICT_COLOURS["equivalent"])
    # a favourable direction apart from an unfavourable one: inductor start-up `faster` blue, peak memory `more` red
    startup = {c.get_label(): to_hex(c.lines[0].get_color()) for c in panels["inductor startup"].containers}
    memory = {c.get_label(): to_hex(c.lines[0].get_color()) for c in panels["peak memory"].containers}
    assert startup["faster"] == to_hex(plot.FAVOURABLE) and memory["more"] == to_hex(plot.UNFAVOURABLE)
    cold = panels["compile cold"]  # one cold process a side: each cell's point hollow, no interval
    hollow = [line for line in cold.get_lines() if line.get_markerfacecolor() == "white" and len(line.get_xdata())]
    assert sum(len(line.get_xdata()) for line in hollow) == len(compiled)
    legend = {text.get_text() for text in figure.legends[0].get_texts()}
    assert {"no CI (one process)", "faster", "more"} <= legend
    assert "2.14.1+cu130" in figure.texts[0].get_text()  # the title names the builds
    assert figure.get_size_inches()[0] * 120 <= 1600  # at params.yaml's dpi, what `dvc plots show` draws uncut
