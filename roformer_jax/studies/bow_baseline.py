"""A bag-of-words baseline for the long-document triplets: is B or C more similar to A?

    model = fit(train_triplets)                 # logistic regression on lexical overlap
    correct = predict(model, valid_triplets) == labels(valid_triplets)

If word overlap alone tells the positive apart, the task is lexical and a long-context encoder
is not needed to solve it; at chance, it is not. Triplets are studies/long_doc_task.py's rows
({"A", "B", "C", "label"}). Glossary: N triplets, F features (FEATURES).

Each pair (A, X) gets FEATURES; a triplet's features are those of (A, C) minus those of
(A, B), and a logistic regression p(label = C) = σ(w · standardized features + bias) is fitted
by Newton's method (IRLS) with a small L2 penalty. Pure numpy and scipy.sparse.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

from roformer_jax.studies.tfidf import tfidf_vectors

FEATURES = ("tfidf_cosine", "word_jaccard", "log_shared_words")
_LABELS = ("B", "C")


class BowModel(NamedTuple):
    mean: np.ndarray  # [F] the training features' mean
    scale: np.ndarray  # [F] their std (1 where it is 0)
    weights: np.ndarray  # [F + 1] of the standardized features, then the bias


def labels(triplets: Sequence[dict]) -> np.ndarray:
    """int [N]: 0 where B is the positive, 1 where C is."""
    return np.array([_LABELS.index(t["label"]) for t in triplets], np.int64)


def features(triplets: Sequence[dict]) -> np.ndarray:
    """float [N, F]: FEATURES of (A, C) minus those of (A, B).

    TF-IDF (tfidf.tfidf_vectors, idf over the triplets' own texts, no labels read);
    words for the Jaccard index and the shared count are lowercased whitespace tokens. A
    triplet may give A as each pair reads it, "A_for_B" and "A_for_C" (long_doc_task.pair_views:
    what an encoder of some length reads); else both pairs read "A".
    """
    n = len(triplets)
    a_of = {
        side: [t[f"A_for_{side}"] if f"A_for_{side}" in t else t["A"] for t in triplets]
        for side in ("B", "C")
    }
    one_a = a_of["C"] == a_of["B"]  # else the idf counts each view of A
    texts = a_of["B"] + [t[k] for k in ("B", "C") for t in triplets] + ([] if one_a else a_of["C"])
    x = tfidf_vectors(texts)
    a = {"B": x[:n], "C": x[:n] if one_a else x[3 * n :]}
    per_side = []
    for i, side in enumerate(("B", "C")):
        other = x[(i + 1) * n : (i + 2) * n]
        a_words = [set(text.lower().split()) for text in a_of[side]]
        side_words = [set(t[side].lower().split()) for t in triplets]
        cosine = np.asarray(a[side].multiply(other).sum(axis=1)).ravel()
        shared = np.array([len(wa & wx) for wa, wx in zip(a_words, side_words)], float)
        union = np.array([len(wa | wx) for wa, wx in zip(a_words, side_words)], float)
        per_side.append(np.stack([cosine, shared / np.maximum(union, 1), np.log1p(shared)], -1))
    return per_side[1] - per_side[0]


def fit(triplets: Sequence[dict], *, l2: float = 1e-3, iterations: int = 50) -> BowModel:
    """The logistic regression on `features` (standardized) of the training triplets.

    Newton's method on the mean log-loss + l2/2 · |w|² (the bias unpenalized): the Hessian
    X'SX/N + l2·I is positive definite, so every step is defined even on separable data.
    """
    x, y = features(triplets), labels(triplets)
    mean, std = x.mean(0), x.std(0)
    scale = np.where(std > 0, std, 1.0)
    design = _design((x - mean) / scale)  # [N, F + 1]
    penalty = np.diag([l2] * x.shape[1] + [0.0])
    w = np.zeros(design.shape[1])
    for _ in range(iterations):
        p = _sigmoid(design @ w)
        gradient = design.T @ (p - y) / len(y) + penalty @ w
        hessian = (design.T * (p * (1 - p))) @ design / len(y) + penalty + 1e-9 * np.eye(len(w))
        step = np.linalg.solve(hessian, gradient)
        w -= step
        if np.max(np.abs(step)) < 1e-10:
            break
    return BowModel(mean, scale, w)


def predict(model: BowModel, triplets: Sequence[dict]) -> np.ndarray:
    """int [N]: 1 where the model finds C the positive (p > 1/2), else 0."""
    x = (features(triplets) - model.mean) / model.scale
    return (_sigmoid(_design(x) @ model.weights) > 0.5).astype(np.int64)


def _design(x: np.ndarray) -> np.ndarray:
    return np.concatenate([x, np.ones((len(x), 1))], axis=1)  # [N, F + 1]: a bias column


def _sigmoid(z: np.ndarray) -> np.ndarray:
    return 0.5 * (1 + np.tanh(z / 2))  # σ without overflow in exp
