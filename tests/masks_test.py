"""Tests for roformer_jax.nn.masks and softmax's `chunk`: which keys a query sees, against the
rule written out index by index, in the full form (float64 to 1e-12 and float32, grouped heads,
padding, segment ids) and the decode step (a prompt, then tokens), with gradients."""

import functools
import itertools

import grid
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import softmax_float32_bound, softmax_reference
from jax.test_util import check_grads

from roformer_jax.nn import attention, attention_step, masks

B, L, N, K, H = 2, 9, 4, 2, 8
SEGMENTS = np.asarray([[0, 0, 0, 0, 0, 1, 1, 1, 1], [3, 3, 5, 5, 5, 5, 5, 5, 5]])


def _qkv(seed, dtype=jnp.float32, length=L):
    rng = np.random.default_rng(seed)
    shapes = ((B, length, N, H), (B, length, K, H), (B, length, K, H))
    return tuple(jnp.asarray(rng.standard_normal(s), dtype) for s in shapes)


def _mask(seed):
    mask = np.random.default_rng(seed).random((B, L)) < 0.7
    mask[:, 0] = True
    return mask


def _rule(causal, window, chunk, length=L):
    """bool [L, L], index by index: the keys each query sees."""
    seen = np.zeros((length, length), bool)
    for i, j in itertools.product(range(length), repeat=2):
        seen[i, j] = (
            (not causal or j <= i)
            and (window is None or abs(i - j) < window)
            and (chunk is None or i // chunk == j // chunk)
        )
    return seen


def _visible(mask, causal, window, chunk, segment_ids=None):
    """bool [B, 1, L, M]: `_rule`, padding and segments."""
    visible = _rule(causal, window, chunk)[None, None] & mask[:, None, None, :]
    if segment_ids is not None:
        visible = visible & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    return visible


# Compiled once per shape and spans: run op by op, each new span or block size compiled each
# of a call's ops anew.
_SPANS = ("causal", "window", "chunk")
_softmax = jax.jit(attention.softmax_attention, static_argnames=_SPANS)
_step = jax.jit(
    attention_step.softmax_attention_step, static_argnames=("capacity", "window", "chunk")
)


def _full_form(q, k, v, mask, causal, window, chunk, segment_ids=None, **kw):
    """softmax_attention with the spans, padding [B, L] and segment ids [B, L] as numpy."""
    return _softmax(
        q,
        k,
        v,
        mask=jnp.asarray(mask),
        causal=causal,
        window=window,
        chunk=chunk,
        segment_ids=None if segment_ids is None else jnp.asarray(segment_ids),
        **kw,
    )


def _prompt_then_tokens(q, k, v, mask, blocks, **kw):
    """The decode step over consecutive blocks of the given sizes: the outputs concatenated
    [B, L, N, H] and the last cache."""
    cache, outs, start = None, [], 0
    for size in blocks:
        part = slice(start, start + size)
        out, cache = _step(
            cache,
            q[:, part],
            k[:, part],
            v[:, part],
            positions=jnp.arange(L)[part],
            mask=jnp.asarray(mask[:, part]),
            capacity=L,
            **kw,
        )
        outs.append(out)
        start += size
    return jnp.concatenate(outs, axis=1), cache


# (causal, window, chunk): chunks alone, with a window inside or across them, not causal.
CASES = [(True, None, c) for c in (1, 2, 3, 4, L)] + [
    (True, 2, 3),
    (True, 5, 3),
    (False, None, 3),
    (False, 2, 4),
]


class SeesTest(parameterized.TestCase):
    @parameterized.parameters(*CASES, (True, 3, None), (False, None, None))
    def test_equals_the_rule(self, causal, window, chunk):
        got = masks.sees(jnp.arange(L), jnp.arange(L), causal=causal, window=window, chunk=chunk)
        np.testing.assert_array_equal(got, _rule(causal, window, chunk))

    @parameterized.parameters((None, None, None), (3, None, 3), (2, 4, 2), (None, 4, 4))
    def test_ring_span(self, window, chunk, want):
        self.assertEqual(masks.ring_span(window, chunk), want)

    @parameterized.parameters(
        ("window", 0), ("chunk", 0), ("chunk", -2), ("chunk", 1.5), ("chunk", "4")
    )
    def test_a_span_below_one_is_an_error(self, name, value):
        q, k, v = _qkv(0)
        for call in (
            lambda: attention.softmax_attention(q, k, v, causal=True, **{name: value}),
            lambda: attention_step.softmax_attention_step(
                None, q, k, v, positions=jnp.arange(L), capacity=L, **{name: value}
            ),
        ):
            with self.assertRaisesRegex(
                ValueError, f"{name}={value!r} must be a positive integer or None"
            ):
                call()

    @parameterized.parameters(2.0, True, np.float32(2))
    def test_a_float_or_bool_span_is_an_error(self, value):
        q, k, v = _qkv(0)
        with self.assertRaisesRegex(ValueError, "window=.* must be a positive integer or None"):
            attention.softmax_attention(q, k, v, window=value)

    def test_numpy_and_jax_integers_are_the_int(self):
        q, k, v = _qkv(0)
        for value in (np.int64(2), jnp.int32(2)):
            for spans in ({"window": value}, {"chunk": value}):
                ints = {name: 2 for name in spans}
                np.testing.assert_array_equal(
                    attention.softmax_attention(q, k, v, causal=True, **spans),
                    attention.softmax_attention(q, k, v, causal=True, **ints),
                )
                step = functools.partial(
                    attention_step.softmax_attention_step, None, q, k, v, positions=jnp.arange(L)
                )
                np.testing.assert_array_equal(step(**spans)[0], step(**ints)[0])


class ChunkedFormTest(parameterized.TestCase):
    @parameterized.product(case=CASES, segments=(False, True))
    def test_float64_equals_the_explicit_mask(self, case, segments):
        causal, window, chunk = case
        segment_ids = SEGMENTS if segments else None
        mask = _mask(1)
        with jax.enable_x64(True):
            q, k, v = _qkv(1, jnp.float64)
            got = _full_form(q, k, v, mask, causal, window, chunk, segment_ids)
            self.assertEqual(got.dtype, jnp.float64)
        want = softmax_reference(q, k, v, _visible(mask, causal, window, chunk, segment_ids))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)

    @parameterized.parameters(*CASES)
    def test_float32(self, causal, window, chunk):
        mask = _mask(2)
        q, k, v = _qkv(2)
        got = _full_form(q, k, v, mask, causal, window, chunk)
        self.assertEqual(got.dtype, jnp.float32)
        want = softmax_reference(q, k, v, _visible(mask, causal, window, chunk))
        np.testing.assert_allclose(got, want, rtol=0, atol=softmax_float32_bound(q, k, v))

    def test_gradients(self):
        with jax.enable_x64(True):
            q, k, v = _qkv(3, jnp.float64, length=5)

            def f(q, k, v):
                return attention.softmax_attention(q, k, v, causal=True, chunk=2)

            check_grads(jax.jit(f), (q, k, v), order=1, modes=("rev",), atol=1e-6, rtol=1e-6)


class ChunkedStepTest(parameterized.TestCase):
    @parameterized.parameters(
        *grid.covering(
            "masks_chunked_step",
            extra=2,
            spans=((None, 1), (None, 3), (None, 4), (2, 3), (5, 3)),
            blocks=((1,) * L, (4, 1, 4), (5, 2, 2)),
            dtype=(jnp.float32, jnp.float64),
        )
    )
    def test_prompt_then_tokens_equal_the_causal_form(self, spans, blocks, dtype):
        window, chunk = spans
        mask = _mask(4)
        with jax.enable_x64(dtype == jnp.float64):
            q, k, v = _qkv(4, dtype)
            want = _full_form(q, k, v, mask, True, window, chunk)
            got, cache = _prompt_then_tokens(q, k, v, mask, blocks, window=window, chunk=chunk)
        # A chunk needs only its own C keys: the cache is a ring of C slots.
        self.assertEqual(cache.keys.shape[2], masks.ring_span(window, chunk))
        atol = 1e-12 if dtype == jnp.float64 else 2e-6
        np.testing.assert_allclose(got, want, rtol=0, atol=atol)


if __name__ == "__main__":
    absltest.main()
