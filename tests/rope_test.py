"""Tests for roformer_jax/nn/rope.py: apply_rope's two paths (exact=False, the formula as
written; exact=True, the default, _rope_exact.py) against each other and against the reference
that shares no code with either (rope_reference), their properties, scaling and xPos."""

import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
import scalings
import tolerance
from absl.testing import absltest, parameterized
from jax.test_util import check_grads

from roformer_jax.nn import rope, rope_layouts, rope_reference, rope_scaling

PATHS = dict(exact=[True, False])


def _plain_bound(x, positions, attention=1.0):
    """Worst-case |apply_rope(x, exact=False) - exact| in float32 (tolerance.py's model).

    The angle m·θ_i: θ_i rounded to float32, then the product (2 roundings of a value up to
    |m|·θ_0 = |m|). jnp.cos and jnp.sin: 2 ulp each (XLA's are within one; one more for the
    attention factor). The rotation's products and sum: 3 roundings, and as many in a float32
    reference. All of it scales with a pair's |x_a| + |x_b| <= 2·max|x|.
    """
    angle = tolerance.gamma(2) * float(np.abs(positions).max())
    per_pair = angle + 2 * tolerance.gamma(2) + 2 * tolerance.gamma(3)
    return 2 * float(np.abs(x).max()) * attention * per_pair


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

    @parameterized.product(layout=rope_layouts.LAYOUTS, **PATHS)
    def test_position_zero_is_identity(self, layout, exact):
        out = rope.apply_rope(self.q, jnp.zeros(12, jnp.int32), layout=layout, exact=exact)
        chex.assert_trees_all_equal(out, self.q)

    @parameterized.product(layout=rope_layouts.LAYOUTS, **PATHS)
    def test_preserves_norms(self, layout, exact):
        out = rope.apply_rope(self.q, self.positions * 997, layout=layout, exact=exact)
        chex.assert_trees_all_close(
            jnp.linalg.norm(out, axis=-1), jnp.linalg.norm(self.q, axis=-1), rtol=1e-5
        )

    @parameterized.product(
        layout=rope_layouts.LAYOUTS, rotary_dim=[None, 8], base=[10000.0, 500000.0]
    )
    def test_scores_depend_only_on_relative_position(self, layout, rotary_dim, base):
        # The exact path only: the plain one's float32 m·θ_i is ~3e-3 rad off at 10^5.
        shift = int(jax.random.randint(jax.random.key(1), (), 1, 100_000))
        kw = dict(layout=layout, rotary_dim=rotary_dim, base=base)

        def scores(positions):
            q = rope.apply_rope(self.q, positions, **kw)
            k = rope.apply_rope(self.k, positions, **kw)
            return jnp.einsum("BLNH,BMNH->BNLM", q, k)

        chex.assert_trees_all_close(
            scores(self.positions), scores(self.positions + shift), atol=2e-5
        )

    @parameterized.parameters(*PATHS["exact"])
    def test_features_past_rotary_dim_pass_through(self, exact):
        out = rope.apply_rope(self.q, self.positions + 5, rotary_dim=6, exact=exact)
        chex.assert_trees_all_equal(out[..., 6:], self.q[..., 6:])
        self.assertGreater(float(jnp.abs(out[..., :6] - self.q[..., :6]).max()), 0.1)

    @parameterized.parameters(*PATHS["exact"])
    def test_layout_without_heads_axis(self, exact):
        x = self.q[:, :, 0, :]  # [B, L, H]
        chex.assert_trees_all_close(
            rope.apply_rope(x, self.positions, seq_axis=-2, exact=exact),
            rope.apply_rope(self.q, self.positions, exact=exact)[:, :, 0, :],
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

    @parameterized.product(layout=rope_layouts.LAYOUTS, **PATHS)
    def test_bfloat16_in_bfloat16_out(self, layout, exact):
        x = self.q.astype(jnp.bfloat16)
        kw = dict(layout=layout, exact=exact)
        out = rope.apply_rope(x, self.positions + 100, **kw)
        chex.assert_type(out, jnp.bfloat16)
        # The rotation runs in float32 and rounds once to bfloat16, at the end.
        widened = rope.apply_rope(x.astype(jnp.float32), self.positions + 100, **kw)
        chex.assert_trees_all_equal(out, widened.astype(jnp.bfloat16))
        reference = rope.apply_rope(self.q, self.positions + 100, **kw)
        chex.assert_trees_all_close(out.astype(jnp.float32), reference, atol=0.05)

    @parameterized.parameters(*PATHS["exact"])
    def test_negative_positions_invert_positive(self, exact):
        forward = rope.apply_rope(self.q, self.positions + 12345, exact=exact)
        back = rope.apply_rope(forward, -(self.positions + 12345), exact=exact)
        chex.assert_trees_all_close(back, self.q, atol=1e-5)

    @parameterized.parameters(*PATHS["exact"])
    def test_floating_positions(self, exact):
        chex.assert_trees_all_close(
            rope.apply_rope(self.q, self.positions.astype(jnp.float32) + 0.0, exact=exact),
            rope.apply_rope(self.q, self.positions, exact=exact),
            atol=1e-5,
        )

    @parameterized.product(layout=rope_layouts.LAYOUTS, **PATHS)
    def test_jit_equals_no_jit(self, layout, exact):
        fn = lambda x, p: rope.apply_rope(x, p, layout=layout, rotary_dim=8, exact=exact)  # noqa: E731
        chex.assert_trees_all_close(
            jax.jit(fn)(self.q, self.positions + 77), fn(self.q, self.positions + 77), atol=1e-6
        )

    @parameterized.product(layout=rope_layouts.LAYOUTS, **PATHS)
    def test_gradients(self, layout, exact):
        q, positions = self.q[:1, :4], jnp.arange(4) + 3
        kw = dict(order=2, modes=["fwd", "rev"], atol=1e-2, rtol=1e-2)
        check_grads(lambda x: rope.apply_rope(x, positions, layout=layout, exact=exact), (q,), **kw)
        check_grads(
            lambda p: rope.apply_rope(q, p, layout=layout, exact=exact),
            (positions * 0.5 + 0.25,),
            **kw,
        )

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

    @parameterized.product(
        case=[
            ((12, 3, 16), (2, 12)),  # a batch that x does not have
            ((2, 12, 3, 16), (1, 2, 12)),  # more leading axes than x
            ((2, 12, 3, 16), (3, 12)),  # another batch
        ],
        exact=PATHS["exact"],
    )
    def test_positions_must_keep_x_shape(self, case, exact):
        x_shape, positions_shape = case
        with self.assertRaisesRegex(ValueError, "leading axes are those of x before L"):
            rope.apply_rope(jnp.ones(x_shape), jnp.zeros(positions_shape, int), exact=exact)

    @parameterized.parameters(*PATHS["exact"])
    def test_positions_of_the_batch_or_one_broadcast(self, exact):
        for positions in (self.positions, self.positions[None], jnp.stack([self.positions] * 2)):
            out = rope.apply_rope(self.q, positions, exact=exact)
            chex.assert_trees_all_equal(out, rope.apply_rope(self.q, self.positions, exact=exact))

    @parameterized.parameters(*PATHS["exact"])
    def test_refuses_integer_x(self, exact):
        with self.assertRaisesRegex(ValueError, "x has dtype int32; RoPE rotates floating-point"):
            rope.apply_rope(self.q.astype(jnp.int32), self.positions, exact=exact)

    def test_rotary_dim_must_be_an_int(self):
        with self.assertRaisesRegex(ValueError, "rotary dim 8.0 is not an int"):
            rope.apply_rope(self.q, self.positions, rotary_dim=8.0)
        chex.assert_trees_all_equal(
            rope.apply_rope(self.q, self.positions, rotary_dim=np.int64(8)),
            rope.apply_rope(self.q, self.positions, rotary_dim=8),
        )

    @parameterized.product(base=[0.0, -1e4, float("inf"), float("nan")], exact=PATHS["exact"])
    def test_base_must_be_positive_and_finite(self, base, exact):
        with self.assertRaisesRegex(ValueError, "base=.* must be positive and finite"):
            rope.apply_rope(self.q, self.positions, base=base, exact=exact)

    def test_frequencies_need_a_positive_base(self):
        with self.assertRaisesRegex(ValueError, "base=0 must be positive and finite"):
            rope.rope_frequencies(16, base=0)


class PathsTest(parameterized.TestCase):
    """exact=False, the formula as written, against exact=True where float32 m·θ_i is exact
    enough (small positions), and both against the reference."""

    def setUp(self):
        super().setUp()
        self.x = jax.random.normal(jax.random.key(0), (2, 12, 3, 16))  # [B, L, N, H]
        self.positions = jnp.array([3, 0, 7, 100, 50, -4, 12, 13, 14, 9, 70, 2])

    @parameterized.product(
        layout=rope_layouts.LAYOUTS, rotary_dim=[None, 6], batched_positions=[False, True]
    )
    def test_paths_agree_and_equal_dense_and_complex_float32(
        self, layout, rotary_dim, batched_positions
    ):
        positions = self.positions
        if batched_positions:
            positions = jnp.stack([positions, positions[::-1] + 11])
        kw = dict(layout=layout, rotary_dim=rotary_dim)
        plain = rope.apply_rope(self.x, positions, exact=False, **kw)
        exact = rope.apply_rope(self.x, positions, **kw)
        atol = _plain_bound(self.x, positions)  # ~2e-5 here, above the exact path's bound
        chex.assert_trees_all_close(plain, exact, atol=atol, rtol=0)
        for reference in (rope_reference.apply_rope_dense, rope_reference.apply_rope_complex):
            want = reference(self.x, positions, **kw)
            chex.assert_trees_all_close([plain, exact], [want, want], atol=atol, rtol=0)

    @parameterized.parameters("interleaved", "half")
    def test_paths_equal_dense_and_complex_float64(self, layout):
        with jax.enable_x64(True):
            x = jnp.asarray(np.asarray(self.x), jnp.float64)
            want = rope_reference.apply_rope_complex(x, self.positions, layout=layout)
            for exact in PATHS["exact"]:
                out = rope.apply_rope(x, self.positions, layout=layout, exact=exact)
                self.assertEqual(out.dtype, jnp.float64)
                chex.assert_trees_all_close(out, want, atol=1e-12, rtol=0)

    @parameterized.parameters(
        ({"rope_type": "linear", "factor": 4.0},),
        (scalings.YARN,),
        (scalings.LLAMA3,),
    )
    def test_scaled_paths_agree_and_equal_the_reference(self, scaling):
        x = jax.random.normal(jax.random.key(1), (1, 12, 2, 64))  # [B, L, N, H]
        kw = dict(base=500000.0, scaling=scaling)
        plain = rope.apply_rope(x, self.positions, exact=False, **kw)
        exact = rope.apply_rope(x, self.positions, **kw)
        inv_freq, attention = rope.scaled_frequencies(64, **kw, dtype=np.float64)
        want = scalings.reference_rope(x, self.positions, inv_freq, attention)
        atol = _plain_bound(x, self.positions, attention)
        chex.assert_trees_all_close([plain, exact], [want, want], atol=atol, rtol=0)
        # Half the head, in the half layout: the two paths against each other.
        kw.update(rotary_dim=32, layout="half")
        chex.assert_trees_all_close(
            rope.apply_rope(x, self.positions, exact=False, **kw),
            rope.apply_rope(x, self.positions, **kw),
            atol=atol,
            rtol=0,
        )

    @parameterized.parameters("interleaved", "half")
    def test_bfloat16_paths_agree_within_one_rounding(self, layout):
        x = self.x.astype(jnp.bfloat16)
        plain, exact = (
            rope.apply_rope(x, self.positions, layout=layout, exact=exact).astype(jnp.float32)
            for exact in (False, True)
        )
        # Their float32 rotations differ by ~1e-5 and each rounds once to bfloat16 (2^-8).
        ulp = 2.0**-8 * np.abs(np.asarray(exact)) + 1e-5
        self.assertTrue(bool((jnp.abs(plain - exact) <= ulp).all()))

    def test_plain_path_loses_precision_far_out(self):
        # Why exact=True is the default: at m = 10^6 float32 m·θ_i is ~0.03 rad off.
        positions = jnp.arange(12) + 1_000_000
        plain = rope.apply_rope(self.x, positions, exact=False)
        exact = rope.apply_rope(self.x, positions)
        self.assertGreater(float(jnp.abs(plain - exact).max()), 1e-3)


class ScalingTest(parameterized.TestCase):
    """apply_rope with HF's rope scaling: the attention factor, the lengths, rope_rotation."""

    def setUp(self):
        super().setUp()
        self.x = jax.random.normal(jax.random.key(0), (1, 16, 2, 64))  # [B, L, N, H]

    @parameterized.parameters(*PATHS["exact"])
    def test_attention_factor_scales_cos_and_sin(self, exact):
        positions = jnp.arange(16) * 37
        yarn = scalings.YARN
        plain = rope.apply_rope(
            self.x, positions, scaling=dict(yarn, attention_factor=1.0), exact=exact
        )
        scaled = rope.apply_rope(self.x, positions, scaling=yarn, exact=exact)
        chex.assert_trees_all_close(scaled, plain * (0.1 * math.log(8) + 1), atol=1e-5)

    @parameterized.parameters(
        {"rope_type": "default"}, {"rope_type": "proportional", "factor": 1.0}
    )
    def test_no_scaling_and_plain_scaling_agree(self, **scaling):
        # Both spellings of plain RoPE take its exact phases, bit for bit.
        self.assertTrue(rope_scaling.is_plain(scaling))
        positions = jnp.arange(16) * 9973
        chex.assert_trees_all_equal(
            rope.apply_rope(self.x, positions, scaling=scaling), rope.apply_rope(self.x, positions)
        )
        half = {"rope_type": "proportional", "partial_rotary_factor": 0.5}
        self.assertFalse(rope_scaling.is_plain(half))  # zero frequencies past the half

    @parameterized.parameters(*PATHS["exact"])
    def test_dynamic_chooses_by_length(self, exact):
        params = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 8}
        positions = jnp.arange(16)
        # L = 16 > 8: scaled; an explicit seq_len within L₀: plain.
        ntk = {"rope_type": "ntk", "factor": 4.0 * 2 - 3}
        chex.assert_trees_all_close(
            rope.apply_rope(self.x, positions, scaling=params, exact=exact),
            rope.apply_rope(self.x, positions, scaling=ntk, exact=exact),
            atol=1e-6,
        )
        chex.assert_trees_all_close(
            rope.apply_rope(self.x, positions, scaling=params, seq_len=8, exact=exact),
            rope.apply_rope(self.x, positions, exact=exact),
            atol=1e-6,
        )

    # Each is refused on both paths, with the same message: they check the same things.
    @parameterized.product(
        case=[
            ({"rope_type": "default", "rope_theta": 5e5}, "'rope_theta' 500000.0 disagrees"),
            ({"rope_typ": "linear", "factor": 4.0}, "no 'rope_type' or 'type' given"),
            ({"rope_type": "proportional", "factor": 0}, "'factor' must be a float > 0"),
            ("linear", "is not a dictionary"),
            (
                {"rope_type": "default", "partial_rotary_factor": 0.5},
                "rotates 32 features of head dim 64, but rotary_dim is 64: pass rotary_dim=32",
            ),
            ({"partial_rotary_factor": 0.0}, "rotate nothing"),
            ({"partial_rotary_factor": 2.0}, r"a fraction in \[0, 1\], got 2.0"),
            ({"mrope_section": [8, 12, 11]}, "adds up to 31 pairs; rotary dim 64 rotates 32"),
        ],
        exact=PATHS["exact"],
    )
    def test_both_paths_refuse_a_bad_scaling(self, case, exact):
        scaling, message = case
        with self.assertRaisesRegex(ValueError, message):
            rope.apply_rope(self.x, jnp.arange(16), scaling=scaling, exact=exact)

    @parameterized.parameters(*PATHS["exact"])
    def test_proportional_rotates_the_whole_head(self, exact):
        # Its fraction is in its frequencies (zero past it), not in rotary_dim.
        scaling = {"rope_type": "proportional", "partial_rotary_factor": 0.5}
        with self.assertRaisesRegex(ValueError, "but rotary_dim is 32: pass rotary_dim=64"):
            rope.apply_rope(self.x, jnp.arange(16), scaling=scaling, rotary_dim=32, exact=exact)
        rope.apply_rope(self.x, jnp.arange(16), scaling=scaling, exact=exact)

    @parameterized.parameters(*PATHS["exact"])
    def test_keys_that_agree_change_nothing(self, exact):
        positions = jnp.arange(16) * 9973
        plain = rope.apply_rope(self.x, positions, exact=exact)
        half = rope.apply_rope(self.x, positions, rotary_dim=32, exact=exact)
        for scaling, rotary_dim, want in [
            ({"rope_type": "default", "rope_theta": 10000.0}, None, plain),
            ({"rope_theta": 10000.0, "partial_rotary_factor": 0.5}, 32, half),  # a layer's
            # M-RoPE reads positions of one axis as every axis alike: RoPE itself (HF's text).
            ({"mrope_section": [8, 12, 12], "mrope_interleaved": True}, None, plain),
        ]:
            got = rope.apply_rope(
                self.x, positions, scaling=scaling, rotary_dim=rotary_dim, exact=exact
            )
            chex.assert_trees_all_equal(got, want)

    def test_rotation_passes_scaling_through(self):
        rotation = rope.rope_rotation(jnp.arange(16), scaling=scalings.YARN)
        chex.assert_trees_all_equal(
            rotation.q(self.x), rope.apply_rope(self.x, jnp.arange(16), scaling=scalings.YARN)
        )


