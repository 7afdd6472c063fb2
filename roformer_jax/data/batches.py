"""The train/valid split, cached token ids, packing and the MLM or causal-LM batch iterator.

    corpus = load_corpus(DataConfig(source="builtin"), cache_dir="workdir/data")
    batches = corpus.train_batches(batch_size=32, seed=0, start_step=step)
    held_out = length_eval_set(corpus, (128, 512), batch_size=32)  # data/length_eval.py

Sources (`DataConfig.source`, read by roformer_jax/corpora.py): "builtin" (the Python standard
library's docstrings and help topics: real prose present wherever Python is, no download), a
file, directory or glob of UTF-8 text, or "hf:<name>[:<config>]" (HuggingFace `datasets`).

Pipeline, run once per cache key (source, files' contents, tokenizer settings):
documents → train/valid split by a hash of each document (so duplicates land on the same side)
→ tokenizer trained on the train split → token ids with one [SEP] after every document, saved
as .npy under `cache_dir` and memory-mapped on later runs. Training sequences are windows of
seq_len - 2 tokens of that stream wrapped as [CLS] ... [SEP]: full, no padding, documents
packed across boundaries; each epoch shuffles the windows and shifts them by a random offset.
`DataConfig.objective` (a key of OBJECTIVES) turns those rows into a batch: BERT's masks
("mlm") or next-token targets ("clm"); the steps read only targets and weights, so they do not
depend on it. "mlm_same_doc" draws its rows as pairs of windows instead, of one document or
of two (data/doc_pairs.py), masks them as "mlm" does and adds each row's pair_label.

Shapes: B batch (this host's share), L sequence length.
"""

from __future__ import annotations

import dataclasses
import hashlib
import itertools
import json
import os
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterator

import jax
import numpy as np

from roformer_jax.data import corpora, doc_pairs, masking
from roformer_jax.data.prefetch import prefetched
from roformer_jax.data.tokenizer import load_tokenizer, named_tokenizer, train_wordpiece

