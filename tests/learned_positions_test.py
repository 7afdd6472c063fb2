"""Tests for roformer_jax/nn/learned_positions.py: RoPE at cumulative, learned positions."""

import math

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny
import tolerance
from absl.testing import absltest, parameterized
from jax.test_util import check_grads
from logit_bounds import _depth, _logits_and_terms

from roformer_jax.nn import attention, decoding, learned_positions
from roformer_jax.nn import model as model_lib

B, L, D, N, K, H, V = 2, 7, 6, 4, 2, 8, 64
SEGMENTS = np.array([[0, 0, 0, 1, 1, 2, 2], [5, 5, 5, 5, 5, 5, 5]])
POSITION = "rope_learned_positions"


def _inputs(seed=0, dtype=np.float64):
    """x [B, L, D], kernel [D, K], bias [K], q [B, L, N, H], k and v [B, L, K, H]."""
    rng = np.random.default_rng(seed)
    shapes = [(B, L, D), (D, K), (K,), (B, L, N, H), (B, L, K, H), (B, L, K, H)]
    return [rng.normal(0, 1, shape).astype(dtype) for shape in shapes]


def _learned_attention(x, kernel, bias, q, k, v, segment_ids=SEGMENTS, base=100.0):
    increments = learned_positions.position_increments(x, kernel, bias)
    p = learned_positions.cumulative_positions(increments, segment_ids)
    rotation = learned_positions.real_rope_rotation(p, base=base)
    return attention.softmax_attention(
        q, k, v, causal=True, segment_ids=jnp.asarray(segment_ids), rotation=rotation
    )


# Compiled once per dtype: run op by op, each of its ops compiles on its own, and the gradient
# check's derivatives and transposes more so.
_compiled_attention = jax.jit(_learned_attention)


def _rotated(x, position, base):
    """RoPE's eq. (34) on one head's features x [H] at a real position, interleaved pairs."""
    angles = position * base ** (-np.arange(0, H, 2) / H)  # [H/2]
    a, c = x[0::2], x[1::2]
    out = np.empty(H)
    out[0::2] = a * np.cos(angles) - c * np.sin(angles)
    out[1::2] = c * np.cos(angles) + a * np.sin(angles)
    return out


def _reference(x, kernel, bias, q, k, v, segment_ids=SEGMENTS, base=100.0):
    """The issue's formula written out in float64 numpy: p_t = Σ softplus(w·x_s + b) over
    the s <= t of t's segment, RoPE at p_t, causal softmax within segments; query head n
    reads key/value head n // (N / K) and its positions."""
    increments = np.log1p(np.exp(np.einsum("bld,dk->blk", x, kernel) + bias))  # [B, L, K]
    out = np.zeros((B, L, N, H))
    for b in range(B):
        for t in range(L):
            seen = [s for s in range(t + 1) if segment_ids[b, s] == segment_ids[b, t]]
            p = {s: increments[b, seen[0] : s + 1].sum(axis=0) for s in seen}  # [K] each
            for n in range(N):
                kv = n // (N // K)
                query = _rotated(q[b, t, n], p[t][kv], base)
                keys = [_rotated(k[b, s, kv], p[s][kv], base) for s in seen]
                scores = np.array([query @ key for key in keys]) / math.sqrt(H)
                weights = np.exp(scores - scores.max())
                out[b, t, n] = (weights / weights.sum()) @ v[b, seen, kv]
    return out


def _float32_bound(x, kernel, bias, q, k, v, **unused) -> float:
    """The float32 error bound of `_learned_attention` (tolerance.py's model): the positions
    p (a dot of D terms, softplus, a sum over L) give angles off by at most γ·Σ|increments|
    (θ <= 1); a score of H terms is then off by γ_H and twice the angle error of its terms; a
    softmax weight by twice its score's error and γ_L; the output at most max|v| times that."""
    del unused
    increments = np.log1p(np.exp(np.einsum("bld,dk->blk", x, kernel) + bias))
    terms = np.einsum("bld,dk->blk", np.abs(x), np.abs(kernel)) + np.abs(bias)
    angle = tolerance.gamma(D + 4 + L) * float((terms + increments).sum(axis=1).max())
    score = float(np.abs(q).max() * np.abs(k).max()) * H / math.sqrt(H)  # Σ_h |q_h k_h| / √H
    score_error = tolerance.dot(n=H + 6, magnitude=score) + 2 * angle * score
    return float(np.abs(v).max()) * (2 * score_error + tolerance.gamma(L + 3))


