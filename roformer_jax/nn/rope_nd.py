"""RoPE over several position axes: time, height and width, or the x and y of an image.

A token has a position on each of A axes, p = (p_1, ..., p_A), and pair i of its features is
rotated by the angle

    φ_i(p) = Σ_a p_a · f[a, i]

so ⟨R_p q, R_p' k⟩ depends on p' - p only, axis by axis: a shift along one axis leaves every
score unchanged. The frequencies f say which axes a pair follows:
  RoPE (A = 1)           f[0, i] = θ_i = base^(-2i/R), `rope.apply_rope` exactly.
  RoPE-Axial             the pairs split evenly over the axes, each block a RoPE of its own
                         (Heo et al. 2024, "Rotary position embedding for vision transformer",
                         eq. 10): `axial_frequencies`.
  M-RoPE                 Qwen2-VL's blocks of `mrope_section` pairs on time, height and width
                         (Wang et al. 2024, "Qwen2-VL", sec. 2.1), or Qwen3-VL's interleaved
                         form, where the pairs cycle T, H, W: `mrope_frequencies`. HF's
                         positions [3, B, L] are [B, L, 3] here.
  RoPE-Mixed             every pair follows every axis with learned f, per head (Heo et al.
                         2024, eq. 11): f of shape [N, A, P], a parameter.

Glossary of shapes:
  B  batch
  L  sequence length
  N  attention heads
  H  head dim
  A  position axes
  P  rotated pairs (the first R = 2P of the H features are rotated; the rest pass through)
"""

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import _rope_exact, rope, rope_layouts, rope_scaling


def apply_rope_nd(x, positions, freqs, *, layout: str = "interleaved", exact: bool = True):
    """Rotates pair i of x's features by Σ_a p_a · f[a, i] (per head when f is).

    Args:
      x: floating array of shape [B, L, N, H].
      positions: array of shape [B, L, A] or [L, A], integer or floating.
      freqs: array of shape [A, P] (every head alike) or [N, A, P] (per head), 2P <= H.
        Numpy arrays (or lists) are constants of the model; jax arrays (learned frequencies)
        are differentiated.
      layout: which features form a pair, "interleaved" or "half" (`rope_layouts.py`).
      exact: True (the default) for `rope.apply_rope`'s exact path (`_rope_exact.py`): with
        constant frequencies and integer positions each axis's angle is an exact phase, and
        with A = 1 this is apply_rope's computation, bit for bit given the same frequencies;
        learned frequencies take float32 products p_a · f[a, i] / 2π, exact enough at the
        positions of an image or a short text. False for the formula as written here.

    Returns:
      Array of x's shape and dtype.
    """
    rope_layouts.check_layout(layout)
    positions = jnp.asarray(positions)
    if not isinstance(freqs, jax.Array):  # lists too: constants
        freqs = np.asarray(freqs, np.float64)
    per_head = _validate(x, positions, freqs)
    dtype = rope.angle_dtype(x.dtype)
    if exact:  # the same rotation at exact phases, fast on XLA's CPU
        return _rope_exact.apply_rope_nd(x, positions, freqs, per_head, layout, dtype)
    spec = "...la,nap->...lnp" if per_head else "...la,ap->...lp"
    # Σ_a p_a · f[a, i]: [..., L, (N,) P]
    angles = jnp.einsum(spec, positions.astype(dtype), jnp.asarray(freqs, dtype))
    if not per_head:
        angles = angles[..., None, :]  # [..., L, 1, P]: every head alike
    return rope.rotate_by_angles(x, angles, layout=layout)


