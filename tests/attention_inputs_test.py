"""Tests for roformer_jax.nn.attention_inputs: every kind's full form and decode step refuses,
naming it, an input that gave a wrong result without an error (an additive float mask read
inverted, integer q, k, v giving zeros) or an error from deep inside a formula."""

import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_cases import B, L, _qkv

from roformer_jax.nn import attention, attention_step


def _step(step, **kw):
    """A decode step from an empty memory, called as a full form: (q, k, v, **kw) -> out."""
    return lambda q, k, v, **more: step(None, q, k, v, **kw, **more)[0]


FULL_FORMS = (
    ("softmax", attention.softmax_attention),
    ("linear", attention.linear_attention),
    ("cosine", attention.cosine_attention),
)
STEPS = (
    ("softmax_step", _step(attention_step.softmax_attention_step, positions=jnp.arange(L))),
    ("linear_step", _step(attention_step.linear_attention_step)),
    ("cosine_step", _step(attention_step.cosine_attention_step)),
)
FORMS = FULL_FORMS + STEPS
# HF's additive mask: 0 at a real token, a large negative number at padding.
REAL = np.arange(L) < L - 2
ADDITIVE = jnp.asarray(np.where(REAL, 0.0, -1e4)[None].repeat(B, 0), jnp.float32)


class MaskTest(parameterized.TestCase):
    @parameterized.named_parameters(*FORMS)
    def test_a_float_mask_is_refused_as_additive(self, form):
        with self.assertRaisesRegex(
            ValueError,
            r"mask must be bool \[B, M\] \(True = a real token\); got float32: an additive "
            r"mask\? pass mask == 0",
        ):
            form(*_qkv(0), mask=ADDITIVE)

    @parameterized.named_parameters(*FORMS)
    def test_an_integer_mask_is_refused(self, form):
        with self.assertRaisesRegex(ValueError, "got int32: a 1/0 mask"):
            form(*_qkv(0), mask=jnp.ones((B, L), jnp.int32))

    @parameterized.named_parameters(*FULL_FORMS)
    def test_the_bool_mask_the_message_asks_for_hides_the_padding(self, form):
        q, k, v = _qkv(1)
        got = form(q, k, v, mask=ADDITIVE == 0)
        np.testing.assert_allclose(got, form(q, k[:, REAL], v[:, REAL]), atol=1e-6)

    @parameterized.named_parameters(*FORMS)
    def test_a_list_is_refused(self, form):
        with self.assertRaisesRegex(ValueError, "mask must be an array; got list"):
            form(*_qkv(0), mask=[[True] * L] * B)


class QkvTest(parameterized.TestCase):
    @parameterized.named_parameters(*FORMS)
    def test_integers_are_refused(self, form):
        q, k, v = _qkv(0)
        for name, given in (("q", (q.astype(int), k, v)), ("v", (q, k, v.astype(jnp.int32)))):
            with self.assertRaisesRegex(ValueError, f"{name} has dtype int32; .* must be floating"):
                form(*given)

    @parameterized.named_parameters(*FORMS)
    def test_a_list_is_refused(self, form):
        q, k, v = _qkv(0)
        with self.assertRaisesRegex(ValueError, "k must be an array; got list"):
            form(q, k.tolist(), v)


class RotationTest(parameterized.TestCase):
    @parameterized.named_parameters(*FORMS)
    def test_positions_are_not_a_rotation(self, form):
        with self.assertRaisesRegex(
            ValueError, r"rotation must be a Rotation, e.g. rj.rope_rotation\(positions\)"
        ):
            form(*_qkv(0), rotation=jnp.arange(L))


class LogDecayTest(parameterized.TestCase):
    @parameterized.named_parameters(
        *[(name, form, {"causal": True}) for name, form in FULL_FORMS],
        *[(name, form, {}) for name, form in STEPS],  # a step is causal
    )
    def test_a_list_is_refused(self, form, causal):
        with self.assertRaisesRegex(ValueError, "log_decay must be an array; got list"):
            form(*_qkv(0), log_decay=[[0.0]], **causal)


if __name__ == "__main__":
    absltest.main()
