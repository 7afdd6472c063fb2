"""Tests for roformer_jax.nn.decay and the kinds' `log_decay`: every kind against the sum
Σ_{t=j+1..i} log_decay[t] written out in float64, its chunked form for every chunk size, its
decode steps, gates of 0 (today's causal forms bit for bit), gates of -30 and gradients."""

import functools

import chex
import grid
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import KINDS, B, H, L, N, _mask, _qkv, _reference, decay_weights
from jax.test_util import check_grads

from roformer_jax.nn import attention, decay
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS
from roformer_jax.nn.rope import rope_rotation

POSITIONS = jnp.arange(L)
SEGMENTS = jnp.asarray([[0, 0, 0, 1, 1, 1, 1], [0, 0, 0, 0, 0, 2, 2]])


def _log_decay(seed, scale=1.0):
    """Log gates in [-2·scale, 0): [B, L, N]."""
    return jnp.asarray(-2.0 * scale * np.random.default_rng(seed).random((B, L, N)))


def _options(name, kw):
    """A kind's keywords with RoPE at POSITIONS unless it says rotation=None."""
    return {"rotation": rope_rotation(POSITIONS), **kw}


def _softmax_reference(q, k, v, log_decay, mask, segment_ids=None):
    """softmax(R q (R k)ᵀ / √H + log of `decay_weights`) v over the visible keys, numpy."""
    rotation = rope_rotation(POSITIONS)
    q, k = np.asarray(rotation.q(q), np.float64), np.asarray(rotation.k(k), np.float64)
    scores = np.einsum("BLNH,BMNH->BNLM", q, k) / np.sqrt(H)
    visible = np.tril(np.ones((L, L), bool)) & np.asarray(mask)[:, None, None, :]
    if segment_ids is not None:
        ids = np.asarray(segment_ids)
        visible = visible & (ids[:, None, :, None] == ids[:, None, None, :])
    weights = decay_weights(log_decay)
    scores = scores + np.log(np.where(visible, weights, 1.0))
    scores = scores - np.where(visible, scores, -np.inf).max(-1, keepdims=True, initial=0.0)
    p = np.where(visible, np.exp(scores), 0.0)  # a row with no visible key gets zeros
    p = p / np.maximum(p.sum(-1, keepdims=True), 1e-300)
    return np.einsum("BNLM,BMNH->BLNH", p, np.asarray(v))


def _want(name, q, k, v, log_decay, mask, segment_ids=None):
    if name == "softmax":
        return _softmax_reference(q, k, v, log_decay, mask, segment_ids)
    kw = dict(dict(KINDS_BY_NAME[name][1]))
    rope = None if "rotation" in kw else kw.get("placement", "numerator")
    kind = "cosine" if name == "cosine" else "linear"
    return _reference(
        q,
        k,
        v,
        kind=kind,
        mask=mask,
        causal=True,
        feature_map=kw.get("feature_map", "elu"),
        rope=rope if kind == "linear" else "numerator",
        q_positions=POSITIONS,
        log_decay=log_decay,
        segment_ids=segment_ids,
    )


KINDS_BY_NAME = {name: (fn, kw) for name, fn, kw in KINDS}
NAMES = [(name, name) for name, _, _ in KINDS]


def _gated(name, q, k, v, log_decay, **kw):
    fn, options = KINDS_BY_NAME[name]
    return fn(q, k, v, causal=True, log_decay=log_decay, **_options(name, options), **kw)


@functools.partial(jax.jit, static_argnames=("name", "chunk_size", "window"))
def _full(q, k, v, log_decay, mask=None, segment_ids=None, *, name, chunk_size=None, window=None):
    """Kind `name`'s causal form, jitted: the tests share a program per kind and option."""
    kw = {} if chunk_size is None else {"chunk_size": chunk_size}
    if window is not None:
        kw["window"] = window
    return _gated(name, q, k, v, log_decay, mask=mask, segment_ids=segment_ids, **kw)


@functools.partial(jax.jit, static_argnames=("name", "window"))
def _step(memory, q, k, v, log_decay, positions, *, name, window=None):
    """Kind `name`'s decode step for the tokens at `positions` [T] after those in `memory`,
    RoPE at those positions: jitted, so each block shape compiles once, not op by op."""
    kw = dict(KINDS_BY_NAME[name][1])
    if "rotation" not in kw:
        kw["rotation"] = rope_rotation(positions)
    if name == "softmax":
        kw.update(positions=positions, capacity=None if window else L, window=window)
    step = ATTENTION_KINDS[name.split("_")[0]].step
    return step(memory, q, k, v, log_decay=log_decay, **kw)


@functools.partial(jax.jit, static_argnames=("name",))
def _chunked(q, k, v, log_decay, mask, segment_ids, *, name):
    """{segments: {chunk size: kind `name`'s causal form}}, with and without `segment_ids`, for
    chunk sizes 1, 2, 3 and L: one program."""
    return {
        segments: {
            chunk: _gated(name, q, k, v, log_decay, mask=mask, segment_ids=ids, chunk_size=chunk)
            for chunk in (1, 2, 3, L)
        }
        for segments, ids in (("without segments", None), ("with segments", segment_ids))
    }


