"""Learned positions: RoPE at cumulative, input-dependent positions (issue 55 item 3).

Each key/value head k of a layer counts its own position from the layer's input x:

    p_t = Σ_{s<=t} softplus(w_k·x_s + b_k)                                   (w [D, K], b [K])

and q and k are rotated by RoPE (eq. 34) at the real-valued p_t instead of the token's index t,
as Mamba-3 rotates by a cumulative, input-dependent angle and CoPE (Golovneva et al. 2024)
counts positions by gates. A score then depends on p_t - p_s = Σ_{s<r<=t} softplus(·): how
much the tokens between query and key "count", each at least 0, so the positions never go
back. b starts at log(e - 1), softplus(b) = 1, and w is small (N(0, initializer_range²)), so
that p_t ≈ t + 1 at init: RoPE's own positions, shifted by one, which relative scores do not see.

The sum runs over the tokens before t, so the encoding needs a causal model (`check_model`).
Segment ids restart it at each packed document's start; padding at either end of a row adds
the same amount to every real token's position, which cancels in p_t - p_s. When decoding,
the attention module's "cache" collection carries each row's and head's running sum.

Glossary of shapes: B batch, L length, D model dim, N heads, K key/value heads (query head n
reads head n // (N / K), as the attention kinds group them), F rotated features (H, or a
feature map's width), R/2 rotated pairs.
"""

import dataclasses
import math

import flax.linen as nn
import jax
import jax.numpy as jnp

from roformer_jax.nn import rope, rope_layouts, rope_scaling, segments
from roformer_jax.nn.sections import Section

# softplus(INIT_BIAS) = 1: each token counts one position at init, as RoPE's do.
INIT_BIAS = math.log(math.e - 1.0)


@dataclasses.dataclass(frozen=True)
class LearnedPositionSection(Section):
    """The frequencies θ_i = base^(-2i/F) at which the learned positions rotate q and k."""

    base: float = 10000.0

    def __post_init__(self):
        super().__post_init__()
        if not (math.isfinite(self.base) and self.base > 0):
            raise ValueError(f"base={self.base} must be positive and finite: θ_i = base^(-2i/F)")

    def check_model(self, config) -> None:
        """p_t sums over the tokens up to t: a causal model's only; RoPE rotates pairs."""
        if not config.causal:
            raise ValueError(
                f"position={config.position!r} sums what came before each token into its "
                "position, which needs causal=True"
            )
        if config.head_dim % 2:
            raise ValueError(f"head dim {config.head_dim} is odd; RoPE rotates pairs of features")


def position_increments(x, kernel, bias) -> jax.Array:
    """softplus(w_k·x_t + b_k): x [B, L, D], kernel [D, K], bias [K] -> [B, L, K], in at least
    float32 (float64 for float64 inputs)."""
    dtype = rope.angle_dtype(jnp.result_type(x, kernel, bias))
    logits = jnp.einsum("BLD,DK->BLK", x.astype(dtype), kernel.astype(dtype)) + bias.astype(dtype)
    return jax.nn.softplus(logits)


def cumulative_positions(increments, segment_ids=None, start=None) -> jax.Array:
    """p_t = start + Σ_{s<=t} increments_s along L, restarted (from 0) at each segment's start.

    increments [B, L, K]; segment_ids int [B, L] or None; start [B, K], the sum carried from
    the tokens before (decoding), or None for 0. Returns [B, L, K] in increments' dtype.
    A segmented scan rather than differences of one running sum: a long row's sum would eat
    the digits of a late document's small positions.
    """
    if start is not None:
        increments = increments.at[:, 0].add(start.astype(increments.dtype))
    if segment_ids is None:
        return jnp.cumsum(increments, axis=1)
    restarts = jnp.broadcast_to(segments.segment_starts(segment_ids)[..., None], increments.shape)

    def combine(earlier, later):  # (sum, restarted) of a run, then of the run after it
        (a, restarted_a), (b, restarted_b) = earlier, later
        return jnp.where(restarted_b, b, a + b), restarted_a | restarted_b

    positions, _ = jax.lax.associative_scan(combine, (increments, restarts), axis=1)
    return positions


def real_rope_rotation(positions, *, base: float = 10000.0) -> rope.Rotation:
    """RoPE at real-valued positions [B, L, K], each key/value head its own (interleaved
    pairs, all F features rotated, θ_i = base^(-2i/F)).

    The plain formula: angles p·θ_i in the dtype of the positions and x promoted to at least
    float32 (float64 under x64), then `rope.rotate_by_angles`; RoPE's exact phase is for
    integer positions. Accurate to the rounding of p·θ_i, which grows with p as
    `rope.apply_rope`'s exact=False path does. The q of query head n is rotated at its group's
    positions, so that N / K query heads share each key's.
    """

    def rotate(x):  # [B, L, N or K, F]
        heads, features = x.shape[-2], x.shape[-1]
        rope_layouts.check_dim(features, "rotated features")
        dtype = jnp.promote_types(rope.angle_dtype(x.dtype), positions.dtype)
        groups = jnp.repeat(positions.astype(dtype), heads // positions.shape[-1], axis=-1)
        theta = rope_scaling.plain_frequencies(features, base)  # [F/2]
        angles = groups[..., None] * jnp.asarray(theta, dtype)  # [B, L, N or K, F/2]
        return rope.rotate_by_angles(x, angles)

    return rope.Rotation(q=rotate, k=rotate)


class LearnedPositions(nn.Module):
    """The layer's positions p [B, L, K] from its input x [B, L, D]: the parameters "kernel"
    [D, K] and "bias" [K]; with `decoding`, the running sum [B, K] in the "cache" collection,
    each call's tokens following those of the calls before."""

    kv_heads: int
    initializer_range: float

    @nn.compact
    def __call__(self, x, segment_ids=None, decoding: bool = False):
        init = nn.initializers.normal(self.initializer_range)
        kernel = self.param("kernel", init, (x.shape[-1], self.kv_heads), jnp.float32)
        bias = self.param("bias", nn.initializers.constant(INIT_BIAS), (self.kv_heads,))
        increments = position_increments(x, kernel, bias)  # [B, L, K]
        if not decoding:
            return cumulative_positions(increments, segment_ids)
        carried = self.variable("cache", "positions", jnp.zeros, increments[:, 0].shape)
        positions = cumulative_positions(increments, start=carried.value)
        carried.value = positions[:, -1].astype(carried.value.dtype)
        return positions


def rotation(section: LearnedPositionSection, config, position_ids, seq_len, layer, x, segment_ids):
    """positions.ENCODINGS' rotation hook: the layer's learned positions from x (its own
    parameters, "position_gate"), RoPE at them. seq_len is given when decoding; the position
    ids are not read: the positions are learned."""
    del position_ids, layer
    learned = LearnedPositions(config.kv_heads, config.initializer_range, name="position_gate")
    positions = learned(x, segment_ids, decoding=seq_len is not None)  # [B, L, K]
    return real_rope_rotation(positions, base=section.base)
