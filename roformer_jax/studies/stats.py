"""Tests on paired per-example predictions, and accuracy binned by a per-example value.

    only_a, only_b, p = mcnemar_exact(correct_a, correct_b)   # two runs on the same examples
    p = sign_test(right, n)                                   # a two-choice accuracy vs chance
    p = paired_t_p(diffs); adjusted = holm([p, ...])          # differences over seeds, a family
    bins = binned_accuracy(kept_fraction, correct, edges=(0, 0.25, 0.5, 0.75, 1))

Pure functions over numpy arrays; N is the number of examples, or of seeds for t_interval
(the t-interval of the mean of paired differences over seeds).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np


class McNemar(NamedTuple):
    only_a: int  # examples run A gets right and run B wrong
    only_b: int  # examples run B gets right and run A wrong
    p: float  # two-sided exact p-value


def mcnemar_exact(correct_a, correct_b) -> McNemar:
    """McNemar's exact test of two classifiers on the same N examples.

    correct_a, correct_b: bool [N], whether each run got example n right. Only the discordant
    examples carry information: under H0 (equal accuracy) each of the b + c of them is equally
    likely to favour either run, so min(b, c) ~ Binomial(b + c, 1/2), and
    p = min(1, 2 · P[X <= min(b, c)]) (McNemar 1947; the exact form of Fagerland et al. 2013).
    No discordant example: p = 1.
    """
    a, b = np.asarray(correct_a, bool), np.asarray(correct_b, bool)
    if a.shape != b.shape or a.ndim != 1:
        raise ValueError(f"correct_a {a.shape} and correct_b {b.shape} must be the same [N]")
    only_a, only_b = int(np.sum(a & ~b)), int(np.sum(~a & b))
    return McNemar(only_a, only_b, sign_test(only_a, only_a + only_b))


def sign_test(successes: int, n: int) -> float:
    """The two-sided exact p-value of `successes` in `n` trials under Binomial(n, 1/2):
    p = min(1, 2 · P[X <= min(k, n - k)]); 1 for n = 0. Against chance, for a two-choice
    accuracy of k right of n; McNemar's test is it on the discordant examples."""
    if not 0 <= successes <= n:
        raise ValueError(f"{successes} successes in {n} trials")
    k = min(successes, n - successes)
    tail = sum(math.comb(n, i) for i in range(k + 1)) / 2**n  # exact: integers until here
    return min(1.0, 2.0 * tail)


class Bin(NamedTuple):
    low: float
    high: float
    count: int
    accuracy: float | None  # None for an empty bin


def binned_accuracy(values, correct, *, edges: Sequence[float]) -> list[Bin]:
    """Accuracy of the examples whose value falls in each bin [edges[i], edges[i + 1]).

    values: float [N] (e.g. the fraction of a document that survives truncation); correct:
    bool [N]. The last bin is closed, [edges[-2], edges[-1]], so a value equal to the top edge
    (a document kept whole) counts. Values outside the edges are a ValueError.
    """
    values, correct = np.asarray(values, float), np.asarray(correct, bool)
    edges = np.asarray(edges, float)
    if values.shape != correct.shape or values.ndim != 1:
        raise ValueError(f"values {values.shape} and correct {correct.shape} must be the same [N]")
    if edges.ndim != 1 or len(edges) < 2 or np.any(np.diff(edges) <= 0):
        raise ValueError(f"edges {edges.tolist()} must be 2 or more increasing values")
    outside = (values < edges[0]) | (values > edges[-1])
    if np.any(outside):
        raise ValueError(f"values {values[outside][:5].tolist()} lie outside {edges.tolist()}")
    index = np.minimum(np.searchsorted(edges, values, side="right") - 1, len(edges) - 2)
    bins = []
    for i in range(len(edges) - 1):
        hits = correct[index == i]
        accuracy = float(np.mean(hits)) if len(hits) else None
        bins.append(Bin(float(edges[i]), float(edges[i + 1]), len(hits), accuracy))
    return bins


def t_interval(values: Sequence[float], confidence: float = 0.95) -> tuple[float, float, float]:
    """(mean, low, high): the t-interval of the mean of `values` (at least 2 of them)."""
    n = len(values)
    if n < 2:
        raise ValueError(f"an interval needs at least 2 values, got {n}")
    mean, sem = float(np.mean(values)), float(np.std(values, ddof=1)) / np.sqrt(n)
    from scipy import stats as scipy_stats  # ~0.8 s to import: only where used

    half = float(scipy_stats.t.ppf(0.5 + confidence / 2, n - 1)) * sem
    return mean, mean - half, mean + half


def paired_t_p(diffs: Sequence[float]) -> float:
    """The two-sided p-value of the one-sample t-test that the mean of `diffs` (paired
    differences over N >= 2 seeds) is 0: the test behind t_interval, whose 95% interval
    excludes 0 exactly when p < 0.05. All differences equal and non-zero: p = 0."""
    n = len(diffs)
    if n < 2:
        raise ValueError(f"a t-test needs at least 2 values, got {n}")
    mean, sd = float(np.mean(diffs)), float(np.std(diffs, ddof=1))
    if sd == 0.0:
        return 1.0 if mean == 0.0 else 0.0
    t = mean / (sd / math.sqrt(n))
    from scipy import stats as scipy_stats

    return float(2.0 * scipy_stats.t.sf(abs(t), n - 1))


def holm(p_values: Sequence[float]) -> list[float]:
    """Holm's step-down adjustment (Holm 1979) of a family of m p-values, in their order:
    the i-th smallest becomes max over j <= i of min(1, (m - j + 1) · p_(j)). Rejecting
    where the adjusted value is below α keeps the chance of any false rejection in the
    family at most α, whatever the dependence between the tests."""
    m = len(p_values)
    adjusted, running = [0.0] * m, 0.0
    for rank, index in enumerate(sorted(range(m), key=lambda i: p_values[i])):
        running = max(running, min(1.0, (m - rank) * p_values[index]))
        adjusted[index] = running
    return adjusted
