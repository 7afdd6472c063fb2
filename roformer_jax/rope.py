"""Rotary position embedding (RoPE), Su et al. 2021, "RoFormer", section 3.4.

RoPE rotates each pair of features of a query or key at position m by the angle m·θ_i,
θ_i = base^(-2i/d), so that ⟨R_m q, R_n k⟩ = ⟨q, R_{n-m} k⟩ depends on n - m only (eq. 16).

Glossary of shapes:
  B  batch
  L  sequence length
  N  attention heads
  H  head dim (features of one head)
  R  rotary dim (the first R of the H features are rotated; R = H by default)

Layouts (which features form a rotated pair):
  "interleaved"  (0, 1), (2, 3), ...        the paper's eq. (13), HF RoFormer, bert4keras
  "half"         (i, i + R/2) for i < R/2   GPT-NeoX, LLaMA

Precision: the phase m·θ_i/2π is reduced modulo one turn in integer arithmetic before any
rounding (`rotation_turns`), and sin and cos are evaluated from that phase in turns
(`cos_sin_turns`), never from a rounded angle, so they are as accurate at position 10^6 as at
position 10, for float32 and (with `jax_enable_x64`) float64 alike.
"""

import decimal
import functools
from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

LAYOUTS = ("interleaved", "half")

# Enough digits that float64 phase constants are exact after rounding.
_DIGITS = 60
_PI = decimal.Decimal(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863"
)


def _check_dim(dim: int, what: str) -> None:
    if dim <= 0 or dim % 2:
        raise ValueError(
            f"{what} {dim} is not a positive even number; RoPE rotates pairs of features"
        )


def _check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")


def rope_frequencies(dim: int, *, base: float = 10000.0) -> jnp.ndarray:
    """θ_i = base^(-2i/dim) for i < dim/2, eq. (15).

    Args:
      dim: number of rotated features R (even).
      base: the wavelength scale; 10000 in the paper, 500000 in LLaMA 3.

    Returns:
      Array of shape [R/2], float32.
    """
    _check_dim(dim, "rotary dim")
    return jnp.asarray(base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim), jnp.float32)


