"""Tests for roformer_jax/tokenizer.py: WordPiece (trained and loaded), bytes, save/load."""

import json
import os
import shutil

import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.data.tokenizer import (
    SPECIAL_TOKENS,
    ByteTokenizer,
    WordPieceTokenizer,
    load_tokenizer,
    train_wordpiece,
)

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
SHAKESPEARE = os.path.join(DATA, "tinyshakespeare", "input.txt")


def _generated_text(num_docs=300, seed=0):
    """Sentences over a made-up lexicon, so WordPiece has frequent words and rare ones."""
    rng = np.random.default_rng(seed)
    syllables = ["ro", "ta", "ry", "em", "bed", "ding", "po", "si", "tion", "al", "ten", "sor"]
    lexicon = ["".join(rng.choice(syllables, size=rng.integers(1, 4))) for _ in range(400)]
    weights = 1.0 / np.arange(1, len(lexicon) + 1)  # Zipf, like real text
    docs = []
    for _ in range(num_docs):
        words = rng.choice(lexicon, size=rng.integers(5, 30), p=weights / weights.sum())
        words = [w + "," if rng.random() < 0.1 else w for w in words[:-1]] + [words[-1] + "."]
        docs.append(" ".join(words))
    return docs


def _tempdir(test):
    path = tiny.workdir()
    test.addCleanup(shutil.rmtree, path)
    return path


class ByteTokenizerTest(absltest.TestCase):
    def test_round_trip(self):
        tok = ByteTokenizer()
        text = "Rotary ∠ embeddings — 旋转位置编码, naïve.\n\tdone"
        ids = tok.encode(text)
        self.assertEqual(len(ids), len(text.encode("utf-8")))
        self.assertEqual(tok.decode(ids), text)
        self.assertEqual(tok.vocab_size, 261)
        self.assertGreaterEqual(min(ids), 5)

    def test_specials(self):
        tok = ByteTokenizer()
        self.assertEqual(tok.special_ids, (0, 1, 2, 3, 4))
        ids = [tok.cls_id, *tok.encode("ab"), tok.mask_id, tok.sep_id, tok.pad_id]
        self.assertEqual(tok.decode(ids), "[CLS]ab[MASK][SEP]")

    def test_word_starts(self):
        tok = ByteTokenizer()
        ids = np.array([tok.cls_id, *tok.encode("ab, cd")])
        expected = [True, True, False, True, True, True, False]  # [CLS] a b , ␠ c d
        np.testing.assert_array_equal(tok.word_starts(ids), expected)


