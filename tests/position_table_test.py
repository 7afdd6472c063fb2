"""Tests for roformer_jax/studies/position_table.py: what training did to a table."""

import jax.numpy as jnp
import numpy as np
from absl.testing import absltest

from roformer_jax.nn import positions
from roformer_jax.studies import position_table


class TableChangeTest(absltest.TestCase):
    def test_what_training_did_to_a_table(self):
        rng = np.random.default_rng(0)
        random = rng.normal(0.0, 0.02, (128, 64))
        unchanged = position_table.table_change(random, random)
        self.assertEqual(unchanged["moved"], 0.0)
        np.testing.assert_allclose(unchanged["row_norm"], 0.02 * np.sqrt(64), rtol=0.05)
        self.assertLess(abs(unchanged["neighbor_cosine"]), 0.05)  # random rows: ~ 1/sqrt(E)
        # Replaced by an independent random table of the same scale: moved ~ sqrt(2).
        redrawn = position_table.table_change(random, rng.normal(0.0, 0.02, (128, 64)))
        np.testing.assert_allclose(redrawn["moved"], np.sqrt(2), rtol=0.05)
        self.assertEqual(redrawn["row_norm_initial"], unchanged["row_norm"])
        # A smooth table (the sinusoid, as trained BERT tables become): neighbors alike.
        smooth = position_table.table_change(
            random, np.asarray(positions.sinusoidal_embedding(jnp.arange(128), 64))
        )
        self.assertGreater(smooth["neighbor_cosine"], 0.9)


if __name__ == "__main__":
    absltest.main()
