"""Packed rows: several documents (segments) in one row, each attending only to itself.

Glossary of shapes: B batch, L row length.

A row's segments are given by `segment_ids` int [B, L]: a segment is a run of equal ids, so a
segment starts at the row's first token and wherever a token's id differs from the previous
token's. Packing gives each document one run (ids 0, 1, 2, ... or any ids that do not repeat
in adjacent documents). Padding is not a segment of its own kind: it is marked by the
attention mask (False), whatever its id.

The attention kinds (attention.py) take `segment_ids` and let token i see key j only when both
lie in the same segment; position encodings restart with `segment_positions`.
"""

import jax
import jax.numpy as jnp


def check_segment_ids(segment_ids, batch: int, length: int, keys: int) -> None:
    """Raises ValueError unless segment_ids is an integer [B, L] and L == M (self-attention)."""
    shape = jnp.shape(segment_ids)
    if shape != (batch, length) or not jnp.issubdtype(jnp.result_type(segment_ids), jnp.integer):
        raise ValueError(
            f"segment_ids has shape {shape} and dtype {jnp.result_type(segment_ids)}; "
            f"expected integers [B, L] = ({batch}, {length})"
        )
    if length != keys:
        raise ValueError(f"segment_ids need self-attention, L == M; got L={length}, M={keys}")


def segment_starts(segment_ids) -> jax.Array:
    """bool [B, L]: True at the first token of each segment (a change of id, and position 0)."""
    segment_ids = jnp.asarray(segment_ids)
    if segment_ids.ndim != 2 or not jnp.issubdtype(segment_ids.dtype, jnp.integer):
        raise ValueError(
            f"segment_ids has shape {segment_ids.shape} and dtype {segment_ids.dtype}; "
            "expected integers [B, L] (one row: segment_ids[None])"
        )
    changed = segment_ids[:, 1:] != segment_ids[:, :-1]
    return jnp.concatenate([jnp.ones_like(changed[:, :1]), changed], axis=1)


def segment_index(segment_ids) -> jax.Array:
    """int32 [B, L]: each token's segment numbered 0, 1, ... along its row (nondecreasing).

    Two tokens are in one segment iff their numbers are equal: unlike the ids, the numbers tell
    apart two documents that happen to share an id but are not adjacent.
    """
    return jnp.cumsum(segment_starts(segment_ids), axis=1, dtype=jnp.int32) - 1


def segment_positions(segment_ids) -> jax.Array:
    """int32 [B, L]: each token's position in its segment, 0 at every segment's first token."""
    starts = segment_starts(segment_ids)
    index = jnp.broadcast_to(jnp.arange(starts.shape[1], dtype=jnp.int32), starts.shape)
    first = jax.lax.cummax(jnp.where(starts, index, 0), axis=1)  # [B, L]: its segment's start
    return index - first
