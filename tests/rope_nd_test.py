"""Tests for roformer_jax/nn/rope_nd.py: RoPE over A position axes against apply_rope (A = 1),
an explicit rotation matrix (both paths: exact=False, the formula as written, and the exact
default), shift invariance per axis, and transformers' own M-RoPE (Qwen2-VL's blocks, Qwen3-VL's
interleaved form), in 5.x's classes and 4.57's functions."""

import functools
import importlib

import chex
import jax
import jax.numpy as jnp
import numpy as np
import tolerance
from absl.testing import absltest, parameterized
from jax.test_util import check_grads

import roformer_jax as rj
from roformer_jax.nn import rope, rope_layouts, rope_nd, rope_scaling

try:
    import torch
    import transformers
except ImportError:  # the other tests still run
    transformers = None


def _qwen_vl(version: int):
    """transformers' Qwen{2,3}-VL modeling module, imported by the first test that reads it:
    importing them at collection cost every pytest-xdist worker seconds."""
    name = f"qwen{version}_vl"
    return importlib.import_module(f"transformers.models.{name}.modeling_{name}")


B, L, N, H = 2, 6, 2, 16  # one shape for every test
P = H // 2


def _inputs(axes, dtype=np.float32, seed=0, scale=20):
    rng = np.random.default_rng(seed)
    x = rng.standard_normal((B, L, N, H)).astype(dtype)
    return x, rng.integers(-scale, scale, (B, L, axes))


