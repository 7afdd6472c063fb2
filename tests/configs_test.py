"""Tests for configs/*.py: every config loads, converts, and builds its model."""

import dataclasses
import functools
import glob
import importlib
import itertools
import os

import jax
import jax.numpy as jnp
from absl import flags
from absl.testing import absltest, parameterized
from ml_collections import config_flags

from configs import base, studies
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import SIZES, ModelConfig
from roformer_jax.studies import study
from roformer_jax.training import finetune_config, task_kinds
from roformer_jax.training.config import (
    SECTIONS,
    default_experiment_config,
    experiment_config_from_dict,
)

_CONFIGS_DIR = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "configs")

# Parameter counts of each config's model (MLM head included, decoder tied to the
# embeddings). A changed count means the config or the model changed: update on purpose.
# bert_base equals HF bert-base-uncased's BertForMaskedLM (109,514,298); roformer_base has
# its 512 x 768 position table fewer.
GOLDEN_PARAMS = {
    "tiny": 121_477,
    "bert_small": 5_462_784,
    "roformer_small": 5_331_712,
    "linear_small": 5_331_712,
    "cosine_small": 5_331_712,
    "causal_small": 5_331_712,  # roformer_small's weights, causal attention
    "causal_linear_small": 5_331_712,
    "bert_base": 109_514_298,
    "roformer_base": 109_121_082,
}


@functools.cache
def _parameter_shapes(model: ModelConfig, seq_len: int):
    """RoFormer(model)'s parameters as shapes, traced on rows of seq_len. Cached: the configs'
    runs share a few models, and tracing a base-size model takes seconds."""
    ids = jax.ShapeDtypeStruct((1, seq_len), jnp.int32)
    return jax.eval_shape(RoFormer(model).init, jax.random.key(0), ids)


def _load(name: str, arg=None):
    return importlib.import_module(f"configs.{name}").get_config(arg)


def _parse(name: str, overrides: list[str]):
    """The experiment config of configs/<name>.py with command-line overrides, as the entry
    points parse it (lock_config=True, the default: a misspelt key is an error)."""
    argv = ["prog", f"--config={os.path.join(_CONFIGS_DIR, name + '.py')}", *overrides]
    values = flags.FlagValues()
    config_flags.DEFINE_config_file("config", flag_values=values, sys_argv=argv)
    values(argv)
    return experiment_config_from_dict(values.config.to_dict())


