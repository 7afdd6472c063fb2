"""Training batches from a corpus: rows of its token streams, their targets, made ahead.

    batches = train_batches(corpus, batch_size=32, seed=0, start_step=step)
    pairs = held_out_pairs(corpus, num_batches=4, batch_size=32)   # "mlm_same_doc" only

The data walk forward: the corpus's token stream (data/corpus.py) → rows → their targets
(data/objectives.py, data/masking.py) → batches, made ahead in a thread (data/prefetch.py).
Training rows are windows of seq_len - 2 tokens of the train stream wrapped as
[CLS] ... [SEP]: full, no padding, documents packed across boundaries; each epoch shuffles
the windows and shifts them by a random offset. An objective of pairs ("mlm_same_doc") draws
its rows as pairs of windows instead, of one document or of two (data/doc_pairs.py), masks
them as "mlm" does and adds each row's pair_label.

Shapes: B batch (this host's share), L sequence length.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator

import numpy as np

from roformer_jax.data import doc_pairs, objectives
from roformer_jax.data.corpus import Corpus
from roformer_jax.data.hosts import global_rows, host_share, local_rows
from roformer_jax.data.prefetch import prefetched

# seed domains: window order, train masks (and pairs), held-out pairs (data/length_eval.py: 3)
_ORDER, _MASK, _PAIRS = 0, 1, 4


def train_batches(
    corpus: Corpus,
    *,
    batch_size: int,
    seed: int,
    start_step: int = 0,
    seq_len: int | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
    prefetch: int = 2,
) -> Iterator[dict[str, np.ndarray]]:
    """This host's rows of the batches for steps start_step, start_step + 1, ... (endless).

    Rows are `seq_len` tokens long (default: the corpus config's).

    `batch_size` is global; host p of P gets rows [p b, (p + 1) b) with b = batch_size / P
    (data/hosts.py). Epoch e of the global example stream visits every window once in an
    order drawn from (seed, e), and row r of a step is masked by a generator seeded with
    (seed, step, r), so every row depends only on (seed, step, r), whatever the number of
    hosts: a resumed run sees exactly the batches it would have seen, and P hosts together
    see those of one. An objective of pairs (DataConfig.pairs) draws row r's pair from that
    generator too, before its masks, and has no epochs. `prefetch` batches are prepared ahead
    in a background thread (0: in the caller's thread).

    Yields dicts of [b, seq_len] numpy arrays: input_ids, attention_mask, token_type_ids,
    targets (int32) and weights (float32, 1 at the objective's targets), and with
    data.documents "isolated" segment_ids (int32, one per document: objectives.row_targets);
    index, int32 [b], each row's index r in the global batch (the trainer's per-row dropout
    stream); and for pairs pair_label, int32 [b] (1: A and B are of one document).
    """
    index, count = host_share(process_index, process_count)
    local_rows(batch_size, count)  # fails now, not at the first batch
    if seed < 0 or start_step < 0 or prefetch < 0:
        raise ValueError(
            f"seed {seed}, start_step {start_step} and prefetch {prefetch} must be >= 0"
        )
    seq_len = seq_len or corpus.config.seq_len
    if seq_len < 3:
        raise ValueError(f"seq_len {seq_len} leaves no room for [CLS] text [SEP]")
    stream, span = corpus.train_tokens, np.arange(seq_len - 2)
    window_starts = _window_order(corpus, seq_len, seed)  # fails now if the text is too short
    spans = _pair_spans(corpus, "train", seq_len) if corpus.config.pairs else None
    targets = _targets_of(corpus)

    def make(step):
        rows = global_rows(step, batch_size, index, count)
        # Masks (and pairs) per global row: the same on any number of hosts.
        rngs = [np.random.default_rng([_MASK, seed, step, row]) for row in rows.tolist()]
        if spans is not None:
            batch = _pair_batch(corpus, stream, spans, seq_len, rngs, targets)
        else:
            windows = stream[window_starts(rows)[:, None] + span]  # [B, L - 2]
            batch = targets(_wrap(windows, corpus.tokenizer), rngs)
        batch["index"] = (rows - step * batch_size).astype(np.int32)
        return batch

    return prefetched(make, start_step, prefetch)


def held_out_pairs(
    corpus: Corpus,
    *,
    num_batches: int,
    batch_size: int,
    seq_len: int | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
) -> list[dict[str, np.ndarray]]:
    """This host's rows of `num_batches` global batches of `batch_size` pairs of the
    validation documents: the same rows and masks for every run and seed (row r drawn
    from data.eval_seed and r alone), for the held-out pair accuracy of an objective of
    pairs. Batches as `train_batches` yields them, without index."""
    index, count = host_share(process_index, process_count)
    local_rows(batch_size, count)  # fails before any documents are cut
    seq_len = seq_len or corpus.config.seq_len
    spans, targets = _pair_spans(corpus, "valid", seq_len), _targets_of(corpus)
    batches = []
    for i in range(num_batches):
        rows = global_rows(i, batch_size, index, count)
        rngs = [np.random.default_rng([_PAIRS, corpus.config.eval_seed, r]) for r in rows]
        batches.append(_pair_batch(corpus, corpus.eval_tokens, spans, seq_len, rngs, targets))
    return batches


def _targets_of(corpus: Corpus) -> Callable[[np.ndarray, object], dict[str, np.ndarray]]:
    """The corpus config's objective as (rows [B, L], rngs) -> batch (objectives.row_targets)."""
    cfg = corpus.config
    return objectives.row_targets(
        cfg.objective,
        corpus.tokenizer,
        mask_prob=cfg.mask_prob,
        whole_word=cfg.whole_word,
        isolated=cfg.documents == "isolated",
    )


def _window_order(corpus: Corpus, seq_len: int, seed: int) -> Callable[[np.ndarray], np.ndarray]:
    """global example ids [B] -> where their windows start in the train stream [B].

    Epoch e (example ids [e N, (e + 1) N), N windows per epoch) visits the windows in an
    order drawn from (seed, e), all shifted by an offset drawn with it.
    """
    span, size = seq_len - 2, corpus.train_tokens.size
    num = corpus.num_train_sequences(seq_len)
    max_offset = min(span - 1, size - span)
    epochs = {}

    def epoch(e):  # (offset, window order); memoized since a step rarely spans two epochs
        if e not in epochs:
            rng = np.random.default_rng([_ORDER, seed, e])
            epochs.clear()
            epochs[e] = (rng.integers(max_offset + 1), rng.permutation(num))
        return epochs[e]

    def starts_of(rows):
        starts = np.empty(rows.size, np.int64)
        for e in np.unique(rows // num):
            offset, order = epoch(int(e))
            here = rows // num == e
            starts[here] = offset + order[rows[here] % num] * span
        return starts

    return starts_of


def _wrap(windows: np.ndarray, tok) -> np.ndarray:
    """[B, L - 2] stream windows -> [B, L] int32 rows [CLS] ... [SEP]."""
    ids = np.empty((windows.shape[0], windows.shape[1] + 2), np.int32)
    ids[:, 0] = tok.cls_id
    ids[:, 1:-1] = windows
    ids[:, -1] = tok.sep_id
    return ids


def _pair_spans(corpus: Corpus, split: str, seq_len: int) -> np.ndarray:
    """The documents of the `split` stream that pairs of `seq_len` are drawn from."""
    tokens = corpus.train_tokens if split == "train" else corpus.eval_tokens
    spans = doc_pairs.document_spans(tokens, corpus.tokenizer.sep_id)
    try:
        return doc_pairs.eligible_spans(spans, seq_len)
    except doc_pairs.TooFewDocuments as e:
        raise doc_pairs.TooFewDocuments(
            f"data.objective={corpus.config.objective!r}, {split} split: {e}"
        ) from None


def _pair_batch(corpus, tokens, spans, seq_len: int, rngs, targets) -> dict[str, np.ndarray]:
    """Rows of pairs (doc_pairs.pair_rows), one per generator, then their MLM targets."""
    tok = corpus.tokenizer
    pairs = doc_pairs.pair_rows(tokens, spans, seq_len, rngs, cls_id=tok.cls_id, sep_id=tok.sep_id)
    batch = targets(pairs["ids"], rngs)
    batch["token_type_ids"] = pairs["token_type_ids"]
    batch["pair_label"] = pairs["pair_label"]
    return batch
