"""The targets of each training objective, as pure numpy functions of the tokens (and a seed).

MLM, Devlin et al. 2019 ("BERT"), sec. 3.1 and appendix A.1: choose 15% of the real tokens of
each sequence; of those, replace 80% by [MASK], 10% by a random token and keep 10% unchanged;
the model predicts the original token at every chosen position (`mask_tokens`).
Causal LM: the model predicts every next token from the tokens before it, nothing corrupted
(`next_token_targets`).

Shapes: B batch, L sequence length, V vocabulary size.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np


def mask_tokens(
    tokens: np.ndarray,
    rng: np.random.Generator | Sequence[np.random.Generator],
    *,
    vocab_size: int,
    mask_id: int,
    special_ids: Sequence[int],
    mask_prob: float = 0.15,
    word_starts: np.ndarray | None = None,
) -> dict[str, np.ndarray]:
    """Chooses and corrupts MLM targets.

    Each row with n real tokens (tokens not in `special_ids`, so padding, [CLS], [SEP] and
    [MASK] are never chosen) gets exactly max(1, round(mask_prob * n)) chosen positions, as in
    BERT's create_pretraining_data.py (n = 0 gives none). With `word_starts`, whole words are
    chosen instead (BERT's whole-word masking): words are taken in random order until at least
    that many tokens are chosen, so the rate can run a little over `mask_prob`. Each chosen
    token independently becomes [MASK] (p = 0.8), a random non-special token (0.1) or stays
    (0.1). A special token always starts a new word.

    Args:
      tokens: int [B, L] (or [L]).
      rng: consumed; the same generator state gives the same result. A sequence of B
        generators gives each row its own: row i then depends on rng[i] alone, not on the
        rows beside it (the trainer's masks do not depend on how rows are split over hosts).
      vocab_size: V; random replacements are drawn uniformly from the non-special ids < V.
      mask_id: the [MASK] id.
      special_ids: ids never chosen; must include the padding id.
      mask_prob: fraction of real tokens to choose, in (0, 1].
      word_starts: optional bool like `tokens`, True where a token begins a word.

    Returns:
      dict of numpy arrays shaped like `tokens`: input_ids (int32, corrupted), targets (int32,
      the original token where chosen, 0 elsewhere), weights (float32, 1 where chosen).
    """
    tokens = np.asarray(tokens)
    specials = np.unique(np.asarray(special_ids, np.int64))
    _check_mask_arguments(tokens, specials, vocab_size, mask_id, mask_prob, word_starts)
    shape = tokens.shape
    tokens = np.atleast_2d(tokens).astype(np.int32)  # [B, L]
    B, L = tokens.shape

    if not isinstance(rng, np.random.Generator) and len(rng) != B:
        raise ValueError(f"{len(rng)} generators for {B} rows; give one per row or one")
    chosen = _choose(rng, ~np.isin(tokens, specials), mask_prob, word_starts)  # [B, L]

    replace = _draw(rng, "random", B, L)  # [B, L]
    random_ids = _sample_non_special(rng, (B, L), vocab_size, specials)  # [B, L]
    input_ids = np.where(chosen & (replace < 0.8), mask_id, tokens)
    input_ids = np.where(chosen & (replace >= 0.8) & (replace < 0.9), random_ids, input_ids)
    return {
        "input_ids": input_ids.astype(np.int32).reshape(shape),
        "targets": np.where(chosen, tokens, 0).astype(np.int32).reshape(shape),
        "weights": chosen.astype(np.float32).reshape(shape),
    }


def _check_mask_arguments(tokens, specials, vocab_size, mask_id, mask_prob, word_starts):
    """Raises ValueError naming the first of `mask_tokens`' arguments that is wrong."""
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be integers, got dtype {tokens.dtype}")
    if not 0.0 < mask_prob <= 1.0:
        raise ValueError(f"mask_prob {mask_prob} is outside (0, 1]")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id {mask_id} is outside the vocabulary [0, {vocab_size})")
    if mask_id not in specials:
        raise ValueError(f"mask_id {mask_id} must be one of special_ids {specials.tolist()}")
    if vocab_size <= np.sum(specials < vocab_size):
        raise ValueError(f"vocab_size {vocab_size} has no non-special token to sample")
    if word_starts is not None and np.shape(word_starts) != tokens.shape:
        raise ValueError(f"word_starts {np.shape(word_starts)} must match tokens {tokens.shape}")


def next_token_targets(tokens: np.ndarray, *, pad_id: int) -> dict[str, np.ndarray]:
    """Next-token targets of rows [CLS] text [SEP] [PAD]...: targets[i] = tokens[i + 1].

    Weighted are the positions i whose next token is part of the text: i + 1 is real (not
    padding) and not the row's last real token, the [SEP] that closes the row. That [SEP]
    marks where the window of the token stream was cut, not where a document ends, so
    predicting it would teach the model an artifact of the batching; the [SEP]s inside the
    text end documents and are targets like any token. [CLS] is the first input, as a
    start-of-sequence token. A row of n real tokens has max(n - 2, 0) targets.

    Args:
      tokens: int [B, L] (or [L]), real tokens first, then padding.
      pad_id: the padding id.

    Returns:
      dict of numpy arrays shaped like `tokens`: input_ids (int32, `tokens` unchanged),
      targets (int32, tokens[i + 1], 0 at the last position), weights (float32).
    """
    tokens = np.asarray(tokens)
    if not np.issubdtype(tokens.dtype, np.integer):
        raise ValueError(f"tokens must be integers, got dtype {tokens.dtype}")
    shape = tokens.shape
    tokens = np.atleast_2d(tokens).astype(np.int32)  # [B, L]
    real = tokens != pad_id  # [B, L]
    last = real.sum(axis=-1, keepdims=True) - 1  # [B, 1] the closing [SEP]
    pos = np.arange(tokens.shape[-1])
    weights = np.zeros(tokens.shape, bool)
    weights[:, :-1] = real[:, :-1] & real[:, 1:] & (pos[1:] < last)
    targets = np.zeros_like(tokens)
    targets[:, :-1] = tokens[:, 1:]
    return {
        "input_ids": tokens.reshape(shape),
        "targets": np.where(weights, targets, 0).reshape(shape),
        "weights": weights.astype(np.float32).reshape(shape),
    }


def max_targets(length: int, mask_prob: float = 0.15) -> int:
    """The most targets `mask_tokens` chooses in a row of `length` tokens without word_starts.

    A row has at most `length` real tokens and the count rounds monotonically, so a gather of
    this many positions per row holds every target (whole words can run over it).
    """
    return min(length, max(1, int(np.floor(mask_prob * length + 0.5))))


def _choose(rng, real, mask_prob, word_starts):
    """[B, L] True at the chosen targets among the `real` tokens [B, L] (mask_tokens)."""
    B, L = real.shape
    num_real = real.sum(axis=-1)  # [B]
    num_chosen = np.where(num_real > 0, np.maximum(1, np.floor(mask_prob * num_real + 0.5)), 0)
    # Random priorities; specials sort last. Each row takes its num_chosen lowest (words).
    score = np.where(real, _draw(rng, "random", B, L), np.inf)  # [B, L]
    if word_starts is None:
        kth = np.sort(score, axis=-1)[np.arange(B), np.maximum(num_chosen - 1, 0).astype(int)]
        return real & (score <= kth[:, None]) & (num_chosen[:, None] > 0)
    return real & _choose_words(score, real, word_starts, num_chosen)


def _choose_words(score, real, word_starts, num_chosen):
    """Whole words in random order until each row has >= num_chosen tokens. All [B, L]."""
    B, L = score.shape
    pos = np.broadcast_to(np.arange(L), (B, L))
    starts = np.atleast_2d(np.asarray(word_starts, bool)) | ~real
    starts[:, 0] = True
    start_of = np.maximum.accumulate(np.where(starts, pos, 0), axis=-1)  # [B, L] word's start
    word_score = np.take_along_axis(score, start_of, axis=-1)  # a word's tokens share a score
    # A stable sort keeps each word's tokens together and in order, so a word is taken
    # exactly when fewer than num_chosen tokens precede its first token in this order.
    order = np.argsort(word_score, axis=-1, kind="stable")  # [B, L]
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, pos, axis=-1)
    return np.take_along_axis(rank, start_of, axis=-1) < num_chosen[:, None]


def _draw(rng, method: str, B: int, L: int, *args) -> np.ndarray:
    """rng.<method>(*args, size=(B, L)) from one generator, or row i from rng[i]."""
    if isinstance(rng, np.random.Generator):
        return getattr(rng, method)(*args, size=(B, L))
    return np.stack([getattr(g, method)(*args, size=L) for g in rng])


def _sample_non_special(rng, shape, vocab_size, specials):
    """Uniform over [0, vocab_size) minus `specials` (sorted, unique)."""
    specials = specials[(specials >= 0) & (specials < vocab_size)]
    ids = _draw(rng, "integers", *shape, 0, vocab_size - len(specials))
    for s in specials:  # ascending: shift past each excluded id in turn
        ids += ids >= s
    return ids
