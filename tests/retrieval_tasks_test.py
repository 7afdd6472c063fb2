"""Tests for roformer_jax/data/retrieval_tasks.py: a hand-written solver of each task, reading
only what comes before each answer, scores 100%; answers shuffled across rows score chance;
a seed gives the same rows; passkey's needle sits at its depth; bad settings are errors."""

import chex
import numpy as np
from absl.testing import absltest, parameterized
from scipy import stats

from roformer_jax.data import retrieval_tasks as rt

B = 64
CASES = (  # (task, options, chance of one answer token)
    ("passkey", {"haystack": "filler"}, 1 / 10),
    ("passkey", {"haystack": "text", "digits": 3}, 1 / 10),
    ("mqar", {"pairs": 6, "vocab": 64}, 1 / 32),
    ("flipflop", {"reads": 5}, 1 / 2),
)


def _passkey_oracle(prefix, q, t):
    """The t-th digit after the needle."""
    return prefix[list(prefix).index(rt.NEEDLE) + 1 + t]


def _mqar_oracle(prefix, q, t):
    """The value stored after the key just asked (the prefix's last token)."""
    key = prefix[-1]
    return prefix[list(prefix).index(key) + 1]


def _flipflop_oracle(prefix, q, t):
    """The bit after the last write instruction."""
    ops = prefix[0::2]
    last = len(ops) - 1 - list(ops[::-1]).index(rt.WRITE)
    return prefix[2 * last + 1]


ORACLES = {"passkey": _passkey_oracle, "mqar": _mqar_oracle, "flipflop": _flipflop_oracle}


def _solved(task, examples):
    """bool [B, Q, T]: the oracle's token from tokens[:position] equals the answer's."""
    out = np.zeros(examples.positions.shape, bool)
    for (b, q, t), position in np.ndenumerate(examples.positions):
        guess = ORACLES[task](examples.tokens[b, :position], q, t)
        out[b, q, t] = guess == examples.tokens[b, position]
    return out


class RetrievalTasksTest(parameterized.TestCase):
    @parameterized.parameters(*CASES)
    def test_oracle_scores_100_percent(self, task, options, chance):
        for length in (48, 96):
            examples = rt.generate(task, seed=3, length=length, batch=B, **options)
            chex.assert_shape(examples.tokens, (B, length))
            self.assertTrue(np.all(_solved(task, examples)), f"{task} at {length}")
            vocab = rt.TASKS[task].vocab_size(**options)
            self.assertTrue(0 <= examples.tokens.min() and examples.tokens.max() < vocab)

    @parameterized.parameters(*CASES)
    def test_shuffled_answers_score_chance(self, task, options, chance):
        examples = rt.generate(task, seed=4, length=64, batch=B, **options)
        answers = examples.answers
        shuffled = answers[np.random.default_rng(0).permutation(B)]
        right = int(np.sum(shuffled == answers))
        # Consistent with chance (a fixed draw: the test cannot flake) and far below the oracle.
        self.assertGreater(stats.binomtest(right, answers.size, chance).pvalue, 0.01)

    @parameterized.parameters(*CASES)
    def test_mask_and_depth(self, task, options, chance):
        examples = rt.generate(task, seed=5, length=64, batch=B, **options)
        self.assertEqual(int(examples.mask.sum()), examples.positions[0].size * B)
        # A row's answers in row order: mask and positions mark the same tokens.
        np.testing.assert_array_equal(examples.tokens[examples.mask], examples.answers.ravel())
        self.assertTrue(np.all((examples.depth >= 0) & (examples.depth <= 1)))

    def test_a_seed_gives_the_same_rows(self):
        first = rt.generate("mqar", seed=7, length=64, batch=4)
        again = rt.generate("mqar", seed=7, length=64, batch=4)
        other = rt.generate("mqar", seed=8, length=64, batch=4)
        np.testing.assert_array_equal(first.tokens, again.tokens)
        np.testing.assert_array_equal(first.positions, again.positions)
        self.assertFalse(np.array_equal(first.tokens, other.tokens))
        # A run's training rows (seed, step) differ from step to step.
        steps = [rt.generate("flipflop", seed=(0, 0, t), length=32, batch=2).tokens for t in (0, 1)]
        self.assertFalse(np.array_equal(*steps))

    def test_passkey_needle_sits_at_its_depth(self):
        length, digits = 40, 4
        size = length - 3 - 2 * digits  # the haystack's tokens
        examples = rt.passkey(
            np.random.default_rng(0), length, 3, digits=digits, depths=(0.0, 0.5, 1.0)
        )
        needles = np.argmax(examples.tokens == rt.NEEDLE, axis=1)
        np.testing.assert_array_equal(needles, [1, 1 + round(0.5 * size), 1 + size])
        np.testing.assert_allclose(examples.depth[:, 0], [0.0, round(0.5 * size) / size, 1.0])
        self.assertTrue(np.all(examples.tokens[:, 0] == rt.BOS))
        self.assertTrue(np.all(examples.tokens[:, length - digits - 1] == rt.QUERY))
        np.testing.assert_array_equal(  # the same digits at the needle and as the answer
            examples.tokens[0, 2 : 2 + digits], examples.answers[0, 0]
        )

    def test_text_haystack_is_a_span_of_the_builtin_corpus(self):
        def chars(tokens):
            return "".join(chr(t - rt.TEXT0 + 32) for t in tokens)

        corpus = chars(rt.corpus_text())
        examples = rt.generate("passkey", seed=0, length=64, batch=2, haystack="text", digits=2)
        row = examples.tokens[0]
        needle = int(np.argmax(row == rt.NEEDLE))
        hay = np.concatenate([row[1:needle], row[needle + 3 : -3]])  # less needle and question
        self.assertIn(chars(hay), corpus)
        self.assertGreater(len(set(corpus.split())), 1000)  # prose, not a repeated filler

    @parameterized.parameters(
        ("passkey", 12, {}, "leaves no haystack"),
        ("passkey", 64, {"haystack": "web"}, "haystack='web'"),
        ("passkey", 64, {"depths": (0.5, 1.5)}, r"depths=\[0.5, 1.5\]"),
        ("passkey", 64, {"digits": 0}, "digits=0"),
        ("mqar", 30, {"pairs": 8}, "cannot hold 8 pairs"),
        ("mqar", 64, {"vocab": 15}, "vocab=15"),
        ("flipflop", 33, {}, "length=33 is odd"),
        ("flipflop", 16, {"reads": 8}, r"reads=8 must be in \[1, 7\]"),
        ("flipflop", 32, {"p_write": 0.0}, "p_write=0.0"),
        ("mqar", 64, {"depths": (0.5,)}, r"mqar takes no options \['depths'\]"),
        ("needle", 64, {}, "task='needle'"),
    )
    def test_bad_settings_name_what_is_wrong(self, task, length, options, message):
        with self.assertRaisesRegex(ValueError, message):
            rt.generate(task, seed=0, length=length, batch=2, **options)


if __name__ == "__main__":
    absltest.main()
