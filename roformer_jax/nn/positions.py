"""Position encodings as a table: each one is a small definition of what it does.

An encoder learns nothing of word order unless it is told where each token is. An encoding
can tell it in three places, and says which through the hooks it fills in:
  embed     a vector added to each token's embedding (BERT's learned table, the sinusoid of
            Vaswani et al. 2017): absolute positions;
  rotation  a transform of q and k in every self-attention (RoPE, Su et al. 2021): scores
            that depend on m - n only, and the one relative encoding that works with linear
            attention, since it needs no attention matrix;
  bias      a term added to the attention scores (ALiBi, Press et al. 2022): relative, but
            only for attention kinds that form the scores.
`ENCODINGS` maps a name (`ModelConfig.position`) to its definition; the model and trainer
look encodings up here and never branch on their names. A new encoding is one definition and
one entry.

Hooks receive the model config (`roformer_jax.nn.model_config.ModelConfig`) and the position ids
(`position_ids`, the indices; `config.position` names the encoding).
Glossary of shapes: B batch, L query length, M key length, N heads, E embedding size.
Position ids are int [L] or [B, L].
"""

import dataclasses
import math
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import rope, rope_phase

ModelConfig = Any  # roformer_jax.nn.model_config.ModelConfig, which imports this module


@dataclasses.dataclass(frozen=True)
class PositionEncoding:
    """What one position encoding does to the encoder; every hook is optional.

    Attributes:
      embed: (config, position_ids, dtype) -> [(B,) L, E], added to the token embeddings. Runs
        inside the embedding module, so it may create Flax parameters (a learned table).
      rotation: (config, position_ids, seq_len) -> `rope.Rotation` applied to q and k.
        seq_len is the length of the whole sequence: the L rotated, or when decoding the
        cache's capacity, so that each step rotates as the whole sequence would be rotated
        (scalings that choose frequencies by the length, xPos's centre).
      bias: (config, q_positions, k_positions) -> [B or 1, N, L, M] added to softmax scores.
        Attention kinds that never form the scores (linear, cosine) cannot take it.
      max_length: config -> the longest sequence it supports, or None for any length.
      check: config -> None; raises ValueError for a config it cannot serve.
      scale_embeddings: multiply the word and token type embeddings by √E before `embed` is
        added, as Vaswani et al. 2017 (sec. 3.4) do for a fixed sinusoid of amplitude 1:
        embeddings initialized with std 0.02 (BERT's) would otherwise be swamped by it.
    """

    embed: Callable[[ModelConfig, jax.Array, Any], jax.Array] | None = None
    rotation: Callable[[ModelConfig, jax.Array, int], rope.Rotation] | None = None
    bias: Callable[[ModelConfig, jax.Array, jax.Array], jax.Array] | None = None
    max_length: Callable[[ModelConfig], int | None] = lambda config: None
    check: Callable[[ModelConfig], None] = lambda config: None
    scale_embeddings: bool = False


# ---------------------------------------------------------------- absolute: added to embeddings


def _learned(config, position_ids, dtype):
    """BERT: a trained table of `max_len` rows, initialized like the other embeddings."""
    table = nn.Embed(
        config.max_len,
        config.embed_dim,
        dtype=dtype,
        embedding_init=nn.initializers.normal(config.initializer_range),
        name="position_embeddings",
    )
    return table(position_ids)  # [(B,) L, E]


def sinusoidal_embedding(positions, dim: int) -> jax.Array:
    """Vaswani et al. 2017, sec. 3.5: PE[m, 2i] = sin(m θ_i), PE[m, 2i+1] = cos(m θ_i).

    θ_i = 10000^(-2i/dim). positions: int [L] or [B, L]. Returns [L, dim] or [B, L, dim] float32.
    """
    angles = rope_phase.rotation_angles(positions, dim, base=10000.0)  # [..., L, dim/2]
    return jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*angles.shape[:-1], dim)


def _sinusoidal(config, position_ids, dtype):
    return sinusoidal_embedding(position_ids, config.embed_dim).astype(dtype)


def _even_embedding(config):
    if config.embed_dim % 2:
        raise ValueError(f"embedding size {config.embed_dim} is odd; sin/cos come in pairs")


# ---------------------------------------------------------------- relative: q and k rotated


def _rope(config, position_ids, seq_len):
    return rope.rope_rotation(
        position_ids, base=config.rope_base, scaling=config.rope_scaling_dict, seq_len=seq_len
    )


def _xpos(config, position_ids, seq_len):
    return rope.xpos_rotation(
        position_ids, base=config.rope_base, scaling=config.rope_scaling_dict, seq_len=seq_len
    )


def _even_heads(config):
    if config.head_dim % 2:
        raise ValueError(f"head dim {config.head_dim} is odd; RoPE rotates pairs of features")


# ---------------------------------------------------------------- relative: a bias on the scores


def alibi_slopes(num_heads: int) -> np.ndarray:
    """ALiBi's per-head slopes m_h (Press et al. 2022, sec. 3): [N] float32.

    For N a power of two, the geometric sequence 2^(-8/N), 2^(-16/N), ..., 2^(-8). Otherwise
    the slopes of the nearest lower power of two P, then every other slope of 2P, as in the
    authors' code.
    """
    if num_heads < 1:
        raise ValueError(f"num_heads={num_heads} must be positive")

    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    power = 2 ** math.floor(math.log2(num_heads))
    slopes = geometric(power) + geometric(2 * power)[0::2][: num_heads - power]
    return np.asarray(slopes, np.float32)


def alibi_bias(q_positions, k_positions, num_heads: int) -> jax.Array:
    """-m_h·|m - n| for query position m, key position n and head h: [B or 1, N, L, M].

    Press et al. 2022 wrote it for causal decoders, where n <= m and the bias is m_h·(n - m);
    an encoder's queries also see later keys, so the distance is |m - n| (as in MosaicBERT).
    It depends on m - n only, so outputs do not change when every position shifts; being
    symmetric, it cannot tell a sequence from its mirror image (RoPE can).
    positions: int [L] / [B, L] and [M] / [B, M].
    """
    q_positions, k_positions = jnp.asarray(q_positions), jnp.asarray(k_positions)
    distance = jnp.abs(q_positions[..., :, None] - k_positions[..., None, :])  # [(B,) L, M]
    distance = distance.reshape(-1, *distance.shape[-2:])[:, None]  # [B or 1, 1, L, M]
    slopes = jnp.asarray(alibi_slopes(num_heads))[None, :, None, None]  # [1, N, 1, 1]
    return -slopes * distance.astype(jnp.float32)


def _alibi(config, q_positions, k_positions):
    return alibi_bias(q_positions, k_positions, config.num_heads)


ENCODINGS: dict[str, PositionEncoding] = {
    "learned": PositionEncoding(embed=_learned, max_length=lambda config: config.max_len),
    "sinusoidal": PositionEncoding(embed=_sinusoidal, check=_even_embedding, scale_embeddings=True),
    "rope": PositionEncoding(rotation=_rope, check=_even_heads),
    "xpos": PositionEncoding(rotation=_xpos, check=_even_heads),
    "alibi": PositionEncoding(bias=_alibi),
    "none": PositionEncoding(),
}
