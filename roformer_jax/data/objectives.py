"""The training objectives: what each asks of the model, and how its rows get their targets.

    targets = row_targets("mlm", tokenizer, mask_prob=0.15, whole_word=False)
    batch = targets(ids, rngs)   # ids [B, L] rows [CLS] ... [SEP]; one generator per row

An objective is one function from rows to input_ids, targets and weights (masking.py does the
arithmetic) plus what it needs of the model, and one entry in OBJECTIVES; the train and eval
steps read only targets and weights, so they do not know which objective made them.

Isolated documents (`row_targets(..., isolated=True)`): rows also carry segment_ids, one
segment per document the row meets (`document_segments`), so that the model attends and
counts positions within each document only; a causal objective then predicts nothing across
a boundary.

Shapes: B batch, L sequence length.
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import numpy as np

from roformer_jax.data import masking


def mlm_targets(ids: np.ndarray, rng, *, tokenizer, mask_prob: float, whole_word: bool):
    """BERT's masks of [B, L] rows (see masking.mask_tokens): input_ids, targets, weights.

    rng: one generator, or one per row.
    """
    return masking.mask_tokens(
        ids,
        rng,
        vocab_size=tokenizer.vocab_size,
        mask_id=tokenizer.mask_id,
        special_ids=tokenizer.special_ids,
        mask_prob=mask_prob,
        word_starts=tokenizer.word_starts(ids) if whole_word else None,
    )


def clm_targets(ids: np.ndarray, rng, *, tokenizer, mask_prob: float, whole_word: bool):
    """Every next token of [B, L] rows (see masking.next_token_targets); nothing is random."""
    del rng, mask_prob, whole_word  # nothing is masked
    return masking.next_token_targets(ids, pad_id=tokenizer.pad_id)


def document_segments(ids: np.ndarray, *, sep_id: int) -> np.ndarray:
    """Segment ids int32 [B, L] of rows [CLS] text [SEP] cut from a token stream in which
    every document ends with [SEP] (data/corpus.py).

    Segment s (0, 1, ...) holds the s-th document the row meets: the piece the window cut of
    it, its closing [SEP] included; [CLS] belongs to the first, the row's closing [SEP] (where
    the window was cut, not a document's end) to the last.
    """
    ids = np.atleast_2d(ids)
    segments = np.zeros(ids.shape, np.int32)
    segments[:, 1:] = np.cumsum(ids[:, :-1] == sep_id, axis=1)  # a new one after each [SEP]
    segments[:, -1] = segments[:, -2]
    return segments


@dataclasses.dataclass(frozen=True)
class Objective:
    """What the batches of an objective hold."""

    # (rows [B, L], rng, *, tokenizer, mask_prob, whole_word) -> input_ids, targets, weights
    targets: Callable[..., dict[str, np.ndarray]]
    causal: bool = False  # predicts token i + 1 from i: needs a causal model
    pairs: bool = False  # rows are pairs of windows with a pair_label (data/doc_pairs.py)


OBJECTIVES = {
    "mlm": Objective(mlm_targets),
    "clm": Objective(clm_targets, causal=True),
    "mlm_same_doc": Objective(mlm_targets, pairs=True),
}


def row_targets(
    objective: str, tokenizer, *, mask_prob: float, whole_word: bool, isolated: bool = False
) -> Callable[[np.ndarray, object], dict[str, np.ndarray]]:
    """(rows [B, L], rng) -> the batch of those rows under `objective` (a key of OBJECTIVES):
    input_ids, targets, weights, attention_mask (all ones: rows are full) and token_type_ids
    (zeros). rng: one generator, or one per row (see masking.mask_tokens).

    isolated: rows are cut from the document stream; the batch adds their segment_ids int32
    [B, L] (`document_segments`), and a causal objective drops the target of each document's
    last token, which would be the next document's first. Everything else is as without."""
    targets = functools.partial(
        OBJECTIVES[objective].targets,
        tokenizer=tokenizer,
        mask_prob=mask_prob,
        whole_word=whole_word,
    )

    def batch_of(ids: np.ndarray, rng) -> dict[str, np.ndarray]:
        batch = targets(ids, rng)
        batch["attention_mask"] = np.ones(ids.shape, np.int32)
        batch["token_type_ids"] = np.zeros(ids.shape, np.int32)
        if isolated:
            segments = document_segments(ids, sep_id=tokenizer.sep_id)
            batch["segment_ids"] = segments
            if OBJECTIVES[objective].causal:  # target i is token i + 1
                kept = np.ones(ids.shape, bool)
                kept[:, :-1] = segments[:, 1:] == segments[:, :-1]
                batch["targets"] = np.where(kept, batch["targets"], 0).astype(np.int32)
                batch["weights"] = np.where(kept, batch["weights"], 0).astype(np.float32)
        return batch

    return batch_of
