"""Tests for roformer_jax/studies/reproduction.py: a rerun's metrics against the record's."""

import json
import os
import shutil
import subprocess
import sys

import tiny
from absl.testing import absltest

from roformer_jax.studies import raw_files, reproduction, run_dirs
from roformer_jax.training import loop, metrics, provenance

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def _records(loss=(2.0, 1.5), clock=(1.0, 2.0)):
    return [
        {"step": 10, "train/loss": loss[0], "train/tokens_per_s": 900.0, "elapsed_s": clock[0]},
        {"step": 20, "train/loss": loss[1], "valid/loss_128": 1.4, "elapsed_s": clock[1]},
    ]


class CompareRecordsTest(absltest.TestCase):
    def test_the_same_numbers_on_other_clocks_are_identical(self):
        record = reproduction.compare_records(_records(), _records(clock=(5.0, 9.0)))
        self.assertEqual(
            record,
            {
                "steps": 2,
                "metrics": 2,
                "identical": True,
                "largest": {},
                "final": {"valid/loss_128": [1.4, 1.4]},
                "only_record": [],
                "only_rerun": [],
            },
        )
        self.assertEqual(reproduction.summary(record), "bit-identical (2 logged steps, 2 metrics)")

    def test_a_last_bit_is_a_difference(self):
        rerun = _records(loss=(2.0, 1.5 + 2**-52))
        rerun[1]["valid/loss_128"] = 1.40004
        record = reproduction.compare_records(_records(), rerun)
        self.assertFalse(record["identical"])
        self.assertEqual(record["largest"]["train/loss"], 2**-52 / (1.5 + 2**-52))
        self.assertEqual(
            reproduction.summary(record),
            "not bit-identical (2 logged steps, 2 "
            "metrics; 2 differ), the losses by at most 2.9e-05 relative (in "
            "valid/loss_128); "
            "final valid/loss_128 1.4000 then, 1.4000 now",
        )

    def test_a_rerun_stopped_early_is_compared_to_its_last_step(self):
        rerun = _records()[:1]
        record = reproduction.compare_records(_records(), rerun, until=10)
        self.assertEqual((record["steps"], record["until"], record["of_steps"]), (1, 10, 20))
        self.assertEqual(
            reproduction.summary(record),
            "bit-identical over its first 10 of 20 steps (1 logged steps, 1 metrics)",
        )
        rerun[0]["train/loss"] = 2.5
        self.assertEqual(
            reproduction.summary(reproduction.compare_records(_records(), rerun, until=19)),
            "not bit-identical over its first 19 of 20 steps (1 logged steps, 1 "
            "metrics; 1 differ), the losses by at most 2.0e-01 relative (in "
            "train/loss)",
        )
        # Stopped at or past the record's end: the whole run, said as such.
        self.assertNotIn("until", reproduction.compare_records(_records(), _records(), until=20))

    def test_other_steps_are_an_error_and_other_metrics_are_named(self):
        with self.assertRaisesRegex(ValueError, "logged steps"):
            reproduction.compare_records(_records(), _records()[:1])
        other = _records()
        del other[1]["valid/loss_128"]
        other[0]["train/grad_norm_max"] = 1.0  # a metric the trainer logs since
        record = reproduction.compare_records(_records(), other)
        self.assertEqual(
            (record["only_record"], record["only_rerun"], record["metrics"]),
            (["valid/loss_128"], ["train/grad_norm_max"], 1),
        )
        self.assertEqual(
            reproduction.summary(record),
            "bit-identical (2 logged steps, 1 "
            "metrics); only the record logged valid/loss_128; only the rerun "
            "logged train/grad_norm_max",
        )


class TrainedVersionTest(absltest.TestCase):
    def _session(self, commit="abc", cpus=2):
        return {
            "commit": commit,
            "dirty": False,
            "start_step": 0,
            "started": "today",
            "machine": {"cpus": cpus, "backend": "cpu"},
        }

    def test_one_version_over_its_sessions_is_the_reruns_fields(self):
        resumed = {**self._session(), "start_step": 500, "started": "tomorrow"}
        version = reproduction.trained_version({"sessions": [self._session(), resumed]})
        self.assertEqual(
            version, {"commit": "abc", "dirty": False, "machine": {"cpus": 2, "backend": "cpu"}}
        )

    def test_another_commit_or_machine_or_none_is_an_error(self):
        for sessions in (
            [self._session(), self._session(commit="def")],
            [self._session(), self._session(cpus=8)],
            [],
        ):
            with self.assertRaisesRegex(ValueError, "one code version"):
                reproduction.trained_version({"sessions": sessions})
        with self.assertRaisesRegex(ValueError, "one code version"):
            reproduction.trained_version(None)


