"""Tests for roformer_jax/data/staging.py: staged train batches and validation sets."""

import chex
import tiny
from absl.testing import absltest

from roformer_jax.data import staging
from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DataConfig

_HOST = dict(process_index=0, process_count=1)


def _corpus():
    tmp = tiny.workdir()
    return load_corpus(DataConfig(source=tiny.corpus(tmp), tokenizer="bytes", seq_len=32), tmp)


class StagedBatchesTest(absltest.TestCase):
    def test_stages_alternate_shapes_and_resume_where_they_were(self):
        corpus = _corpus()
        stages = ((2, 32, 8), (1, 64, 4), (2, 16, 8))
        every = list(staging.staged_batches(corpus, stages, seed=0, start_step=0, **_HOST))
        shapes = [b["input_ids"].shape for b in every]
        self.assertEqual(shapes, [(8, 32), (8, 32), (4, 64), (8, 16), (8, 16)])
        for start in (1, 2, 3):
            resumed = list(
                staging.staged_batches(corpus, stages, seed=0, start_step=start, **_HOST)
            )
            chex.assert_trees_all_equal(resumed, every[start:])


class ValidSetsTest(absltest.TestCase):
    def test_lengths_past_the_model_are_skipped(self):
        corpus = _corpus()
        kwargs = dict(batch_size=4, max_tokens=2 * 4 * 30, **_HOST)
        sets = staging.valid_sets(corpus, (32, 64, 32), max_length=None, **kwargs)
        self.assertEqual(list(sets), [32, 64])
        self.assertEqual([len(b) for b in sets.values()], [3, 1])  # 248 tokens: 9 and 4 rows
        with self.assertLogs(level="WARNING") as logs:
            sets = staging.valid_sets(corpus, (32, 64), max_length=32, **kwargs)
        self.assertEqual(list(sets), [32])
        self.assertIn("valid length 64 skipped", logs.output[0])

    def test_lengths_the_held_out_text_cannot_fill_are_skipped(self):
        corpus = _corpus()
        too_long = corpus.valid_tokens.size + 10
        with self.assertLogs(level="WARNING") as logs:
            sets = staging.valid_sets(
                corpus, (32, too_long), batch_size=4, max_tokens=None, max_length=None, **_HOST
            )
        self.assertEqual(list(sets), [32])
        self.assertIn(f"valid length {too_long} skipped", logs.output[0])


if __name__ == "__main__":
    absltest.main()
