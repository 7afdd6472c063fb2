"""Tests for roformer_jax.nn.attention_core: the fused softmax, and the branches taken off CPU."""

from unittest import mock

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import H, L, N, _mask, _qkv

from roformer_jax.nn import attention, attention_core


class FusedSoftmaxTest(parameterized.TestCase):
    """The form other backends run (jax.nn.dot_product_attention) against the CPU's einsums."""

    @parameterized.named_parameters(
        ("plain", False, False),
        ("causal", True, False),
        ("bias", False, True),
        ("causal_bias", True, True),
        ("one_key_value_head", True, True, 1),
    )
    def test_equals_the_einsum_form(self, causal, with_bias, kv_heads=N):
        q, k, v = _qkv(8)
        k, v = k[:, :, :kv_heads], v[:, :, :kv_heads]
        mask = np.array(_mask(8))
        mask[1] = False  # a row with no key at all: zeros
        visible = jnp.asarray(mask)[:, None, None, :]
        if causal:
            visible = visible & jnp.tril(jnp.ones((L, L), bool))
        bias = jnp.asarray(np.random.default_rng(9).normal(size=(1, N, L, L)), jnp.float32)
        bias = bias if with_bias else None
        want = attention_core.softmax_over_visible(q, k, v, visible, bias)
        got = attention_core._fused_softmax(q, k, v, visible, bias)
        np.testing.assert_allclose(got, want, atol=1e-6)
        np.testing.assert_array_equal(got[1], 0.0)


class OtherBackendsTest(parameterized.TestCase):
    """The branches taken off CPU (the fused softmax, jnp.cumsum's prefix), run here on CPU.

    Seen on a GPU: the bias check sat on the CPU branch only; float64 softmax went through the
    fused form's float32 scores (errors ~2e-7); and the prefix as cumsum - states let later
    chunks' keys into earlier outputs' rounding.
    """

    def setUp(self):
        super().setUp()
        self.enter_context(mock.patch.object(attention_core, "on_cpu", return_value=False))

    def test_bias_shape_is_checked(self):
        with self.assertRaisesRegex(ValueError, r"expected \[B or 1, N, L, M\]"):
            attention.softmax_attention(*_qkv(0), bias=jnp.zeros((N, L, L)))

    def test_float64_softmax_keeps_float64(self):
        with jax.enable_x64(True):
            q, k, v = _qkv(3, dtype=jnp.float64)
            got = attention.softmax_attention(q, k, v, causal=True)
        q, k, v = (np.asarray(x) for x in (q, k, v))
        scores = np.einsum("BLNH,BMNH->BNLM", q, k) / np.sqrt(H)
        scores = np.where(np.tril(np.ones((L, L), bool)), scores, -np.inf)
        weights = np.exp(scores - scores.max(-1, keepdims=True))
        weights /= weights.sum(-1, keepdims=True)
        # float64 sums of at most 8 terms of size ~|v| (~3 here): ~1e-14 off, 1e-12 with room;
        # the fused form's float32 scores were ~2e-7 off.
        np.testing.assert_allclose(got, np.einsum("BNLM,BMNH->BLNH", weights, v), atol=1e-12)

    def test_causal_linear_never_looks_ahead(self):
        q, k, v = _qkv(9)
        later = (jnp.arange(L) >= 4)[None, :, None, None]
        q2, k2, v2 = (jnp.where(later, 7.0 - 3 * x, x) for x in (q, k, v))
        before, after = (
            attention.linear_attention(*x, causal=True, chunk_size=3)
            for x in ((q, k, v), (q2, k2, v2))
        )
        np.testing.assert_array_equal(before[:, :4], after[:, :4])


if __name__ == "__main__":
    absltest.main()
