"""Slow explicit forms of RoPE, and its long-range decay (paper section 3.4.3).

The tests hold `rope.apply_rope` to these: the dense block-diagonal rotation of eq. (11) and
the complex multiplication of eq. (12), to a derived float32 bound and 1e-12 in float64.
benchmarks/rope.py times them beside it. They share no code with rope.py or the modules behind
it, since an error in shared code would pass both sides: the input checks, the pairs and the
angles are written again here, plainly.

The angles m·θ_i, θ_i = base^(-2i/R), are reduced modulo 2π in Decimal at 50 digits, once per
distinct position, then rounded to float64 for np.cos and np.sin. Plain float64 would not do:
θ_i rounded to 53 bits, times m = 70000, is off by up to ~1e-11 rad, more than the 1e-12 the
float64 tests ask. In Decimal the angle is exact before its one rounding, at any position. The
host computes them (`jax.pure_callback`), so these forms also run under jit (the attention
tests call them there), but they have no derivative in the positions.

Glossary of shapes (as in rope.py):
  L  sequence length
  H  head dim
  R  rotary dim (the first R of the H features are rotated)
  K  number of relative distances
"""

import decimal

import jax
import jax.numpy as jnp
import numpy as np

_LAYOUTS = ("interleaved", "half")
_DIGITS = 50
_PI = decimal.Decimal("3.14159265358979323846264338327950288419716939937510")


def _check_even(dim: int, what: str) -> None:
    if dim <= 0 or dim % 2:
        raise ValueError(f"{what} {dim} is not a positive even number; RoPE rotates pairs")


def _check(head_dim: int, rotary_dim: int | None, layout: str) -> int:
    """Checks the features to rotate; returns R."""
    if layout not in _LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {_LAYOUTS}")
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    _check_even(head_dim, "head dim")
    _check_even(rotary_dim, "rotary dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary dim {rotary_dim} exceeds head dim {head_dim}")
    return rotary_dim


