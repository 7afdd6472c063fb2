"""Tests for roformer_jax/studies/results_page.py: docs/results.md is what its raw files give.

The page's numbers are checked against a regeneration in memory (no file written, no figure
drawn); a raw value changed in a copy must show up as a difference; stale marks follow the
commit map they are given and never make the check fail.
"""

import glob
import json
import os
import shutil

import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.studies import results_page, study_record, tables

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PAGE = os.path.join(_ROOT, "docs", "results.md")
_RAW = os.path.join(_ROOT, "docs", "results", "raw")
_RUN = os.path.join("causal_wikitext2", "softmax_+_RoPE", "seed0")  # the causal baseline run


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _unknown(commit):
    return None  # no git needed: differences() leaves stale marks out anyway


def _change_final_valid_loss(raw):
    path = os.path.join(raw, _RUN, "metrics.jsonl")
    records = [json.loads(line) for line in _read(path).splitlines()]
    records[-1]["valid/loss_128"] += 0.01
    with open(path, "w", encoding="utf-8") as f:
        f.writelines(json.dumps(r) + "\n" for r in records)


def _change_length_score(raw):
    path = os.path.join(raw, "length_warpeace", "RoPE", "seed1", "length_eval", "RoPE_+_YaRN.json")
    record = json.loads(_read(path))
    record["scores"]["2048"]["loss"] -= 0.02
    with open(path, "w", encoding="utf-8") as f:
        json.dump(record, f)


