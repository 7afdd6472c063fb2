"""Same-document window pairs: the rows of the "mlm_same_doc" pre-training objective.

Issue 16's pilot found that MLM alone does not teach a small encoder that two windows of one
article belong together (docs/results.md section 6), which is what the long-document task
asks. This objective asks it directly, next to MLM, as BERT's next-sentence prediction asks
whether B follows A: each row is a pair

    [CLS] A [SEP] B [SEP]      token types 0 on [CLS] A [SEP], 1 on B [SEP]

(the pair encoding fine-tuning uses), where A is `(L - 3) // 2` tokens of one document and B
the other `L - 3 - len(A)`: with probability 1/2 from the same document, anywhere it does not
overlap A (label 1), else from another document (label 0). Both documents are drawn with
probability proportional to their length among the documents long enough to hold A and a B
on either side (`pair_lengths`), so short documents are neither positives nor negatives and
the label cannot be read off a document's length.

Documents are the [SEP]-terminated spans of a token stream (data/corpus.py writes one
[SEP] after each). Each row is drawn from its own generator, so a row depends on that
generator alone, not on the rows beside it.

Shapes: B rows, L sequence length.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


class TooFewDocuments(ValueError):
    """Fewer than two documents of a stream are long enough for pairs."""


def pair_lengths(seq_len: int) -> tuple[int, int]:
    """(tokens of A, tokens of B) in a row of `seq_len`: [CLS], two [SEP]s and the rest."""
    if seq_len < 5:
        raise ValueError(f"seq_len {seq_len} leaves no room for [CLS] A [SEP] B [SEP]")
    a_len = (seq_len - 3) // 2
    return a_len, seq_len - 3 - a_len


def document_spans(stream: np.ndarray, sep_id: int) -> np.ndarray:
    """int64 [n, 2]: (start, end) of each document of `stream` (1-D token ids), its final
    [SEP] excluded; text after the last [SEP] counts as a document too."""
    ends = np.flatnonzero(np.asarray(stream) == sep_id)
    starts = np.concatenate([[0], ends + 1])
    ends = np.concatenate([ends, [len(stream)]])
    return np.stack([starts, ends], axis=1)[ends > starts]


def eligible_spans(spans: np.ndarray, seq_len: int) -> np.ndarray:
    """The spans long enough to draw pairs of `seq_len` from: A and a B on either side of it,
    so that every position of A leaves room for a positive B. Raises TooFewDocuments when
    fewer than two qualify (a negative needs another document)."""
    a_len, b_len = pair_lengths(seq_len)
    kept = spans[spans[:, 1] - spans[:, 0] >= a_len + 2 * b_len]
    if len(kept) < 2:
        raise TooFewDocuments(
            f"{len(kept)} of {len(spans)} documents have the {a_len + 2 * b_len} tokens that "
            f"same-document pairs of seq_len {seq_len} need; the objective needs two. Use a "
            "corpus of longer documents (data.doc_separator='article' or min_doc_chars) or a "
            "smaller seq_len"
        )
    return kept


def draw_pair(spans: np.ndarray, seq_len: int, rng: np.random.Generator) -> tuple[int, int, int]:
    """(start of A, start of B, label) of one row; spans from `eligible_spans`.

    label 1: B is of A's document and does not overlap A; 0: B is of another document.
    """
    a_len, b_len = pair_lengths(seq_len)
    lengths = spans[:, 1] - spans[:, 0]
    p = lengths / lengths.sum()
    doc = int(rng.choice(len(spans), p=p))
    start, end = spans[doc]
    a = int(start + rng.integers(end - start - a_len + 1))
    label = int(rng.integers(2))
    if label:  # B's start: before A (B ends by a) or after it (starts at a + a_len or later)
        before = max(0, a - b_len - start + 1)
        after = max(0, end - b_len - (a + a_len) + 1)
        k = int(rng.integers(before + after))
        b = start + k if k < before else a + a_len + (k - before)
    else:
        others = np.delete(np.arange(len(spans)), doc)
        other = int(rng.choice(others, p=p[others] / p[others].sum()))
        b = int(spans[other, 0] + rng.integers(lengths[other] - b_len + 1))
    return a, int(b), label


def pair_rows(
    stream: np.ndarray,
    spans: np.ndarray,
    seq_len: int,
    rngs: Sequence[np.random.Generator],
    *,
    cls_id: int,
    sep_id: int,
) -> dict[str, np.ndarray]:
    """One row per generator of `rngs`, each drawn by `draw_pair` from that generator alone.

    Returns ids int32 [B, L] ([CLS] A [SEP] B [SEP]), token_type_ids int32 [B, L] and
    pair_label int32 [B] (1: same document).
    """
    a_len, b_len = pair_lengths(seq_len)
    ids = np.empty((len(rngs), seq_len), np.int32)
    labels = np.empty(len(rngs), np.int32)
    for row, rng in enumerate(rngs):
        a, b, labels[row] = draw_pair(spans, seq_len, rng)
        ids[row, 0] = cls_id
        ids[row, 1 : 1 + a_len] = stream[a : a + a_len]
        ids[row, 1 + a_len] = sep_id
        ids[row, 2 + a_len : -1] = stream[b : b + b_len]
        ids[row, -1] = sep_id
    token_types = np.zeros_like(ids)
    token_types[:, 2 + a_len :] = 1
    return {"ids": ids, "token_type_ids": token_types, "pair_label": labels}
