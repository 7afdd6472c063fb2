"""Tests for roformer_jax/studies/long_doc_windows.py: far windows, every window pair of an
article, and the drawn window budgets."""

import numpy as np
from absl.testing import absltest

from roformer_jax.studies.long_doc_articles import Article
from roformer_jax.studies.long_doc_windows import far_windows, window_budgets, window_pairs


class LongDocWindowsTest(absltest.TestCase):
    def test_far_windows_never_share_a_section(self):
        lead, middle = tuple(f"l{i}" for i in range(20)), tuple(f"m{i}" for i in range(40))
        costs = {w: 1 for w in lead + middle + tuple(f"e{i}" for i in range(30))}
        short_end = Article("t", (lead, middle, ("e0", "e1")))
        self.assertIsNone(far_windows(short_end, costs, window_tokens=30))  # only inside A's
        end = tuple(f"e{i}" for i in range(30))
        a, b = far_windows(Article("t", (lead, middle, end)), costs, window_tokens=30)
        self.assertEqual((a, b), (list(lead + middle[:10]), list(end)))

    def test_budgets_are_uniform_integers_keyed_by_article(self):
        budgets = window_budgets(400, min_window_tokens=3, window_tokens=7, seed=5)
        self.assertEqual(budgets.shape, (400, 2))
        self.assertEqual(set(budgets.ravel().tolist()), {3, 4, 5, 6, 7})  # both ends reachable
        counts = np.bincount(budgets.ravel())[3:]
        self.assertLess(counts.max() - counts.min(), 80)  # 160 each expected; sd ~11.3
        self.assertGreater(np.mean(budgets[:, 0] != budgets[:, 1]), 0.7)  # A, B independent
        # Article i's budgets do not depend on how many articles there are (or which fit).
        np.testing.assert_array_equal(
            window_budgets(10, min_window_tokens=3, window_tokens=7, seed=5), budgets[:10]
        )
        other = window_budgets(400, min_window_tokens=3, window_tokens=7, seed=6)
        self.assertFalse(np.array_equal(other, budgets))
        fixed = window_budgets(4, min_window_tokens=9, window_tokens=9, seed=5)
        np.testing.assert_array_equal(fixed, np.full((4, 2), 9))

    def test_window_pairs_are_every_pair_that_shares_no_section(self):
        sections = tuple(tuple(f"s{s}w{i}" for i in range(10)) for s in range(4))
        costs = {w: 1 for section in sections for w in section}
        pairs = window_pairs(Article("t", sections), costs, window_tokens=8)
        firsts = [(a[0], b[0]) for a, b in pairs]  # A's start, B's start: by A, then B from the end
        expected = [
            ("s0w0", "s3w0"),
            ("s0w0", "s2w0"),
            ("s0w0", "s1w0"),
            ("s1w0", "s3w0"),
            ("s1w0", "s2w0"),
            ("s2w0", "s3w0"),
        ]
        self.assertEqual(firsts, expected)
        self.assertTrue(all(len(a) == len(b) == 8 for a, b in pairs))
        self.assertEqual(pairs[0], far_windows(Article("t", sections), costs, window_tokens=8))
        # A of 12 spans two sections: B starts after A's last one.
        firsts = [
            (a[0], b[0])
            for a, b in window_pairs(
                Article("t", sections), costs, window_tokens=12, far_window_tokens=8
            )
        ]
        self.assertEqual(firsts, [("s0w0", "s3w0"), ("s0w0", "s2w0"), ("s1w0", "s3w0")])


if __name__ == "__main__":
    absltest.main()
