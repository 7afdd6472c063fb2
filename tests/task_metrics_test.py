"""Tests for roformer_jax/training/task_metrics.py: the fine-tuning scores, by hand."""

import numpy as np
from absl.testing import absltest

from roformer_jax.training import task_metrics as tm


class MetricsTest(absltest.TestCase):
    def test_accuracy_and_macro_f1_by_hand(self):
        labels, predictions = [0, 0, 1, 1, 2], [0, 1, 1, 1, 0]
        self.assertAlmostEqual(tm.accuracy(predictions, labels), 3 / 5)
        # class 0: tp 1, fp 1, fn 1 -> 1/2; class 1: tp 2, fp 1, fn 0 -> 4/5; class 2: 0.
        self.assertAlmostEqual(tm.macro_f1(predictions, labels, 3), (0.5 + 0.8 + 0.0) / 3)

    def test_exact_match_and_f1_by_hand(self):
        predictions = ["The cat!", "big red dog", "moon"]
        references = [["cat"], ["the red dog", "dog"], ["sun"]]
        self.assertAlmostEqual(tm.exact_match(predictions, references), 1 / 3)
        # "big red dog" vs "red dog": p 2/3, r 1 -> 0.8 (better than "dog": 0.5).
        self.assertAlmostEqual(tm.token_f1(predictions, references), (1 + 0.8 + 0) / 3)

    def test_best_span_is_ordered_and_inside_the_context(self):
        start = np.array([9.0, 0.0, 1.0, 5.0, 0.0])
        end = np.array([9.0, 3.0, 0.0, 0.0, 2.0])
        self.assertEqual(tm.best_span(start, end, 1, 4), (3, 4))  # not 0 ([CLS]), not (3, 1)


if __name__ == "__main__":
    absltest.main()
