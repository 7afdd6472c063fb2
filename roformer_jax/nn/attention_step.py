"""Each attention kind one block of tokens at a time, for decoding (`roformer_jax.nn.decoding`).

Each kind's step function takes what the earlier tokens left (`memory`: None before the first
block), the new tokens' q [B, T, N, H] and k, v [B, T, K, H] (K key/value heads, as in
attention.py), and returns (out [B, T, N, H], memory after them). The new tokens attend
causally among themselves and to every earlier token, so a prompt of T tokens followed by
single tokens computes what the kind's causal form computes on the whole sequence. Steps
take the kind's own options as its full form does (`attention_core.LinearOptions`,
`KernelOptions`).

Softmax keeps every earlier key and value (`KVCache`, O(length) memory), or with a sliding
window only the last `window` (a ring); the linear kinds keep sums over earlier tokens
(`KernelState`, O(1) in the length): the recurrent decoding that linear attention allows.
Every memory holds K key/value heads, not N. A step decodes one sequence per row: it takes
no segment ids. Each step also takes the new tokens' log_decay [B, T, N] (attention.py): the
memory then decays by each new token's gate, and being per query head, holds N heads.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from roformer_jax.nn import decay, masks
from roformer_jax.nn.attention_core import (
    KernelOptions,
    LinearOptions,
    compute_dtype,
    cosine_features,
    heads,
    kernel_attention,
    kind_options,
    linear_features,
    softmax_over_visible,
)
from roformer_jax.nn.attention_inputs import check_inputs
from roformer_jax.nn.rope import Rotation
from roformer_jax.nn.sinks import check_sinks


class KVCache(NamedTuple):
    """Softmax attention's memory: earlier keys (rotated at their positions) and values.

    S slots, fixed when the cache is made; `length` tokens have been written. Without a
    window, token t is in slot t (S is the capacity). With a sliding window, S = window (or
    less) and the cache is a ring: token t is in slot t mod S, each new token overwriting the
    one `window` tokens before it, which no later query sees.
    Heads lead: with [B, S, K, H], XLA's CPU backend copied every layer's whole cache into
    [B, K, H, S] for the scores at each step (benchmarks/decode.py). K key/value heads: with
    grouped-query attention the cache is N / K times smaller than with N.
    """

    keys: jax.Array  # [B, K, S, H], rotated where they were written
    values: jax.Array  # [B, K, S, H]
    positions: jax.Array  # int32 [B, S], each key's position (for a bias on the scores)
    valid: jax.Array  # bool [B, S]: written, and not padding
    length: jax.Array  # int32 [], the tokens written so far
    # With a decay gate, float [B, N, S]: Σ of the gates since each key, t in (j, length];
    # each step adds its gates' sum to every slot, so no long prefix sum is ever subtracted.
    decay: jax.Array | None = None


class KernelState(NamedTuple):
    """A linear kind's memory: Σ_j k'_j e_jᵀ over earlier tokens j, for each sum it forms.

    numerator: [B, K, F, E] (one per key/value head; [B, N, F, E], one per query head, under
    a decay gate), with k' the key features and e_j = v_j, or [v_j, 1] when the denominator
    shares the numerator's features. denominator: [B, K, F, 1] (likewise) when it has its own
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
    window: int | None = None,
    chunk: int | None = None,
    sinks=None,
    log_decay=None,
):
    """`softmax_attention`, causal, for T new tokens after those in `cache`.

    q [B, T, N, H], k, v [B, T, K, H]; positions int [B, T], where the new tokens are (stored
    for `bias`); mask [B, T] bool (False: padding, never attended to). The keys are rotated
    once, when written: new queries are rotated at their own positions, never re-counted
    from 0. cache None: the first block, into a new cache of `capacity` slots, or with a
    `window` (as `softmax_attention`'s, counted in tokens of the row) a ring of
    min(window, capacity) slots, which decodes any length; a `chunk` C (as
    `softmax_attention`'s) likewise needs a ring of C slots only. sinks [N]: as there.
    bias: a function (query positions [B, T], key positions [B, S']) -> [B or 1, N, T, S']
    (ALiBi).
    Writing past the capacity is the caller's to prevent (`length` is traced).
    log_decay: [B, T, N] log gates of the new tokens, or None (the cache then keeps `decay`,
    started by the first block's).
    Returns (out [B, T, N, H], cache).
    """
    check_inputs(q, k, v, mask=mask, causal=True, rotation=rotation, log_decay=log_decay)
    masks.check_span(window, "window")
    masks.check_span(chunk, "chunk")
    if sinks is not None:
        check_sinks(sinks, q.shape[2])
    span = masks.ring_span(window, chunk)
    b, t = q.shape[:2]
    if cache is None:
        cache = _empty_cache(k, v, capacity, span, None if log_decay is None else q.shape[2])
    if rotation is not None:
        q, k = rotation.q(q), rotation.k(k)
    positions = jnp.broadcast_to(positions, (b, t))
    new_mask = jnp.ones((b, t), bool) if mask is None else mask
    # b_i, the new gates' prefix sums [B, N, T]: key j's weight at new query i is
    # exp(decay_j + b_i), a cached key's decay_j counted to the block's start, a new one's -b_j.
    gates = None
    if log_decay is not None:
        gates = jnp.cumsum(decay.heads_last(log_decay, compute_dtype(q)), axis=-1)
    query_index = cache.length + jnp.arange(t)  # [T], the new tokens' indices in the row
    cache, seen = _keys_seen(cache, k, v, positions, new_mask, ring=span is not None, gates=gates)
    by_index = masks.sees(query_index, seen.index, causal=True, window=window, chunk=chunk)
    visible = seen.valid[:, None, None, :] & by_index[None, None]  # [B, 1, T, S']
    if bias is not None:
        bias = bias(positions, seen.positions)
    if gates is not None:
        weights = seen.decay[:, :, None, :] + gates[..., :, None]  # log, [B, N, T, S']
        bias = weights if bias is None else bias + weights
        cache = cache._replace(decay=cache.decay + gates[..., -1:])
    return softmax_over_visible(q, seen.keys, seen.values, visible, bias, sinks=sinks), cache


