"""Rotary position embedding (RoPE), Su et al. 2021, "RoFormer", section 3.4.

RoPE rotates each pair (x_a, x_b) of features of a query or key at position m by the angle
m·θ_i, θ_i = base^(-2i/R) (eq. 15):

    (x_a, x_b) -> (x_a cos mθ_i - x_b sin mθ_i,  x_b cos mθ_i + x_a sin mθ_i)     eq. (34)

so that ⟨R_m q, R_n k⟩ = ⟨q, R_{n-m} k⟩ depends on n - m only (eq. 16). `apply_rope` is this
formula in three steps: the angles m·θ_i, their cos and sin, the rotation.

Glossary of shapes:
  B  batch
  L  sequence length (of the queries)
  M  key length
  N  attention heads
  H  head dim (features of one head)
  R  rotary dim (the first R of the H features are rotated; R = H by default)
  F  features of a rotated query or key: H, or a feature map's width in linear attention

Layouts (which features form a rotated pair; `rope_layouts.py`):
  "interleaved"  (0, 1), (2, 3), ...        the paper's eq. (13), HF RoFormer, bert4keras
  "half"         (i, i + R/2) for i < R/2   GPT-NeoX, LLaMA

Where the precision and the speed live, each a named call from `apply_rope`:
  rope_phase.py    the angles, as the phase m·θ_i/2π in turns reduced modulo one turn in
                   integer arithmetic: as accurate at position 10^6 as at 10, on every backend.
  rope_layouts.py  the pairs: checks, a feature's partner, moving weights between layouts.
  _rope_cpu.py     XLA CPU scheduling, each piece with the measurement that asked for it: sin
                   and cos as polynomials that vectorize, a barrier that keeps the [L, R]
                   tables from being recomputed per element of x, bfloat16 converts as bit
                   casts, the rotation with a custom JVP.
The slow explicit forms (dense matrices, complex numbers), which share no code with these, and
the long-range decay bound are in `rope_reference.py`.
"""

import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import _rope_cpu, rope_layouts, rope_phase, rope_scaling

# HF's rope scaling family (PI, NTK, dynamic NTK, YaRN, LongRoPE, Llama 3) lives in rope_scaling.py.
scaled_frequencies = rope_scaling.scaled_frequencies


def apply_rope(
    x,
    positions,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rotary_dim: int | None = None,
    seq_axis: int = -3,
    scaling=None,
    seq_len: int | None = None,
):
    """Rotates features of x by their positions, element-wise (eq. 34 of the paper).

    Each pair (x_a, x_b) at position m becomes (x_a cos mθ_i - x_b sin mθ_i,
    x_b cos mθ_i + x_a sin mθ_i). No position table: any positions, any length.

    Args:
      x: array of shape [..., L, N, H] (seq_axis=-3, the default) or [..., L, H]
        (seq_axis=-2).
      positions: integer array of shape [L] or [B, L] (leading dims broadcast against x's):
        offsets, gaps and packed sequences are all fine.
      base: θ_i = base^(-2i/R).
      layout: "interleaved" or "half", see the module docstring.
      rotary_dim: rotate only the first R features (even, <= H); the rest pass through.
      seq_axis: the axis of x that is L.
      scaling: None for θ_i = base^(-2i/R), or HF's rope scaling dictionary (see
        `rope_scaling.scaled_frequencies`): scaled θ_i, and cos and sin multiplied by the
        attention factor as HF does.
      seq_len: the length "dynamic" and "longrope" choose their frequencies by; None for L.
        HF uses max(position) + 1, which is L in a full forward pass from position 0; here it
        must be known when tracing, so pass it when positions are offset (decoding).

    Returns:
      Array of x's shape and dtype. The rotation itself runs in at least float32.
    """
    positions, rotary_dim = _validate(x, positions, layout, rotary_dim, seq_axis)
    dtype = _angle_dtype(x.dtype)
    seq_len = x.shape[seq_axis] if seq_len is None else seq_len
    inv_freq, attention = _frequencies(rotary_dim, base, scaling, seq_len)
    # The angles m·θ_i, as the exact phase m·θ_i/2π in turns, one per feature in the layout's
    # order (each pair's angle at both of its features): [..., L, R].
    turns = rope_phase.rotation_turns(
        positions, rotary_dim, base=base, dtype=dtype, layout=layout, inv_freq=inv_freq
    )
    return rotate_by_turns(x, _over_heads(turns, seq_axis), attention=attention, layout=layout)


