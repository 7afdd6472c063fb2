"""Which features of a head RoPE rotates together, and moving weights from one layout to another.

Layouts (rope.py's docstring has the formula they serve):
  "interleaved"  (0, 1), (2, 3), ...        the paper's eq. (13), HF RoFormer, bert4keras
  "half"         (i, i + R/2) for i < R/2   GPT-NeoX, LLaMA
Both give pair i the frequency θ_i, so a head laid out for one is a permutation of a head laid
out for the other, with the same attention scores.

Shapes as in rope.py: L sequence length, H head dim, R rotary dim (the first R of the H
features are rotated); `...` is any leading axes.
"""

import jax.numpy as jnp
import numpy as np

from roformer_jax.nn.sections import as_int

LAYOUTS = ("interleaved", "half")


def check_dim(dim: int, what: str) -> None:
    if as_int(dim) is None:
        raise ValueError(f"{what} {dim!r} is not an int; RoPE rotates pairs of features")
    if dim <= 0 or dim % 2:
        raise ValueError(
            f"{what} {dim} is not a positive even number; RoPE rotates pairs of features"
        )


def check_float(x) -> None:
    """RoPE rotates real features: an integer x would be truncated, silently."""
    if not jnp.issubdtype(x.dtype, jnp.floating):
        raise ValueError(
            f"x has dtype {x.dtype}; RoPE rotates floating-point features: cast x to a float "
            "dtype (float32, bfloat16)"
        )


def check_layout(layout: str) -> None:
    if layout not in LAYOUTS:
        raise ValueError(f"layout {layout!r} is not one of {LAYOUTS}")


def split_pairs(x, layout):
    """x [..., R] in `layout` -> (first, second) members of each pair, each [..., R/2]."""
    if layout == "interleaved":
        return x[..., 0::2], x[..., 1::2]
    half = x.shape[-1] // 2
    return x[..., :half], x[..., half:]


def merge_pairs(first, second, layout):
    """(first, second) members of each pair, each [..., R/2] -> x [..., R] in `layout`."""
    if layout == "interleaved":
        return jnp.stack([first, second], axis=-1).reshape(*first.shape[:-1], -1)
    return jnp.concatenate([first, second], axis=-1)


def over_heads(table, seq_axis: int):
    """A per-position table [..., L, K] -> [..., L, 1, ..., 1, K], one singleton per axis of x
    between its L (at `seq_axis`) and H (the heads), so that it broadcasts against x."""
    for _ in range(-seq_axis - 2):
        table = table[..., None, :]
    return table


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


def layout_permutation(head_dim: int, *, src: str, dst: str, rotary_dim: int | None = None):
    """Feature order that turns a head laid out for `src` into one laid out for `dst`.

    `new = old[..., perm]`: in "half" layout pair i is (i, i + R/2); in "interleaved" it is
    (2i, 2i + 1). Both layouts give pair i the frequency θ_i, so moving the features of q and k
    this way changes no attention score.

    Returns:
      Integer numpy array of shape [H].
    """
    check_layout(src)
    check_layout(dst)
    rotary_dim = head_dim if rotary_dim is None else rotary_dim
    check_dim(rotary_dim, "rotary dim")
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