class _Seen(NamedTuple):
    """The S' keys that new queries may see: [B, S', K, H] keys and values, their positions
    int [B, S'], valid bool [B, S'], index int [S'] (each one's token in the row) and decay
    [B, N, S'] (or None)."""

    keys: jax.Array
    values: jax.Array
    positions: jax.Array
    valid: jax.Array
    index: jax.Array
    decay: jax.Array | None


def _keys_seen(cache: KVCache, k, v, positions, mask, *, ring: bool, gates):
    """(the cache with T new tokens written, the keys their queries may see, `_Seen`).

    Without a ring: the cache after the write, token t in slot t. With one, the ring as it
    was and then the new keys: written first, a new key would overwrite one that an earlier
    new query still sees.
    """
    if not ring:
        cache = _write(cache, k, v, positions, mask, ring=False, gates=gates)
        index = jnp.arange(cache.keys.shape[2])
        seen = (heads(cache.keys), heads(cache.values), cache.positions, cache.valid, index)
        return cache, _Seen(*seen, cache.decay)
    seen = _Seen(
        keys=jnp.concatenate([heads(cache.keys), k.astype(cache.keys.dtype)], axis=1),
        values=jnp.concatenate([heads(cache.values), v.astype(cache.values.dtype)], axis=1),
        positions=jnp.concatenate([cache.positions, positions], axis=1),
        valid=jnp.concatenate([cache.valid, mask], axis=1),
        index=jnp.concatenate([_ring_index(cache), cache.length + jnp.arange(k.shape[1])]),
        decay=None if gates is None else jnp.concatenate([cache.decay, -gates], -1),
    )
    return _write(cache, k, v, positions, mask, ring=True, gates=gates), seen


def _ring_index(cache: KVCache):
    """int [S]: the token each slot holds, t in slot t mod S (negative: none yet)."""
    slots = cache.keys.shape[2]
    last = cache.length - 1
    return last - (last - jnp.arange(slots)) % slots


def _write(cache: KVCache, k, v, positions, mask, *, ring: bool, gates=None) -> KVCache:
    """The cache with T new tokens written after `length`: in slots length, length + 1, ...;
    in a ring taken modulo S, and only the last S tokens of a longer block kept. gates: the
    new gates' prefix sums [B, N, T] (the decay of new key j is -gates_j), or None."""
    slots, t = cache.keys.shape[2], k.shape[1]
    start = cache.length
    keep = min(t, slots) if ring else t

    def write(old, new, axis=1):
        new = jax.lax.slice_in_dim(new, t - keep, t, axis=axis).astype(old.dtype)
        if not ring:
            return jax.lax.dynamic_update_slice_in_dim(old, new, start, axis=axis)
        at = (start + t - keep + jnp.arange(keep)) % slots  # distinct slots
        return old.at[(slice(None),) * axis + (at,)].set(new)

    return KVCache(
        keys=write(cache.keys, heads(k), axis=2),
        values=write(cache.values, heads(v), axis=2),
        positions=write(cache.positions, positions),
        valid=write(cache.valid, mask),
        length=start + t,
        decay=None if gates is None else write(cache.decay, -gates, axis=2),
    )


