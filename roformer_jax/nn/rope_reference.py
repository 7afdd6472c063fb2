"""Slow explicit forms of RoPE, and its long-range decay (paper section 3.4.3).

The tests hold `rope.apply_rope` to these: the dense block-diagonal rotation of eq. (11) and
the complex multiplication of eq. (12), to 1e-5 in float32 and 1e-12 in float64.
benchmarks/rope.py times them beside it.

Glossary of shapes (as in rope.py):
  L  sequence length
  H  head dim
  R  rotary dim (the first R of the H features are rotated)
  K  number of relative distances
"""

import jax.numpy as jnp
import numpy as np
from jax import lax

from roformer_jax.nn import _rope_cpu
from roformer_jax.nn.rope import _angle_dtype, _over_heads, _validate


def rotation_matrices(
    positions, head_dim: int, *, base=10000.0, layout="interleaved", rotary_dim=None, dtype=None
):
    """The dense block-diagonal rotation R_m of eq. (11), one per position.

    Slow reference: [..., L, H, H] with the identity on features past rotary_dim.

    Returns:
      Array of shape [..., L, H, H]; out[..., l, :, :] @ x[l] rotates x at positions[..., l].
    """
    _rope_cpu.check_layout(layout)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    dtype = dtype or jnp.float32
    angles = _rope_cpu.rotation_angles(positions, rotary_dim, base=base, dtype=dtype)
    cos, sin = jnp.cos(angles), jnp.sin(angles)  # [..., L, R/2]
    pairs = np.arange(rotary_dim // 2)
    a, b = (
        (2 * pairs, 2 * pairs + 1) if layout == "interleaved" else (pairs, pairs + rotary_dim // 2)
    )
    matrix = jnp.broadcast_to(
        jnp.eye(head_dim, dtype=dtype), (*angles.shape[:-1], head_dim, head_dim)
    )
    matrix = matrix.at[..., a, a].set(cos).at[..., b, b].set(cos)
    return matrix.at[..., a, b].set(-sin).at[..., b, a].set(sin)


def apply_rope_dense(
    x, positions, *, base=10000.0, layout="interleaved", rotary_dim=None, seq_axis=-3
):
    """Reference: x multiplied by the dense matrices of `rotation_matrices`. Same contract as
    `apply_rope`; O(H^2) work per vector instead of O(H)."""
    positions, rotary_dim = _validate(x, positions, layout, rotary_dim, seq_axis)
    dtype = _angle_dtype(x.dtype)
    matrix = rotation_matrices(
        positions, x.shape[-1], base=base, layout=layout, rotary_dim=rotary_dim, dtype=dtype
    )  # [..., L, H, H]
    for _ in range(-seq_axis - 2):
        matrix = matrix[..., None, :, :]
    return jnp.einsum("...ij,...j->...i", matrix, x.astype(dtype)).astype(x.dtype)


def _split_pairs(x, layout):
    """x [..., R] -> (first, second) members of each pair, each [..., R/2]."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def apply_rope_complex(
    x, positions, *, base=10000.0, layout="interleaved", rotary_dim=None, seq_axis=-3
):
    """Reference: each pair as a complex number x_a + i·x_b multiplied by e^{i m θ} (eq. 12)."""
    positions, rotary_dim = _validate(x, positions, layout, rotary_dim, seq_axis)
    angles = _rope_cpu.rotation_angles(
        positions, rotary_dim, base=base, dtype=_angle_dtype(x.dtype)
    )
    angles = _over_heads(angles, seq_axis)
    first, second = _split_pairs(x[..., :rotary_dim].astype(angles.dtype), layout)
    z = lax.complex(first, second) * jnp.exp(lax.complex(jnp.zeros_like(angles), angles))
    out = _rope_cpu.merge_pairs(z.real, z.imag, layout).astype(x.dtype)
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)


def long_range_decay(distances, *, dim: int = 128, base: float = 10000.0) -> np.ndarray:
    """The blog's upper-bound factor of RoPE's long-range decay (paper section 3.4.3, eq. 37).

    f(r) = (1/(d/2)) Σ_{j=1}^{d/2} |Σ_{i<j} e^{i r θ_i}|: the mean magnitude of the partial sums
    S_j that bound |Σ_i q_i k_i* e^{i r θ_i}| through Abel summation. Computed in float64.

    Args:
      distances: relative distances r, shape [K].
      dim: d, the rotated dimension.

    Returns:
      float64 numpy array of shape [K]; for d=128, f(0)=32.5 and f(256)≈6.543.
    """
    _rope_cpu.check_dim(dim, "dim")
    theta = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)  # [d/2]
    r = np.asarray(distances, dtype=np.float64)[:, None]
    partial_sums = np.cumsum(np.exp(1j * r * theta), axis=-1)  # [K, d/2]: S_j, j = 1..d/2
    return np.abs(partial_sums).mean(axis=-1)