_CACHE_FORMAT = 1  # bump when the cached bytes would change for the same inputs
# seed domains: window order, train masks (and pairs), held-out pairs (data/length_eval.py: 3)
_ORDER, _MASK, _PAIRS = 0, 1, 4
EVAL_WINDOWS = ("stream", "documents")  # how data/length_eval.py cuts the held-out text


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What to read and how to turn it into training batches."""

    source: str = "builtin"  # "builtin", a file/directory/glob, "hf:<name>[:<cfg>]" (module doc)
    seq_len: int = 128  # training sequence length, [CLS] and [SEP] included
    tokenizer: str = "wordpiece"  # "wordpiece" (trained on the train split), "bytes", a vocab.txt
    vocab_size: int = 8192  # WordPiece vocabulary to train (a small corpus may fill fewer)
    valid_fraction: float = 0.05  # share of documents held out for validation
    valid_lengths: tuple[int, ...] = (256, 512)  # also evaluated at these lengths (extrapolation)
    mask_prob: float = (
        0.15  # BERT: 15% of real tokens are targets; 80% [MASK], 10% random, 10% kept
    )
    whole_word: bool = False  # choose whole words rather than WordPiece pieces
    # The held-out masks' seed: fixed, not the run's, so runs of any seed score one target set.
    eval_seed: int = 0
    # How the held-out text is cut for evaluation (data/length_eval.py): "stream" (documents
    # packed, as in training) or "documents" (windows never cross one; needs long documents).
    eval_windows: str = "stream"
    # What the batches ask for, a key of OBJECTIVES: "mlm" (BERT's masked tokens), "clm"
    # (every next token, nothing masked; mask_prob and whole_word are then unused) or
    # "mlm_same_doc" (MLM on rows [CLS] A [SEP] B [SEP], plus whether A and B are windows of
    # one document: data/doc_pairs.py). It lives here because it decides how rows are drawn
    # and get their targets; the model's `causal` must agree.
    objective: str = "mlm"
    # Held-out pairs scored at each evaluation by an objective of pairs (rounded up to whole
    # evaluation batches), drawn from the validation documents with eval_seed.
    eval_pairs: int = 1024
    # What a document is (corpora.DOC_SEPARATORS; the split holds out whole documents): for
    # files "line" (one per line) | "blank" (blank-line separated) | "article" (one per WikiText
    # article, " = Title = " to the next title); "builtin" gives one per docstring, or one per
    # stdlib file with "article".
    doc_separator: str = "line"
    max_chars: int | None = None  # read at most this many characters; None = all
    # Join consecutive documents (with "\n") until each has at least this many characters, the
    # last keeping what is left; 0 = as read. A book without headings ("blank") then becomes
    # contiguous spans, so the held-out split holds long documents for length evaluation.
    min_doc_chars: int = 0

    def __post_init__(self):
        if not self.source:
            raise ValueError("source is empty; use 'builtin', a path, or 'hf:<name>'")
        for length in (self.seq_len, *self.valid_lengths):
            if length < 3:
                raise ValueError(f"sequence length {length} < 3 leaves no room for [CLS] x [SEP]")
        if not self.tokenizer:
            raise ValueError("tokenizer is empty; use 'wordpiece', 'bytes' or a vocab.txt path")
        if self.vocab_size <= 5:
            raise ValueError(f"vocab_size {self.vocab_size} leaves no room beside 5 specials")
        if not 0.0 <= self.valid_fraction < 1.0:
            raise ValueError(f"valid_fraction {self.valid_fraction} is outside [0, 1)")
        if not 0.0 < self.mask_prob <= 1.0:
            raise ValueError(f"mask_prob {self.mask_prob} is outside (0, 1]")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r} is not one of {tuple(OBJECTIVES)}")
        if self.eval_pairs < 1:
            raise ValueError(f"eval_pairs {self.eval_pairs} must be >= 1")
        if self.eval_windows not in EVAL_WINDOWS:
            raise ValueError(f"eval_windows {self.eval_windows!r} is not one of {EVAL_WINDOWS}")
        if self.doc_separator not in corpora.DOC_SEPARATORS:
            raise ValueError(
                f"doc_separator {self.doc_separator!r} is not one of {corpora.DOC_SEPARATORS}"
            )
        if self.max_chars is not None and self.max_chars <= 0:
            raise ValueError(f"max_chars {self.max_chars} must be positive (or None for all)")
        if self.min_doc_chars < 0:
            raise ValueError(
                f"min_doc_chars {self.min_doc_chars} must be >= 0 (0: documents as read)"
            )

    @property
    def causal(self) -> bool:
        """Whether the objective needs a causal model: "clm" predicts token i + 1 from i."""
        return OBJECTIVES[self.objective].causal

    @property
    def pairs(self) -> bool:
        """Whether rows are same-document pairs with a pair_label (data/doc_pairs.py), which
        the model predicts with its pair head."""
        return OBJECTIVES[self.objective].pairs

    @property
    def target_rate(self) -> float | None:
        """The rate `masking.max_targets` bounds each row's targets by; None where nothing
        bounds them below the row length (whole words can run over it; "clm" targets nearly
        every position). The train step gathers the head at that many positions per row."""
        masked = OBJECTIVES[self.objective].targets is Corpus.mlm
        return self.mask_prob if masked and not self.whole_word else None


def _is_valid_doc(doc: str, fraction: float) -> bool:
    digest = hashlib.blake2b(doc.encode("utf-8"), digest_size=8).digest()
    return int.from_bytes(digest, "little") < fraction * 2**64


# ---------------------------------------------------------------- building and caching


def load_corpus(cfg: DataConfig, cache_dir: str) -> Corpus:
    """Reads, splits and tokenizes `cfg.source` once; later calls memory-map the cache.

    The cache lives in `cache_dir/corpus-<key>/` (tokenizer/, train.npy, valid.npy, meta.json);
    the key covers the source (and its files' contents, not their paths or times), the Python
    version for "builtin", max_chars, doc_separator, min_doc_chars, valid_fraction and the
    tokenizer settings, so editing any of them rebuilds it. seq_len and masking settings are
    applied on the fly.
    """
    files = corpora.resolve_files(cfg.source)
    tok = named_tokenizer(cfg.tokenizer)  # a bad vocab.txt fails before any reading
    key, identity = _cache_key(cfg, files)
    path = os.path.join(cache_dir, f"corpus-{key}")
    if not os.path.isfile(os.path.join(path, "meta.json")):
        _build_cache(cfg, tok, path, identity)
    with open(os.path.join(path, "meta.json"), encoding="utf-8") as f:
        stats = json.load(f)["stats"]
    corpus = Corpus(
        cfg,
        load_tokenizer(os.path.join(path, "tokenizer")),
        np.load(os.path.join(path, "train.npy"), mmap_mode="r"),
        np.load(os.path.join(path, "valid.npy"), mmap_mode="r"),
        stats,
        path,
    )
    corpus.num_train_sequences(cfg.seq_len)  # fails now, with advice, if there is too little
    return corpus


def _cache_key(cfg: DataConfig, files: list[str]) -> tuple[str, dict]:
    identity = {
        "format": _CACHE_FORMAT,
        "source": None if files else cfg.source,  # a file source is its files' contents
        "files": [_content_digest(p) for p in files],
        "max_chars": cfg.max_chars,
        "valid_fraction": cfg.valid_fraction,
        "tokenizer": cfg.tokenizer,
    }
    if cfg.source == "builtin":
        identity["python"] = [sys.version, sysconfig.get_paths()["stdlib"]]
    # Keys that only appear away from their old behaviour ("builtin" ignored doc_separator
    # before "article"; min_doc_chars 0 reads as before), so existing configs keep their key
    # and their cache.
    if cfg.source != "builtin" or cfg.doc_separator == "article":
        identity["doc_separator"] = cfg.doc_separator
    if cfg.min_doc_chars:
        identity["min_doc_chars"] = cfg.min_doc_chars
    if cfg.tokenizer == "wordpiece":
        identity["vocab_size"] = cfg.vocab_size
    elif cfg.tokenizer != "bytes":
        identity["vocab"] = (
            _content_digest(cfg.tokenizer) if os.path.exists(cfg.tokenizer) else None
        )
    blob = json.dumps(identity, sort_keys=True).encode("utf-8")
    return hashlib.sha256(blob).hexdigest()[:16], identity


def _content_digest(path: str) -> str:
    """SHA-256 of a file's bytes: its identity in the cache key, wherever it lies and whatever
    its modification time (a copied, moved or re-synced corpus keeps its cache). Reading it
    costs about a second per GB on each load."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()


def _build_cache(cfg: DataConfig, tok, path: str, identity: dict) -> None:
    """tok: the named tokenizer, or None to train a WordPiece on the train split."""
    docs = corpora.read_documents(
        cfg.source,
        doc_separator=cfg.doc_separator,
        max_chars=cfg.max_chars,
        min_doc_chars=cfg.min_doc_chars,
    )
    is_valid = [_is_valid_doc(d, cfg.valid_fraction) for d in docs]
    if all(is_valid):  # tiny corpus: keep something to train on
        is_valid = [False] * len(docs)
    train_docs = [d for d, v in zip(docs, is_valid) if not v]
    valid_docs = [d for d, v in zip(docs, is_valid) if v]
    if not valid_docs and cfg.valid_fraction > 0:
        warnings.warn(
            f"corpus {cfg.source!r} has {len(docs)} document(s) and none is held out; "
            "there will be nothing to evaluate on (add documents or raise valid_fraction)",
            stacklevel=3,
        )
    if tok is None:
        tok = train_wordpiece(train_docs, vocab_size=cfg.vocab_size)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer"))
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.int32
    stats = {"documents": len(docs), "chars": sum(map(len, docs)), "vocab_size": tok.vocab_size}
    for split, split_docs in (("train", train_docs), ("valid", valid_docs)):
        ids = _encode_stream(tok, split_docs, dtype)
        _save_atomic(os.path.join(path, f"{split}.npy"), ids)
        stats[f"{split}_documents"] = len(split_docs)
        stats[f"{split}_tokens"] = int(ids.size)
    meta = json.dumps({"identity": identity, "stats": stats}, indent=1) + "\n"
    tmp = os.path.join(path, f"meta.json.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(meta)
    os.replace(tmp, os.path.join(path, "meta.json"))  # written last: marks the cache complete


def _encode_stream(tok, docs: list[str], dtype, chunk: int = 4096) -> np.ndarray:
    """Token ids of all documents, each followed by [SEP], as one flat array."""
    parts = []
    for i in range(0, len(docs), chunk):
        encoded = tok.encode_batch(docs[i : i + chunk])
        flat = list(itertools.chain.from_iterable(ids + [tok.sep_id] for ids in encoded))
        parts.append(np.array(flat, dtype=dtype))
    return np.concatenate(parts) if parts else np.zeros(0, dtype)


def _save_atomic(path: str, array: np.ndarray) -> None:
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "wb") as f:
        np.save(f, array)
    os.replace(tmp, path)


# ---------------------------------------------------------------- batches


class Corpus:
    """Tokenized train/valid streams and the batches made from them.

    Attributes:
      config: the DataConfig it was loaded with.
      tokenizer: give `tokenizer.vocab_size` to the model.
      train_tokens, valid_tokens: memory-mapped 1-D token streams ([SEP] ends each document).
      stats: documents, chars, vocab_size, {train,valid}_{documents,tokens}.
      path: the cache folder.
    """

    def __init__(self, config, tokenizer, train_tokens, valid_tokens, stats, path):
        self.config = config
        self.tokenizer = tokenizer
        self.train_tokens = train_tokens
        self.valid_tokens = valid_tokens
        self.stats = stats
        self.path = path

    def num_train_sequences(self, seq_len: int | None = None) -> int:
        """How many windows one epoch has at `seq_len` (default: the config's)."""
        seq_len = seq_len or self.config.seq_len
        span, total = seq_len - 2, self.train_tokens.size
        if total < span:
            raise ValueError(
                f"the training split has {total} tokens, fewer than one sequence of seq_len "
                f"{seq_len} needs ({span} + [CLS] + [SEP]); use more text"
                f"{' (raise max_chars)' if self.config.max_chars else ''}, a smaller seq_len "
                "or a smaller valid_fraction"
            )
        return (total - min(span - 1, total - span)) // span

    def unigram_cross_entropy(self) -> float:
        """Nats per held-out token under the training split's token frequencies.

        The loss of an MLM that ignores context, a floor to read a short run's loss against.
        Special tokens are left out on both sides; counts are add-one smoothed so that a token
        unseen in training has a finite cost.
        """
        specials = np.asarray(sorted(self.tokenizer.special_ids))
        vocab = self.tokenizer.vocab_size
        train = np.asarray(self.train_tokens)
        counts = np.bincount(train[~np.isin(train, specials)], minlength=vocab) + 1.0
        counts[specials[specials < vocab]] = 0.0
        valid = np.asarray(self.valid_tokens)
        valid = valid[~np.isin(valid, specials)]
        return float(np.log(counts.sum()) - np.mean(np.log(counts[valid])))

    def train_batches(
        self,
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

        Rows are `seq_len` tokens long (default: the config's).

        `batch_size` is global; host p of P gets rows [p b, (p + 1) b) with b = batch_size / P
        (the trainer splits them over its local devices). Epoch e of the global example
        stream visits every window once in an order drawn from (seed, e), and row r of a
        step is masked by a generator seeded with (seed, step, r), so every row depends only
        on (seed, step, r), whatever the number of hosts: a resumed run sees exactly the
        batches it would have seen, and P hosts together see those of one. An objective of
        pairs (DataConfig.pairs) draws row r's pair from that generator too, before its masks,
        and has no epochs. `prefetch` batches are prepared ahead in a background thread (0: in
        the caller's thread).

        Yields dicts of [b, seq_len] numpy arrays: input_ids, attention_mask, token_type_ids,
        targets (int32) and weights (float32, 1 at the objective's targets); index, int32
        [b], each row's index r in the global batch (the trainer's per-row dropout stream);
        and for pairs pair_label, int32 [b] (1: A and B are of one document).
        """
        index, count = host_share(process_index, process_count)
        if batch_size <= 0 or batch_size % count:
            raise ValueError(
                f"batch_size {batch_size} must be a positive multiple of the {count} processes"
            )
        if seed < 0 or start_step < 0 or prefetch < 0:
            raise ValueError(
                f"seed {seed}, start_step {start_step} and prefetch {prefetch} must be >= 0"
            )
        seq_len, local = seq_len or self.config.seq_len, batch_size // count
        if seq_len < 3:
            raise ValueError(f"seq_len {seq_len} leaves no room for [CLS] text [SEP]")
        span, stream = seq_len - 2, self.train_tokens
        num = self.num_train_sequences(seq_len)
        spans = self._pair_spans("train", seq_len) if self.config.pairs else None
        max_offset = min(span - 1, stream.size - span)
        epochs = {}

        def epoch(e):  # (offset, window order); memoized since a step rarely spans two epochs
            if e not in epochs:
                rng = np.random.default_rng([_ORDER, seed, e])
                epochs.clear()
                epochs[e] = (rng.integers(max_offset + 1), rng.permutation(num))
            return epochs[e]

        def make(step):
            rows = step * batch_size + index * local + np.arange(local)  # global example ids
            # Masks (and pairs) per global row: the same on any number of hosts.
            rngs = [np.random.default_rng([_MASK, seed, step, row]) for row in rows.tolist()]
            if spans is not None:
                batch = self._pair_batch(stream, spans, seq_len, rngs)
                batch["index"] = (rows - step * batch_size).astype(np.int32)
                return batch
            starts = np.empty(local, np.int64)
            for e in np.unique(rows // num):
                offset, order = epoch(int(e))
                here = rows // num == e
                starts[here] = offset + order[rows[here] % num] * span
            windows = stream[starts[:, None] + np.arange(span)]  # [B, L - 2]
            batch = self._targets(self._wrap(windows), rngs)
            batch["index"] = (rows - step * batch_size).astype(np.int32)
            return batch

        return prefetched(make, start_step, prefetch)

    def _wrap(self, windows: np.ndarray) -> np.ndarray:
        """[B, L - 2] stream windows -> [B, L] int32 rows [CLS] ... [SEP]."""
        ids = np.empty((windows.shape[0], windows.shape[1] + 2), np.int32)
        ids[:, 0] = self.tokenizer.cls_id
        ids[:, 1:-1] = windows
        ids[:, -1] = self.tokenizer.sep_id
        return ids

    def _targets(self, ids: np.ndarray, rng) -> dict[str, np.ndarray]:
        """The batch of [B, L] rows [CLS] ... [SEP] under the config's objective.

        rng: one generator, or one per row (see masking.mask_tokens); "clm" draws nothing.
        """
        batch = OBJECTIVES[self.config.objective].targets(self, ids, rng)
        batch["attention_mask"] = np.ones(ids.shape, np.int32)
        batch["token_type_ids"] = np.zeros(ids.shape, np.int32)
        return batch

    def _pair_spans(self, split: str, seq_len: int) -> np.ndarray:
        """The documents of the `split` stream that pairs of `seq_len` are drawn from."""
        tokens = self.train_tokens if split == "train" else self.valid_tokens
        spans = doc_pairs.document_spans(tokens, self.tokenizer.sep_id)
        try:
            return doc_pairs.eligible_spans(spans, seq_len)
        except doc_pairs.TooFewDocuments as e:
            raise doc_pairs.TooFewDocuments(
                f"data.objective={self.config.objective!r}, {split} split: {e}"
            ) from None

    def _pair_batch(self, tokens, spans, seq_len: int, rngs) -> dict[str, np.ndarray]:
        """Rows of pairs (doc_pairs.pair_rows), one per generator, then their MLM targets."""
        tok = self.tokenizer
        pairs = doc_pairs.pair_rows(tokens, spans, seq_len, rngs, cls_id=tok.cls_id,
                                    sep_id=tok.sep_id)  # fmt: skip
        batch = self._targets(pairs["ids"], rngs)
        batch["token_type_ids"] = pairs["token_type_ids"]
        batch["pair_label"] = pairs["pair_label"]
        return batch

    def held_out_pairs(
        self,
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
        if batch_size <= 0 or batch_size % count:
            raise ValueError(
                f"batch_size {batch_size} must be a positive multiple of the {count} processes"
            )
        seq_len, local = seq_len or self.config.seq_len, batch_size // count
        spans = self._pair_spans("valid", seq_len)
        batches = []
        for i in range(num_batches):
            rows = i * batch_size + index * local + np.arange(local)
            rngs = [np.random.default_rng([_PAIRS, self.config.eval_seed, r]) for r in rows]
            batches.append(self._pair_batch(self.valid_tokens, spans, seq_len, rngs))
        return batches

    def mlm(self, ids: np.ndarray, rng) -> dict[str, np.ndarray]:
        """BERT's masks of [B, L] rows (see masking.mask_tokens): input_ids, targets, weights."""
        tok = self.tokenizer
        return masking.mask_tokens(
            ids,
            rng,
            vocab_size=tok.vocab_size,
            mask_id=tok.mask_id,
            special_ids=tok.special_ids,
            mask_prob=self.config.mask_prob,
            word_starts=tok.word_starts(ids) if self.config.whole_word else None,
        )

    def _clm(self, ids: np.ndarray, rng) -> dict[str, np.ndarray]:
        del rng  # nothing is random
        return masking.next_token_targets(ids, pad_id=self.tokenizer.pad_id)


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the batches of an objective hold."""

    # Corpus method (rows [B, L], rng) -> input_ids, targets, weights
    targets: Callable[[Corpus, np.ndarray, object], dict[str, np.ndarray]]
    causal: bool = False  # predicts token i + 1 from i: needs a causal model
    pairs: bool = False  # rows are pairs of windows with a pair_label (data/doc_pairs.py)


OBJECTIVES = {
    "mlm": Objective(Corpus.mlm),
    "clm": Objective(Corpus._clm, causal=True),
    "mlm_same_doc": Objective(Corpus.mlm, pairs=True),
}


def host_share(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    """(this host's index, the number of hosts): jax's unless given."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ValueError(f"process_index {index} is outside [0, process_count={count})")
    return index, count
