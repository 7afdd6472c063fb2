"""Tests for roformer_jax/data/corpus.py and batches.py: sources, split, cache, packing,
iterator, bad input."""

import os
import shutil
import warnings
from unittest import mock

import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.data import corpus as corpus_lib
from roformer_jax.data import objectives
from roformer_jax.data.batches import held_out_pairs, train_batches
from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DOCUMENTS, DataConfig

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
WIKITEXT = os.path.join(DATA, "wikitext-2", "valid.txt")


def _tempdir(test):
    path = tiny.workdir()
    test.addCleanup(shutil.rmtree, path)
    return path


def _write(folder, name, text, mode="w"):
    path = os.path.join(folder, name)
    with open(path, mode) as f:
        f.write(text)
    return path


def _generated_docs(num_docs=400, seed=0):
    """Distinct random sentences (one per line) over a small lexicon."""
    rng = np.random.default_rng(seed)
    lexicon = [f"w{i}x" if i % 3 else f"word{i}" for i in range(200)]
    return [" ".join(rng.choice(lexicon, size=rng.integers(4, 25))) for _ in range(num_docs)]


class CorpusTestCase(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = _tempdir(self)
        self.cache = os.path.join(self.dir, "cache")
        self.docs = _generated_docs()
        self.path = _write(self.dir, "corpus.txt", "\n".join(self.docs) + "\n")

    def load(self, **kwargs):
        kwargs = dict(source=self.path, seq_len=16, vocab_size=300, valid_fraction=0.1) | kwargs
        return load_corpus(DataConfig(**kwargs), self.cache)


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


class BatchTest(CorpusTestCase):
    def test_batch_layout(self):
        corpus = self.load()
        batch = next(train_batches(corpus, batch_size=8, seed=0))
        keys = {"input_ids", "attention_mask", "token_type_ids", "targets", "weights"}
        self.assertEqual(set(batch), keys | {"index"})
        for key in keys:
            self.assertEqual(batch[key].shape, (8, 16))
        np.testing.assert_array_equal(batch["index"], np.arange(8, dtype=np.int32))
        self.assertEqual(batch["weights"].dtype, np.float32)
        tok = corpus.tokenizer
        np.testing.assert_array_equal(batch["input_ids"][:, 0], tok.cls_id)
        np.testing.assert_array_equal(batch["input_ids"][:, -1], tok.sep_id)
        np.testing.assert_array_equal(batch["attention_mask"], 1)
        np.testing.assert_array_equal(batch["token_type_ids"], 0)
        self.assertTrue((batch["weights"].sum(-1) >= 1).all())

    def test_epoch_visits_every_window_once(self):
        corpus = self.load()
        stream, span, num = np.asarray(corpus.train_tokens), 14, corpus.num_train_sequences()
        where = {stream[s : s + span].tobytes(): s for s in range(stream.size - span + 1)}
        it = train_batches(corpus, batch_size=4, seed=0, prefetch=0)
        rows = np.concatenate([_original(next(it)) for _ in range(-(-2 * num // 4))])
        for epoch in (rows[:num], rows[num : 2 * num]):
            windows = epoch[:, 1:-1].astype(stream.dtype)
            starts = np.array([where[w.tobytes()] for w in windows])
            self.assertLen(set(starts.tolist()), num)  # no window twice
            self.assertLen(set((starts % span).tolist()), 1)  # one offset per epoch

    def test_deterministic_and_resumable(self):
        corpus = self.load()
        run = train_batches(corpus, batch_size=8, seed=3)
        full = [next(run) for _ in range(60)]  # crosses an epoch boundary
        self.assertGreater(60 * 8, corpus.num_train_sequences())
        resumed = train_batches(corpus, batch_size=8, seed=3, start_step=41, prefetch=0)
        for step in range(41, 60):
            _assert_batches_equal(self, full[step], next(resumed))
        other = next(train_batches(corpus, batch_size=4, seed=4))
        self.assertFalse(np.array_equal(other["input_ids"], full[0]["input_ids"]))
        masks = [np.flatnonzero(b["weights"][0]).tolist() for b in full[:3]]
        self.assertNotEqual(masks[0], masks[1])  # each step draws its own masks

    def test_hosts_share_the_global_batch(self):
        corpus = self.load()
        one = train_batches(corpus, batch_size=8, seed=1, process_index=0, process_count=1)
        hosts = [
            train_batches(corpus, batch_size=8, seed=1, process_index=i, process_count=2)
            for i in range(2)
        ]
        for _ in range(3):
            whole = next(one)
            halves = [next(h) for h in hosts]
            self.assertEqual(halves[0]["input_ids"].shape, (4, 16))
            np.testing.assert_array_equal(
                np.concatenate([_original(h) for h in halves]), _original(whole)
            )

    @parameterized.parameters((2, "mlm"), (4, "mlm"), (2, "mlm_same_doc"), (2, "clm", "isolated"))
    def test_masks_do_not_depend_on_the_number_of_hosts(self, hosts, objective, documents="open"):
        # Each row is masked (and paired) from (seed, step, global row): P hosts see the
        # batch of one.
        corpus = self.load(objective=objective, min_doc_chars=200, documents=documents)
        one = train_batches(
            corpus, batch_size=8, seed=1, start_step=5, prefetch=0, process_index=0, process_count=1
        )
        parts = [
            train_batches(
                corpus,
                batch_size=8,
                seed=1,
                start_step=5,
                prefetch=0,
                process_index=i,
                process_count=hosts,
            )
            for i in range(hosts)
        ]
        for _ in range(2):
            whole, split = next(one), [next(p) for p in parts]
            for key, value in whole.items():
                np.testing.assert_array_equal(np.concatenate([b[key] for b in split]), value)

    @parameterized.parameters("bytes", "wordpiece")
    def test_whole_word(self, tokenizer):
        corpus = self.load(whole_word=True, mask_prob=0.3, tokenizer=tokenizer, vocab_size=100)
        batch = next(train_batches(corpus, batch_size=16, seed=0))
        ids = _original(batch)
        starts = corpus.tokenizer.word_starts(ids)
        chosen = batch["weights"] > 0
        inside = ~starts[:, 1:]
        np.testing.assert_array_equal(chosen[:, 1:][inside], chosen[:, :-1][inside])
        self.assertTrue(inside.any())

    def test_clm_batches_are_the_real_tokens_and_their_next_ones(self):
        mlm, clm = self.load(), self.load(objective="clm")
        for seed in (0, 1):  # the same windows as MLM's, unmasked
            m = next(train_batches(mlm, batch_size=8, seed=seed, start_step=3, prefetch=0))
            c = next(train_batches(clm, batch_size=8, seed=seed, start_step=3, prefetch=0))
            np.testing.assert_array_equal(c["input_ids"], _original(m))
            np.testing.assert_array_equal(c["index"], m["index"])
        ids, targets, weights = c["input_ids"], c["targets"], c["weights"]
        self.assertNotIn(clm.tokenizer.mask_id, ids)
        np.testing.assert_array_equal(targets[:, :-2], ids[:, 1:-1])
        # Full rows: every position but the last two (the closing [SEP], and its
        # predecessor, whose next token is that [SEP]).
        np.testing.assert_array_equal(weights[:, :-2], 1)
        np.testing.assert_array_equal(weights[:, -2:], 0)
        # Whole-word and mask-rate settings change nothing.
        other = self.load(objective="clm", whole_word=True, mask_prob=0.5)
        _assert_batches_equal(
            self, c, next(train_batches(other, batch_size=8, seed=1, start_step=3, prefetch=0))
        )

    def test_document_segments(self):
        # [CLS] 7 8 [SEP] | 9 [SEP] | [SEP]: the row's closing [SEP] (where the window was cut)
        # joins the last document, even right after one ended.
        ids = np.array([[1, 7, 8, 3, 9, 3, 3], [1, 7, 3, 8, 9, 9, 3]])
        np.testing.assert_array_equal(
            objectives.document_segments(ids, sep_id=3),
            [[0, 0, 0, 0, 1, 1, 1], [0, 0, 0, 1, 1, 1, 1]],
        )

    @parameterized.parameters("mlm", "clm")
    def test_isolated_rows_are_the_open_rows_with_their_documents(self, objective):
        open_, isolated = (self.load(objective=objective, documents=d) for d in DOCUMENTS)
        a, b = (
            next(train_batches(c, batch_size=8, seed=2, start_step=3, prefetch=0))
            for c in (open_, isolated)
        )
        segments, sep = b.pop("segment_ids"), isolated.tokenizer.sep_id
        ids = a["input_ids"] if objective == "clm" else _original(a)  # clm masks nothing
        # A new segment right after each [SEP] inside the text, and nowhere else.
        ends = ids[:, 1:-2] == sep
        np.testing.assert_array_equal(np.diff(segments[:, 1:-1], axis=1), ends)
        np.testing.assert_array_equal(segments[:, :2], 0)
        np.testing.assert_array_equal(segments[:, -1], segments[:, -2])
        self.assertGreater(segments.max(), 0)  # rows of 16 meet documents of 4-25 words
        # The same tokens, masks and targets; a causal row drops each document's last
        # target (its [SEP]'s: the next document's first token).
        crossing = np.zeros(ids.shape, bool)
        crossing[:, 1:-2] = ends if objective == "clm" else False
        self.assertEqual(crossing.any(), objective == "clm")
        np.testing.assert_array_equal(b.pop("weights"), np.where(crossing, 0, a.pop("weights")))
        np.testing.assert_array_equal(b.pop("targets"), np.where(crossing, 0, a.pop("targets")))
        _assert_batches_equal(self, a, b)

    def test_prefetch_matches_and_reports_errors(self):
        corpus = self.load()
        a = train_batches(corpus, batch_size=4, seed=0, prefetch=3)
        b = train_batches(corpus, batch_size=4, seed=0, prefetch=0)
        for _ in range(5):
            _assert_batches_equal(self, next(a), next(b))
        a.close()
        with mock.patch.object(
            objectives,
            "row_targets",
            return_value=mock.Mock(side_effect=RuntimeError("disk on fire")),
        ):
            with self.assertRaisesRegex(RuntimeError, "disk on fire"):
                next(train_batches(corpus, batch_size=4, seed=0, prefetch=2))

    @parameterized.named_parameters(
        ("uneven_hosts", dict(batch_size=5, process_index=0, process_count=2), "multiple"),
        ("bad_host", dict(batch_size=4, process_index=2, process_count=2), "process_index 2"),
        ("negative_seed", dict(batch_size=4, seed=-1), "seed -1"),
    )
    def test_bad_iterator_arguments(self, kwargs, message):
        corpus = self.load()
        kwargs = dict(seed=0) | kwargs
        with self.assertRaisesRegex(ValueError, message):
            train_batches(corpus, **kwargs)


class PairBatchTest(CorpusTestCase):
    """The "mlm_same_doc" objective's rows: [CLS] A [SEP] B [SEP] (data/doc_pairs.py)."""

    def load_pairs(self, **kwargs):
        return self.load(**{"objective": "mlm_same_doc", "min_doc_chars": 200} | kwargs)

    def test_pair_batches(self):
        corpus, tok = self.load_pairs(), self.load_pairs().tokenizer
        batches = train_batches(corpus, batch_size=16, seed=0, prefetch=0)
        first = [next(batches) for _ in range(6)]
        batch = first[0]
        self.assertEqual(
            set(batch),
            {
                "input_ids",
                "attention_mask",
                "token_type_ids",
                "targets",
                "weights",
                "index",
                "pair_label",
            },
        )
        ids = _original(batch)  # A: 6 tokens, B: 7 at seq_len 16
        np.testing.assert_array_equal(
            ids[:, [0, 7, 15]], [[tok.cls_id, tok.sep_id, tok.sep_id]] * 16
        )
        np.testing.assert_array_equal(batch["token_type_ids"], [[0] * 8 + [1] * 8] * 16)
        self.assertFalse((batch["weights"][:, [0, 7, 15]] > 0).any())  # specials: no targets
        self.assertTrue((batch["weights"].sum(-1) >= 1).all())
        labels = np.concatenate([b["pair_label"] for b in first])
        self.assertBetween(labels.mean(), 0.3, 0.7)
        self.assertEqual(batch["pair_label"].dtype, np.int32)
        resumed = next(train_batches(corpus, batch_size=16, seed=0, start_step=5, prefetch=0))
        _assert_batches_equal(self, first[5], resumed)
        other = next(train_batches(corpus, batch_size=16, seed=1, prefetch=0))
        self.assertFalse(np.array_equal(other["input_ids"], batch["input_ids"]))

    def test_held_out_pairs_are_fixed_and_shared_by_hosts(self):
        corpus = self.load_pairs()
        one = held_out_pairs(corpus, num_batches=2, batch_size=8)
        self.assertLen(one, 2)
        again = held_out_pairs(self.load_pairs(eval_pairs=64), num_batches=2, batch_size=8)
        hosts = [
            held_out_pairs(corpus, num_batches=2, batch_size=8, process_index=i, process_count=2)
            for i in range(2)
        ]
        for i, batch in enumerate(one):
            self.assertEqual(
                set(batch),
                {
                    "input_ids",
                    "attention_mask",
                    "token_type_ids",
                    "targets",
                    "weights",
                    "pair_label",
                },
            )
            _assert_batches_equal(self, batch, again[i])
            for key in batch:
                np.testing.assert_array_equal(
                    np.concatenate([h[i][key] for h in hosts]), batch[key], err_msg=key
                )
        # Windows of the validation documents: each A is a run of the held-out stream.
        valid = np.asarray(corpus.valid_tokens).astype(np.int64)
        for row in _original(one[0])[:, 1:7].astype(np.int64):
            hits = np.all(np.lib.stride_tricks.sliding_window_view(valid, 6) == row, axis=1)
            self.assertTrue(hits.any())

    def test_too_few_long_documents(self):
        with self.assertRaisesRegex(
            ValueError, "'mlm_same_doc', train split: .* documents have the 188 tokens"
        ):
            train_batches(self.load_pairs(seq_len=128, min_doc_chars=0), batch_size=8, seed=0)


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
    )
    def test_bad_config(self, kwargs, message):
        with self.assertRaisesRegex(ValueError, message):
            DataConfig(**kwargs)


def _original(batch):
    """The uncorrupted token ids of a batch."""
    return np.where(batch["weights"] > 0, batch["targets"], batch["input_ids"])


def _assert_batches_equal(test, a, b):
    test.assertEqual(set(a), set(b))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


if __name__ == "__main__":
    absltest.main()