def rotate_by_turns(x, turns, *, attention: float = 1.0, layout: str = "interleaved"):
    """The rotation step of `apply_rope`, given its angles: x's first R features rotated.

    Shared by `apply_rope` and `rope_nd.apply_rope_nd` (the same operations, so the same
    speed and bits for the same angles).

    Args:
      x: array of shape [..., H].
      turns: the angle of each feature in turns (each pair's at both of its features, in
        `layout`'s order), float32 or float64: shape [..., R], broadcasting against
        x[..., :R] (e.g. [..., L, 1, R] for every head alike, [..., L, N, R] per head).
      attention: cos and sin multiplied by it, as HF does for scaled RoPE.
      layout: "interleaved" or "half".

    Returns:
      Array of x's shape and dtype; features past R pass through.
    """
    rotary_dim, dtype = turns.shape[-1], turns.dtype
    cos, sin = _cos_sin(turns, attention, layout)  # [..., R]
    # The rotation: (a, b) -> (a cos - b sin, b cos + a sin) = x·cos + partners(x)·[-sin, +sin],
    # partners(x) putting b at a's place and a at b's, in at least float32.
    rotated = _rope_cpu.rotate(_rope_cpu.widen(x[..., :rotary_dim], dtype), cos, sin, layout)
    out = _rope_cpu.narrow(rotated, x.dtype)  # back to x's dtype
    if rotary_dim == x.shape[-1]:
        return out
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)  # features past R pass through


def _frequencies(rotary_dim, base, scaling, seq_len):
    """(θ_i, attention factor); θ_i is None for base^(-2i/R), made exact from base itself."""
    if rope_scaling.is_plain(scaling):
        return None, 1.0
    # float64: at position 10^6 a float32 θ_i would already be off by ~0.1 rad.
    return scaled_frequencies(
        rotary_dim, base=base, scaling=scaling, seq_len=seq_len, dtype=np.float64
    )


def _cos_sin(turns, attention, layout):
    """cos and sin of a phase in turns [..., R]; the sin signed -sin at a, +sin at b.

    One fused element-wise pass over the features in their own order then rotates x
    (interleaving per-pair tables would not vectorize); on the CPU the tables are computed
    once, not per element of x (`_rope_cpu.materialize`).
    """
    dtype = turns.dtype
    cos, sin = _rope_cpu.cos_sin_turns(turns)
    if attention != 1.0:  # HF scales cos and sin, so q·k gains attention² (YaRN eq. 22)
        cos, sin = cos * dtype.type(attention), sin * dtype.type(attention)
    ones = np.ones(turns.shape[-1] // 2, dtype)
    sin = sin * rope_layouts.merge_pairs(-ones, ones, layout)  # -sin at a, +sin at b
    return _rope_cpu.materialize((cos, sin))


def _angle_dtype(x_dtype):
    # Angles are never computed below float32 (bf16 positions would collide past 256).
    return jnp.promote_types(x_dtype, jnp.float32)


def _validate(x, positions, layout, rotary_dim, seq_axis):
    rope_layouts.check_layout(layout)
    if x.ndim < 2:
        raise ValueError(f"x has shape {x.shape}; expected [..., L, N, H] or [..., L, H]")
    if not -x.ndim <= seq_axis <= -2:
        raise ValueError(f"seq_axis {seq_axis} is not in [-{x.ndim}, -2] for x of shape {x.shape}")
    head_dim = x.shape[-1]
    rope_layouts.check_dim(head_dim, "head dim")
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    rope_layouts.check_dim(rotary_dim, "rotary dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary dim {rotary_dim} exceeds head dim {head_dim}")
    positions = jnp.asarray(positions)
    length = x.shape[seq_axis]
    if positions.ndim == 0 or positions.shape[-1] != length:
        raise ValueError(
            f"positions of shape {positions.shape} do not match sequence length {length} "
            f"of x with shape {x.shape} (seq_axis={seq_axis})"
        )
    return positions, rotary_dim


def _over_heads(table, seq_axis):
    """[..., L, K] -> [..., L, 1, ..., 1, K]: one singleton per axis between L and H (heads)."""
    for _ in range(-seq_axis - 2):
        table = table[..., None, :]
    return table


def rope_frequencies(dim: int, *, base: float = 10000.0) -> jnp.ndarray:
    """θ_i = base^(-2i/dim) for i < dim/2, eq. (15).

    Args:
      dim: number of rotated features R (even).
      base: the wavelength scale; 10000 in the paper, 500000 in LLaMA 3.

    Returns:
      Array of shape [R/2], float32.
    """
    rope_layouts.check_dim(dim, "rotary dim")
    return jnp.asarray(base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim), jnp.float32)


