"""Tests for roformer_jax/bow_baseline.py on synthetic triplets: lexical and not."""

import numpy as np
from absl.testing import absltest

from roformer_jax.studies import bow_baseline


def _triplets(n: int, *, lexical: bool, seed: int) -> list[dict]:
    """Triplets of 60 random words from a 2,000-word vocabulary. Lexical: the positive repeats
    a third of A's words. Not lexical: B and C are drawn alike, whatever the label."""
    rng = np.random.default_rng(seed)
    vocab = np.array([f"w{i}" for i in range(2000)])
    rows = []
    for k in range(n):
        a = rng.choice(vocab, 60)
        positive, negative = rng.choice(vocab, 60), rng.choice(vocab, 60)
        if lexical:
            positive[:20] = a[:20]
        label = "B" if k % 2 == 0 else "C"
        b, c = (positive, negative) if label == "B" else (negative, positive)
        rows.append({"A": " ".join(a), "B": " ".join(b), "C": " ".join(c), "label": label})
    return rows


def _accuracy(model, rows):
    return float(np.mean(bow_baseline.predict(model, rows) == bow_baseline.labels(rows)))


class BowBaselineTest(absltest.TestCase):
    def test_beats_chance_on_a_lexical_task(self):
        model = bow_baseline.fit(_triplets(200, lexical=True, seed=0))
        self.assertGreater(_accuracy(model, _triplets(200, lexical=True, seed=1)), 0.95)

    def test_at_chance_on_a_task_words_cannot_tell(self):
        model = bow_baseline.fit(_triplets(200, lexical=False, seed=0))
        accuracy = _accuracy(model, _triplets(400, lexical=False, seed=1))
        # 400 fair coin flips: 0.5 ± 0.025 (1 std); 0.42-0.58 is beyond 3 std.
        self.assertBetween(accuracy, 0.42, 0.58)

    def test_features_are_antisymmetric_in_b_and_c(self):
        rows = _triplets(6, lexical=True, seed=2)
        swapped = [{**r, "B": r["C"], "C": r["B"]} for r in rows]
        np.testing.assert_allclose(
            bow_baseline.features(swapped), -bow_baseline.features(rows), atol=1e-12
        )
        self.assertEqual(bow_baseline.features(rows).shape, (6, len(bow_baseline.FEATURES)))

    def test_each_pair_may_read_its_own_a(self):
        rows = _triplets(6, lexical=True, seed=3)
        same = [{**r, "A_for_B": r["A"], "A_for_C": r["A"]} for r in rows]
        np.testing.assert_array_equal(bow_baseline.features(same), bow_baseline.features(rows))
        views = [{**r, "A_for_B": " ".join(r["A"].split()[:30]), "A_for_C": r["C"]} for r in rows]
        a_b = [(set(v["A_for_B"].split()), set(v["B"].split())) for v in views]
        jaccard_b = [len(a & b) / len(a | b) for a, b in a_b]
        # Column 1 is Jaccard(A, C) - Jaccard(A, B), each with the A its pair reads.
        np.testing.assert_allclose(bow_baseline.features(views)[:, 1], 1 - np.array(jaccard_b))
        swapped = [
            {**v, "B": v["C"], "C": v["B"], "A_for_B": v["A_for_C"], "A_for_C": v["A_for_B"]}
            for v in views
        ]
        np.testing.assert_allclose(
            bow_baseline.features(swapped), -bow_baseline.features(views), atol=1e-12
        )


if __name__ == "__main__":
    absltest.main()
