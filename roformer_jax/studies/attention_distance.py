"""Where a trained encoder's attention goes: its weight on a key as a function of |m − n|.

    probs = attention_weights(model_config, params, input_ids, attention_mask)  # [layers] of
                                                                                # [B, N, L, L]
    sums, counts = distance_sums(probs[layer], attention_mask)   # [N, L], [L]: r = 0 .. L - 1
    per_key = sums / counts   # the mean weight on one key at distance r

RoPE's long-term decay (paper section 3.4.3) is an upper bound on |⟨R_m q, R_n k⟩| that falls
with r = |m − n| (rope_reference.long_range_decay); whether trained attention falls likewise
is a property of the trained weights, measured here on held-out text (issue 31, item 2).

The weights are read through `softmax_attention` itself, with one-hot values over the keys,
so that no second copy of the model's scoring (rotation, bias, mask, scale) can drift from it:
the output of query l for the value one-hot at key m is the weight of m in l's softmax. Only
softmax attention has such weights; the model's q, k and the encoding's rotation and bias are
taken from its own modules (flax's capture_intermediates) and its encoding table.
"""

from __future__ import annotations

import jax.numpy as jnp
import numpy as np

from roformer_jax.nn.attention import softmax_attention
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import ModelConfig


def attention_weights(cfg: ModelConfig, params, input_ids, attention_mask) -> list[np.ndarray]:
    """The softmax weights of every layer of a bidirectional softmax encoder, float32
    [B, N, L, L] each (query l's weight on key m), on input_ids int [B, L] with
    attention_mask bool [B, L] (False: padding), positions 0 .. L - 1."""
    if cfg.attention != "softmax":
        raise ValueError(f"attention={cfg.attention!r} has no softmax weights to read")
    mask = jnp.asarray(attention_mask, bool)
    positions = jnp.arange(mask.shape[1])
    return [
        np.asarray(_weights(cfg, layer, q, k, mask, positions))
        for layer, (q, k) in enumerate(queries_and_keys(cfg, params, input_ids, mask))
    ]


def queries_and_keys(cfg: ModelConfig, params, input_ids, attention_mask) -> list[tuple]:
    """(q [B, L, N, H], k [B, L, K, H]) of every layer of a bidirectional encoder, before
    any rotation, as its own query and key projections give them (flax's
    capture_intermediates), on input_ids int [B, L] with attention_mask bool [B, L]."""
    if cfg.causal:
        raise ValueError("a causal model's weights: not read here (its mask differs)")
    input_ids = jnp.asarray(input_ids)
    _, state = RoFormer(cfg).apply(
        {"params": params},
        input_ids,
        attention_mask=jnp.asarray(attention_mask, bool),
        capture_intermediates=_q_and_k,
    )
    captured = state["intermediates"]["encoder"]
    b, length = input_ids.shape
    found = []
    for layer in range(cfg.num_layers):
        attention = captured[f"layer_{layer}"]["attention"]
        q = attention["query"]["__call__"][0].reshape(b, length, cfg.num_heads, cfg.head_dim)
        k = attention["key"]["__call__"][0].reshape(b, length, cfg.kv_heads, cfg.head_dim)
        found.append((q, k))
    return found


def _q_and_k(module, method_name) -> bool:
    return method_name == "__call__" and module.name in ("query", "key")


def _weights(cfg, layer, q, k, mask, positions):
    encoding, where, hooked = cfg.encoding, {}, (cfg.position_section, cfg)
    rotation = encoding.rotation and encoding.rotation(*hooked, positions, None, layer, None, None)
    if rotation is not None:
        where["rotation"] = rotation
    if encoding.bias is not None:
        where["bias"] = encoding.bias(*hooked, positions, positions)
    b, length, kv_heads, h = k.shape
    columns = []
    for start in range(0, length, h):  # values one-hot over keys start .. start + H - 1
        one_hot = jnp.eye(length, h, -start, dtype=q.dtype)  # [M, H]: key m -> column m - start
        v = jnp.broadcast_to(one_hot[None, :, None, :], (b, length, kv_heads, h))
        out = softmax_attention(q, k, v, mask=mask, **where)  # [B, L, N, H]
        columns.append(out[..., : min(h, length - start)])
    return jnp.concatenate(columns, axis=-1).transpose(0, 2, 1, 3)  # [B, N, L, M]


def distance_sums(weights, attention_mask) -> tuple[np.ndarray, np.ndarray]:
    """(sums float64 [N, L], counts [L]): the weight that queries put on keys at each distance
    r = |m − n|, summed over the (query, key) pairs of real tokens at that distance in all rows
    of the batch, and the number of those pairs. sums / counts, over one batch or the sums of
    many, is the mean weight on one key at distance r: 1/L at every r for uniform attention
    over L real tokens (NaN at a distance no pair has).

    weights: [B, N, L, L] (attention_weights); attention_mask: bool [B, L].
    """
    weights = np.asarray(weights, np.float64)
    real = np.asarray(attention_mask, bool)
    n, length = weights.shape[1], weights.shape[-1]
    pairs = real[:, :, None] & real[:, None, :]  # [B, L, M]
    distance = np.abs(np.arange(length)[:, None] - np.arange(length)[None, :])  # [L, M]
    index = np.broadcast_to(distance, pairs.shape)[pairs]  # the distance of each real pair
    sums = np.stack(
        [np.bincount(index, weights=weights[:, head][pairs], minlength=length) for head in range(n)]
    )
    return sums, np.bincount(index, minlength=length)
