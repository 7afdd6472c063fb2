"""Tests for roformer_jax/studies/page_vit.py, through the page's markers on the committed raw
files of the ViT study: its multiplicity line counts every pair at every size, each pair's
verdict names the sizes that line keeps, and a resumed command claims no wall time."""

import json
import os
import shutil

import tiny
from absl.testing import absltest
from page_cases import _RAW

from roformer_jax.studies import page_provenance, results_page, vit_study
from roformer_jax.studies.page_source import Page


def _render(marker):
    text = f"<!-- generated: raw {marker} --><!-- end generated -->"
    return results_page.render(text, _RAW).split("-->")[1].split("<!--")[0]


class PageVitTest(absltest.TestCase):
    def test_multiplicity_is_holm_over_every_pair_at_every_size(self):
        # 4 pairs × 5 sizes; on zoomed crops Holm keeps 14 of the 16 that exclude 0.
        text = _render('vit_multiplicity("vit_zoom")')
        self.assertIn("20 paired intervals (each pair at every size); 16 exclude 0", text)
        self.assertIn("with 10 seeds the first must reach |t| ≥ 4.15 (9 d.f.)", text)
        self.assertIn("14 of those 16 stay apart from 0; 2 do not: RoPE-Axial", text)

    def test_verdict_names_the_sizes_holm_keeps(self):
        kept = _render('vit_verdict("vit_zoom", "RoPE-Axial − learned table")')
        self.assertEqual(
            kept,
            "above zero at 20, 24 px; below zero at 16 px; holds zero at 28, 32 px "
            "(under Holm: apart from 0 at 16, 20 px)",
        )

    def test_readme_claim_is_what_holm_keeps_past_the_training_size(self):
        # On zoomed crops Holm keeps RoPE-Axial − table at 16 and 20 px; the claim is of the
        # sizes past the training one, so 20 px alone.
        zoom = _render('vit_claim("vit_zoom", "RoPE-Axial − learned table")')
        self.assertEqual(zoom, "shown at 20 px (n = 10, Holm) | +0.164 [+0.111, +0.217] at 20 px")
        # On whole digits the table is ahead wherever Holm keeps the pair: contradicted.
        whole = _render('vit_claim("vit", "RoPE-Axial − learned table")')
        self.assertTrue(
            whole.startswith("contradicted at 20, 24, 28, 32 px (n = 10, Holm) | -0.126 "), whole
        )

    def test_a_command_that_found_runs_cached_has_no_single_wall_time(self):
        # A resumed study's record times only the last command, which trained less than all.
        root = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "vit"), os.path.join(root, "vit"))
        record, results = vit_study.read_results(os.path.join(root, "vit"))
        page = Page(root, None, lambda commit: None)
        for wall, took in (
            (
                sum(r["train_s"] for seeds in results.values() for r in seeds) + 60,
                "; the command took ",
            ),
            (1.0, "; it ran in pieces, so no single wall time."),
        ):
            with open(os.path.join(root, "vit", vit_study.RECORD), "w") as f:
                json.dump({**record, "wall_s": wall}, f)
            text = results_page.render(
                '<!-- generated: raw vit_header("vit") --><!-- end generated -->', root
            )
            self.assertIn(took, text)
        row = page_provenance.wall_time_table(page).splitlines()[-1]
        self.assertTrue(row.startswith("| vit | 40 |") and row.endswith("| n/a |"), row)


if __name__ == "__main__":
    absltest.main()
