"""Rotary position embedding (RoPE), Su et al. 2021, "RoFormer", section 3.4.

RoPE rotates each pair (x_a, x_b) of features of a query or key at position m by the angle
m·θ_i, θ_i = base^(-2i/R) (eq. 15):

    (x_a, x_b) -> (x_a cos mθ_i - x_b sin mθ_i,  x_b cos mθ_i + x_a sin mθ_i)     eq. (34)

so that ⟨R_m q, R_n k⟩ = ⟨q, R_{n-m} k⟩ depends on n - m only (eq. 16). `apply_rope` is this
formula as written: the angles m·θ_i, their cos and sin, the rotation of each pair.

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

Two paths, one formula (`exact=` of `apply_rope`, tested equal in tests/rope_test.py):
  exact=False  the formula below: angles m·θ_i in float32 (float64 for float64 x), jnp.cos
               and jnp.sin. Exact to the rounding of m·θ_i, which grows with m: in float32
               ~1e-5 rad at m = 100, ~0.03 rad at m = 10^6.
  exact=True   the default, `_rope_exact.py`: the angle as an exact phase (whole turns removed
               in integer arithmetic), as accurate at position 10^6 as at 10 on every backend,
               and scheduled to run near the copy bandwidth on XLA's CPU.
The slow explicit forms (dense matrices, complex numbers), which share no code with these, and
the long-range decay bound are in `rope_reference.py`.
"""

import functools
import math
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import _rope_exact, rope_layouts, rope_scaling

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
    exact: bool = True,
):
    """Rotates features of x by their positions, element-wise (eq. 34 of the paper).

    Each pair (x_a, x_b) at position m becomes (x_a cos mθ_i - x_b sin mθ_i,
    x_b cos mθ_i + x_a sin mθ_i). No position table: any positions, any length.

    Args:
      x: floating array of shape [..., L, N, H] (seq_axis=-3, the default) or [..., L, H]
        (seq_axis=-2).
      positions: integer array of shape [L] or [B, L], its leading axes those of x before L
        or 1: offsets, gaps and packed sequences are all fine.
      base: θ_i = base^(-2i/R), positive and finite.
      layout: "interleaved" or "half", see the module docstring.
      rotary_dim: rotate only the first R features (an even int, <= H); the rest pass through.
      seq_axis: the axis of x that is L.
      scaling: None for θ_i = base^(-2i/R), or HF's rope scaling dictionary (see
        `rope_scaling.scaled_frequencies`): scaled θ_i, and cos and sin multiplied by the
        attention factor as HF does. Its "partial_rotary_factor", if any, must agree with
        rotary_dim (R = int(H·factor), H for "proportional"); its "mrope_section" (M-RoPE)
        rotates positions of one axis as RoPE does (`rope_scaling.check_rotary_dim`).
      seq_len: the length "dynamic" and "longrope" choose their frequencies by; None for L.
        HF uses max(position) + 1, which is L in a full forward pass from position 0; here it
        must be known when tracing, so pass it when positions are offset (decoding).
      exact: True (the default) for the exact phase at any position, fast on XLA's CPU
        (`_rope_exact.py`); False for the formula as written here, in float32 angles m·θ_i,
        which is as exact only where m·θ_i rounds well (small positions).

    Returns:
      Array of x's shape and dtype. The rotation itself runs in at least float32.
    """
    positions, rotary_dim = _validate(x, positions, layout, rotary_dim, seq_axis, scaling)
    dtype = angle_dtype(x.dtype)
    seq_len = x.shape[seq_axis] if seq_len is None else seq_len
    theta, attention = scaled_frequencies(
        rotary_dim, base=base, scaling=scaling, seq_len=seq_len, dtype=np.float64
    )  # θ_i [R/2], scaled where asked; the base and scaling checked on either path
    if exact:  # the same rotation at an exact phase, fast on XLA's CPU
        return _rope_exact.apply_rope(
            x, positions, dtype, rotary_dim, base, layout, seq_axis, scaling, theta, attention
        )
    angles = positions.astype(dtype)[..., None] * jnp.asarray(theta, dtype)  # [..., L, R/2]
    angles = rope_layouts.over_heads(angles, seq_axis)  # [..., L, 1, R/2]
    return rotate_by_angles(x, angles, attention=attention, layout=layout)


