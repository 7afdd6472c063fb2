"""Tests for roformer_jax.nn.qk: QK-norm and Llama 4's query temperature against their
formulas in float64 numpy; through softmax's `prepare` then its full form and decode step
(float64 to 1e-12 and float32, grouped heads, packed rows, gradients); in a model (softmax's
section, per layer)."""

import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized
from attention_cases import softmax_reference
from jax.test_util import check_grads

from roformer_jax.nn import attention, attention_sections, attention_step, qk, segments
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS
from roformer_jax.nn.model import RoFormer


def _x(seed, dtype=jnp.float32):
    return jnp.asarray(np.random.default_rng(seed).standard_normal((2, 5, 3, 8)), dtype)


class RmsNormTest(parameterized.TestCase):
    @parameterized.parameters(jnp.float32, jnp.float64)
    def test_equals_the_formula(self, dtype):
        with jax.enable_x64(dtype == jnp.float64):
            x = _x(0, dtype)
            scale = jnp.asarray(np.linspace(0.5, 2.0, 8), dtype)
            got = qk.rms_norm(x, scale, eps=1e-6)
            self.assertEqual(got.dtype, dtype)
        xn = np.asarray(x, np.float64)
        want = xn / np.sqrt((xn**2).mean(-1, keepdims=True) + 1e-6) * np.asarray(scale)
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-12 if dtype == jnp.float64 else 2e-6)

    def test_gradients(self):
        with jax.enable_x64(True):
            x, scale = _x(1, jnp.float64), jnp.linspace(0.5, 2.0, 8)
            norm = jax.jit(lambda x, s: qk.rms_norm(x, s, eps=1e-6))
            check_grads(norm, (x, scale), order=1, modes=("rev",))


class QueryTemperatureTest(absltest.TestCase):
    def test_equals_the_formula(self):
        positions = np.arange(0, 40000, 7)
        got = qk.query_temperature(positions, attn_scale=0.1, floor_scale=8192.0)
        want = 1.0 + 0.1 * np.log(np.floor((positions + 1) / 8192.0) + 1.0)
        np.testing.assert_allclose(got, want, rtol=1e-6)
        self.assertEqual(float(got[0]), 1.0)


class InTheModelTest(parameterized.TestCase):
    def _model(self, **softmax):
        cfg = tiny.model_config(
            num_layers=2,
            causal=True,
            position="none",
            sections={"softmax": {"layer_types": ("nope", "full"), **softmax}},
        )
        return RoFormer(cfg)

    def test_qk_norm_scales_are_parameters_of_their_layers(self):
        model = self._model(by_type={"full": {"qk_norm": True}})
        ids = jnp.arange(12).reshape(2, 6) % 50
        params = model.init(jax.random.key(0), ids)["params"]["encoder"]
        self.assertNotIn("q_norm", params["layer_0"]["attention"])
        for name in ("q_norm", "k_norm"):
            np.testing.assert_array_equal(params["layer_1"]["attention"][name], np.ones(16))

    def test_the_temperature_starts_at_floor_scale(self):
        # floor_scale 4: queries at positions 0-2 keep temperature 1, later ones do not.
        ids = jnp.arange(12).reshape(2, 6) % 50
        plain = self._model()
        hot = self._model(by_type={"nope": {"attn_scale": 5.0, "floor_scale": 4.0}})
        variables = plain.init(jax.random.key(0), ids)
        a, b = (m.apply(variables, ids).logits for m in (plain, hot))
        np.testing.assert_array_equal(a[:, :3], b[:, :3])
        self.assertTrue(np.all(np.abs(a[:, 3:] - b[:, 3:]).max(-1) > 1e-6))


if __name__ == "__main__":
    absltest.main()