class Rotation(NamedTuple):
    """How queries and keys are rotated before attention.

    q: [B, L, N, F] -> [B, L, N, F];  k: [B, M, N, F] -> [B, M, N, F].
    """

    q: Callable[[jax.Array], jax.Array]
    k: Callable[[jax.Array], jax.Array]


def rope_rotation(
    q_positions,
    k_positions=None,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rotary_dim: int | None = None,
    scaling=None,
    seq_len: int | None = None,
) -> Rotation:
    """RoPE at q_positions for queries and k_positions (default: the queries') for keys.

    Args:
      q_positions: integer array of shape [L] or [B, L].
      k_positions: integer array of shape [M] or [B, M]; None for q_positions.
      base, layout, rotary_dim, scaling, seq_len: as in `apply_rope`.

    Returns:
      A `Rotation` whose q and k call `apply_rope` on [B, L, N, F] and [B, M, N, F].
    """
    # The layout is checked now, so that a misspelt one fails where it is chosen; F is known
    # only when q and k arrive.
    rope_layouts.check_layout(layout)
    k_positions = q_positions if k_positions is None else k_positions
    rotate = functools.partial(
        apply_rope,
        base=base,
        layout=layout,
        rotary_dim=rotary_dim,
        scaling=scaling,
        seq_len=seq_len,
    )
    return Rotation(
        q=functools.partial(rotate, positions=q_positions),
        k=functools.partial(rotate, positions=k_positions),
    )


def xpos_decay(positions, dim: int, *, scale_base: float = 512.0, layout: str = "interleaved"):
    """xPos's per-feature scale ζ_i^(m/γ) (Sun et al. 2022, "A length-extrapolatable
    transformer", eq. 5-6; ζ_i = (2i/R + 0.4)/1.4 as in rotary-embedding-torch), γ = scale_base.

    Queries are multiplied by it and keys by its inverse, so a score gains ζ_i^((m-n)/γ): a
    decay with distance on top of RoPE's rotation, still a function of m - n only.

    Args:
      positions: array of shape [..., L] (centred by the caller: ζ^(±m/γ) overflows far out).
      dim: R, the rotated features.

    Returns:
      Array of shape [..., L, R], float32, in `layout`'s feature order.
    """
    rope_layouts.check_dim(dim, "rotary dim")
    zeta = (np.arange(0, dim, 2, dtype=np.float64) / dim + 0.4) / 1.4  # [R/2], in (0.29, 1)
    power = jnp.asarray(positions, jnp.float32)[..., None] / np.float32(scale_base)
    decay = jnp.asarray(zeta, jnp.float32) ** power  # [..., L, R/2]
    return rope_layouts.merge_pairs(decay, decay, layout)


def xpos_rotation(
    q_positions,
    k_positions=None,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    scale_base: float = 512.0,
    scaling=None,
    seq_len: int | None = None,
) -> Rotation:
    """xPos: RoPE, then q times `xpos_decay` at m and k times its inverse at n.

    Positions are measured from a centre, the same for q and k, so the offset cancels in
    every score and neither factor overflows: the middle of the queries' positions (as
    rotary-embedding-torch does with seq_len // 2), or (seq_len - 1) // 2 when seq_len is
    given, which keeps the centre fixed while a sequence is decoded a block at a time.
    `scaling` and `seq_len` as in `apply_rope`. All of F is rotated and scaled.
    """
    plain = rope_rotation(
        q_positions, k_positions, base=base, layout=layout, scaling=scaling, seq_len=seq_len
    )
    k_positions = q_positions if k_positions is None else k_positions
    q_positions, k_positions = jnp.asarray(q_positions), jnp.asarray(k_positions)
    if seq_len is None:
        centre = (jnp.min(q_positions) + jnp.max(q_positions)) // 2
    else:
        centre = (seq_len - 1) // 2

    def scaled(rotate, positions, sign):
        def apply(x):  # [B, L, N, F]
            offset = sign * (positions - centre)
            decay = xpos_decay(offset, x.shape[-1], scale_base=scale_base, layout=layout)
            decay = _over_heads(decay, -3)  # [(B,) L, 1, F]
            return (rotate(x).astype(jnp.float32) * decay).astype(x.dtype)

        return apply

    return Rotation(q=scaled(plain.q, q_positions, 1), k=scaled(plain.k, k_positions, -1))