def _pairs(rotary_dim: int, layout: str) -> tuple[np.ndarray, np.ndarray]:
    """Indices (a_i, b_i) of pair i's two features, each [R/2]."""
    i = np.arange(rotary_dim // 2)
    if layout == "interleaved":
        return 2 * i, 2 * i + 1
    return i, i + rotary_dim // 2


def angles(positions, rotary_dim: int, *, base: float = 10000.0) -> np.ndarray:
    """m·θ_i modulo 2π, θ_i = base^(-2i/R), exact before the rounding to float64.

    Args:
      positions: numpy array of shape [..., L], integer or floating (each float taken as exact).

    Returns:
      float64 numpy array of shape [..., L, R/2], in (-2π, 2π).
    """
    positions = np.asarray(positions)
    values, inverse = np.unique(positions, return_inverse=True)
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        theta = [
            decimal.Decimal(base) ** (decimal.Decimal(-2 * i) / rotary_dim)
            for i in range(rotary_dim // 2)
        ]
        table = [
            [float(decimal.Decimal(m) * t % (2 * _PI)) for t in theta] for m in values.tolist()
        ]
    table = np.array(table, np.float64).reshape(len(values), rotary_dim // 2)
    return table[inverse.reshape(positions.shape)]


def _cos_sin(positions, rotary_dim, base, dtype):
    """cos m·θ_i and sin m·θ_i, [..., L, R/2] of `dtype`, computed on the host in float64."""

    def host(positions):
        radians = angles(positions, rotary_dim, base=base)
        return np.cos(radians).astype(dtype), np.sin(radians).astype(dtype)

    table = jax.ShapeDtypeStruct((*positions.shape, rotary_dim // 2), dtype)
    return jax.pure_callback(host, (table, table), positions, vmap_method="expand_dims")


def rotation_matrices(
    positions, head_dim: int, *, base=10000.0, layout="interleaved", rotary_dim=None, dtype=None
):
    """The dense block-diagonal rotation R_m of eq. (11), one per position.

    Slow reference: [..., L, H, H] with the identity on features past rotary_dim.

    Returns:
      Array of shape [..., L, H, H]; out[..., l, :, :] @ x[l] rotates x at positions[..., l].
    """
    rotary_dim = _check(head_dim, rotary_dim, layout)
    dtype = jnp.dtype(dtype or jnp.float32)
    cos, sin = _cos_sin(jnp.asarray(positions), rotary_dim, base, dtype)  # [..., L, R/2]
    a, b = _pairs(rotary_dim, layout)
    matrix = jnp.broadcast_to(jnp.eye(head_dim, dtype=dtype), (*cos.shape[:-1], head_dim, head_dim))
    matrix = matrix.at[..., a, a].set(cos).at[..., b, b].set(cos)
    return matrix.at[..., a, b].set(-sin).at[..., b, a].set(sin)


def _checked(x, positions, layout, rotary_dim, seq_axis):
    """apply_rope's contract, checked here again: (positions, R, the rotation's dtype)."""
    if x.ndim < 2 or not -x.ndim <= seq_axis <= -2:
        raise ValueError(f"x of shape {x.shape} has no sequence axis {seq_axis} before H")
    rotary_dim = _check(x.shape[-1], rotary_dim, layout)
    positions = jnp.asarray(positions)
    if positions.ndim == 0 or positions.shape[-1] != x.shape[seq_axis]:
        raise ValueError(f"positions of shape {positions.shape} do not fit x of shape {x.shape}")
    return positions, rotary_dim, jnp.promote_types(x.dtype, jnp.float32)


def apply_rope_dense(
    x, positions, *, base=10000.0, layout="interleaved", rotary_dim=None, seq_axis=-3
):
    """Reference: x multiplied by the dense matrices of `rotation_matrices`. Same contract as
    `apply_rope`; O(H^2) work per vector instead of O(H)."""
    positions, rotary_dim, dtype = _checked(x, positions, layout, rotary_dim, seq_axis)
    matrix = rotation_matrices(
        positions, x.shape[-1], base=base, layout=layout, rotary_dim=rotary_dim, dtype=dtype
    )  # [..., L, H, H]
    for _ in range(-seq_axis - 2):  # one axis per head axis: [..., L, 1, H, H]
        matrix = matrix[..., None, :, :]
    return jnp.einsum("...ij,...j->...i", matrix, x.astype(dtype)).astype(x.dtype)


def apply_rope_complex(
    x, positions, *, base=10000.0, layout="interleaved", rotary_dim=None, seq_axis=-3
):
    """Reference: each pair as a complex number x_a + i·x_b multiplied by e^{i m θ} (eq. 12)."""
    positions, rotary_dim, dtype = _checked(x, positions, layout, rotary_dim, seq_axis)
    cos, sin = _cos_sin(positions, rotary_dim, base, dtype)  # [..., L, R/2]
    for _ in range(-seq_axis - 2):  # one axis per head axis: [..., L, 1, R/2]
        cos, sin = cos[..., None, :], sin[..., None, :]
    a, b = _pairs(rotary_dim, layout)
    rotary = x[..., :rotary_dim].astype(dtype)
    z = jax.lax.complex(rotary[..., a], rotary[..., b]) * jax.lax.complex(cos, sin)
    out = jnp.zeros_like(rotary).at[..., a].set(z.real).at[..., b].set(z.imag)
    return jnp.concatenate([out.astype(x.dtype), x[..., rotary_dim:]], axis=-1)


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
    _check_even(dim, "dim")
    theta = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)  # [d/2]
    r = np.asarray(distances, dtype=np.float64)[:, None]
    partial_sums = np.cumsum(np.exp(1j * r * theta), axis=-1)  # [K, d/2]: S_j, j = 1..d/2
    return np.abs(partial_sums).mean(axis=-1)
