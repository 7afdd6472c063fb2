"""Tests for roformer_jax/metrics.py."""

import json
import os

import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.training import metrics


class WindowTest(parameterized.TestCase):
    def test_record_divides_sums_over_all_steps(self):
        window = metrics.empty_window()
        steps = [
            {"loss": 6.0, "correct": 1.0, "count": 3.0, "grad_norm": 1.0},
            {"loss": 4.0, "correct": 1.0, "count": 1.0, "grad_norm": 3.0},
        ]
        metrics.accumulate(window, steps, first_step=1)
        record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
        # Over the 4 tokens: 10 / 4, not the mean (6/3 + 4/1) / 2 = 3 of the per-step means.
        self.assertEqual(record["train/loss"], 2.5)
        self.assertAlmostEqual(record["train/perplexity"], np.exp(2.5))
        self.assertEqual(record["train/accuracy"], 0.5)
        self.assertEqual(record["train/grad_norm"], 2.0)
        self.assertEqual(window["steps"], 2)

    def test_extrema_over_the_window(self):
        window = metrics.empty_window()
        step = {"loss": 1.0, "correct": 1.0, "count": 1.0}
        steps = [
            {**step, "grad_norm": 1.0, "min_denominator": 0.5},
            {**step, "grad_norm": 3.0, "min_denominator": 0.01},
            {**step, "grad_norm": 2.0, "min_denominator": 0.2},
        ]
        metrics.accumulate(window, steps, first_step=1)
        record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
        self.assertEqual(record["train/grad_norm"], 2.0)
        self.assertEqual(record["train/grad_norm_max"], 3.0)
        self.assertEqual(record["train/min_denominator"], 0.01)
        json.dumps(window)  # it rides in checkpoints
        # The next window starts afresh.
        window.update(metrics.empty_window())
        metrics.accumulate(window, [{**step, "grad_norm": 0.5, "min_denominator": 0.3}], 4)
        record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
        self.assertEqual(
            (record["train/grad_norm_max"], record["train/min_denominator"]), (0.5, 0.3)
        )

    def test_no_denominator_no_entry(self):
        # Softmax reports none; a window from a checkpoint written before the extrema existed
        # has neither key.
        old = {"loss": 0.0, "correct": 0.0, "count": 0.0, "grad_norm": 0.0, "steps": 0}
        for window in (metrics.empty_window(), old):
            metrics.accumulate(
                window,
                [{"loss": 1.0, "correct": 0.0, "count": 1.0, "grad_norm": 2.0}],
                first_step=1,
            )
            record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
            self.assertNotIn("train/min_denominator", record)
            self.assertEqual(record["train/grad_norm_max"], 2.0)

    def test_pair_metrics_are_means_over_rows_and_restart(self):
        window = metrics.empty_window()
        step = {"loss": 9.0, "correct": 1.0, "count": 3.0, "grad_norm": 1.0}
        steps = [
            {**step, "pair_loss": 2.0, "pair_correct": 3.0, "pair_count": 4.0},
            {**step, "pair_loss": 1.0, "pair_correct": 1.0, "pair_count": 4.0},
        ]
        metrics.accumulate(window, steps, first_step=1)
        record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
        self.assertEqual(record["train/pair_loss"], 3.0 / 8)
        self.assertEqual(record["train/pair_accuracy"], 0.5)
        self.assertEqual(record["train/loss"], 3.0)  # the objective's, pairs included
        json.dumps(window)
        window.update(metrics.empty_window())  # the next window starts afresh
        metrics.accumulate(window, steps[1:], first_step=3)
        record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
        self.assertEqual(record["train/pair_accuracy"], 0.25)
        # MLM alone, and a window from a checkpoint written before pairs existed: no entry.
        old = {"loss": 0.0, "correct": 0.0, "count": 0.0, "grad_norm": 0.0, "steps": 0}
        for window in (metrics.empty_window(), old):
            metrics.accumulate(window, [step], first_step=1)
            record = metrics.window_record(window, lr=0.1, tokens_per_s=None)
            self.assertNotIn("train/pair_accuracy", record)

    @parameterized.parameters(("loss", np.nan), ("grad_norm", np.inf), ("loss", -np.inf))
    def test_non_finite_loss_or_gradient_names_the_step(self, key, value):
        good = {"loss": 2.0, "correct": 1.0, "count": 3.0, "grad_norm": 0.5}
        window = metrics.empty_window()
        with self.assertRaisesRegex(FloatingPointError, "at step 8$"):
            metrics.accumulate(window, [good, {**good, key: np.float32(value)}], first_step=7)


class WriterTest(absltest.TestCase):
    def test_resume_drops_records_after_the_checkpoint(self):
        workdir = tiny.workdir()
        writer = metrics.MetricsWriter(workdir)
        for step in (1, 2, 3):
            writer.write({"step": step, "train/loss": float(step), "train/tokens_per_s": None})
        writer.close()
        writer = metrics.MetricsWriter(workdir, resume_step=2)
        writer.write({"step": 3, "train/loss": 30.0})
        writer.close()
        self.assertEqual(
            [(r["step"], r["train/loss"]) for r in metrics.read_metrics(workdir)],
            [(1, 1.0), (2, 2.0), (3, 30.0)],
        )
        with open(os.path.join(workdir, metrics.METRICS_FILE)) as f:
            self.assertEqual(json.loads(f.readline())["step"], 1)
        self.assertNotEmpty(os.listdir(os.path.join(workdir, metrics.TENSORBOARD_DIR)))

    def test_a_cut_off_last_record_is_dropped_and_a_garbled_one_named(self):
        workdir = tiny.workdir()
        path = os.path.join(workdir, metrics.METRICS_FILE)
        with open(path, "w", encoding="utf-8") as f:
            f.write('{"step": 1, "train/loss": 1.0}\n{"step": 2, "train/lo')  # killed mid-write
        with self.assertLogs(level="WARNING") as logs:
            writer = metrics.MetricsWriter(workdir, resume_step=2)
        self.assertIn(f"{path} ends in a cut-off record", logs.output[0])
        writer.write({"step": 2, "train/loss": 2.0})
        writer.close()
        self.assertEqual([r["step"] for r in metrics.read_metrics(workdir)], [1, 2])
        with open(path, "w", encoding="utf-8") as f:
            f.write('{"step": 1}\n{"step": 2, "tr\n{"step": 3}\n')
        with self.assertRaisesRegex(ValueError, rf"^{path}, line 2, is not JSON"):
            metrics.read_metrics(workdir)

    def test_disabled_writer_writes_nothing(self):
        workdir = tiny.workdir()
        writer = metrics.MetricsWriter(workdir, enabled=False)
        writer.write({"step": 1, "train/loss": 1.0})
        writer.close()
        self.assertEqual(os.listdir(workdir), [])


if __name__ == "__main__":
    absltest.main()
