"""RoPE at an exact phase, fast on XLA's CPU: where `rope.apply_rope` hands over by default.

Read rope.py's plain `apply_rope` first: this is the same rotation, computed so that it is
accurate at any position and runs near the copy bandwidth on XLA's CPU backend
(benchmarks/rope.py). It runs on every backend and gives the same values on each.

  the phase         `rope_phase.rotation_turns`: m·θ_i / 2π in turns, whole turns removed in
                    integer arithmetic before any rounding, so position 10^6 is as accurate
                    as position 10 (a float32 product m·θ_i is off by ~0.03 rad there).
  sin and cos       `cos_sin_turns`: polynomials in the phase in turns, never a rounded angle,
                    and vectorized by XLA's CPU backend where jnp.sin and jnp.cos are not.
  fusion barrier    `materialize`: keeps the [L, R] tables from being recomputed per element.
  bf16 bit casts    `widen`, `narrow`: converts that XLA's CPU backend vectorizes.
  custom JVP        `rotate`, `rotate_linear`: a backward pass whose transpose vectorizes.

Each speed piece's docstring says which measurement asked for it; only `materialize` asks
which backend it runs on. Shapes as in rope.py: L sequence length, N heads, H head dim, R
rotary dim, A position axes, P rotated pairs; `...` is any leading axes.
"""

import decimal
import functools

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax

from roformer_jax.nn import rope_layouts, rope_phase, rope_scaling

# --- The entry points ----------------------------------------------------------------------


def apply_rope(
    x, positions, dtype, rotary_dim, base, layout, seq_axis, scaling, inv_freq, attention
):
    """`rope.apply_rope` at an exact phase: its arguments, checked, with R, the angles' dtype
    and the (scaled) frequencies θ_i float64 [R/2] and attention factor chosen by it.
    x [..., L, (N,) H] -> the same shape and dtype."""
    if rope_scaling.is_plain(scaling):
        inv_freq = None  # θ_i = base^(-2i/R), made exact from base itself
    # The angles m·θ_i, as the exact phase m·θ_i/2π in turns, one per feature in the layout's
    # order (each pair's angle at both of its features): [..., L, R]. float64 θ_i: at position
    # 10^6 a float32 θ_i would already be off by ~0.1 rad.
    turns = rope_phase.rotation_turns(
        positions, rotary_dim, base=base, dtype=dtype, layout=layout, inv_freq=inv_freq
    )
    turns = rope_layouts.over_heads(turns, seq_axis)  # [..., L, 1, R]
    return rotate_by_turns(x, turns, attention=attention, layout=layout)


def apply_rope_nd(x, positions, freqs, per_head, layout, dtype):
    """`rope_nd.apply_rope_nd` with its arguments checked: exact phases for numpy frequencies
    (constants) and integer positions, float products p_a·f[a, i]/2π in turns otherwise.

    With A = 1 and RoPE's own frequencies this is `apply_rope`'s computation, bit for bit.
    x [B, L, N, H], positions [(B,) L, A], freqs numpy or jax [(N,) A, P] -> x's shape, dtype.
    """
    if isinstance(freqs, np.ndarray) and jnp.issubdtype(positions.dtype, jnp.integer):
        turns = _exact_turns(positions, freqs if per_head else freqs[None], layout, dtype)
        if not per_head:
            turns = turns[..., 0, :]
    else:
        # The angle over 2π: the phase in turns, [..., L, (N,) P].
        freq_turns = jnp.asarray(freqs, dtype) / dtype.type(2 * np.pi)
        spec = "...la,nap->...lnp" if per_head else "...la,ap->...lp"
        turns = jnp.einsum(spec, positions.astype(dtype), freq_turns)
        turns = rope_layouts.merge_pairs(turns, turns, layout)  # each pair's at both features
    if not per_head:
        turns = turns[..., None, :]  # [..., L, 1, 2P]: every head alike
    return rotate_by_turns(x, turns, layout=layout)


