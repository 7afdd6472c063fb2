"""Which rows of a global batch are this host's.

Host p of P gets rows [p b, (p + 1) b) of every global batch of `batch_size` rows, with
b = batch_size / P; the trainer splits them over its local devices (training/runtime.py).
A row's data depend on its global index alone, so P hosts together see the batches of one.
"""

from __future__ import annotations

import jax
import numpy as np


def host_share(process_index: int | None, process_count: int | None) -> tuple[int, int]:
    """(this host's index, the number of hosts): jax's unless given."""
    index = jax.process_index() if process_index is None else process_index
    count = jax.process_count() if process_count is None else process_count
    if not 0 <= index < count:
        raise ValueError(f"process_index {index} is outside [0, process_count={count})")
    return index, count


def local_rows(batch_size: int, count: int) -> int:
    """b = batch_size / P, this host's rows of each global batch (of `count` = P hosts)."""
    if batch_size <= 0 or batch_size % count:
        raise ValueError(
            f"batch_size {batch_size} must be a positive multiple of the {count} processes"
        )
    return batch_size // count


def global_rows(batch: int, batch_size: int, index: int, count: int) -> np.ndarray:
    """int [b]: the global example ids of host `index`'s rows of batch number `batch`."""
    local = local_rows(batch_size, count)
    return batch * batch_size + index * local + np.arange(local)
