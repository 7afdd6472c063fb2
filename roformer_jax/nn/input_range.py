"""Token ids, token types and positions inside the model's tables, checked on the host.

    input_range.check_batch(batch, vocab_size=V, type_vocab_size=2, max_length=512)

The jitted model cannot raise on a value: an embedding lookup (`nn.Embed`, jnp.take) at an
index past its table gives NaN, which attention then spreads to every position of the row,
and a negative index wraps around (-1 reads the last row) without a sign. So every place
where ids enter from outside (the data pipeline, `generate`, the HF loader, the experiment
commands) checks them here first, once, on the host; the model checks its own inputs when
called outside jit (`model_inputs`), where their values are known.
"""

from __future__ import annotations

import os
from collections.abc import Mapping

import numpy as np


def check_in_table(values, size: int, what: str, table: str) -> None:
    """Raises ValueError naming the first entry of `values` (ints, any shape) outside
    [0, size), the `size` rows of `table`."""
    values = np.asarray(values)
    if not values.size:
        return
    low, high = values.min(), values.max()
    if low >= 0 and high < size:
        return
    bad = low if low < 0 else high
    where = tuple(int(i) for i in np.argwhere(values == bad)[0])
    raise ValueError(
        f"{what} holds {int(bad)} (at {where}), outside the {size} rows of {table} [0, {size}): "
        "the model would read NaN (past the end) or wrap around (negative)"
    )


def check_batch(
    batch: Mapping, *, vocab_size: int, type_vocab_size: int, max_length: int | None
) -> None:
    """Checks a batch's input_ids [..., L], token_type_ids and position_ids (where present)
    against the model's vocabulary, token-type table and positions (max_length None: no
    table of positions)."""
    check_in_table(batch["input_ids"], vocab_size, "input_ids", "the vocabulary")
    if batch.get("token_type_ids") is not None:
        check_in_table(
            batch["token_type_ids"], type_vocab_size, "token_type_ids", "the token-type table"
        )
    if max_length is None:
        return
    positions = batch.get("position_ids")
    if positions is None:
        positions = np.arange(np.shape(batch["input_ids"])[-1])
    check_in_table(positions, max_length, "positions", "the model's positions")


def check_vocab_file(path: str, vocab_size: int) -> None:
    """Raises ValueError when the vocab.txt at `path` (if any) has more tokens than the
    embedding table has rows: its tokenizer would give ids past the table."""
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        tokens = sum(1 for _ in f)
    if tokens > vocab_size:
        raise ValueError(
            f"{path} has {tokens} tokens but the embedding table {vocab_size} rows; its "
            "tokenizer would give ids past the table"
        )
