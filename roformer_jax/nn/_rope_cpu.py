"""The precision and speed machinery behind `rope.apply_rope`; read rope.py first.

Each piece below exists because a measurement asked for it, and its docstring says which:

  exact phase       `rotation_turns`, `rotation_angles`: m·θ_i/2π reduced modulo one turn in
                    integer arithmetic before any rounding, so RoPE is as accurate at position
                    10^6 as at position 10, for float32 and (with `jax_enable_x64`) float64.
  sin and cos       `cos_sin_turns`: polynomials in the phase in turns, never a rounded angle,
                    and vectorized by XLA's CPU backend where jnp.sin and jnp.cos are not.
  fusion barrier    `materialize`: keeps the [L, R] tables from being recomputed per element.
  bf16 bit casts    `widen`, `narrow`: converts that XLA's CPU backend vectorizes.
  pair partners     `partners`, `neighbours`: shifted contiguous reads instead of a reversed view.
  custom JVP        `rotate`, `rotate_linear`: a backward pass whose transpose vectorizes.

Shapes as in rope.py: L sequence length, R rotary dim; `...` is any leading axes.
This module is below rope.py and never imports it: the layout checks rope.py shares live here.
"""

import decimal
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

# Which features form a rotated pair; rope.py's docstring describes both.
LAYOUTS = ("interleaved", "half")

# Enough digits that float64 phase constants are exact after rounding.
_DIGITS = 60
_PI = decimal.Decimal(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863"
)


def check_dim(dim: int, what: str) -> None:
    if dim <= 0 or dim % 2:
        raise ValueError(
            f"{what} {dim} is not a positive even number; RoPE rotates pairs of features"
        )


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")


def merge_pairs(first, second, layout):
    """(first, second) members of each pair, each [..., R/2] -> x [..., R] in `layout`."""
    if layout == "interleaved":
        return jnp.stack([first, second], axis=-1).reshape(*first.shape[:-1], -1)
    return jnp.concatenate([first, second], axis=-1)


# --- Exact phase ---------------------------------------------------------------------------


