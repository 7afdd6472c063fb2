"""A corpus: its train/valid split as cached token ids, read and tokenized once.

    corpus = load_corpus(DataConfig(source="builtin"), cache_dir="workdir/data")
    corpus.tokenizer.vocab_size, corpus.train_tokens, corpus.valid_tokens

Pipeline, run once per cache key (source, files' contents, tokenizer settings):
documents (data/corpora.py) → train/valid split by a hash of each document (so duplicates
land on the same side) → tokenizer trained on the train split (data/tokenizer.py) → token ids
with one [SEP] after every document, saved as .npy under `cache_dir` and memory-mapped on
later runs. data/batches.py cuts these streams into training rows.

The hash h of a document, read as a fraction of 2^64, places it: held out ("valid") below
valid_fraction, in the selection split below valid_fraction + selection_fraction (issue 56:
settings are chosen there, apart from the held-out set a study reports), else in training.
The held-out band is the one every earlier run's was, and the tokenizer is trained on
training and selection documents together, the earlier runs' training split: so a selection
band takes its documents out of training and changes no held-out token id. split_by
"article" hashes whole WikiText articles and keeps each one's lines as its documents.
"""

from __future__ import annotations

import hashlib
import itertools
import json
import os
import warnings

import numpy as np

from roformer_jax.data import corpora
from roformer_jax.data.data_config import DataConfig
from roformer_jax.data.tokenizer import load_tokenizer, named_tokenizer, train_wordpiece

_CACHE_FORMAT = 1  # bump when the cached bytes would change for the same inputs