def _empty_cache(k, v, capacity: int | None, window: int | None, gated_heads=None) -> KVCache:
    """A KV cache, none written, for keys and values like k, v [B, T, K, H]: `capacity`
    slots, or with a window min(window, capacity) slots (a ring); with the decays of
    `gated_heads` query heads (None: no gate)."""
    b, t, n, h = k.shape
    if window is not None:
        slots = window if capacity is None else min(window, capacity)
    elif capacity is None or capacity < t:
        raise ValueError(f"a KV cache of capacity {capacity} cannot hold {t} tokens")
    else:
        slots = capacity
    return KVCache(
        keys=jnp.zeros((b, n, slots, h), k.dtype),
        values=jnp.zeros((b, n, slots, h), v.dtype),
        positions=jnp.zeros((b, slots), jnp.int32),
        valid=jnp.zeros((b, slots), bool),
        length=jnp.zeros((), jnp.int32),
        decay=None if gated_heads is None else jnp.zeros((b, gated_heads, slots), compute_dtype(k)),
    )


def _kernel_step(state, qn, kn, v, *, den_features, mask, options: KernelOptions, log_decay):
    """`kernel_attention`, causal, for new tokens after those summed in `state`; a prompt of
    many tokens goes through in chunks, O(T) memory as the causal form. log_decay: None, or
    [B, T, N] (the state is then per query head)."""
    if state is None:  # nothing summed yet: Σ over no tokens
        b, _, _, f = kn.shape
        n = kn.shape[1] if log_decay is None else qn.shape[1]
        e = v.shape[-1] + (den_features is None)
        state = KernelState(
            jnp.zeros((b, n, f, e), kn.dtype),
            None
            if den_features is None
            else jnp.zeros((b, n, den_features[1].shape[-1], 1), kn.dtype),
        )
    carried = tuple(x for x in state if x is not None)
    out, _, after = kernel_attention(
        qn,
        kn,
        v,
        den_features=den_features,
        mask=mask,
        causal=True,
        options=options,
        state=carried,
        log_decay=None if log_decay is None else decay.heads_last(log_decay, qn.dtype),
    )
    return out, KernelState(*after)


def linear_attention_step(
    state: KernelState | None,
    q,
    k,
    v,
    *,
    mask=None,
    rotation: Rotation | None = None,
    log_decay=None,
    **options,
):
    """`linear_attention`, causal, for T new tokens after those summed in `state`.

    q [B, T, N, H], k, v [B, T, K, H]; mask [B, T]; options: the fields of
    `attention_core.LinearOptions`, as the full form takes them. The state is O(1) in the
    length (`KernelState`): with RoPE in the numerator (eq. 19) it is Σ_j [R_j φ(k_j)] v_jᵀ
    and Σ_j φ(k_j), each updated in O(F·H) per token, so a RoFormer with linear attention
    generates in constant time and memory per token. Returns (out [B, T, N, H], state).
    """
    check_inputs(q, k, v, mask=mask, causal=True, rotation=rotation, log_decay=log_decay)
    options = kind_options("linear attention", LinearOptions, options)
    options.check(q.shape[-1], rotated=rotation is not None)
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qn, kn, den = linear_features(q, k, rotation=rotation, options=options)
    out, state = _kernel_step(
        state, qn, kn, heads(v), den_features=den, mask=mask, options=options, log_decay=log_decay
    )
    return heads(out).astype(out_dtype), state


def cosine_attention_step(
    state: KernelState | None,
    q,
    k,
    v,
    *,
    mask=None,
    rotation: Rotation | None = None,
    log_decay=None,
    **options,
):
    """`cosine_attention`, causal, for T new tokens after those summed in `state`.

    options: the fields of `attention_core.KernelOptions`, as the full form takes them.
    The state is Σ_j [1, b_j][v_j, 1]ᵀ ([B, K, H + 1, H + 1], or [B, N, H + 1, H + 1] with
    log_decay: a gate is per query head). Returns (out, state).
    """
    check_inputs(q, k, v, mask=mask, causal=True, rotation=rotation, log_decay=log_decay)
    options = kind_options("cosine attention", KernelOptions, options)
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qf, kf = cosine_features(q, k, rotation)
    out, state = _kernel_step(
        state, qf, kf, heads(v), den_features=None, mask=mask, options=options, log_decay=log_decay
    )
    return heads(out).astype(out_dtype), state