def _decoded(name, q, k, v, log_decay, blocks, window=None):
    """The blocks' outputs of kind `name`'s steps, block by block, concatenated: [B, L, N, H]."""
    memory, outs, start = None, [], 0
    for size in blocks:
        part = slice(start, start + size)
        args = (q[:, part], k[:, part], v[:, part], log_decay[:, part], POSITIONS[part])
        out, memory = _step(memory, *args, name=name, window=window)
        outs.append(out)
        start += size
    return jnp.concatenate(outs, axis=1)


class FormulaTest(parameterized.TestCase):
    def test_gate_features_multiply_to_the_written_out_sums(self):
        # Softmax's form: chunks that do (1, L) and do not (2, 3) divide L, through gates
        # down to -30, whose long products a difference of prefix sums would round.
        with jax.enable_x64(True):
            log_decay = _log_decay(4, scale=15.0)
            want = attention.decay_sums(log_decay)  # [B, N, L, L]
            seen = np.tril(np.ones((L, L), bool))  # j <= i: what a causal mask leaves
            for chunk in (1, 2, 3, L):
                qg, kg = decay.gate_features(log_decay, chunk)
                got = jnp.einsum("BLNF,BMNF->BNLM", qg, kg)
                np.testing.assert_allclose(
                    got[..., seen], want[..., seen], rtol=1e-12, atol=0, err_msg=str(chunk)
                )

    def test_softmax_past_one_chunk_is_the_written_out_sum_as_a_bias(self):
        # L = 200: chunks of 64 (the last of 8) through softmax_attention's own path, with
        # grouped heads (the gates per query head make keys and values per query head).
        with jax.enable_x64(True):
            rng = np.random.default_rng(0)
            q = jnp.asarray(rng.standard_normal((1, 200, 4, 8)))
            k, v = (jnp.asarray(rng.standard_normal((1, 200, 2, 8))) for _ in range(2))
            log_decay = jnp.asarray(-rng.random((1, 200, 4)))
            want = attention.softmax_attention(
                q, k, v, causal=True, bias=attention.decay_sums(log_decay)
            )
            got = attention.softmax_attention(q, k, v, causal=True, log_decay=log_decay)
            np.testing.assert_allclose(got, want, rtol=1e-12, atol=1e-12)

    @parameterized.named_parameters(*NAMES)
    def test_float64_equals_the_written_out_sum(self, name):
        with jax.enable_x64(True):
            q, k, v = _qkv(0, dtype=jnp.float64)
            q, k = q + 1.0, k + 1.0  # denominators far from eps, as attention_test's
            mask, log_decay = _mask(0), _log_decay(0)
            for segment_ids in (None, SEGMENTS):
                want = _want(name, q, k, v, log_decay, mask, segment_ids)
                got = _full(q, k, v, log_decay, mask, segment_ids, name=name)
                chex.assert_type(got, jnp.float64)
                np.testing.assert_allclose(got, want, atol=1e-12, rtol=1e-12)

    @parameterized.named_parameters(*NAMES)
    def test_float32_within_its_bound(self, name):
        # Each output is a ratio of sums of <= L = 7 terms, each of size <= |v| max ~3-4 times
        # weights <= 1: float32 rounds each sum by <= 7 · 2^-24 of its terms' total, ~2e-6
        # for values ~4, times the exp and rotation's own ~1e-6 each; 1e-5 leaves room.
        q, k, v = _qkv(0)
        q, k = q + 1.0, k + 1.0
        mask, log_decay = _mask(0), _log_decay(0)
        with jax.enable_x64(True):
            want = _want(name, *(x.astype(jnp.float64) for x in (q, k, v)), log_decay, mask)
        got = _full(q, k, v, log_decay.astype(jnp.float32), mask, name=name)
        np.testing.assert_allclose(got, want, atol=1e-5)

    def test_without_causal_is_an_error(self):
        q, k, v = _qkv(0)
        for fn, _ in KINDS_BY_NAME.values():
            with self.assertRaisesRegex(ValueError, "log_decay needs causal=True"):
                fn(q, k, v, log_decay=_log_decay(0))
        with self.assertRaisesRegex(ValueError, r"expected \[B, L, N\] = \(2, 7, 2\)"):
            attention.softmax_attention(q, k, v, causal=True, log_decay=jnp.zeros((B, L, 1)))

    def test_a_gate_above_one_is_an_error_where_its_value_is_known(self):
        # log_decay > 0 gave NaN in the linear kinds and up-weighted distant keys in softmax.
        q, k, v = _qkv(0)
        up = _log_decay(0).at[1, 3, 0].set(0.5)
        for fn, _ in KINDS_BY_NAME.values():
            with self.assertRaisesRegex(
                ValueError,
                r"log_decay must be <= 0 \(the log of a gate in \(0, 1\]\); got a maximum of 0.5",
            ):
                fn(q, k, v, causal=True, log_decay=up)
        # Traced, a value is not known: no check runs inside jit, and gates <= 0 go through.
        fn = jax.jit(functools.partial(attention.linear_attention, causal=True))
        self.assertTrue(np.isfinite(fn(q, k, v, log_decay=_log_decay(0))).all())


