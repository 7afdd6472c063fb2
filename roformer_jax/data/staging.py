"""What a training run reads: its stages of train batches, and its validation sets.

Both take plain values (no config), so that the trainer decides what to ask for and this
module only how to cut it. Shapes: b this host's rows, L sequence length.
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Sequence

from absl import logging

from roformer_jax.data import batches as batches_lib
from roformer_jax.data.corpus import Corpus
from roformer_jax.data.length_eval import TooLittleText, length_eval_set


def staged_batches(
    corpus: Corpus,
    stages: Sequence[tuple[int, int, int]],
    *,
    seed: int,
    start_step: int,
    process_index: int,
    process_count: int,
) -> Iterator[dict]:
    """This host's batches for steps start_step + 1, ..., each at its stage's length and size.

    stages: (steps, seq_len, global batch_size) in turn. Stage k draws the rows of global
    steps [first_k, first_k + steps_k) from the windows at its length, so a resumed run sees
    the batches it would have seen.
    """
    first = 0
    for steps, seq_len, batch_size in stages:
        if start_step < first + steps:
            begin = max(start_step, first)
            batches = batches_lib.train_batches(
                corpus,
                batch_size=batch_size,
                seq_len=seq_len,
                seed=seed,
                start_step=begin,
                process_index=process_index,
                process_count=process_count,
            )
            with contextlib.closing(batches):
                for _ in range(first + steps - begin):
                    yield next(batches)
        first += steps


def valid_sets(
    corpus: Corpus,
    lengths: Sequence[int],
    *,
    batch_size: int,
    max_tokens: int | None,
    max_length: int | None,
    process_index: int,
    process_count: int,
) -> dict[int, list[dict]]:
    """{length: this host's validation batches}: the same held-out targets at every length.

    The held-out text is cut as the data config's `eval_windows` says, masked with its
    `eval_seed` (data/length_eval.py), at most `max_tokens` of it (None = all). A length past
    `max_length` (the model's longest sequence; None = any) is skipped with a warning; so are
    lengths the held-out text cannot fill, longest first, until one fits.
    """
    kept = []
    for length in dict.fromkeys(lengths):
        if max_length is not None and length > max_length:
            logging.warning(
                "valid length %d skipped: the model takes at most %d positions", length, max_length
            )
        else:
            kept.append(length)
    while kept:
        try:
            held_out = length_eval_set(
                corpus,
                kept,
                batch_size=batch_size,
                windows=corpus.config.eval_windows,
                max_tokens=max_tokens,
                process_index=process_index,
                process_count=process_count,
            )
        except TooLittleText as e:
            longest = max(kept)
            logging.warning("valid length %d skipped: %s", longest, e)
            kept.remove(longest)
            continue
        logging.info(
            "validation: %d targets at each of the lengths %s (%d tokens, %d pieces)",
            held_out.num_targets,
            sorted(kept),
            held_out.num_tokens,
            held_out.num_pieces,
        )
        return held_out.batches
    return {}