class PreparedSoftmaxTest(parameterized.TestCase):
    """Softmax's `prepare` (QK-norm, the temperature) then its full form and decode step,
    against numpy in float64 with grouped heads and packed rows (positions per segment)."""

    B, L, N, K, H = 2, 7, 4, 2, 8
    SEGMENTS = np.asarray([[0, 0, 0, 1, 1, 1, 1], [2, 2, 2, 2, 2, 2, 2]])
    SETTINGS = dict(qk_norm=True, attn_scale=0.5, floor_scale=2.0)

    def _inputs(self, dtype):
        rng = np.random.default_rng(3)
        shapes = ((self.B, self.L, self.N, self.H), *[(self.B, self.L, self.K, self.H)] * 2)
        q, k, v = (jnp.asarray(rng.standard_normal(s), dtype) for s in shapes)
        scales = {
            n: jnp.asarray(rng.uniform(0.5, 2.0, self.H), dtype) for n in ("q_norm", "k_norm")
        }
        return q, k, v, scales

    def _prepare(self, q, k, positions, scales):
        cfg = tiny.model_config(num_heads=self.N, hidden_size=self.N * self.H)
        section = attention_sections.SoftmaxSection(**self.SETTINGS)
        kind = ATTENTION_KINDS["softmax"]
        return kind.prepare(section, cfg, 0, q, k, positions, lambda n, i, s: scales[n])

    def _want(self, q, k, v, positions, scales, visible):
        def norm(x, scale):
            x = np.asarray(x, np.float64)
            return x / np.sqrt((x**2).mean(-1, keepdims=True) + 1e-6) * np.asarray(scale)

        temp = 1.0 + 0.5 * np.log(np.floor((np.asarray(positions) + 1) / 2.0) + 1.0)
        q = norm(q, scales["q_norm"]) * temp[..., None, None]
        return softmax_reference(q, norm(k, scales["k_norm"]), v, visible)

    def test_full_form_and_steps_equal_numpy(self):
        positions = segments.segment_positions(self.SEGMENTS)
        with jax.enable_x64(True):
            q, k, v, scales = self._inputs(jnp.float64)
            qp, kp = self._prepare(q, k, positions, scales)
            got = attention.softmax_attention(
                qp, kp, v, causal=True, segment_ids=jnp.asarray(self.SEGMENTS)
            )
            same = self.SEGMENTS[:, None, :, None] == self.SEGMENTS[:, None, None, :]
            visible = np.tril(np.ones((self.L, self.L), bool)) & same
            want = self._want(q, k, v, positions, scales, visible)
            np.testing.assert_allclose(got, want, rtol=0, atol=1e-12)
            # One sequence per row in the decode step: positions 0 .. L - 1.
            positions = jnp.arange(self.L)
            qp, kp = self._prepare(q, k, positions, scales)
            want = self._want(q, k, v, positions, scales, np.tril(np.ones((self.L,) * 2, bool)))
            cache, outs = None, []
            for part in (slice(0, 4), *(slice(i, i + 1) for i in range(4, self.L))):
                out, cache = attention_step.softmax_attention_step(
                    cache,
                    qp[:, part],
                    kp[:, part],
                    v[:, part],
                    positions=positions[part],
                    capacity=self.L,
                )
                outs.append(out)
            np.testing.assert_allclose(jnp.concatenate(outs, 1), want, rtol=0, atol=1e-12)

    def test_gradients(self):
        with jax.enable_x64(True):
            q, k, v, scales = self._inputs(jnp.float64)

            def f(q, k, v, qs, ks):
                qp, kp = self._prepare(q, k, jnp.arange(self.L), {"q_norm": qs, "k_norm": ks})
                return attention.softmax_attention(qp, kp, v, causal=True)

            args = (q, k, v, scales["q_norm"], scales["k_norm"])
            check_grads(jax.jit(f), args, order=1, modes=("rev",), atol=1e-6, rtol=1e-6)

    def test_float32(self):
        q, k, v, scales = self._inputs(jnp.float32)
        qp, kp = self._prepare(q, k, jnp.arange(self.L), scales)
        got = attention.softmax_attention(qp, kp, v, causal=True)
        self.assertEqual(got.dtype, jnp.float32)
        want = self._want(q, k, v, np.arange(self.L), scales, np.tril(np.ones((self.L,) * 2, bool)))
        np.testing.assert_allclose(got, want, rtol=0, atol=1e-5)
