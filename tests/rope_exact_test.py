"""Tests for roformer_jax/nn/_rope_exact.py, the exact path of `rope.apply_rope` (its default),
with the phase it reads (rope_phase): precision far out against the float64 reference, cos and
sin within one ulp, the bf16 bit casts and the custom derivatives."""

import chex
import grid
import jax
import jax.numpy as jnp
import numpy as np
import scalings
import tolerance
from absl.testing import absltest, parameterized

from roformer_jax.nn import _rope_exact, rope, rope_layouts, rope_phase, rope_reference

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


class ExactRopeTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        keys = jax.random.split(jax.random.key(0), 2)
        self.q = jax.random.normal(keys[0], (2, 12, 3, 16))  # [B, L, N, H]
        self.k = jax.random.normal(keys[1], (2, 12, 3, 16))
        self.positions = jnp.arange(12)

    @parameterized.parameters(
        *grid.covering(
            "rope_efficient_float32",
            extra=2,
            layout=rope_layouts.LAYOUTS,
            rotary_dim=[None, 4, 16],
            batched_positions=[False, True],
        )
    )
    def test_equals_dense_and_complex_float32(self, layout, rotary_dim, batched_positions):
        positions = jnp.array([3, 0, 7, 100, 5000, -4, 12, 13, 14, 9, 70000, 2])
        if batched_positions:
            positions = jnp.stack([positions, positions[::-1] + 11])
        kw = dict(layout=layout, rotary_dim=rotary_dim)
        out = rope.apply_rope(self.q, positions, **kw)
        atol = _float32_bound(self.q, positions)  # ~2e-5 here; a float32 m·θ is ~4e-3 off
        for reference in (rope_reference.apply_rope_dense, rope_reference.apply_rope_complex):
            chex.assert_trees_all_close(out, reference(self.q, positions, **kw), atol=atol, rtol=0)

    @parameterized.parameters("interleaved", "half")
    def test_equals_dense_and_complex_float64(self, layout):
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

    @parameterized.parameters(
        ({"rope_type": "linear", "factor": 4.0},),
        ({"rope_type": "ntk", "factor": 8.0},),
        (scalings.YARN,),
        (scalings.LLAMA3,),
    )
    def test_scaled_exact_phase_at_a_million(self, scaling):
        x = jax.random.normal(jax.random.key(0), (1, 16, 2, 64))  # [B, L, N, H]
        positions = jnp.arange(16) + 1_000_000 - 16
        out = rope.apply_rope(x, positions, base=500000.0, scaling=scaling)
        inv_freq, attention = rope.scaled_frequencies(
            64, base=500000.0, scaling=scaling, dtype=np.float64
        )
        want = scalings.reference_rope(x, positions, inv_freq, attention)
        self.assertLess(float(np.max(np.abs(np.asarray(out, np.float64) - want))), 1e-5)

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
            cos, sin = _rope_exact.cos_sin_turns(jnp.asarray(turns))
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

    @parameterized.parameters(0.0, -1e4, float("nan"))
    def test_phase_needs_a_positive_base(self, base):
        # Decimal would raise InvalidOperation or give a complex power.
        with self.assertRaisesRegex(ValueError, "base=.* must be positive and finite"):
            rope_phase.rotation_turns(jnp.arange(4), 8, base=base)

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
        chex.assert_trees_all_equal(_rope_exact.narrow(y, jnp.bfloat16), y.astype(jnp.bfloat16))
        b = y.astype(jnp.bfloat16)
        chex.assert_trees_all_equal(_rope_exact.widen(b, jnp.float32), b.astype(jnp.float32))

    @parameterized.parameters("interleaved", "half")
    def test_gradient_with_respect_to_floating_positions(self, layout):
        positions = jnp.arange(12) * 0.5 + 0.25
        score = lambda p: jnp.sum(rope.apply_rope(self.q, p, layout=layout) * self.k)  # noqa: E731
        got = jax.jit(jax.grad(score))(positions)  # one program, not each primitive's
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
    def test_bfloat16_gradients_follow_float32(self, layout):
        # The bf16 path widens and narrows through integer bit casts, which alone have a zero
        # derivative: q and k of a bf16 model then got no gradient at all.
        def grad(dtype):
            loss = lambda x: jnp.sum(  # noqa: E731
                rope.apply_rope(x, self.positions + 5, layout=layout).astype(jnp.float32) * self.k
            )
            # Jitted: op by op, the backward pass compiled each of its primitives on its own.
            return jax.jit(jax.grad(loss))(self.q.astype(dtype)).astype(jnp.float32)

        want = grad(jnp.float32)
        self.assertGreater(float(jnp.abs(want).max()), 0.1)
        chex.assert_trees_all_close(grad(jnp.bfloat16), want, atol=2e-2, rtol=2e-2)


if __name__ == "__main__":
    absltest.main()
