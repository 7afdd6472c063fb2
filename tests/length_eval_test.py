"""Tests for roformer_jax/data/length_eval.py: the same targets at every length."""

import shutil

import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.data import objectives
from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DataConfig
from roformer_jax.data.length_eval import TooLittleText, length_eval_set

LENGTHS = (16, 32, 64)


def _corpus(test, **kwargs):
    folder = tiny.workdir()
    test.addCleanup(shutil.rmtree, folder)
    path = tiny.corpus(folder, documents=300, most_words=150)
    config = dict(source=path, tokenizer="bytes", seq_len=16, valid_fraction=0.2) | kwargs
    return load_corpus(DataConfig(**config), folder)


def _scored(held_out, length):
    """(content tokens as read, {(index in the held-out pieces, target)}) at one length."""
    inputs, targets, offset = [], set(), 0
    for batch in held_out.batches[length]:
        for row in range(batch["input_ids"].shape[0]):
            n = int(batch["attention_mask"][row].sum()) - 2  # content between [CLS] and [SEP]
            if n < 0:  # an empty padding row
                continue
            inputs.append(batch["input_ids"][row, 1 : n + 1])
            chosen = batch["weights"][row] > 0
            # A target's row position is its head's + target_offset; content starts at 1.
            where = batch["head_positions"][row][chosen] + held_out.target_offset - 1
            targets |= set(zip((offset + where).tolist(), batch["targets"][row][chosen].tolist()))
            offset += n
    return np.concatenate(inputs), targets


