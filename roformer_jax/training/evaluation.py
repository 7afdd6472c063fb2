"""A model's scores on a length set: the loss at each context length, and by position.

    held_out = length_eval_set(run.corpus, (128, 512, 2048), batch_size=16, windows="documents")
    scores = score_lengths(run.model, run.params, held_out)
    scores[2048]["loss"]                 # mean over the targets every length scores
    scores[2048]["position_loss"]        # the same targets, by where they sit in the window

The per-position curve is the standard plot of length generalization: a model that cannot
use positions past its training length shows a loss that rises past them. `models` may be a
function of the length, for methods whose setting depends on it (position interpolation at
2048 for a model trained at 128 uses factor 16): every length then has its own model over the
same parameters.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import jax
import numpy as np
from flax import linen as nn

from roformer_jax.data.length_eval import LengthEvalSet
from roformer_jax.nn.model import evaluation_update
from roformer_jax.training.step import target_scores


def score_lengths(
    models: nn.Module | Callable[[int], nn.Module],
    params: Any,
    held_out: LengthEvalSet,
    *,
    bin_width: int = 64,
    steps_done: int | None = None,
) -> dict[int, dict]:
    """{length: scores} of the model(s) on every length of `held_out`; steps_done: the
    updates `params` have had, which picks random attention features (model.evaluation_update).

    Scores: loss (nats per target), accuracy, targets (their number, the same at every
    length), and by window position, in bins of `bin_width` positions: position_bins (the
    first position of each bin), position_loss and position_targets (NaN loss where a bin
    holds no target).
    """
    if bin_width < 1:
        raise ValueError(f"bin_width {bin_width} must be >= 1")
    scores, update = {}, evaluation_update(steps_done)
    for length, batches in held_out.batches.items():
        model = models if isinstance(models, nn.Module) else models(length)
        score = _scorer(model)
        bins = -(-length // bin_width)
        sums = np.zeros((3, bins))  # loss, correct, count per bin
        for batch in batches:
            xent, correct = (np.asarray(x, np.float64) for x in score(params, batch, update))
            weights = batch["weights"].astype(np.float64)
            where = (batch["head_positions"] + held_out.target_offset) // bin_width
            for row, values in enumerate((xent * weights, correct * weights, weights)):
                sums[row] += np.bincount(where.ravel(), values.ravel(), minlength=bins)
        total = sums.sum(axis=1)
        with np.errstate(invalid="ignore", divide="ignore"):
            position_loss = sums[0] / sums[2]
        scores[length] = {
            "loss": float(total[0] / max(total[2], 1.0)),
            "accuracy": float(total[1] / max(total[2], 1.0)),
            "targets": int(total[2]),
            "position_bins": (np.arange(bins) * bin_width).tolist(),
            "position_loss": position_loss.tolist(),
            "position_targets": sums[2].astype(int).tolist(),
        }
    return scores


@functools.lru_cache(maxsize=32)
def _scorer(model: nn.Module):
    """The jitted `_scores` of one model: the seeds of a run and repeated calls share it."""
    return jax.jit(functools.partial(_scores, model))


def _scores(model, params, batch, update):
    """(cross-entropy, correct) [B, P] at the batch's head positions."""
    out = model.apply(
        {"params": params},
        batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        mlm_positions=batch["head_positions"],
        segment_ids=batch.get("segment_ids"),  # a held-out set of isolated documents
        deterministic=True,
        update=update,
    )
    return target_scores(out.logits, batch["targets"])
