"""Tests for roformer_jax.nn.attention_core: the fused softmax, grouped key/value heads (GQA) in
every kind, and the branches taken off CPU."""

import functools
from unittest import mock

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import KINDS, H, L, N, _mask, _qkv, _with_positions

from roformer_jax.nn import attention, attention_core, attention_step
from roformer_jax.nn.rope import rope_rotation


def _from_empty(step):
    """A decode step from an empty state, called as a full form: (q, k, v, **kw) -> out."""
    return lambda q, k, v, **kw: step(None, q, k, v, **kw)[0]


# The linear kinds' full forms and decode steps: (name, form, kind, what makes it causal).
LINEAR_FORMS = (
    ("linear", attention.linear_attention, "linear", {"causal": True}),
    ("cosine", attention.cosine_attention, "cosine", {"causal": True}),
    ("linear_step", _from_empty(attention_step.linear_attention_step), "linear", {}),
    ("cosine_step", _from_empty(attention_step.cosine_attention_step), "cosine", {}),
)


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


# The kinds whose grouped heads take paths of their own: softmax's grouped einsums, eq. (19)'s
# block-diagonal denominator and chunked sums, cosine's column of ones. The other placements
# and FAVOR+ take the paths of these.
GROUPED_KINDS = [kind for kind in KINDS if kind[0] in ("softmax", "linear_numerator", "cosine")]


