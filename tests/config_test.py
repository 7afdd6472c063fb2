"""Tests for roformer_jax/training/config.py: configs from dicts, and the one config diff."""

import dataclasses

from absl.testing import absltest

from configs import finetune_classification, tiny
from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.training.config import (
    ABSENT,
    config_diff,
    default_experiment_config,
    experiment_config_from_dict,
)
from roformer_jax.training.finetune_config import finetune_experiment_from_dict


class ConfigFromDictTest(absltest.TestCase):
    def test_unknown_keys_are_errors(self):
        d = tiny.get_config().to_dict()
        d["train"]["stepz"] = 3
        with self.assertRaisesRegex(ValueError, r"config.train: \['stepz'\]"):
            experiment_config_from_dict(d)
        with self.assertRaisesRegex(ValueError, r"unknown config keys \['extra'\]"):
            experiment_config_from_dict({**tiny.get_config().to_dict(), "extra": {}})

    def test_vocab_size_follows_the_tokenizer(self):
        d = tiny.get_config().to_dict()
        self.assertEqual(experiment_config_from_dict(d).model.vocab_size, 261)  # bytes
        d["data"]["tokenizer"] = "wordpiece"
        d["data"]["vocab_size"] = 1000
        self.assertEqual(experiment_config_from_dict(d).model.vocab_size, 1000)
        d["data"]["tokenizer"] = "/no/such/vocab.txt"
        with self.assertRaisesRegex(FileNotFoundError, "neither 'wordpiece'"):
            experiment_config_from_dict(d)

    def test_a_float_setting_must_be_finite_in_float32(self):
        nan, inf = float("nan"), float("inf")
        for section, key, value in (
            ("optim", "learning_rate", nan),  # passes "<= 0"
            ("optim", "learning_rate", 1e39),  # inf in float32
            ("optim", "weight_decay", nan),
            ("optim", "clip_norm", -inf),
            ("data", "mask_prob", nan),
        ):
            d = tiny.get_config().to_dict()
            d[section][key] = value
            with self.assertRaisesRegex(ValueError, rf"^config.{section}.{key}=.* not a finite"):
                experiment_config_from_dict(d)
        d = finetune_classification.get_config().to_dict()
        d["optim"]["learning_rate"] = nan
        with self.assertRaisesRegex(ValueError, r"config.optim.learning_rate=nan"):
            finetune_experiment_from_dict(d)

    def test_bad_stages(self):
        d = tiny.get_config().to_dict()
        d["train"].update(steps=3, stages=((2, 32, 8), (2, 64, 4)))
        with self.assertRaisesRegex(ValueError, r"sum to 4, not steps=3"):
            experiment_config_from_dict(d)
        d["train"].update(stages=((3, 32),))
        with self.assertRaisesRegex(ValueError, r"must be \(steps, seq_len, batch_size\)"):
            experiment_config_from_dict(d)

    def test_objective_and_causal_model_must_agree(self):
        d = tiny.get_config().to_dict()
        d["data"]["objective"] = "clm"
        with self.assertRaisesRegex(ValueError, r"data.objective='clm' needs model.causal=True"):
            experiment_config_from_dict(d)
        d["model"]["causal"] = True
        self.assertTrue(experiment_config_from_dict(d).model.causal)
        d["data"]["objective"] = "mlm"
        with self.assertRaisesRegex(ValueError, r"data.objective='mlm' needs model.causal=False"):
            experiment_config_from_dict(d)
        d["data"]["objective"] = "lm"
        with self.assertRaisesRegex(
            ValueError, r"objective 'lm' is not one of \('mlm', 'clm', 'mlm_same_doc'\)"
        ):
            experiment_config_from_dict(d)


class ConfigDiffTest(absltest.TestCase):
    def test_names_each_differing_leaf_in_json_form(self):
        saved = {"model": {"hidden_size": 64, "valid": [1, 2]}, "seed": 0}
        current = {"model": {"hidden_size": 32, "valid": (1, 2), "pre_ln": True}, "seed": 0}
        self.assertEqual(
            config_diff(saved, current),
            {"model.hidden_size": (64, 32), "model.pre_ln": (ABSENT, True)},
        )

    def test_a_field_added_since_counts_as_its_default(self):
        cfg = default_experiment_config()
        saved = config_diff({}, cfg)  # every leaf is "added since"
        self.assertNotEmpty(saved)
        self.assertEqual(config_diff({}, cfg, defaults=cfg), {})
        self.assertEqual(
            config_diff(
                {"train": {"data_cache_dir": "/x"}},
                cfg,
                defaults=cfg,
                ignore=("train.data_cache_dir",),
            ),
            {},
        )

    def test_dataclasses_and_dicts_compare_alike(self):
        model = ModelConfig(hidden_size=64, num_heads=4)
        self.assertEqual(config_diff(dataclasses.asdict(model), model), {})
        self.assertEqual(
            config_diff(dataclasses.asdict(model), ModelConfig(hidden_size=32, num_heads=4)),
            {"hidden_size": (64, 32)},
        )


if __name__ == "__main__":
    absltest.main()