def _model_bound(model, variables, ids) -> float:
    """Twice the rounding bound of one logit (logit_bounds, as decoding_test's comparisons),
    with the learned positions' own roundings (softplus, the sum over L, the angle) added to
    the longest path."""
    _, magnitude = _logits_and_terms(model, variables, ids, jnp.ones(ids.shape, bool))
    depth = _depth(model.config, keys=ids.shape[1]) + ids.shape[1] + 4
    return 2 * tolerance.dot(n=depth, magnitude=magnitude)


class FormulaTest(parameterized.TestCase):
    def test_float64_equals_the_written_out_formula(self):
        with jax.enable_x64(True):
            inputs = _inputs()
            got = _compiled_attention(*(jnp.asarray(a) for a in inputs))
            chex.assert_type(got, jnp.float64)
            np.testing.assert_allclose(got, _reference(*inputs), rtol=0, atol=1e-12)

    def test_float32_is_within_its_rounding(self):
        inputs = _inputs(1)
        got = _compiled_attention(*(jnp.asarray(a, jnp.float32) for a in inputs))
        np.testing.assert_allclose(got, _reference(*inputs), rtol=0, atol=_float32_bound(*inputs))

    def test_segments_restart_the_sum(self):
        increments = jnp.asarray(np.random.default_rng(2).uniform(0.5, 2, (B, L, K)))
        got = learned_positions.cumulative_positions(increments, SEGMENTS)
        for start, stop in ((0, 3), (3, 5), (5, 7)):
            want = jnp.cumsum(increments[0, start:stop], axis=0)
            np.testing.assert_allclose(got[0, start:stop], want, rtol=1e-6)
        np.testing.assert_allclose(got[1], jnp.cumsum(increments[1], axis=0), rtol=1e-6)

    def test_a_carried_start_continues_the_sum(self):
        increments = jnp.asarray(np.random.default_rng(3).uniform(0.5, 2, (B, L, K)))
        whole = learned_positions.cumulative_positions(increments)
        rest = learned_positions.cumulative_positions(increments[:, 3:], start=whole[:, 2])
        np.testing.assert_allclose(rest, whole[:, 3:], rtol=1e-6)

    def test_gradients(self):
        # Through x, the positions' own parameters (kernel, bias) and q, k, v.
        with jax.enable_x64(True):
            inputs = [jnp.asarray(a) for a in _inputs(4)]
            check_grads(_compiled_attention, inputs, order=1, modes=("fwd", "rev"))


class _Compiled:
    """A model whose `apply` is compiled once per input shape and keywords: run op by op, a
    forward compiles each of its ops. `module` is the model itself, `config` its config."""

    def __init__(self, module):
        self.module, self.config = module, module.config
        self.apply = jax.jit(module.apply, static_argnames=("capture_intermediates",))


def _model(seed=0, **overrides):
    """A tiny causal model of two layers with weights N(0, 0.2²) (attention far from uniform,
    positions far from t + 1), as `_Compiled`."""
    config = tiny.model_config(
        **{"vocab_size": V, "max_len": 16, "causal": True, "position": POSITION, **overrides}
    )
    model = model_lib.RoFormer(config)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    rng = np.random.default_rng(seed)
    params = {
        path: jnp.asarray((path[-1] == "scale") + rng.normal(0, 0.2, x.shape), jnp.float32)
        for path, x in flax.traverse_util.flatten_dict(shapes).items()
    }
    return _Compiled(model), flax.traverse_util.unflatten_dict(params)


def _ids(length=L, seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(1, V, (B, length)), jnp.int32)


def _positions(state):
    """The first layer's learned positions [B, L, K], from capture_intermediates."""
    layer = state["intermediates"]["encoder"]["layer_0"]["attention"]
    return layer["position_gate"]["__call__"][0]


