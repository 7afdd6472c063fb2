"""Tests for roformer_jax/studies/study.py: caching of finished runs, the order runs train in,
runs started from another run, and the raw folder a fresh workdir is restored from."""

import dataclasses
import json
import os
import shutil
import tempfile
from unittest import mock

from absl.testing import absltest
from study_cases import _config, _fake_training

from configs import compare, study_multilength
from roformer_jax.studies import raw_files, run_dirs, study


class StudyTest(absltest.TestCase):
    def test_a_config_is_checked_before_anything_trains(self):
        # A repeated seed was one run counted as two samples (an interval of width 0); a
        # baseline named wrong failed only after the whole study, as a KeyError.
        for changes, message in (
            (dict(seeds=(0, 0)), r"config.seeds \(0, 0\) repeats \[0\]"),
            (dict(seeds=()), r"config.seeds is empty"),
            (dict(baseline="BERT"), r"config.baseline 'BERT' is none of \['BERT \(learned"),
        ):
            config = compare.get_config()
            config.update(changes)
            with self.assertRaisesRegex(ValueError, message):
                study.study_runs(config)
        config = study_multilength.get_config("wikitext2")
        config.eval_baselines = ("Rope",)
        with self.assertRaisesRegex(ValueError, r"config.eval_baselines 'Rope' is none of"):
            study.study_runs(config)
        # The length figure's reference: a KeyError after 20,000 steps of ALiBi at 8 heads.
        config = study_multilength.get_config("wikitext2")
        config.position_reference = "no positions"
        with self.assertRaisesRegex(ValueError, r"config.position_reference 'no positions'"):
            study.study_runs(config)

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

    def test_a_share_of_a_study_is_the_runs_named_in_its_order(self):
        # compare.py --only: a second process trains runs the first has not reached.
        runs = {"b": [_config(0)], "a": [_config(0), _config(1)], "c": [_config(0)]}
        self.assertEqual(list(study.select_runs(runs, ["c", "b"])), ["b", "c"])
        self.assertEqual(study.select_runs(runs, []), runs)
        with self.assertRaisesRegex(ValueError, r"\['d'\] are none of the study's runs"):
            study.select_runs(runs, ["a", "d"])

    def test_a_runs_folder_is_refused_as_a_studys_workdir(self):
        # A run's folder given as --workdir: the study's runs would nest inside it.
        workdir = self.enter_context(tempfile.TemporaryDirectory())
        runs = {"a": [_config(0)]}
        with mock.patch.object(study, "train_and_evaluate", side_effect=_fake_training) as fake:
            study.run_study(runs, workdir)
            with self.assertRaisesRegex(ValueError, "is a run's folder"):
                study.run_study(runs, run_dirs.run_dir(workdir, "a", 0))
            self.assertEqual(fake.call_count, 1)

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


if __name__ == "__main__":
    absltest.main()