class LengthEvalSetTest(parameterized.TestCase):
    @parameterized.product(objective=("mlm", "clm"), windows=("stream", "documents"))
    def test_every_length_scores_the_same_targets_of_the_same_text(self, objective, windows):
        corpus = _corpus(self, objective=objective)
        held_out = length_eval_set(corpus, LENGTHS, batch_size=4, windows=windows)
        first_inputs, first_targets = _scored(held_out, LENGTHS[0])
        self.assertLen(first_targets, held_out.num_targets)
        self.assertLen(first_inputs, held_out.num_tokens)
        for length in LENGTHS[1:]:
            inputs, targets = _scored(held_out, length)
            np.testing.assert_array_equal(inputs, first_inputs)
            self.assertEqual(targets, first_targets)
        # The targets are the held-out text's own tokens at those places.
        if windows == "stream":
            text = np.asarray(corpus.valid_tokens[: held_out.num_tokens])
            for index, target in first_targets:
                self.assertEqual(text[index], target)
            if objective == "clm":  # nothing is masked: every token, as read
                np.testing.assert_array_equal(first_inputs, text)
                self.assertEqual(held_out.num_targets, held_out.num_tokens)
        if objective == "mlm":
            self.assertBetween(held_out.num_targets / held_out.num_tokens, 0.13, 0.17)

    def test_isolated_documents_add_their_segments_to_the_same_rows(self):
        corpora = [_corpus(self, documents=d) for d in ("open", "isolated")]
        open_, isolated = (length_eval_set(c, LENGTHS[:1], batch_size=4) for c in corpora)
        sep, boundaries = corpora[1].tokenizer.sep_id, 0
        for a, b in zip(open_.batches[16], isolated.batches[16], strict=True):
            segments = b.pop("segment_ids")
            self.assertEqual(a.keys(), b.keys())
            for key in a:
                np.testing.assert_array_equal(a[key], b[key])
            want = objectives.document_segments(a["input_ids"], sep_id=sep)
            np.testing.assert_array_equal(segments, want)
            boundaries += int(segments.max())
        self.assertGreater(boundaries, 0)

    def test_eval_documents_and_eval_split_choose_what_is_scored(self):
        # The packed study's 2 x 2: a model trained open scored isolated, and back.
        def batches(**kwargs):
            return length_eval_set(_corpus(self, **kwargs), LENGTHS[:1], batch_size=4).batches[16]

        for trained, scored in (("open", "isolated"), ("isolated", "open")):
            got = batches(documents=trained, eval_documents=scored)
            want = batches(documents=scored)
            self.assertEqual(len(got), len(want))
            for a, b in zip(got, want):
                self.assertEqual(a.keys(), b.keys())
                for key in a:
                    np.testing.assert_array_equal(a[key], b[key])
        # The selection split, where eval_split names it: its stream, not the held-out one.
        corpus = _corpus(self, selection_fraction=0.2, eval_split="selection", objective="clm")
        first = length_eval_set(corpus, LENGTHS[:1], batch_size=4).batches[16][0]["input_ids"][0]
        np.testing.assert_array_equal(first[1:-1], corpus.selection_tokens[:14])

    def test_the_longest_windows_are_full(self):
        held_out = length_eval_set(_corpus(self), LENGTHS, batch_size=4, windows="documents")
        rows = np.concatenate([b["attention_mask"] for b in held_out.batches[64]])
        real = rows[rows.any(-1)]
        np.testing.assert_array_equal(real, 1)
        self.assertEqual(held_out.num_tokens % 62, 0)

    def test_document_windows_never_cross_a_document(self):
        corpus = _corpus(self)
        sep = corpus.tokenizer.sep_id
        documents = length_eval_set(corpus, LENGTHS, batch_size=4, windows="documents")
        stream = length_eval_set(corpus, LENGTHS, batch_size=4, windows="stream")
        for held_out, crossings in ((documents, False), (stream, True)):
            inputs, _ = _scored(held_out, 64)
            self.assertEqual(bool(np.any(inputs == sep)), crossings)
        self.assertGreater(documents.num_pieces, 1)
        self.assertEqual(stream.num_pieces, 1)
        # Documents shorter than the longest window (62 tokens) are left out.
        doc_lengths = (
            np.diff(np.flatnonzero(np.asarray(corpus.valid_tokens) == sep), prepend=-1) - 1
        )
        self.assertEqual(documents.num_pieces, int(np.sum(doc_lengths >= 62)))

    def test_masks_follow_the_eval_seed_not_the_run(self):
        corpus = _corpus(self)
        a = length_eval_set(corpus, LENGTHS, batch_size=4)
        again = length_eval_set(corpus, LENGTHS, batch_size=4, seed=0)
        other = length_eval_set(corpus, LENGTHS, batch_size=4, seed=1)
        self.assertEqual(_scored(a, 32)[1], _scored(again, 32)[1])
        self.assertNotEqual(_scored(a, 32)[1], _scored(other, 32)[1])
        seeded = _corpus(self, eval_seed=1)
        self.assertEqual(
            _scored(length_eval_set(seeded, LENGTHS, batch_size=4), 32)[1], _scored(other, 32)[1]
        )

    def test_hosts_share_the_rows(self):
        corpus = _corpus(self)
        one = length_eval_set(corpus, LENGTHS, batch_size=4, process_index=0, process_count=1)
        halves = [
            length_eval_set(corpus, LENGTHS, batch_size=4, process_index=i, process_count=2)
            for i in range(2)
        ]
        for length in LENGTHS:
            for whole, *parts in zip(one.batches[length], *(h.batches[length] for h in halves)):
                for key, value in whole.items():
                    np.testing.assert_array_equal(np.concatenate([p[key] for p in parts]), value)

    def test_max_tokens_and_batch_sizes(self):
        corpus = _corpus(self)
        held_out = length_eval_set(
            corpus, LENGTHS, batch_size={16: 8, 32: 4, 64: 2}, max_tokens=200
        )
        self.assertEqual(held_out.num_tokens, 248)  # the first multiple of 62 >= 200
        shapes = {n: b[0]["input_ids"].shape for n, b in held_out.batches.items()}
        self.assertEqual(shapes, {16: (8, 16), 32: (4, 32), 64: (2, 64)})
        self.assertLen(held_out.batches[64], 2)  # 4 windows of 62

    def test_bad_input(self):
        corpus = _corpus(self)
        with self.assertRaisesRegex(TooLittleText, "doc_separator='article'"):
            length_eval_set(corpus, (16, 100_000), batch_size=4, windows="documents")
        with self.assertRaisesRegex(ValueError, "windows 'lines'"):
            length_eval_set(corpus, LENGTHS, batch_size=4, windows="lines")
        with self.assertRaisesRegex(ValueError, "must be non-empty and each >= 3"):
            length_eval_set(corpus, (2, 16), batch_size=4)
        with self.assertRaisesRegex(ValueError, "multiples of 2 processes"):
            length_eval_set(corpus, LENGTHS, batch_size=3, process_index=0, process_count=2)
        with self.assertRaisesRegex(ValueError, "max_tokens 0"):
            length_eval_set(corpus, LENGTHS, batch_size=4, max_tokens=0)
        with self.assertRaisesRegex(ValueError, "eval_windows 'lines'"):
            DataConfig(eval_windows="lines")


if __name__ == "__main__":
    absltest.main()
