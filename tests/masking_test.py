"""Tests for roformer_jax/masking.py: BERT's 15% / 80-10-10 corruption, next-token targets."""

import numpy as np
from absl.testing import absltest, parameterized

from roformer_jax.data.masking import mask_tokens, max_targets, next_token_targets

PAD, UNK, CLS, SEP, MASK = range(5)
SPECIALS = (PAD, UNK, CLS, SEP, MASK)
V = 30000


def _rows(rng, batch=1100, length=128):
    """[CLS] real... [SEP] [PAD]..., with a few [UNK]s and [SEP]s inside; ~1e5 real tokens."""
    tokens = rng.integers(5, V, size=(batch, length))
    lengths = rng.integers(length // 2, length + 1, size=batch)
    tokens[np.arange(length) >= lengths[:, None]] = PAD
    tokens[rng.random(tokens.shape) < 0.01] = UNK
    tokens[rng.random(tokens.shape) < 0.01] = SEP
    tokens[:, 0] = CLS
    return tokens


def _word_starts(rng, tokens):
    return rng.random(tokens.shape) < 0.6  # words of ~1.7 pieces


def _mask(tokens, seed, **kw):
    kw = dict(vocab_size=V, mask_id=MASK, special_ids=SPECIALS) | kw
    return mask_tokens(tokens, np.random.default_rng(seed), **kw)


class MaskTokensTest(parameterized.TestCase):
    def test_rates_match_bert(self):
        tokens = _rows(np.random.default_rng(0))
        out = _mask(tokens, seed=1)
        real = ~np.isin(tokens, SPECIALS)
        self.assertGreater(real.sum(), 1e5)
        chosen = out["weights"] > 0
        self.assertAlmostEqual(chosen.sum() / real.sum(), 0.15, delta=0.01)
        kept = chosen & (out["input_ids"] == tokens)
        masked = chosen & (out["input_ids"] == MASK)
        randomized = chosen & ~kept & ~masked
        self.assertAlmostEqual(masked.sum() / chosen.sum(), 0.8, delta=0.01)
        self.assertAlmostEqual(randomized.sum() / chosen.sum(), 0.1, delta=0.01)
        self.assertAlmostEqual(kept.sum() / chosen.sum(), 0.1, delta=0.01)

    def test_exact_count_per_row(self):
        tokens = _rows(np.random.default_rng(0), batch=50)
        out = _mask(tokens, seed=1, mask_prob=0.2)
        num_real = (~np.isin(tokens, SPECIALS)).sum(-1)
        expected = np.maximum(1, np.floor(0.2 * num_real + 0.5))
        np.testing.assert_array_equal(out["weights"].sum(-1), expected)

    @parameterized.parameters(0.15, 0.2, 0.5)
    def test_max_targets_bounds_every_row(self, mask_prob):
        for length in (1, 2, 3, 7, 10, 13, 64, 127, 128, 512):
            tokens = _rows(np.random.default_rng(length), batch=20, length=length)
            tokens[0] = 5  # a row of real tokens only reaches the bound
            counts = _mask(tokens, seed=1, mask_prob=mask_prob)["weights"].sum(-1)
            self.assertEqual(counts.max(), max_targets(length, mask_prob), length)

    @parameterized.parameters(False, True)
    def test_specials_and_padding_never_chosen(self, whole_word):
        rng = np.random.default_rng(2)
        tokens = _rows(rng)
        ws = _word_starts(rng, tokens) if whole_word else None
        out = _mask(tokens, seed=3, mask_prob=0.9, word_starts=ws)
        special = np.isin(tokens, SPECIALS)
        np.testing.assert_array_equal(out["weights"][special], 0)
        np.testing.assert_array_equal(out["input_ids"][special], tokens[special])
        self.assertFalse(np.isin(out["input_ids"][~special], (PAD, UNK, CLS, SEP)).any())

    def test_outputs(self):
        tokens = _rows(np.random.default_rng(0), batch=4)
        out = _mask(tokens, seed=0)
        self.assertEqual(set(out), {"input_ids", "targets", "weights"})
        for key, dtype in (("input_ids", np.int32), ("targets", np.int32), ("weights", np.float32)):
            self.assertEqual(out[key].shape, tokens.shape)
            self.assertEqual(out[key].dtype, dtype)
        chosen = out["weights"] > 0
        np.testing.assert_array_equal(out["targets"], np.where(chosen, tokens, 0))
        unchosen = out["input_ids"][~chosen]
        np.testing.assert_array_equal(unchosen, tokens[~chosen])

    def test_pure_given_seed(self):
        tokens = _rows(np.random.default_rng(0), batch=8)
        a, b, c = _mask(tokens, seed=5), _mask(tokens, seed=5), _mask(tokens, seed=6)
        for k in a:
            np.testing.assert_array_equal(a[k], b[k])
        self.assertFalse(np.array_equal(a["weights"], c["weights"]))

    def test_one_dimensional_and_empty_rows(self):
        out = _mask(np.array([CLS, 7, 8, 9, SEP]), seed=0)
        self.assertEqual(out["weights"].shape, (5,))
        self.assertEqual(out["weights"].sum(), 1)  # max(1, round(0.15 * 3))
        out = _mask(np.array([[CLS, SEP, PAD, PAD]]), seed=0)
        self.assertEqual(out["weights"].sum(), 0)

    def test_whole_words(self):
        rng = np.random.default_rng(4)
        tokens = _rows(rng)
        ws = _word_starts(rng, tokens)
        out = _mask(tokens, seed=5, word_starts=ws)
        real = ~np.isin(tokens, SPECIALS)
        chosen = out["weights"] > 0
        # A continuation piece is chosen exactly when the piece before it is (same word).
        inside = real[:, 1:] & ~ws[:, 1:] & real[:, :-1]
        np.testing.assert_array_equal(chosen[:, 1:][inside], chosen[:, :-1][inside])
        rate = chosen.sum() / real.sum()
        self.assertBetween(rate, 0.15, 0.17)  # words are taken until >= 15% are covered
        masked = chosen & (out["input_ids"] == MASK)
        self.assertAlmostEqual(masked.sum() / chosen.sum(), 0.8, delta=0.01)

    def test_random_tokens_skip_specials_in_the_middle(self):
        # BERT vocabularies keep [UNK] [CLS] [SEP] [MASK] at 100..103, not 1..4.
        tokens = np.random.default_rng(0).integers(0, 200, size=(200, 100))
        specials = (0, 100, 101, 102, 103)
        tokens[np.isin(tokens, specials)] = 5
        out = mask_tokens(
            tokens,
            np.random.default_rng(1),
            vocab_size=200,
            mask_id=103,
            special_ids=specials,
            mask_prob=1.0,
        )
        replaced = out["input_ids"][out["input_ids"] != 103]
        self.assertFalse(np.isin(replaced, (0, 100, 101, 102)).any())
        self.assertEqual(replaced.max(), 199)

    @parameterized.named_parameters(
        ("prob_zero", dict(mask_prob=0.0), "mask_prob"),
        ("prob_big", dict(mask_prob=1.5), "mask_prob"),
        ("mask_not_special", dict(mask_id=7), "mask_id 7"),
        ("word_starts_shape", dict(word_starts=np.ones((1, 3), bool)), "word_starts"),
    )
    def test_bad_arguments(self, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            _mask(np.zeros((2, 4), np.int32), seed=0, **kwargs)

    def test_float_tokens_rejected(self):
        with self.assertRaisesRegex(ValueError, "integers"):
            _mask(np.zeros((2, 4)), seed=0)


class PerRowGeneratorsTest(absltest.TestCase):
    def test_a_row_depends_on_its_own_generator_only(self):
        tokens = np.random.default_rng(0).integers(5, 100, size=(3, 40))
        kwargs = dict(vocab_size=100, mask_id=4, special_ids=range(5))
        rows = mask_tokens(tokens, [np.random.default_rng(k) for k in (7, 8, 9)], **kwargs)
        alone = mask_tokens(tokens[1:2], [np.random.default_rng(8)], **kwargs)
        for key, value in alone.items():
            np.testing.assert_array_equal(rows[key][1:2], value)
        with self.assertRaisesRegex(ValueError, "2 generators for 3 rows"):
            mask_tokens(tokens, [np.random.default_rng(k) for k in (1, 2)], **kwargs)


class NextTokenTargetsTest(absltest.TestCase):
    def test_targets_are_the_next_real_tokens_of_the_text(self):
        tokens = np.array(
            [
                [CLS, 7, 8, SEP, 9, SEP],
                [CLS, 7, 8, SEP, PAD, PAD],
                [PAD] * 6,
                [CLS, SEP] + [PAD] * 4,
            ]
        )
        out = next_token_targets(tokens, pad_id=PAD)
        np.testing.assert_array_equal(out["input_ids"], tokens)  # nothing corrupted
        # The last real token has no next token, and the row's closing [SEP] (where the
        # window was cut) is no target; a [SEP] inside the text (a document's end) is one.
        np.testing.assert_array_equal(
            out["weights"], [[1, 1, 1, 1, 0, 0], [1, 1, 0, 0, 0, 0], [0] * 6, [0] * 6]
        )
        np.testing.assert_array_equal(
            out["targets"], [[7, 8, SEP, 9, 0, 0], [7, 8, 0, 0, 0, 0], [0] * 6, [0] * 6]
        )
        self.assertEqual(out["weights"].dtype, np.float32)
        self.assertEqual(out["targets"].dtype, np.int32)
        one = next_token_targets(tokens[0], pad_id=PAD)  # [L] in, [L] out
        np.testing.assert_array_equal(one["weights"], out["weights"][0])


if __name__ == "__main__":
    absltest.main()
