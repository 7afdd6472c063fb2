"""Tests for roformer_jax/studies/page_numbers.py, through the page's markers: a study's
figure, tables and quoted values from its raw files."""

import glob
import json
import os
import shutil

import numpy as np
import tiny
from absl.testing import absltest
from page_cases import _RAW, _unknown

from roformer_jax.studies import results_page, study_record, tables


class PageNumbersTest(absltest.TestCase):
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

    def test_verdict_and_claim_are_where_the_diffs_interval_lies(self):
        def inner(kind, args, study="positions_long_wikitext2"):
            text = f"<!-- generated: {study} {kind}({args}) --><!-- end generated -->"
            rendered = results_page.render(text, _RAW, changed=_unknown)
            return rendered.split("-->")[1].split("<!--")[0]

        for args, side, status in (
            ('"RoPE (RoFormer)"', "lower than", "shown"),  # than the baseline, BERT
            ('"learned (BERT)", "RoPE (RoFormer)"', "higher than", "contradicted"),
            ('"sinusoidal", "ALiBi"', "level with", "not shown"),  # the interval holds 0
        ):
            self.assertEqual(inner("verdict", args), side)
            self.assertEqual(inner("claim", args), f"{status} (n = 3)")
        with self.assertRaisesRegex(ValueError, "1 seed.s., no interval"):
            inner("verdict", '"none", "learned (BERT)"', "long_training_wikitext2")

    def test_a_joined_study_compares_runs_of_several_folders(self):
        # Issue 56: BERT changed one way a run (bert_order) against seed 0's BERT, trained apart.
        joined = "bert_order_wikitext2+long_training_wikitext2"
        text = "|".join(
            f"<!-- generated: {study} {kind} --><!-- end generated -->"
            for study, kind in (
                (joined, 'diff("BERT, pre-LN", "learned (BERT)")'),
                (joined, 'figure(curves=True, runs=["BERT, pre-LN", "learned (BERT)"])'),
                ("positions_long_wikitext2+bert_order_wikitext2", "figure(curves=True)"),
            )
        )
        value, one, mixed = [
            part.split("-->")[1].split("<!--")[0]
            for part in results_page.render(text, _RAW, changed=_unknown).split("|")
        ]
        runs = [
            study_record.read_raw(os.path.join(_RAW, folder)).results[run][0][-1]
            for folder, run in (
                ("bert_order_wikitext2", "BERT, pre-LN"),
                ("long_training_wikitext2", "learned (BERT)"),
            )
        ]
        expected = runs[0]["valid/loss_128"] - runs[1]["valid/loss_128"]
        self.assertEqual(value, f"{expected:+.3f}")
        self.assertIn(f"](results/{joined}_curves.png)", one)  # a length study among them
        self.assertIn("*n = 1 seeds per line.*", one)
        self.assertIn("n = 1–3 seeds per line; bands", mixed)
        # A joined study's files beside a run are read from the folder that has them.
        steps = f"<!-- generated: {joined} position_table_steps('learned (BERT)') -->"
        alone = steps.replace(joined, "long_training_wikitext2")
        end = "<!-- end generated -->"
        self.assertEqual(
            results_page.render(steps + end, _RAW).split("-->")[1],
            results_page.render(alone + end, _RAW).split("-->")[1],
        )

    def test_length_verdicts_follow_the_intervals_and_the_multiplicity_line(self):
        pairs = [["xPos", "RoPE"], ["xPos", "RoPE tuned at 512"], ["BERT", "RoPE tuned at 512"]]

        def inner(kind, pairs=pairs):
            text = f"<!-- generated: length_wikitext2 {kind}({pairs!r}) --><!-- end generated -->"
            rendered = results_page.render(text, _RAW, changed=_unknown)
            return rendered.split("-->", 1)[1].rsplit("<!--", 1)[0]

        table, line = inner("length_verdicts"), inner("multiplicity")
        rows = [row.strip(" |").split(" | ")[2:] for row in table.strip().splitlines()[2:]]
        # The page's paired tables: xPos − RoPE holds 0 at 128 and 256, is above it from 512.
        self.assertEqual([cell.split(" (")[0] for cell in rows[0]], ["level"] * 2 + ["higher"] * 3)
        self.assertEqual(rows[1][3], "**higher** (+0.365)")
        self.assertEqual(rows[2][1:], ["n/a"] * 4)  # BERT reads 128 only
        # Bold where the multiplicity line over the same pairs keeps the interval apart from 0.
        self.assertIn("11 paired intervals (3 chosen pairs at every length)", line)  # 2+ seeds
        kept = line.split("apart from 0:")[1].split(" do not")[0]
        for (name, baseline), cells in zip(pairs, rows, strict=True):
            for n, cell in zip((128, 256, 512, 1024, 2048), cells, strict=True):
                label = f"{name} − {baseline} at {n} (p ="
                self.assertEqual(cell.startswith("**"), label in kept, label)
        with self.assertRaisesRegex(ValueError, r"pairs name \['GPT'\], not evaluations"):
            inner("length_verdicts", [["GPT", "RoPE"]])

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

    def test_stages_read_held_out_at_each_stages_end(self):
        # The 200-step schedule's stages end at 88, 94, 147, 182, 186 and 200; held-out
        # values written there (stage i, seed s: loss 6 + i + s / 10) are what the table reads.
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "multilength_wikitext2"), f"{raw}/ml")
        ends = (88, 94, 147, 182, 186, 200)
        for seed in range(3):
            path = f"{raw}/ml/multi-length/seed{seed}/metrics.jsonl"
            with open(path, encoding="utf-8") as f:
                records = [json.loads(line) for line in f]
            for r in records:
                if r["step"] in ends[:-1] or r["step"] == 190:  # 190: not a stage's end
                    stage = ends.index(r["step"]) if r["step"] in ends else 9
                    r.update({"valid/loss_256": 6 + stage + seed / 10, "valid/accuracy_256": 0.1})
            with open(path, "w", encoding="utf-8") as f:
                f.writelines(json.dumps(r) + "\n" for r in records)
        text = (
            '<!-- generated: ml stage_held_out_table("multi-length") --><!-- end generated -->|'
            '<!-- generated: ml stage_change("multi-length", 5, 4, "loss", held_out=True) -->'
            "<!-- end generated -->"
        )
        table, change = results_page.render(text, raw, changed=_unknown).split("|<!--")
        self.assertIn("| 5 | 768 | 4 | 3 | 10.1 ± 0.1 | 0.1 ", table)
        self.assertIn(f">{tables.interval_text([1.0, 1.0, 1.0])}<", change)
        self.assertIn("| 6 | 256 | 14 | 3 | ", table)  # the last step is always evaluated
        # The 1,810-step schedule evaluated every 50 steps: stage 3 ends at 1,330, unevaluated.
        blog = text.split("|")[0].replace("ml ", "multilength_blog_wikitext2 ")
        with self.assertRaisesRegex(ValueError, "no valid/loss_256 at step 1330"):
            results_page.render(blog, _RAW, changed=_unknown)

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
        two = text.replace('"softmax + learned")', '"softmax + learned", "softmax + learned")')
        rows = results_page.render(two, raw).splitlines()[1:9]
        self.assertTrue(rows[0].startswith("| run | seed |") and rows[1].count("|---") == 8)
        self.assertEqual(rows[7].split(" | ")[:3], ["| softmax + learned", "2", "200"])
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

    def test_logit_decay_table_is_not_measured_until_its_file_exists(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        text = (
            "<!-- generated: causal_wikitext2 logit_decay_table(4, [0, 3]) -->"
            "<!-- end generated -->"
        )
        self.assertIn("*Not measured yet: no logit_decay_4.json", results_page.render(text, raw))
        # one layer, two heads: the table averages the heads at each distance
        term = [[[1.0, 0.5, 0.25, 0.125], [0.5, 0.5, 0.25, 0.375]]]
        bound = [[[4.0, 3.0, 2.0, 1.0], [2.0, 3.0, 2.0, 2.0]]]
        path = f"{raw}/causal_wikitext2/softmax_+_RoPE/seed0/logit_decay_4.json"
        with open(path, "w", encoding="utf-8") as f:
            json.dump({"step": 200, "length": 4, "term": term, "bound": bound}, f)
        rows = [line for line in results_page.render(text, raw).splitlines() if "| " in line]
        self.assertEqual(rows[0], "| run | layer | r = 0 | r = 3 |")
        self.assertEqual(rows[1], "| softmax + RoPE | 0 | 0.750 (3.00) | 0.250 (1.50) |")
        # README's cells: heads' mean at r = 3 over r = 0, beside the bound's (1.5 / 3).
        claim = (
            "<!-- generated: causal_wikitext2 logit_decay_claim(4, 0, 3) --><!-- end generated -->"
        )
        self.assertEqual(
            results_page.render(claim, raw).split("-->")[1].split("<!--")[0],
            "decays faster than its bound (softmax + RoPE, seed 0) | its size at r = 3 is 0.33 of "
            "r = 0; the bound's 0.50",
        )
        os.remove(path)
        self.assertIn(">not measured yet | no logit terms yet<", results_page.render(claim, raw))

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


if __name__ == "__main__":
    absltest.main()
