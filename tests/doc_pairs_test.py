"""Tests for roformer_jax/data/doc_pairs.py: documents of a stream, and same-document pairs."""

import numpy as np
from absl.testing import absltest, parameterized

from roformer_jax.data import doc_pairs

SEP, CLS = 3, 2
SEQ_LEN = 21  # A 9 tokens, B 9: documents of 9 + 2 * 9 = 27 tokens or more qualify


def _stream(lengths):
    """Documents of the given lengths, each token 1000 * (document + 1) + its position in it
    (so a token tells where it came from), each followed by [SEP]."""
    parts = []
    for doc, length in enumerate(lengths):
        parts += [1000 * (doc + 1) + np.arange(length), [SEP]]
    return np.concatenate(parts).astype(np.int64)


def _rngs(seeds):
    return [np.random.default_rng([7, s]) for s in seeds]


class SpansTest(parameterized.TestCase):
    def test_document_spans(self):
        stream = np.array([5, 6, SEP, 7, SEP, SEP, 8, 9])  # an empty document, an unended one
        np.testing.assert_array_equal(
            doc_pairs.document_spans(stream, SEP), [[0, 2], [3, 4], [6, 8]]
        )

    def test_pair_lengths(self):
        self.assertEqual(doc_pairs.pair_lengths(128), (62, 63))
        self.assertEqual(doc_pairs.pair_lengths(SEQ_LEN), (9, 9))
        with self.assertRaisesRegex(ValueError, "seq_len 4"):
            doc_pairs.pair_lengths(4)

    def test_only_documents_with_room_for_a_and_either_b(self):
        spans = doc_pairs.document_spans(_stream([26, 27, 100, 5]), SEP)
        eligible = doc_pairs.eligible_spans(spans, SEQ_LEN)
        np.testing.assert_array_equal(eligible[:, 1] - eligible[:, 0], [27, 100])
        with self.assertRaisesRegex(doc_pairs.TooFewDocuments, "1 of 3 documents have the 27"):
            doc_pairs.eligible_spans(spans[[0, 2, 3]], SEQ_LEN)


class PairRowsTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.lengths = [27, 40, 5, 300, 28, 60]  # the third is too short for any pair
        self.stream = _stream(self.lengths)
        self.spans = doc_pairs.eligible_spans(doc_pairs.document_spans(self.stream, SEP), SEQ_LEN)

    def rows(self, seeds):
        return doc_pairs.pair_rows(
            self.stream, self.spans, SEQ_LEN, _rngs(seeds), cls_id=CLS, sep_id=SEP
        )

    def test_rows_are_pairs_of_windows_labelled_by_their_documents(self):
        out = self.rows(range(3000))
        ids, labels = out["ids"], out["pair_label"]
        self.assertEqual(ids.shape, (3000, SEQ_LEN))
        np.testing.assert_array_equal(ids[:, [0, 10, 20]], [[CLS, SEP, SEP]] * 3000)
        np.testing.assert_array_equal(out["token_type_ids"][0], [0] * 11 + [1] * 10)
        a, b = ids[:, 1:10], ids[:, 11:20]
        for window in (a, b):  # contiguous tokens of one document
            np.testing.assert_array_equal(np.diff(window, axis=1), 1)
        doc_a, doc_b = a[:, 0] // 1000, b[:, 0] // 1000
        np.testing.assert_array_equal(labels, doc_a == doc_b)
        self.assertNotIn(3, set(doc_a) | set(doc_b))  # the short document is never drawn
        self.assertBetween(labels.mean(), 0.45, 0.55)
        # Positives never overlap A, and B falls both before and after it.
        same = labels == 1
        before = b[same, -1] < a[same, 0]
        np.testing.assert_array_equal(before | (b[same, 0] > a[same, -1]), True)
        self.assertTrue(before.any() and not before.all())
        # Documents are drawn in proportion to their length (A's ~ 300 / 455 for the longest).
        self.assertBetween(np.mean(doc_a == 4), 0.62, 0.70)
        # Every position of A is reachable, the first and last of a document included.
        starts = a[doc_a == 1, 0] % 1000
        self.assertEqual(set(starts.tolist()), set(range(27 - 9 + 1)))

    def test_a_row_depends_on_its_generator_alone(self):
        both = self.rows([11, 12])
        alone = self.rows([12])
        for key in ("ids", "token_type_ids", "pair_label"):
            np.testing.assert_array_equal(both[key][1:], alone[key])
        self.assertFalse(np.array_equal(self.rows([13])["ids"], alone["ids"]))


if __name__ == "__main__":
    absltest.main()
