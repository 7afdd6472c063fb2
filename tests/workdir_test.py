"""Tests for roformer_jax/training/workdir.py: a workdir that knows its run, through the trainer."""

import json
import os
import signal
import subprocess
import sys

import tiny
from absl.testing import absltest

from roformer_jax.training import provenance, workdir
from roformer_jax.training.loop import train_and_evaluate

_TMP = tiny.workdir("workdir_test_")


def _config(**overrides):
    """configs/tiny.py, one layer, on the generated corpus, 2 steps of a few rows."""
    short = dict(
        data__source=tiny.corpus(_TMP),
        data__seq_len=32,
        data__valid_lengths=(),
        data__max_chars=None,
        model__num_layers=1,
        optim__warmup_steps=1,
        train__steps=2,
        train__batch_size=4,
        train__eval_every=2,
        train__checkpoint_every=2,
        train__eval_batches=1,
        train__data_cache_dir=os.path.join(_TMP, "data"),
    )
    return tiny.experiment_config(**{**short, **overrides})


def _hold_lock(path: str) -> subprocess.Popen:
    """Another process that holds the lock of `path` until killed."""
    code = (
        "import fcntl, sys, time\n"
        f"f = open({os.path.join(path, workdir.LOCK_FILE)!r}, 'a')\n"
        "fcntl.flock(f, fcntl.LOCK_EX)\n"
        "print('locked', flush=True)\n"
        "time.sleep(600)\n"
    )
    holder = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert holder.stdout.readline() == "locked\n"
    return holder


class FolderTest(absltest.TestCase):
    def test_a_foreign_folder_is_refused_and_left_alone(self):
        hf = tiny.workdir()
        with open(os.path.join(hf, "config.json"), "w", encoding="utf-8") as f:
            json.dump({"model_type": "roformer", "hidden_size": 64}, f)
        with self.assertRaisesRegex(ValueError, r"holds a config.json of no training run"):
            train_and_evaluate(_config(), hf)
        with open(os.path.join(hf, "config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f), {"model_type": "roformer", "hidden_size": 64})
        other = tiny.workdir()
        open(os.path.join(other, "notes.txt"), "w").close()
        with self.assertRaisesRegex(ValueError, r"holds no run \(notes.txt\)"):
            train_and_evaluate(_config(), other)
        self.assertEqual(os.listdir(other), ["notes.txt"])

    def test_a_cut_off_config_json_is_named(self):
        path = tiny.workdir()
        with open(os.path.join(path, "config.json"), "w", encoding="utf-8") as f:
            f.write('{"model": {"hidden_size": 6')
        with self.assertRaisesRegex(ValueError, r"config.json is cut off or not JSON"):
            train_and_evaluate(_config(), path)

    def test_a_workdir_inside_the_corpus_folder_is_refused(self):
        corpus = tiny.workdir()
        tiny.corpus(corpus)
        with self.assertRaisesRegex(ValueError, r"overlap: a run would read its own files"):
            train_and_evaluate(_config(data__source=corpus), os.path.join(corpus, "run"))

    def test_a_second_process_is_kept_out_and_a_dead_one_blocks_nothing(self):
        path = tiny.workdir()
        holder = _hold_lock(path)
        try:
            with self.assertRaisesRegex(ValueError, r"in use by another process"):
                train_and_evaluate(_config(), path)
        finally:
            os.kill(holder.pid, signal.SIGKILL)
            holder.wait()
        with workdir.claimed(path):  # the lock file stays; its lock went with the process
            self.assertEqual(os.listdir(path), [workdir.LOCK_FILE])


class ResumeTest(absltest.TestCase):
    def test_a_changed_resume_is_refused_unless_asked_then_recorded(self):
        path = tiny.workdir()
        train_and_evaluate(_config(), path)
        changed = _config(seed=7, optim__learning_rate=0.05, train__steps=3)
        with self.assertRaisesRegex(
            ValueError, r"another config \(optim.learning_rate: 0.001 -> 0.05; seed: 0 -> 7\)"
        ):
            train_and_evaluate(changed, path)
        with self.assertRaisesRegex(ValueError, r"train.steps=1 is below the newest checkpoint"):
            train_and_evaluate(_config(train__steps=1), path, resume_with_changes=True)
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["seed"], 0)  # nothing rewritten

        last = train_and_evaluate(changed, path, resume_with_changes=True)
        self.assertEqual(last["step"], 3)
        with open(os.path.join(path, "config.json"), encoding="utf-8") as f:
            saved = json.load(f)
        expected = {
            "optim.learning_rate": [0.001, 0.05],
            "seed": [0, 7],
            "train.steps": [2, 3],
        }
        self.assertEqual(saved["seed"], 7)
        self.assertEqual(saved["history"], [{"start_step": 2, "changed": expected}])
        self.assertEqual(provenance.read(path)["sessions"][-1]["config_changes"], expected)

    def test_a_longer_run_and_how_often_it_logs_are_not_changes_of_meaning(self):
        path = tiny.workdir()
        train_and_evaluate(_config(), path)
        self.assertEqual(
            workdir.resume_changes(
                path, _config(train__steps=9, train__log_every=1), latest_step=2, allow=False
            ),
            {"train.steps": (2, 9)},
        )
        # Another mesh computes the same numbers (a checkpoint restores onto any mesh: tests/
        # mesh_test.py), elsewhere: recorded, not refused.
        moved = _config(mesh__fsdp=1, mesh__tensor=1)
        changes = workdir.resume_changes(path, moved, latest_step=2, allow=False)
        self.assertEqual(changes, {"mesh.fsdp": (None, 1), "mesh.tensor": (None, 1)})
        with self.assertRaisesRegex(ValueError, r"train.steps: 2 -> 1"):
            workdir.resume_changes(path, _config(train__steps=1), latest_step=None, allow=False)


if __name__ == "__main__":
    absltest.main()
