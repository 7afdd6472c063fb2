"""Tests for roformer_jax/studies/length_bench.py, length_bench_report.py and
page_length_bench.py: configs/bench_length.py's smoke variant runs end to end once (setUpClass,
its models compiled once), resumes without running again, refuses changed settings, writes raw
files the page reads back; every task's full config builds its arms."""

import copy
import json
import os
import shutil
import tempfile
from unittest import mock

import chex
import numpy as np
from absl.testing import absltest, parameterized
from ml_collections import ConfigDict

from configs import bench_length
from roformer_jax.data import retrieval_tasks
from roformer_jax.studies import (
    length_bench,
    length_bench_report,
    own_runs,
    results_page,
    study_record,
)
from roformer_jax.studies.run_dirs import run_dir
from roformer_jax.training import provenance

NAME = "bench_passkey"


def _render(raw_root, marker):
    text = f"<!-- generated: raw {marker} --><!-- end generated -->"
    return results_page.render(text, raw_root).split("-->")[1].split("<!--")[0].strip()


class LengthBenchTest(parameterized.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.temp = tempfile.TemporaryDirectory()
        cls.workdir = os.path.join(cls.temp.name, "work")
        cls.raw_root = os.path.join(cls.temp.name, "raw")
        cls.raw = os.path.join(cls.raw_root, NAME)
        cls.config = bench_length.get_config("passkey,smoke").to_dict()
        cls.logged = []
        cls.results = length_bench.run_study(
            cls.config, cls.workdir, raw_dir=cls.raw, log=cls.logged.append
        )
        machine = {"cpus": 2, "architecture": "x86_64", "jax": "0.10", "backend": "cpu"}
        record = {"config": cls.config, "argv": ["bench"], "wall_s": 61.0, "machine": machine}
        length_bench.write_record(cls.raw, {**record, "code": {"commit": "abc1234"}})

    @classmethod
    def tearDownClass(cls):
        cls.temp.cleanup()
        super().tearDownClass()

    def test_every_run_is_scored_at_every_length_and_depth(self):
        lengths = [str(n) for n in length_bench.eval_lengths(self.config)]
        self.assertEqual(list(self.results), list(self.config["arms"]))
        for seeds in self.results.values():
            self.assertEqual([r["seed"] for r in seeds], list(self.config["seeds"]))
            for result in seeds:
                self.assertEqual(set(result["accuracy"]), {"text", "filler"})
                for eval_set, by_length in result["accuracy"].items():
                    self.assertEqual(list(by_length), lengths)
                    self.assertTrue(all(0 <= a <= 1 for a in by_length.values()))
                    bins = result["by_depth"][eval_set][lengths[0]]
                    self.assertLen(bins, len(self.config["depth_edges"]) - 1)
        # A read arm scores its trained arm's parameters: at the trained length, with no
        # scaling to apply, it reads what RoPE read.
        for rope, yarn in zip(self.results["RoPE"], self.results["RoPE + YaRN"]):
            self.assertEqual(
                rope["accuracy"]["text"][lengths[0]], yarn["accuracy"]["text"][lengths[0]]
            )
        self.assertTrue(any("running" in line for line in self.logged))
        # Each run names the code it trained at (a bench runs in pieces, across commits).
        self.assertEqual(self.results["RoPE"][0]["code"], provenance.code_version())
        self.assertEqual(self.results["RoPE"][0]["xla_flags"], os.environ.get("XLA_FLAGS", ""))

    def test_a_rerun_resumes_from_the_cache(self):
        logged = []
        again = length_bench.run_study(self.config, self.workdir, log=logged.append)
        self.assertEqual(logged, [])  # nothing ran
        self.assertEqual(
            again["RoPE + YaRN"][1]["accuracy"], self.results["RoPE + YaRN"][1]["accuracy"]
        )

    def test_a_fresh_machine_takes_the_finished_runs_back_from_the_raw_folder(self):
        # The raw folder without a read arm's run: only that runs, on its trained arm's
        # parameters trained again (seeded: the same model, so the same scores).
        raw = os.path.join(self.temp.name, "raw_partial")
        shutil.copytree(self.raw, raw)
        result = os.path.join(run_dir(raw, "RoPE + YaRN", 1), length_bench.RESULT)
        os.remove(result)
        fresh, logged = os.path.join(self.temp.name, "fresh"), []
        again = length_bench.run_study(self.config, fresh, raw_dir=raw, log=logged.append)
        self.assertLen(logged, 2)
        self.assertStartsWith(logged[0], "[4/4] RoPE + YaRN seed 1: running")
        ran_again = again["RoPE + YaRN"].pop(1)
        self.assertEqual(ran_again["accuracy"], self.results["RoPE + YaRN"][1]["accuracy"])
        self.assertEqual(again, {**self.results, "RoPE + YaRN": self.results["RoPE + YaRN"][:1]})
        self.assertTrue(os.path.exists(result))
        os.remove(os.path.join(raw, length_bench.RECORD))
        # Without its record the bench is in progress: the header says how far, the blocks
        # after it are empty.
        root = os.path.dirname(raw)
        header = _render(root, 'bench_header("raw_partial")')
        self.assertStartsWith(header, "*In progress: 4 runs finished so far, in raw_partial/;")
        self.assertEqual(_render(root, 'bench_table("raw_partial", "text")'), "")

    def test_a_command_that_trained_nothing_keeps_the_record(self):
        # Its record would name its commit and its seconds of no training.
        config = ConfigDict(self.config)
        before = study_record.kept_record(self.raw, config, length_bench.RECORD)
        self.assertLen(before, len(self.config["arms"]) * len(self.config["seeds"]))
        self.assertTrue(study_record.unchanged(self.raw, before, length_bench.RECORD))
        retrained = {**before, next(iter(before)): "another result"}
        self.assertFalse(study_record.unchanged(self.raw, retrained, length_bench.RECORD))
        self.assertIsNone(study_record.kept_record(self.raw, config, "none.json"))
        other = ConfigDict({**self.config, "steps": self.config["steps"] + 1})
        self.assertIsNone(study_record.kept_record(self.raw, other, length_bench.RECORD))

    def test_a_killed_run_goes_on_from_its_snapshot_to_the_same_parameters(self):
        settings = {**length_bench.arms(self.config)["RoPE"], "steps": 20}  # snapshots at 5, 10, 15
        whole = length_bench.train(settings, 0)
        directory = os.path.join(self.temp.name, "killed")
        draw, calls = retrieval_tasks.generate, []

        def killed_at_step_12(*args, **kwargs):
            calls.append(1)
            if len(calls) > 13:  # the init's rows, then steps 0-11
                raise KeyboardInterrupt
            return draw(*args, **kwargs)

        with mock.patch.object(retrieval_tasks, "generate", killed_at_step_12):
            with self.assertRaises(KeyboardInterrupt):
                length_bench.train(settings, 0, snapshot_dir=directory)
        self.assertGreater(length_bench.snapshot_seconds(directory), 0)
        resumed = length_bench.train(settings, 0, snapshot_dir=directory)
        chex.assert_trees_all_equal(resumed[0], whole[0])
        self.assertEqual(resumed[1], whole[1])  # the loss curve, before and after the kill
        with self.assertRaisesRegex(ValueError, "snapshot of a run of other settings"):
            length_bench.train({**settings, "learning_rate": 0.5}, 0, snapshot_dir=directory)

    def test_changed_settings_are_refused(self):
        changed = {**self.config, "steps": self.config["steps"] + 1}
        with self.assertRaisesRegex(ValueError, "holds a run of other settings"):
            length_bench.run_study(changed, self.workdir, log=lambda line: None)

    def test_raw_files_read_back(self):
        record, results = length_bench.read_results(self.raw)
        self.assertEqual(record["config"]["task"], "passkey")
        self.assertEqual(results["RoPE"][0]["accuracy"], self.results["RoPE"][0]["accuracy"])
        self.assertFalse(os.path.exists(os.path.join(self.raw, "RoPE", "seed0", "params.msgpack")))

    def test_tables_verdicts_and_heat_map(self):
        config, results = self.config, self.results
        table = length_bench_report.accuracy_table(config, results, "text")
        self.assertIn("| 32 (trained) | 64 | seeds ≥ 0.9 at 32 |", table)
        self.assertLen(table.splitlines(), 2 + len(results))
        # How many seeds learned the task at the trained length: the last cell, which counts
        # a seed that scores 0.9 at 32 tokens and not one that scores it at 64 only.
        learned = copy.deepcopy(dict(results))
        learned["RoPE"][0]["accuracy"]["text"]["32"] = 0.9
        learned["RoPE"][1]["accuracy"]["text"].update({"32": 0.89, "64": 1.0})
        rows = length_bench_report.accuracy_table(config, learned, "text").splitlines()
        self.assertTrue(rows[2].startswith("| RoPE |") and rows[2].endswith("| 1 of 2 |"), rows)
        paired = length_bench_report.paired_table(config, results, "text")
        self.assertNotIn("| RoPE |", paired)
        # The read arm equals RoPE at the trained length, seed by seed: a zero-width interval.
        self.assertIn("| RoPE + YaRN | +0.000 [+0.000, +0.000] |", paired)
        verdict = length_bench_report.verdict(config, results, "text", "RoPE + YaRN")
        self.assertIn("holds zero at 32", verdict)
        grid = length_bench_report.depth_grid(config, results, "text", "RoPE")
        self.assertEqual(grid.shape, (len(config["depth_edges"]) - 1, 2))
        path = length_bench_report.heat_maps(
            config, results, "text", os.path.join(self.temp.name, "heat.png")
        )
        self.assertGreater(os.path.getsize(path), 1000)

    def test_page_blocks_say_not_run_yet_until_raw_files_exist(self):
        self.assertStartsWith(_render(self.raw_root, 'bench_header("bench_mqar")'), "*Not run yet")
        for block in ('bench_table("bench_mqar", "mqar")', 'bench_stale("bench_mqar")'):
            self.assertEqual(_render(self.raw_root, block), "")
        table = _render(self.raw_root, f'bench_table("{NAME}", "filler")')
        self.assertEqual(
            table, length_bench_report.accuracy_table(self.config, self.results, "filler")
        )
        header = _render(self.raw_root, f'bench_header("{NAME}")')
        self.assertIn("2 arms × n = 2 seeds", header)
        # The prose's inline numbers: RoPE's mean and seeds, YaRN's paired difference and verdict.
        accuracies = length_bench_report.accuracies(self.results, "RoPE", "text", 64)
        mean = _render(self.raw_root, f'bench_mean("{NAME}", "text", "RoPE", 64)')
        self.assertEqual(mean, f"{np.mean(accuracies):.2f}")
        seeds = _render(self.raw_root, f'bench_seeds("{NAME}", "text", "RoPE", 64)')
        self.assertEqual(seeds, ", ".join(f"{a:.2f}" for a in accuracies))
        diff = _render(self.raw_root, f'bench_diff("{NAME}", "text", "RoPE + YaRN", 32)')
        self.assertEqual(diff, "+0.000 [+0.000, +0.000]")  # the trained length: RoPE's reading
        verdict = _render(self.raw_root, f'bench_verdict("{NAME}", "text", "RoPE + YaRN")')
        self.assertEqual(
            verdict, length_bench_report.verdict(self.config, self.results, "text", "RoPE + YaRN")
        )
        self.assertEqual(
            _render(self.raw_root, 'bench_claim("bench_mqar", "mqar", "iRoPE")'),
            "(not run yet) | (not run yet)",
        )
        figure = _render(self.raw_root, f'bench_heat_map("{NAME}", "text")')
        self.assertEqual(figure, f"![{NAME} text](results/{NAME}_text.png)")

    @parameterized.parameters(
        ((0.8, 0.8), "shown at 64 tokens", "+0.800 [+0.800, +0.800]"),
        ((-0.8, -0.8), "contradicted at 64 tokens", "-0.800 [-0.800, -0.800]"),
        ((0.1, 0.5), "not shown", "+0.300 [-2.241, +2.841]"),
    )
    def test_readme_claim_reads_past_the_trained_length_under_holm(self, gains, status, text):
        # YaRN reads `gains` above RoPE, seed by seed, at 64 tokens: one interval of zero
        # width, which Holm keeps, and one wide. At 32, the trained length, YaRN reads RoPE's
        # own numbers and is no part of the claim.
        root = os.path.join(self.temp.name, f"claim{gains}")
        shutil.copytree(self.raw, os.path.join(root, NAME))
        for seed, gain in enumerate(gains):
            rope = 0.1 if gain > 0 else 0.9
            for arm, value in (("RoPE", rope), ("RoPE_+_YaRN", rope + gain)):
                path = os.path.join(root, NAME, arm, f"seed{seed}", own_runs.RESULT)
                with open(path) as f:
                    result = json.load(f)
                result["accuracy"]["text"]["64"] = value
                own_runs.write_json(path, result)
        self.assertEqual(
            _render(root, f'bench_claim("{NAME}", "text", "RoPE + YaRN")'),
            f"{status} (n = 2, Holm) | {text} at 64 tokens",
        )

    def test_needle_sweep_reads_the_needle_at_every_place(self):
        settings_of = length_bench.arms(self.config)
        params = length_bench.arm_params(settings_of, "RoPE + YaRN", 0, self.workdir)
        sweep = length_bench.needle_sweep(settings_of["RoPE + YaRN"], params, 32, rows=3)
        self.assertLen(sweep, retrieval_tasks.haystack_size(32, 5) + 1)  # every marker place
        self.assertTrue(all(a in (0, 1 / 3, 2 / 3, 1) for a in sweep), sweep)
        # A read arm at the trained length reads as the arm it reads.
        rope = length_bench.needle_sweep(settings_of["RoPE"], params, 32, rows=3)
        self.assertEqual(sweep, rope)
        mqar = {**settings_of["RoPE"], "task": "mqar"}
        with self.assertRaisesRegex(ValueError, "needs the passkey task"):
            length_bench.needle_sweep(mqar, params, 32, rows=3)

    def test_needle_table_folds_places_by_block(self):
        # Accuracy (k + 1) % 4 / 10 at marker token k + 1: offset o of a 4-token block reads
        # o / 10 in every column; 2 digits spill past the block from offset 2 on.
        accuracy = [((k + 1) % 4) / 10 for k in range(10)]
        sweep = {"digits": 2, "rows": 1, "arms": {"a": {"8": [accuracy, accuracy]}}}
        rows = length_bench_report.needle_table(sweep, 4).splitlines()
        self.assertEqual(
            rows[2:],
            ["| 0 | 0 | 0.00 |", "| 1 | 0 | 0.10 |", "| 2 | 1 | 0.20 |", "| 3 | 2 | 0.30 |"],
        )
        root = os.path.join(self.temp.name, "needles")
        self.assertStartsWith(_render(root, 'bench_needle_table("b", 4)'), "*Not run yet")
        machine = {"cpus": 2, "architecture": "x86_64", "jax": "0.10", "backend": "cpu"}
        record = {"argv": ["needle_sweep.py"], "code": {"commit": "abcdef12"}, "machine": machine}
        own_runs.write_json(os.path.join(root, "b", length_bench.NEEDLE_SWEEP), {**record, **sweep})
        table = _render(root, 'bench_needle_table("b", 4)')
        self.assertStartsWith(
            table, "Ran at commit abcdef1, 2 x86_64 cores, JAX 0.10 (cpu), 1 rows a place, 2 seeds:"
        )
        self.assertTrue(table.endswith("| 3 | 2 | 0.30 |"), table)

    @parameterized.parameters(*bench_length.TASKS)
    def test_full_config_builds_every_arm(self, task):
        config = bench_length.get_config(task).to_dict()
        settings = length_bench.arms(config)
        self.assertEqual(list(settings), list(config["arms"]))
        self.assertEqual(settings["RoPE + NTK"]["reads"], "RoPE")
        self.assertIn(config["baseline"], settings)
        self.assertEqual(length_bench.eval_lengths(config), [64, 128, 256, 512])

    def test_bad_arms_and_arguments(self):
        config = bench_length.get_config("mqar,smoke").to_dict()
        for arm, message in (
            ({"reads": "RoPE"}, "give 'model', or 'reads' and 'scaling'"),
            ({"reads": "RoPE + YaRN", "scaling": {}}, "not a trained arm"),
            ({"model": {"position": "nope"}}, "position='nope'"),
        ):
            with self.assertRaisesRegex(ValueError, message):
                length_bench.arms({**config, "arms": {**config["arms"], "bad": arm}})
        with self.assertRaisesRegex(ValueError, "unknown argument 'needle'"):
            bench_length.get_config("needle")
        np.testing.assert_equal(bench_length.get_config().task, "passkey")


if __name__ == "__main__":
    absltest.main()
