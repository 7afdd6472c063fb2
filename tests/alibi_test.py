"""Tests for roformer_jax/nn/alibi.py: ALiBi's slopes, its bias, and its section in the model."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import positions_test
from absl.testing import absltest

from roformer_jax.nn import alibi, attention

B, L, V = 2, 8, 64


def _model(position, **overrides):
    """positions_test's tiny encoder (initialised at seed 0): attention far from uniform."""
    return positions_test._build(position, 0, **overrides)


def _ids(length=L, seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(5, V, (B, length)), jnp.int32)


class AlibiTest(absltest.TestCase):
    def test_slopes_follow_the_paper(self):
        # Press et al. 2022: 8 heads give 1/2, 1/4, ..., 1/256; 6 heads take the 4-head
        # slopes and then every other slope of the 8-head sequence.
        np.testing.assert_array_equal(alibi.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
        np.testing.assert_array_equal(alibi.alibi_slopes(6), 2.0 ** -np.array([2, 4, 6, 8, 1, 3]))
        np.testing.assert_array_equal(alibi.alibi_slopes(1), [2.0**-8])

    def test_slope_heads_repeat_the_slopes_of_fewer_heads(self):
        # 8 heads of 16 with the 2-head slopes (1/16, 1/256): each over 4 adjacent heads.
        np.testing.assert_array_equal(
            alibi.alibi_slopes(8, slope_heads=2), np.repeat([2.0**-4, 2.0**-8], 4)
        )
        np.testing.assert_array_equal(alibi.alibi_slopes(8, 8), alibi.alibi_slopes(8))
        with self.assertRaisesRegex(ValueError, "multiple of slope_heads=3"):
            alibi.alibi_slopes(8, slope_heads=3)

    def test_the_section_sets_the_model_slopes(self):
        # tiny's 4 heads: the 2-head slopes move the outputs; the 4-head slopes, the default's.
        _, variables = _model("alibi")
        ids = _ids()
        outputs = {
            heads: _model("alibi", sections={"alibi": {"slope_heads": heads}})[0].apply(
                variables, ids
            )
            for heads in (2, 4)
        }
        chex.assert_trees_all_equal(outputs[4], _model("alibi")[0].apply(variables, ids))
        self.assertGreater(float(jnp.abs(outputs[2].logits - outputs[4].logits).max()), 1e-3)
        with self.assertRaisesRegex(ValueError, "slope_heads=3 does not divide num_heads=4"):
            _model("alibi", sections={"alibi": {"slope_heads": 3}})
        with self.assertRaisesRegex(ValueError, "slope_heads=0 must be a positive"):
            _model("alibi", sections={"alibi": {"slope_heads": 0}})

    def test_bias_is_minus_slope_times_distance(self):
        q_pos = np.array([[0, 1, 5], [10, 11, 12]])
        k_pos = np.array([[0, 2, 3, 9], [1, 10, 20, 30]])
        got = alibi.alibi_bias(q_pos, k_pos, num_heads=4)
        chex.assert_shape(got, (2, 4, 3, 4))
        slopes = alibi.alibi_slopes(4)
        for b in range(2):
            for h in range(4):
                for i in range(3):
                    for j in range(4):
                        want = -slopes[h] * abs(q_pos[b, i] - k_pos[b, j])
                        self.assertAlmostEqual(float(got[b, h, i, j]), want, places=5)
        # Unbatched positions give one bias for every row.
        chex.assert_shape(alibi.alibi_bias(np.arange(3), np.arange(4), 4), (1, 4, 3, 4))
        # A batch of one, or unbatched, against a batch: that batch.
        chex.assert_shape(alibi.alibi_bias(q_pos[:1], k_pos, 4), (2, 4, 3, 4))
        chex.assert_shape(alibi.alibi_bias(q_pos, np.arange(4), 4), (2, 4, 3, 4))

    def test_positions_must_share_a_batch(self):
        with self.assertRaisesRegex(ValueError, r"\(2, 3\) and k_positions of shape \(3, 4\) have"):
            alibi.alibi_bias(np.zeros((2, 3), int), np.zeros((3, 4), int), 4)
        with self.assertRaisesRegex(
            ValueError, r"k_positions of shape \(1, 2, 4\); expected \[M\]"
        ):
            alibi.alibi_bias(np.zeros((2, 3), int), np.zeros((1, 2, 4), int), 4)

    def test_softmax_with_the_bias_equals_flax_attention(self):
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.standard_normal((B, L, 4, 16)), jnp.float32) for _ in "qkv")
        bias = alibi.alibi_bias(jnp.arange(L), jnp.arange(L), 4)
        got = attention.softmax_attention(q, k, v, bias=bias)
        chex.assert_trees_all_close(got, nn.dot_product_attention(q, k, v, bias=bias), atol=1e-5)
        plain = attention.softmax_attention(q, k, v)
        self.assertGreater(float(jnp.abs(got - plain).max()), 1e-2)  # the bias matters

    def test_adds_no_parameters_and_runs_past_any_length(self):
        _, none = _model("none")
        model, alibi = _model("alibi")
        self.assertEqual(jax.tree.structure(alibi), jax.tree.structure(none))
        out = model.apply(alibi, _ids(length=4 * L))
        chex.assert_shape(out.logits, (B, 4 * L, V))
        chex.assert_tree_all_finite(out)


if __name__ == "__main__":
    absltest.main()
