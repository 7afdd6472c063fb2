"""Tests for roformer_jax/data/corpus.py: sources, split, cache, statistics and bad input; a
damaged cache names its file and what to do."""

import glob
import os
import shutil
import warnings
from unittest import mock

import numpy as np
import tiny
from absl.testing import absltest, parameterized
from corpus_cases import CorpusTestCase, _write

from roformer_jax.data import corpus as corpus_lib
from roformer_jax.data.batches import train_batches
from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DataConfig

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
WIKITEXT = os.path.join(DATA, "wikitext-2", "valid.txt")


class LoadTest(CorpusTestCase):
    def test_split_and_stats(self):
        corpus = self.load()
        stats = corpus.stats
        self.assertEqual(stats["documents"], len(self.docs))
        self.assertEqual(stats["train_documents"] + stats["valid_documents"], len(self.docs))
        self.assertBetween(stats["valid_documents"], 20, 60)
        self.assertEqual(stats["train_tokens"], corpus.train_tokens.size)
        sep = corpus.tokenizer.sep_id
        self.assertEqual(np.sum(corpus.train_tokens == sep), stats["train_documents"])
        self.assertEqual(np.sum(corpus.valid_tokens == sep), stats["valid_documents"])
        self.assertLessEqual(corpus.tokenizer.vocab_size, 300)

    def test_split_is_by_document_and_deterministic(self):
        corpus = self.load()
        tok = corpus.tokenizer
        valid_text = tok.decode(corpus.valid_tokens).split("[SEP]")
        valid_docs = {d.strip() for d in valid_text if d.strip()}
        self.assertTrue(valid_docs)
        self.assertTrue(valid_docs.issubset(self.docs))
        train_docs = {d.strip() for d in tok.decode(corpus.train_tokens).split("[SEP]")}
        self.assertFalse(valid_docs & train_docs)
        # The same documents are held out after reordering the file.
        shuffled = _write(self.dir, "shuffled.txt", "\n".join(self.docs[::-1]))
        again = self.load(source=shuffled)
        again_text = again.tokenizer.decode(again.valid_tokens).split("[SEP]")
        self.assertEqual({d.strip() for d in again_text if d.strip()}, valid_docs)

    def test_unigram_cross_entropy(self):
        corpus = self.load()
        specials = corpus.tokenizer.special_ids
        train = [t for t in corpus.train_tokens.tolist() if t not in specials]
        valid = [t for t in corpus.valid_tokens.tolist() if t not in specials]
        real_vocab = corpus.tokenizer.vocab_size - len(specials)
        total = len(train) + real_vocab
        expected = -np.mean([np.log((train.count(t) + 1) / total) for t in valid])
        self.assertAlmostEqual(corpus.unigram_cross_entropy(), expected, places=6)
        self.assertBetween(expected, 1.0, np.log(real_vocab))
        # Nothing held out: NaN, and no numpy warning in a study's terminal.
        held_out = corpus_lib.Corpus(
            corpus.config,
            corpus.tokenizer,
            corpus.train_tokens,
            corpus.valid_tokens[:0],
            corpus.stats,
            corpus.path,
        )
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            self.assertTrue(np.isnan(held_out.unigram_cross_entropy()))

    def test_cache_is_reused_and_invalidated(self):
        first = self.load()
        with mock.patch.object(corpus_lib, "_build_cache", side_effect=AssertionError("rebuilt")):
            second = self.load()
        np.testing.assert_array_equal(first.train_tokens, second.train_tokens)
        self.assertIsInstance(second.train_tokens, np.memmap)
        self.assertEqual(first.path, second.path)
        self.assertEqual(self.load(seq_len=32).path, first.path)  # packing is not cached
        copy = os.path.join(self.dir, "elsewhere", "corpus.txt")  # moved, touched: same bytes
        os.makedirs(os.path.dirname(copy))
        shutil.copy(self.path, copy)
        os.utime(copy, ns=(1, 1))
        with mock.patch.object(corpus_lib, "_build_cache", side_effect=AssertionError("rebuilt")):
            self.assertEqual(self.load(source=copy).path, first.path)
        with open(self.path, "a") as f:
            f.write("a new line\n")
        self.assertNotEqual(self.load().path, first.path)
        self.assertNotEqual(self.load(vocab_size=200).path, first.path)

    def test_cache_key_of_existing_configs_is_unchanged(self):
        # New fields enter the identity only away from their defaults, so caches built before
        # them keep their key.
        old = {"format", "source", "files", "max_chars", "valid_fraction", "tokenizer"}
        _, identity = corpus_lib._cache_key(DataConfig(), [])
        self.assertEqual(set(identity), old | {"python", "vocab_size"})
        _, identity = corpus_lib._cache_key(DataConfig(source=self.path), [self.path])
        self.assertEqual(set(identity), old | {"doc_separator", "vocab_size"})

    @parameterized.named_parameters(
        ("builtin", "builtin", dict(min_doc_chars=1000)),
        ("file", None, dict(min_doc_chars=1000)),
        ("builtin_article", "builtin", dict(doc_separator="article")),
        ("file_article", None, dict(doc_separator="article")),
        ("selection", None, dict(selection_fraction=0.1)),
        ("split_by_article", None, dict(split_by="article")),
    )
    def test_cache_key_covers_documents(self, source, change):
        source = source or self.path
        files = corpus_lib.corpora.resolve_files(source)
        key, _ = corpus_lib._cache_key(DataConfig(source=source), files)
        changed, _ = corpus_lib._cache_key(DataConfig(source=source, **change), files)
        self.assertNotEqual(changed, key)

    def test_builtin_line_and_blank_share_a_key(self):
        # "builtin" reads docstrings the same way for both, so one cache serves both.
        key, _ = corpus_lib._cache_key(DataConfig(doc_separator="line"), [])
        self.assertEqual(corpus_lib._cache_key(DataConfig(doc_separator="blank"), [])[0], key)

    def test_min_doc_chars(self):
        corpus = self.load(min_doc_chars=500)
        expected = list(corpus_lib.corpora.join_documents(self.docs, 500))
        self.assertEqual(corpus.stats["documents"], len(expected))
        self.assertEqual(corpus.stats["chars"], sum(map(len, expected)))
        self.assertNotEqual(corpus.path, self.load().path)
        # The held-out documents are whole joined spans: [SEP] only between spans.
        sep = corpus.tokenizer.sep_id
        self.assertEqual(np.sum(corpus.valid_tokens == sep), corpus.stats["valid_documents"])
        self.assertGreater(corpus.stats["valid_documents"], 0)

    def test_no_temporary_files_left(self):
        corpus = self.load()
        for _, _, files in os.walk(corpus.path):
            self.assertFalse([f for f in files if ".tmp" in f])

    def test_tokenizer_choices(self):
        corpus = self.load(tokenizer="bytes")
        self.assertEqual(corpus.tokenizer.vocab_size, 261)
        self.assertEqual(corpus.tokenizer.decode(corpus.train_tokens[:5]), self.docs[0][:5])
        wordpiece = self.load()
        vocab = os.path.join(wordpiece.path, "tokenizer", "vocab.txt")
        loaded = self.load(tokenizer=vocab)
        np.testing.assert_array_equal(loaded.train_tokens, wordpiece.train_tokens)

    def test_builtin(self):
        corpus = self.load(source="builtin", max_chars=20_000, vocab_size=500)
        self.assertEqual(corpus.stats["chars"], 20_000)
        batch = next(train_batches(corpus, batch_size=2, seed=0, prefetch=0))
        self.assertEqual(batch["input_ids"].shape, (2, 16))

    def test_max_chars(self):
        corpus = self.load(max_chars=2000, valid_fraction=0.0)
        self.assertEqual(corpus.stats["chars"], 2000)
        self.assertEqual(corpus.stats["valid_tokens"], 0)

    @absltest.skipUnless(os.path.isfile(WIKITEXT), "shared/data is absent")
    def test_wikitext(self):
        corpus = self.load(source=WIKITEXT, max_chars=300_000, vocab_size=2000, seq_len=128)
        self.assertGreater(corpus.stats["documents"], 500)
        self.assertLess(corpus.train_tokens.size, 300_000 / 3)  # WordPiece, not characters
        self.assertGreater(corpus.valid_tokens.size, 512)


