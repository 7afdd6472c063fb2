"""Tests for roformer_jax.nn.attention: every kind against its explicit O(L·M) formula."""

import functools

import chex
import flax.linen as nn
import grid
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import (
    FAVOR_W,
    KINDS,
    LINEAR_ROPES,
    PHI,
    B,
    H,
    L,
    N,
    _call,
    _mask,
    _positions,
    _qkv,
    _reference,
    _takes_positions,
    _with_positions,
)

from roformer_jax.nn import attention, attention_step
from roformer_jax.nn.rope import rope_rotation
from roformer_jax.nn.rope_reference import apply_rope_dense


class LinearKindsTest(parameterized.TestCase):
    @parameterized.parameters(
        *grid.covering("linear_formula", extra=2, feature_map=tuple(PHI), rope=LINEAR_ROPES)
    )
    def test_linear_equals_quadratic_formula(self, feature_map, rope):
        q, k, v = _qkv(0)
        # Mostly positive q, k keep every denominator far from eps: with relu a row with
        # φ(q_i)ᵀφ(k_j) = 0 for all j would divide rounding noise by eps in both formulas.
        q, k = q + 1.0, k + 1.0
        pos = None if rope is None else _positions(2, L, batched=True)
        kw = dict(mask=_mask(0), feature_map=feature_map, rope=rope, q_positions=pos)
        drawn = {"projection": FAVOR_W} if feature_map == "favor" else {}
        # chunk 3 does not divide L = 7; chunk 64 > L is a single chunk.
        for causal, chunk_size in ((False, 64), (True, 3), (True, 64)):
            got = _call(
                attention.linear_attention,
                q,
                k,
                v,
                causal=causal,
                chunk_size=chunk_size,
                **kw,
                **drawn,
            )
            want = _reference(q, k, v, kind="linear", causal=causal, **kw)
            chex.assert_trees_all_close(got, want, atol=2e-5)

    @parameterized.parameters(False, True)
    def test_cosine_equals_quadratic_formula(self, positions):
        q, k, v = _qkv(1)
        kw = dict(mask=_mask(1), q_positions=_positions(3, L, batched=True) if positions else None)
        for causal, chunk_size in ((False, 64), (True, 3), (True, 64)):
            got = _call(
                attention.cosine_attention, q, k, v, causal=causal, chunk_size=chunk_size, **kw
            )
            want = _reference(q, k, v, kind="cosine", causal=causal, **kw)
            chex.assert_trees_all_close(got, want, atol=2e-5)

    @parameterized.parameters(*LINEAR_ROPES)
    def test_cross_attention_with_own_key_positions(self, rope):
        q, k, v = _qkv(2, length=5, keys=9)
        rope_kw = dict(rope=rope, layout="half", rotary_dim=4)
        positions = {}
        if rope is not None:
            positions = dict(
                q_positions=_positions(4, 5, batched=False) + 30,
                k_positions=_positions(5, 9, batched=True),
            )

        # One program for both forms: op by op, these lengths (no other test's) compiled
        # ~100 primitives of their own.
        @jax.jit
        def forms(q, k, v, mask, positions):
            kw = dict(mask=mask, **rope_kw, **positions)
            got = _call(attention.linear_attention, q, k, v, **kw)
            return got, _reference(q, k, v, kind="linear", **kw)

        got, want = forms(q, k, v, _mask(2, keys=9), positions)
        chex.assert_trees_all_close(got, want, atol=2e-5)

    @parameterized.product(rope=LINEAR_ROPES, causal=(False, True))
    def test_float64_to_the_last_digits(self, rope, causal):
        with jax.enable_x64(True):
            q, k, v = _qkv(3, dtype=jnp.float64)
            pos = None if rope is None else _positions(6, L, batched=False)
            kw = dict(mask=_mask(3), causal=causal, rope=rope, q_positions=pos)
            got = _call(attention.linear_attention, q, k, v, chunk_size=3, **kw)
            chex.assert_type(got, jnp.float64)
            want = _reference(q, k, v, kind="linear", **kw)
            chex.assert_trees_all_close(got, want, atol=1e-12, rtol=1e-12)

    def test_both_keeps_the_sign_of_a_negative_denominator(self):
        # One key half a turn away (angle 3 rad, H = 2): eq. (18)'s denominator is
        # φ(q)ᵀR_3φ(k) < 0 and the numerator is the same number times v, so out = v exactly.
        q, k = jnp.ones((1, 1, 1, 2)), jnp.ones((1, 1, 1, 2))
        v = jnp.full((1, 1, 1, 2), 0.5)

        # Jitted: op by op, this test's shapes compiled ~80 primitives of their own.
        @functools.partial(jax.jit, static_argnames="causal")
        def both(q, k, v, q_positions, k_positions, causal):
            rotation = rope_rotation(q_positions, k_positions)
            return attention.linear_attention(
                q, k, v, rotation=rotation, placement="both", causal=causal
            )

        for causal in (False, True):
            out = both(q, k, v, jnp.array([3]), jnp.array([0]), causal=causal)
            chex.assert_trees_all_close(out, v, rtol=1e-5)

    def test_numerator_rope_needs_few_more_temporaries_than_plain_linear(self):
        # Eq. (19)'s denominator keeps φ(q) in a buffer of its own; computed after the keys
        # (_attention_cpu.after), it reuses their buffers. Computed first, as XLA's CPU scheduler
        # chose, it took 1.44x plain linear attention's temporaries at this size.
        shape = jax.ShapeDtypeStruct((1, 256, 8, 64), jnp.float32)

        def temporaries(**kw):
            fn = jax.jit(lambda q, k, v: attention.linear_attention(q, k, v, **kw))
            return fn.lower(shape, shape, shape).compile().memory_analysis().temp_size_in_bytes

        rope = temporaries(rotation=rope_rotation(jnp.arange(256)), placement="numerator")
        self.assertLess(rope, 1.25 * temporaries())

    def test_cosine_weights_are_nonnegative_and_sum_to_one(self):
        # With one-hot values v_j = e_j the output row i is the weight vector of query i. H
        # features (e_j padded with zeros), not L: every op then has the shapes of the other
        # tests', compiled once.
        keys = L
        q, k, _ = _qkv(4)
        v = jnp.broadcast_to(jnp.eye(keys, H)[None, :, None, :], (B, keys, N, H))
        mask = _mask(4)
        for causal in (False, True):
            weights = attention.cosine_attention(
                q,
                k,
                v,
                mask=mask,
                causal=causal,
                rotation=rope_rotation(jnp.arange(L)),
                chunk_size=3,
            )[..., :keys]  # [B, L, N, M]
            self.assertGreaterEqual(float(weights.min()), -1e-6)
            chex.assert_trees_all_close(weights.sum(-1), jnp.ones((B, L, N)), atol=1e-5)
            np.testing.assert_array_equal(jnp.where(mask[:, None, None, :], 0.0, weights), 0.0)
            if causal:
                future = np.triu(np.ones((L, keys), bool), k=1)[None, :, None, :]
                self.assertEqual(float(jnp.abs(jnp.where(future, weights, 0.0)).max()), 0.0)


