"""Tests for roformer_jax.nn.attention_step: each kind's decode step against its causal form."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import FAVOR_W, KINDS, B, H, L, N, _qkv, _takes_positions

from roformer_jax.nn import alibi, attention, attention_step
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS
from roformer_jax.nn.rope import rope_rotation


def _decode_in_blocks(name, kw, q, k, v, mask, positions, blocks):
    """The kind's step function over consecutive blocks of the sequence, outputs joined."""
    step = ATTENTION_KINDS[name.split("_")[0]].step
    outs, memory, start = [], None, 0
    for size in blocks:
        part = slice(start, start + size)
        options = dict(kw, mask=mask[:, part])
        if _takes_positions(kw):
            options["rotation"] = rope_rotation(positions[:, part])
        if step is attention_step.softmax_attention_step:
            options.update(positions=positions[:, part], capacity=q.shape[1] + 2)
        out, memory = step(memory, q[:, part], k[:, part], v[:, part], **options)
        outs.append(out)
        start += size
    return jnp.concatenate(outs, axis=1)


class WindowTest(absltest.TestCase):
    def test_decode_step_with_a_ring_of_window_slots(self):
        # Prompt then tokens, and blocks longer than the window, with ALiBi on the positions
        # kept in the ring and one key/value head: the windowed causal form on the whole.
        q, k, v = _qkv(26)
        k, v = k[:, :, :1], v[:, :, :1]
        positions = jnp.asarray(np.arange(L)[None] + np.array([[0], [9]]))  # [B, L]
        window = 3

        def bias(q_positions, k_positions):
            return alibi.alibi_bias(q_positions, k_positions, N)

        @jax.jit
        def forms(q, k, v):
            want = attention.softmax_attention(
                q,
                k,
                v,
                causal=True,
                window=window,
                rotation=rope_rotation(positions),
                bias=bias(positions, positions),
            )
            got = {}
            for blocks in ((4, 1, 2), (5, 2)):
                cache, outs, start = None, [], 0
                for size in blocks:
                    part = positions[:, start : start + size]
                    out, cache = attention_step.softmax_attention_step(
                        cache,
                        *(x[:, start : start + size] for x in (q, k, v)),
                        positions=part,
                        rotation=rope_rotation(part),
                        bias=bias,
                        window=window,
                    )
                    outs.append(out)
                    start += size
                got[blocks] = jnp.concatenate(outs, axis=1), cache
            return want, got

        want, got = forms(q, k, v)
        for blocks, (out, cache) in got.items():
            chex.assert_shape(cache.keys, (B, 1, window, H))
            chex.assert_trees_all_close(out, want, atol=1e-5, custom_message=str(blocks))


class DecodeStepsTest(parameterized.TestCase):
    """Each kind's step function, block after block, equals its causal form on the whole."""

    def _check(self, name, fn, kw, dtype, atol, blocks, kv_heads=N):
        q, k, v = _qkv(5, dtype=dtype)
        k, v = k[:, :, :kv_heads], v[:, :, :kv_heads]
        mask = np.ones((B, L), bool)
        mask[0, :2] = False  # a left-padded prompt, as decoding.generate lays them out
        mask = jnp.asarray(mask)
        positions = jnp.asarray(np.maximum(np.arange(L)[None] - 2 * (1 - mask[:, :1]), 0))

        # Both forms in one program, as decoding runs them: op by op, each block length and
        # dtype compiled every primitive anew (~250 compiles, ~10 s a case); jitted, ~1 s.
        @jax.jit
        def forms(q, k, v, mask, positions):
            full_kw = dict(kw)
            if _takes_positions(kw):
                full_kw["rotation"] = rope_rotation(positions)
            want = fn(q, k, v, mask=mask, causal=True, **full_kw)
            return want, _decode_in_blocks(name, kw, q, k, v, mask, positions, blocks)

        want, got = forms(q, k, v, mask, positions)
        chex.assert_type(got, dtype)
        real = np.asarray(mask)[..., None, None]
        np.testing.assert_allclose(np.where(real, got, 0), np.where(real, want, 0), atol=atol)

    @parameterized.named_parameters(
        (f"{name}_{split}", name, fn, kw, blocks)
        for name, fn, kw in KINDS
        for split, blocks in (("token_by_token", (1,) * L), ("prompt_then_tokens", (4, 1, 2)))
        if split == "prompt_then_tokens" or name == "linear_numerator"
    )
    def test_float32(self, name, fn, kw, blocks):
        self._check(name, fn, kw, jnp.float32, 1e-5, blocks)

    @parameterized.named_parameters(*[(name, name, fn, kw) for name, fn, kw in KINDS])
    def test_float64(self, name, fn, kw):
        with jax.enable_x64(True):
            self._check(name, fn, kw, jnp.float64, 1e-12, (3, 1, 1, 2))

    # The default placement, "numerator", is KINDS' linear_favor in test_float32.
    @parameterized.parameters(None, "both", "before_feature_map")
    def test_favor_decodes_as_its_causal_form_in_every_placement(self, placement):
        kw = {"feature_map": "favor", "projection": FAVOR_W}
        kw.update({"rotation": None} if placement is None else {"placement": placement})
        self._check("linear", attention.linear_attention, kw, jnp.float32, 1e-5, (4, 1, 2))

    @parameterized.named_parameters(
        (name, name, fn, kw)
        for name, fn, kw in KINDS
        if name in ("softmax", "linear_numerator")  # cosine's step is linear's
    )
    def test_one_key_value_head(self, name, fn, kw):
        self._check(name, fn, kw, jnp.float32, 1e-5, (4, 1, 2), kv_heads=1)

    def test_memories_hold_the_key_value_heads(self):
        q, k, v = _qkv(6)
        k, v = k[:, :, :1], v[:, :, :1]  # MQA: caches N = 2 times smaller
        cache, state = (
            jax.eval_shape(
                lambda q, k, v, name=name, options=options: ATTENTION_KINDS[name].step(
                    None, q, k, v, **options
                )[1],
                q,
                k,
                v,
            )
            for name, options in (
                ("softmax", dict(positions=jnp.arange(L), capacity=L)),
                ("cosine", {}),
            )
        )
        chex.assert_shape((cache.keys, cache.values), (B, 1, L, H))
        chex.assert_shape(state.numerator, (B, 1, H + 1, H + 1))  # Σ_j [1, b_j][v_j, 1]ᵀ

    def test_linear_state_is_constant_in_the_length(self):
        q, k, v = _qkv(6)

        # Shapes only: traced, not run (op by op, the two steps compiled ~100 primitives).
        def two_steps(q, k, v):
            _, state = attention_step.linear_attention_step(
                None, q, k, v, rotation=rope_rotation(jnp.arange(L))
            )
            _, longer = attention_step.linear_attention_step(
                state, q, k, v, rotation=rope_rotation(jnp.arange(L, 2 * L))
            )
            return state, longer

        state, longer = jax.eval_shape(two_steps, q, k, v)
        chex.assert_trees_all_equal_shapes(state, longer)
        chex.assert_shape(state.numerator, (B, N, H, H))  # Σ R_j φ(k_j) v_jᵀ
        chex.assert_shape(state.denominator, (B, N, H, 1))  # Σ φ(k_j)

    def test_cache_too_small_for_the_prompt(self):
        q, k, v = _qkv(7)
        with self.assertRaisesRegex(ValueError, "capacity 5 cannot hold 7 tokens"):
            attention_step.softmax_attention_step(
                None, q, k, v, positions=jnp.arange(L), capacity=5
            )


if __name__ == "__main__":
    absltest.main()
