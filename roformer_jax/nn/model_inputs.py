"""The model's inputs checked against each other and its config, with their defaults filled in.

`roformer_jax.nn.model.RoFormer` calls `checked_inputs` first, so that a wrong shape or a
setting the model cannot honour fails with its reason before any parameter is made.
"""

import jax
import jax.numpy as jnp

from roformer_jax.nn import input_range, segments
from roformer_jax.nn.model_config import ModelConfig


def checked_inputs(
    cfg: ModelConfig,
    input_ids,
    attention_mask,
    token_type_ids,
    position_ids,
    decode_length,
    segment_ids,
):
    """`RoFormer`'s inputs checked against each other and the config, defaults filled in:
    (position_ids [L] or [B, L] (or [L, A], [B, L, A] for an encoding on A axes),
    token_type_ids [B, L], mask [B, L] bool or None, segment_ids [B, L] or None)."""
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids has shape {input_ids.shape}; expected [B, L]")
    tables = [(input_ids, cfg.vocab_size, "input_ids", "the vocabulary")]
    tables.append((token_type_ids, cfg.type_vocab_size, "token_type_ids", "the token-type table"))
    if cfg.max_length is not None:
        tables.append((position_ids, cfg.max_length, "position_ids", "the model's positions"))
    for values, size, what, table in tables:
        check_concrete_in_table(values, size, what, table)
    b, length = input_ids.shape
    if decode_length is not None:
        if not cfg.causal:
            raise ValueError(
                "decoding needs a causal model (ModelConfig.causal=True): each token of "
                "a bidirectional encoder depends on the tokens after it"
            )
        if length > decode_length:
            raise ValueError(f"{length} tokens do not fit in decode_length={decode_length}")
    total = length if decode_length is None else decode_length
    if cfg.max_length is not None and total > cfg.max_length:
        raise ValueError(
            f"sequence length {total} exceeds the {cfg.max_length} positions that "
            f"position={cfg.position!r} supports with max_len {cfg.max_len}; use "
            "position='rope' to run past the training length"
        )
    if segment_ids is not None:
        segment_ids = _checked_segments(cfg, segment_ids, input_ids.shape, decode_length)
        if position_ids is None:  # every document counts from 0, whatever the encoding
            position_ids = segments.segment_positions(segment_ids)  # [B, L]
    position_ids = jnp.arange(length) if position_ids is None else jnp.asarray(position_ids)
    axes = cfg.axes  # A, or None: one integer
    shapes = [(length,), (b, length)]
    if axes is not None:
        shapes = [(length, axes), (b, length, axes), *shapes]
    if position_ids.shape not in shapes:
        raise ValueError(
            f"position_ids has shape {position_ids.shape}; expected one of {shapes} for "
            f"input_ids of shape {input_ids.shape}"
            + (f" and position={cfg.position!r} on {axes} axes" if axes is not None else "")
        )
    if axes is not None and position_ids.shape not in shapes[:2]:  # every axis alike, as HF
        position_ids = jnp.broadcast_to(position_ids[..., None], (*position_ids.shape, axes))
    if token_type_ids is None:
        token_type_ids = jnp.zeros_like(input_ids)
    mask = None
    if attention_mask is not None:
        mask = jnp.asarray(attention_mask).astype(bool)
        if mask.shape != input_ids.shape:
            raise ValueError(f"attention_mask has shape {mask.shape}; expected {input_ids.shape}")
    return position_ids, token_type_ids, mask, segment_ids


def check_concrete_in_table(values, size: int, what: str, table: str) -> None:
    """input_range.check_in_table for `values` given outside jit. Inside, they are tracers
    and a lookup past the table gives NaN without a sign, so whoever feeds a jitted model
    checks its ids on the host (input_range)."""
    if values is not None and not isinstance(values, jax.core.Tracer):
        input_range.check_in_table(values, size, what, table)


def _checked_segments(cfg: ModelConfig, segment_ids, shape, decode_length) -> jax.Array:
    segment_ids = jnp.asarray(segment_ids)
    segments.check_segment_ids(segment_ids, *shape, shape[1])  # [B, L], self-attention
    if decode_length is not None:
        raise ValueError(
            "segment_ids with decode_length: decoding runs one sequence per row; pass the "
            "document being continued alone"
        )
    if "segment_ids" not in cfg.kind.options:
        raise ValueError(f"attention={cfg.attention!r} takes no segment_ids")
    return segment_ids
