"""Tests for roformer_jax/nn/gates.py: the decay gates of attention_sections.GateSection in the
model (FoX's forget and output gates, RetNet's fixed decay), with every kind and position."""

import dataclasses
from unittest import mock

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from jax.test_util import check_grads
from model_cases import V, _config, _count, _init, _inputs

from roformer_jax.nn import attention, attention_sections, gates, model_config
from roformer_jax.nn import model as model_lib

# Each gate with each kind, and with positions or without (FoX without positions, FoX +
# RoPE, retention + RoPE in eq. 19's numerator).
GATED = [
    dict(testcase_name="fox_none", position="none", attention="softmax", gate="learned"),
    dict(testcase_name="fox_rope", position="rope", attention="softmax", gate="learned"),
    dict(testcase_name="retention", position="rope", attention="linear", gate="fixed"),
    dict(testcase_name="cosine_learned", position="xpos", attention="cosine", gate="learned"),
]


def _gated(position, attention, gate, **section):
    sections = {attention: {"gate": gate, **section}}
    return _config(position=position, attention=attention, causal=True, sections=sections)


class GateTest(parameterized.TestCase):
    """The decay gates of attention_sections.GateSection in the model."""

    @parameterized.named_parameters(*GATED)
    def test_causal_and_gated(self, **gate):
        model, variables = _init(_gated(**gate))
        ids, types = _inputs()
        changed = ids.at[:, 5:].set((ids[:, 5:] + 1) % V)
        one, two = (model.apply(variables, x, token_type_ids=types).logits for x in (ids, changed))
        chex.assert_trees_all_close(one[:, :5], two[:, :5], atol=1e-5)
        ungated = dataclasses.replace(model.config, sections={})
        plain = model_lib.RoFormer(ungated).apply(
            {"params": jax.tree.map(lambda x: x, variables["params"])}, ids, token_type_ids=types
        )
        # The gate changes what the model computes.
        self.assertGreater(float(jnp.max(jnp.abs(one - plain.logits))), 1e-3)

    def test_parameters_of_each_gate(self):
        # FoX's forget gate: D x N and N biases; its output gate D x D; RetNet's: none.
        d, n, layers = 64, 4, _config().num_layers
        base = _count(_init(_config(causal=True))[1])
        for gate, output_gate, extra in (
            ("fixed", False, 0),
            ("learned", False, d * n + n),
            ("learned", True, d * n + n + d * d),
            ("none", True, d * d),
        ):
            config = _gated("rope", "softmax", gate, output_gate=output_gate)
            extra *= layers
            self.assertEqual(_count(_init(config)[1]) - base, extra, (gate, output_gate))

    def test_every_gate_is_made(self):
        self.assertEqual(set(gates.GATE_MAKERS), set(attention_sections.GATES) - {"none"})

    def test_a_gate_needs_a_causal_model(self):
        with self.assertRaisesRegex(ValueError, r"sections.softmax.gate='learned' .* causal"):
            dataclasses.replace(_gated("rope", "softmax", "learned"), causal=False)

    def test_learned_gate_starts_as_fox_and_is_trained(self):
        # FoX's initialization: w ~ N(0, 0.02²), b = 0, so f_t = σ(~0) ~ 1/2. The loss
        # reaches w and b, finitely.
        config = _gated("none", "softmax", "learned")
        model = model_lib.RoFormer(config)
        ids, _ = _inputs()
        variables = model.init(jax.random.key(0), ids)
        gate = variables["params"]["encoder"]["layer_0"]["attention"]["forget_gate"]
        np.testing.assert_array_equal(gate["bias"], 0.0)
        self.assertLess(float(jnp.std(gate["kernel"])), 0.03)
        # gate_bias starts b elsewhere (xLSTM's range), and only a learned gate has one.
        biased = _gated("none", "softmax", "learned", gate_bias=4.0)
        started = model_lib.RoFormer(biased).init(jax.random.key(0), ids)["params"]
        bias = started["encoder"]["layer_0"]["attention"]["forget_gate"]["bias"]
        np.testing.assert_array_equal(bias, np.full(config.num_heads, 4.0, np.float32))
        with self.assertRaisesRegex(ValueError, "gate_bias=4.0 starts a learned gate"):
            _gated("rope", "linear", "fixed", gate_bias=4.0)

        def loss(params):
            return jnp.sum(model.apply({"params": params}, ids).logits[:, :, 0] ** 2)

        grads = jax.grad(loss)(variables["params"])
        for g in jax.tree.leaves(grads["encoder"]["layer_0"]["attention"]["forget_gate"]):
            self.assertTrue(bool(jnp.all(jnp.isfinite(g))))
            self.assertGreater(float(jnp.max(jnp.abs(g))), 0.0)

    def test_float64_gradients_through_the_forget_gate(self):
        # The config's dtypes are float32 and bfloat16; float64 here reaches gates.py's own
        # projection, so that check_grads' finite differences are exact enough.
        config = _gated("none", "softmax", "learned")

        class Gate(nn.Module):
            @nn.compact
            def __call__(self, x):
                return gates.log_gates(config, x)  # [B, L, N]

        def gated_attention(params, x, q, k, v):
            log_decay = Gate().apply({"params": params}, x)
            chex.assert_type(log_decay, jnp.float64)
            return attention.softmax_attention(q, k, v, causal=True, log_decay=log_decay)

        rng = np.random.default_rng(0)
        b, length, n, h = 2, 5, config.num_heads, config.head_dim
        with jax.enable_x64(True), mock.patch.dict(model_config.DTYPES, float32=jnp.float64):
            x = jnp.asarray(rng.normal(size=(b, length, config.hidden_size)))
            params = Gate().init(jax.random.key(0), x)["params"]
            params = jax.tree.map(lambda p: jnp.asarray(rng.normal(0, 0.3, p.shape)), params)
            q, k, v = (jnp.asarray(rng.normal(size=(b, length, n, h))) for _ in range(3))
            # Compiled: op by op, its derivatives and transposes compiled each primitive.
            check_grads(
                jax.jit(gated_attention), (params, x, q, k, v), order=1, modes=("fwd", "rev")
            )


if __name__ == "__main__":
    absltest.main()