class ResultsPageTest(parameterized.TestCase):
    def test_page_is_what_the_raw_files_give(self):
        page = _read(_PAGE)
        regenerated = results_page.render(page, _RAW, changed=_unknown)
        diff = results_page.differences(page, regenerated)
        self.assertEqual(diff, "", "run `python experiments/results_page.py`:\n" + diff[:3000])
        self.assertGreater(page.count("<!-- generated: "), 40)  # the markers are really there

    @parameterized.named_parameters(
        ("final_validation_loss", _change_final_valid_loss, "| softmax + RoPE | 3 |"),
        ("length_score", _change_length_score, "| RoPE + YaRN | 3 |"),
    )
    def test_a_changed_raw_value_fails_the_check(self, change, changed_row):
        raw = os.path.join(tiny.workdir(), "raw")
        shutil.copytree(_RAW, raw)
        change(raw)
        page = _read(_PAGE)
        diff = results_page.differences(page, results_page.render(page, raw, changed=_unknown))
        removed = [line for line in diff.splitlines() if line.startswith("-| ")]
        self.assertTrue(any(line.startswith(f"-{changed_row}") for line in removed), diff)

    def test_a_missing_length_score_is_an_error(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "multilength_wikitext2"), f"{raw}/multilength_wikitext2")
        os.remove(f"{raw}/multilength_wikitext2/256_only/seed2/length_eval/256_only.json")
        text = "<!-- generated: multilength_wikitext2 length_table() --><!-- end generated -->"
        with self.assertRaisesRegex(ValueError, "no scores of evaluation '256 only'"):
            results_page.render(text, raw)

    @parameterized.named_parameters(
        (
            "changed",
            ["configs/studies.py", "roformer_jax/rope.py"],
            "**Stale:** 2 files of roformer_jax/ and configs/ changed since 9acdbbe "
            "(`git diff --stat 9acdbbe HEAD -- roformer_jax configs`).",
        ),
        ("unchanged", [], "The code is as at 9acdbbe."),
        ("unknown", None, "(commit unknown: cannot tell whether the code changed since)"),
    )
    def test_stale_mark_follows_the_commit_map(self, changed, expected):
        commits = {"9acdbbe55002bbf1f7e15a94d72a35e7ec0b90fc": changed}
        text = "<!-- generated: causal_wikitext2 stale() -->old<!-- end generated -->"
        page = results_page.render(text, _RAW, changed=commits.get)
        self.assertEqual(page, text.replace("old", expected))
        self.assertEqual(results_page.differences(text, page), "")  # HEAD moving is no failure

    def test_a_study_trained_at_two_commits_names_both_and_is_stale_from_the_older(self):
        # One multi-length run trained at 724d487, the other five at 39eb4e9, which study.json
        # names: the header names both, and the stale mark counts from the older.
        commits = study_record.read_raw(os.path.join(_RAW, "multilength_wikitext2")).commits
        self.assertEqual([c[:7] for c in commits], ["724d487", "39eb4e9"])
        text = (
            "<!-- generated: multilength_wikitext2 header() --><!-- end generated -->|"
            "<!-- generated: multilength_wikitext2 stale() --><!-- end generated -->"
        )
        header, stale = results_page.render(
            text, _RAW, changed={commits[0]: ["roformer_jax/rope.py"], commits[1]: []}.get
        ).split("|")
        self.assertIn("Ran at commits 724d487, 39eb4e9 (oldest first;", header)
        self.assertIn(
            "**Stale:** 1 files of roformer_jax/ and configs/ changed since 724d487", stale
        )

    def test_a_run_trained_with_uncommitted_changes_marks_the_header(self):
        # positions_lr_best's study.json names a clean commit; its seed-0 runs trained dirty.
        text = "<!-- generated: {} header() --><!-- end generated -->"
        for study, dirty in (("positions_lr_best", True), ("causal_wikitext2", False)):
            self.assertEqual(study_record.read_raw(os.path.join(_RAW, study)).dirty, dirty)
            page = results_page.render(text.format(study), _RAW)
            self.assertEqual(" with uncommitted changes," in page, dirty, study)

    @parameterized.named_parameters(
        ("whole", 3000.0, "| 50 min 0 s |", "the command took 50 min 0 s."),
        ("in_pieces", 600.0, "| n/a |", "it ran in pieces, so no single wall time."),
    )
    def test_a_command_shorter_than_its_runs_ran_in_pieces(self, wall_s, cell, sentence):
        # A resumed command records only its own part: 10 min against 44 min of training.
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        path = f"{raw}/causal_wikitext2/study.json"
        record = json.loads(_read(path))
        record["wall_s"] = wall_s
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        text = (
            "<!-- generated: raw wall_time_table() --><!-- end generated -->\n"
            "<!-- generated: causal_wikitext2 header() --><!-- end generated -->"
        )
        page = results_page.render(text, raw)
        # 2 cores x 44 min 9 s of training = 1.5 core-hours.
        self.assertIn(f"| causal_wikitext2 | 18 | 44 min 9 s | n/a | 1.5 {cell}", page)
        self.assertIn(sentence, page)

    def test_the_header_names_the_kind_of_core_where_the_record_has_it(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        text = "<!-- generated: causal_wikitext2 header() --><!-- end generated -->"
        self.assertIn(" 2 x86_64 cores, JAX", results_page.render(text, raw))  # before it did
        path = f"{raw}/causal_wikitext2/study.json"
        record = json.loads(_read(path))
        record["machine"]["cpu"] = "AMD EPYC, AVX-512"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        self.assertIn(" 2 x86_64 cores (AMD EPYC, AVX-512), JAX", results_page.render(text, raw))

    def test_a_study_still_running_has_a_row_of_the_runs_it_has_exported(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        for run in ("elu+1_none/seed0", "elu+1_none/seed1"):  # no study.json yet
            shutil.copytree(
                os.path.join(_RAW, "linear_long_wikitext2", run), f"{raw}/running/{run}"
            )
        elapsed = [
            json.loads(_read(f"{raw}/running/{run}/metrics.jsonl").splitlines()[-1])["elapsed_s"]
            for run in ("elu+1_none/seed0", "elu+1_none/seed1")
        ]
        text = "<!-- generated: raw wall_time_table() --><!-- end generated -->"
        rows = results_page.render(text, raw).splitlines()
        self.assertRegex(rows[3], r"^\| causal_wikitext2 \| 18 \|")
        minutes, seconds = divmod(round(sum(elapsed)), 60)
        core_hours = 2 * sum(elapsed) / 3600  # the runs' provenance: 2 cores
        self.assertEqual(
            rows[4],
            f"| running (in progress) | 2 so far | {minutes} min {seconds} s "
            f"| n/a | {core_hours:.1f} | n/a |",
        )
        os.remove(f"{raw}/running/elu+1_none/seed1/provenance.json")  # cores unknown
        rows = results_page.render(text, raw).splitlines()
        self.assertTrue(rows[4].endswith("| n/a | n/a | n/a |"), rows[4])

    def test_a_study_in_progress_is_read_from_the_runs_and_scores_it_has_so_far(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "length_wikitext2"), f"{raw}/length_wikitext2")
        shutil.rmtree(f"{raw}/length_wikitext2/ALiBi")  # not trained yet
        shutil.rmtree(f"{raw}/length_wikitext2/no_positions")  # the figure's reference
        os.remove(f"{raw}/length_wikitext2/xPos/seed2/metrics.jsonl")  # one seed to go
        os.remove(f"{raw}/length_wikitext2/RoPE/seed1/length_eval/RoPE_+_YaRN.json")
        path = f"{raw}/length_wikitext2/study.json"
        record = json.loads(_read(path))
        text = (
            "<!-- generated: length_wikitext2 header() --><!-- end generated -->\n"
            "<!-- generated: length_wikitext2 length_table() --><!-- end generated -->\n"
            "<!-- generated: raw wall_time_table() --><!-- end generated -->\n"
            "<!-- generated: length_wikitext2 figure() --><!-- end generated -->"
        )
        with self.assertRaisesRegex(FileNotFoundError, "run 'xPos' lacks a metrics.jsonl"):
            results_page.render(text, raw)  # a finished study must have all its files
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record | {"finished": False, "wall_s": None}, f)
        page = results_page.render(text, raw, figures_dir=raw)
        self.assertIn("6 of its 9 runs × n = 3 seeds; in progress:", page)
        rows = [line.split(" | ")[0] for line in page.splitlines() if line.startswith("| ")]
        self.assertIn("| RoPE + PI", rows)
        for left_out in ("| ALiBi", "| xPos", "| RoPE + YaRN", "| no positions"):
            self.assertNotIn(left_out, rows)
        self.assertIn("| length_wikitext2 (in progress) |", page)

    def test_markers_take_named_arguments_and_speak_of_steps(self):
        text = (
            '<!-- generated: causal_wikitext2 diff("softmax + learned", step=100) -->'
            "<!-- end generated -->|"
            '<!-- generated: causal_wikitext2 diff("softmax + learned", None, None, 100) -->'
            "<!-- end generated -->|"
            '<!-- generated: causal_wikitext2 below_from("softmax + RoPE", "softmax + learned")'
            " --><!-- end generated -->"
        )
        named, positional, below = [
            part.split("-->")[1].split("<!--")[0]
            for part in results_page.render(text, _RAW, changed=_unknown).split("|")
        ]
        self.assertEqual(named, positional)
        # At step 100, not the final step 200 of the paired table (+0.076).
        self.assertEqual(named, "+0.059 [+0.054, +0.064]")
        self.assertEqual(below, "step 50")  # RoPE's interval is below learned's at every step

    def test_a_length_study_also_has_its_training_curves_and_final_differences(self):
        # Its runs' curves and validation losses, as a compare study's, beside the scores.
        text = (
            '<!-- generated: length_wikitext2 diff("xPos", "RoPE") --><!-- end generated -->|'
            '<!-- generated: length_wikitext2 diff("xPos", "RoPE", 128) --><!-- end generated -->|'
            "<!-- generated: length_wikitext2 figure(curves=True) --><!-- end generated -->|"
            '<!-- generated: length_wikitext2 reaches("BERT", "RoPE") --><!-- end generated -->|'
            '<!-- generated: length_wikitext2 reaches("RoPE", "BERT") --><!-- end generated -->'
        )
        final, at_128, curves, bert, rope = [
            part.split("-->")[1].split("<!--")[0]
            for part in results_page.render(text, _RAW, changed=_unknown).split("|")
        ]
        raw = study_record.read_raw(os.path.join(_RAW, "length_wikitext2"))
        losses = {
            run: [seed[-1]["valid/loss_128"] for seed in raw.results[run]]
            for run in ("xPos", "RoPE")
        }
        self.assertEqual(final, tables.interval_text(list(np.subtract(*losses.values()))))
        self.assertNotEqual(final, at_128)  # the scores' held-out targets are others
        self.assertIn("![length_wikitext2_curves](results/length_wikitext2_curves.png)", curves)
        self.assertIn("bands: ±1 sample std", curves)
        self.assertEqual((bert, rope), ("not by step 200", "step 150"))
        # Where the first evaluation is already there, it says the step is only a bound.
        first = (
            "<!-- generated: long_training_wikitext2 "
            'reaches("RoPE (RoFormer)", "learned (BERT)") -->'
        )
        self.assertIn(
            ">step 1,000 (its first evaluation: it may have been sooner)<",
            results_page.render(first + "<!-- end generated -->", _RAW, changed=_unknown),
        )

    def test_stage_change_pairs_each_seeds_stage_ends(self):
        text = (
            '<!-- generated: multilength_wikitext2 stage_change("multi-length", 5, 4) -->'
            "<!-- end generated -->"
        )
        rendered = results_page.render(text, _RAW, changed=_unknown)
        raw = study_record.read_raw(os.path.join(_RAW, "multilength_wikitext2"))
        # Stage 4 is steps 148-182 of the 200 (88 + 6 + 53 + 35), stage 5 steps 183-186.
        ends = [
            [
                np.mean([r["train/accuracy"] for r in seed if lo <= r["step"] <= hi][-5:])
                for lo, hi in ((148, 182), (183, 186))
            ]
            for seed in raw.results["multi-length"]
        ]
        expected = tables.interval_text([five - four for four, five in ends])
        self.assertEqual(rendered.split("-->")[1].split("<!--")[0], expected)

    def test_extremes_table_takes_a_dict_of_keys(self):
        text = (
            '<!-- generated: causal_wikitext2 extremes_table({"train/grad_norm": "max", '
            '"train/min_denominator": "min"}) --><!-- end generated -->'
        )
        lines = results_page.render(text, _RAW, changed=_unknown).splitlines()
        self.assertEqual(
            lines[1],
            "| run | seeds | max train/grad_norm (per seed) | "
            "min train/min_denominator (per seed) |",
        )
        self.assertRegex(lines[3], r"^\| \S.* \| 3 \| [\d.]+, [\d.]+, [\d.]+ \| –, –, – \|$")

    def test_targets_of_a_study_without_length_scores_are_its_validation_tokens(self):
        text = "<!-- generated: causal_wikitext2 targets() --><!-- end generated -->"
        path = os.path.join(_RAW, "causal_wikitext2", "softmax_+_RoPE", "seed0", "metrics.jsonl")
        with open(path, encoding="utf-8") as f:
            tokens = [r["valid/tokens_128"] for r in map(json.loads, f) if "valid/tokens_128" in r]
        rendered = results_page.render(text, _RAW, changed=_unknown)
        self.assertEqual(rendered.split("-->")[1].split("<!--")[0], f"{tokens[-1]:,}")

    def test_extremes_is_the_range_of_the_tables_per_seed_values(self):
        table = results_page.render(
            '<!-- generated: causal_wikitext2 extremes_table({"train/grad_norm": "max"}) -->'
            "<!-- end generated -->",
            _RAW,
            changed=_unknown,
        )
        row = next(line for line in table.splitlines() if line.startswith("| softmax + RoPE |"))
        per_seed = sorted(row.strip(" |").split(" | ")[2].split(", "), key=float)

        def extremes(how, key="train/grad_norm"):
            text = (
                f'<!-- generated: causal_wikitext2 extremes("softmax + RoPE", "{key}", '
                f'"{how}") --><!-- end generated -->'
            )
            return (
                results_page.render(text, _RAW, changed=_unknown).split("-->")[1].split("<!--")[0]
            )

        self.assertEqual(extremes("max"), f"{per_seed[0]} to {per_seed[-1]}")
        self.assertNotEqual(extremes("min"), extremes("max"))
        with self.assertRaisesRegex(ValueError, "never logged 'train/min_denominator'"):
            extremes("min", "train/min_denominator")

    def test_position_table_reads_each_seeds_file(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        text = (
            '<!-- generated: causal_wikitext2 position_table("softmax + learned") -->'
            "<!-- end generated -->"
        )
        with self.assertRaisesRegex(ValueError, "run experiments/position_table.py"):
            results_page.render(text, raw)
        change = {"moved": 1.3, "row_norm": 0.2, "row_norm_initial": 0.22, "neighbor_cosine": 0.01}
        for seed in range(3):
            record = {"step": 200, "position": change, "word": {**change, "moved": 2.9 + seed}}
            path = f"{raw}/causal_wikitext2/softmax_+_learned/seed{seed}/position_table.json"
            with open(path, "w", encoding="utf-8") as f:
                json.dump(record, f)
        rows = results_page.render(text, raw).splitlines()[3:6]
        self.assertEqual(
            rows[2], "| 2 | 200 | 1.300 | 0.200 (0.220) | +0.010 | 4.900 | 0.200 (0.220) |"
        )
        steps = text.replace("position_table(", "position_table_steps(")
        with self.assertRaisesRegex(ValueError, "position_table.py --every_checkpoint"):
            results_page.render(steps, raw)
        for seed in range(3):
            records = [{"step": s, "position": change, "word": change} for s in (100, 200)]
            path = f"{raw}/causal_wikitext2/softmax_+_learned/seed{seed}/position_table_steps.json"
            with open(path, "w", encoding="utf-8") as f:
                json.dump(records, f)
        rows = results_page.render(steps, raw).splitlines()[3:9]
        self.assertEqual(
            [r.split(" | ")[:2] for r in rows[:3]], [["| 0", "100"], ["| 0", "200"], ["| 1", "100"]]
        )

    def test_attention_distance_table_and_figure(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        text = (
            "<!-- generated: causal_wikitext2 attention_distance_table(8, [2, 4]) -->"
            "<!-- end generated -->\n<!-- generated: causal_wikitext2 "
            "attention_distance_figure(8) --><!-- end generated -->"
        )
        with self.assertRaisesRegex(ValueError, "run experiments/attention_distance.py"):
            results_page.render(text, raw)
        decay = 1.0 / (1.0 + np.arange(8))  # [L]: 1/(1 + r), two heads alike, two layers
        weight = np.stack([np.stack([decay, decay]) / 8, np.stack([decay, decay]) / 4])
        record = {"step": 200, "length": 8, "uniform": 1 / 8, "weight": weight.tolist()}
        with open(
            f"{raw}/causal_wikitext2/softmax_+_RoPE/seed0/attention_distance_8.json",
            "w",
            encoding="utf-8",
        ) as f:
            json.dump(record, f)
        figures = tiny.workdir()
        rendered = results_page.render(text, raw, figures_dir=figures)
        rows = [line for line in rendered.splitlines() if line.startswith("| ")]
        # at 1: 1/2 x 8/8 = 0.5 and 1/2 x 8/4 = 1.0; at 2 / at 1 = (1/3) / (1/2)
        self.assertEqual(rows[1], "| softmax + RoPE | 0 | 0.50 | 0.667 | 0.400 |")
        self.assertEqual(rows[2], "| softmax + RoPE | 1 | 1.00 | 0.667 | 0.400 |")
        self.assertTrue(rows[3].startswith("| RoPE's bound f(r)/f(1), d = 64 |"))
        self.assertTrue(os.path.exists(f"{figures}/causal_wikitext2_attention_8.png"))

    def test_reproduced_says_each_rerun_or_none(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        for found in glob.glob(f"{raw}/causal_wikitext2/*/seed*/reproduced.json"):
            os.remove(found)  # the committed reruns: this test makes its own
        text = "<!-- generated: causal_wikitext2 reproduced() --><!-- end generated -->"
        self.assertIn("-->Not rerun at a later commit.<!--", results_page.render(text, raw))
        record = {
            "steps": 21,
            "metrics": 9,
            "identical": True,
            "largest": {},
            "commit": "abc" * 8,
            "dirty": False,
        }
        path = f"{raw}/causal_wikitext2/softmax_+_RoPE/seed0/reproduced.json"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        self.assertIn(
            "-->softmax + RoPE, seed 0, rerun at abcabca: bit-identical (21 logged "
            "steps, 9 metrics).<!--",
            results_page.render(text, raw),
        )
        with open(path, "w", encoding="utf-8") as f:  # a rerun outside a git checkout
            json.dump(record | {"commit": None, "dirty": None}, f)
        self.assertIn("rerun at an unknown commit: bit-identical", results_page.render(text, raw))
        with open(path, "w", encoding="utf-8") as f:  # the machine names its kind of core
            json.dump(record | {"machine": {"cpu": "AMD EPYC, AVX-512"}}, f)
        self.assertIn(
            "rerun at abcabca on AMD EPYC, AVX-512: bit-identical", results_page.render(text, raw)
        )

    @parameterized.named_parameters(
        ("unknown_kind", "causal_wikitext2 median() --><!-- end generated -->", "kind 'median'"),
        ("unknown_study", "causal_x unigram() --><!-- end generated -->", "no study 'causal_x'"),
        ("no_end", "causal_wikitext2 unigram() -->6.774", "lacks its '<!-- end generated -->'"),
    )
    def test_a_bad_marker_is_an_error(self, marker, message):
        text = f"<!-- generated: {marker}\n<!-- generated: raw wall_time_table() -->\n" + (
            "<!-- end generated -->"
        )
        with self.assertRaisesRegex(ValueError, message):
            results_page.render(text, _RAW)


if __name__ == "__main__":
    absltest.main()
