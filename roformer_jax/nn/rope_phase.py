"""The angle m·θ_i of RoPE as an exact phase, on every backend; read rope.py first.

`rotation_turns` gives m·θ_i / 2π in turns, reduced modulo one turn in integer arithmetic
before any rounding, so RoPE is as accurate at position 10^6 as at position 10, in float32 and
(with `jax_enable_x64`) in float64. A plain float32 product m·θ_i is off by about 0.03 rad at
m = 10^6. `rotation_angles` is the same phase in radians, for the sinusoidal table.

The constants θ_i / 2π are computed once per (R, base) in Decimal from base itself, never from
a rounded θ_i, and split into an integer part of `bits` bits and a small remainder.

Shapes as in rope.py: L sequence length, R rotary dim; `...` is any leading axes.
"""

import decimal
import functools

import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import rope_layouts, rope_scaling

# Enough digits that float64 phase constants are exact after rounding.
DECIMAL_DIGITS = 60
DECIMAL_PI = decimal.Decimal(
    "3.14159265358979323846264338327950288419716939937510582097494459230781640628620899863"
)


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
        ctx.prec = DECIMAL_DIGITS
        turns = [
            decimal.Decimal(base) ** (decimal.Decimal(-2 * i) / dim) / (2 * DECIMAL_PI)
            for i in range(dim // 2)
        ]
        return _split_turns(turns, bits)


@functools.lru_cache(maxsize=64)
def _frequency_constants(inv_freq: tuple[float, ...], bits: int) -> tuple[np.ndarray, np.ndarray]:
    """θ_i / 2π in turns for any frequencies (scaled ones are not base^(-2i/R)): each float
    θ_i is taken as exact, so the phase is as precise as for the plain ones."""
    with decimal.localcontext() as ctx:
        ctx.prec = DECIMAL_DIGITS
        return _split_turns([decimal.Decimal(f) / (2 * DECIMAL_PI) for f in inv_freq], bits)


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
    is off by about 0.03 rad at m = 10^6 (tests/rope_test.py, tests/rope_exact_test.py).
    Floating-point positions (interpolated positions) use the plain product m·(θ_i/2π).

    Args:
      positions: array of shape [..., L], integer (exact path) or floating.
      dim: rotary dim R (even).
      base: θ_i = base^(-2i/R), positive and finite.
      dtype: float32, or float64 when `jax_enable_x64` is on.
      layout: None for one phase per pair; "interleaved" or "half" for one per feature, in
        that layout's order (each pair's phase at both its features).
      inv_freq: None for θ_i = base^(-2i/R), or any frequencies θ_i, numpy [R/2] (e.g. scaled
        ones from rope_scaling); `base` is then unused.

    Returns:
      Array of shape [..., L, R/2] (layout None) or [..., L, R] of `dtype`.
    """
    rope_layouts.check_dim(dim, "rotary dim")
    dtype = jnp.dtype(dtype)
    positions = jnp.asarray(positions)
    if inv_freq is None:
        rope_scaling.check_base(base)
    else:
        inv_freq = np.asarray(inv_freq, np.float64)
        if inv_freq.shape != (dim // 2,):
            raise ValueError(f"inv_freq of shape {inv_freq.shape} does not fit rotary dim {dim}")
    if not jnp.issubdtype(positions.dtype, jnp.integer):
        return _plain_turns(
            positions, dim, base=base, dtype=dtype, layout=layout, inv_freq=inv_freq
        )
    bits = 64 if dtype == jnp.float64 else 32
    uint = jnp.uint64 if bits == 64 else jnp.uint32
    if inv_freq is None:
        constants = _phase_constants(dim, float(base), bits)
    else:
        constants = _frequency_constants(tuple(inv_freq.tolist()), bits)
    ints, rests = (_per_feature(c, layout) for c in constants)
    if bits == 32:
        ints = ints.astype(np.uint32)
    m = positions[..., None]  # [..., L, 1]
    # Casting a negative int to unsigned adds 2^bits, a whole number of turns after the product.
    wrapped = m.astype(uint) * jnp.asarray(ints, uint)  # [..., L, R/2 or R]
    return wrapped.astype(dtype) * dtype.type(2.0**-bits) + m.astype(dtype) * jnp.asarray(
        rests, dtype
    )


def _plain_turns(positions, dim: int, *, base: float, dtype, layout: str | None, inv_freq):
    """`rotation_turns` of floating-point positions [..., L]: the plain product m·(θ_i/2π), as
    interpolated positions are not whole numbers that the exact path could wrap."""
    if inv_freq is None:
        turns = rope_scaling.plain_frequencies(dim, base) / (2 * np.pi)
    else:
        turns = inv_freq / (2 * np.pi)
    return positions.astype(dtype)[..., None] * jnp.asarray(_per_feature(turns, layout), dtype)


def _per_feature(values: np.ndarray, layout: str | None) -> np.ndarray:
    """numpy [R/2], one value per pair -> itself (layout None), or [R] in the layout's order
    (each pair's value at both its features)."""
    if layout is None:
        return values
    rope_layouts.check_layout(layout)
    return np.repeat(values, 2) if layout == "interleaved" else np.tile(values, 2)


def rotation_angles(positions, dim: int, *, base: float = 10000.0, dtype=jnp.float32):
    """Angles m·θ_i = 2π · `rotation_turns`, about [0, 3π): same arguments, same shape."""
    turns = rotation_turns(positions, dim, base=base, dtype=dtype)
    return turns * turns.dtype.type(2 * np.pi)