def _docs_of(corpus, tokens) -> list[str]:
    return [d.strip() for d in corpus.tokenizer.decode(tokens).split("[SEP]") if d.strip()]


class SplitTest(CorpusTestCase):
    def test_a_selection_band_changes_no_held_out_id(self):
        # The runs committed before it stay comparable: the held-out stream and the
        # tokenizer are those of the cache without the band, and training only loses the
        # selection documents.
        before = self.load()
        after = self.load(selection_fraction=0.2)
        self.assertNotEqual(after.path, before.path)
        np.testing.assert_array_equal(after.valid_tokens, before.valid_tokens)
        self.assertEqual(after.tokenizer.vocab, before.tokenizer.vocab)
        selection = _docs_of(after, after.selection_tokens)
        self.assertBetween(len(selection), 40, 120)  # 20% of 400 documents
        train = _docs_of(after, after.train_tokens)
        self.assertFalse(set(selection) & set(train))
        self.assertEqual(sorted(train + selection), sorted(_docs_of(before, before.train_tokens)))
        self.assertEqual(after.stats["selection_documents"], len(selection))
        self.assertEqual(before.selection_tokens.size, 0)
        # eval_split picks the stream that evaluation scores.
        self.assertIs(after.eval_tokens, after.valid_tokens)
        chosen = self.load(selection_fraction=0.2, eval_split="selection")
        np.testing.assert_array_equal(chosen.eval_tokens, after.selection_tokens)

    def test_split_by_article_holds_out_whole_articles(self):
        # WikiText's paragraphs as documents, held out with their whole article.
        rng = np.random.default_rng(1)
        articles = [
            [f"= Article {a} ="] + [f"paragraph {i} of {a}" for i in range(rng.integers(1, 6))]
            for a in range(120)
        ]
        path = _write(self.dir, "wiki.txt", "\n".join(" " + ln for a in articles for ln in a))
        corpus = self.load(source=path, split_by="article", tokenizer="bytes")
        held_out = _docs_of(corpus, corpus.valid_tokens)
        train = _docs_of(corpus, corpus.train_tokens)
        lines = corpus_lib.corpora.read_documents(path, doc_separator="line")
        self.assertEqual(sorted(held_out + train), sorted(lines))  # the documents of "line"
        article = {line: a for a, lines in enumerate(articles) for line in lines}
        held_articles = {article[d] for d in held_out}
        self.assertBetween(len(held_articles), 4, 24)  # 10% of 120
        self.assertFalse(held_articles & {article[d] for d in train})


