"""Scaling dictionaries and a long-double RoPE with given frequencies, shared by the RoPE tests
(rope_test, rope_exact_test, rope_scaling_test, model_config_rope_test)."""

import numpy as np

YARN = {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 4096}
LLAMA3 = dict(
    rope_type="llama3",
    factor=8.0,
    low_freq_factor=1.0,
    high_freq_factor=4.0,
    original_max_position_embeddings=8192,
)


def params(kind, factor, pairs):
    """A scaling dictionary of `kind` as v5 writes it (without rope_theta)."""
    longrope = dict(
        short_factor=list(np.linspace(1.0, 1.5, pairs)),
        long_factor=list(np.linspace(1.0, factor * 2, pairs)),
        factor=factor,
    )
    return {
        "default": {},
        "linear": dict(factor=factor),
        "proportional": dict(factor=factor),
        "dynamic": dict(factor=factor),
        "yarn": dict(factor=factor, beta_fast=32.0, beta_slow=1.0),
        "longrope": longrope,
        "llama3": dict(factor=factor, low_freq_factor=1.0, high_freq_factor=4.0),
    }[kind] | {"rope_type": kind, "original_max_position_embeddings": 512}


def reference_rope(x, positions, inv_freq, attention):
    """Interleaved RoPE in x87 long double with the given frequencies, rounded to float64.

    x [B, L, N, H], positions [L], inv_freq [H/2]; cos and sin times `attention` as HF does.
    """
    x = np.asarray(x, np.longdouble)
    angles = np.asarray(positions, np.longdouble)[:, None] * np.asarray(inv_freq, np.longdouble)
    cos, sin = np.cos(angles)[:, None, :] * attention, np.sin(angles)[:, None, :] * attention
    a, b = x[..., 0::2], x[..., 1::2]
    out = np.stack([a * cos - b * sin, b * cos + a * sin], -1).reshape(x.shape)
    return out.astype(np.float64)