def _pairs(layout, rotary_dim):
    """(first, second) feature of each pair in `layout`: two int arrays [P]."""
    index = np.arange(rotary_dim // 2)
    if layout == "interleaved":
        return 2 * index, 2 * index + 1
    return index, index + rotary_dim // 2


def _matrix_rope(x, positions, freqs, layout):
    """x [B, L, N, H] times an explicit H x H rotation per token and head, in float64."""
    freqs = np.broadcast_to(np.asarray(freqs, np.float64), (N, *np.shape(freqs)[-2:]))
    first, second = _pairs(layout, 2 * freqs.shape[-1])
    out = np.empty(x.shape)
    for b in range(B):
        for l in range(L):  # noqa: E741
            for n in range(N):
                angles = np.asarray(positions[b, l], np.float64) @ freqs[n]  # [P]
                rotation = np.eye(H)
                rotation[first, first] = rotation[second, second] = np.cos(angles)
                rotation[first, second], rotation[second, first] = -np.sin(angles), np.sin(angles)
                out[b, l, n] = rotation @ np.asarray(x[b, l, n], np.float64)
    return out


def _frequencies(kind):
    return {
        "axial": rope_nd.axial_frequencies(12, 2, base=100.0),  # R < H: 4 features pass through
        "mrope": rope_nd.mrope_frequencies(H, [2, 3, 3], base=10000.0),
        "mrope interleaved": rope_nd.mrope_frequencies(H, [3, 3, 2], interleaved=True),
        "per head": np.random.default_rng(3).uniform(0, 1, (N, 2, P)),
        "learned": jnp.asarray(np.random.default_rng(4).uniform(0, 1, (2, P)), jnp.float32),
    }[kind]


class OneAxisTest(parameterized.TestCase):
    @parameterized.parameters("interleaved", "half")
    def test_is_apply_rope(self, layout):
        x, _ = _inputs(1)
        positions = np.arange(L) * 977  # where a float32 product m·θ_i is no longer exact
        want = rope.apply_rope(x, positions, layout=layout)
        # Bit for bit with RoPE's own frequencies as float64: the same phases, the same code
        # (_rope_exact.rotate_by_turns). Their last bit differs from base^(-2i/R)'s decimal value by
        # far less than a float32 turn's rounding, so the phases round alike at these
        # positions.
        got = rope_nd.apply_rope_nd(
            x, positions[:, None], rope_nd.axial_frequencies(H, 1, base=10000.0), layout=layout
        )
        chex.assert_trees_all_equal(got, want)
        # Bit for bit with any frequencies that apply_rope builds itself (a scaling).
        scaling = dict(rope_type="yarn", factor=4.0, original_max_position_embeddings=4)
        scaling["attention_factor"] = 1.0  # apply_rope scales cos and sin, apply_rope_nd never
        scaled, _ = rope_scaling.scaled_frequencies(
            H, base=10000.0, scaling=scaling, dtype=np.float64
        )
        got = rope_nd.apply_rope_nd(x, positions[:, None], scaled[None], layout=layout)
        want_scaled = rope.apply_rope(x, positions, layout=layout, scaling=scaling)
        chex.assert_trees_all_equal(got, want_scaled)
        # RoPE's frequencies as a float32 jax array: float32 angles m·θ_i, off by up to
        # |m|·ulp(θ_i) from the exact ones (rounded θ_i, then the product).
        got = rope_nd.apply_rope_nd(
            x, positions[:, None], rj.rope_frequencies(H)[None], layout=layout
        )
        angle_error = np.abs(positions).max() * 2 * tolerance.unit_roundoff() * 2
        chex.assert_trees_all_close(got, want, atol=angle_error * np.abs(x).max() * 2, rtol=0)


def _rotate(freqs, layout="interleaved"):
    """apply_rope_nd jitted whole with these frequencies as constants (numpy: exact phases)."""
    return jax.jit(functools.partial(rope_nd.apply_rope_nd, freqs=freqs, layout=layout))


class MatrixTest(parameterized.TestCase):
    @parameterized.parameters(
        ("axial", "interleaved"),
        ("mrope", "half"),
        ("mrope interleaved", "interleaved"),
        ("per head", "half"),
        ("learned", "interleaved"),
    )
    def test_equals_explicit_rotation_float32(self, kind, layout):
        freqs = _frequencies(kind)
        x, positions = _inputs(freqs.shape[-2])
        got = _rotate(freqs, layout)(x, positions)
        want = _matrix_rope(x, positions, np.asarray(freqs, np.float64), layout)
        self.assertEqual(got.dtype, jnp.float32)
        chex.assert_trees_all_close(got, want, atol=1e-6 * np.abs(x).max() * 4, rtol=0)

    @parameterized.parameters("mrope interleaved", "per head")
    def test_equals_explicit_rotation_float64(self, kind):
        freqs = _frequencies(kind)
        x, positions = _inputs(freqs.shape[-2], np.float64)
        with jax.enable_x64(True):
            got = _rotate(freqs, "half")(x, positions)
            self.assertEqual(got.dtype, jnp.float64)
        chex.assert_trees_all_close(got, _matrix_rope(x, positions, freqs, "half"), atol=1e-12)

    def test_unbatched_and_floating_positions_and_features_past_the_rotated_ones(self):
        freqs = _frequencies("axial")
        x, positions = _inputs(2)
        rotate = _rotate(freqs)
        got = rotate(x, positions[0])
        chex.assert_trees_all_equal(got, rotate(x, np.stack([positions[0]] * B)))
        chex.assert_trees_all_equal(got[..., 12:], x[..., 12:])
        # Floating positions (interpolated ones) take float32 products, close to exact here.
        floating = rotate(x, positions[0].astype(np.float32))
        chex.assert_trees_all_close(floating, got, atol=1e-5 * np.abs(x).max(), rtol=0)


class PathsTest(parameterized.TestCase):
    @parameterized.product(
        kind=["axial", "mrope", "mrope interleaved", "per head", "learned"],
        layout=["interleaved", "half"],
    )
    def test_plain_equals_exact_and_the_explicit_rotation(self, kind, layout):
        # At |p| < 20 a float32 product p_a·f[a, i] is exact to a few ulp: the two paths agree.
        freqs = _frequencies(kind)
        x, positions = _inputs(freqs.shape[-2])
        plain = rope_nd.apply_rope_nd(x, positions, freqs, layout=layout, exact=False)
        exact = rope_nd.apply_rope_nd(x, positions, freqs, layout=layout)
        want = _matrix_rope(x, positions, np.asarray(freqs, np.float64), layout)
        atol = 1e-6 * np.abs(x).max() * 4
        chex.assert_trees_all_close([plain, exact], [want, want], atol=atol, rtol=0)

    @parameterized.parameters(*rope_layouts.LAYOUTS)
    def test_plain_gradients_in_x_and_learned_frequencies(self, layout):
        x, positions = _inputs(2, scale=3)  # small angles: finite differences stay accurate
        freqs = _frequencies("learned")

        # Jitted (exact static): check_grads' derivatives are then a few whole programs, not
        # each primitive of each derivative compiled on its own.
        @functools.partial(jax.jit, static_argnames="exact")
        def rotate(x, freqs, exact=False):
            return rope_nd.apply_rope_nd(x, positions, freqs, layout=layout, exact=exact)

        check_grads(rotate, (x, freqs), order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2)
        # The exact path differentiates the learned frequencies to the same values.
        k = _inputs(2, seed=1)[0]
        grads = [
            jax.jit(jax.grad(lambda f, e=e: jnp.sum(rotate(x, f, e) * k)))(freqs)
            for e in (False, True)
        ]
        chex.assert_trees_all_close(*grads, atol=1e-4 * np.abs(grads[1]).max(), rtol=0)


class ShiftTest(parameterized.TestCase):
    @parameterized.parameters("axial", "mrope interleaved", "per head")
    def test_scores_ignore_a_shift_along_one_axis(self, kind):
        freqs = _frequencies(kind)
        axes = freqs.shape[-2]
        x, positions = _inputs(axes)
        k, _ = _inputs(axes, seed=1)

        rotate = _rotate(freqs)

        @jax.jit
        def scores(positions):
            return jnp.einsum("BLNH,BMNH->BNLM", rotate(x, positions), rotate(k, positions))

        plain = scores(positions)
        for axis in range(axes):
            shifted = positions + 1000 * (np.arange(axes) == axis)
            chex.assert_trees_all_close(scores(shifted), plain, atol=2e-4 * H, rtol=0)
        # and positions still matter: a stretch along one axis changes the scores
        stretched = positions * (1 + (np.arange(axes) == axes - 1))
        self.assertGreater(float(jnp.abs(scores(stretched) - plain).max()), 1e-2)


class FrequencyTest(parameterized.TestCase):
    def test_axial_blocks_are_ropes_of_their_own(self):
        freqs = rope_nd.axial_frequencies(16, 2, base=100.0)
        plain = rope_scaling.scaled_frequencies(8, base=100.0, dtype=np.float64)[0]
        chex.assert_trees_all_equal(freqs[0, :4], plain, freqs[1, 4:], plain)
        chex.assert_trees_all_equal(freqs[0, 4:], np.zeros(4), freqs[1, :4], np.zeros(4))

    def test_mrope_keeps_ropes_frequencies_one_axis_each(self):
        theta = rope_scaling.scaled_frequencies(H, base=10000.0, dtype=np.float64)[0]
        for interleaved in (False, True):
            freqs = rope_nd.mrope_frequencies(H, [3, 3, 2], interleaved=interleaved)
            chex.assert_trees_all_equal(freqs.sum(0), theta)
            np.testing.assert_array_equal((freqs != 0).sum(1), [3, 3, 2])
        blocks = rope_nd.mrope_frequencies(H, [3, 3, 2])
        np.testing.assert_array_equal(np.argmax(blocks != 0, 0), [0, 0, 0, 1, 1, 1, 2, 2])
        cycled = rope_nd.mrope_frequencies(H, [3, 3, 2], interleaved=True)
        np.testing.assert_array_equal(np.argmax(cycled != 0, 0), [0, 1, 2, 0, 1, 2, 0, 1])

    @parameterized.parameters(
        (
            lambda: rope_nd.mrope_frequencies(H, [2, 3, 2]),
            r"add up to 7 pairs; head dim 16 rotates 8",
        ),
        (lambda: rope_nd.mrope_frequencies(H, [2, 4, 2], interleaved=True), "give axes"),
        (lambda: rope_nd.axial_frequencies(12, 4), "6 pairs, which do not split evenly over 4"),
        (lambda: rope_nd.mrope_frequencies(15, [7]), "head dim 15 is not a positive even"),
    )
    def test_bad_frequencies(self, build, message):
        with self.assertRaisesRegex(ValueError, message):
            build()

    @parameterized.parameters(
        ((L, 2), (3, P), r"have 2 axes, but freqs of shape \(3, 8\) are for 3"),
        ((L + 1, 2), (2, P), r"positions of shape \(7, 2\) do not fit x"),
        ((L,), (2, P), r"expected \[B, L, A\] or \[L, A\]"),
        ((L, 2), (N + 1, 2, P), "are for 3 heads, x has 2"),
        ((L, 2), (2, P + 1), "rotate 18 features; head dim is 16"),
    )
    def test_bad_shapes(self, positions_shape, freqs_shape, message):
        x, _ = _inputs(2)
        with self.assertRaisesRegex(ValueError, message):
            rope_nd.apply_rope_nd(x, np.zeros(positions_shape, int), np.ones(freqs_shape))

    @parameterized.parameters(True, False)
    def test_refuses_integer_x(self, exact):
        x, positions = _inputs(2)
        freqs = rope_nd.axial_frequencies(H, 2)
        with self.assertRaisesRegex(ValueError, "x has dtype int32; RoPE rotates floating-point"):
            rope_nd.apply_rope_nd(x.astype(np.int32), positions, freqs, exact=exact)

    @parameterized.parameters(0.0, -1e4, float("inf"))
    def test_frequencies_need_a_positive_base(self, base):
        with self.assertRaisesRegex(ValueError, "base=.* must be positive and finite"):
            rope_nd.axial_frequencies(H, 2, base=base)
        with self.assertRaisesRegex(ValueError, "base=.* must be positive and finite"):
            rope_nd.mrope_frequencies(H, [2, 3, 3], base=base)


def _hf_rotate(q, k, cos, sin):
    """transformers' half-layout rotation, q and k [B, L, N, H] as HF's [B, N, L, H]."""
    q, k = (torch.from_numpy(np.asarray(a)).transpose(1, 2) for a in (q, k))
    q, k = _qwen_vl(2).apply_rotary_pos_emb(q, k, cos, sin)
    return q.transpose(1, 2).numpy(), k.transpose(1, 2).numpy()


def _hf_457_mrope(q, k, positions, sections, base):
    """4.57's Qwen2-VL path, recorded: cos and sin of each axis over the whole head, then
    `apply_multimodal_rotary_pos_emb`'s split by mrope_section * 2, chunk i from axis i % 3."""
    inv_freq = 1.0 / (base ** (torch.arange(0, H, 2, dtype=torch.float) / H))
    freqs = torch.from_numpy(positions).permute(2, 0, 1)[..., None].float() * inv_freq
    emb = torch.cat((freqs, freqs), dim=-1)  # [3, B, L, H]

    def recompose(table):
        chunks = table.split(list(sections) * 2, dim=-1)
        return torch.cat([m[i % 3] for i, m in enumerate(chunks)], dim=-1)

    return _hf_rotate(q, k, recompose(emb.cos()), recompose(emb.sin()))


class AgainstHuggingFaceTest(parameterized.TestCase):
    @parameterized.parameters(False, True)
    def test_mrope_equals_transformers(self, interleaved):
        if transformers is None:
            self.skipTest("transformers is not installed")
        sections, base = ([3, 3, 2] if interleaved else [2, 3, 3]), 10000.0
        params = {"rope_type": "default", "mrope_section": sections, "rope_theta": base}
        if interleaved:
            config = transformers.Qwen3VLTextConfig(
                hidden_size=N * H, num_attention_heads=N, head_dim=H, rope_parameters=params
            )
            embedding = _qwen_vl(3).Qwen3VLTextRotaryEmbedding(config)
        else:
            config = transformers.Qwen2VLTextConfig(
                hidden_size=N * H, num_attention_heads=N, rope_parameters=params
            )
            embedding = _qwen_vl(2).Qwen2VLRotaryEmbedding(config)
        q, positions = _inputs(3, scale=50)
        k, _ = _inputs(3, seed=1)
        hf_positions = torch.from_numpy(positions).permute(2, 0, 1)  # [3, B, L]
        cos, sin = embedding(torch.from_numpy(q), hf_positions)
        want = _hf_rotate(q, k, cos, sin)
        freqs = rope_nd.mrope_frequencies(H, sections, base=base, interleaved=interleaved)
        got = [rope_nd.apply_rope_nd(a, positions, freqs, layout="half") for a in (q, k)]
        # HF's angles are float32 products p·θ_i (|p| < 50) and torch's cos and sin.
        atol = 50 * 2 * tolerance.unit_roundoff() * 4 * np.abs(q).max()
        chex.assert_trees_all_close(got, list(want), atol=atol, rtol=0)
        if not interleaved:
            chex.assert_trees_all_close(
                got, list(_hf_457_mrope(q, k, positions, sections, base)), atol=atol, rtol=0
            )


if __name__ == "__main__":
    absltest.main()
