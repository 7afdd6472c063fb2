"""Tests for roformer_jax/data/batches.py: packing, the iterator, pair batches; the corpus
they read is corpus_test.py's."""

from unittest import mock

import numpy as np
from absl.testing import absltest, parameterized
from corpus_cases import CorpusTestCase

from roformer_jax.data import objectives
from roformer_jax.data.batches import held_out_pairs, train_batches
from roformer_jax.data.data_config import DOCUMENTS


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


def _original(batch):
    """The uncorrupted token ids of a batch."""
    return np.where(batch["weights"] > 0, batch["targets"], batch["input_ids"])


def _assert_batches_equal(test, a, b):
    test.assertEqual(set(a), set(b))
    for key in a:
        np.testing.assert_array_equal(a[key], b[key], err_msg=key)


if __name__ == "__main__":
    absltest.main()