class SoftmaxTest(parameterized.TestCase):
    @parameterized.product(causal=(False, True), positions=(False, True))
    def test_equals_flax_dot_product_attention(self, causal, positions):
        q, k, v = _qkv(5)
        mask = _mask(5)
        kw = {}
        if positions:
            pos = _positions(7, L, batched=True)
            kw = dict(rotation=rope_rotation(pos))
            q, k = apply_rope_dense(q, pos), apply_rope_dense(k, pos)
        got = attention.softmax_attention(*_qkv(5), mask=mask, causal=causal, **kw)
        full = mask[:, None, None, :]
        if causal:
            full = full & jnp.tril(jnp.ones((L, L), bool))
        want = nn.dot_product_attention(q, k, v, mask=full)
        chex.assert_trees_all_close(got, want, atol=1e-5)

    def test_rope_scores_are_shift_invariant(self):
        # Outputs are a function of the scores, so equal outputs <=> equal scores.
        q, k, v = _qkv(6)
        pos = _positions(8, L, batched=False)
        base = attention.softmax_attention(q, k, v, rotation=rope_rotation(pos))
        for shift in (1, 1000, 123_457):
            shifted = attention.softmax_attention(q, k, v, rotation=rope_rotation(pos + shift))
            chex.assert_trees_all_close(shifted, base, atol=2e-5)

    def test_dropout_scales_kept_weights(self):
        q, k, _ = _qkv(7)
        # One-hot values (padded to H features, the shapes of the other tests): the outputs
        # are the weights [B, L, N, M].
        v = jnp.broadcast_to(jnp.eye(L, H)[None, :, None, :], (B, L, N, H))

        # One program: op by op, the dropout draw compiled ~40 primitives of its own.
        @jax.jit
        def weights(q, k, v, rng):
            plain = attention.softmax_attention(q, k, v)
            return plain, attention.softmax_attention(q, k, v, dropout_rate=0.5, dropout_rng=rng)

        plain, dropped = (x[..., :L] for x in weights(q, k, v, jax.random.key(0)))
        kept = dropped != 0
        self.assertTrue(0 < float(kept.mean()) < 1)
        chex.assert_trees_all_close(jnp.where(kept, dropped, 0), jnp.where(kept, 2 * plain, 0))