class Corpus:
    """Tokenized train/valid streams, read back from the cache.

    Attributes:
      config: the DataConfig it was loaded with.
      tokenizer: give `tokenizer.vocab_size` to the model.
      train_tokens, valid_tokens: memory-mapped 1-D token streams ([SEP] ends each document).
      selection_tokens: the selection split's stream (empty at selection_fraction 0).
      stats: documents, chars, vocab_size, {train,valid,selection}_{documents,tokens}.
      path: the cache folder.
    """

    def __init__(self, config, tokenizer, train_tokens, valid_tokens, stats, path, selection=None):
        self.config = config
        self.tokenizer = tokenizer
        self.train_tokens = train_tokens
        self.valid_tokens = valid_tokens
        self.selection_tokens = valid_tokens[:0] if selection is None else selection
        self.stats = stats
        self.path = path

    @property
    def eval_tokens(self) -> np.ndarray:
        """The stream evaluation scores: the held-out one, or the selection split's where
        config.eval_split says "selection"."""
        return self.selection_tokens if self.config.eval_split == "selection" else self.valid_tokens

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
        unseen in training has a finite cost. NaN when nothing is held out (the loop warns of
        that when a run starts).
        """
        specials = np.asarray(sorted(self.tokenizer.special_ids))
        vocab = self.tokenizer.vocab_size
        train = np.asarray(self.train_tokens)
        counts = np.bincount(train[~np.isin(train, specials)], minlength=vocab) + 1.0
        counts[specials[specials < vocab]] = 0.0
        valid = np.asarray(self.eval_tokens)
        valid = valid[~np.isin(valid, specials)]
        if not valid.size:
            return float("nan")
        return float(np.log(counts.sum()) - np.mean(np.log(counts[valid])))


def _split_of(text: str, cfg: DataConfig) -> str:
    """ "valid", "selection" or "train": where the hash band of `text` places it (module doc)."""
    digest = hashlib.blake2b(text.encode("utf-8"), digest_size=8).digest()
    h = int.from_bytes(digest, "little")
    if h < cfg.valid_fraction * 2**64:
        return "valid"
    return "selection" if h < (cfg.valid_fraction + cfg.selection_fraction) * 2**64 else "train"


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
    tok, train, valid, selection, stats = _read_cache(path)
    corpus = Corpus(cfg, tok, train, valid, stats, path, selection)
    corpus.num_train_sequences(cfg.seq_len)  # fails now, with advice, if there is too little
    return corpus


def _read_cache(path: str) -> tuple:
    """(tokenizer, train, valid, selection ids or None, stats) of the cache folder `path`; a
    ValueError naming
    the file and what to do where one is cut off or garbled (written over after it was built:
    meta.json, written last, marks a complete build)."""
    file = os.path.join(path, "meta.json")
    try:
        with open(file, encoding="utf-8") as f:
            stats = json.load(f)["stats"]
        file = os.path.join(path, "tokenizer")
        tokenizer = load_tokenizer(file)
        ids = []
        for split in ("train", "valid", "selection"):
            file = os.path.join(path, f"{split}.npy")
            present = split != "selection" or f"{split}_documents" in stats
            ids.append(np.load(file, mmap_mode="r") if present else None)
    except (ValueError, KeyError, OSError) as e:  # JSONDecodeError is a ValueError
        raise ValueError(
            f"the data cache file {file} is damaged ({type(e).__name__}: {e}); delete the "
            f"folder {path} to rebuild it"
        ) from None
    return tokenizer, *ids, stats


def _cache_key(cfg: DataConfig, files: list[str]) -> tuple[str, dict]:
    identity = {
        "format": _CACHE_FORMAT,
        **corpora.corpus_source(cfg.source).identity(cfg.source, cfg.doc_separator),
        "files": [_content_digest(p) for p in files],
        "max_chars": cfg.max_chars,
        "valid_fraction": cfg.valid_fraction,
        "tokenizer": cfg.tokenizer,
    }
    # min_doc_chars 0 reads as before it existed: its key only appears away from 0, so
    # existing configs keep their key and their cache; so do the later fields.
    if cfg.min_doc_chars:
        identity["min_doc_chars"] = cfg.min_doc_chars
    if cfg.selection_fraction:
        identity["selection_fraction"] = cfg.selection_fraction
    if cfg.split_by != "document":
        identity["split_by"] = cfg.split_by
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
    """tok: the named tokenizer, or None to train a WordPiece on the train split (module doc)."""
    splits = _split_documents(cfg)
    tokenizer_docs = splits.pop("tokenizer")
    if not cfg.selection_fraction:  # the cache of every run before the selection split
        del splits["selection"]
    docs = [d for split_docs in splits.values() for d in split_docs]
    if not splits["valid"] and cfg.valid_fraction > 0:
        warnings.warn(
            f"corpus {cfg.source!r} has {len(docs)} document(s) and none is held out; "
            "there will be nothing to evaluate on (add documents or raise valid_fraction)",
            stacklevel=3,
        )
    if tok is None:
        tok = train_wordpiece(tokenizer_docs, vocab_size=cfg.vocab_size)
    os.makedirs(path, exist_ok=True)
    tok.save(os.path.join(path, "tokenizer"))
    dtype = np.uint16 if tok.vocab_size <= 2**16 else np.int32
    stats = {"documents": len(docs), "chars": sum(map(len, docs)), "vocab_size": tok.vocab_size}
    for split, split_docs in splits.items():
        ids = _encode_stream(tok, split_docs, dtype)
        _save_atomic(os.path.join(path, f"{split}.npy"), ids)
        stats[f"{split}_documents"] = len(split_docs)
        stats[f"{split}_tokens"] = int(ids.size)
    meta = json.dumps({"identity": identity, "stats": stats}, indent=1) + "\n"
    tmp = os.path.join(path, f"meta.json.tmp{os.getpid()}")
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(meta)
    os.replace(tmp, os.path.join(path, "meta.json"))  # written last: marks the cache complete


def _split_documents(cfg: DataConfig) -> dict[str, list[str]]:
    """{"train", "valid", "selection": documents in corpus order, "tokenizer": those the
    tokenizer learns from (train and selection, in corpus order)}; a split_by "article"
    places each article whole and gives its lines as documents."""
    by_article = cfg.split_by == "article"
    units = corpora.read_documents(
        cfg.source,
        doc_separator="article" if by_article else cfg.doc_separator,
        max_chars=cfg.max_chars,
        min_doc_chars=cfg.min_doc_chars,
    )
    places = [_split_of(unit, cfg) for unit in units]
    if "train" not in places:  # tiny corpus: keep something to train on
        places = ["train"] * len(units)
    splits = {"train": [], "valid": [], "selection": [], "tokenizer": []}
    for unit, place in zip(units, places):
        docs = unit.split("\n") if by_article else [unit]
        splits[place] += docs
        if place != "valid":
            splits["tokenizer"] += docs
    return splits


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
