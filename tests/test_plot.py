"""The comparison figure's axis: every ratio in view, an interval wider than the axis cut and marked."""

import pandas as pd

from compilebench import plot  # it draws with matplotlib's Agg backend: no display needed


def test_the_ratio_axis_holds_every_ratio_and_is_bounded():
    assert plot.ratio_axis(pd.Series([0.98, 1.02])) == (0.8, 1.25)  # +-25% around 1 at least
    low, high = plot.ratio_axis(pd.Series([0.6, 1.7]))
    assert low < 0.6 and high > 1.7
    assert plot.ratio_axis(pd.Series([0.05, 17.0])) == plot.RATIO_AXIS  # never wider than 1/3x to 3x


LINE = {"headline": "eager_latency", "verdict": "inconclusive"}  # what every line of comparison.csv holds


def test_an_interval_wider_than_the_axis_is_cut_at_the_edge_and_marked():
    compared = pd.DataFrame([
        {"label": "M", "batch_size": 1, "variant": "default", "baseline": "a", "candidate": "b", "margin": 0.05,
         "speedup_ratio": 1.7, "speedup_ci_low": 0.4, "speedup_ci_high": 7.27, **LINE,
         "speedup_verdict": "inconclusive"},
        {"label": "N", "batch_size": 1, "variant": "default", "baseline": "a", "candidate": "b", "margin": 0.05,
         "speedup_ratio": 1.02, "speedup_ci_low": 0.99, "speedup_ci_high": 1.05, **LINE,
         "speedup_verdict": "equivalent"},
    ])  # fmt: skip
    figure = plot.comparison_figure(compared, plot.cell_names(compared), 8.0)
    [axis] = [ax for ax in figure.axes if ax.get_visible()]
    assert axis.get_xscale() == "log" and axis.get_xlim()[1] <= plot.RATIO_AXIS[1] + 1e-9
    markers = [line for line in axis.get_lines() if line.get_marker() in ("<", ">") and len(line.get_xdata())]
    assert sorted(line.get_marker() for line in markers) == ["<", ">"]  # both ends of M's interval cut


def test_a_ratio_beyond_the_axis_sits_on_its_edge_marked():
    compared = pd.DataFrame([
        {"label": "M", "batch_size": 1, "variant": "default", "baseline": "a", "candidate": "b", "margin": 0.05,
         "eager_latency_ratio": 9.0, "eager_latency_ci_low": 8.0, "eager_latency_ci_high": float("nan"), **LINE,
         "eager_latency_verdict": "inconclusive"},
        {"label": "N", "batch_size": 1, "variant": "default", "baseline": "a", "candidate": "b", "margin": 0.05,
         "eager_latency_ratio": 1.0, "eager_latency_ci_low": 0.9, "eager_latency_ci_high": 1.1, **LINE,
         "eager_latency_verdict": "equivalent"},
    ])  # fmt: skip
    figure = plot.comparison_figure(compared, plot.cell_names(compared), 8.0)  # no negative error bar
    [axis] = [ax for ax in figure.axes if ax.get_visible()]
    assert any(line.get_marker() == ">" and len(line.get_xdata()) for line in axis.get_lines())
