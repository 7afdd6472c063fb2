"""What every attention kind takes, checked before any formula runs.

Glossary of shapes: B batch, L query length, M key length, N query heads, K key/value heads,
H head dim.

The full forms (attention.py) and decode steps (attention_step.py) call `check_inputs`
first, so that a wrong input fails naming the argument and what was expected, not as a wrong
result (an additive float mask read as "nonzero = visible", integer q, k, v rounding every
weight to 0) or as an error from deep inside a formula. The checks read shapes, dtypes and
Python values only, which are static under jit; the one value checked, log_decay <= 0
(`decay.check_log_decay`), only where it is concrete.
"""

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import decay, segments
from roformer_jax.nn.rope import Rotation


def check_array(x, name: str) -> None:
    """Raises ValueError unless x is a JAX or NumPy array (a list has no shape or dtype)."""
    if not isinstance(x, jax.Array | np.ndarray):
        raise ValueError(f"{name} must be an array; got {type(x).__name__} (jnp.asarray it)")


def check_mask(mask, keys_shape: tuple[int, int]) -> None:
    """Raises ValueError unless mask is bool [B, M] = keys_shape."""
    check_array(mask, "mask")
    if mask.dtype != bool:
        # An HF-style additive mask (0 = real, -1e4 = padding) would be read inverted.
        floating = jnp.issubdtype(mask.dtype, jnp.floating)
        hint = "an additive mask? pass mask == 0" if floating else "a 1/0 mask? pass mask == 1"
        raise ValueError(
            f"mask must be bool [B, M] (True = a real token); got {mask.dtype}: {hint}"
        )
    if mask.shape != keys_shape:
        raise ValueError(f"mask has shape {mask.shape}; expected [B, M] = {keys_shape}")


def check_inputs(q, k, v, *, mask, causal, rotation, segment_ids=None, log_decay=None) -> None:
    """Raises ValueError naming the argument that does not fit q [B, L, N, H], k, v
    [B, M, K, H] (floating, N a multiple of K): mask bool [B, M]; causal needs L == M;
    rotation a `Rotation`; segment_ids int [B, L]; log_decay [B, L, N] (`decay.py`)."""
    for name, x in (("q", q), ("k", k), ("v", v)):
        check_array(x, name)
        if not jnp.issubdtype(x.dtype, jnp.floating):
            # Integer scores and weights would round to 0: the output silently all zeros.
            raise ValueError(f"{name} has dtype {x.dtype}; q, k and v must be floating")
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            f"q, k, v must be [B, L, N, H], [B, M, K, H], [B, M, K, H]; got shapes "
            f"{q.shape}, {k.shape}, {v.shape}"
        )
    b, length, n, h = q.shape
    if k.shape[0] != b or k.shape[3] != h or v.shape != k.shape:
        raise ValueError(
            f"q {q.shape}, k {k.shape}, v {v.shape} do not agree as [B, L, N, H], [B, M, K, H]"
        )
    if n % k.shape[2]:
        raise ValueError(
            f"q {q.shape}, k {k.shape}, v {v.shape} do not agree: q's N={n} heads are not a "
            f"multiple of k and v's K={k.shape[2]} heads (grouped-query attention)"
        )
    if mask is not None:
        check_mask(mask, k.shape[:2])
    if causal and length != k.shape[1]:
        raise ValueError(f"causal attention needs L == M; got L={length}, M={k.shape[1]}")
    if rotation is not None and not isinstance(rotation, Rotation):
        raise ValueError(
            f"rotation must be a Rotation, e.g. rj.rope_rotation(positions); got "
            f"{type(rotation).__name__}"
        )
    if segment_ids is not None:
        segments.check_segment_ids(segment_ids, b, length, k.shape[1])
    if log_decay is not None:
        check_array(log_decay, "log_decay")
        decay.check_log_decay(log_decay, q.shape, causal)
