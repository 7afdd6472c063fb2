"""What a layer does to q and k before its attention kind: QK-norm (Qwen3, Gemma 3, Llama 4)
and the query temperature of Llama 4's layers without positions.

Glossary of shapes: B batch, L length, N query heads, K key/value heads, H head dim.
"""

import jax.numpy as jnp


def rms_norm(x, scale, *, eps: float):
    """x / √(mean of x² over H + eps) · scale, each head's H features on their own (QK-norm,
    as Qwen3's RMSNorm: in float32 at least, back in x's dtype before the scale).

    x [B, L, N or K, H]; scale [H] (a parameter of the layer, or ones: Llama 4's unscaled
    norm). Returns x's shape, in x's dtype promoted with scale's.
    """
    y = x.astype(jnp.promote_types(x.dtype, jnp.float32))
    y = y * (jnp.mean(y * y, axis=-1, keepdims=True) + eps) ** -0.5
    return scale * y.astype(x.dtype)


def query_temperature(positions, *, attn_scale: float, floor_scale: float):
    """Llama 4's temperature of a query at position p, for long contexts without positions:
    1 + attn_scale · log(floor((p + 1) / floor_scale) + 1).

    positions int [L] or [B, L] -> float [L] or [B, L] (JAX's default float: float64 when
    x64 is on): 1 for p + 1 < floor_scale, then growing with log p, so attention does not
    flatten as the keys grow in number.
    """
    steps = jnp.floor((jnp.asarray(positions) + 1.0) / floor_scale)
    return 1.0 + attn_scale * jnp.log1p(steps)
