"""Each attention kind one block of tokens at a time, for decoding (`roformer_jax.nn.decoding`).

Each kind's step function takes what the earlier tokens left (`memory`: None before the first
block), the new tokens' q, k, v [B, T, N, H], and returns (out [B, T, N, H], memory after
them). The new tokens attend causally among themselves and to every earlier token, so a
prompt of T tokens followed by single tokens computes what the kind's causal form computes
on the whole sequence. Steps take the kind's own options as its full form does
(`attention_core.LinearOptions`, `KernelOptions`).

Softmax keeps every earlier key and value (`KVCache`, O(length) memory); the linear kinds keep
sums over earlier tokens (`KernelState`, O(1) in the length): the recurrent decoding that
linear attention allows.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from roformer_jax.nn.attention_core import (
    KernelOptions,
    LinearOptions,
    compute_dtype,
    cosine_features,
    heads,
    kernel_attention,
    linear_features,
    softmax_over_visible,
)
from roformer_jax.nn.rope import Rotation


class KVCache(NamedTuple):
    """Softmax attention's memory: every earlier key (rotated at its position) and value.

    Slots fill from 0; `length` are written. S is the capacity, fixed when the cache is made.
    Heads lead: with [B, S, N, H], XLA's CPU backend copied every layer's whole cache into
    [B, N, H, S] for the scores at each step (benchmarks/decode.py).
    """

    keys: jax.Array  # [B, N, S, H], rotated where they were written
    values: jax.Array  # [B, N, S, H]
    positions: jax.Array  # int32 [B, S], each key's position (for a bias on the scores)
    valid: jax.Array  # bool [B, S]: written, and not padding
    length: jax.Array  # int32 [], the slots written so far


class KernelState(NamedTuple):
    """A linear kind's memory: Σ_j k'_j e_jᵀ over earlier tokens j, for each sum it forms.

    numerator: [B, N, F, E], with k' the key features and e_j = v_j, or [v_j, 1] when the
    denominator shares the numerator's features. denominator: [B, N, F, 1] when it has its own
    features (eq. 19: Σ_j φ(k_j)), else None. O(1) memory in the length: the recurrent
    decoding that linear attention allows and softmax does not.
    """

    numerator: jax.Array
    denominator: jax.Array | None = None


def softmax_attention_step(
    cache: KVCache | None,
    q,
    k,
    v,
    *,
    positions,
    capacity: int | None = None,
    mask=None,
    rotation: Rotation | None = None,
    bias: Callable[[jax.Array, jax.Array], jax.Array] | None = None,
):
    """`softmax_attention`, causal, for T new tokens after those in `cache`.

    q, k, v [B, T, N, H]; positions int [B, T], where the new tokens are (stored for `bias`);
    mask [B, T] bool (False: padding, never attended to). The keys are rotated once, when
    written: new queries are rotated at their own positions, never re-counted from 0.
    cache None: the first block, into a new cache of `capacity` slots. bias: a function
    (query positions [B, T], key positions [B, S]) -> [B or 1, N, T, S] (ALiBi).
    Writing past the capacity is the caller's to prevent (`length` is traced).
    Returns (out [B, T, N, H], cache).
    """
    b, t = q.shape[:2]
    if cache is None:
        cache = _empty_cache(k, v, capacity)
    if rotation is not None:
        q, k = rotation.q(q), rotation.k(k)
    start = cache.length

    def write(old, new, axis=1):
        return jax.lax.dynamic_update_slice_in_dim(old, new.astype(old.dtype), start, axis=axis)

    new_mask = jnp.ones((b, t), bool) if mask is None else mask
    cache = KVCache(
        keys=write(cache.keys, heads(k), axis=2),
        values=write(cache.values, heads(v), axis=2),
        positions=write(cache.positions, jnp.broadcast_to(positions, (b, t))),
        valid=write(cache.valid, new_mask),
        length=start + t,
    )
    slots = jnp.arange(cache.keys.shape[2])
    earlier = slots[None, :] <= start + jnp.arange(t)[:, None]  # [T, S]
    visible = cache.valid[:, None, None, :] & earlier[None, None]  # [B, 1, T, S]
    if bias is not None:
        bias = bias(jnp.broadcast_to(positions, (b, t)), cache.positions)
    return softmax_over_visible(q, heads(cache.keys), heads(cache.values), visible, bias), cache


def _empty_cache(k, v, capacity: int | None) -> KVCache:
    """A KV cache of `capacity` slots, none written, for keys and values like k, v [B, T, N, H]."""
    b, t, n, h = k.shape
    if capacity is None or capacity < t:
        raise ValueError(f"a KV cache of capacity {capacity} cannot hold {t} tokens")
    return KVCache(
        keys=jnp.zeros((b, n, capacity, h), k.dtype),
        values=jnp.zeros((b, n, capacity, h), v.dtype),
        positions=jnp.zeros((b, capacity), jnp.int32),
        valid=jnp.zeros((b, capacity), bool),
        length=jnp.zeros((), jnp.int32),
    )


def _kernel_step(state, qn, kn, v, *, den_features, mask, options: KernelOptions):
    """`kernel_attention`, causal, for new tokens after those summed in `state`; a prompt of
    many tokens goes through in chunks, O(T) memory as the causal form."""
    if state is None:  # nothing summed yet: Σ over no tokens
        b, n, _, f = kn.shape
        e = v.shape[-1] + (den_features is None)
        state = KernelState(
            jnp.zeros((b, n, f, e), kn.dtype),
            None
            if den_features is None
            else jnp.zeros((b, n, den_features[1].shape[-1], 1), kn.dtype),
        )
    carried = tuple(x for x in state if x is not None)
    out, _, after = kernel_attention(
        qn, kn, v, den_features=den_features, mask=mask, causal=True, options=options,
        state=carried,
    )  # fmt: skip
    return out, KernelState(*after)


def linear_attention_step(
    state: KernelState | None, q, k, v, *, mask=None, rotation: Rotation | None = None, **options
):
    """`linear_attention`, causal, for T new tokens after those summed in `state`.

    q, k, v [B, T, N, H]; mask [B, T]; options: the fields of `attention_core.LinearOptions`,
    as the full form takes them. The state is O(1) in the length (`KernelState`): with
    RoPE in the numerator (eq. 19) it is Σ_j [R_j φ(k_j)] v_jᵀ and Σ_j φ(k_j), each updated
    in O(F·H) per token, so a RoFormer with linear attention generates in constant time and
    memory per token. Returns (out [B, T, N, H], state).
    """
    options = LinearOptions(**options)
    options.check(q.shape[-1])
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qn, kn, den = linear_features(q, k, rotation=rotation, options=options)
    out, state = _kernel_step(state, qn, kn, heads(v), den_features=den, mask=mask,
                              options=options)  # fmt: skip
    return heads(out).astype(out_dtype), state


def cosine_attention_step(
    state: KernelState | None, q, k, v, *, mask=None, rotation: Rotation | None = None, **options
):
    """`cosine_attention`, causal, for T new tokens after those summed in `state`.

    options: the fields of `attention_core.KernelOptions`, as the full form takes them.
    The state is Σ_j [1, b_j][v_j, 1]ᵀ ([B, N, H + 1, H + 1]). Returns (out, state).
    """
    options = KernelOptions(**options)
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qf, kf = cosine_features(q, k, rotation)
    out, state = _kernel_step(state, qf, kf, heads(v), den_features=None, mask=mask,
                              options=options)  # fmt: skip
    return heads(out).astype(out_dtype), state