class XposTest(parameterized.TestCase):
    def test_scores_are_rope_times_the_decay_and_ignore_a_shift(self):
        keys = jax.random.split(jax.random.key(0), 2)
        q = jax.random.normal(keys[0], (1, 12, 2, 16))  # [B, L, N, H]
        k = jax.random.normal(keys[1], (1, 12, 2, 16))
        positions = jnp.arange(12) * 50

        def scores(shift):
            rotation = rope.xpos_rotation(positions + shift, scale_base=64.0)
            return jnp.einsum("BLNH,BMNH->BNLM", rotation.q(q), rotation.k(k))

        chex.assert_trees_all_close(scores(100_000), scores(0), rtol=2e-4, atol=2e-4)
        # Written out: Σ_i ζ_i^((m-n)/γ) (RoPE's pair-i score) over pairs.
        zeta = (np.arange(0, 16, 2) / 16 + 0.4) / 1.4
        plain = rope.rope_rotation(positions)
        rq, rk = np.asarray(plain.q(q), np.float64), np.asarray(plain.k(k), np.float64)
        pairs = (rq[:, :, None] * rk[:, None, :]).reshape(1, 12, 12, 2, 8, 2).sum(-1)
        distance = np.asarray(positions)[:, None] - np.asarray(positions)[None, :]
        decay = zeta ** (distance[..., None] / 64.0)  # [L, M, R/2]
        want = np.einsum("blmni,lmi->bnlm", pairs, decay)
        chex.assert_trees_all_close(scores(0), want, rtol=2e-4, atol=2e-4)

    @parameterized.parameters(0.0, -64.0, float("nan"), float("inf"))
    def test_scale_base_must_be_positive_and_finite(self, scale_base):
        with self.assertRaisesRegex(ValueError, "scale_base=.* must be positive and finite"):
            rope.xpos_rotation(jnp.arange(4), scale_base=scale_base)
        with self.assertRaisesRegex(ValueError, "scale_base=.* must be positive and finite"):
            rope.xpos_decay(jnp.arange(4), 8, scale_base=scale_base)


if __name__ == "__main__":
    absltest.main()
