"""Tests for roformer_jax/feature_maps.py: the table of φ and FAVOR+'s random features."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import traces
from absl.testing import absltest, parameterized
from attention_cases import FAVOR_W, L, _call, _mask, _positions, _qkv, _reference

from roformer_jax.nn import attention, feature_maps
from roformer_jax.nn.rope import rope_rotation

H = 8


def _vectors(seed, n, scale=0.5):
    return jnp.asarray(np.random.default_rng(seed).normal(size=(n, H)) * scale, jnp.float32)


@jax.jit
def _favor_estimates(keys, q, k, q_positions, k_positions):
    """Over one draw of W (64 features) per key: φ(q_i)ᵀφ(k_i), and the same with the F
    features rotated by RoPE at q_positions and k_positions (eq. 19). q, k [6, H] -> two
    [keys, 6]. One program for both statistical tests: a vmapped draw compiles for seconds."""
    rotation = rope_rotation(q_positions, k_positions)

    def estimate(key):
        w = feature_maps.orthogonal_gaussian(key, 64, H)
        qf, kf = (feature_maps.favor_features(x, w, False) for x in (q, k))
        qr, kr = rotation.q(qf[None, :, None]), rotation.k(kf[None, :, None])  # [1, 6, 1, F]
        return jnp.sum(qf * kf, axis=-1), jnp.sum(qr * kr, axis=-1)[0, :, 0]

    return jax.vmap(estimate)(keys)


class OrthogonalGaussianTest(parameterized.TestCase):
    @parameterized.parameters(8, 20, 32)  # whole blocks, a cut last block, several blocks
    def test_rows_of_a_block_are_orthogonal(self, num_features):
        w = feature_maps.orthogonal_gaussian(jax.random.key(0), num_features, H)
        chex.assert_shape(w, (num_features, H))
        for start in range(0, num_features, H):
            block = w[start : start + H]
            gram = block @ block.T  # orthogonal rows: diagonal, with the squared norms on it
            chex.assert_trees_all_close(gram, jnp.diag(jnp.diag(gram)), atol=1e-4)
        if num_features > H:  # blocks are drawn independently: not orthogonal to each other
            self.assertGreater(float(jnp.abs(w[:H] @ w[H : 2 * H].T).max()), 0.1)

    def test_rows_are_standard_gaussian_in_distribution(self):
        # Each row ~ N(0, I_H): mean 0, covariance I, |w|² ~ chi-squared with mean H.
        w = np.asarray(feature_maps.orthogonal_gaussian(jax.random.key(1), 64 * 1024, H))
        np.testing.assert_allclose(w.mean(0), 0.0, atol=0.02)
        np.testing.assert_allclose(np.cov(w.T), np.eye(H), atol=0.03)
        np.testing.assert_allclose((w**2).sum(1).mean(), H, rtol=0.01)

    def test_a_function_of_the_key_traced_once_per_shape(self):
        draw = feature_maps.orthogonal_gaussian
        key = jax.random.key(2)
        first = draw(key, 16, H)
        with traces.counted() as traced:  # outside jit too: one program, not its scan anew
            np.testing.assert_array_equal(draw(key, 16, H), first)
        self.assertEqual(sum(traced.values()), 0, traced)
        self.assertFalse(np.array_equal(draw(key, 16, H), draw(jax.random.key(3), 16, H)))

    def test_drawn_in_plain_xla_operations(self):
        # LAPACK's QR, a custom call on XLA's CPU backend, hung the donated train step of a
        # FAVOR+ model (F = 256, H = 64; see feature_maps._orthonormalize).
        lowered = feature_maps.orthogonal_gaussian.lower(jax.random.key(0), 256, 64)
        self.assertNotIn("custom_call", lowered.as_text())


class FavorTest(parameterized.TestCase):
    def test_features_are_positive_and_finite(self):
        w = feature_maps.orthogonal_gaussian(jax.random.key(0), 64, H)
        x, far = _vectors(0, 32, scale=2.0), _vectors(0, 32, scale=8.0)
        for is_query in (False, True):
            features = feature_maps.favor_features(x, w, is_query)
            chex.assert_shape(features, (32, 64))
            self.assertGreater(float(features.min()), 0.0)
            # Far out, the smallest may round to 0 in float32, but nothing overflows.
            chex.assert_tree_all_finite(feature_maps.favor_features(far, w, is_query))
        # Queries lose their largest exponent: at most 1 / √F, reached by one feature each.
        query = feature_maps.favor_features(x, w, True)
        np.testing.assert_allclose(query.max(-1), 64**-0.5, rtol=1e-6)

    def test_the_query_stabilizer_is_one_factor_per_query(self):
        w = feature_maps.orthogonal_gaussian(jax.random.key(1), 32, H)
        x = _vectors(1, 5, scale=2.0)
        ratio = feature_maps.favor_features(x, w, True) / feature_maps.favor_features(x, w, False)
        np.testing.assert_allclose(ratio, ratio[:, :1] * jnp.ones_like(ratio), rtol=1e-5)

    def test_kernel_estimate_is_unbiased(self):
        # E_W[φ(q)ᵀφ(k)] = exp(qᵀk / √H): over 1000 independent draws of W (64 features
        # each), the mean estimate is within 4 standard errors of it for every pair.
        q, k = _vectors(2, 6), _vectors(3, 6)
        keys = jax.random.split(jax.random.key(4), 1000)
        zero = jnp.zeros(6, jnp.int32)
        estimates = np.asarray(_favor_estimates(keys, q, k, zero, zero)[0], np.float64)  # [keys, 6]
        exact = np.exp(np.sum(np.asarray(q) * np.asarray(k), -1) / H**0.5)
        standard_error = estimates.std(0, ddof=1) / len(keys) ** 0.5
        np.testing.assert_array_less(np.abs(estimates.mean(0) - exact), 4 * standard_error)
        np.testing.assert_allclose(estimates.mean(0), exact, rtol=0.03)

    def test_eq19_numerator_is_a_position_factor_blind_to_content(self):
        # Eq. (19) with FAVOR+ rotates pairs of the F random features, pair i by (m - n)θ_i,
        # θ_i = 10000^(-2i/F). The two features of a pair are exchangeable under W, so the
        # pair's cross terms cancel on average: E_W[(R_m φ(q))ᵀ(R_n φ(k))] = exp(qᵀk / √H) ·
        # mean_i cos((m - n)θ_i), softmax's kernel times a factor of the distance alone, not
        # the kernel of the rotated vectors, exp((R_m q)ᵀ(R_n k) / √H) (issue 31).
        q, k = _vectors(8, 6), _vectors(9, 6)
        distance = jnp.asarray([0, 1, 3, 10, 40, 200])
        f = 64
        rotation = rope_rotation(distance + 7, jnp.full((6,), 7))
        keys = jax.random.split(jax.random.key(10), 1000)
        _, numerators = _favor_estimates(keys, q, k, distance + 7, jnp.full((6,), 7))
        estimates = np.asarray(numerators, np.float64)  # [keys, 6]
        theta = 10000.0 ** (-np.arange(0, f, 2) / f)
        factor = np.cos(np.asarray(distance)[:, None] * theta).mean(-1)
        kernel = np.exp(np.sum(np.asarray(q) * np.asarray(k), -1) / H**0.5)
        standard_error = estimates.std(0, ddof=1) / len(keys) ** 0.5
        np.testing.assert_array_less(
            np.abs(estimates.mean(0) - kernel * factor), 4 * standard_error
        )
        qr, kr = rotation.q(q[None, :, None]), rotation.k(k[None, :, None])  # H-dim RoPE
        rope_kernel = np.exp(np.asarray(jnp.sum(qr * kr, -1))[0, :, 0] / H**0.5)
        self.assertGreater(np.max(np.abs(rope_kernel - kernel * factor) / standard_error), 20)

    def test_more_features_estimate_better(self):
        q, k = _vectors(5, 16), _vectors(6, 16)
        exact = jnp.exp(q @ k.T / H**0.5)
        errors = []
        for num_features in (8, 128, 2048):
            w = feature_maps.orthogonal_gaussian(jax.random.key(7), num_features, H)
            qf, kf = (feature_maps.favor_features(x, w, False) for x in (q, k))
            errors.append(float(jnp.abs(qf @ kf.T / exact - 1).mean()))
        self.assertEqual(errors, sorted(errors, reverse=True))
        self.assertLess(errors[-1], 0.02)

    # FAVOR+ (feature_maps.favor_features) as linear attention's φ.
    @parameterized.product(placement=(None, "before_feature_map"), causal=(False, True))
    def test_approximates_softmax_as_features_grow(self, placement, causal):
        # E[φ(q)ᵀφ(k)] = exp(qᵀk / √H), and φ(R q)ᵀφ(R k) estimates softmax + RoPE's kernel:
        # with more random features, linear attention comes closer to softmax attention.
        q, k, v = (0.5 * x for x in _qkv(17))  # small: the estimate's variance grows with |q||k|
        mask = _mask(17)
        rotation = None if placement is None else rope_rotation(jnp.arange(L))
        want = attention.softmax_attention(q, k, v, mask=mask, causal=causal, rotation=rotation)
        errors = []
        for num_features in (8, 128, 2048):
            w = feature_maps.orthogonal_gaussian(jax.random.key(0), num_features, H)
            got = attention.linear_attention(
                q,
                k,
                v,
                mask=mask,
                causal=causal,
                rotation=rotation,
                placement=placement or "numerator",
                feature_map="favor",
                projection=w,
            )
            errors.append(float(jnp.abs(got - want).max()))
        self.assertEqual(errors, sorted(errors, reverse=True), errors)
        self.assertLess(errors[-1], 0.03)

    def test_gradients_equal_the_unstabilized_formula(self):
        # The queries' stabilizer is held constant under differentiation: exact, since it
        # cancels; the reference has none.
        q, k, v = _qkv(18)
        kw = dict(mask=_mask(18), rope="numerator", q_positions=_positions(11, L, batched=False))

        def loss(fn, *args, **extra):
            return jnp.sum(jnp.sin(fn(*args, **kw, feature_map="favor", **extra)))

        call = functools.partial(_call, attention.linear_attention, projection=FAVOR_W)
        got = jax.jit(jax.grad(lambda *a: loss(call, *a), (0, 1, 2)))(q, k, v)
        want = jax.jit(jax.grad(lambda *a: loss(_reference, *a, kind="linear"), (0, 1, 2)))(q, k, v)
        chex.assert_trees_all_close(got, want, atol=1e-4)


class TableTest(absltest.TestCase):
    def test_only_favor_draws(self):
        drawn = {name for name, m in feature_maps.FEATURE_MAPS.items() if m.draw is not None}
        self.assertEqual(drawn, {"favor"})

    def test_deterministic_maps_treat_queries_and_keys_alike(self):
        x = _vectors(8, 4, scale=2.0)
        for name, feature_map in feature_maps.FEATURE_MAPS.items():
            if feature_map.draw is None:
                q, k = feature_maps.query_and_key_maps(name, None)
                np.testing.assert_array_equal(q(x), k(x))

    def test_check_names_what_is_missing(self):
        with self.assertRaisesRegex(ValueError, "'favor' is random: pass projection="):
            feature_maps.check("favor", None, H)
        with self.assertRaisesRegex(ValueError, "'elu' draws nothing"):
            feature_maps.check("elu", jnp.zeros((4, H)), H)
        with self.assertRaisesRegex(ValueError, r"shape \(4, 6\); expected \[F, 8\]"):
            feature_maps.check("favor", jnp.zeros((4, 6)), H)
        with self.assertRaisesRegex(ValueError, "feature_map='tanh'"):
            feature_maps.check("tanh", None, H)


if __name__ == "__main__":
    absltest.main()