class CommandTest(absltest.TestCase):
    """experiments/reproduce.py on a 3-step tiny run: retrained, and read from a run trained."""

    def _trained(self, tmp: str, name: str, **overrides) -> tuple[str, str]:
        """(its workdir, the raw root) of a 3-step tiny run `name` trained and exported."""
        cfg = tiny.experiment_config(
            data__source=tiny.corpus(tmp),
            data__seq_len=32,
            data__valid_lengths=(32,),
            data__max_chars=None,
            model__num_layers=1,
            optim__warmup_steps=1,
            train__steps=3,
            train__batch_size=4,
            train__log_every=1,
            train__eval_every=3,
            train__eval_batches=1,
            train__checkpoint_every=3,
            train__data_cache_dir=os.path.join(tmp, "data"),
            **overrides,
        )
        workdir, raw_root = os.path.join(tmp, name), os.path.join(tmp, "raw")
        loop.train_and_evaluate(cfg, workdir)
        raw_files.export_run(workdir, run_dirs.run_dir(raw_root, name, cfg.seed))
        return workdir, raw_root

    def _reproduce(self, raw_root: str, run: str, *flags: str) -> subprocess.CompletedProcess:
        command = [
            sys.executable,
            os.path.join(_ROOT, "experiments", "reproduce.py"),
            f"--raw_dir={raw_root}",
            f"--run={run}",
            "--seed=0",
            *flags,
        ]
        return subprocess.run(command, capture_output=True, text=True)

    def _record(self, raw_root: str, run: str) -> dict:
        path = os.path.join(run_dirs.run_dir(raw_root, run, 0), reproduction.FILE)
        with open(path, encoding="utf-8") as f:
            return json.load(f)

    def test_a_rerun_is_compared_and_names_its_own_version(self):
        tmp = tiny.workdir("reproduce_test_")
        first, raw_root = self._trained(tmp, "r")
        again = os.path.join(tmp, "again")
        for where in (f"--workdir={again}", f"--trained={first}"):
            done = self._reproduce(raw_root, "r", where)
            self.assertEqual(done.returncode, 0, done.stderr[-3000:])
            record = self._record(raw_root, "r")
            self.assertTrue(record["identical"], where)
            self.assertEqual(record["steps"], 3)
            session = provenance.read(run_dirs.run_dir(again, "r", 0))["sessions"][0]
            self.assertEqual(record["commit"], session["commit"])
            self.assertEqual(record["machine"], session["machine"])
        done = self._reproduce(raw_root, "R", f"--workdir={again}")  # names are exact
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--run='R' --seed=0: no such run in", done.stderr)
        self.assertIn("which holds r/seed0", done.stderr)
        # A rerun resumed at another commit is not one version's numbers.
        # The rerun trains in a study's layout, where the readers of checkpoints look.
        path = os.path.join(run_dirs.run_dir(again, "r", 0), provenance.FILE)
        with open(path, encoding="utf-8") as f:
            sessions = json.load(f)
        sessions["sessions"].append({**session, "commit": "another", "start_step": 2})
        with open(path, "w", encoding="utf-8") as f:
            json.dump(sessions, f)
        for where in (f"--workdir={again}", f"--trained={run_dirs.run_dir(again, 'r', 0)}"):
            # --workdir: the run is there, finished, and not retrained
            done = self._reproduce(raw_root, "r", where)
            self.assertNotEqual(done.returncode, 0, where)
            self.assertIn("one code version", done.stderr, where)

    def test_a_run_started_from_another_starts_from_that_ones_finished_rerun(self):
        tmp = tiny.workdir("reproduce_test_")
        first, raw_root = self._trained(tmp, "a")
        self._trained(tmp, "b", train__init_from=first)
        again = os.path.join(tmp, "again_b")
        done = self._reproduce(raw_root, "b", f"--workdir={again}")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--init_from", done.stderr)
        # a, moved, stands in for its rerun (trained at this commit, on this machine): b's
        # record names a's old folder, which must not be read.
        rerun = os.path.join(tmp, "a_rerun")
        os.rename(first, rerun)
        done = self._reproduce(raw_root, "b", f"--workdir={again}", f"--init_from={rerun}")
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        self.assertTrue(self._record(raw_root, "b")["identical"])
        # A start trained in another version: b's rerun is no one version's numbers.
        other = os.path.join(tmp, "other")
        shutil.copytree(rerun, other)
        sessions = provenance.read(rerun)
        for session in sessions["sessions"]:
            session["commit"] = "another"
        with open(os.path.join(other, provenance.FILE), "w", encoding="utf-8") as f:
            json.dump(sessions, f)
        done = self._reproduce(raw_root, "b", f"--workdir={again}", f"--init_from={other}")
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("another version", done.stderr)
        # a's first 2 of 3 steps retrained (--steps): compared to step 2, and no start for b.
        early = os.path.join(tmp, "a_early")
        done = self._reproduce(raw_root, "a", f"--workdir={early}", "--steps=2")
        self.assertEqual(done.returncode, 0, done.stderr[-3000:])
        record = self._record(raw_root, "a")
        self.assertEqual((record["identical"], record["until"], record["of_steps"]), (True, 2, 3))
        self.assertEqual(metrics.read_metrics(run_dirs.run_dir(early, "a", 0))[-1]["step"], 2)
        done = self._reproduce(
            raw_root, "b", f"--workdir={again}_2", f"--init_from={run_dirs.run_dir(early, 'a', 0)}"
        )
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("has not finished its 3 steps", done.stderr)


if __name__ == "__main__":
    absltest.main()