def _split_turns(turns, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """Decimal turns t_i -> (P_i, δ_i), t_i = P_i / 2^bits + δ_i, integer P_i, 0 <= δ_i < 2^-b."""
    scale = decimal.Decimal(2) ** bits
    ints = [int(t * scale) for t in turns]
    rests = [float(t - decimal.Decimal(p) / scale) for t, p in zip(turns, ints, strict=True)]
    return np.array(ints, dtype=np.uint64), np.array(rests, dtype=np.float64)


@functools.lru_cache(maxsize=64)
def _phase_constants(dim: int, base: float, bits: int) -> tuple[np.ndarray, np.ndarray]:
    """θ_i / 2π in turns for θ_i = base^(-2i/R), computed in Decimal from base itself."""
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        turns = [
            decimal.Decimal(base) ** (decimal.Decimal(-2 * i) / dim) / (2 * _PI)
            for i in range(dim // 2)
        ]
        return _split_turns(turns, bits)


@functools.lru_cache(maxsize=64)
def _frequency_constants(inv_freq: tuple[float, ...], bits: int) -> tuple[np.ndarray, np.ndarray]:
    """θ_i / 2π in turns for any frequencies (scaled ones are not base^(-2i/R)): each float
    θ_i is taken as exact, so the phase is as precise as for the plain ones."""
    with decimal.localcontext() as ctx:
        ctx.prec = _DIGITS
        return _split_turns([decimal.Decimal(f) / (2 * _PI) for f in inv_freq], bits)


def rotation_turns(
    positions,
    dim: int,
    *,
    base: float = 10000.0,
    dtype=jnp.float32,
    layout: str | None = None,
    inv_freq=None,
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
      inv_freq: None for θ_i = base^(-2i/R), or any frequencies θ_i, numpy [R/2] (e.g. scaled
        ones from rope_scaling); `base` is then unused.

    Returns:
      Array of shape [..., L, R/2] (layout None) or [..., L, R] of `dtype`.
    """
    check_dim(dim, "rotary dim")
    dtype = jnp.dtype(dtype)
    positions = jnp.asarray(positions)

    def per_feature(values):  # numpy [R/2] -> [R/2], or [R] in layout order
        if layout is None:
            return values
        check_layout(layout)
        return np.repeat(values, 2) if layout == "interleaved" else np.tile(values, 2)

    if inv_freq is not None:
        inv_freq = np.asarray(inv_freq, np.float64)
        if inv_freq.shape != (dim // 2,):
            raise ValueError(f"inv_freq of shape {inv_freq.shape} does not fit rotary dim {dim}")
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        if inv_freq is None:
            turns = base ** (-np.arange(0, dim, 2, dtype=np.float64) / dim) / (2 * np.pi)
        else:
            turns = inv_freq / (2 * np.pi)
        return positions.astype(dtype)[..., None] * jnp.asarray(per_feature(turns), dtype)
    bits = 64 if dtype == jnp.float64 else 32
    uint = jnp.uint64 if bits == 64 else jnp.uint32
    if inv_freq is None:
        constants = _phase_constants(dim, float(base), bits)
    else:
        constants = _frequency_constants(tuple(inv_freq.tolist()), bits)
    ints, rests = (per_feature(c) for c in constants)
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


# --- sin and cos as polynomials ------------------------------------------------------------


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


# --- Fusion barrier ------------------------------------------------------------------------


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


# --- bfloat16 bit casts --------------------------------------------------------------------


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def widen(x, dtype):
    """x.astype(dtype), with bfloat16 -> float32 as a 16-bit shift.

    XLA's CPU backend does not vectorize bfloat16 converts inside a fused loop: RoPE on bf16
    ran at half the copy bandwidth. The bit form is exact and vectorizes. Its derivative is
    that of the convert (bit casts through integers would give a zero gradient).
    """
    if x.dtype != jnp.bfloat16 or dtype != jnp.float32:
        return x.astype(dtype)
    bits = lax.bitcast_convert_type(x, jnp.uint16).astype(jnp.uint32) << 16
    return lax.bitcast_convert_type(bits, jnp.float32)


@functools.partial(jax.custom_jvp, nondiff_argnums=(1,))
def narrow(y, dtype):
    """y.astype(dtype), with float32 -> bfloat16 rounded to nearest even in integer arithmetic.

    Its derivative is that of the convert, as for `widen`.
    """
    if y.dtype != jnp.float32 or dtype != jnp.bfloat16:
        return y.astype(dtype)
    bits = lax.bitcast_convert_type(y, jnp.uint32)
    rounded = (bits + (((bits >> 16) & 1) + 0x7FFF)) >> 16
    # A NaN whose payload sits in the low half would round to inf: keep it a quiet NaN.
    rounded = jnp.where(jnp.isnan(y), jnp.uint32(0x7FC0), rounded)
    return lax.bitcast_convert_type(rounded.astype(jnp.uint16), jnp.bfloat16)


@widen.defjvp
def _widen_jvp(dtype, primals, tangents):
    (x,), (dx,) = primals, tangents
    return widen(x, dtype), dx.astype(dtype)


@narrow.defjvp
def _narrow_jvp(dtype, primals, tangents):
    (y,), (dy,) = primals, tangents
    return narrow(y, dtype), dy.astype(dtype)


# --- Pair partners and the rotation with its custom JVP ------------------------------------


def neighbours(x):
    """x [..., R] -> (x[j + 1], x[j - 1]) at each j, zero past the ends."""
    zero = jnp.zeros_like(x[..., :1])
    return jnp.concatenate([x[..., 1:], zero], axis=-1), jnp.concatenate([zero, x[..., :-1]], -1)


def partners(x, layout):
    """x [..., R] -> the other member of each feature's pair: b at a's place, a at b's."""
    if layout == "half":
        half = x.shape[-1] // 2
        return jnp.concatenate([x[..., half:], x[..., :half]], axis=-1)
    # x[j + 1] at even j, x[j - 1] at odd j: two shifted contiguous reads and a select, which
    # XLA's CPU backend vectorizes. Reversing a [..., R/2, 2] view does not vectorize (its
    # innermost loop has 2 steps): bf16 RoPE ran at 0.63x the copy that way (benchmarks/rope.py).
    following, preceding = neighbours(x)
    return jnp.where(jnp.arange(x.shape[-1]) % 2 == 0, following, preceding)


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def rotate(x, cos, sin, layout):
    """x * cos + partners(x) * sin: x [..., R] rotated, given per-feature tables."""
    return x * cos + partners(x, layout) * sin


@rotate.defjvp
def _rotate_jvp(layout, primals, tangents):
    x, cos, sin = primals
    dx, dcos, dsin = tangents
    dy = rotate_linear(dx, cos, sin, layout) + x * dcos + partners(x, layout) * dsin
    return rotate(x, cos, sin, layout), dy


def rotate_linear(dx, cos, sin, layout):
    """rotate(dx, cos, sin, layout), in a form whose transpose (reverse mode) is fast.

    Interleaved: shifted reads times tables that are zero at the other member of each pair.
    Its transpose vectorizes on XLA's CPU backend; that of the select in `partners` does
    not, and made RoPE's backward pass 1.7x slower at [16, 128, 4, 64].
    """
    if layout == "half":
        return dx * cos + partners(dx, layout) * sin
    even = jnp.arange(dx.shape[-1]) % 2 == 0
    sin_following, sin_preceding = materialize(
        (jnp.where(even, sin, 0.0), jnp.where(even, 0.0, sin))
    )
    following, preceding = neighbours(dx)
    return dx * cos + following * sin_following + preceding * sin_preceding
