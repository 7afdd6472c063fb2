"""Held-out sets that score the same target tokens at every context length.

    held_out = length_eval_set(corpus, (128, 512, 2048), batch_size=16, windows="documents")
    held_out.batches[512]      # the batches of rows 512 tokens long
    held_out.num_targets       # targets scored, the same tokens at every length

A length table compares a model at 128 and at 2048 tokens of context; its columns must
predict the same tokens, or a column measures other text rather than more context. So the
held-out text is cut once into pieces, each a multiple of S = max(lengths) - 2 tokens long,
and at every length C each piece is tiled by windows of C - 2 tokens wrapped as training rows
are, [CLS] ... [SEP] (the last window of a piece may be shorter, then padded). Every token of
a piece falls in exactly one window at every length. MLM masks are drawn once per piece from
(seed, piece index), so every length sees the same corrupted inputs and the same targets;
what changes with C is only how much context a target has. At the longest length every
window is full. The seed is the data's `eval_seed`, not the run's, so that runs with
different seeds score the same targets too. For "clm" every token of a piece is a target,
predicted from the position before it (the first token of a window from [CLS]).
With data.documents "isolated" the rows also carry segment_ids (objectives.document_segments),
so that a model trained on isolated documents reads the held-out text as it was trained to:
the same rows and the same targets, each document on its own; data.eval_documents scores it
in the other mode instead. The text is the split data.eval_split names (Corpus.eval_tokens).

Pieces (`windows`):
  "documents"  each held-out document is a piece, cut to a multiple of S; documents shorter
               than S are left out. Windows never join two documents: what a model reads at
               2048 is 2048 tokens of one text. It needs long held-out documents
               (DataConfig.doc_separator "article", or min_doc_chars for books).
  "stream"     the held-out stream is one piece, documents packed as training rows pack them.

Batches, dicts of numpy arrays: input_ids, attention_mask, token_type_ids int32 [B, C];
head_positions int32 [B, P], targets int32 [B, P], weights float32 [B, P], where the model's
head runs, what it should predict there and 1 for a real target (P: the most targets of any
row at that length; padding has weight 0 at position 0). The target a head position
predicts sits at head_positions + `target_offset` in its row (1 for "clm", else 0).
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence

import numpy as np

from roformer_jax.data.corpus import Corpus
from roformer_jax.data.data_config import EVAL_WINDOWS
from roformer_jax.data.hosts import host_share
from roformer_jax.data.objectives import document_segments, mlm_targets

_EVAL_MASK = 3  # seed domain of the held-out masks (data/batches.py uses 0, 1 and 4)


class TooLittleText(ValueError):
    """The held-out text has no piece as long as the longest window."""


@dataclasses.dataclass(frozen=True)
class LengthEvalSet:
    """This host's batches at each length, and what they score (the same at every length)."""

    batches: dict[int, list[dict[str, np.ndarray]]]  # length -> batches, lengths ascending
    num_targets: int  # targets scored at every length (all hosts together)
    num_tokens: int  # held-out tokens cut into windows
    num_pieces: int  # documents used ("documents") or 1 ("stream")
    target_offset: int  # a target's row position minus its head position


def length_eval_set(
    corpus: Corpus,
    lengths: Sequence[int],
    *,
    batch_size: int | Mapping[int, int],
    windows: str = "stream",
    seed: int | None = None,
    max_tokens: int | None = None,
    process_index: int | None = None,
    process_count: int | None = None,
) -> LengthEvalSet:
    """The held-out set of `corpus` cut for every length in `lengths` (see module doc).

    Args:
      batch_size: global rows per batch, one for every length or {length: rows}; each a
        multiple of the process count. Rows are split over hosts as data/hosts.py says.
      windows: "documents" or "stream" (module doc).
      seed: the masks' seed; None = the corpus config's eval_seed.
      max_tokens: use pieces in held-out order until this many tokens (the last piece cut
        to the first multiple of S that reaches it); None = all.

    Raises ValueError for a length < 3 or an unknown `windows`, and its subclass TooLittleText
    when no piece of S tokens exists (too little held-out text, or no document that long).
    """
    lengths = sorted(set(lengths))
    if not lengths or lengths[0] < 3:
        raise ValueError(f"lengths {lengths} must be non-empty and each >= 3 ([CLS] x [SEP])")
    if windows not in EVAL_WINDOWS:
        raise ValueError(f"windows {windows!r} is not one of {EVAL_WINDOWS}")
    if max_tokens is not None and max_tokens < 1:
        raise ValueError(f"max_tokens {max_tokens} must be >= 1 (or None for all)")
    index, count = host_share(process_index, process_count)
    sizes = {n: batch_size[n] if isinstance(batch_size, Mapping) else batch_size for n in lengths}
    if any(b <= 0 or b % count for b in sizes.values()):
        raise ValueError(f"batch sizes {sizes} must be positive multiples of {count} processes")
    config, tok = corpus.config, corpus.tokenizer
    seed = config.eval_seed if seed is None else seed
    span = lengths[-1] - 2
    pieces = _pieces(np.asarray(corpus.eval_tokens), tok.sep_id, span, windows, max_tokens)
    if not pieces:
        raise TooLittleText(_too_little_text(span, windows))
    causal = config.objective == "clm"
    scored = [_scored(piece, i, corpus, seed=seed, causal=causal) for i, piece in enumerate(pieces)]
    isolated = config.evaluated_documents == "isolated"
    batches = {}
    for n in lengths:
        rows = [
            _row(tok, *(x[s : s + n - 2] for x in piece), length=n, causal=causal)
            for piece in scored
            for s in range(0, piece[0].size, n - 2)
        ]
        batches[n] = _batched(
            rows, sizes[n], index, count, pad_id=tok.pad_id, sep_id=tok.sep_id if isolated else None
        )
    num_targets = int(sum(np.count_nonzero(chosen) for _, _, chosen in scored))
    return LengthEvalSet(
        batches, num_targets, sum(p.size for p in pieces), len(pieces), int(causal)
    )