class AllKindsTest(parameterized.TestCase):
    @parameterized.named_parameters(*KINDS)
    def test_padded_keys_and_values_are_ignored(self, fn, kw):
        q, k, v = _qkv(8)
        mask = _mask(8)
        pad = ~mask[:, :, None, None]
        k2 = jnp.where(pad, 100.0 * _qkv(1)[1], k)
        v2 = jnp.where(pad, 1e4, v)
        for causal in (False, True):
            args = dict(_with_positions(kw), mask=mask, causal=causal)
            chex.assert_trees_all_close(fn(q, k2, v2, **args), fn(q, k, v, **args), atol=1e-6)

    @parameterized.named_parameters(*KINDS)
    def test_causal_never_looks_ahead(self, fn, kw):
        q, k, v = _qkv(9)
        later = (jnp.arange(L) >= 4)[None, :, None, None]
        q2, k2, v2 = (jnp.where(later, 7.0 - 3 * x, x) for x in (q, k, v))
        extra = {} if fn is attention.softmax_attention else {"chunk_size": 3}
        args = dict(_with_positions(kw), causal=True, **extra)
        before, after = fn(q, k, v, **args), fn(q2, k2, v2, **args)
        np.testing.assert_array_equal(before[:, :4], after[:, :4])
        self.assertGreater(float(jnp.abs(before[:, 4:] - after[:, 4:]).max()), 1e-3)

    @parameterized.named_parameters(
        kind
        for kind in KINDS
        if _takes_positions(kind[2]) and kind[0] != "linear_before_feature_map"
    )
    def test_rope_outputs_shift_invariant(self, fn, kw):
        # Only the relative position enters eqs. (18), (19) and the cosine: shifting every
        # position by s changes nothing (φ after the rotation breaks this, by design).
        q, k, v = _qkv(11)
        base = fn(q, k, v, **_with_positions(kw, seed=9))
        shifted = fn(q, k, v, **_with_positions(kw, seed=9, shift=4099))
        chex.assert_trees_all_close(shifted, base, atol=2e-5)

    @parameterized.named_parameters(*KINDS)
    def test_padded_rows_are_finite_and_all_padded_rows_zero(self, fn, kw):
        q, k, v = _qkv(12)
        mask = jnp.zeros((B, L), bool).at[0, 3].set(True)  # batch 0: one real key; batch 1: none
        for causal in (False, True):
            out = fn(q, k, v, mask=mask, causal=causal, **_with_positions(kw))
            chex.assert_tree_all_finite(out)
            np.testing.assert_array_equal(out[1], 0.0)
            if causal:
                np.testing.assert_array_equal(out[0, :3], 0.0)

    @parameterized.named_parameters(*KINDS)
    def test_gradients_finite_with_padding(self, fn, kw):
        q, k, v = _qkv(13)
        mask = jnp.zeros((B, L), bool).at[0, 3].set(True)

        def loss(q, k, v):
            outs = [fn(q, k, v, mask=mask, causal=c, **_with_positions(kw)) for c in (False, True)]
            return sum(jnp.sum(out**2) for out in outs)

        # jit: op-by-op gradients on CPU take many times longer to compile.
        chex.assert_tree_all_finite(jax.jit(jax.grad(loss, argnums=(0, 1, 2)))(q, k, v))

    @parameterized.named_parameters(*KINDS)
    def test_jit_equals_no_jit(self, fn, kw):
        q, k, v = _qkv(14)
        args = dict(_with_positions(kw), mask=_mask(14))
        chex.assert_trees_all_close(
            jax.jit(lambda *a: fn(*a, **args))(q, k, v), fn(q, k, v, **args), atol=1e-6
        )

    @parameterized.named_parameters(*KINDS)
    def test_bfloat16_in_bfloat16_out(self, fn, kw):
        q, k, v = _qkv(15, dtype=jnp.bfloat16)
        out = fn(q, k, v, **_with_positions(kw))
        chex.assert_type(out, jnp.bfloat16)
        want = fn(*(x.astype(jnp.float32) for x in (q, k, v)), **_with_positions(kw))
        chex.assert_trees_all_close(out.astype(jnp.float32), want, atol=3e-2)


