"""Tests for roformer_jax/studies/run_dirs.py: a run's directory under a moved workdir, the
trained runs of a workdir, and what is written beside each."""

import json
import os
import tempfile

from absl.testing import absltest

from roformer_jax.studies import run_dirs, study_record


class RunDirsTest(absltest.TestCase):
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


if __name__ == "__main__":
    absltest.main()
