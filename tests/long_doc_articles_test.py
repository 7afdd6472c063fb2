"""Tests for roformer_jax/studies/long_doc_articles.py: paragraphs joined into spans that are
read as articles (their far windows too)."""

import numpy as np
from absl.testing import absltest

from roformer_jax.studies.long_doc_articles import paragraph_spans
from roformer_jax.studies.long_doc_windows import far_windows


class LongDocArticlesTest(absltest.TestCase):
    def test_paragraph_spans_and_far_windows(self):
        paragraphs = [" ".join(f"p{i}w{j}" for j in range(10 + i % 5)) for i in range(40)]
        spans = paragraph_spans(paragraphs, span_words=100)
        words = [w for p in paragraphs for w in p.split()]
        covered = [w for span in spans for w in span.words]
        self.assertEqual(covered, words[: len(covered)])  # in order, nothing skipped
        self.assertLess(len(words) - len(covered), 100)  # only a short tail is dropped
        for span in spans:
            self.assertGreaterEqual(len(span.words), 100)
            self.assertLess(len(span.words) - len(span.sections[-1]), 100)  # closed when full
            costs = {w: 1 for w in span.words}
            a, b = far_windows(span, costs, window_tokens=25)
            self.assertEqual(a, span.words[:25])
            starts = np.cumsum([0] + [len(s) for s in span.sections])[:-1]
            b_start = len(span.words) - len(span.words[span.words.index(b[0]) :])
            self.assertIn(b_start, starts)
            self.assertLen(b, 25)
            later = [s for s in starts if s > b_start]
            self.assertTrue(all(len(span.words) - s < 25 for s in later))  # B: the far end


if __name__ == "__main__":
    absltest.main()
