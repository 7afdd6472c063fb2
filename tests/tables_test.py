"""Tests for roformer_jax/studies/tables.py: the summary, paired, extremes tables, paired
curves and differences, the step a run reaches a loss, the Holm text and README's claim."""

import os
import tempfile

import numpy as np
from absl.testing import absltest

from roformer_jax.studies import compare_report, tables


class TablesTest(absltest.TestCase):
    def test_summary_and_report(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        results = {
            "x": [
                [{"step": 1, "train/loss": 3.0, "elapsed_s": 1.0}],
                [{"step": 1, "train/loss": 5.0, "elapsed_s": 1.0}],
            ],
            "y": [[{"step": 1, "train/loss": 2.0}]],
        }
        table = tables.summary_table(results, ["train/loss", "valid/loss_128"])
        self.assertIn("| x | 2 | 4 ± 1.4 | n/a | 1 ± 0 |", table)  # sample std, ddof 1
        self.assertIn("| y | 1 | 2 | n/a | n/a |", table)
        self.assertEqual(
            tables.paired_table(results, "x", "train/loss").splitlines()[2:],
            ["| y | -1.000 | 1 | -1.000 |"],  # y's one seed against x's seed 0: no interval
        )
        # 3 seeds: mean 2, sample std 1, t(0.975, 2) = 4.303 -> 2 ± 4.303 / sqrt(3).
        results["x"].append([{"step": 1, "train/loss": 5.0}])  # x: 3, 5, 5
        results["w"] = [[{"step": 1, "train/loss": loss}] for loss in (4.0, 8.0, 7.0)]
        self.assertIn(
            "| w | +2.000 [-0.484, +4.484] | 3 | +1.000, +3.000, +2.000 |",
            tables.paired_table(results, "x", "train/loss"),
        )
        with self.assertRaisesRegex(ValueError, "baseline 'z' is not one of the runs"):
            tables.paired_table(results, "z", "train/loss")
        png, md = compare_report.write_report(
            results,
            workdir,
            title="t",
            plot_keys=["train/loss"],
            table_keys=["train/loss"],
            footnote="data: test",
            baseline="y",
            paired_key="train/loss",
        )
        self.assertGreater(os.path.getsize(png), 1000)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("data: test", text)
        self.assertIn("| x | +1.000 | 1 | +1.000 |", text)
        # A key no run logged (misspelt) would be a column of dashes: refused, naming those logged.
        with self.assertRaisesRegex(ValueError, r"\['valid/los'\]: no run logged.*'train/loss'"):
            compare_report.write_report(
                results,
                workdir,
                title="t",
                plot_keys=["train/loss"],
                table_keys=["valid/los"],
                footnote="",
            )

    def test_extremes_table_is_each_seeds_extreme_over_training(self):
        def run(denominators, grads):
            return [
                {"step": i, "train/min_denominator": d, "train/grad_norm_max": g}
                for i, (d, g) in enumerate(zip(denominators, grads))
            ]

        results = {
            "eq 18": [run((5.0, 0.002, 3.0), (1.0, 40.0, 2.0)), run((4.0, 2.0, 1.0), (1,) * 3)],
            "softmax": [[{"step": 0, "train/grad_norm_max": 0.5}]],  # no denominator
        }
        table = tables.extremes_table(
            results, {"train/min_denominator": "min", "train/grad_norm_max": "max"}
        )
        self.assertEqual(
            table.splitlines()[2:],
            [
                "| eq 18 | 2 | 0.002, 1 | 40, 1 |",  # the spike is the one record it is in
                "| softmax | 1 | – | 0.5 |",
            ],
        )

    def test_paired_curves_through_training(self):
        def run(*losses):  # evaluations at steps 10, 20 (and 30 where given)
            return [{"step": 10 * (i + 1), "valid/loss": v} for i, v in enumerate(losses)]

        results = {
            "base": [run(5.0, 4.0, 3.0), run(6.0, 5.0), run(5.5, 4.5, 3.5)],
            "new": [run(4.0, 3.0, 2.0), run(4.0, 4.0), run(5.5, 2.5, 1.5)],
        }
        curve = tables.paired_curves(results, "base", "valid/loss")["new"]
        self.assertEqual(curve["step"], [10, 20])  # the steps every seed logged
        self.assertEqual(curve["n"], 3)
        # step 10: differences -1, -2, 0 -> mean -1, sample std 1, t(0.975, 2) = 4.303.
        np.testing.assert_allclose(
            [curve["mean"][0], curve["low"][0], curve["high"][0]],
            [-1.0, -1.0 - 4.303 / np.sqrt(3), -1.0 + 4.303 / np.sqrt(3)],
            atol=1e-3,
        )
        one = tables.paired_curves({"base": [run(5.0)], "new": [run(4.5)]}, "base", "valid/loss")
        self.assertEqual((one["new"]["mean"], one["new"]["low"]), ([-0.5], [-0.5]))

    def test_paired_diffs_at_a_step_and_below_from(self):
        def run(*losses):  # evaluations at steps 0, 10, 20, 30
            return [{"step": 10 * i, "valid/loss": v} for i, v in enumerate(losses)]

        results = {
            "base": [run(5.0, 5.0, 5.0, 5.0), run(5.0, 5.0, 5.0, 5.0), run(5.0, 5.0, 5.0, 5.0)],
            # Ahead at step 0 and from step 20 on; behind in one seed at step 10.
            "new": [run(4.0, 4.0, 4.0, 4.1), run(4.2, 5.9, 4.2, 4.0), run(4.1, 4.0, 4.1, 4.2)],
        }
        diffs = tables.paired_diffs(results, "new", "base", "valid/loss", step=10)
        np.testing.assert_allclose(diffs, [-1.0, 0.9, -1.0])
        np.testing.assert_allclose(
            tables.paired_diffs(results, "new", "base", "valid/loss"), [-0.9, -1.0, -0.8]
        )
        curve = tables.paired_curves(results, "base", "valid/loss")["new"]
        self.assertEqual(tables.below_from(curve), 20)  # not 0: step 10's interval holds zero
        curve["high"][-1] = 0.01  # not below zero at the end: never settled
        self.assertIsNone(tables.below_from(curve))

    def test_reaches_is_the_first_step_at_the_baselines_final_loss(self):
        def run(*losses):  # evaluations at steps 0, 10, 20, 30
            return [{"step": 10 * i, "valid/loss": v} for i, v in enumerate(losses)]

        results = {
            "base": [run(6.0, 5.5, 5.2, 5.0), run(6.0, 5.5, 5.0, 4.8)],  # final mean 4.9
            "fast": [run(5.0, 4.8, 4.0, 3.0), run(5.0, 5.1, 4.0, 3.0)],  # 4.95 at 10, 4.0 at 20
            "slow": [run(6.5, 6.0, 5.5, 5.0), run(6.5, 6.0, 5.5, 4.9)],
        }
        self.assertEqual(tables.reaches(results, "fast", "base", "valid/loss"), 20)
        self.assertIsNone(tables.reaches(results, "slow", "base", "valid/loss"))
        self.assertEqual(tables.reaches(results, "base", "base", "valid/loss"), 30)

    def test_holm_text_keeps_what_survives_the_family(self):
        family = {
            "far": [-1.0, -1.1, -0.9],  # t = -17.3, p = 0.0033: x 3 = 0.0100, kept
            "near": [-0.1, -0.3, -0.2],  # t = -3.46, p = 0.074: apart from 0 in no test
            "edge": [-0.5, -0.3, -0.3],  # t = -5.50, p = 0.0315: x 2 = 0.063, lost
            "one seed": [-5.0],  # no interval: not in the family
        }
        text = tables.holm_text(family, "each run minus base, final")
        self.assertIn("3 paired intervals (each run minus base, final); 2 exclude 0 at 95%", text)
        self.assertIn("the first must reach |t| ≥ 7.65 (2 d.f.)", text)  # t.isf(0.05 / 6, 2)
        self.assertIn("1 of those 2 stays apart from 0: far (p = 0.0033, Holm 0.01)", text)
        self.assertIn("1 does not: edge (p = 0.032, Holm 0.063).", text)
        self.assertIn("none is apart from 0 either", tables.holm_text({"near": family["near"]}, ""))
        self.assertEqual(tables.holm_kept(family), ["far"])  # the labels the text keeps
        self.assertEqual(tables.holm_kept({"near": family["near"]}), [])

    def test_holm_claim_says_where_holm_keeps_which_side(self):
        diffs = {20: [0.1, 0.12, 0.11], 24: [-0.3, -0.31, -0.29], 28: [0.5, -0.4, 0.1]}
        self.assertEqual(
            tables.holm_claim(diffs, [20, 24], "px"),
            "shown at 20 px; contradicted at 24 px (n = 3, Holm) | "
            "+0.110 [+0.085, +0.135] at 20 px",
        )
        # Kept below only: the first such point is the measured one.
        contradicted = tables.holm_claim(diffs, [24], "px")
        self.assertTrue(contradicted.startswith("contradicted at 24 px (n = 3, Holm) | -0.300"))
        # None kept: "not shown", measured at the first point.
        self.assertEqual(
            tables.holm_claim(diffs, [], "tokens"),
            "not shown (n = 3, Holm) | +0.110 [+0.085, +0.135] at 20 tokens",
        )


if __name__ == "__main__":
    absltest.main()