def _too_little_text(span: int, windows: str) -> str:
    return (
        f"the held-out text has no {'document' if windows == 'documents' else 'stretch'} "
        f"of {span} tokens (the longest length {span + 2} minus [CLS] and [SEP]); "
        + (
            "use a corpus of long documents (data.doc_separator='article', or "
            "data.min_doc_chars for books), "
            if windows == "documents"
            else ""
        )
        + "more held-out text (data.valid_fraction) or shorter lengths"
    )


def _scored(piece, i: int, corpus: Corpus, *, seed: int, causal: bool):
    """(model inputs, targets, is a target) of piece number `i`: for "clm" every token as
    it is, else BERT's masks drawn from (seed, i) alone."""
    if causal:
        return piece, piece, np.ones(piece.size, bool)
    cfg, rng = corpus.config, np.random.default_rng([_EVAL_MASK, seed, i])
    masked = mlm_targets(
        piece[None],
        rng,
        tokenizer=corpus.tokenizer,
        mask_prob=cfg.mask_prob,
        whole_word=cfg.whole_word,
    )
    return masked["input_ids"][0], masked["targets"][0], masked["weights"][0] > 0


def _pieces(stream, sep_id, span, windows, max_tokens) -> list[np.ndarray]:
    """The held-out token pieces, each cut to a multiple of `span`, within max_tokens."""
    if windows == "stream":
        candidates = [stream]
    else:
        ends = np.flatnonzero(stream == sep_id)  # every document ends with one [SEP]
        starts = np.concatenate([[0], ends[:-1] + 1])
        candidates = [stream[a:b] for a, b in zip(starts, ends)]
    pieces, total = [], 0
    for piece in candidates:
        usable = piece.size // span * span
        if max_tokens is not None:
            usable = min(usable, -(-(max_tokens - total) // span) * span)
        if usable > 0:
            pieces.append(piece[:usable].astype(np.int32))
            total += usable
        if max_tokens is not None and total >= max_tokens:
            break
    return pieces


def _row(tok, inputs, targets, chosen, *, length, causal):
    """One [CLS] window [SEP] row padded to `length`: (ids [L], head positions, targets)."""
    ids = np.full(length, tok.pad_id, np.int32)
    ids[0], ids[1 : inputs.size + 1], ids[inputs.size + 1] = tok.cls_id, inputs, tok.sep_id
    where = np.flatnonzero(chosen)  # window positions of the targets; row positions are + 1
    return ids, where if causal else where + 1, targets[where].astype(np.int32)


def _batched(rows, batch_size, index, count, *, pad_id, sep_id) -> list[dict[str, np.ndarray]]:
    """Rows -> this host's share of batches of `batch_size`, the last padded with empty rows;
    with their documents' segment_ids unless sep_id is None."""
    length = rows[0][0].size
    most = max(1, max(r[1].size for r in rows))
    empty = (np.full(length, pad_id, np.int32), np.zeros(0, np.int32), np.zeros(0, np.int32))
    rows = rows + [empty] * (-len(rows) % batch_size)
    ids = np.stack([r[0] for r in rows])
    head = np.zeros((len(rows), most), np.int32)
    targets = np.zeros((len(rows), most), np.int32)
    weights = np.zeros((len(rows), most), np.float32)
    for i, (_, positions, row_targets) in enumerate(rows):
        head[i, : positions.size] = positions
        targets[i, : positions.size] = row_targets
        weights[i, : positions.size] = 1.0
    batch = {
        "input_ids": ids,
        "attention_mask": (ids != pad_id).astype(np.int32),
        "token_type_ids": np.zeros_like(ids),
        "head_positions": head,
        "targets": targets,
        "weights": weights,
    }
    if sep_id is not None:
        batch["segment_ids"] = document_segments(ids, sep_id=sep_id)
    local = batch_size // count
    return [
        {k: v[i + index * local : i + (index + 1) * local] for k, v in batch.items()}
        for i in range(0, len(rows), batch_size)
    ]
