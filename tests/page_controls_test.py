"""Tests for roformer_jax/studies/page_controls.py: the split a study scores, the settings a
selection study chooses (never on the held-out set), and the packed study's 2 x 2."""

import dataclasses
import os
import types

from absl.testing import absltest
from page_cases import _RAW

from roformer_jax.studies import page_controls, study_record, tables


def _on_selection(raw):
    """`raw` as though its runs had scored the selection split."""

    def moved(config):
        data = dataclasses.replace(config.data, selection_fraction=0.08, eval_split="selection")
        return dataclasses.replace(config, data=data)

    runs = {name: [moved(c) for c in configs] for name, configs in raw.runs.items()}
    return dataclasses.replace(raw, runs=runs)


class PageControlsTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sweep = study_record.read_raw(os.path.join(_RAW, "positions_lr_sweep"))

    def test_a_sweep_on_the_held_out_set_cannot_choose(self):
        self.assertIn("the held-out set (no selection split", page_controls.split(self.sweep))
        with self.assertRaisesRegex(ValueError, "scores the held-out set"):
            page_controls.chosen(self.sweep)

    def test_chosen_is_each_models_lowest_final_loss(self):
        # The committed sweep's own choice (its :best command), read as selection numbers.
        raw = _on_selection(self.sweep)
        self.assertEqual(
            page_controls.chosen(raw),
            "`:best,selection,BERT=1e-3/500,RoPE=1e-3,sinusoidal=1e-3/500`",
        )
        self.assertTrue(page_controls.split(raw).startswith("the selection split (8% "))

    def test_cross_table_pairs_the_other_mode_with_its_own(self):
        losses = {"open": 5.0, "isolated": 4.0}  # scored isolated: 1 lower, whatever trained
        runs, results = {}, {}
        for trained in page_controls.DOCUMENT_MODES:
            for scored in page_controls.DOCUMENT_MODES:
                name = page_controls._cross_run("softmax", trained, scored)
                runs[name] = [types.SimpleNamespace(data=types.SimpleNamespace(seq_len=128))]
                results[name] = [
                    [{"step": 200, "valid/loss_128": losses[scored] + seed / 10}]
                    for seed in range(3)
                ]
        table = page_controls.cross_table(
            types.SimpleNamespace(runs=runs, results=results), "softmax"
        )
        rows = table.splitlines()
        self.assertEqual(
            rows[2], f"| open | 5.1 ± 0.1 | 4.1 ± 0.1 | {tables.interval_text([-1.0] * 3)} |"
        )
        self.assertEqual(
            rows[3], f"| isolated | 5.1 ± 0.1 | 4.1 ± 0.1 | {tables.interval_text([1.0] * 3)} |"
        )


if __name__ == "__main__":
    absltest.main()