class BadInputTest(CorpusTestCase):
    def test_smaller_than_one_sequence(self):
        path = _write(self.dir, "tiny.txt", "just a few words here\n")
        with self.assertRaisesRegex(ValueError, "fewer than one sequence of seq_len 128"):
            self.load(source=path, seq_len=128, valid_fraction=0.0)

    def test_source_errors_reach_the_caller(self):
        with self.assertRaisesRegex(FileNotFoundError, "does not exist"):
            self.load(source=os.path.join(self.dir, "nope.txt"))
        with self.assertRaisesRegex(ValueError, "has no text"):
            self.load(source=_write(self.dir, "empty.txt", "\n \n"))

    def test_not_a_vocab(self):
        bad = _write(self.dir, "vocab.txt", "hello\nworld\n")
        with self.assertRaisesRegex(ValueError, r"not a BERT vocab.txt.*\[PAD\]"):
            self.load(tokenizer=bad)
        with self.assertRaisesRegex(FileNotFoundError, "neither 'wordpiece'"):
            self.load(tokenizer=os.path.join(self.dir, "missing_vocab.txt"))

    @parameterized.named_parameters(
        ("seq_len", dict(seq_len=2), "sequence length 2"),
        ("valid_len", dict(valid_lengths=(64, 1)), "sequence length 1"),
        ("fraction", dict(valid_fraction=1.0), "valid_fraction"),
        ("mask_prob", dict(mask_prob=0.0), "mask_prob"),
        ("separator", dict(doc_separator="paragraph"), "doc_separator 'paragraph'.*'article'"),
        ("max_chars", dict(max_chars=0), "max_chars"),
        ("min_doc_chars", dict(min_doc_chars=-1), "min_doc_chars -1"),
        ("vocab", dict(vocab_size=4), "vocab_size"),
        ("eval_pairs", dict(eval_pairs=0), "eval_pairs 0"),
        ("documents", dict(documents="closed"), "documents 'closed'"),
        ("isolated_pairs", dict(documents="isolated", objective="mlm_same_doc"), "'isolated'"),
        ("eval_documents", dict(eval_documents="closed"), "eval_documents 'closed'"),
        ("selection", dict(selection_fraction=0.95), "selection_fraction 0.95"),
        ("no_selection", dict(eval_split="selection"), "selection_fraction 0"),
        ("eval_split", dict(eval_split="test"), "eval_split 'test'"),
        ("split_by", dict(split_by="book"), "split_by 'book'"),
        ("article_lines", dict(split_by="article", doc_separator="blank"), "doc_separator='line'"),
    )
    def test_bad_config(self, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            DataConfig(**kwargs)


class DamagedCacheTest(parameterized.TestCase):
    @parameterized.parameters("meta.json", "train.npy", "valid.npy")
    def test_a_cut_off_cache_file_is_named(self, name):
        tmp = tiny.workdir()
        cfg = DataConfig(source=tiny.corpus(tmp, documents=200), tokenizer="bytes", seq_len=32)
        load_corpus(cfg, tmp)
        (path,) = glob.glob(os.path.join(tmp, "corpus-*", name))
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        with self.assertRaisesRegex(
            ValueError, rf"data cache file {path} is damaged .*; delete the folder .* to rebuild"
        ):
            load_corpus(cfg, tmp)


if __name__ == "__main__":
    absltest.main()
