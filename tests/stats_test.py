"""Tests for roformer_jax/studies/stats.py: McNemar's exact test, the sign test, binned accuracy,
the paired t-test and Holm's adjustment."""

import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats as scipy_stats

from roformer_jax.studies import stats


def _pairs(only_a: int, only_b: int, both: int = 3, neither: int = 2):
    """(correct_a, correct_b) with the given counts of each agreement pattern."""
    a = [True] * only_a + [False] * only_b + [True] * both + [False] * neither
    b = [False] * only_a + [True] * only_b + [True] * both + [False] * neither
    return np.array(a), np.array(b)


class McNemarTest(parameterized.TestCase):
    @parameterized.parameters(
        # (b, c, p by hand): p = 2 * sum_{i <= min} C(n, i) / 2^n
        (1, 9, 2 * (1 + 10) / 2**10),  # 0.021484375
        (0, 5, 2 / 2**5),  # 0.0625
        (3, 3, 1.0),  # the tail passes 1/2: capped at 1
        (0, 0, 1.0),  # no discordant pair
        (2, 8, 2 * (1 + 10 + 45) / 2**10),  # 0.109375
    )
    def test_hand_computed(self, only_a, only_b, p):
        result = stats.mcnemar_exact(*_pairs(only_a, only_b))
        self.assertEqual((result.only_a, result.only_b), (only_a, only_b))
        self.assertAlmostEqual(result.p, p, places=12)

    @parameterized.parameters((4, 15), (10, 11), (0, 30), (25, 7))
    def test_equals_scipys_two_sided_binomial_test(self, only_a, only_b):
        expected = scipy_stats.binomtest(only_a, only_a + only_b, 0.5).pvalue
        self.assertAlmostEqual(stats.mcnemar_exact(*_pairs(only_a, only_b)).p, expected, 12)

    def test_symmetric_and_blind_to_agreement(self):
        p = stats.mcnemar_exact(*_pairs(2, 9)).p
        self.assertEqual(stats.mcnemar_exact(*_pairs(9, 2)).p, p)
        self.assertEqual(stats.mcnemar_exact(*_pairs(2, 9, both=40, neither=17)).p, p)

    def test_shapes_must_match(self):
        with self.assertRaisesRegex(ValueError, r"must be the same \[N\]"):
            stats.mcnemar_exact([True, False], [True])


class SignTestTest(parameterized.TestCase):
    @parameterized.parameters((372, 523), (261, 523), (0, 12), (12, 12), (30, 51), (0, 0))
    def test_equals_scipys_two_sided_binomial_test(self, k, n):
        expected = scipy_stats.binomtest(k, n, 0.5).pvalue if n else 1.0
        self.assertAlmostEqual(stats.sign_test(k, n), expected, 12)

    def test_more_successes_than_trials_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "13 successes in 12 trials"):
            stats.sign_test(13, 12)


class BinnedAccuracyTest(absltest.TestCase):
    def test_bins_counts_and_accuracies(self):
        values = [0.1, 0.2, 0.3, 0.6, 0.9, 1.0]
        correct = [True, False, True, True, False, True]
        bins = stats.binned_accuracy(values, correct, edges=(0, 0.25, 0.5, 0.75, 1))
        self.assertEqual([b.count for b in bins], [2, 1, 1, 2])
        self.assertEqual([b.accuracy for b in bins], [0.5, 1.0, 1.0, 0.5])
        self.assertEqual((bins[0].low, bins[-1].high), (0.0, 1.0))

    def test_top_edge_is_in_the_last_bin_and_empty_bins_are_none(self):
        bins = stats.binned_accuracy([1.0, 1.0], [True, False], edges=(0, 0.5, 1))
        self.assertEqual([(b.count, b.accuracy) for b in bins], [(0, None), (2, 0.5)])

    def test_values_outside_and_bad_edges_are_errors(self):
        with self.assertRaisesRegex(ValueError, "outside"):
            stats.binned_accuracy([1.2], [True], edges=(0, 1))
        with self.assertRaisesRegex(ValueError, "increasing"):
            stats.binned_accuracy([0.5], [True], edges=(0, 0))


class PairedTTest(absltest.TestCase):
    def test_agrees_with_scipy_and_with_the_interval(self):
        for diffs in ([-0.03, -0.01, -0.02], [0.2, -0.1, 0.05], [-1.7, -1.6, -1.65, -1.72]):
            expected = scipy_stats.ttest_1samp(diffs, 0.0).pvalue
            self.assertAlmostEqual(stats.paired_t_p(diffs), expected, places=12)
            _, low, high = stats.t_interval(diffs)
            self.assertEqual(stats.paired_t_p(diffs) < 0.05, low > 0 or high < 0)

    def test_degenerate_differences(self):
        self.assertEqual(stats.paired_t_p([0.5, 0.5, 0.5]), 0.0)
        self.assertEqual(stats.paired_t_p([0.0, 0.0]), 1.0)
        with self.assertRaisesRegex(ValueError, "at least 2"):
            stats.paired_t_p([0.1])


class HolmTest(absltest.TestCase):
    def test_hand_computed(self):
        # sorted 0.01, 0.02, 0.03, 0.5 (m = 4): 0.04, 0.06, 0.06 (monotone), 0.5
        self.assertEqual(
            [round(p, 12) for p in stats.holm([0.03, 0.5, 0.01, 0.02])], [0.06, 0.5, 0.04, 0.06]
        )
        self.assertEqual(stats.holm([0.9, 0.8]), [1.0, 1.0])  # 2 x 0.8 capped at 1; monotone
        self.assertEqual(stats.holm([]), [])


if __name__ == "__main__":
    absltest.main()
