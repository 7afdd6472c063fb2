"""Tests for roformer_jax/studies/study.py and the rooms beside it (run_dirs, raw_files, tables,
compare_report): caching of finished runs, raw export and restore, curves and the tables."""

import dataclasses
import json
import os
import shutil
import tempfile
from unittest import mock

import numpy as np
from absl.testing import absltest

from roformer_jax.studies import compare_report, raw_files, run_dirs, study, study_record, tables
from roformer_jax.training.config import experiment_config_from_dict


def _config(seed, steps=4, init_from=None):
    return experiment_config_from_dict(
        {
            "seed": seed,
            "data": {"tokenizer": "bytes"},
            "model": {"hidden_size": 8, "num_layers": 1, "num_heads": 2, "intermediate_size": 8},
            "optim": {"warmup_steps": 1},
            "train": {"steps": steps, "init_from": init_from},
        }
    )


def _fake_training(cfg, workdir):
    """Writes what a finished run leaves: one record per step, the last with a valid loss."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for step in range(1, cfg.train.steps + 1):
            record = {"step": step, "train/loss": 10.0 - step - cfg.seed, "elapsed_s": step}
            if step == cfg.train.steps:
                record["valid/loss_128"] = 9.0 - cfg.seed
            f.write(json.dumps(record) + "\n")
    return {}


class StudyTest(absltest.TestCase):
    def test_trains_missing_runs_only(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        runs = {"a": [_config(0), _config(1)], "b/c": [_config(0)]}
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            results = study.run_study(runs, workdir)
            self.assertEqual(fake.call_count, 3)
            self.assertEqual(study.run_study(runs, workdir), results)
            self.assertEqual(fake.call_count, 3)  # all finished: nothing retrained
            # A run that stopped early is trained again (the trainer resumes it).
            path = os.path.join(run_dirs.run_dir(workdir, "a", 1), "metrics.jsonl")
            with open(path, encoding="utf-8") as f:
                lines = f.readlines()
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(lines[:2])
            study.run_study(runs, workdir)
            self.assertEqual(fake.call_count, 4)
        self.assertEqual([len(seeds) for seeds in results.values()], [2, 1])
        self.assertNotIn("/", os.path.relpath(run_dirs.run_dir(workdir, "b/c", 0), workdir)[:3])

    def test_after_run_comes_once_all_seeds_of_a_run_are_done_and_before_the_next(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        runs = {"a": [_config(0), _config(1)], "b": [_config(0)]}
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            seen = []
            study.run_study(
                runs, workdir, after_run=lambda name: seen.append((name, fake.call_count))
            )
            self.assertEqual(seen, [("a", 2), ("b", 3)])
            seen.clear()
            study.run_study(
                runs, workdir, after_run=lambda name: seen.append((name, fake.call_count))
            )
            self.assertEqual(seen, [("a", 3), ("b", 3)])  # found finished: called all the same

    def test_cached_runs_of_older_code_are_named_in_one_warning(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        runs = {"a": [_config(0), _config(1)], "b": [_config(0)], "c": [_config(0)]}
        commits = {"a": "old" * 8, "b": "new" * 8}  # c: no provenance.json (an older run)
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training):
            study.run_study(runs, workdir)
        for name, commit in commits.items():
            for cfg in runs[name]:
                directory = run_dirs.run_dir(workdir, name, cfg.seed)
                with open(os.path.join(directory, "provenance.json"), "w", encoding="utf-8") as f:
                    json.dump({"sessions": [{"commit": commit}]}, f)
        changed = {"old" * 8: ["roformer_jax/rope.py"], "new" * 8: []}
        with (
            mock.patch.object(study.provenance, "code_changed", side_effect=changed.get),
            self.assertLogs(level="WARNING") as logs,
        ):
            study.run_study(runs, workdir)
        (warning,) = logs.output
        self.assertIn("2 cached run(s) were trained by code that differs", warning)
        self.assertIn("2 at oldoldo: git diff --stat oldoldo HEAD", warning)
        with mock.patch.object(study.provenance, "code_changed", return_value=[]):
            with self.assertNoLogs(level="WARNING"):
                study.run_study(runs, workdir)  # the same code: nothing to say

    def test_a_changed_config_is_not_reused(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        directory = run_dirs.run_dir(workdir, "a", 0)
        os.makedirs(directory)
        with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
            json.dump(dataclasses.asdict(_config(0)), f)
        run_dirs.check_same_config(directory, _config(0))
        with self.assertRaisesRegex(ValueError, r"differs in train.steps\)"):
            run_dirs.check_same_config(directory, _config(0, steps=5))
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            with self.assertRaisesRegex(ValueError, "another config"):
                study.run_study({"a": [_config(0, steps=5)]}, workdir)
            fake.assert_not_called()

    def test_runs_share_one_data_cache(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            study.run_study({"a": [_config(0), _config(1)], "b": [_config(0)]}, workdir)
        caches = {call.args[0].train.data_cache_dir for call in fake.call_args_list}
        self.assertEqual(caches, {os.path.join(workdir, "data")})

    def test_init_from_a_run_of_the_study_is_its_workdir_of_the_same_seed(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        runs = {
            "short": [_config(0), _config(1)],
            "long": [_config(0, 2, init_from="run:short"), _config(1, 2, init_from="run:short")],
        }
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            study.run_study(runs, workdir)
            trained = [(call.args[1], call.args[0].train.init_from) for call in fake.mock_calls]
            self.assertEqual(
                trained,
                [
                    (run_dirs.run_dir(workdir, "short", 0), None),
                    (run_dirs.run_dir(workdir, "short", 1), None),
                    (run_dirs.run_dir(workdir, "long", 0), run_dirs.run_dir(workdir, "short", 0)),
                    (run_dirs.run_dir(workdir, "long", 1), run_dirs.run_dir(workdir, "short", 1)),
                ],
            )
            for seed in (0, 1):  # what the trainer writes: the resolved config
                directory = run_dirs.run_dir(workdir, "long", seed)
                with open(os.path.join(directory, "config.json"), "w", encoding="utf-8") as f:
                    json.dump(dataclasses.asdict(fake.mock_calls[2 + seed].args[0]), f)
            study.run_study(runs, workdir)  # a rerun is the same config: nothing retrained
            self.assertEqual(fake.call_count, 4)
            moved = os.path.join(workdir, "moved")  # the study's workdir, moved elsewhere
            shutil.copytree(os.path.join(workdir, "short"), os.path.join(moved, "short"))
            shutil.copytree(os.path.join(workdir, "long"), os.path.join(moved, "long"))
            study.run_study(runs, moved)  # still the runs that were trained
            self.assertEqual(fake.call_count, 4)
            other = {"other": runs["short"][:1], "long": [_config(0, 2, init_from="run:other")]}
            with self.assertRaisesRegex(ValueError, r"differs in train.init_from"):
                study.run_study(other, moved)  # another run of the study is another source
        # Absolute, whatever --workdir was: config.json says where the parameters came from.
        resolved = study.resolve_init_from(_config(1, 2, init_from="run:short"), "relative")
        self.assertEqual(resolved.train.init_from, os.path.abspath("relative/short/seed1"))
        self.assertEqual(study.resolve_init_from(_config(1), "relative"), _config(1))

    def test_moved_with_workdir_is_the_same_path_under_the_new_workdir(self):
        old, new = "/old/study", "/new/place/study"
        self.assertTrue(run_dirs.moved_with_workdir(f"{old}/a/seed0", f"{new}/a/seed0", new))
        moved = run_dirs.moved_with_workdir
        self.assertTrue(moved(f"{old}/task/x.jsonl", f"{new}/task/x.jsonl", new))
        for saved, current in (
            (f"{old}/b/seed0", f"{new}/a/seed0"),  # another run
            (f"{old}/a/seed0", f"{new}/a/seed1"),  # another seed
            (f"{old}/a/seed0", "/elsewhere/a/seed0"),  # outside the workdir
            ("a/seed0", f"{new}/a/seed0"),  # not a resolved path
            (None, f"{new}/a/seed0"),
            (3, 4),
        ):
            self.assertFalse(run_dirs.moved_with_workdir(saved, current, new), (saved, current))

    def test_a_run_named_by_init_from_trains_first_whatever_the_order(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        later = {"b": [_config(0, 2, "run:a")], "a": [_config(0)], "c": [_config(0)]}
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            results = study.run_study(later, workdir)
        trained = [call.args[1] for call in fake.mock_calls]
        self.assertEqual(trained, [run_dirs.run_dir(workdir, n, 0) for n in ("a", "b", "c")])
        self.assertEqual(list(results), ["b", "a", "c"])  # reported in the order given

    def test_init_from_an_unknown_run_or_a_cycle_is_an_error(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            with self.assertRaisesRegex(ValueError, r"run 'b' starts from run 'c' .*not a run"):
                study.run_study({"a": [_config(0)], "b": [_config(0, 2, "run:c")]}, workdir)
            with self.assertRaisesRegex(ValueError, r"runs \['a'\] start from each other"):
                study.run_study({"a": [_config(0, 2, "run:a")]}, workdir)
            cycle = {"a": [_config(0, 2, "run:b")], "b": [_config(0, 2, "run:a")]}
            with self.assertRaisesRegex(ValueError, r"runs \['a', 'b'\] start from each other"):
                study.run_study(cycle, workdir)
            fake.assert_not_called()  # found before anything is trained

    def test_raw_dir_gets_each_run_as_it_finishes_and_gives_it_to_a_fresh_workdir(self):
        root = self.enter_context(tempfile.TemporaryDirectory())
        raw, first, fresh = (os.path.join(root, d) for d in ("raw", "first", "fresh"))
        runs = {"a": [_config(0), _config(1)], "b": [_config(0, 2, "run:a"), _config(1, 2)]}
        interrupted = [None, None, KeyboardInterrupt]  # the third run is stopped

        def training(cfg, workdir):
            if interrupted.pop(0):
                raise KeyboardInterrupt
            return _fake_training(cfg, workdir)

        with mock.patch.object(study, "train_and_evaluate", side_effect=training):
            with self.assertRaises(KeyboardInterrupt):
                study.run_study(runs, first, raw_dir=raw)
        exported = sorted(os.path.relpath(p, raw) for p, _, f in os.walk(raw) if f)
        self.assertEqual(exported, ["a/seed0", "a/seed1"])  # before the study ended
        shutil.rmtree(os.path.join(raw, "a"))  # a finished run goes there when found, too
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            results = study.run_study(runs, first, raw_dir=raw)
            self.assertTrue(run_dirs.is_finished(run_dirs.run_dir(raw, "a", 1), 4))
            self.assertEqual(
                [c.args[1] for c in fake.mock_calls],
                [run_dirs.run_dir(first, "b", s) for s in (0, 1)],
            )
            fake.reset_mock()
            self.assertEqual(study.run_study(runs, fresh, raw_dir=raw), results)
            # "b" is restored; "a" is trained again: it holds the checkpoints "b" seed 0
            # starts from, which a raw folder has not.
            self.assertEqual(
                [c.args[1] for c in fake.mock_calls],
                [run_dirs.run_dir(fresh, "a", s) for s in (0, 1)],
            )
            # Runs whose checkpoints the caller needs after the study are trained, too.
            fake.reset_mock()
            study.run_study(
                runs, os.path.join(root, "again"), raw_dir=raw, checkpoints_needed=["b"]
            )
            self.assertEqual(fake.call_count, 4)
        other = dataclasses.asdict(_config(1, 2))
        other["optim"]["warmup_steps"] = 2
        with open(os.path.join(run_dirs.run_dir(raw, "b", 1), "config.json"), "w") as f:
            json.dump(other, f)
        # Finished in the workdir: nothing to restore, so nothing to compare.
        finished = run_dirs.run_dir(fresh, "b", 1)
        self.assertFalse(raw_files.restore_raw(finished, _config(1, 2), raw, "b", fresh))
        with self.assertRaisesRegex(ValueError, r"another config \(differs in optim.warmup"):
            raw_files.restore_raw(os.path.join(root, "new"), _config(1, 2), raw, "b", root)

    def test_export_raw_copies_each_runs_metrics_and_config_only(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        dest = os.path.join(workdir, "raw")
        runs = {"a": [_config(0), _config(1)]}
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training):
            study.run_study(runs, workdir)
        for file in ("config.json", "provenance.json"):
            with open(os.path.join(run_dirs.run_dir(workdir, "a", 1), file), "w") as f:
                f.write("{}")
        os.makedirs(os.path.join(run_dirs.run_dir(workdir, "a", 0), "checkpoints"))
        self.assertEqual(raw_files.export_raw(runs, workdir, dest), 4)
        self.assertEqual(
            sorted(os.listdir(run_dirs.run_dir(dest, "a", 1))), list(sorted(raw_files.RAW_FILES))
        )
        self.assertEqual(os.listdir(run_dirs.run_dir(dest, "a", 0)), ["metrics.jsonl"])
        scores = os.path.join(run_dirs.run_dir(workdir, "a", 1), "length_eval")
        os.makedirs(scores)
        for file in ("x.json", "y.json"):
            with open(os.path.join(scores, file), "w") as f:
                f.write("{}")
        self.assertEqual(raw_files.export_raw(runs, workdir, dest, folders=("length_eval",)), 6)
        copied = os.path.join(run_dirs.run_dir(dest, "a", 1), "length_eval")
        self.assertEqual(sorted(os.listdir(copied)), ["x.json", "y.json"])

    def test_summary_and_report(self):
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        results = {
            "x": [
                [{"step": 1, "train/loss": 3.0, "elapsed_s": 1.0}],
                [{"step": 1, "train/loss": 5.0, "elapsed_s": 1.0}],
            ],
            "y": [[{"step": 1, "train/loss": 2.0}]],
        }
        table = tables.summary_table(results, ["train/loss", "valid/loss_128"])
        self.assertIn("| x | 2 | 4 ± 1.4 | n/a | 1 ± 0 |", table)  # sample std, ddof 1
        self.assertIn("| y | 1 | 2 | n/a | n/a |", table)
        self.assertEqual(
            tables.paired_table(results, "x", "train/loss").splitlines()[2:],
            ["| y | -1.000 | 1 | -1.000 |"],  # y's one seed against x's seed 0: no interval
        )
        # 3 seeds: mean 2, sample std 1, t(0.975, 2) = 4.303 -> 2 ± 4.303 / sqrt(3).
        results["x"].append([{"step": 1, "train/loss": 5.0}])  # x: 3, 5, 5
        results["w"] = [[{"step": 1, "train/loss": loss}] for loss in (4.0, 8.0, 7.0)]
        self.assertIn(
            "| w | +2.000 [-0.484, +4.484] | 3 | +1.000, +3.000, +2.000 |",
            tables.paired_table(results, "x", "train/loss"),
        )
        with self.assertRaisesRegex(ValueError, "baseline 'z' is not one of the runs"):
            tables.paired_table(results, "z", "train/loss")
        png, md = compare_report.write_report(
            results,
            workdir,
            title="t",
            plot_keys=["train/loss"],
            table_keys=["train/loss"],
            footnote="data: test",
            baseline="y",
            paired_key="train/loss",
        )
        self.assertGreater(os.path.getsize(png), 1000)
        with open(md, encoding="utf-8") as f:
            text = f.read()
        self.assertIn("data: test", text)
        self.assertIn("| x | +1.000 | 1 | +1.000 |", text)

    def test_extremes_table_is_each_seeds_extreme_over_training(self):
        def run(denominators, grads):
            return [
                {"step": i, "train/min_denominator": d, "train/grad_norm_max": g}
                for i, (d, g) in enumerate(zip(denominators, grads))
            ]

        results = {
            "eq 18": [run((5.0, 0.002, 3.0), (1.0, 40.0, 2.0)), run((4.0, 2.0, 1.0), (1,) * 3)],
            "softmax": [[{"step": 0, "train/grad_norm_max": 0.5}]],  # no denominator
        }
        table = tables.extremes_table(
            results, {"train/min_denominator": "min", "train/grad_norm_max": "max"}
        )
        self.assertEqual(
            table.splitlines()[2:],
            [
                "| eq 18 | 2 | 0.002, 1 | 40, 1 |",  # the spike is the one record it is in
                "| softmax | 1 | – | 0.5 |",
            ],
        )

    def test_paired_curves_through_training(self):
        def run(*losses):  # evaluations at steps 10, 20 (and 30 where given)
            return [{"step": 10 * (i + 1), "valid/loss": v} for i, v in enumerate(losses)]

        results = {
            "base": [run(5.0, 4.0, 3.0), run(6.0, 5.0), run(5.5, 4.5, 3.5)],
            "new": [run(4.0, 3.0, 2.0), run(4.0, 4.0), run(5.5, 2.5, 1.5)],
        }
        curve = tables.paired_curves(results, "base", "valid/loss")["new"]
        self.assertEqual(curve["step"], [10, 20])  # the steps every seed logged
        self.assertEqual(curve["n"], 3)
        # step 10: differences -1, -2, 0 -> mean -1, sample std 1, t(0.975, 2) = 4.303.
        np.testing.assert_allclose(
            [curve["mean"][0], curve["low"][0], curve["high"][0]],
            [-1.0, -1.0 - 4.303 / np.sqrt(3), -1.0 + 4.303 / np.sqrt(3)],
            atol=1e-3,
        )
        one = tables.paired_curves({"base": [run(5.0)], "new": [run(4.5)]}, "base", "valid/loss")
        self.assertEqual((one["new"]["mean"], one["new"]["low"]), ([-0.5], [-0.5]))

    def test_paired_diffs_at_a_step_and_below_from(self):
        def run(*losses):  # evaluations at steps 0, 10, 20, 30
            return [{"step": 10 * i, "valid/loss": v} for i, v in enumerate(losses)]

        results = {
            "base": [run(5.0, 5.0, 5.0, 5.0), run(5.0, 5.0, 5.0, 5.0), run(5.0, 5.0, 5.0, 5.0)],
            # Ahead at step 0 and from step 20 on; behind in one seed at step 10.
            "new": [run(4.0, 4.0, 4.0, 4.1), run(4.2, 5.9, 4.2, 4.0), run(4.1, 4.0, 4.1, 4.2)],
        }
        diffs = tables.paired_diffs(results, "new", "base", "valid/loss", step=10)
        np.testing.assert_allclose(diffs, [-1.0, 0.9, -1.0])
        np.testing.assert_allclose(
            tables.paired_diffs(results, "new", "base", "valid/loss"), [-0.9, -1.0, -0.8]
        )
        curve = tables.paired_curves(results, "base", "valid/loss")["new"]
        self.assertEqual(tables.below_from(curve), 20)  # not 0: step 10's interval holds zero
        curve["high"][-1] = 0.01  # not below zero at the end: never settled
        self.assertIsNone(tables.below_from(curve))

    def test_reaches_is_the_first_step_at_the_baselines_final_loss(self):
        def run(*losses):  # evaluations at steps 0, 10, 20, 30
            return [{"step": 10 * i, "valid/loss": v} for i, v in enumerate(losses)]

        results = {
            "base": [run(6.0, 5.5, 5.2, 5.0), run(6.0, 5.5, 5.0, 4.8)],  # final mean 4.9
            "fast": [run(5.0, 4.8, 4.0, 3.0), run(5.0, 5.1, 4.0, 3.0)],  # 4.95 at 10, 4.0 at 20
            "slow": [run(6.5, 6.0, 5.5, 5.0), run(6.5, 6.0, 5.5, 4.9)],
        }
        self.assertEqual(tables.reaches(results, "fast", "base", "valid/loss"), 20)
        self.assertIsNone(tables.reaches(results, "slow", "base", "valid/loss"))
        self.assertEqual(tables.reaches(results, "base", "base", "valid/loss"), 30)

    def test_a_reading_of_each_trained_run_goes_beside_it_and_to_the_raw_folder(self):
        workdir, raw = tempfile.mkdtemp(), tempfile.mkdtemp()
        for name, seed in (("b", 1), ("a", 0), ("b", 0)):
            directory = run_dirs.run_dir(workdir, name, seed)
            os.makedirs(directory)
            open(os.path.join(directory, "config.json"), "w").close()
        os.makedirs(os.path.join(workdir, "data", "seed0"))  # not a run: no config.json
        found = run_dirs.trained_runs(workdir)
        self.assertEqual(
            [os.path.relpath(d, workdir) for d in found], ["a/seed0", "b/seed0", "b/seed1"]
        )
        run_dirs.write_beside(found[2], workdir, raw, "reading.json", {"x": 1})
        for folder in (found[2], os.path.join(raw, "b", "seed1")):
            with open(os.path.join(folder, "reading.json"), encoding="utf-8") as f:
                self.assertEqual(json.load(f), {"x": 1})
        # A study that shares the workdir reads its own runs only.
        study_record.write(raw, {"config": {"runs": {"b": {}}, "seeds": [1]}})
        self.assertEqual(study_record.trained_runs(workdir, raw), [found[2]])
        self.assertEqual(study_record.trained_runs(workdir), found)
        with self.assertRaisesRegex(FileNotFoundError, "a study's raw folder"):
            study_record.trained_runs(workdir, workdir)

    def test_holm_text_keeps_what_survives_the_family(self):
        family = {
            "far": [-1.0, -1.1, -0.9],  # t = -17.3, p = 0.0033: x 3 = 0.0100, kept
            "near": [-0.1, -0.3, -0.2],  # t = -3.46, p = 0.074: apart from 0 in no test
            "edge": [-0.5, -0.3, -0.3],  # t = -5.50, p = 0.0315: x 2 = 0.063, lost
            "one seed": [-5.0],  # no interval: not in the family
        }
        text = tables.holm_text(family, "each run minus base, final")
        self.assertIn("3 paired intervals (each run minus base, final); 2 exclude 0 at 95%", text)
        self.assertIn("the first must reach |t| ≥ 7.65 (2 d.f.)", text)  # t.isf(0.05 / 6, 2)
        self.assertIn("1 of those 2 stays apart from 0: far (p = 0.0033, Holm 0.01)", text)
        self.assertIn("1 does not: edge (p = 0.032, Holm 0.063).", text)
        self.assertIn("none is apart from 0 either", tables.holm_text({"near": family["near"]}, ""))

    def test_footnote_names_data_size_machine_and_floor(self):
        machine = {"device_count": 1, "backend": "cpu", "cpus": 2, "architecture": "x86_64"}
        note = compare_report.footnote(_config(0), (0, 1, 2), machine, 6.7743)
        self.assertIn("(bytes, vocab ", note)
        self.assertIn("4 steps", note)
        self.assertIn("seeds (0, 1, 2); 1 cpu device(s), 2 cores (x86_64)", note)
        self.assertTrue(note.endswith("unigram cross-entropy of the validation tokens 6.774"))


if __name__ == "__main__":
    absltest.main()
