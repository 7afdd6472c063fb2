"""Tests for roformer_jax.nn.sinks and softmax's `sinks`: one logit per head joining the
denominator, against the float64 numpy formula (1e-12) and in float32, with grouped heads,
padding, segment ids, windows and chunks, in the full form and the decode step; gradients,
including the sinks'; the errors."""

import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import softmax_float32_bound, softmax_reference
from jax.test_util import check_grads
from masks_test import (
    SEGMENTS,
    L,
    N,
    _full_form,
    _mask,
    _prompt_then_tokens,
    _qkv,
    _softmax,
    _visible,
)

from roformer_jax.nn import attention, attention_step

SINKS = np.asarray([0.5, -1.0, 2.0, 0.0])  # [N]


class SinkFormTest(parameterized.TestCase):
    @parameterized.product(
        spans=((True, None, None), (False, None, None), (True, 3, None), (True, None, 3)),
        segments=(False, True),
    )
    def test_float64_equals_the_formula(self, spans, segments):
        causal, window, chunk = spans
        segment_ids = SEGMENTS if segments else None
        mask = _mask(5)
        with jax.enable_x64(True):
            q, k, v = _qkv(5, jnp.float64)
            got = _full_form(
                q, k, v, mask, causal, window, chunk, segment_ids, sinks=jnp.asarray(SINKS)
            )
            self.assertEqual(got.dtype, jnp.float64)
        visible = _visible(mask, causal, window, chunk, segment_ids)
        np.testing.assert_allclose(
            got, softmax_reference(q, k, v, visible, SINKS), rtol=0, atol=1e-12
        )

    def test_float32(self):
        mask = _mask(6)
        q, k, v = _qkv(6)
        sinks = jnp.asarray(SINKS, jnp.float32)
        got = _full_form(q, k, v, mask, True, None, None, sinks=sinks)
        self.assertEqual(got.dtype, jnp.float32)
        want = softmax_reference(q, k, v, _visible(mask, True, None, None), SINKS)
        np.testing.assert_allclose(got, want, rtol=0, atol=softmax_float32_bound(q, k, v))

    def test_a_sink_takes_weight(self):
        # The weights sum to less than 1: each output is the sinkless one times that sum.
        q, k, v = _qkv(7)
        plain = _softmax(q, k, v, causal=True)
        sunk = _softmax(q, k, v, causal=True, sinks=jnp.full((N,), 30.0))
        np.testing.assert_allclose(sunk, 0.0, atol=1e-6)
        low = _softmax(q, k, v, causal=True, sinks=jnp.full((N,), -80.0))
        np.testing.assert_allclose(low, plain, atol=1e-6)

    def test_gradients_reach_the_sinks(self):
        with jax.enable_x64(True):
            q, k, v = _qkv(8, jnp.float64, length=5)

            @jax.jit
            def f(q, k, v, sinks):
                return attention.softmax_attention(q, k, v, causal=True, chunk=3, sinks=sinks)

            args = (q, k, v, jnp.asarray(SINKS))
            check_grads(f, args, order=1, modes=("rev",), atol=1e-6, rtol=1e-6)
            grad = jax.grad(lambda s: f(q, k, v, s).sum())(jnp.asarray(SINKS))
            self.assertTrue(np.all(np.asarray(grad) != 0))


class SinkStepTest(parameterized.TestCase):
    @parameterized.product(
        spans=((None, None), (3, None), (None, 4)),
        blocks=((1,) * L, (4, 1, 4)),
        dtype=(jnp.float32, jnp.float64),
    )
    def test_prompt_then_tokens_equal_the_causal_form(self, spans, blocks, dtype):
        window, chunk = spans
        mask = _mask(9)
        with jax.enable_x64(dtype == jnp.float64):
            q, k, v = _qkv(9, dtype)
            sinks = jnp.asarray(SINKS, dtype)
            want = _full_form(q, k, v, mask, True, window, chunk, sinks=sinks)
            got, _ = _prompt_then_tokens(
                q, k, v, mask, blocks, window=window, chunk=chunk, sinks=sinks
            )
        atol = 1e-12 if dtype == jnp.float64 else 2e-6
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)


class SinkErrorsTest(parameterized.TestCase):
    @parameterized.parameters((np.zeros(2),), (np.zeros((1, N)),), (np.zeros(N, np.int32),))
    def test_sinks_must_be_one_float_per_query_head(self, sinks):
        q, k, v = _qkv(0)
        with self.assertRaisesRegex(ValueError, r"sinks has shape .* expected floats \[N\]"):
            attention.softmax_attention(q, k, v, sinks=jnp.asarray(sinks))
        with self.assertRaisesRegex(ValueError, r"sinks has shape"):
            attention_step.softmax_attention_step(
                None, q, k, v, positions=jnp.arange(L), capacity=L, sinks=jnp.asarray(sinks)
            )

    def test_sinks_given_as_a_list_are_named(self):
        with self.assertRaisesRegex(ValueError, "sinks must be an array; got list"):
            attention.softmax_attention(*_qkv(0), sinks=[0.0] * N)

    @parameterized.parameters(
        ("linear attention", attention.linear_attention, attention_step.linear_attention_step),
        ("cosine attention", attention.cosine_attention, attention_step.cosine_attention_step),
    )
    def test_a_kind_that_forms_no_scores_refuses_sinks(self, name, full, step):
        q, k, v = _qkv(0)
        sinks = jnp.zeros(N)
        with self.assertRaisesRegex(ValueError, f"{name} takes no sinks"):
            full(q, k, v, sinks=sinks)
        with self.assertRaisesRegex(ValueError, f"{name} takes no sinks"):
            step(None, q, k, v, sinks=sinks)


if __name__ == "__main__":
    absltest.main()