class WordPieceTest(parameterized.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.docs = _generated_text()
        cls.tok = train_wordpiece(cls.docs, vocab_size=300)

    def test_specials_first(self):
        self.assertEqual(self.tok.vocab[:5], list(SPECIAL_TOKENS))
        self.assertEqual(self.tok.special_ids, (0, 1, 2, 3, 4))
        self.assertEqual(
            (self.tok.pad_id, self.tok.unk_id, self.tok.cls_id, self.tok.sep_id, self.tok.mask_id),
            (0, 1, 2, 3, 4),
        )
        self.assertLessEqual(self.tok.vocab_size, 300)
        self.assertGreater(self.tok.vocab_size, 100)

    def test_training_is_deterministic(self):
        # HF's trainer alone orders (and sometimes picks) pieces differently on every run.
        again = train_wordpiece(self.docs, vocab_size=300)
        self.assertEqual(again.vocab, self.tok.vocab)

    def test_round_trip(self):
        for doc in self.docs[:50]:
            ids = self.tok.encode(doc)
            self.assertNotIn(self.tok.unk_id, ids)
            self.assertNotIn(self.tok.cls_id, ids)  # no specials added
            self.assertEqual(self.tok.decode(ids), doc)

    def test_round_trip_with_punctuation_and_case(self):
        text = "Ro  ta,ryem.\n Bedding , Potion."
        ids = self.tok.encode(text)
        self.assertEqual(self.tok.decode(ids), "ro ta, ryem. bedding, potion.")
        self.assertEqual(self.tok.encode(self.tok.decode(ids)), ids)

    def test_encode_batch_matches_encode(self):
        batch = self.tok.encode_batch(self.docs[:20])
        self.assertEqual(batch, [self.tok.encode(d) for d in self.docs[:20]])

    def test_word_starts(self):
        ids = np.array(self.tok.encode("rotaryembeddingpositional ta"))
        starts = self.tok.word_starts(ids)
        pieces = [self.tok.vocab[i] for i in ids]
        np.testing.assert_array_equal(starts, [not p.startswith("##") for p in pieces])
        self.assertTrue(starts[0])
        self.assertFalse(starts[1:-1].all())

    def test_decode_shows_specials_drops_padding(self):
        ids = [self.tok.cls_id, *self.tok.encode("ro ta"), self.tok.mask_id, self.tok.pad_id]
        self.assertEqual(self.tok.decode(ids), "[CLS] ro ta [MASK]")

    def test_save_load(self):
        path = _tempdir(self)
        self.tok.save(path)
        loaded = load_tokenizer(path)
        self.assertIsInstance(loaded, WordPieceTokenizer)
        self.assertEqual(loaded.vocab, self.tok.vocab)
        self.assertTrue(loaded.lowercase)
        text = " ".join(self.docs[:5])
        self.assertEqual(loaded.encode(text), self.tok.encode(text))
        ByteTokenizer().save(path)
        self.assertIsInstance(load_tokenizer(path), ByteTokenizer)

    def test_too_small_vocab(self):
        with self.assertRaisesRegex(ValueError, "vocab_size 5"):
            train_wordpiece(["a b c"], vocab_size=5)

    @absltest.skipUnless(os.path.isfile(SHAKESPEARE), "shared/data is absent")
    def test_real_text_round_trip(self):
        with open(SHAKESPEARE, encoding="utf-8") as f:
            text = f.read()[:200_000]
        tok = train_wordpiece(text.split("\n\n"), vocab_size=2000)
        sample = text[100_000:110_000]
        ids = tok.encode(sample)
        self.assertLess(ids.count(tok.unk_id), 3)
        self.assertLess(len(ids), len(sample) / 3)  # pieces are longer than characters
        self.assertEqual(tok.encode(tok.decode(ids)), ids)
        self.assertEqual(" ".join(tok.decode(ids).split()), tok.decode(ids))


class VocabFileTest(parameterized.TestCase):
    def _write(self, content, name="vocab.txt", mode="w"):
        path = os.path.join(_tempdir(self), name)
        with open(path, mode) as f:
            f.write(content)
        return path

    def _bert_vocab(self, words):
        # BERT's layout: [PAD], [unused*], [UNK] [CLS] [SEP] [MASK] at 100..103, then words.
        unused = [f"[unused{i}]" for i in range(99)]
        return ["[PAD]", *unused, "[UNK]", "[CLS]", "[SEP]", "[MASK]", *words]

    def test_bert_layout(self):
        vocab = self._bert_vocab(["the", "rot", "##ary", "em", "##bed", "##ding", "##s", "."])
        path = self._write("\n".join(vocab) + "\n")
        tok = WordPieceTokenizer.from_vocab(path)
        self.assertEqual(tok.special_ids, (0, 100, 101, 102, 103))
        self.assertEqual(tok.vocab_size, len(vocab))
        self.assertTrue(tok.lowercase)  # no uppercase tokens: an uncased vocabulary
        ids = tok.encode("The Rotary Embeddings.")
        self.assertEqual(
            [vocab[i] for i in ids], ["the", "rot", "##ary", "em", "##bed", "##ding", "##s", "."]
        )
        self.assertEqual(tok.decode(ids), "the rotary embeddings.")
        self.assertEqual(tok.encode("zebra"), [tok.unk_id])

    def test_lowercase_detection(self):
        cased = self._write("\n".join(self._bert_vocab(["The", "the"])))
        self.assertFalse(WordPieceTokenizer.from_vocab(cased).lowercase)
        folder = os.path.dirname(cased)
        with open(os.path.join(folder, "tokenizer_config.json"), "w") as f:
            json.dump({"do_lower_case": True}, f)
        self.assertTrue(WordPieceTokenizer.from_vocab(folder).lowercase)

    @parameterized.named_parameters(
        ("missing_specials", "the\nrot\n##ary\n", "w", "lacks the special tokens"),
        ("pad_not_first", "[UNK]\n[PAD]\n[CLS]\n[SEP]\n[MASK]\n", "w", r"\[PAD\] has id 1"),
        ("json", '{"model": {"vocab": {}}}', "w", "looks like JSON"),
        ("binary", b"\x00\x01\x02PK\x03", "wb", "binary"),
        ("bad_utf8", b"[PAD]\n\xff\xfe\n", "wb", "invalid UTF-8"),
    )
    def test_not_a_vocab(self, content, mode, message):
        path = self._write(content, mode=mode)
        with self.assertRaisesRegex(ValueError, f"not a BERT vocab.txt.*{message}"):
            WordPieceTokenizer.from_vocab(path)

    def test_missing_vocab(self):
        with self.assertRaisesRegex(FileNotFoundError, "does not exist"):
            WordPieceTokenizer.from_vocab("/nonexistent/vocab.txt")


if __name__ == "__main__":
    absltest.main()
