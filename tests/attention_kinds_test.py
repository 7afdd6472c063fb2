"""Tests for roformer_jax.nn.attention_kinds: the table of kinds, what each record names and
the options it builds."""

import dataclasses
import inspect
from unittest import mock

import chex
import jax
import jax.numpy as jnp
import tiny
from absl.testing import absltest, parameterized
from attention_cases import L, _qkv

from roformer_jax.nn import attention, attention_step
from roformer_jax.nn.attention_kinds import (
    ATTENTION_KINDS,
    AttentionContext,
    AttentionKind,
    LinearSection,
    feature_projection,
)
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.sections import Section

# A value of each option that a form takes as **options (attention_core's dataclasses).
SAMPLE_OPTIONS = dict(placement="both", feature_map="elu", projection=None, eps=1e-6, chunk_size=3)


class KindsTableTest(parameterized.TestCase):
    """attention_kinds.ATTENTION_KINDS: each record names what its forms take."""

    @parameterized.parameters(*ATTENTION_KINDS)
    def test_records_name_the_keywords_their_forms_take(self, name):
        # A form declares its options as keywords, or takes them as **options (an options
        # dataclass, which raises on a name it lacks): then each other recorded name is
        # passed, at a value of SAMPLE_OPTIONS, and must be taken.
        kind = ATTENTION_KINDS[name]
        q, k, v = _qkv(0)
        for form, names, common, memory in (
            (kind.full, kind.options, {"mask", "causal", "rotation", "log_decay"}, ()),
            (kind.step, kind.step_options, {"mask", "rotation", "log_decay"}, (None,)),
        ):
            parameters = inspect.signature(form).parameters.values()
            declared = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY} - common
            if not any(p.kind is p.VAR_KEYWORD for p in parameters):
                self.assertEqual(declared, names, form.__name__)
                continue
            self.assertLessEqual(declared, names, form.__name__)
            form(*memory, q, k, v, **{n: SAMPLE_OPTIONS[n] for n in names - declared})

    @parameterized.parameters(*ATTENTION_KINDS)
    def test_an_option_no_record_names_is_refused(self, name):
        kind = ATTENTION_KINDS[name]
        with self.assertRaisesRegex(TypeError, "placment"):
            kind.full(*_qkv(0), placment="both")


class BuildersTest(parameterized.TestCase):
    """Each record builds its forms' options; the model passes them on and names none."""

    @parameterized.parameters(*ATTENTION_KINDS)
    def test_builders_make_only_options_their_forms_take(self, name):
        kind = ATTENTION_KINDS[name]
        cfg = tiny.model_config(attention=name)
        section = cfg.attention_section
        context = AttentionContext(None, jnp.arange(L), deterministic=False, decode_length=L)
        built = kind.build_options(section, cfg, context, 0, lambda stream: jax.random.key(0))
        self.assertLessEqual(set(built), kind.options)
        step_options = kind.build_step_options(section, cfg, context, 0)
        self.assertLessEqual(set(step_options), kind.step_options)

    def test_a_new_option_is_written_in_its_kind_only(self):
        # docs/model.md's recipe: a toy kind with a hyperparameter (its section's `base`) and
        # forms that take an option, `scale`, that only its record names and builds (from the
        # section and the layer's index): set in the config's section, it reaches every
        # layer's full form and step.
        received = []

        def scaled(q, k, v, *, mask, causal, rotation=None, scale):
            received.append(("full", scale))
            out = attention.softmax_attention(q, k, v, mask=mask, causal=causal, rotation=rotation)
            return out * scale

        def scaled_step(memory, q, k, v, *, mask, rotation=None, scale, **cache):
            received.append(("step", scale))
            out, memory = attention_step.softmax_attention_step(
                memory, q, k, v, mask=mask, rotation=rotation, **cache
            )
            return out * scale, memory

        @dataclasses.dataclass(frozen=True)
        class ToySection(Section):
            base: float = 2.0

        toy = AttentionKind(
            full=scaled,
            step=scaled_step,
            options=frozenset({"scale"}),
            step_options=frozenset({"positions", "capacity", "scale"}),
            build_options=lambda section, cfg, context, layer, make_rng: {
                "scale": section.base + layer
            },
            build_step_options=lambda section, cfg, context, layer: {
                "positions": context.position_ids,
                "capacity": context.decode_length,
                "scale": section.base + layer,
            },
            section=ToySection,
        )
        ids = jnp.arange(2 * L).reshape(2, L) % 50
        with mock.patch.dict(ATTENTION_KINDS, toy=toy):
            config = tiny.model_config(attention="toy", num_layers=2, causal=True)
            self.assertEqual(config.attention_section, ToySection())
            config = config.with_section("toy", base=5.0)
            model = RoFormer(config)
            variables = model.init(jax.random.key(0), ids)
            received.clear()
            model.apply(variables, ids)
            model.apply(variables, ids, decode_length=L, mutable=["cache"])
        self.assertEqual(received, [("full", 5.0), ("full", 6.0), ("step", 5.0), ("step", 6.0)])
        self.assertNotIn("toy", tiny.model_config().sections)


def _draw(section, layer, update=None):
    """Layer `layer`'s FAVOR+ features at `update`, for heads of 16 features."""
    return feature_projection(section, 16, layer, update)


