"""Tests for roformer_jax/studies/length_report.py: the length tables, the report, the footnote
and the per-stage table."""

import dataclasses

import numpy as np
from absl.testing import absltest
from length_cases import _config

from roformer_jax.studies import length_report, stats, tables


def _scores(loss):
    return {n: {"loss": loss + n / 1000, "accuracy": 0.5, "targets": 7} for n in (128, 256)}


class TablesTest(absltest.TestCase):
    def test_length_tables(self):
        scores = {"a": [_scores(1.0), _scores(1.2)], "b": [_scores(1.5), _scores(1.5)]}
        table = length_report.length_table(scores, (128, 256))
        self.assertIn("| a | 2 | 1.228 ± 0.14 | 1.356 ± 0.14 |", table)
        paired = length_report.length_paired_table(scores, "a", (128, 256))
        mean, low, high = stats.t_interval([0.5, 0.3])
        self.assertIn(f"| b | 2 | {mean:+.3f} [{low:+.3f}, {high:+.3f}] |", paired)
        with self.assertRaisesRegex(ValueError, "baseline 'c'"):
            length_report.length_paired_table(scores, "c", (128,))

    def test_report_holds_every_table_under_its_heading(self):
        cfg = _config()
        staged = dataclasses.replace(
            cfg, train=dataclasses.replace(cfg.train, steps=4, stages=((2, 64, 8), (2, 128, 4)))
        )
        runs = {"a": [cfg, cfg], "b": [staged, staged]}
        results = {name: [[{"step": 4, "train/loss": 1.0, "elapsed_s": 2.0}]] * 2 for name in runs}
        scores = {"a": [_scores(1.0), _scores(1.2)], "b": [_scores(1.5), _scores(1.5)]}
        config = {
            "title": "T",
            "eval_lengths": [128, 256],
            "eval_baselines": ["a"],
            "table_keys": ["train/loss"],
        }
        report = length_report.report(config, runs, results, scores, "note")
        self.assertTrue(report.startswith("# T\n\nnote\n\n## Held-out loss"))
        self.assertIn(length_report.length_table(scores, (128, 256), key="accuracy"), report)
        self.assertIn(length_report.length_paired_table(scores, "a", (128, 256)), report)
        self.assertIn(tables.summary_table(results, ["train/loss"]), report)
        stages = length_report.stage_table(staged, results["b"])
        self.assertIn(f"## b: per stage\n\n{stages}", report)
        self.assertNotIn("## a: per stage", report)  # one stage: no stage table

    def test_footnote_names_targets_machine_and_floor(self):
        machine = {"device_count": 1, "backend": "cpu", "cpus": 2, "architecture": "x86_64"}
        note = length_report.footnote(_config(), (0, 1), 20873, machine, 6.4698)
        self.assertIn("20,873 held-out masked targets", note)
        self.assertIn("seeds (0, 1); unigram cross-entropy 6.470; 1 cpu device(s), 2 cores", note)
        cfg = _config()
        clm = dataclasses.replace(
            cfg,
            model=dataclasses.replace(cfg.model, causal=True),
            data=dataclasses.replace(cfg.data, objective="clm"),
        )
        note = length_report.footnote(clm, (0,), 20440, machine, 6.4698)
        self.assertIn("20,440 held-out next-token targets", note)  # every token, none masked

    def test_stage_table_reads_each_stages_last_steps(self):
        cfg = _config()
        cfg = dataclasses.replace(
            cfg, train=dataclasses.replace(cfg.train, steps=4, stages=((2, 64, 8), (2, 128, 4)))
        )
        seeds = [
            [{"step": s, "train/loss": 10.0 * s + k, "train/accuracy": 0.1} for s in range(1, 5)]
            for k in (0, 1)
        ]
        table = length_report.stage_table(cfg, seeds, last=1).splitlines()
        self.assertEqual(table[2], "| 1 | 64 | 8 | 2 | 512 | 2 | 20.5 ± 0.71 | 0.1 ± 0 |")
        self.assertEqual(table[3], "| 2 | 128 | 4 | 2 | 512 | 2 | 40.5 ± 0.71 | 0.1 ± 0 |")
        np.testing.assert_equal(len(table), 4)


if __name__ == "__main__":
    absltest.main()
