"""The training objectives: what each asks of the model, and how its rows get their targets.

    targets = row_targets("mlm", tokenizer, mask_prob=0.15, whole_word=False)
    batch = targets(ids, rngs)   # ids [B, L] rows [CLS] ... [SEP]; one generator per row

An objective is one function from rows to input_ids, targets and weights (masking.py does the
arithmetic) plus what it needs of the model, and one entry in OBJECTIVES; the train and eval
steps read only targets and weights, so they do not know which objective made them.

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
    objective: str, tokenizer, *, mask_prob: float, whole_word: bool
) -> Callable[[np.ndarray, object], dict[str, np.ndarray]]:
    """(rows [B, L], rng) -> the batch of those rows under `objective` (a key of OBJECTIVES):
    input_ids, targets, weights, attention_mask (all ones: rows are full) and token_type_ids
    (zeros). rng: one generator, or one per row (see masking.mask_tokens)."""
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
        return batch

    return batch_of
