"""Tests for tests/grid.py: a sampled grid keeps its required cases; the full flag, every case."""

import os
from unittest import mock

import grid
from absl.testing import absltest

_AXES = dict(a=[1, 2, 3], b=["x", "y"], c=[None, 4])  # 12 cases


class CoveringTest(absltest.TestCase):
    def test_each_value_of_each_axis_in_every_draw(self):
        for seed in range(20):
            with mock.patch.dict(
                os.environ, {grid.SEED_VARIABLE: str(seed), grid.FULL_VARIABLE: ""}
            ):
                cases = grid.covering("covering_test", extra=1, **_AXES)
            for axis, values in _AXES.items():
                self.assertEqual({c[axis] for c in cases}, set(values), (seed, axis))
            self.assertLess(len(cases), 12)

    def test_the_full_flag_takes_every_case(self):
        with mock.patch.dict(os.environ, {grid.FULL_VARIABLE: "1"}):
            self.assertEqual(
                grid.covering("covering_test", extra=1, **_AXES), grid.product(**_AXES)
            )


if __name__ == "__main__":
    absltest.main()
