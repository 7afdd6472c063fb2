"""Each attention kind one block of tokens at a time, for decoding (`roformer_jax.nn.decoding`).

Each kind's step function takes what the earlier tokens left (`memory`: None before the first
block), the new tokens' q, k, v [B, T, N, H], and returns (out [B, T, N, H], memory after
them). The new tokens attend causally among themselves and to every earlier token, so a
prompt of T tokens followed by single tokens computes what the kind's causal form computes
on the whole sequence. Steps take the kind's own options as its full form does.

Softmax keeps every earlier key and value (`KVCache`, O(length) memory); the linear kinds keep
sums over earlier tokens (`KernelState`, O(1) in the length): the recurrent decoding that
linear attention allows.
"""

from collections.abc import Callable
from typing import NamedTuple

import jax
import jax.numpy as jnp

from roformer_jax.nn import feature_maps
from roformer_jax.nn.attention import (
    _check_linear_options,
    _compute_dtype,
    _cosine_features,
    _heads,
    _kernel_attention,
    _linear_features,
    _softmax,
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
    b, t, n, h = q.shape
    if cache is None:
        if capacity is None or capacity < t:
            raise ValueError(f"a KV cache of capacity {capacity} cannot hold {t} tokens")
        cache = KVCache(
            keys=jnp.zeros((b, n, capacity, h), k.dtype),
            values=jnp.zeros((b, n, capacity, h), v.dtype),
            positions=jnp.zeros((b, capacity), jnp.int32),
            valid=jnp.zeros((b, capacity), bool),
            length=jnp.zeros((), jnp.int32),
        )
    if rotation is not None:
        q, k = rotation.q(q), rotation.k(k)
    start = cache.length

    def write(old, new, axis=1):
        return jax.lax.dynamic_update_slice_in_dim(old, new.astype(old.dtype), start, axis=axis)

    new_mask = jnp.ones((b, t), bool) if mask is None else mask
    cache = KVCache(
        keys=write(cache.keys, _heads(k), axis=2),
        values=write(cache.values, _heads(v), axis=2),
        positions=write(cache.positions, jnp.broadcast_to(positions, (b, t))),
        valid=write(cache.valid, new_mask),
        length=start + t,
    )
    slots = jnp.arange(cache.keys.shape[2])
    earlier = slots[None, :] <= start + jnp.arange(t)[:, None]  # [T, S]
    visible = cache.valid[:, None, None, :] & earlier[None, None]  # [B, 1, T, S]
    if bias is not None:
        bias = bias(jnp.broadcast_to(positions, (b, t)), cache.positions)
    return _softmax(q, _heads(cache.keys), _heads(cache.values), visible, bias), cache


def _kernel_step(state, qn, kn, v, *, den_features, mask, eps, chunk_size):
    """`_kernel_attention`, causal, for new tokens after those summed in `state`; a prompt of
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
    out, _, after = _kernel_attention(
        qn, kn, v, den_features=den_features, mask=mask, causal=True, eps=eps,
        chunk_size=chunk_size, state=carried,
    )  # fmt: skip
    return out, KernelState(*after)


def linear_attention_step(
    state: KernelState | None,
    q,
    k,
    v,
    *,
    mask=None,
    rotation: Rotation | None = None,
    placement="numerator",
    feature_map="elu",
    projection=None,
    eps=1e-6,
    chunk_size=64,
):
    """`linear_attention`, causal, for T new tokens after those summed in `state`.

    q, k, v [B, T, N, H]; mask [B, T]. The state is O(1) in the length (`KernelState`): with
    RoPE in the numerator (eq. 19) it is Σ_j [R_j φ(k_j)] v_jᵀ and Σ_j φ(k_j), each updated
    in O(F·H) per token, so a RoFormer with linear attention generates in constant time and
    memory per token. Returns (out [B, T, N, H], state).
    """
    _check_linear_options(feature_map, placement, projection, q.shape[-1])
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    phi = feature_maps.query_and_key_maps(feature_map, projection)
    qn, kn, den = _linear_features(q, k, phi=phi, rotation=rotation, placement=placement)
    out, state = _kernel_step(
        state, qn, kn, _heads(v), den_features=den, mask=mask, eps=eps, chunk_size=chunk_size
    )
    return _heads(out).astype(out_dtype), state


def cosine_attention_step(
    state: KernelState | None,
    q,
    k,
    v,
    *,
    mask=None,
    rotation: Rotation | None = None,
    eps=1e-6,
    chunk_size=64,
):
    """`cosine_attention`, causal, for T new tokens after those summed in `state`.

    The state is Σ_j [1, b_j][v_j, 1]ᵀ ([B, N, H + 1, H + 1]). Returns (out, state).
    """
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qf, kf = _cosine_features(q, k, rotation)
    out, state = _kernel_step(
        state, qf, kf, _heads(v), den_features=None, mask=mask, eps=eps, chunk_size=chunk_size
    )
    return _heads(out).astype(out_dtype), state


# Each kind's step, beside its full form in attention.ATTENTION_FUNCTIONS.
DECODE_STEPS: dict[str, Callable[..., tuple[jax.Array, object]]] = {
    "softmax": softmax_attention_step,
    "linear": linear_attention_step,
    "cosine": cosine_attention_step,
}
