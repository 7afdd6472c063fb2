"""TF-IDF vectors of texts and each text's nearest other text: how the long-document task picks
its hard negative (the article most like A's), and the bag-of-words baseline's features.
"""

from __future__ import annotations

import re
from collections.abc import Sequence

import numpy as np
from scipy import sparse

_TERM = re.compile(r"(?u)\b\w\w+\b")  # TF-IDF terms: words of two or more characters


def tfidf_vectors(texts: Sequence[str]) -> sparse.csr_matrix:
    """float64 [T, V]: the L2-normalized TF-IDF rows of `texts` over their own vocabulary.

    Terms are lowercased words of 2+ characters; tf = 1 + ln(count) and idf = ln((1 + T) /
    (1 + df)) + 1, as scikit-learn's TfidfVectorizer(sublinear_tf=True) computes them.
    Sublinear tf keeps "the" (hundreds of times in every long article) from drowning the
    topical words. A text without terms is a row of zeros.
    """
    n = len(texts)
    vocab, rows, cols = {}, [], []
    for i, text in enumerate(texts):
        for term in _TERM.findall(text.lower()):
            rows.append(i)
            cols.append(vocab.setdefault(term, len(vocab)))
    counts = sparse.csr_matrix(
        (np.ones(len(cols)), (rows, cols)), shape=(n, max(len(vocab), 1)), dtype=np.float64
    )
    counts.sum_duplicates()
    counts.data = 1 + np.log(counts.data)
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    x = counts.multiply(np.log((1 + n) / (1 + df)) + 1).tocsr()
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    return (sparse.diags(1 / np.where(norms > 0, norms, 1)) @ x).tocsr()


def tfidf_nearest(texts: Sequence[str]) -> np.ndarray:
    """For each text, the index of the most similar other text by TF-IDF cosine
    (`tfidf_vectors`). Ties go to the lowest index. Needs two or more texts."""
    n = len(texts)
    if n < 2:
        raise ValueError(f"{n} text(s): a nearest other text needs at least 2")
    x = tfidf_vectors(texts)
    similarity = (x @ x.T).toarray()
    np.fill_diagonal(similarity, -np.inf)
    return np.argmax(similarity, axis=1)  # argmax takes the first of equal maxima
