"""Attention sinks: one learned logit per head that joins softmax's denominator (gpt-oss).

Glossary of shapes: N query heads, M key length.

With scores s_ij and a sink s_n of head n, out_i = Σ_j e^{s_ij} v_j / (Σ_j e^{s_ij} + e^{s_n}):
the sink is a key that every query sees, whose value is zero, so a head may attend to
nothing (weights summing to less than 1). Only a kind that forms its scores can take one.
"""

import jax
import jax.numpy as jnp

from roformer_jax.nn.attention_inputs import check_array


def check_sinks(sinks, heads: int) -> None:
    """Raises ValueError unless sinks is a float array [N] for N = `heads` query heads."""
    check_array(sinks, "sinks")
    shape = jnp.shape(sinks)
    if shape != (heads,) or not jnp.issubdtype(jnp.result_type(sinks), jnp.floating):
        raise ValueError(
            f"sinks has shape {shape} and dtype {jnp.result_type(sinks)}; expected floats "
            f"[N] = ({heads},), one logit per query head"
        )


def softmax_with_sinks(logits, sinks):
    """softmax over [logits, sink] along the last axis, the sink's own weight dropped:
    e^{x_j} / (Σ_j e^{x_j} + e^{s}). logits [..., M]; sinks broadcastable to [..., 1]."""
    sinks = jnp.broadcast_to(sinks.astype(logits.dtype), logits.shape[:-1] + (1,))
    return jax.nn.softmax(jnp.concatenate([logits, sinks], axis=-1), axis=-1)[..., :-1]


def refuse(kind: str, options: dict) -> None:
    """Raises ValueError if a kind that forms no scores was given sinks."""
    if "sinks" in options:
        raise ValueError(
            f"{kind} takes no sinks: a sink joins softmax's denominator, and {kind} never "
            "forms the scores (use attention='softmax')"
        )
