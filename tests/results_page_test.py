"""Tests for roformer_jax/studies/results_page.py: docs/results.md is what its raw files give.

The page's numbers are checked against a regeneration in memory (no file written, no figure
drawn); a raw value changed in a copy must show up as a difference; a marker takes named
arguments, and a bad one is an error. The blocks the markers hold are page_numbers_test.py's
and page_provenance_test.py's (stale marks follow the commit map they are given and never make
the check fail).
"""

import json
import os
import re
import shutil

import tiny
from absl.testing import absltest, parameterized
from page_cases import _PAGE, _RAW, _RUN, _read, _unknown

from roformer_jax.studies import results_page, study_record, vit_study


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

    def test_readme_is_what_the_raw_files_give(self):
        readme = _read(os.path.join(os.path.dirname(_PAGE), os.pardir, "README.md"))
        diff = results_page.differences(readme, results_page.render(readme, _RAW), name="README")
        self.assertEqual(diff, "", "run `python experiments/results_page.py`:\n" + diff)
        self.assertIn('vit_claim("vit_zoom"', readme)
        # No interval typed by hand: outside the markers, none is left to go stale.
        typed = re.findall(r"[-−+]\d+\.\d+ \[[-−+]\d", results_page.MARKER.sub("", readme))
        self.assertEqual(typed, [])

    def test_the_findings_are_what_the_raw_files_give(self):
        # docs/studies.md's verdicts are the page's own words (issue 56: one wording).
        findings = _read(os.path.join(os.path.dirname(_PAGE), "studies.md"))
        regenerated = results_page.render(findings, _RAW, changed=_unknown)
        diff = results_page.differences(findings, regenerated, name="studies.md")
        self.assertEqual(diff, "", "run `python experiments/results_page.py`:\n" + diff)
        self.assertIn('verdict("learned (BERT)", "none")', findings)
        # No interval typed by hand: outside the markers, none is left to go stale.
        typed = re.findall(r"[-−+]\d+\.\d+ \[[-−+]\d", results_page.MARKER.sub("", findings))
        self.assertEqual(typed, [])

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

    def test_an_awaited_study_says_not_run_yet_until_its_folder_exists(self):
        def block(marker):
            return f"<!-- generated: {marker} --><!-- end generated -->"

        text = "|".join(
            block(m)
            for m in (
                "multilength_wikitext2? length_table()",  # there: read as without "?"
                "multilength_controls? length_table()",
                'raw? vit_table("vit_ten_seeds")',  # the ViT kinds' folder is their argument
                'multilength_controls? diff("768 only", "multi-length", 2048)',
            )
        )
        there, absent, vit, inline = [
            part.split("-->", 1)[1].rsplit("<!--", 1)[0]
            for part in results_page.render(text, _RAW, changed=_unknown).split("|<!--")
        ]
        plain = results_page.render(block("multilength_wikitext2 length_table()"), _RAW)
        self.assertIn(there.strip(), plain)
        self.assertIn("docs/results/raw/multilength_controls/", absent)
        self.assertIn("docs/results/raw/vit_ten_seeds/", vit)
        self.assertEqual(inline, results_page.NOT_RUN_INLINE)
        self.assertEqual(
            results_page.blocks(text)[1:3],
            [("multilength_controls", "length_table"), ("vit_ten_seeds", "vit_table")],
        )
        with self.assertRaisesRegex(ValueError, "no study 'multilength_controls'"):
            results_page.render(block("multilength_controls length_table()"), _RAW)

    def test_an_awaited_study_still_running_says_in_progress(self):
        # Its runs are committed as they finish; the comparisons wait for the last.
        root = tiny.workdir()
        study_record.write(os.path.join(root, "gates"), {"finished": False})
        text = "<!-- generated: gates? length_table() --><!-- end generated -->|" + (
            "<!-- generated: gates? diff('a', 'b', 512) --><!-- end generated -->"
        )
        block, inline = results_page.render(text, root, changed=_unknown).split("|")
        self.assertIn("In progress: docs/results/raw/gates/", block)
        self.assertIn(results_page.IN_PROGRESS_INLINE, inline)
        # Of a joined study, the first folder not run, else the first in progress.
        study_record.write(os.path.join(root, "done"), {"finished": True})
        self.assertIsNone(results_page._awaited(root, "done+done"))
        self.assertEqual(results_page._awaited(root, "done+gates"), ("in progress", "gates"))
        self.assertEqual(results_page._awaited(root, "gates+absent"), ("not run", "absent"))

    def test_a_vit_study_is_in_progress_until_its_record_is_written(self):
        # The ViT study writes record.json, not study.json, once its last run is in.
        root = tiny.workdir()
        os.makedirs(os.path.join(root, "vit_select", "none", "seed0"))
        self.assertEqual(results_page._awaited(root, "vit_select"), ("in progress", "vit_select"))
        vit_study.write_record(os.path.join(root, "vit_select"), {"finished": True})
        self.assertIsNone(results_page._awaited(root, "vit_select"))

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
