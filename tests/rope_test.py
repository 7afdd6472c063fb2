"""Tests for roformer_jax/nn/rope.py, with the modules behind it (rope_phase, rope_layouts,
_rope_cpu) and the reference it is held to (rope_reference)."""

import chex
import grid
import jax
import jax.numpy as jnp
import numpy as np
import tolerance
from absl.testing import absltest, parameterized
from jax.test_util import check_grads

from roformer_jax.nn import _rope_cpu, rope, rope_layouts, rope_phase, rope_reference

_TWO_PI = 2 * np.longdouble("3.14159265358979323846264338327950288")  # x87: 64-bit mantissa


def _float32_bound(x, positions):
    """Worst-case |apply_rope(x) - exact| in float32 at integer positions (tolerance.py's model).

    Phase in turns (< 1.5): 4 roundings (rope_phase.rotation_turns), plus u·|m|·2^-32 where m
    rounds to float32 in m·δ_i; 2π times that in radians. cos and sin: one ulp each
    (test_cos_sin_turns_within_one_ulp). The rotation's products and sum: 3 roundings, and as
    many in a float32 reference (its float64 cos and sin rounded, products, sum). All of it
    scales with a pair's |x_a| + |x_b| <= 2·max|x|.
    """
    turns = 1.5 * tolerance.gamma(4) + tolerance.unit_roundoff() * np.abs(positions).max() / 2**32
    per_pair = 2 * np.pi * turns + tolerance.gamma(2) + 2 * tolerance.gamma(3)
    return 2 * float(np.abs(x).max()) * per_pair


def _quarter_turn(x, layout):
    """Each pair (a, b) -> (-b, a): the derivative of the rotation by an angle, per radian."""
    if layout == "interleaved":
        return np.stack([-x[..., 1::2], x[..., 0::2]], axis=-1).reshape(x.shape)
    half = x.shape[-1] // 2
    return np.concatenate([-x[..., half:], x[..., :half]], axis=-1)


class RopeTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        keys = jax.random.split(jax.random.key(0), 2)
        self.q = jax.random.normal(keys[0], (2, 12, 3, 16))  # [B, L, N, H]
        self.k = jax.random.normal(keys[1], (2, 12, 3, 16))
        self.positions = jnp.arange(12)

    def test_frequencies(self):
        theta = rope.rope_frequencies(8, base=500000.0)
        chex.assert_trees_all_close(theta, 500000.0 ** -(np.arange(0, 8, 2) / 8), rtol=1e-7)

    @parameterized.parameters("interleaved", "half")
    def test_position_zero_is_identity(self, layout):
        out = rope.apply_rope(self.q, jnp.zeros(12, jnp.int32), layout=layout)
        chex.assert_trees_all_equal(out, self.q)

    @parameterized.parameters("interleaved", "half")
    def test_preserves_norms(self, layout):
        out = rope.apply_rope(self.q, self.positions * 997, layout=layout)
        chex.assert_trees_all_close(
            jnp.linalg.norm(out, axis=-1), jnp.linalg.norm(self.q, axis=-1), rtol=1e-5
        )

    @parameterized.product(
        layout=rope_layouts.LAYOUTS, rotary_dim=[None, 8], base=[10000.0, 500000.0]
    )
    def test_scores_depend_only_on_relative_position(self, layout, rotary_dim, base):
        shift = int(jax.random.randint(jax.random.key(1), (), 1, 100_000))
        kw = dict(layout=layout, rotary_dim=rotary_dim, base=base)

        def scores(positions):
            q = rope.apply_rope(self.q, positions, **kw)
            k = rope.apply_rope(self.k, positions, **kw)
            return jnp.einsum("BLNH,BMNH->BNLM", q, k)

        chex.assert_trees_all_close(
            scores(self.positions), scores(self.positions + shift), atol=2e-5
        )

    @parameterized.parameters(
        *grid.covering("rope_efficient_float32", extra=2, layout=rope_layouts.LAYOUTS,
                       rotary_dim=[None, 4, 16], batched_positions=[False, True])
    )  # fmt: skip
    def test_efficient_equals_dense_and_complex_float32(
        self, layout, rotary_dim, batched_positions
    ):
        positions = jnp.array([3, 0, 7, 100, 5000, -4, 12, 13, 14, 9, 70000, 2])
        if batched_positions:
            positions = jnp.stack([positions, positions[::-1] + 11])
        kw = dict(layout=layout, rotary_dim=rotary_dim)
        out = rope.apply_rope(self.q, positions, **kw)
        atol = _float32_bound(self.q, positions)  # ~2e-5 here; a float32 m·θ is ~4e-3 off
        for reference in (rope_reference.apply_rope_dense, rope_reference.apply_rope_complex):
            chex.assert_trees_all_close(out, reference(self.q, positions, **kw), atol=atol, rtol=0)

    @parameterized.parameters("interleaved", "half")
    def test_efficient_equals_dense_and_complex_float64(self, layout):
        with jax.enable_x64(True):
            q = jnp.asarray(np.asarray(self.q), jnp.float64)
            positions = jnp.array([3, 0, 7, 100, 5000, -4, 12, 13, 14, 9, 70000, 2])
            out = rope.apply_rope(q, positions, layout=layout)
            self.assertEqual(out.dtype, jnp.float64)
            # The float64 form of _float32_bound is ~4e-14 here, below the 1e-12 asked.
            for reference in (rope_reference.apply_rope_dense, rope_reference.apply_rope_complex):
                chex.assert_trees_all_close(
                    out, reference(q, positions, layout=layout), atol=1e-12, rtol=0
                )

    def test_features_past_rotary_dim_pass_through(self):
        out = rope.apply_rope(self.q, self.positions + 5, rotary_dim=6)
        chex.assert_trees_all_equal(out[..., 6:], self.q[..., 6:])
        self.assertGreater(float(jnp.abs(out[..., :6] - self.q[..., :6]).max()), 0.1)

    def test_layout_without_heads_axis(self):
        x = self.q[:, :, 0, :]  # [B, L, H]
        chex.assert_trees_all_close(
            rope.apply_rope(x, self.positions, seq_axis=-2),
            rope.apply_rope(self.q, self.positions)[:, :, 0, :],
        )

    @parameterized.product(src=rope_layouts.LAYOUTS, dst=rope_layouts.LAYOUTS, rotary_dim=[None, 8])
    def test_weight_conversion_keeps_scores(self, src, dst, rotary_dim):
        heads, head_dim, width = 2, 16, 10
        keys = jax.random.split(jax.random.key(3), 5)
        hidden = jax.random.normal(keys[0], (1, 9, width))  # [B, L, D]
        wq, wk = (jax.random.normal(k, (width, heads * head_dim)) for k in keys[1:3])
        bq, bk = (jax.random.normal(k, (heads * head_dim,)) for k in keys[3:5])
        positions = jnp.arange(9) * 3 + 2

        def scores(wq, bq, wk, bk, layout):
            def project(w, b):
                x = (hidden @ w + b).reshape(1, 9, heads, head_dim)
                return rope.apply_rope(x, positions, layout=layout, rotary_dim=rotary_dim)

            return jnp.einsum("BLNH,BMNH->BNLM", project(wq, bq), project(wk, bk))

        kw = dict(head_dim=head_dim, src=src, dst=dst, rotary_dim=rotary_dim)
        converted = [rope_layouts.convert_qk_layout(w, **kw) for w in (wq, bq, wk, bk)]
        chex.assert_trees_all_close(
            scores(*converted, dst), scores(wq, bq, wk, bk, src), atol=1e-4, rtol=1e-5
        )
        back = rope_layouts.convert_qk_layout(converted[0], **{**kw, "src": dst, "dst": src})
        chex.assert_trees_all_equal(back, wq)

    @parameterized.parameters("interleaved", "half")
    def test_bfloat16_in_bfloat16_out(self, layout):
        x = self.q.astype(jnp.bfloat16)
        out = rope.apply_rope(x, self.positions + 1000, layout=layout)
        chex.assert_type(out, jnp.bfloat16)
        reference = rope.apply_rope(self.q, self.positions + 1000, layout=layout)
        chex.assert_trees_all_close(out.astype(jnp.float32), reference, atol=0.05)

    def test_bfloat16_rounds_to_nearest(self):
        x = self.q.astype(jnp.bfloat16)
        x = x.at[0, 0, 0, :2].set(jnp.array([jnp.nan, jnp.inf], jnp.bfloat16))
        out = rope.apply_rope(x, jnp.zeros(12, jnp.int32))  # the identity rotation
        chex.assert_trees_all_equal(out[0, 0, 0, 2:], x[0, 0, 0, 2:])
        self.assertTrue(bool(jnp.isnan(out[0, 0, 0, 0])))
        chex.assert_trees_all_equal(out[1:], x[1:])
        # The bit-level converts equal XLA's, ties and overflow included.
        y = jax.random.normal(jax.random.key(5), (4096,)) * jnp.logspace(-40, 38.5, 4096)
        y = jnp.concatenate([y, jnp.array([1 + 2**-8, 1 + 3 * 2**-8, -jnp.inf, 3.4e38])])
        chex.assert_trees_all_equal(_rope_cpu.narrow(y, jnp.bfloat16), y.astype(jnp.bfloat16))
        b = y.astype(jnp.bfloat16)
        chex.assert_trees_all_equal(_rope_cpu.widen(b, jnp.float32), b.astype(jnp.float32))

    @parameterized.parameters(10**5, 10**6, 10**9)
    def test_far_positions_match_float64(self, centre):
        # A plain float32 product m·θ is off by ~0.03 rad at m = 10^6; the exact phase reduction
        # keeps the error at the float32 rounding of the output.
        positions = np.arange(centre - 6, centre + 6)
        out = rope.apply_rope(self.q, jnp.asarray(positions, jnp.int32))
        with jax.enable_x64(True):
            q = np.asarray(self.q, np.float64)
            expected = np.asarray(rope_reference.apply_rope_complex(q, positions))
        error = np.abs(np.asarray(out, np.float64) - expected).max()
        bound = _float32_bound(self.q, positions)
        self.assertLess(error, bound, f"max abs error {error:.2e} at positions near {centre}")

    @parameterized.parameters(np.float32, np.float64)
    def test_cos_sin_turns_within_one_ulp(self, dtype):
        # Every quadrant, both signs, the reduction's boundaries (multiples of 1/8 turn) and
        # phases past one turn. Rounding 2πt to an angle first, then jnp.cos, is off by 8e-7
        # in float32 and 1.3e-15 in float64 on these phases.
        turns = np.concatenate(
            [np.linspace(-2, 2, 4097), np.random.default_rng(0).uniform(0, 1.5, 20000)]
        ).astype(dtype)
        angles = np.longdouble(turns) * _TWO_PI
        with jax.enable_x64(dtype == np.float64):
            cos, sin = _rope_cpu.cos_sin_turns(jnp.asarray(turns))
        self.assertEqual(cos.dtype, dtype)
        for got, expected in ((cos, np.cos(angles)), (sin, np.sin(angles))):
            error = np.abs(np.longdouble(np.asarray(got)) - expected).max()
            self.assertLess(error, np.finfo(dtype).eps, f"{dtype.__name__}: {float(error):.2e}")

    @parameterized.parameters("interleaved", "half")
    def test_turns_per_feature_follow_the_layout(self, layout):
        for positions in (jnp.arange(-5, 7) * 1000, jnp.arange(12) * 0.5):
            per_pair = rope_phase.rotation_turns(positions, 8)
            per_feature = rope_phase.rotation_turns(positions, 8, layout=layout)
            chex.assert_trees_all_equal(
                per_feature, rope_layouts.merge_pairs(per_pair, per_pair, layout)
            )

    def test_negative_positions_invert_positive(self):
        forward = rope.apply_rope(self.q, self.positions + 12345)
        back = rope.apply_rope(forward, -(self.positions + 12345))
        chex.assert_trees_all_close(back, self.q, atol=1e-5)

    def test_floating_positions(self):
        chex.assert_trees_all_close(
            rope.apply_rope(self.q, self.positions.astype(jnp.float32) + 0.0),
            rope.apply_rope(self.q, self.positions),
            atol=1e-5,
        )

    @parameterized.parameters("interleaved", "half")
    def test_gradient_with_respect_to_floating_positions(self, layout):
        positions = jnp.arange(12) * 0.5 + 0.25
        score = lambda p: jnp.sum(rope.apply_rope(self.q, p, layout=layout) * self.k)  # noqa: E731
        got = jax.grad(score)(positions)
        # d/dm of pair i rotated by m·θ_i is θ_i times it turned a further quarter turn: the
        # reference, in float64, rotates q turned by a quarter turn.
        with jax.enable_x64(True):
            turned = _quarter_turn(np.asarray(self.q, np.float64), layout)
            rotated = rope_reference.apply_rope_complex(turned, positions, layout=layout)
        theta = 10000.0 ** (-np.arange(0, 16, 2) / 16)  # [H/2]
        theta = np.repeat(theta, 2) if layout == "interleaved" else np.tile(theta, 2)  # [H]
        terms = theta * np.asarray(rotated) * np.asarray(self.k, np.float64)  # [B, L, N, H]
        # Each term: θ_i/2π and m·θ_i/2π (2 roundings), the derivatives of the Horner
        # polynomials (2 per coefficient, 6 each: 12), the rotation's product and sum and the
        # product with k (3); then the sum over B·N·H = 96 terms.
        atol = tolerance.dot(n=96 + 17, magnitude=np.abs(terms).sum(axis=(0, 2, 3)).max())
        chex.assert_trees_all_close(got, terms.sum(axis=(0, 2, 3)), atol=atol, rtol=0)
        self.assertGreater(float(jnp.abs(got).min()), 1e-3)

    @parameterized.parameters("interleaved", "half")
    def test_jit_equals_no_jit(self, layout):
        fn = lambda x, p: rope.apply_rope(x, p, layout=layout, rotary_dim=8)  # noqa: E731
        chex.assert_trees_all_close(
            jax.jit(fn)(self.q, self.positions + 77), fn(self.q, self.positions + 77), atol=1e-6
        )

    @parameterized.parameters("interleaved", "half")
    def test_gradients(self, layout):
        q = self.q[:1, :4]
        check_grads(
            lambda x: rope.apply_rope(x, jnp.arange(4) + 3, layout=layout),
            (q,),
            order=2,
            modes=["fwd", "rev"],
            atol=1e-2,
            rtol=1e-2,
        )

    @parameterized.parameters("interleaved", "half")
    def test_bfloat16_gradients_follow_float32(self, layout):
        # The bf16 path widens and narrows through integer bit casts, which alone have a zero
        # derivative: q and k of a bf16 model then got no gradient at all.
        def grad(dtype):
            loss = lambda x: jnp.sum(  # noqa: E731
                rope.apply_rope(x, self.positions + 5, layout=layout).astype(jnp.float32) * self.k
            )
            return jax.grad(loss)(self.q.astype(dtype)).astype(jnp.float32)

        want = grad(jnp.float32)
        self.assertGreater(float(jnp.abs(want).max()), 0.1)
        chex.assert_trees_all_close(grad(jnp.bfloat16), want, atol=2e-2, rtol=2e-2)

    def test_long_range_decay_reference_values(self):
        values = rope_reference.long_range_decay([0, 1, 16, 64, 256], dim=128)
        np.testing.assert_allclose(values, [32.5, 31.538, 15.775, 10.090, 6.543], atol=6e-4)

    @parameterized.product(layout=rope_layouts.LAYOUTS, rotary_dim=[None, 8])
    def test_rotation_rotates_q_and_k_at_their_positions(self, layout, rotary_dim):
        kw = dict(layout=layout, rotary_dim=rotary_dim, base=500000.0)
        k_positions = jnp.arange(12) * 3 + 40
        rotation = rope.rope_rotation(self.positions, k_positions, **kw)
        chex.assert_trees_all_equal(
            rotation.q(self.q), rope.apply_rope(self.q, self.positions, **kw)
        )
        chex.assert_trees_all_equal(rotation.k(self.k), rope.apply_rope(self.k, k_positions, **kw))
        # Keys default to the queries' positions.
        same = rope.rope_rotation(self.positions, **kw)
        chex.assert_trees_all_equal(same.k(self.k), rope.apply_rope(self.k, self.positions, **kw))

        def scores(shift):
            rotate = rope.rope_rotation(self.positions + shift, k_positions + shift, **kw)
            return jnp.einsum("BLNH,BMNH->BNLM", rotate.q(self.q), rotate.k(self.k))

        chex.assert_trees_all_close(scores(0), scores(12345), atol=2e-5)

    def test_rotation_rejects_a_bad_layout_at_once(self):
        with self.assertRaisesRegex(ValueError, "layout 'pairs'"):
            rope.rope_rotation(self.positions, layout="pairs")

    @parameterized.named_parameters(
        ("odd_head_dim", (2, 4, 1, 7), {}, "head dim 7"),
        ("odd_rotary_dim", (2, 4, 1, 8), {"rotary_dim": 5}, "rotary dim 5"),
        (
            "rotary_dim_too_big",
            (2, 4, 1, 8),
            {"rotary_dim": 10},
            "rotary dim 10 exceeds head dim 8",
        ),
        ("bad_layout", (2, 4, 1, 8), {"layout": "pairs"}, "layout 'pairs'"),
    )
    def test_bad_input(self, shape, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            rope.apply_rope(jnp.zeros(shape), jnp.arange(4), **kwargs)

    def test_positions_length_mismatch(self):
        with self.assertRaisesRegex(ValueError, r"positions of shape \(5,\).*length 12"):
            rope.apply_rope(self.q, jnp.arange(5))


if __name__ == "__main__":
    absltest.main()
