"""Tests for roformer_jax/studies/attention_distance.py: trained attention's weight by |m − n|."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
import tiny
import tolerance
from absl.testing import absltest, parameterized

from roformer_jax.nn.model import RoFormer
from roformer_jax.studies import attention_distance

LENGTH = 37  # not a multiple of the head size (16): the last one-hot block is partial


def _model(position):
    cfg = tiny.model_config(
        position=position, vocab_size=50, **({"max_len": LENGTH} if position == "learned" else {})
    )
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
            {"params": params},
            ids,
            attention_mask=mask,
            capture_intermediates=lambda m, _: m.name in ("query", "key", "value", "output"),
        )
        h = cfg.head_dim
        for layer, w in enumerate(weights):
            chex.assert_shape(w, (2, cfg.num_heads, LENGTH, LENGTH))
            captured = state["intermediates"]["encoder"][f"layer_{layer}"]["attention"]
            q, k, v = (
                captured[name]["__call__"][0].reshape(2, LENGTH, -1, h)
                for name in ("query", "key", "value")
            )
            # float32 bounds (tests/tolerance.py): a score is a dot of H terms, scaled, plus
            # the bias; its terms add up to at most |q| |k| / √H (Cauchy-Schwarz: rotations
            # keep norms) + |bias|. Softmax is shift-invariant, so a weight moves by at most
            # twice its scores' error, plus its sum of L terms and its division.
            norms = np.linalg.norm(q, axis=-1).max() * np.linalg.norm(k, axis=-1).max()
            bias = cfg.encoding.bias
            largest_bias = (
                0.0
                if bias is None
                else float(
                    np.abs(
                        bias(cfg.position_section, cfg, jnp.arange(LENGTH), jnp.arange(LENGTH))
                    ).max()
                )
            )
            score_error = tolerance.dot(n=h + 2, magnitude=norms * h**-0.5 + largest_bias)
            weight_error = 2 * score_error + tolerance.relative(depth=LENGTH + 3)
            row_error = weight_error + tolerance.gamma(LENGTH)  # and the L-term sum here
            np.testing.assert_allclose(w.sum(-1), 1.0, atol=row_error, rtol=0)
            np.testing.assert_array_equal(w[1][..., LENGTH - 9 :], 0.0)  # nothing on padding
            mixed = jnp.einsum("bnlm,bmnh->blnh", w, v).reshape(2, LENGTH, -1)
            dense = params["encoder"][f"layer_{layer}"]["attention"]["output"]
            expected = captured["output"]["__call__"][0]
            # The model and this both mix L values (Σ weights = 1: at most max |v| each) and
            # project D features: twice the bound of one such computation.
            column = float(np.abs(dense["kernel"]).sum(0).max())  # Σ_d |W_dj|
            mixed_error = row_error * float(np.abs(v).max())
            projection = tolerance.dot(
                n=mixed.shape[-1] + 1,
                magnitude=float(np.abs(mixed).max()) * column + float(np.abs(dense["bias"]).max()),
            )
            atol = 2 * (mixed_error * column + projection)
            np.testing.assert_allclose(
                mixed @ dense["kernel"] + dense["bias"], expected, atol=atol, rtol=0
            )

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
