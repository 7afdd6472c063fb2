"""The attention tests' shared cases: the shapes B, L, N, H, random q, k, v, masks and
positions drawn with numpy, and every kind under test (KINDS).

Kept under the names they had in tests/attention_test.py, underscores included, so that the
tests split from it (attention_step_test.py, attention_core_test.py, ...) read as they did.
"""

import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import attention
from roformer_jax.nn.rope import rope_rotation

B, L, N, H = 2, 7, 2, 8
LINEAR_ROPES = (None, "numerator", "both", "before_feature_map")
# FAVOR+'s random matrix [F, H] for the formula tests: any matrix serves there.
FAVOR_W = np.random.default_rng(99).standard_normal((2 * H, H)).astype(np.float32)
# Every kind under test as (name, function, keywords); a rotation is added unless the
# keywords say rotation=None.
KINDS = (
    [("softmax", attention.softmax_attention, {})]
    + [("linear_None", attention.linear_attention, {"rotation": None})]
    + [(f"linear_{p}", attention.linear_attention, {"placement": p}) for p in LINEAR_ROPES[1:]]
    + [
        (
            "linear_favor",
            attention.linear_attention,
            {"feature_map": "favor", "projection": FAVOR_W},
        )
    ]
    + [("cosine", attention.cosine_attention, {})]
)


def _qkv(seed, *, length=L, keys=L, dtype=jnp.float32):
    # numpy draws: compiling jax.random.normal for each new shape costs seconds on CPU.
    rng = np.random.default_rng(seed)
    shapes = ((B, length, N, H), (B, keys, N, H), (B, keys, N, H))
    return tuple(jnp.asarray(rng.standard_normal(shape), dtype) for shape in shapes)


def _mask(seed, keys=L):
    mask = np.random.default_rng(seed).random((B, keys)) < 0.6
    mask[:, 0] = True  # every causal row keeps a real key
    return jnp.asarray(mask)


def _positions(seed, length, batched):
    """Increasing positions with gaps and an offset: [B, length] or [length]."""
    rng = np.random.default_rng(seed)
    pos = 5 + np.cumsum(rng.integers(1, 4, size=(B, length)), axis=-1)
    return jnp.asarray(pos if batched else pos[0])


def _takes_positions(kw):
    return "rotation" not in kw


def _with_positions(kw, length=L, seed=1, shift=0):
    if not _takes_positions(kw):
        return kw
    return {**kw, "rotation": rope_rotation(_positions(seed, length, batched=False) + shift)}