class ConfigsTest(parameterized.TestCase):
    def test_every_training_config_is_listed(self):
        # The configs of experiments/train_mlm.py name it in their docstring; the other
        # entry points' configs (compare.py, study_*.py) are tested with those.
        training = set()
        for path in glob.glob(os.path.join(_CONFIGS_DIR, "*.py")):
            name = os.path.basename(path)[:-3]
            doc = importlib.import_module(f"configs.{name}").__doc__ or ""
            if "experiments/train_mlm.py --config" in doc:
                training.add(name)
        self.assertEqual(training, set(GOLDEN_PARAMS))

    @parameterized.parameters(*GOLDEN_PARAMS)
    def test_config_builds_its_model(self, name):
        for arg in (None, "runlocal"):
            cfg = experiment_config_from_dict(_load(name, arg).to_dict())
            shapes = _parameter_shapes(cfg.model, cfg.data.seq_len)
            count = sum(x.size for x in jax.tree.leaves(shapes))
            self.assertEqual(count, GOLDEN_PARAMS[name], f"{name}:{arg}")
            self.assertLessEqual(cfg.optim.warmup_steps, cfg.train.steps)

    @parameterized.parameters(
        ("compare", "compare"),
        ("study_positions", "compare"),
        ("study_linear", "compare"),
        ("study_causal", "compare"),
        ("study_length", "length_study"),
        ("study_multilength", "length_study"),
        ("study_positions_long", "compare"),
        ("study_linear_long", "compare"),
        ("study_positions_batch", "compare"),
        ("long_doc_pilot", "compare"),
        ("study_packed", "compare"),
        ("study_positions_lr", "compare"),
        ("study_long_training", "length_study"),
        ("study_bert_order", "compare"),
        ("study_bert_seeds", "compare"),
        ("study_positions_heads", "compare"),
        ("study_gates", "length_study"),
    )
    def test_study_config_builds_every_run(self, name, command):
        doc = importlib.import_module(f"configs.{name}").__doc__
        self.assertIn(f"python experiments/{command}.py --config=configs/{name}.py", doc)
        for arg in (None, "runlocal"):
            config = _load(name, arg)
            runs = study.study_runs(config)
            self.assertEqual(list(runs), list(config.runs))
            for seeds in runs.values():
                self.assertEqual([c.seed for c in seeds], list(config.seeds))
                _parameter_shapes(seeds[0].model, seeds[0].data.seq_len)
            self.assertTrue(set(config.plot_keys) <= set(config.table_keys) | {"train/loss"})
            self.assertIn(config.baseline, config.runs)
            if command == "length_study":  # evaluations read runs of the study
                self.assertTrue(set(config.eval_baselines) <= set(config.evaluations))
                for spec in config.evaluations.values():
                    self.assertIn(spec.run, config.runs)

    def test_issue_56_controls(self):
        # The heads study takes :best's runs of the same names from its workdir as they are.
        heads = study.study_runs(_load("study_positions_heads"))
        best = study.study_runs(
            _load("study_positions_lr", "best,BERT=1e-3/500,RoPE=1e-3,sinusoidal=1e-3/500")
        )
        for name in ("RoPE, lr 1e-3", "ALiBi, 2 heads", "ALiBi, 8 heads"):
            self.assertEqual(heads[name], best[name], name)
        slopes = heads["ALiBi, 8 heads, 2-head slopes"][0].model
        self.assertEqual((slopes.num_heads, slopes.sections["alibi"].slope_heads), (8, 2))
        # 768 tokens only, on the schedule's tokens; every stage ends on an evaluation.
        controls = study.study_runs(_load("study_multilength", "wikitext2,controls"))
        (schedule, *_), (control, *_) = controls["multi-length"], controls["768 only"]
        tokens = [sum(s * n * b for s, n, b in c.train.stages) for c in (schedule, control)]
        self.assertEqual(tokens[0], tokens[1])
        ends = itertools.accumulate(s for s, _, _ in schedule.train.stages)
        self.assertTrue(all(end % schedule.train.eval_every == 0 for end in ends))
        (alibi,) = study.study_runs(_load("study_long_training", "alibi8"))["ALiBi, 8 heads"]
        self.assertEqual((alibi.model.num_heads, alibi.train.steps), (8, 20_000))

    def test_positions_lr_best_reuses_the_sweeps_seed_0(self):
        sweep = study.study_runs(_load("study_positions_lr", "sweep"))
        best = study.study_runs(
            _load("study_positions_lr", "best,BERT=1e-3/500,RoPE=1e-3,sinusoidal=1e-3/500")
        )
        self.assertEqual(
            list(best)[:3],
            ["BERT, lr 1e-3, warm-up 500", "RoPE, lr 1e-3", "sinusoidal, lr 1e-3, warm-up 500"],
        )
        for name, seeds in best.items():
            self.assertEqual([c.seed for c in seeds], [0, 1, 2])
            self.assertEqual(seeds[0], sweep[name][0], name)  # so seed 0 is cached
        with self.assertRaisesRegex(ValueError, "a rate for each"):
            _load("study_positions_lr", "best,BERT=1e-3")

    def test_selection_apart_from_report_and_the_packed_cross(self):
        # The sweep scores the selection split alone; :best trains on the same documents and
        # scores the held-out set; both differ from the committed runs by these fields only.
        best = "best,BERT=1e-3/500,RoPE=1e-3,sinusoidal=1e-3/500"
        for phase, scored in (("sweep", "selection"), (best, "held_out")):
            plain = study.study_runs(_load("study_positions_lr", phase))
            words = phase.split(",")
            chosen = study.study_runs(
                _load("study_positions_lr", ",".join([words[0], "selection", *words[1:]]))
            )
            self.assertEqual(list(chosen), list(plain))
            for name, seeds in chosen.items():
                data = seeds[0].data
                self.assertEqual((data.selection_fraction, data.eval_split), (0.08, scored))
                moved = dataclasses.replace(data, selection_fraction=0.0, eval_split="held_out")
                self.assertEqual(dataclasses.replace(seeds[0], data=moved), plain[name][0], name)
        # Each packed run again, scored in the other mode; WikiText-2 held out by article.
        cross = study.study_runs(_load("study_packed", "wikitext2,cross"))
        self.assertLen(cross, 8)
        run = cross["linear eq (19), isolated, scored open"][0]
        self.assertEqual((run.data.documents, run.data.evaluated_documents), ("isolated", "open"))
        self.assertEqual(run.data.split_by, "article")
        self.assertEqual(cross["softmax, open"][0].data.evaluated_documents, "open")

    @parameterized.parameters("study_positions_long", "study_linear_long")
    def test_long_studies_meet_issue_17(self, name):
        # >= 2,000 steps, a rate that does not anneal to zero, >= 10 points per curve,
        # >= 20,000 held-out targets at length 128 (15% of 126 tokens a row), 3 seeds, both
        # corpora by the config argument.
        for corpus, source in (("wikitext2", "wikitext-2"), ("warpeace", "war-and-peace")):
            config = _load(name, corpus)
            for seeds in study.study_runs(config).values():
                cfg = seeds[0]
                self.assertIn(source, cfg.data.source)
                self.assertGreaterEqual(cfg.train.steps, 2000)
                self.assertEqual(cfg.optim.schedule, "constant")
                self.assertGreaterEqual(cfg.train.steps // cfg.train.eval_every, 10)
                rows = cfg.train.eval_batches * cfg.train.batch_size
                self.assertGreaterEqual(0.15 * rows * (cfg.data.seq_len - 2), 20_000)
                self.assertEqual(len(seeds), 3)
                # FAVOR+'s features follow each seed's own draws.
                if seeds[0].model.draws_features:
                    self.assertEqual(
                        [c.model.sections["linear"].feature_seed for c in seeds], [0, 1, 2]
                    )

    def test_long_doc_pilot_is_section_1s_rope_encoder_trained_longer(self):
        (pilot,) = study.study_runs(_load("long_doc_pilot"))["RoPE (RoFormer)"]
        section_1 = study.study_runs(_load("study_positions_long", "wikitext2"))
        same = dataclasses.replace(
            pilot,
            train=dataclasses.replace(
                pilot.train, steps=2000, eval_every=100, checkpoint_every=500
            ),
        )
        self.assertEqual(same, section_1["RoPE (RoFormer)"][0])
        self.assertEqual(pilot.train.steps, 20_000)

    def test_batch_scale_keeps_tokens_evaluations_and_held_out_set(self):
        one = _load("study_positions_long", "wikitext2").experiment
        four = _load("study_positions_batch", "wikitext2").experiment
        a, b = one.train, four.train
        self.assertEqual(b.batch_size, 4 * a.batch_size)
        self.assertEqual(b.steps * b.batch_size, a.steps * a.batch_size)  # the same tokens
        # Evaluations, warm-up and checkpoints at the same token counts.
        for field in ("eval_every", "checkpoint_every"):
            self.assertEqual(getattr(b, field) * b.batch_size, getattr(a, field) * a.batch_size)
        self.assertEqual(
            four.optim.warmup_steps * b.batch_size, one.optim.warmup_steps * a.batch_size
        )
        # The same held-out rows: eval_batches batches of the unscaled batch size.
        self.assertIsNone(a.eval_batch_size)  # the cached 2,000-step runs' config
        self.assertEqual((b.eval_batches, b.eval_batch_size), (a.eval_batches, a.batch_size))
        with self.assertRaisesRegex(ValueError, "batch_scale 3 must divide 100"):
            studies.get_long_config("wikitext2", batch_scale=3)

    @parameterized.parameters(*GOLDEN_PARAMS)
    def test_docstring_gives_the_command(self, name):
        doc = importlib.import_module(f"configs.{name}").__doc__
        self.assertIn(f"python experiments/train_mlm.py --config=configs/{name}.py", doc)
        self.assertIn("Expect", doc)

    @parameterized.parameters(*SIZES)
    def test_base_is_the_dataclass_defaults(self, size):
        # The base config adds nothing but the size and vocab_size None (follow the
        # tokenizer): a value set there instead of in the dataclass fails here.
        config = base.get_base_config(size).to_dict()
        defaults = dataclasses.asdict(default_experiment_config())
        defaults["model"].update(SIZES[size], vocab_size=None)
        self.assertEqual(set(config), {*SECTIONS, "seed"})
        for section in SECTIONS:
            self.assertEqual(config[section], defaults[section], section)
        self.assertEqual(config["seed"], defaults["seed"])

    def test_none_defaults_take_typed_overrides(self):
        overrides = [
            "--config.train.eval_batches=3",
            "--config.data.max_chars=1000",
            "--config.train.data_cache_dir=/tmp/c",
            "--config.model.embedding_size=64",
        ]
        cfg = _parse("roformer_small", overrides)
        self.assertEqual((cfg.train.eval_batches, cfg.data.max_chars), (3, 1000))
        self.assertEqual((cfg.train.data_cache_dir, cfg.model.embedding_size), ("/tmp/c", 64))

    def test_position_and_attention_variants(self):
        got = {
            name: (_load(name).model.position, _load(name).model.attention)
            for name in GOLDEN_PARAMS
        }
        self.assertEqual(got["bert_small"], ("learned", "softmax"))
        self.assertEqual(got["roformer_small"], ("rope", "softmax"))
        self.assertEqual(got["linear_small"], ("rope", "linear"))
        self.assertEqual(got["cosine_small"], ("rope", "cosine"))
        self.assertEqual(got["bert_base"], ("learned", "softmax"))
        self.assertEqual(got["roformer_base"], ("rope", "softmax"))
        paper = _load("roformer_base")  # the paper's MLM recipe
        self.assertEqual((paper.train.batch_size, paper.data.seq_len), (64, 512))
        self.assertEqual(paper.optim.optimizer, "adamw")

    def test_command_line_overrides_and_misspelt_keys(self):
        overrides = [
            "--config.seed=3",
            "--config.model.position=learned",
            "--config.model.attention=linear",
            "--config.data.source=/tmp/corpus.txt",
            "--config.data.seq_len=96",
            "--config.train.steps=7",
            "--config.train.batch_size=4",
            "--config.train.checkpoint_every=2",
            "--config.optim.clip_norm=0",
            "--config.model.vocab_size=300",
        ]
        cfg = _parse("tiny", overrides)
        self.assertEqual(
            (cfg.seed, cfg.model.position, cfg.model.attention, cfg.data.source),
            (3, "learned", "linear", "/tmp/corpus.txt"),
        )
        self.assertEqual((cfg.data.seq_len, cfg.train.steps, cfg.train.batch_size), (96, 7, 4))
        self.assertEqual((cfg.train.checkpoint_every, cfg.optim.clip_norm), (2, 0.0))
        self.assertEqual(cfg.model.vocab_size, 300)

        # lock_config=True (the default): a misspelt key is an error, not a new field.
        with self.assertRaisesRegex(AttributeError, 'stepz.*Did you mean "steps"'):
            _parse("tiny", ["--config.train.stepz=7"])

    def test_finetune_config_is_the_dataclass_defaults_and_loads(self):
        config = base.get_finetune_base_config().to_dict()
        self.assertEqual(config, dataclasses.asdict(finetune_config.FinetuneExperiment()))
        names = [
            os.path.basename(p)[:-3] for p in glob.glob(os.path.join(_CONFIGS_DIR, "finetune_*.py"))
        ]
        # One config per task kind.
        kinds = {
            finetune_config.finetune_experiment_from_dict(_load(n).to_dict()).task.format
            for n in names
        }
        self.assertEqual(kinds, set(task_kinds.TASK_KINDS))
        for name in names:
            for arg in (None, "runlocal"):
                finetune_config.finetune_experiment_from_dict(_load(name, arg).to_dict())
            doc = importlib.import_module(f"configs.{name}").__doc__
            self.assertIn(f"python experiments/finetune.py --config=configs/{name}.py", doc)
        with self.assertRaisesRegex(ValueError, "metric 'f1' does not suit format"):
            finetune_config.TaskConfig(metric="f1")
        with self.assertRaisesRegex(ValueError, "summary_type 'mean' is not one of"):
            finetune_config.TaskConfig(format="multiple_choice", summary_type="mean")
        with self.assertRaisesRegex(ValueError, "summary_type='first' is for format 'multiple"):
            finetune_config.TaskConfig(summary_type="first")

    def test_unknown_config_argument_names_the_words_its_config_takes(self):
        names = sorted(
            os.path.basename(p)[:-3] for p in glob.glob(os.path.join(_CONFIGS_DIR, "*.py"))
        )
        for name in names:
            module = importlib.import_module(f"configs.{name}")
            if hasattr(module, "get_config"):
                with self.subTest(name), self.assertRaisesRegex(ValueError, "'fast'"):
                    module.get_config("fast")
        # The words each takes, its own among them: not base.finish's 'runlocal' alone.
        with self.assertRaisesRegex(ValueError, "'wikitxt2'.*'wikitext2'.*'controls'"):
            _load("study_multilength", "wikitxt2,controls")
        with self.assertRaisesRegex(ValueError, "'controls'.*takes 'builtin', 'wikitext2'"):
            _load("study_length", "wikitext2,controls")
        # A word of the config it builds on that would be ignored: refused.
        with self.assertRaisesRegex(ValueError, "'alibi8'.*takes 'runlocal', comma"):
            _load("study_bert_seeds", "alibi8")
        with self.assertRaisesRegex(ValueError, "'warpeace'.*takes 'runlocal', comma"):
            _load("long_doc_pilot", "warpeace")
        # ",runlocal", as some docstrings write it, is "runlocal".
        self.assertEqual(_load("long_doc_pilot", ",runlocal"), _load("long_doc_pilot", "runlocal"))
        self.assertEqual(_load("tiny", ",runlocal"), _load("tiny", "runlocal"))


if __name__ == "__main__":
    absltest.main()
