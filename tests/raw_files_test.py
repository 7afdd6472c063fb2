"""Tests for roformer_jax/studies/raw_files.py: what a study's raw export copies."""

import os
import tempfile
from unittest import mock

from absl.testing import absltest
from study_cases import _config, _fake_training

from roformer_jax.studies import raw_files, run_dirs, study


class RawFilesTest(absltest.TestCase):
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


if __name__ == "__main__":
    absltest.main()
