"""Fine-tuning metrics on the host: accuracy, macro F1, and SQuAD's exact match and F1.

Each takes predictions and references as plain Python/numpy values and returns a float in
[0, 1]. The QA metrics follow the SQuAD v1.1 evaluation script (Rajpurkar et al. 2016):
answers are normalized (lowercased; punctuation, the articles a/an/the and extra whitespace
removed), and an example scores the best over its reference answers.
"""

from __future__ import annotations

import collections
import re
import string

import numpy as np


def accuracy(predictions, labels) -> float:
    """Share of predictions equal to their label."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    return float(np.mean(predictions == labels)) if labels.size else 0.0


def macro_f1(predictions, labels, num_labels: int) -> float:
    """Mean over the classes of F1 = 2·TP / (2·TP + FP + FN), the classes being those of
    0..K-1 that occur in the labels or the predictions (sklearn's f1_score(average="macro"))."""
    predictions, labels = np.asarray(predictions), np.asarray(labels)
    scores = []
    for k in range(num_labels):
        tp = np.sum((predictions == k) & (labels == k))
        fp = np.sum((predictions == k) & (labels != k))
        fn = np.sum((predictions != k) & (labels == k))
        if tp + fp + fn:
            scores.append(2 * tp / (2 * tp + fp + fn))
    return float(np.mean(scores)) if scores else 0.0


def normalize_answer(text: str) -> str:
    """SQuAD's normalization: lowercase, no punctuation, no articles, single spaces."""
    text = "".join(c for c in text.lower() if c not in set(string.punctuation))
    text = re.sub(r"\b(a|an|the)\b", " ", text)
    return " ".join(text.split())


def _token_f1(prediction: str, reference: str) -> float:
    pred, ref = normalize_answer(prediction).split(), normalize_answer(reference).split()
    common = sum((collections.Counter(pred) & collections.Counter(ref)).values())
    if not pred or not ref:
        return float(pred == ref)
    if common == 0:
        return 0.0
    precision, recall = common / len(pred), common / len(ref)
    return 2 * precision * recall / (precision + recall)


def exact_match(predictions: list[str], references: list[list[str]]) -> float:
    """Share of predictions equal, once normalized, to one of their references."""
    hits = [
        max(normalize_answer(p) == normalize_answer(r) for r in refs)
        for p, refs in zip(predictions, references)
    ]
    return float(np.mean(hits)) if hits else 0.0


def token_f1(predictions: list[str], references: list[list[str]]) -> float:
    """Mean over examples of the best token-overlap F1 against their references."""
    scores = [max(_token_f1(p, r) for r in refs) for p, refs in zip(predictions, references)]
    return float(np.mean(scores)) if scores else 0.0


def best_span(start_logits, end_logits, first: int, last: int, max_answer: int = 30):
    """(s, e) maximizing start[s] + end[e] over first <= s <= e <= last, e - s < max_answer.

    start_logits, end_logits: [L] of one example; first..last its context positions.
    """
    start, end = (
        np.asarray(start_logits)[first : last + 1],
        np.asarray(end_logits)[first : last + 1],
    )
    scores = start[:, None] + end[None, :]  # [s, e]
    s, e = np.indices(scores.shape)
    scores = np.where((e >= s) & (e - s < max_answer), scores, -np.inf)
    s, e = np.unravel_index(np.argmax(scores), scores.shape)
    return first + int(s), first + int(e)