@functools.lru_cache(maxsize=64)
def _phase_constants(dim: int, base: float, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """θ_i / 2π in turns, split as P_i / 2^bits + δ_i with integer P_i and 0 <= δ_i < 2^-bits."""
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        scale = decimal.Decimal(2) ** bits
        ints, rests = [], []
        for i in range(dim // 2):
            turns = decimal.Decimal(base) ** (decimal.Decimal(-2 * i) / dim) / (2 * _PI)
            p = int(turns * scale)
            ints.append(p)
            rests.append(float(turns - decimal.Decimal(p) / scale))
    return np.array(ints, dtype=np.uint64), np.array(rests, dtype=np.float64)


def rotation_turns(
    positions, dim: int, *, base: float = 10000.0, dtype=jnp.float32, layout: str | None = None
):
    """The phase m·θ_i / 2π in turns, reduced to about [0, 1.5), for every position m and pair i.

    For integer positions it is computed as (m·P_i mod 2^bits)/2^bits + m·δ_i: the product
    m·P_i wraps exactly in unsigned integers, which removes whole turns without rounding, so
    the error stays near one ulp of a turn however large m is. A plain float32 product m·θ_i
    is off by about 0.03 rad at m = 10^6 (measured in tests/rope_test.py). Floating-point
    positions (interpolated positions) use the plain product m·(θ_i/2π).

    Args:
      positions: array of shape [..., L], integer (exact path) or floating.
      dim: rotary dim R (even).
      base: θ_i = base^(-2i/R).
      dtype: float32, or float64 when `jax_enable_x64` is on.
      layout: None for one phase per pair; "interleaved" or "half" for one per feature, in
        that layout's order (each pair's phase at both its features).

    Returns:
      Array of shape [..., L, R/2] (layout None) or [..., L, R] of `dtype`.
    """
    _check_dim(dim, "rotary dim")
    dtype = jnp.dtype(dtype)
    positions = jnp.asarray(positions)

    def per_feature(values):  # numpy [R/2] -> [R/2], or [R] in layout order
        if layout is None:
            return values
        _check_layout(layout)
        return np.repeat(values, 2) if layout == "interleaved" else np.tile(values, 2)

    if not jnp.issubdtype(positions.dtype, jnp.integer):
        turns = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim) / (2 * np.pi)
        return positions.astype(dtype)[..., None] * jnp.asarray(per_feature(turns), dtype)
    bits = 64 if dtype == jnp.float64 else 32
    uint = jnp.uint64 if bits == 64 else jnp.uint32
    ints, rests = (per_feature(c) for c in _phase_constants(dim, float(base), bits))
    if bits == 32:
        ints = ints.astype(np.uint32)
    m = positions[..., None]  # [..., L, 1]
    # Casting a negative int to unsigned adds 2^bits, a whole number of turns after the product.
    wrapped = m.astype(uint) * jnp.asarray(ints, uint)  # [..., L, R/2 or R]
    return wrapped.astype(dtype) * dtype.type(2.0**-bits) + m.astype(dtype) * jnp.asarray(
        rests, dtype
    )


def rotation_angles(positions, dim: int, *, base: float = 10000.0, dtype=jnp.float32):
    """Angles m·θ_i = 2π · `rotation_turns`, about [0, 3π): same arguments, same shape."""
    turns = rotation_turns(positions, dim, base=base, dtype=dtype)
    return turns * turns.dtype.type(2 * np.pi)


@functools.lru_cache(maxsize=4)
def _taylor_coefficients(dtype) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Coefficients in s² of sin(2πs)/s and cos(2πs) for |s| <= 1/8, to `dtype`'s precision."""
    eps = decimal.Decimal(float(jnp.finfo(dtype).eps)) / 8
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        x = 2 * _PI / 8  # the largest |2πs|
        sin, cos, k, factorial = [], [], 0, decimal.Decimal(1)  # factorial = k!
        while True:
            term = (2 * _PI) ** k / factorial * (-1 if k % 4 in (2, 3) else 1)
            (cos if k % 2 == 0 else sin).append(float(term))
            if x**k / factorial < eps and k % 2:
                return tuple(sin), tuple(cos)
            k += 1
            factorial *= k


def _horner(u, coefficients):
    result = jnp.full_like(u, coefficients[-1])
    for c in reversed(coefficients[:-1]):
        result = result * u + c
    return result


def cos_sin_turns(turns):
    """cos(2πt) and sin(2πt), element-wise, for a phase t in turns (float32 or float64).

    t - round(t) and a further quarter turn n/4 come off exactly in floating point, which
    leaves s in [-1/8, 1/8]; Taylor polynomials in s, to the dtype's precision, and the
    quadrant n do the rest. Errors stay within one ulp, below those of rounding 2πt to an
    angle first (tests/rope_test.py). Only multiplies, adds and selects: XLA's CPU backend
    vectorizes them, where jnp.cos and jnp.sin are a scalar libm call per element, which at
    B = 1 made RoPE's tables cost more than the rotation itself.

    Returns:
      (cos, sin), each of `turns`' shape and dtype.
    """
    remainder = turns - jnp.round(turns)  # [-1/2, 1/2]
    quadrant = jnp.round(4 * remainder)  # -2 ... 2
    s = remainder - quadrant / 4  # [-1/8, 1/8]
    u = s * s
    sin_coefficients, cos_coefficients = _taylor_coefficients(jnp.dtype(turns.dtype))
    sin, cos = s * _horner(u, sin_coefficients), _horner(u, cos_coefficients)
    # cos(nπ/2 + a), sin(nπ/2 + a) for n mod 4 = 0, 1, 2, 3: (c, s), (-s, c), (-c, -s), (s, -c).
    n = quadrant.astype(jnp.int32)
    swap = (n & 1) == 1
    cos, sin = jnp.where(swap, sin, cos), jnp.where(swap, cos, sin)
    return jnp.where((n + 1) & 2, -cos, cos), jnp.where(n & 2, -sin, sin)


def _angle_dtype(x_dtype):
    # Angles are never computed below float32 (bf16 positions would collide past 256).
    return jnp.promote_types(x_dtype, jnp.float32)


def _validate(x, positions, layout, rotary_dim, seq_axis):
    _check_layout(layout)
    if x.ndim < 2:
        raise ValueError(f"x has shape {x.shape}; expected [..., L, N, H] or [..., L, H]")
    if not -x.ndim <= seq_axis <= -2:
        raise ValueError(f"seq_axis {seq_axis} is not in [-{x.ndim}, -2] for x of shape {x.shape}")
    head_dim = x.shape[-1]
    _check_dim(head_dim, "head dim")
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    _check_dim(rotary_dim, "rotary dim")
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


def _split_pairs(x, layout):
    """x [..., R] -> (first, second) members of each pair, each [..., R/2]."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def _merge_pairs(first, second, layout):
    if layout == "interleaved":
        return jnp.stack([first, second], axis=-1).reshape(*first.shape[:-1], -1)
    return jnp.concatenate([first, second], axis=-1)


def _identity(tree):
    return tree


def _plus_zero(tree):
    return jax.tree.map(lambda a: a + 0 * a, tree)


def materialize(arrays):
    """Returns `arrays` (a pytree) unchanged, computed in full before any consumer reads them.

    XLA fuses cheap producers into element-wise consumers: RoPE's [L, R] cos and sin tables
    would be evaluated once per element of x, B·N times too often, which on the CPU made RoPE
    3x slower than a copy (benchmarks/rope.py). `lax.optimization_barrier` is removed before
    fusion; a conditional is not fused across. Its branches agree on every value (a + 0·a == a,
    NaN included) but differ, so XLA keeps it; they are module-level functions so that un-jitted
    calls reuse one compilation. On accelerators recomputing is cheap and a conditional costs a
    host round trip, so there the arrays are left to the compiler.
    """
    leaves = jax.tree.leaves(arrays)
    if jax.default_backend() != "cpu" or not leaves or leaves[0].size == 0:
        return arrays
    probe = leaves[0].reshape(-1)[0]
    return lax.cond(probe == probe, _identity, _plus_zero, arrays)


def _widen(x, dtype):
    """x.astype(dtype), with bfloat16 -> float32 as a 16-bit shift.

    XLA's CPU backend does not vectorize bfloat16 converts inside a fused loop: RoPE on bf16
    ran at half the copy bandwidth. The bit form is exact and vectorizes.
    """
    if x.dtype != jnp.bfloat16 or dtype != jnp.float32:
        return x.astype(dtype)
    bits = lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32) << 16
    return lax.bitcast_convert_type(bits, jnp.float32)


def _narrow(y, dtype):
    """y.astype(dtype), with float32 -> bfloat16 rounded to nearest even in integer arithmetic."""
    if y.dtype != jnp.float32 or dtype != jnp.bfloat16:
        return y.astype(dtype)
    bits = lax.bitcast_convert_type(y, jnp.uint32)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
    # A NaN whose payload sits in the low half would round to inf: keep it a quiet NaN.
    rounded = jnp.where(jnp.isnan(y), jnp.uint32(0x7FC0), rounded)
    return lax.bitcast_convert_type(rounded.astype(jnp.uint16), jnp.bfloat16)


def _neighbours(x):
    """x [..., R] -> (x[j + 1], x[j - 1]) at each j, zero past the ends."""
    zero = jnp.zeros_like(x[..., :1])
    return jnp.concatenate([x[..., 1:], zero], axis=-1), jnp.concatenate([zero, x[..., :-1]], -1)


def _partners(x, layout):
    """x [..., R] -> the other member of each feature's pair: b at a's place, a at b's."""
    if layout == "half":
        half = x.shape[-1] // 2
        return jnp.concatenate([x[..., half:], x[..., :half]], axis=-1)
    # x[j + 1] at even j, x[j - 1] at odd j: two shifted contiguous reads and a select, which
    # XLA's CPU backend vectorizes. Reversing a [..., R/2, 2] view does not vectorize (its
    # innermost loop has 2 steps): bf16 RoPE ran at 0.63x the copy that way (benchmarks/rope.py).
    following, preceding = _neighbours(x)
    return jnp.where(jnp.arange(x.shape[-1]) % 2 == 0, following, preceding)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def _rotate(x, cos, sin, layout):
    """x * cos + partners(x) * sin: x [..., R] rotated, given per-feature tables."""
    return x * cos + _partners(x, layout) * sin


@_rotate.defjvp
def _rotate_jvp(layout, primals, tangents):
    x, cos, sin = primals
    dx, dcos, dsin = tangents
    dy = _rotate_linear(dx, cos, sin, layout) + x * dcos + _partners(x, layout) * dsin
    return _rotate(x, cos, sin, layout), dy


def _rotate_linear(dx, cos, sin, layout):
    """_rotate(dx, cos, sin, layout), in a form whose transpose (reverse mode) is fast.

    Interleaved: shifted reads times tables that are zero at the other member of each pair.
    Its transpose vectorizes on XLA's CPU backend; that of the select in `_partners` does
    not, and made RoPE's backward pass 1.7x slower at [16, 128, 4, 64].
    """
    if layout == "half":
        return dx * cos + _partners(dx, layout) * sin
    even = jnp.arange(dx.shape[-1]) % 2 == 0
    sin_following, sin_preceding = materialize(
        (jnp.where(even, sin, 0.0), jnp.where(even, 0.0, sin))
    )
    following, preceding = _neighbours(dx)
    return dx * cos + following * sin_following + preceding * sin_preceding


def apply_rope(
    x,
    positions,
    *,
    base: float = 10000.0,
    layout: str = "interleaved",
    rotary_dim: int | None = None,
    seq_axis: int = -3,
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

    Returns:
      Array of x's shape and dtype. The rotation itself runs in at least float32.
    """
    positions, rotary_dim = _validate(x, positions, layout, rotary_dim, seq_axis)
    dtype = _angle_dtype(x.dtype)
    turns = rotation_turns(positions, rotary_dim, base=base, dtype=dtype, layout=layout)
    turns = _over_heads(turns, seq_axis)  # [..., L, (1,) R]
    # (a, b) -> (a cos - b sin, b cos + a sin) = x * cos + partners(x) * [-sin, +sin]: one
    # fused element-wise pass over features in their own order, with [..., L, (1,) R] tables
    # computed per feature (interleaving per-pair tables would not vectorize).
    cos, sin = cos_sin_turns(turns)
    half = np.ones(rotary_dim // 2, dtype)
    cos, sin = materialize((cos, sin * _merge_pairs(-half, half, layout)))
    out = _rotate(_widen(x[..., :rotary_dim], dtype), cos, sin, layout)
    out = _narrow(out, x.dtype)
    if rotary_dim == x.shape[-1]:
        return out
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)


def rotation_matrices(
    positions, head_dim: int, *, base=10000.0, layout="interleaved", rotary_dim=None, dtype=None
):
    """The dense block-diagonal rotation R_m of eq. (11), one per position.

    Slow reference: [..., L, H, H] with the identity on features past rotary_dim.

    Returns:
      Array of shape [..., L, H, H]; out[..., l, :, :] @ x[l] rotates x at positions[..., l].
    """
    _check_layout(layout)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    dtype = dtype or jnp.float32
    angles = rotation_angles(positions, rotary_dim, base=base, dtype=dtype)  # [..., L, R/2]
    cos, sin = jnp.cos(angles), jnp.sin(angles)
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


def apply_rope_complex(
    x, positions, *, base=10000.0, layout="interleaved", rotary_dim=None, seq_axis=-3
):
    """Reference: each pair as a complex number x_a + i·x_b multiplied by e^{i m θ} (eq. 12)."""
    positions, rotary_dim = _validate(x, positions, layout, rotary_dim, seq_axis)
    angles = rotation_angles(positions, rotary_dim, base=base, dtype=_angle_dtype(x.dtype))
    angles = _over_heads(angles, seq_axis)
    first, second = _split_pairs(x[..., :rotary_dim].astype(angles.dtype), layout)
    z = lax.complex(first, second) * jnp.exp(lax.complex(jnp.zeros_like(angles), angles))
    out = _merge_pairs(z.real, z.imag, layout).astype(x.dtype)
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)


def layout_permutation(head_dim: int, *, src: str, dst: str, rotary_dim: int | None = None):
    """Feature order that turns a head laid out for `src` into one laid out for `dst`.

    `new = old[..., perm]`: in "half" layout pair i is (i, i + R/2); in "interleaved" it is
    (2i, 2i + 1). Both layouts give pair i the frequency θ_i, so moving the features of q and k
    this way changes no attention score.

    Returns:
      Integer numpy array of shape [H].
    """
    _check_layout(src)
    _check_layout(dst)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    _check_dim(rotary_dim, "rotary dim")
    if rotary_dim > head_dim:
        raise ValueError(f"rotary dim {rotary_dim} exceeds head dim {head_dim}")
    to_half = np.concatenate([np.arange(0, rotary_dim, 2), np.arange(1, rotary_dim, 2)])
    perm = {
        (src, src): np.arange(rotary_dim),
        ("interleaved", "half"): to_half,
        ("half", "interleaved"): np.argsort(to_half),
    }[(src, dst)]
    return np.concatenate([perm, np.arange(rotary_dim, head_dim)])


def convert_qk_layout(w, *, head_dim: int, src: str, dst: str, rotary_dim: int | None = None):
    """Permutes the output features of a q or k projection from layout `src` to `dst`.

    Args:
      w: kernel [..., N*H] (e.g. [D, N*H]) or bias [N*H]; features grouped per head.
      head_dim: H.

    Returns:
      Array of w's shape: projections through it, rotated with `layout=dst`, give the same
      attention scores as projections through w rotated with `layout=src`.
    """
    if w.shape[-1] % head_dim:
        raise ValueError(f"last axis {w.shape[-1]} of w is not a multiple of head dim {head_dim}")
    perm = layout_permutation(head_dim, src=src, dst=dst, rotary_dim=rotary_dim)
    heads = w.shape[-1] // head_dim
    index = (np.arange(heads)[:, None] * head_dim + perm[None, :]).reshape(-1)
    return w[..., index]


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
    _check_dim(dim, "dim")
    theta = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim)  # [d/2]
    r = np.asarray(distances, dtype=np.float64)[:, None]
    partial_sums = np.cumsum(np.exp(1j * r * theta), axis=-1)  # [K, d/2]: S_j, j = 1..d/2
    return np.abs(partial_sums).mean(axis=-1)


class Rotation(NamedTuple):
    """How queries and keys are rotated before attention.

    q: [B, L, N, F] -> [B, L, N, F];  k: [B, M, N, F] -> [B, M, N, F].
    """

    q: Callable[[jax.Array], jax.Array]
    k: Callable[[jax.Array], jax.Array]


def rope_rotation(
    q_positions, k_positions=None, *, base=10000.0, layout="interleaved", rotary_dim=None
) -> Rotation:
    """RoPE at q_positions for queries and k_positions (default: the queries') for keys."""
    k_positions = q_positions if k_positions is None else k_positions
    kw = dict(base=base, layout=layout, rotary_dim=rotary_dim)
    return Rotation(
        q=functools.partial(apply_rope, positions=q_positions, **kw),
        k=functools.partial(apply_rope, positions=k_positions, **kw),
    )