def _validate(x, positions, freqs) -> bool:
    """Checks the shapes against each other; returns whether the frequencies are per head."""
    rope_layouts.check_float(x)
    if x.ndim != 4:
        raise ValueError(f"x has shape {x.shape}; expected [B, L, N, H]")
    b, length, heads, head_dim = x.shape
    if positions.ndim not in (2, 3) or positions.shape[-2] != length:
        raise ValueError(
            f"positions of shape {positions.shape} do not fit x of shape {x.shape}; expected "
            f"[B, L, A] or [L, A] with L = {length}"
        )
    if positions.ndim == 3 and positions.shape[0] not in (1, b):
        raise ValueError(f"positions of shape {positions.shape} do not fit batch {b} of x")
    if freqs.ndim not in (2, 3):
        raise ValueError(f"freqs of shape {freqs.shape}; expected [A, P] or [N, A, P]")
    axes, pairs = freqs.shape[-2:]
    if axes != positions.shape[-1]:
        raise ValueError(
            f"positions of shape {positions.shape} have {positions.shape[-1]} axes, but freqs "
            f"of shape {freqs.shape} are for {axes}"
        )
    if freqs.ndim == 3 and freqs.shape[0] != heads:
        raise ValueError(
            f"freqs of shape {freqs.shape} are for {freqs.shape[0]} heads, x has {heads}"
        )
    if not 0 < 2 * pairs <= head_dim:
        raise ValueError(
            f"freqs of shape {freqs.shape} rotate {2 * pairs} features; head dim is {head_dim}"
        )
    return freqs.ndim == 3


def axial_frequencies(rotary_dim: int, num_axes: int, *, base: float = 10000.0) -> np.ndarray:
    """RoPE-Axial (Heo et al. 2024, eq. 10): the P = R/2 pairs in A equal blocks, block a on
    axis a with the frequencies of a RoPE of R/A features, base^(-2·A·j/R) for j < P/A.

    A = 1 is RoPE's own θ_i = base^(-2i/R). Returns numpy float64 [A, P] (zero off the block).
    """
    rope_layouts.check_dim(rotary_dim, "rotary dim")
    pairs = rotary_dim // 2
    if num_axes < 1 or pairs % num_axes:
        raise ValueError(
            f"rotary dim {rotary_dim} has {pairs} pairs, which do not split evenly over "
            f"{num_axes} axes"
        )
    block = pairs // num_axes
    freqs = np.zeros((num_axes, pairs))
    theta = rope_scaling.scaled_frequencies(2 * block, base=base, dtype=np.float64)[0]
    for a in range(num_axes):
        freqs[a, a * block : (a + 1) * block] = theta
    return freqs


def mrope_frequencies(
    head_dim: int, sections, *, base: float = 10000.0, interleaved: bool = False
) -> np.ndarray:
    """M-RoPE's frequencies: pair i keeps RoPE's θ_i = base^(-2i/H) on one axis only.

    Blocks (Qwen2-VL, `interleaved=False`): the first sections[0] pairs follow axis 0 (time),
    the next sections[1] axis 1 (height), and so on. Interleaved (Qwen3-VL): pair i follows
    axis a = i mod A while axis a still has pairs to take (i < A·sections[a]), axis 0
    otherwise, so that every axis spans high and low frequencies.

    Args:
      head_dim: H (even); all of it is rotated.
      sections: pairs per axis (HF's `mrope_section`, e.g. [16, 24, 24]), adding up to H/2.
      base: θ_i = base^(-2i/H).
      interleaved: Qwen3-VL's cycling instead of blocks.

    Returns:
      numpy float64 [A, H/2], A = len(sections), θ_i in the row of pair i's axis, 0 elsewhere.
    """
    rope_layouts.check_dim(head_dim, "head dim")
    sections = [int(s) for s in sections]
    pairs = head_dim // 2
    if not sections or min(sections) < 0 or sum(sections) != pairs:
        raise ValueError(
            f"mrope sections {sections} add up to {sum(sections)} pairs; head dim {head_dim} "
            f"rotates {pairs}"
        )
    axes = len(sections)
    if interleaved:
        index = np.arange(pairs)
        cycle = index % axes
        axis = np.where((cycle > 0) & (index < axes * np.asarray(sections)[cycle]), cycle, 0)
        counts = np.bincount(axis, minlength=axes).tolist()
        if counts != sections:
            raise ValueError(
                f"interleaved mrope sections {sections} give axes {counts} pairs of {pairs}: "
                f"axis a >= 1 takes every {axes}th pair from pair a, so needs sections[a] <= "
                f"(H/2 - a + {axes - 1}) // {axes}"
            )
    else:
        axis = np.repeat(np.arange(axes), sections)
    freqs = np.zeros((axes, pairs))
    freqs[axis, np.arange(pairs)] = rope_scaling.scaled_frequencies(
        head_dim, base=base, dtype=np.float64
    )[0]
    return freqs
