"""The batch the train-step benchmarks feed (train_step.py, mesh.py): random ids, masked."""

import numpy as np

from roformer_jax.data import masking


def mlm_batch(vocab_size: int, rows: int, seq_len: int, rng: np.random.Generator) -> dict:
    """[rows, seq_len] of random ids past the 5 special ones, masked as BERT masks them, with
    the rest of a training batch's fields; draws from `rng`, which the caller may go on using."""
    ids = rng.integers(5, vocab_size, size=(rows, seq_len)).astype(np.int32)
    data = masking.mask_tokens(ids, rng, vocab_size=vocab_size, mask_id=4, special_ids=range(5))
    data.update(
        attention_mask=np.ones_like(ids),
        token_type_ids=np.zeros_like(ids),
        index=np.arange(rows, dtype=np.int32),
    )
    return data
