"""Tests for roformer_jax/studies/attention_distance.py: trained attention's weight by |m − n|."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.nn.model import RoFormer
from roformer_jax.studies import attention_distance

LENGTH = 37  # not a multiple of the head size (16): the last one-hot block is partial


def _model(position):
    cfg = tiny.model_config(position=position, vocab_size=50, **(
        {"max_len": LENGTH} if position == "learned" else {}))  # fmt: skip
    ids = jax.random.randint(jax.random.key(1), (2, LENGTH), 5, 50)
    mask = jnp.arange(LENGTH)[None, :] < jnp.array([[LENGTH], [LENGTH - 9]])  # row 1 padded
    params = RoFormer(cfg).init(jax.random.key(0), ids, attention_mask=mask)["params"]
    return cfg, params, ids, mask


class AttentionWeightsTest(parameterized.TestCase):
    @parameterized.parameters("rope", "alibi", "learned", "none")
    def test_the_weights_give_back_the_models_attention_output(self, position):
        cfg, params, ids, mask = _model(position)
        weights = attention_distance.attention_weights(cfg, params, ids, mask)
        self.assertLen(weights, cfg.num_layers)
        _, state = RoFormer(cfg).apply(
            {"params": params}, ids, attention_mask=mask,
            capture_intermediates=lambda m, _: m.name in ("value", "output"),
        )  # fmt: skip
        for layer, w in enumerate(weights):
            chex.assert_shape(w, (2, cfg.num_heads, LENGTH, LENGTH))
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=1e-5)  # each row a distribution
            np.testing.assert_array_equal(w[1][..., LENGTH - 9 :], 0.0)  # nothing on padding
            captured = state["intermediates"]["encoder"][f"layer_{layer}"]["attention"]
            v = captured["value"]["__call__"][0].reshape(2, LENGTH, cfg.kv_heads, cfg.head_dim)
            mixed = jnp.einsum("bnlm,bmnh->blnh", w, v).reshape(2, LENGTH, -1)
            dense = params["encoder"][f"layer_{layer}"]["attention"]["output"]
            expected = captured["output"]["__call__"][0]
            # float32 sums of ~L products of values O(1): error ~ L·eps·|v|, here < 1e-5.
            np.testing.assert_allclose(mixed @ dense["kernel"] + dense["bias"], expected,
                                       atol=1e-5)  # fmt: skip

    def test_a_kind_without_softmax_weights_is_an_error(self):
        cfg, params, ids, mask = _model("rope")
        linear = tiny.model_config(attention="linear", vocab_size=50)
        with self.assertRaisesRegex(ValueError, "no softmax weights"):
            attention_distance.attention_weights(linear, params, ids, mask)
        del cfg


class DistanceSumsTest(absltest.TestCase):
    def test_uniform_attention_is_one_over_the_real_length(self):
        real = np.array([[True] * 6, [True] * 4 + [False] * 2])
        weights = np.where(real[:, None, None, :], 1.0 / real.sum(-1)[:, None, None, None], 0.0)
        weights = np.broadcast_to(weights, (2, 3, 6, 6))
        sums, counts = attention_distance.distance_sums(weights, real)
        per_key = sums / counts
        # distances 0-3 occur in both rows (1/6 and 1/4, by their pair counts); 4-5 only in row 0.
        pairs = np.array([[6, 10, 8, 6, 4, 2], [4, 6, 4, 2, 0, 0]])
        expected = (pairs[0] / 6 + pairs[1] / 4) / pairs.sum(0)
        np.testing.assert_allclose(per_key, np.broadcast_to(expected, (3, 6)))

    def test_attention_on_the_neighbour_only(self):
        length = 5
        weights = np.zeros((1, 1, length, length))
        weights[0, 0, np.arange(length), np.minimum(np.arange(length) + 1, length - 1)] = 1.0
        sums, counts = attention_distance.distance_sums(weights, np.ones((1, length), bool))
        np.testing.assert_array_equal(counts, [5, 8, 6, 4, 2])
        per_key = sums / counts
        # distance 1: 4 of its 8 pairs carry weight 1; distance 0: the last query, 1 of 5.
        np.testing.assert_allclose(per_key[0], [1 / 5, 4 / 8, 0, 0, 0])


if __name__ == "__main__":
    absltest.main()
