"""Tests for roformer_jax/plots.py: which panels a figure of training curves has."""

import os
import tempfile
from unittest import mock

from absl.testing import absltest

from roformer_jax import plots


class PlotCurvesTest(absltest.TestCase):
    def test_a_paired_panel_only_where_a_run_has_a_baseline_to_pair_with(self):
        curves = {"a": [{"step": [1, 2], "train_loss": [2.0, 1.0], "valid_loss": [2.5, 1.5]}]}
        diff = {"step": [1, 2], "mean": [0.1, 0.2], "low": [0.1, 0.2], "high": [0.1, 0.2], "n": 1}
        panels, real = [], plots.plt.subplots

        def subplots(rows, cols, **kwargs):
            panels.append(cols)
            return real(rows, cols, **kwargs)

        path = os.path.join(tempfile.mkdtemp(), "curves.png")
        with mock.patch.object(plots.plt, "subplots", subplots):
            # No pairing asked; a study of one run (its baseline: nothing to pair); a pair.
            for paired in (None, {}, {"a": diff}):
                plots.plot_curves(curves, path, title="t", paired=paired)
        self.assertEqual(panels, [2, 2, 3])
        self.assertTrue(os.path.exists(path))


if __name__ == "__main__":
    absltest.main()