def _exact_turns(positions, freqs, layout, dtype):
    """Σ_a of each axis's exact phase: positions int [..., L, A], freqs numpy [N, A, P] ->
    [..., L, N, 2P] in turns, each axis reduced modulo one turn before the sum."""
    rotary_dim = 2 * freqs.shape[-1]

    def head(f):  # [A, P] -> [..., L, 2P]
        return sum(
            rope_phase.rotation_turns(
                positions[..., a], rotary_dim, dtype=dtype, layout=layout, inv_freq=f[a]
            )
            for a in range(f.shape[0])
        )

    return jnp.stack([head(f) for f in freqs], axis=-2)


def rotate_by_turns(x, turns, *, attention: float = 1.0, layout: str = "interleaved"):
    """x's first R features rotated, given the angle of each in turns.

    Shared by `apply_rope` and `apply_rope_nd` (the same operations, so the same speed and
    bits for the same angles).

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
    rotated = rotate(widen(x[..., :rotary_dim], dtype), cos, sin, layout)
    out = narrow(rotated, x.dtype)
    if rotary_dim == x.shape[-1]:
        return out
    return jnp.concatenate([out, x[..., rotary_dim:]], axis=-1)  # features past R pass through


def _cos_sin(turns, attention, layout):
    """cos and sin of a phase in turns [..., R]; the sin signed -sin at a, +sin at b.

    One fused element-wise pass over the features in their own order then rotates x
    (interleaving per-pair tables would not vectorize); on the CPU the tables are computed
    once, not per element of x (`materialize`).
    """
    dtype = turns.dtype
    cos, sin = cos_sin_turns(turns)
    if attention != 1.0:  # HF scales cos and sin, so q·k gains attention² (YaRN eq. 22)
        cos, sin = cos * dtype.type(attention), sin * dtype.type(attention)
    ones = np.ones(turns.shape[-1] // 2, dtype)
    sin = sin * rope_layouts.merge_pairs(-ones, ones, layout)  # -sin at a, +sin at b
    return materialize((cos, sin))


# --- sin and cos as polynomials ------------------------------------------------------------


@functools.lru_cache(maxsize=4)
def _taylor_coefficients(dtype) -> tuple[tuple[float, ...], tuple[float, ...]]:
    """Coefficients in s² of sin(2πs)/s and cos(2πs) for |s| <= 1/8, to `dtype`'s precision."""
    eps = decimal.Decimal(float(jnp.finfo(dtype).eps)) / 8
    with decimal.localcontext() as ctx:
        ctx.prec = rope_phase.DECIMAL_DIGITS
        x = 2 * rope_phase.DECIMAL_PI / 8  # the largest |2πs|
        sin, cos, k, factorial = [], [], 0, decimal.Decimal(1)  # factorial = k!
        while True:
            term = (2 * rope_phase.DECIMAL_PI) ** k / factorial * (-1 if k % 4 in (2, 3) else 1)
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
    angle first (tests/rope_exact_test.py). Only multiplies, adds and selects: XLA's CPU backend
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


# --- The rotation with its custom JVP ------------------------------------------------------


@functools.partial(jax.custom_jvp, nondiff_argnums=(3,))
def rotate(x, cos, sin, layout):
    """x * cos + partners(x) * sin: x [..., R] rotated, given per-feature tables."""
    return x * cos + rope_layouts.partners(x, layout) * sin


@rotate.defjvp
def _rotate_jvp(layout, primals, tangents):
    x, cos, sin = primals
    dx, dcos, dsin = tangents
    dy = rotate_linear(dx, cos, sin, layout) + x * dcos + rope_layouts.partners(x, layout) * dsin
    return rotate(x, cos, sin, layout), dy


def rotate_linear(dx, cos, sin, layout):
    """rotate(dx, cos, sin, layout), in a form whose transpose (reverse mode) is fast.

    Interleaved: shifted reads times tables that are zero at the other member of each pair.
    Its transpose vectorizes on XLA's CPU backend; that of the select in `partners` does
    not, and made RoPE's backward pass 1.7x slower at [16, 128, 4, 64].
    """
    if layout == "half":
        return dx * cos + rope_layouts.partners(dx, layout) * sin
    even = jnp.arange(dx.shape[-1]) % 2 == 0
    sin_following, sin_preceding = materialize(
        (jnp.where(even, sin, 0.0), jnp.where(even, 0.0, sin))
    )
    following, preceding = rope_layouts.neighbours(dx)
    return dx * cos + following * sin_following + preceding * sin_preceding
