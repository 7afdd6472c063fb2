"""ALiBi (Press et al. 2022): a per-head linear bias on attention scores, by distance.

positions.ENCODINGS' "alibi" entry names this module's section and hooks; the bias is relative
(it depends on m - n only) and reaches only the attention kinds that form the scores.
Glossary of shapes: B batch, L query length, M key length, N heads.
"""

from __future__ import annotations

import dataclasses
import math

import jax.numpy as jnp
import numpy as np

from roformer_jax.nn.sections import Section


def alibi_slopes(num_heads: int, slope_heads: int | None = None) -> np.ndarray:
    """ALiBi's per-head slopes m_h (Press et al. 2022, sec. 3): [N] float32.

    For N a power of two, the geometric sequence 2^(-8/N), 2^(-16/N), ..., 2^(-8). Otherwise
    the slopes of the nearest lower power of two P, then every other slope of 2P, as in the
    authors' code. slope_heads S (None: N): the slopes of S heads, each repeated over N / S
    adjacent heads, so that N narrow heads keep the biases of S wide ones (issue 56: 8 heads
    with the 2-head slopes part the head count from the slopes).
    """
    slope_heads = num_heads if slope_heads is None else slope_heads
    if num_heads < 1 or slope_heads < 1 or num_heads % slope_heads:
        raise ValueError(
            f"num_heads={num_heads} must be a positive multiple of slope_heads={slope_heads}"
        )

    def geometric(n):
        return [2.0 ** (-8.0 * (h + 1) / n) for h in range(n)]

    power = 2 ** math.floor(math.log2(slope_heads))
    slopes = geometric(power) + geometric(2 * power)[0::2][: slope_heads - power]
    return np.repeat(np.asarray(slopes, np.float32), num_heads // slope_heads)


def alibi_bias(q_positions, k_positions, num_heads: int, slope_heads: int | None = None):
    """-m_h·|m - n| for query position m, key position n and head h: [B or 1, N, L, M].

    Press et al. 2022 wrote it for causal decoders, where n <= m and the bias is m_h·(n - m);
    an encoder's queries also see later keys, so the distance is |m - n| (as in MosaicBERT).
    It depends on m - n only, so outputs do not change when every position shifts; being
    symmetric, it cannot tell a sequence from its mirror image (RoPE can).
    positions: int [L] / [B, L] and [M] / [B, M]; slope_heads: `alibi_slopes`'.
    """
    q_positions, k_positions = jnp.asarray(q_positions), jnp.asarray(k_positions)
    _check_positions(q_positions, k_positions)
    distance = jnp.abs(q_positions[..., :, None] - k_positions[..., None, :])  # [(B,) L, M]
    distance = distance.reshape(-1, *distance.shape[-2:])[:, None]  # [B or 1, 1, L, M]
    slopes = alibi_slopes(num_heads, slope_heads)
    return -jnp.asarray(slopes)[None, :, None, None] * distance.astype(jnp.float32)


def _check_positions(q_positions, k_positions) -> None:
    """[L] / [B, L] and [M] / [B, M], with one B (or 1) between them: the bias is [B or 1, ...]."""
    for name, positions, length in (
        ("q_positions", q_positions, "L"),
        ("k_positions", k_positions, "M"),
    ):
        if positions.ndim not in (1, 2):
            raise ValueError(
                f"{name} of shape {positions.shape}; expected [{length}] or [B, {length}]"
            )
    batches = {p.shape[0] for p in (q_positions, k_positions) if p.ndim == 2} - {1}
    if len(batches) > 1:
        raise ValueError(
            f"q_positions of shape {q_positions.shape} and k_positions of shape "
            f"{k_positions.shape} have different batches; expected one B (or 1)"
        )


@dataclasses.dataclass(frozen=True)
class AlibiSection(Section):
    """ALiBi's slopes: those of `slope_heads` heads (None: the model's num_heads), each
    repeated over num_heads / slope_heads adjacent heads (`alibi_slopes`)."""

    slope_heads: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.slope_heads is not None and self.slope_heads < 1:
            raise ValueError(f"slope_heads={self.slope_heads} must be a positive integer")


def bias(section: AlibiSection, config, q_positions, k_positions):
    """The table's bias hook (positions.PositionEncoding.bias): `alibi_bias` at the model's
    heads and the section's slopes."""
    return alibi_bias(q_positions, k_positions, config.num_heads, section.slope_heads)


def check(section: AlibiSection, config):
    """The table's check hook: the section's slope_heads against the model's num_heads."""
    if section.slope_heads is not None and config.num_heads % section.slope_heads:
        raise ValueError(
            f"sections.alibi.slope_heads={section.slope_heads} does not divide "
            f"num_heads={config.num_heads}: each slope covers num_heads / slope_heads heads"
        )
