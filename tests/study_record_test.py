"""Tests for roformer_jax/study_record.py: study.json written with the raw files, read back."""

import dataclasses
import json
import os

import tiny
from absl.testing import absltest
from ml_collections import ConfigDict

from roformer_jax.studies import run_dirs, study_record
from roformer_jax.training.config import experiment_config_from_dict


def _study():
    """A study config of two runs in an order that is not sorted, and its runs of 2 seeds."""
    config = ConfigDict({"runs": ConfigDict({"b": {}, "a": {}}, sort_keys=False)})
    config.seeds = (0, 1)
    config.title = "t"
    cfg = experiment_config_from_dict({"data": {"tokenizer": "bytes"}, "train": {"steps": 2}})
    runs = {name: [dataclasses.replace(cfg, seed=s) for s in config.seeds] for name in "ba"}
    return config, runs


def _write_run(directory, cfg):
    os.makedirs(directory, exist_ok=True)
    with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
        json.dump(dataclasses.asdict(cfg), f)
    with open(os.path.join(directory, "metrics.jsonl"), "w", encoding="utf-8") as f:
        f.write(json.dumps({"step": 2, "train/loss": 1.0 + cfg.seed, "elapsed_s": 3.0}) + "\n")


class StudyRecordTest(absltest.TestCase):
    def test_export_then_read_back(self):
        config, runs = _study()
        workdir, raw = tiny.workdir(), os.path.join(tiny.workdir(), "mine")
        for name, configs in runs.items():
            for cfg in configs:
                _write_run(run_dirs.run_dir(workdir, name, cfg.seed), cfg)
        record = study_record.make_record(
            argv=["experiments/compare.py", "--config=c.py:x"],
            config_file="c.py:x",
            config=config,
            wall_s=12.5,
            unigram=6.0,
        )
        copied = study_record.export(raw, runs, workdir, record)
        self.assertEqual(copied, 2 * 2 * 2 + 1)  # config.json and metrics.jsonl per run, study.json
        back = study_record.read_raw(raw)
        self.assertEqual(back.name, "mine")
        self.assertEqual(back.record, record)
        self.assertEqual(list(back.runs), ["b", "a"])  # the study's order, not sorted
        self.assertEqual(back.runs["a"], runs["a"])
        self.assertEqual([r[-1]["train/loss"] for r in back.results["b"]], [1.0, 2.0])
        self.assertIsNone(back.scores)
        self.assertEqual(back.config["seeds"], [0, 1])
        self.assertEqual(set(record["code"]), {"commit", "dirty"})
        self.assertEqual(record["machine"]["cpus"], os.cpu_count())
        self.assertFalse(record["reconstructed"])

    def test_missing_metrics_is_an_error(self):
        config, runs = _study()
        raw = tiny.workdir()
        for cfg in runs["b"]:
            _write_run(run_dirs.run_dir(raw, "b", cfg.seed), cfg)
        for cfg in runs["a"]:  # a's config.json only
            os.makedirs(run_dirs.run_dir(raw, "a", cfg.seed))
            with open(os.path.join(run_dirs.run_dir(raw, "a", cfg.seed), "config.json"), "w") as f:
                json.dump(dataclasses.asdict(cfg), f)
        record = study_record.make_record(
            argv=[], config_file="c.py", config=config, wall_s=1.0, unigram=6.0
        )
        with open(os.path.join(raw, study_record.FILE), "w", encoding="utf-8") as f:
            json.dump(record, f)
        with self.assertRaisesRegex(FileNotFoundError, "run 'a' lacks a metrics.jsonl"):
            study_record.read_raw(raw)


if __name__ == "__main__":
    absltest.main()
