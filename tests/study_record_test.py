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


def _trained_study():
    """`_study()`'s config and runs, each run written in a workdir; and a raw folder for it."""
    config, runs = _study()
    workdir, raw = tiny.workdir(), os.path.join(tiny.workdir(), "mine")
    for name, configs in runs.items():
        for cfg in configs:
            _write_run(run_dirs.run_dir(workdir, name, cfg.seed), cfg)
    return config, runs, workdir, raw


class StudyRecordTest(absltest.TestCase):
    def test_export_then_read_back(self):
        config, runs, workdir, raw = _trained_study()
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

    def test_a_rerun_that_exports_nothing_new_keeps_the_record(self):
        # A finished study run again (a chain restarted) trains nothing: its record must keep
        # the commit and wall time of the command that trained the runs, not 1 s of none.
        config, runs, workdir, raw = _trained_study()

        def record(wall_s, finished=True):
            return study_record.make_record(
                argv=[],
                config_file="c.py",
                config=config,
                wall_s=wall_s,
                unigram=6.0,
                finished=finished,
            )

        self.assertIsNone(study_record.kept_record(raw, config))  # no record yet
        study_record.export(raw, runs, workdir, record(9557.0, finished=False))
        self.assertIsNone(study_record.kept_record(raw, config))  # not finished
        study_record.export(raw, runs, workdir, record(9557.0))
        other = ConfigDict(config.to_dict() | {"title": "u"})
        self.assertIsNone(study_record.kept_record(raw, other))  # another config's
        before = study_record.kept_record(raw, config)
        self.assertIsNotNone(before)
        copied = study_record.export(raw, runs, workdir, record(1.1), before=before)
        self.assertEqual(copied, 2 * 2 * 2)  # the runs' files; not study.json
        self.assertEqual(study_record.read_raw(raw).record["wall_s"], 9557.0)
        # A run trained again (its metrics changed) is a new command's numbers: a new record.
        _write_run(run_dirs.run_dir(workdir, "a", 5), dataclasses.replace(runs["a"][0], seed=5))
        os.replace(
            os.path.join(run_dirs.run_dir(workdir, "a", 5), "metrics.jsonl"),
            os.path.join(run_dirs.run_dir(workdir, "a", 0), "metrics.jsonl"),
        )
        study_record.export(raw, runs, workdir, record(1.1), before=before)
        self.assertEqual(study_record.read_raw(raw).record["wall_s"], 1.1)

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

    def test_join_pools_a_runs_seeds_from_several_studies(self):
        # Issue 56: seeds 1 and 2 of a run trained at a later sitting, read beside seed 0's.
        _, runs = _study()
        root = tiny.workdir()

        def study(name, seeds, runs_of):
            config = ConfigDict({"seeds": seeds, "title": name})
            config.runs = ConfigDict({n: {} for n in runs_of}, sort_keys=False)
            for run, cfg in runs_of.items():
                for seed in seeds:
                    _write_run(run_dirs.run_dir(os.path.join(root, name), run, seed), cfg(seed))
            record = study_record.make_record(
                argv=[], config_file="c.py", config=config, wall_s=1.0, unigram=6.0
            )
            study_record.write(os.path.join(root, name), record)
            return study_record.read_raw(os.path.join(root, name))

        def seed(run, moved=False, **train):
            cfg = runs[run][0]
            cache = "/elsewhere" if moved else None
            train = dataclasses.replace(cfg.train, data_cache_dir=cache, **train)
            return lambda s: dataclasses.replace(cfg, seed=s, train=train)

        first = study("first", (0,), {"b": seed("b"), "a": seed("a")})
        second = study("second", (2, 1), {"a": seed("a", moved=True)})
        third = study("third", (0, 1), {"c": seed("b")})
        joined = study_record.join([first, second, third])
        self.assertEqual(joined.name, "first+second+third")
        self.assertEqual(list(joined.runs), ["b", "a", "c"])
        self.assertEqual(
            {n: [c.seed for c in r] for n, r in joined.runs.items()},
            {"b": [0], "a": [0, 1, 2], "c": [0, 1]},
        )
        # Each seed's records stay with its config: the fake loss is 1 + seed.
        self.assertEqual([r[-1]["train/loss"] for r in joined.results["a"]], [1.0, 2.0, 3.0])
        self.assertEqual(joined.config["seeds"], [0, 1, 2])
        self.assertEqual(list(joined.config["runs"]), ["b", "a", "c"])
        # Seeds 1 and 2 of a run alone would pair with seeds 0 and 1 of the others.
        with self.assertRaisesRegex(ValueError, r"run 'a' has seeds \[1, 2\], not the first"):
            study_record.join([second, third])
        with self.assertRaisesRegex(ValueError, "run 'b' seed 0 is in two"):
            study_record.join([first, first])
        other = study("other", (1,), {"a": seed("a", steps=3)})
        with self.assertRaisesRegex(
            ValueError, "run 'a' differs between the studies in train.steps"
        ):
            study_record.join([first, other])
        # Length scores: each evaluation from the study that read it (ALiBi at 8 heads, a
        # study of its own, beside the 2-head run's), once.
        b_read, c_read = [{"128": {"loss": 1.0}}], [{"128": {"loss": 2.0}}] * 2
        scored = [dataclasses.replace(first, scores={"b read": b_read})]
        scored.append(dataclasses.replace(third, scores={"c read": c_read}))
        self.assertEqual(study_record.join(scored).scores, {"b read": b_read, "c read": c_read})
        self.assertIsNone(joined.scores)
        scored[1] = dataclasses.replace(third, scores={"b read": c_read})
        with self.assertRaisesRegex(ValueError, "evaluation 'b read' is in two"):
            study_record.join(scored)


if __name__ == "__main__":
    absltest.main()
