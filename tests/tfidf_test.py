"""Tests for roformer_jax/studies/tfidf.py: each text's TF-IDF nearest neighbour."""

import numpy as np
from absl.testing import absltest

from roformer_jax.studies.tfidf import tfidf_nearest


class TfidfTest(absltest.TestCase):
    def test_tfidf_nearest_on_an_obvious_case(self):
        texts = [
            "lobster claw shell sea lobster",
            "rail station train track",
            "the lobster shell sea crab claw",
            "train rail locomotive track station",
            "nothing shared here",
        ]
        np.testing.assert_array_equal(tfidf_nearest(texts)[:4], [2, 3, 0, 1])
        # equal similarity: the lower index wins
        np.testing.assert_array_equal(tfidf_nearest(["x y", "x y", "x y"]), [1, 0, 0])
        # a common word repeated in two texts does not make them neighbours (sublinear tf)
        texts = ["the " * 50 + "lobster claw " * 10, "the " * 50 + "rail " * 10]
        texts.append("the shell " + "lobster claw " * 10)
        self.assertEqual(tfidf_nearest(texts)[0], 2)


if __name__ == "__main__":
    absltest.main()