class LinearGradientTest(absltest.TestCase):
    def test_causal_gradients_equal_reference_gradients(self):
        q, k, v = _qkv(16)
        pos = _positions(10, L, batched=False)
        kw = dict(mask=_mask(16), causal=True, rope="numerator", q_positions=pos)

        def loss(fn, *args, **extra):
            return jnp.sum(jnp.sin(fn(*args, **kw, **extra)))

        got = jax.grad(
            lambda *a: loss(functools.partial(_call, attention.linear_attention), *a, chunk_size=3),
            (0, 1, 2),
        )
        want = jax.grad(lambda *a: loss(_reference, *a, kind="linear"), (0, 1, 2))
        got, want = jax.jit(got), jax.jit(want)
        chex.assert_trees_all_close(got(q, k, v), want(q, k, v), atol=1e-4)


class WindowTest(absltest.TestCase):
    def test_window_equals_an_explicit_mask(self):
        # With one key/value head, packed rows and padding: |i - j| < 3 (causal: j <= i too).
        q, k, v = _qkv(25)
        mask = _mask(25)
        ids = jnp.asarray([[0, 0, 0, 1, 1, 1, 1], [2, 2, 2, 2, 2, 5, 5]])
        i, j = np.arange(L)[:, None], np.arange(L)[None, :]
        same = np.asarray(ids)[:, :, None] == np.asarray(ids)[:, None, :]  # [B, L, L]

        @jax.jit
        def forms(q, k, v):
            out = {}
            for causal in (False, True):
                near = (np.abs(i - j) < 3) & ((j <= i) | (not causal))
                visible = jnp.asarray(same & near)[:, None] & mask[:, None, None, :]
                repeated = (jnp.repeat(x[:, :, :1], N, axis=2) for x in (k, v))
                out[causal] = (
                    attention.softmax_attention(
                        q,
                        k[:, :, :1],
                        v[:, :, :1],
                        mask=mask,
                        causal=causal,
                        segment_ids=ids,
                        window=3,
                    ),
                    nn.dot_product_attention(q, *repeated, mask=visible),
                )
            return out

        for causal, (got, want) in forms(q, k, v).items():
            chex.assert_trees_all_close(got, want, atol=1e-6, custom_message=f"causal={causal}")

    def test_window_below_one_is_refused(self):
        q, k, v = _qkv(0)
        with self.assertRaisesRegex(ValueError, "window=0 must be a positive integer or None"):
            attention.softmax_attention(q, k, v, window=0)
        with self.assertRaisesRegex(ValueError, "window=-2"):
            attention_step.softmax_attention_step(None, q, k, v, positions=jnp.arange(L), window=-2)


class ErrorsTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("rank", dict(q=jnp.zeros((L, N, H))), "must be"),
        ("heads", dict(k=jnp.zeros((B, L, N + 1, H))), "do not agree"),
        (
            "kv_heads",
            dict(k=jnp.zeros((B, L, 3, H)), v=jnp.zeros((B, L, 3, H))),
            "q's N=2 heads are not a multiple of k and v's K=3 heads",
        ),
        ("mask", dict(mask=jnp.ones((B, L + 1), bool)), r"mask has shape \(2, 8\)"),
        (
            "causal_lengths",
            dict(k=jnp.zeros((B, 3, N, H)), v=jnp.zeros((B, 3, N, H)), causal=True),
            "L == M; got L=7, M=3",
        ),
        ("feature_map", dict(feature_map="tanh"), "feature_map='tanh'"),
        ("no_projection", dict(feature_map="favor"), "'favor' is random: pass projection"),
        ("placement", dict(placement="sideways"), "placement='sideways'"),
    )
    def test_linear_bad_inputs(self, overrides, message):
        args = dict(zip("qkv", _qkv(0), strict=True)) | overrides
        with self.assertRaisesRegex(ValueError, message):
            attention.linear_attention(**args)

    def test_dropout_needs_rng(self):
        with self.assertRaisesRegex(ValueError, "dropout_rate=0.1 needs a dropout_rng"):
            attention.softmax_attention(*_qkv(0), dropout_rate=0.1)

    @parameterized.parameters(1.0, 1.5, -0.5)
    def test_dropout_rate_outside_0_to_1_is_refused(self, rate):
        # 1 and above gave zeros, a negative rate no dropout at all.
        with self.assertRaisesRegex(
            ValueError, rf"dropout_rate={rate}; expected 0 <= dropout_rate < 1"
        ):
            attention.softmax_attention(*_qkv(0), dropout_rate=rate, dropout_rng=jax.random.key(0))

    def test_dropout_rng_must_be_one_key(self):
        for rng, what in (
            (0, "got int"),
            (jax.random.split(jax.random.key(0)), r"got shape \(2,\) key"),
        ):
            with self.assertRaisesRegex(ValueError, f"dropout_rng must be one PRNG key.*{what}"):
                attention.softmax_attention(*_qkv(0), dropout_rate=0.1, dropout_rng=rng)

    def test_example_ids_must_be_one_int_per_row(self):
        key = jax.random.key(0)
        for ids in (jnp.arange(B + 1), jnp.zeros(B)):
            with self.assertRaisesRegex(
                ValueError, rf"example_ids has shape .*; expected int \[B\] = \({B},\)"
            ):
                attention.softmax_attention(
                    *_qkv(0), dropout_rate=0.1, dropout_rng=key, example_ids=ids
                )

    def test_a_typed_and_a_raw_key_drop_the_same_weights(self):
        # Both key forms the check lets through reach the same draws.
        key, q, k, v = jax.random.key(3), *_qkv(0)
        typed = attention.softmax_attention(
            q, k, v, dropout_rate=0.5, dropout_rng=key, example_ids=jnp.arange(B)
        )
        raw = attention.softmax_attention(
            q, k, v, dropout_rate=0.5, dropout_rng=jax.random.key_data(key)
        )
        np.testing.assert_array_equal(typed, raw)


class BiasTest(absltest.TestCase):
    def test_bias_shape_is_checked(self):
        with self.assertRaisesRegex(ValueError, r"expected \[B or 1, N, L, M\]"):
            attention.softmax_attention(*_qkv(0), bias=jnp.zeros((N, L, L)))


if __name__ == "__main__":
    absltest.main()