def rotate_by_angles(x, angles, *, attention: float = 1.0, layout: str = "interleaved"):
    """x's first R features rotated pair by pair, given each pair's angle (eq. 34).

    Args:
      x: array of shape [..., H].
      angles: the angle of each pair in radians, shape [..., R/2], broadcasting against
        x[..., :R/2] (e.g. [..., L, 1, R/2] for every head alike); its dtype is the rotation's.
      attention: cos and sin multiplied by it, as HF does for scaled RoPE (so q·k gains
        attention², YaRN eq. 22).
      layout: which features form a pair, "interleaved" or "half".

    Returns:
      Array of x's shape and dtype; features past R pass through.
    """
    rotary_dim = 2 * angles.shape[-1]
    cos, sin = jnp.cos(angles) * attention, jnp.sin(angles) * attention
    a, b = rope_layouts.split_pairs(x[..., :rotary_dim].astype(angles.dtype), layout)
    rotated = rope_layouts.merge_pairs(a * cos - b * sin, b * cos + a * sin, layout)
    return jnp.concatenate([rotated.astype(x.dtype), x[..., rotary_dim:]], axis=-1)


def angle_dtype(x_dtype):
    """The dtype RoPE's angles and rotation run in for x of `x_dtype`: at least float32, as
    bf16 positions would collide past 256 (float64 for float64 x, with `jax_enable_x64`)."""
    return jnp.promote_types(x_dtype, jnp.float32)


def _validate(x, positions, layout, rotary_dim, seq_axis, scaling):
    rope_layouts.check_layout(layout)
    rope_layouts.check_float(x)
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
    # Positions' leading axes broadcast against x's before L without adding to them, so that
    # the result keeps x's shape: [L], or [B, L] with B that of x or 1.
    lead, batch = x.shape[: x.ndim + seq_axis], positions.shape[:-1]
    if len(batch) > len(lead) or any(p not in (1, a) for p, a in zip(batch[::-1], lead[::-1])):
        raise ValueError(
            f"positions of shape {positions.shape} do not fit x of shape {x.shape} "
            f"(seq_axis={seq_axis}): expected [L] or [..., L] whose leading axes are those of "
            f"x before L, {lead}, or 1"
        )
    rope_scaling.check_rotary_dim(head_dim, rotary_dim, scaling)
    return positions, rotary_dim


def rope_frequencies(dim: int, *, base: float = 10000.0) -> jnp.ndarray:
    """θ_i = base^(-2i/dim) for i < dim/2, eq. (15).

    Args:
      dim: number of rotated features R (even).
      base: the wavelength scale; 10000 in the paper, 500000 in LLaMA 3.

    Returns:
      Array of shape [R/2], float32.
    """
    rope_layouts.check_dim(dim, "rotary dim")
    rope_scaling.check_base(base)
    return jnp.asarray(rope_scaling.plain_frequencies(dim, base), jnp.float32)


class Rotation(NamedTuple):
    """How queries and keys are rotated before attention.

    q: [B, L, N, F] -> [B, L, N, F];  k: [B, M, K, F] -> [B, M, K, F] (K key/value heads).
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
      A `Rotation` whose q and k call `apply_rope` on [B, L, N, F] and [B, M, K, F].
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
      scale_base: γ, positive and finite (0 divides by zero; below 0 the decay would grow).

    Returns:
      Array of shape [..., L, R], float32, in `layout`'s feature order.
    """
    rope_layouts.check_dim(dim, "rotary dim")
    check_scale_base(scale_base)
    zeta = (np.arange(0, dim, 2, dtype=np.float64) / dim + 0.4) / 1.4  # [R/2], in (0.29, 1)
    power = jnp.asarray(positions, jnp.float32)[..., None] / np.float32(scale_base)
    decay = jnp.asarray(zeta, jnp.float32) ** power  # [..., L, R/2]
    return rope_layouts.merge_pairs(decay, decay, layout)


def check_scale_base(scale_base) -> None:
    if not 0 < scale_base < math.inf:
        raise ValueError(f"scale_base={scale_base!r} must be positive and finite: ζ_i^(m/γ)")


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

    Args:
      q_positions: integer array of shape [L] or [B, L].
      k_positions: integer array of shape [M] or [B, M]; None for q_positions.
    """
    check_scale_base(scale_base)  # now, where it is chosen; F is known when q and k arrive
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
            decay = rope_layouts.over_heads(decay, -3)  # [(B,) L, 1, F]
            return (rotate(x).astype(jnp.float32) * decay).astype(x.dtype)

        return apply

    return Rotation(q=scaled(plain.q, q_positions, 1), k=scaled(plain.k, k_positions, -1))
