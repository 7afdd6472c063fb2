"""Tests for RoPE's section of the model config (positions.RopeSection: scaling, layer_types;
position="xpos") in a model: every scaling kind runs and ignores a shift, JSON round trips,
per-layer RoPE, and the errors that name what was wrong."""

import dataclasses
import json

import chex
import jax
import jax.numpy as jnp
import numpy as np
import scalings
import tiny
from absl.testing import absltest, parameterized

from roformer_jax import hf
from roformer_jax.nn import model as model_lib
from roformer_jax.nn import model_config as model_config_lib
from roformer_jax.nn import rope_scaling
from roformer_jax.nn.sections import FrozenDict


def _model_config(scaling, position="rope", layer_types=None, **overrides):
    """A tiny model whose encoding `position` has RoPE `scaling` and `layer_types`."""
    rope = {"scaling": scaling, "layer_types": layer_types}
    return tiny.model_config(
        vocab_size=64, position=position, sections={position: rope}, **overrides
    )


class ModelConfigTest(parameterized.TestCase):
    @parameterized.parameters(*(k for k in rope_scaling.SCALINGS if k != "longrope"), "longrope")
    def test_every_kind_runs_in_a_model_and_ignores_a_shift(self, kind):
        pairs = _model_config(None).head_dim // 2
        scaling = (
            scalings.params(kind, 4.0, pairs)
            if kind != "ntk"
            else {"rope_type": "ntk", "factor": 4.0}
        )
        config = _model_config(scaling, hidden_dropout=0.0, initializer_range=0.2)
        model = model_lib.RoFormer(config)
        ids = jnp.asarray(np.random.default_rng(1).integers(5, 64, (2, 8)), jnp.int32)
        variables = model.init(jax.random.key(0), ids)
        out = model.apply(variables, ids).hidden_states
        shifted = model.apply(variables, ids, position_ids=jnp.arange(8) + 1000).hidden_states
        chex.assert_tree_all_finite(out)
        chex.assert_trees_all_close(shifted, out, atol=2e-5)
        spread = model.apply(variables, ids, position_ids=2 * jnp.arange(8)).hidden_states
        self.assertGreater(float(jnp.abs(spread - out).max()), 1e-3)  # positions still matter

    def test_scaling_changes_the_model(self):
        ids = jnp.asarray(np.random.default_rng(1).integers(5, 64, (2, 8)), jnp.int32)
        outputs = []
        for scaling in (None, {"rope_type": "linear", "factor": 4.0}):
            model = model_lib.RoFormer(_model_config(scaling, initializer_range=0.2))
            variables = model.init(jax.random.key(0), ids)
            outputs.append(model.apply(variables, ids).hidden_states)
        self.assertGreater(float(jnp.abs(outputs[0] - outputs[1]).max()), 1e-3)

    def test_hashable_and_round_trips_through_json(self):
        config = _model_config(dict(scalings.YARN))
        self.assertIsInstance(config.position_section.scaling, FrozenDict)
        self.assertEqual(config.position_section.scaling, scalings.YARN)
        saved = json.loads(json.dumps(dataclasses.asdict(config)))
        again = model_config_lib.model_config_from_dict(saved)
        self.assertEqual(again, config)
        self.assertEqual(hash(again), hash(config))
        # As a string (a command-line override), in any key order: the same config.
        reordered = json.dumps(dict(reversed(list(scalings.YARN.items()))))
        self.assertEqual(_model_config(reordered), config)
        self.assertEqual(hash(_model_config(reordered)), hash(config))
        with self.assertRaisesRegex(TypeError, "cannot change"):
            config.position_section.scaling["factor"] = 2.0

    @parameterized.parameters(
        ('{"rope_type": "yarn"}', "'factor'"),
        ("yarn", "is not JSON"),
        ("[1, 2]", "is not a dictionary"),
    )
    def test_bad_scaling_fails_in_the_config(self, scaling, message):
        with self.assertRaisesRegex(ValueError, message):
            _model_config(scaling)

    def test_hf_roformer_refuses_a_scaled_config(self):
        # HF RoFormer cannot express scaling; saving must refuse, not drop it.
        with self.assertRaisesRegex(ValueError, "sections.rope.scaling"):
            hf.config_to_hf(_model_config(dict(scalings.YARN)), with_mlm_head=False)
        hf.config_to_hf(_model_config(None), with_mlm_head=False)

    def test_xpos_model_runs_and_ignores_a_shift(self):
        model = model_lib.RoFormer(_model_config(None, position="xpos", hidden_dropout=0.0))
        ids = jnp.asarray(np.random.default_rng(1).integers(5, 64, (2, 8)), jnp.int32)
        variables = model.init(jax.random.key(0), ids)
        out = model.apply(variables, ids).hidden_states
        shifted = model.apply(variables, ids, position_ids=jnp.arange(8) + 1000).hidden_states
        chex.assert_trees_all_close(shifted, out, atol=2e-5)

    def test_per_layer_rope(self):
        ids = jnp.asarray(np.random.default_rng(1).integers(5, 64, (2, 8)), jnp.int32)
        linear = {"rope_type": "linear", "factor": 2.0}
        flat = _model_config(linear, hidden_dropout=0.0, initializer_range=0.2, num_layers=2)
        model = model_lib.RoFormer(flat)
        variables = model.init(jax.random.key(0), ids)

        def run(scaling, layer_types, position_ids=None):
            config = flat.with_section("rope", scaling=scaling, layer_types=layer_types)
            return model_lib.RoFormer(config).apply(variables, ids, position_ids=position_ids)

        # Both layer types as the flat dictionary: the flat model, bit for bit.
        same = run({"a": linear, "b": linear}, ["a", "b"])
        chex.assert_trees_all_equal(same, model.apply(variables, ids))
        # Layer 1 without positions, layer 0 its own base on half the head: another model,
        # still one of relative positions.
        mixed = {"a": {"rope_theta": 1e6, "partial_rotary_factor": 0.5}, "b": None}
        out = run(mixed, ["a", "b"])
        shifted = run(mixed, ["a", "b"], position_ids=jnp.arange(8) + 1000)
        chex.assert_trees_all_close(shifted, out, atol=2e-5)
        self.assertGreater(float(jnp.abs(out.hidden_states - same.hidden_states).max()), 1e-3)
        no_positions = run({"a": None, "b": None}, ["a", "b"])
        reversed_ids = run({"a": None, "b": None}, ["a", "b"], position_ids=jnp.arange(8)[::-1])
        chex.assert_trees_all_equal(no_positions, reversed_ids)  # NoPE: order is unseen
        # A list, a tuple or JSON text (a command line's) give the same config.
        config = flat.with_section("rope", scaling=mixed, layer_types=("a", "b"))
        self.assertEqual(config, flat.with_section("rope", scaling=mixed, layer_types=["a", "b"]))
        self.assertEqual(config, config.with_section("rope", layer_types='["a", "b"]'))
        self.assertIsNone(config.layer_rope(1))
        self.assertIsNone(model_config_lib.ModelConfig(position="none").layer_rope(0))
        with self.assertRaisesRegex(ValueError, "'rope_learned_positions' rotates by no base"):
            model_config_lib.ModelConfig(position="rope_learned_positions", causal=True).layer_rope(
                0
            )

    @parameterized.parameters(
        (dict(layer_types=["a", "b"], rope_scaling={"a": {}}), "layer types \\['b'\\] are missing"),
        (dict(layer_types=["a"], rope_scaling={"a": {}}), "1 entries for 2 layers"),
        (dict(layer_types="a"), "layer_types='a' is not JSON"),
        (
            dict(
                layer_types=["a", "a"],
                rope_scaling={"a": {}},
                position="xpos",
                hidden_size=72,
                num_heads=2,
            ),
            None,
        ),
        (
            dict(
                layer_types=["a", "a"],
                rope_scaling={"a": {"partial_rotary_factor": 0.5}},
                position="xpos",
            ),
            "xPos rotates and scales every feature",
        ),
    )
    def test_bad_per_layer_config(self, overrides, message):
        overrides = {"rope_scaling": None, "num_layers": 2, **overrides}
        scaling = overrides.pop("rope_scaling")
        if message is None:
            _model_config(scaling, **overrides)
            return
        with self.assertRaisesRegex(ValueError, message):
            _model_config(scaling, **overrides)

    def test_needs_a_rotation(self):
        with self.assertRaisesRegex(ValueError, "sections.rope sets .* position='learned'"):
            tiny.model_config(position="learned", sections={"rope": {"scaling": scalings.YARN}})


if __name__ == "__main__":
    absltest.main()
