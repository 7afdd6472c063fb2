"""Tests for roformer_jax/positions.py: the table of position encodings, ALiBi among them."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.nn import attention, positions
from roformer_jax.nn import model as model_lib

B, L, V = 2, 8, 64
RELATIVE = ("rope", "alibi")  # scores depend on m - n only


def _model(position, seed=0, **overrides):
    config = tiny.model_config(
        vocab_size=V,
        max_len=16,
        position=position,
        hidden_dropout=0.0,
        initializer_range=0.2,
        **overrides,  # 10x BERT's: attention far from uniform
    )
    model = model_lib.RoFormer(config)
    return model, model.init(jax.random.key(seed), jnp.zeros((1, L), jnp.int32))


def _ids(length=L, seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(5, V, (B, length)), jnp.int32)


class AlibiTest(absltest.TestCase):
    def test_slopes_follow_the_paper(self):
        # Press et al. 2022: 8 heads give 1/2, 1/4, ..., 1/256; 6 heads take the 4-head
        # slopes and then every other slope of the 8-head sequence.
        np.testing.assert_array_equal(positions.alibi_slopes(8), 2.0 ** -np.arange(1, 9))
        np.testing.assert_array_equal(
            positions.alibi_slopes(6), 2.0 ** -np.array([2, 4, 6, 8, 1, 3])
        )
        np.testing.assert_array_equal(positions.alibi_slopes(1), [2.0**-8])

    def test_bias_is_minus_slope_times_distance(self):
        q_pos = np.array([[0, 1, 5], [10, 11, 12]])
        k_pos = np.array([[0, 2, 3, 9], [1, 10, 20, 30]])
        got = positions.alibi_bias(q_pos, k_pos, num_heads=4)
        chex.assert_shape(got, (2, 4, 3, 4))
        slopes = positions.alibi_slopes(4)
        for b in range(2):
            for h in range(4):
                for i in range(3):
                    for j in range(4):
                        want = -slopes[h] * abs(q_pos[b, i] - k_pos[b, j])
                        self.assertAlmostEqual(float(got[b, h, i, j]), want, places=5)
        # Unbatched positions give one bias for every row.
        chex.assert_shape(positions.alibi_bias(np.arange(3), np.arange(4), 4), (1, 4, 3, 4))

    def test_softmax_with_the_bias_equals_flax_attention(self):
        rng = np.random.default_rng(0)
        q, k, v = (jnp.asarray(rng.standard_normal((B, L, 4, 16)), jnp.float32) for _ in "qkv")
        bias = positions.alibi_bias(jnp.arange(L), jnp.arange(L), 4)
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


class TableTest(parameterized.TestCase):
    @parameterized.parameters(*positions.ENCODINGS)
    def test_every_encoding_builds_and_runs(self, name):
        model, variables = _model(name)
        out = model.apply(variables, _ids())
        chex.assert_shape(out.logits, (B, L, V))

    @parameterized.parameters(*RELATIVE)
    def test_relative_encodings_ignore_a_shift(self, name):
        model, variables = _model(name)
        ids = _ids()
        base = model.apply(variables, ids)
        shifted = model.apply(variables, ids, position_ids=jnp.arange(L) + 1000)
        chex.assert_trees_all_close(shifted, base, atol=2e-5)

    @parameterized.parameters(*(p for p in positions.ENCODINGS if p != "none"))
    def test_the_positions_matter(self, name):
        # Spread out, not reversed: ALiBi's |m - n| cannot tell a sequence from its mirror.
        model, variables = _model(name)
        ids = _ids()
        base = model.apply(variables, ids).hidden_states
        spread = model.apply(variables, ids, position_ids=2 * jnp.arange(L)).hidden_states
        self.assertGreater(float(jnp.abs(spread - base).max()), 1e-3)

    def test_max_length(self):
        for name, encoding in positions.ENCODINGS.items():
            config = tiny.model_config(position=name, max_len=16)
            want = 16 if name == "learned" else None
            self.assertEqual(config.max_length, want, name)
            self.assertEqual(encoding.max_length(config), want)

    def test_only_the_sinusoid_scales_the_embeddings(self):
        scaled = {name for name, e in positions.ENCODINGS.items() if e.scale_embeddings}
        self.assertEqual(scaled, {"sinusoidal"})

    @parameterized.parameters(("sinusoidal", 64**0.5), ("learned", 1.0), ("rope", 1.0))
    def test_embeddings_are_scaled_before_the_position_term(self, name, scale):
        # Vaswani et al. sec. 3.4: (word + type) × √E + PE, then (ours) LayerNorm. Unscaled,
        # embeddings of std 0.02 are swamped by the sinusoid's amplitude 1.
        config = tiny.model_config(vocab_size=V, max_len=16, position=name)
        ids, types, pos = _ids(), jnp.ones((B, L), jnp.int32), jnp.arange(L)
        embeddings = model_lib.Embeddings(config)
        variables = embeddings.init(jax.random.key(0), ids, types, pos, True)
        got = embeddings.apply(variables, ids, types, pos, True)
        p = variables["params"]
        x = p["word_embeddings"]["embedding"][ids] + p["token_type_embeddings"]["embedding"][types]
        x = x * scale
        if name == "sinusoidal":
            x = x + positions.sinusoidal_embedding(pos, 64)
        elif name == "learned":
            x = x + p["position_embeddings"]["embedding"][pos]
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        want = (x - mean) / jnp.sqrt(var + config.layer_norm_eps)  # LayerNorm at its init
        chex.assert_trees_all_close(got, want, atol=1e-5)

    def test_sinusoid_is_vaswani_formula(self):
        pos = np.arange(50)
        got = positions.sinusoidal_embedding(jnp.asarray(pos), 16)
        theta = 10000.0 ** (-np.arange(0, 16, 2) / 16)
        want = np.zeros((50, 16))
        want[:, 0::2], want[:, 1::2] = np.sin(pos[:, None] * theta), np.cos(pos[:, None] * theta)
        chex.assert_trees_all_close(got, want.astype(np.float32), atol=1e-5)


if __name__ == "__main__":
    absltest.main()