class FeatureProjectionTest(absltest.TestCase):
    """FAVOR+'s random features: drawn per layer from (seed, layer, redraw period)."""

    def test_only_a_random_map_draws(self):
        self.assertTrue(LinearSection(feature_map="favor").draws_features)
        self.assertFalse(LinearSection().draws_features)  # elu
        self.assertIsNone(_draw(LinearSection(), 0))
        self.assertFalse(tiny.model_config().draws_features)  # softmax

    def test_a_function_of_seed_layer_and_period(self):
        section = LinearSection(feature_map="favor", random_features=16, feature_redraw=10)
        chex.assert_shape(_draw(section, 0), (16, 16))
        chex.assert_trees_all_equal(_draw(section, 1, update=13), _draw(section, 1, update=19))
        chex.assert_trees_all_equal(_draw(section, 1, update=9), _draw(section, 1))  # the first
        different = [
            _draw(section, 1, update=20),  # the next period
            _draw(section, 0, update=13),  # another layer
            _draw(dataclasses.replace(section, feature_seed=1), 1, update=13),  # another seed
        ]
        for other in different:
            self.assertGreater(float(jnp.abs(other - _draw(section, 1, update=13)).max()), 0.1)
        never = dataclasses.replace(section, feature_redraw=0)
        chex.assert_trees_all_equal(_draw(never, 1, update=10_000), _draw(never, 1))
        traced = jax.jit(lambda u: _draw(section, 1, update=u))(jnp.int32(13))
        chex.assert_trees_all_close(traced, _draw(section, 1, update=13), atol=1e-5)


class ErrorsTest(parameterized.TestCase):
    def test_table_names_every_kind(self):
        self.assertEqual(set(ATTENTION_KINDS), {"softmax", "linear", "cosine"})

    def test_kinds_in_table_reject_mismatched_shapes(self):
        q, k, _ = _qkv(0)
        for kind in ATTENTION_KINDS.values():
            with self.assertRaisesRegex(ValueError, "do not agree"):
                kind.full(q, k, k[:, :-1])


if __name__ == "__main__":
    absltest.main()


TYPES = ("sliding", "chunked", "full")
BY_TYPE = {"sliding": {"window": 3}, "chunked": {"chunk": 4, "sinks": True}}


class PerLayerTest(parameterized.TestCase):
    """SoftmaxSection's settings per layer type: each layer its own options and sinks."""

    def _config(self, softmax=None, rope=None):
        return tiny.model_config(
            num_layers=3,
            causal=True,
            sections={"softmax": softmax or {}, "rope": rope or {}},
        )

    @parameterized.parameters("softmax", "rope")
    def test_each_layer_builds_its_types_options(self, where):
        # layer_types given in softmax's section, or in RoPE's: one list serves both.
        types = {"layer_types": TYPES}
        cfg = self._config(
            softmax={"by_type": BY_TYPE, **(types if where == "softmax" else {})},
            rope=types if where == "rope" else None,
        )
        kind, section = cfg.kind, cfg.attention_section
        context = AttentionContext(None, jnp.arange(L), deterministic=True, decode_length=L)
        built = [kind.build_options(section, cfg, context, i, None) for i in range(3)]
        steps = [kind.build_step_options(section, cfg, context, i) for i in range(3)]
        for options in (built, steps):
            self.assertEqual(
                [(o["window"], o["chunk"]) for o in options], [(3, None), (None, 4), (None, None)]
            )
        parameters = [set(kind.parameters(section, cfg, i)) for i in range(3)]
        self.assertEqual(parameters, [set(), {"sinks"}, set()])

    def test_sinks_are_parameters_of_their_layers(self):
        cfg = self._config(softmax={"layer_types": TYPES, "by_type": BY_TYPE})
        ids = jnp.arange(2 * L).reshape(2, L) % 50
        variables = RoFormer(cfg).init(jax.random.key(0), ids)
        layers = variables["params"]["encoder"]
        have = ["sinks" in layers[f"layer_{i}"]["attention"] for i in range(3)]
        self.assertEqual(have, [False, True, False])
        sinks = layers["layer_1"]["attention"]["sinks"]
        chex.assert_shape(sinks, (cfg.num_heads,))
        # They reach the softmax: a large sink takes the layer's attention away.
        bumped = jax.tree_util.tree_map(lambda x: x, variables)  # a copy
        bumped["params"]["encoder"]["layer_1"]["attention"]["sinks"] = sinks + 50.0
        model = RoFormer(cfg)
        self.assertGreater(
            float(
                jnp.abs(model.apply(bumped, ids).logits - model.apply(variables, ids).logits).max()
            ),
            1e-3,
        )

    def test_a_default_section_is_every_layer_alike(self):
        cfg = self._config()
        self.assertEqual(cfg.attention_section.for_layer(2, cfg), cfg.attention_section)

    @parameterized.parameters(
        ({"by_type": {"full": {"windw": 3}}}, r"by_type\['full'\] sets \['windw'\]"),
        (
            {"by_type": {"full": {"chunk": 0}}},
            r"by_type\['full'\]: chunk=0 must be a positive integer",
        ),
        ({"chunk": 0}, r"chunk=0 must be a positive integer"),
        ({"window": 2.5}, r"window=2.5 must be a positive integer"),
        ({"window": "4"}, r"window='4' must be a positive integer"),
        (
            {"layer_types": TYPES, "by_type": {**BY_TYPE, "slidin": {"window": 2}}},
            r"by_type names \['slidin'\], no layer type of",
        ),
        ({"by_type": {"full": {"chunk": 2}}}, r"sections.softmax.by_type=.* needs layer_types"),
        ({"layer_types": ("full",)}, r"layer_types has 1 entries for 3 layers"),
    )
    def test_errors_name_the_field(self, softmax, message):
        with self.assertRaisesRegex(ValueError, message):
            self._config(softmax=softmax)

    def test_types_given_twice_must_agree(self):
        with self.assertRaisesRegex(ValueError, "differs from sections.rope.layer_types"):
            self._config(softmax={"layer_types": TYPES}, rope={"layer_types": ("full",) * 3})
