"""Tests for roformer_jax.nn.qk: QK-norm and Llama 4's query temperature against their
formulas in float64 numpy, and in a model (softmax's section, per layer)."""

import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized
from jax.test_util import check_grads

from roformer_jax.nn import qk
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
            check_grads(
                lambda x, s: qk.rms_norm(x, s, eps=1e-6), (x, scale), order=1, modes=("rev",)
            )


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
