"""Tests for roformer_jax/studies/page_vit.py, through the page's markers on the committed raw
files of the ViT study: its multiplicity line counts every pair at every size, and each pair's
verdict names the sizes that line keeps."""

from absl.testing import absltest
from page_cases import _RAW

from roformer_jax.studies import results_page


def _render(marker):
    text = f"<!-- generated: raw {marker} --><!-- end generated -->"
    return results_page.render(text, _RAW).split("-->")[1].split("<!--")[0]


class PageVitTest(absltest.TestCase):
    def test_multiplicity_is_holm_over_every_pair_at_every_size(self):
        # 4 pairs × 5 sizes; on whole digits Holm keeps one of the ten that exclude 0.
        text = _render('vit_multiplicity("vit")')
        self.assertIn("20 paired intervals (each pair at every size); 10 exclude 0", text)
        self.assertIn("1 of those 10 stays apart from 0: RoPE-Mixed − none at 16 px", text)

    def test_verdict_names_the_sizes_holm_keeps(self):
        kept = _render('vit_verdict("vit", "RoPE-Mixed − none")')
        self.assertEqual(
            kept,
            "above zero at 16, 20 px; holds zero at 24, 28, 32 px "
            "(under Holm: apart from 0 at 16 px)",
        )
        lost = _render('vit_verdict("vit", "RoPE-Axial − none")')
        self.assertTrue(lost.endswith("(under Holm: none apart from 0)"), lost)

    def test_readme_claim_is_what_holm_keeps_past_the_training_size(self):
        # On zoomed crops Holm keeps RoPE-Axial − table at 20 and 24 px; at 16 px (training)
        # RoPE-Mixed − none survives on whole digits, but the claim is of sizes past it.
        zoom = _render('vit_claim("vit_zoom", "RoPE-Axial − learned table")')
        self.assertEqual(
            zoom, "shown at 20, 24 px (n = 3, Holm) | +0.142 [+0.116, +0.167] at 20 px"
        )
        whole = _render('vit_claim("vit", "RoPE-Mixed − none")')
        self.assertTrue(whole.startswith("not shown (n = 3, Holm) | +0.166 "), whole)


if __name__ == "__main__":
    absltest.main()
