"""Tests for roformer_jax/plots.py: which panels a figure of training curves has."""

import os
from unittest import mock

import tiny
from absl.testing import absltest

from roformer_jax.studies import plots


class PlotCurvesTest(absltest.TestCase):
    def test_a_paired_panel_only_where_a_run_has_a_baseline_to_pair_with(self):
        curves = {"a": [{"step": [1, 2], "train_loss": [2.0, 1.0], "valid_loss": [2.5, 1.5]}]}
        diff = {"step": [1, 2], "mean": [0.1, 0.2], "low": [0.1, 0.2], "high": [0.1, 0.2], "n": 1}
        pyplot = plots.pyplot()
        panels, real = [], pyplot.subplots

        def subplots(rows, cols, **kwargs):
            panels.append(cols)
            return real(rows, cols, **kwargs)

        path = os.path.join(tiny.workdir(), "curves.png")
        with mock.patch.object(pyplot, "subplots", subplots):
            # No pairing asked; a study of one run (its baseline: nothing to pair); a pair.
            for paired in (None, {}, {"a": diff}):
                plots.plot_curves(curves, path, title="t", paired=paired)
        self.assertEqual(panels, [2, 2, 3])
        self.assertTrue(os.path.exists(path))

    def test_a_unigram_line_far_from_the_curves_leaves_the_panel_on_them(self):
        curves = {"a": [{"step": [1, 2], "valid_loss": [3.6, 3.5]}]}
        path = os.path.join(tiny.workdir(), "curves.png")
        limits, real = [], plots._save

        def save(fig, *args, **kwargs):
            limits.extend(ax.get_ylim() for ax in fig.axes)
            return real(fig, *args, **kwargs)

        with mock.patch.object(plots, "_save", save):
            for floor in (3.55, 6.8, 0.5):  # within the curves' range, far above, far below
                plots.plot_curves(curves, path, title="t", metrics=("valid_loss",), floor=floor)
        near, above, below = limits
        self.assertLess(near[0], 3.5)
        self.assertGreater(near[1], 3.6)
        for low, high in (above, below):  # the curves' own range, as without a floor
            self.assertGreater(low, 3.4)
            self.assertLess(high, 3.7)


if __name__ == "__main__":
    absltest.main()
