"""Tests for tests/tolerance.py: the bounds hold on sums in float32, and are not vacuous."""

import numpy as np
import tolerance
from absl.testing import absltest


class ToleranceTest(absltest.TestCase):
    def test_float32_unit_roundoff(self):
        self.assertEqual(tolerance.unit_roundoff(np.float32), 2.0**-24)
        self.assertEqual(tolerance.unit_roundoff(np.float64), 2.0**-53)

    def test_the_bound_holds_for_any_summation_order(self):
        rng = np.random.default_rng(0)
        x = rng.normal(size=4096).astype(np.float32) * 10.0 ** rng.integers(-3, 3, 4096)
        exact = np.sum(x.astype(np.float64))
        bound = tolerance.dot(len(x), np.abs(x).sum())
        for order in (x, x[::-1], np.sort(x), x[rng.permutation(len(x))]):
            naive = np.float32(0)
            for v in order:  # left to right: the worst order, with the longest chains
                naive = np.float32(naive + v)
            self.assertLessEqual(abs(float(naive) - exact), bound)
            self.assertLessEqual(abs(float(np.sum(order)) - exact), bound)

    def test_the_bound_is_nearly_attained(self):
        # 1 + u + u + ... left to right: each u is a tie that rounds back to 1 (to even), so
        # the error is (n - 1)·u against a bound of γ_n·(1 + (n - 1)·u) ≈ n·u: a bound any
        # tighter than the model's would fail here.
        n, u = 1001, tolerance.unit_roundoff()
        total = np.float32(1)
        for _ in range(n - 1):
            total = np.float32(total + np.float32(u))
        error = 1 + (n - 1) * u - float(total)
        bound = tolerance.dot(n, 1 + (n - 1) * u)
        self.assertLessEqual(error, bound)
        self.assertGreater(error, 0.99 * bound)

    def test_the_bound_is_not_vacuous(self):
        # A sum of n ones is exact, but one of 1 + n·u-sized errors is caught.
        self.assertLess(tolerance.dot(10, 10.0), 1e-5)
        with self.assertRaises(ValueError):
            tolerance.gamma(2**24)


if __name__ == "__main__":
    absltest.main()
