"""Tests for roformer_jax/nn/model_config.py: what a config refuses, its sections, and the
flat layout of runs saved before the sections, read from a saved run of each past layout."""

import dataclasses
import json
import os

from absl.testing import absltest, parameterized

from roformer_jax.nn import model_config as model_config_lib
from roformer_jax.nn.attention_kinds import LinearSection
from roformer_jax.training.config import (
    config_diff,
    default_experiment_config,
    experiment_config_from_dict,
)

RAW = os.path.join(os.path.dirname(__file__), "..", "docs", "results", "raw")
# A run of each layout of the flat model config that docs/results/raw holds (23, 26 and 31
# fields), each with what its fields became.
PAST_LAYOUTS = {
    "length_wikitext2/YaRN_tuned_at_512/seed0": (
        "rope",
        {
            "base": 10000.0,
            "scaling": {
                "factor": 4.0,
                "original_max_position_embeddings": 128,
                "rope_type": "yarn",
            },
        },
    ),
    "linear_long_wikitext2/FAVOR+_RoPE_before_/seed0": (
        "linear",
        {"feature_map": "favor", "placement": "before_feature_map", "feature_redraw": 1000},
    ),
    "performer_warpeace/FAVOR+_eq_19_one_draw/seed0": (
        "linear",
        {"feature_map": "favor", "placement": "numerator", "feature_redraw": 0, "feature_seed": 0},
    ),
}


class ModelConfigTest(parameterized.TestCase):
    @parameterized.parameters(
        (dict(hidden_size=65), r"hidden_size 65 is not divisible by num_heads 4"),
        (dict(hidden_size=36, num_heads=4), r"head dim 9 is odd"),
        (dict(position="t5"), r"position='t5'"),
        (dict(position="alibi", attention="linear"), r"'linear' attention never forms"),
        (dict(position="alibi", attention="cosine"), r"'cosine' attention never forms"),
        (dict(attention="flash"), r"attention='flash'"),
        (dict(dtype="float16"), r"dtype='float16'"),
        (dict(hidden_dropout=1.0), r"hidden_dropout=1.0"),
        (dict(rotary_value=True, position="learned"), r"rotary_value"),
        (dict(hidden_sise=64), r"unknown ModelConfig fields \['hidden_sise'\]"),
        (dict(num_kv_heads=3), r"num_kv_heads=3 must divide num_heads=4"),
        (dict(num_kv_heads=0), r"num_kv_heads=0 must be a positive integer or None"),
        (dict(vocab_size=100.7), r"vocab_size=100.7 must be a positive integer"),
        (dict(hidden_size="64"), r"hidden_size='64' must be a positive integer"),
        (dict(num_layers=True), r"num_layers=True must be a positive integer"),
        (dict(layer_norm_eps=-1.0), r"layer_norm_eps=-1.0 must be positive and finite"),
        (dict(sections={"softmax": {"window": 0}}), r"window=0 must be a positive integer"),
        (
            dict(sections={"softmax": {"window": 4}}, attention="linear"),
            r"sections.softmax sets \{'window': 4\}, but .* attention='linear'",
        ),
        (
            dict(sections={"rope": {"bse": 1.0}}),
            r"unknown key sections.rope.bse; did you mean 'base'",
        ),
        (dict(sections={"rotary": {}}), r"unknown sections \['rotary'\]"),
        (dict(sections={"rope": {"base": float("nan")}}), r"base=nan must be positive and finite"),
        (dict(sections={"rope": {"base": 0.0}}), r"base=0.0 must be positive and finite"),
    )
    def test_bad_config(self, overrides, message):
        with self.assertRaisesRegex(ValueError, message):
            model_config_lib.model_config("tiny", **overrides)

    def test_unknown_size(self):
        with self.assertRaisesRegex(ValueError, r"'huge'"):
            model_config_lib.model_config("huge")

    @parameterized.parameters(0, 7, -2)
    def test_random_features_come_in_pairs(self, count):
        with self.assertRaisesRegex(ValueError, f"random_features={count} must be even"):
            model_config_lib.model_config("tiny", sections={"linear": {"random_features": count}})


class FlatLayoutTest(parameterized.TestCase):
    """Runs saved before the sections load, and compare equal to themselves read again."""

    @parameterized.parameters(*PAST_LAYOUTS)
    def test_a_saved_run_of_each_past_layout_reads_as_itself(self, run):
        with open(os.path.join(RAW, run, "config.json"), encoding="utf-8") as f:
            saved = json.load(f)
        self.assertIn("position", saved["model"])  # the flat layout
        self.assertNotIn("sections", saved["model"])
        cfg = experiment_config_from_dict(saved)
        name, fields = PAST_LAYOUTS[run]
        section = cfg.model.sections[name]
        self.assertEqual({k: getattr(section, k) for k in fields}, fields)
        self.assertIn(name, (cfg.model.position, cfg.model.attention))
        # The one rule for "is this the same run" finds no difference, either way round.
        defaults = default_experiment_config()
        self.assertEqual(config_diff(saved, cfg, defaults=defaults), {})
        self.assertEqual(config_diff(saved["model"], cfg.model, defaults=defaults.model), {})
        # And the new layout round-trips through JSON.
        again = json.loads(json.dumps(dataclasses.asdict(cfg)))
        self.assertEqual(experiment_config_from_dict(again), cfg)

    def test_a_flat_field_goes_to_the_chosen_entry_that_has_it(self):
        flat = {
            "position": "xpos",
            "attention": "linear",
            "rope_base": 500.0,
            "window": None,
            "linear_rope": "both",
            "position_axes": 1,
        }
        nested = model_config_lib.nested_model_dict(flat)
        self.assertEqual(
            nested["sections"], {"xpos": {"base": 500.0}, "linear": {"placement": "both"}}
        )
        cfg = model_config_lib.model_config_from_dict(flat)
        self.assertEqual(cfg.attention_section, LinearSection(placement="both"))
        # A field that no chosen entry reads did nothing in that model: not carried over.
        none = model_config_lib.model_config_from_dict({"position": "none", "rope_base": 100.0})
        self.assertEqual(none, model_config_lib.ModelConfig(position="none"))

    def test_a_misspelt_key_names_its_neighbour(self):
        with self.assertRaisesRegex(ValueError, "unknown key model.hiden_size; did you mean"):
            model_config_lib.model_config_from_dict({"hiden_size": 64})


if __name__ == "__main__":
    absltest.main()