class ModelTest(parameterized.TestCase):
    def test_parameters_start_at_rope_positions(self):
        config = tiny.model_config(causal=True, position=POSITION, num_kv_heads=2)
        model = model_lib.RoFormer(config)
        params = jax.jit(model.init)(jax.random.key(0), _ids())["params"]
        gate = params["encoder"]["layer_0"]["attention"]["position_gate"]
        chex.assert_shape(gate["kernel"], (config.hidden_size, 2))
        np.testing.assert_allclose(jax.nn.softplus(gate["bias"]), np.ones(2), rtol=1e-6)
        self.assertEqual(learned_positions.INIT_BIAS, math.log(math.e - 1))

    def test_a_zero_kernel_is_rope_at_positions_one_to_l(self):
        model, variables = _model(num_layers=2)
        rope, _ = _model(num_layers=2, position="rope")
        for layer in ("layer_0", "layer_1"):
            gate = variables["params"]["encoder"][layer]["attention"]["position_gate"]
            gate["kernel"] = jnp.zeros_like(gate["kernel"])
            gate["bias"] = jnp.full_like(gate["bias"], learned_positions.INIT_BIAS)
        ids = _ids()
        got = model.apply(variables, ids).logits
        want = rope.apply(variables, ids, position_ids=jnp.arange(L) + 1).logits
        # softplus(b) = 1 to float32's rounding, its sum over L positions, the angles p·θ.
        np.testing.assert_allclose(got, want, rtol=0, atol=_model_bound(model, variables, ids))

    def test_the_positions_come_from_the_input_not_the_ids(self):
        model, variables = _model()
        ids = _ids()
        base = model.apply(variables, ids).logits
        spread = model.apply(variables, ids, position_ids=3 * jnp.arange(L)).logits
        np.testing.assert_array_equal(spread, base)

    def test_packed_documents_equal_each_alone(self):
        model, variables = _model()
        ids = _ids()
        segment_ids = jnp.asarray(np.broadcast_to(SEGMENTS[:1], (B, L)))
        packed, state = model.apply(
            variables, ids, segment_ids=segment_ids, capture_intermediates=True
        )
        for start, stop in ((0, 3), (3, 5), (5, 7)):
            alone, alone_state = model.apply(
                variables, ids[:, start:stop], capture_intermediates=True
            )
            atol = _model_bound(model, variables, ids[:, start:stop])
            np.testing.assert_allclose(packed.logits[:, start:stop], alone.logits, atol=atol)
            # Each document's positions from its own start: a constant added to all of them
            # would cancel in the scores, so they are read here.
            got = _positions(state)[:, start:stop]
            np.testing.assert_allclose(got, _positions(alone_state), rtol=1e-6)

    def test_a_model_that_is_not_causal_is_refused(self):
        with self.assertRaisesRegex(ValueError, "rope_learned_positions.*needs causal=True"):
            tiny.model_config(causal=False, position=POSITION)

    @parameterized.parameters("softmax", "linear", "cosine")
    def test_cached_steps_give_the_logits_of_the_whole_sequence(self, attention_kind):
        model, variables = _model(attention=attention_kind, num_kv_heads=2)
        ids, prompt = _ids(), 3
        want = model.apply(variables, ids).logits

        @jax.jit
        def step(cache, ids):  # the prompt, then each later token on its own
            return model.module.apply(
                {**variables, **cache}, ids, decode_length=L, mutable=["cache"]
            )

        out, cache = step({}, ids[:, :prompt])
        logits = [out.logits]
        for i in range(prompt, L):
            out, cache = step(cache, ids[:, i : i + 1])
            logits.append(out.logits)
        # The same float32 sums in another order; a wrong carried position is off by far more.
        atol = _model_bound(model, variables, ids)
        np.testing.assert_allclose(jnp.concatenate(logits, axis=1), want, rtol=0, atol=atol)

    def test_greedy_generation_equals_recomputing_the_growing_sequence(self):
        model, variables = _model()
        prompts, new = _ids(4), 3
        mask = jnp.asarray([[True] * 4, [False, True, True, True]])  # left padding cancels
        got = decoding.generate(
            model.module, variables, prompts, attention_mask=mask, max_new_tokens=new
        )
        _, mask, _ = decoding.left_padded(prompts, mask)
        mask = jnp.concatenate([mask, jnp.ones((B, new), bool)], axis=1)
        logits = model.apply(variables, got, attention_mask=mask).logits
        np.testing.assert_array_equal(got[:, 4:], jnp.argmax(logits[:, 3:-1], axis=-1))


if __name__ == "__main__":
    absltest.main()