class FormsTest(parameterized.TestCase):
    @parameterized.named_parameters(*[(n, n) for n, _ in NAMES if n != "softmax"])
    def test_chunked_forms_equal_the_full_form(self, name):
        # Chunk 7 = L is the full form; 1, 2, 3 carry the decay across chunks, 2 and 3 do not
        # divide L; with segments, across the chunks where a segment restarts.
        q, k, v = _qkv(1)
        mask, log_decay = _mask(1), _log_decay(1)
        forms = _chunked(q, k, v, log_decay, mask, SEGMENTS, name=name)
        for segments, outs in forms.items():
            for chunk in (1, 2, 3):
                np.testing.assert_allclose(
                    outs[chunk], outs[L], atol=2e-6, err_msg=f"chunk {chunk}, {segments}"
                )

    @parameterized.parameters(
        *grid.covering("decay_decode_steps", extra=2, kind=[n for n, _ in NAMES], kv_heads=(N, 1))
    )
    def test_decode_steps_equal_the_causal_form(self, kind, kv_heads):
        q, k, v = _qkv(2)
        k, v = k[:, :, :kv_heads], v[:, :, :kv_heads]  # kv_heads 1: grouped heads
        log_decay = _log_decay(2)
        want = _full(q, k, v, log_decay, name=kind)
        for blocks in ((1,) * L, (4, 1, 2)):
            got = _decoded(kind, q, k, v, log_decay, blocks)
            np.testing.assert_allclose(got, want, atol=2e-6, err_msg=str(blocks))

    def test_softmax_ring_decays_as_the_windowed_form(self):
        q, k, v = _qkv(3)
        log_decay = _log_decay(3, scale=0.3)
        want = _full(q, k, v, log_decay, name="softmax", window=3)
        got = _decoded("softmax", q, k, v, log_decay, (4, 1, 2), window=3)
        np.testing.assert_allclose(got, want, atol=2e-6)


class GateValuesTest(parameterized.TestCase):
    @parameterized.parameters(
        *grid.covering(
            "decay_gates_of_zero",
            extra=3,
            kind=[n for n, _ in NAMES],
            segments=(False, True),
            kv_heads=(N, 1),
        )
    )
    def test_gates_of_zero_are_todays_causal_form_bit_for_bit(self, kind, segments, kv_heads):
        name = kind
        q, k, v = _qkv(4)
        k, v = k[:, :, :kv_heads], v[:, :, :kv_heads]
        fn, kw = KINDS_BY_NAME[name]
        kw = dict(_options(name, kw), mask=_mask(4), causal=True)
        if segments:
            kw["segment_ids"] = SEGMENTS
        if name != "softmax":
            kw["chunk_size"] = 3
        # Op by op: jitted, the two programs may order their sums differently (last bits).
        np.testing.assert_array_equal(
            fn(q, k, v, log_decay=jnp.zeros((B, L, N)), **kw), fn(q, k, v, **kw)
        )

    @parameterized.named_parameters(*NAMES)
    def test_gates_of_minus_30_stay_finite(self, name):
        # exp(-30 · 7) underflows float32: only each query's own key is left, the weights of
        # the others ~1e-13 and below. The output and its gradients are finite.
        q, k, v = _qkv(5)
        log_decay = jnp.full((B, L, N), -30.0)

        def loss(q, k, v, log_decay):
            out = _gated(name, q, k, v, log_decay, mask=_mask(5))
            return jnp.sum(out**2), out

        # One compiled program: run op by op, the gradient compiled each op and its transpose.
        grads, out = jax.jit(jax.grad(loss, argnums=(0, 1, 2, 3), has_aux=True))(q, k, v, log_decay)
        self.assertTrue(bool(jnp.all(jnp.isfinite(out))))
        for grad in grads:
            self.assertTrue(bool(jnp.all(jnp.isfinite(grad))))

    @parameterized.named_parameters(*NAMES)
    def test_gradients_match_finite_differences(self, name):
        with jax.enable_x64(True):
            q, k, v = _qkv(6, dtype=jnp.float64)
            q, k = q + 1.0, k + 1.0

            def fn(q, k, v, log_decay):
                extra = {} if name == "softmax" else {"chunk_size": 3}
                return _gated(name, q, k, v, log_decay, mask=_mask(6), **extra)

            check_grads(jax.jit(fn), (q, k, v, _log_decay(6)), order=1, modes=["rev"])


class DecayTest(absltest.TestCase):
    def test_retention_is_retnets_gamma(self):
        want = 1.0 - 2.0 ** (-5.0 - np.arange(4))
        np.testing.assert_allclose(np.exp(decay.retention(4)), want, rtol=1e-7)

    def test_later_sums_are_the_sums_after_each_position(self):
        a = np.random.default_rng(7).random((2, 5))
        want = np.stack([a[:, j + 1 :].sum(-1) for j in range(5)], -1)
        np.testing.assert_allclose(decay.later_sums(jnp.asarray(a)), want, rtol=1e-6)


if __name__ == "__main__":
    absltest.main()