def _grouped_pairs(kinds, q, k, v, mask, cases):
    """For each kind and (K, causal) case: (out with K key/value heads, out with them repeated
    to q's N heads), jitted as one program: op by op, these shapes compiled every primitive."""

    @jax.jit
    def pairs(q, k, v, mask):
        out = {}
        for name, fn, kw in kinds:
            extra = {} if fn is attention.softmax_attention else {"chunk_size": 3}
            for kv_heads, causal in cases:
                kk, vv = k[:, :, :kv_heads], v[:, :, :kv_heads]
                repeat = functools.partial(jnp.repeat, repeats=q.shape[2] // kv_heads, axis=2)
                args = dict(_with_positions(kw), mask=mask, causal=causal, **extra)
                out[name, kv_heads, causal] = (
                    fn(q, kk, vv, **args),
                    fn(q, repeat(kk), repeat(vv), **args),
                )
        return out

    return pairs(q, k, v, mask)


class GroupedHeadsTest(parameterized.TestCase):
    """K key/value heads for N = 4 query heads equal the same kind with k, v repeated."""

    def test_equals_repeated_heads(self):
        q = jnp.concatenate(_qkv(20)[:2], axis=2)  # [B, L, 4, H]
        _, k, v = _qkv(21)  # [B, L, 2, H]
        # MQA (K = 1) causal, GQA (K = 2, G = 2) not.
        pairs = _grouped_pairs(GROUPED_KINDS, q, k, v, _mask(20), ((1, True), (2, False)))
        for case, (got, want) in pairs.items():
            chex.assert_shape(got, q.shape)
            chex.assert_trees_all_close(got, want, atol=1e-6, custom_message=str(case))

    def test_float64_equals_repeated_heads(self):
        with jax.enable_x64(True):
            q = jnp.concatenate(_qkv(22, dtype=jnp.float64)[:2], axis=2)
            _, k, v = _qkv(23, dtype=jnp.float64)
            kinds = [kind for kind in KINDS if kind[0] == "linear_numerator"]
            pairs = _grouped_pairs(kinds, q, k, v, _mask(22), ((2, True), (1, False)))
            for case, (got, want) in pairs.items():
                chex.assert_type(got, jnp.float64)
                chex.assert_trees_all_close(got, want, atol=1e-12, custom_message=str(case))

    def test_new_paths_have_the_gradients_of_finite_differences(self):
        # Grouped heads (K = 1), packed rows, a sliding window, in one program.
        ids = jnp.asarray([[0, 0, 0, 1, 1, 1, 1], [2, 2, 5, 5, 5, 5, 5]])
        rotation = rope_rotation(jnp.arange(L))

        @jax.jit
        def outs(q, k, v):
            common = dict(segment_ids=ids, rotation=rotation)
            return (
                attention.softmax_attention(q, k, v, causal=True, window=2, **common),
                attention.linear_attention(q, k, v, causal=True, chunk_size=3, **common),
            )

        with jax.enable_x64(True):
            q, k, v = _qkv(24, dtype=jnp.float64)
            jax.test_util.check_grads(outs, (q, k[:, :, :1], v[:, :, :1]), order=1, modes=("rev",))


class OptionsTest(parameterized.TestCase):
    """The linear kinds' options, checked where they are made (`KernelOptions`,
    `kind_options`), whatever the form."""

    @parameterized.named_parameters(*LINEAR_FORMS)
    def test_eps_must_be_positive(self, form, kind, causal):
        del kind, causal
        q, k, v = _qkv(0)
        for eps in (0.0, -1e-6, float("nan")):
            with self.assertRaisesRegex(ValueError, f"eps={eps!r}; expected a number > 0"):
                form(q, k, v, eps=eps)

    def test_with_a_positive_eps_a_query_seeing_no_feature_is_finite(self):
        # relu(-|q|) = 0: every φ(q_i)ᵀφ(k_j) is 0, which eps = 0 divided into NaN.
        q, k, v = _qkv(0)
        out = attention.linear_attention(-jnp.abs(q), k, v, feature_map="relu", eps=1e-6)
        np.testing.assert_array_equal(out, 0.0)

    @parameterized.named_parameters(*LINEAR_FORMS)
    def test_chunk_size_must_be_an_int_of_at_least_one(self, form, kind, causal):
        del kind
        q, k, v = _qkv(0)
        for size in (0, -4, 2.5, True, "3"):
            with self.assertRaisesRegex(
                ValueError, f"chunk_size={size!r} must be a positive integer"
            ):
                form(q, k, v, chunk_size=size, **causal)

    def test_a_numpy_chunk_size_is_the_int(self):
        q, k, v = _qkv(0)
        for form in (attention.linear_attention, attention.cosine_attention):
            np.testing.assert_array_equal(
                form(q, k, v, causal=True, chunk_size=np.int64(3)),
                form(q, k, v, causal=True, chunk_size=3),
            )

    @parameterized.named_parameters(*LINEAR_FORMS)
    def test_an_option_of_another_kind_is_named(self, form, kind, causal):
        del causal
        q, k, v = _qkv(0)
        names = {"linear": r"'eps', 'feature_map'", "cosine": r"'eps'\]"}[kind]
        for name in ("window", "bias"):
            with self.assertRaisesRegex(
                TypeError, rf"{kind} attention takes no '{name}'; its options are \[.*{names}"
            ):
                form(q, k, v, **{name: 4})

    def test_favor_features_rotated_in_pairs_are_counted_as_features(self):
        q, k, v = _qkv(0)
        rotation = rope_rotation(jnp.arange(L))
        w = np.random.default_rng(0).standard_normal((15, H)).astype(np.float32)
        for placement in ("numerator", "both"):
            with self.assertRaisesRegex(
                ValueError, f"projection has 15 random features; placement='{placement}'"
            ):
                attention.linear_attention(
                    q,
                    k,
                    v,
                    rotation=rotation,
                    feature_map="favor",
                    projection=w,
                    placement=placement,
                )
        # Rotated before φ, F is free; not rotated, too.
        for rotated in ({"rotation": rotation, "placement": "before_feature_map"}, {}):
            out = attention.linear_attention(q, k, v, feature_map="favor", projection=w, **rotated)
            self.assertTrue(np.isfinite(out).all())

    def test_a_projection_or_bias_given_as_a_list_is_named(self):
        q, k, v = _qkv(0)
        with self.assertRaisesRegex(ValueError, "projection must be an array; got list"):
            attention.linear_attention(q, k, v, feature_map="favor", projection=[[0.0] * H])
        with self.assertRaisesRegex(ValueError, "bias must be an array; got list"):
            attention.softmax_attention(q, k, v, bias=[[[[0.0]]]])


if __name__ == "__main__":
    absltest.main()
