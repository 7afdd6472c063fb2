"""Decay gates: what every attention kind needs to take `log_decay` in its chunked and
recurrent forms (attention_core.py, attention_step.py).

A gate weighs key j's term at query i by exp(Σ_{t=j+1..i} log_decay[t]): the forget gate of
FoX (Lin et al. 2025), a decay learned from the input, or RetNet's fixed decay per head
(Sun et al. 2023). The formula, written out, is `attention.decay_sums`; here are its forms:
for the linear kinds, ones that never build [L, L] (within a chunk, the sums since the
chunk's start; between chunks, a state multiplied by each chunk's decay); for softmax's
scores, the [L, L] sums from per-chunk sums (`chunked_sums`). Every exponent they take is
<= 0, so a long product of gates underflows to 0 and never overflows.

Glossary of shapes: B batch, L length, N query heads, K key/value heads, J chunks, C chunk
length, F features, E value columns, T new tokens of a decode step.
"""

import jax.numpy as jnp


def check_log_decay(log_decay, q_shape, causal: bool) -> None:
    """Raises ValueError unless log_decay fits queries of shape [B, L, N, H] as [B, L, N]
    and attention is causal (a gate decays what came before)."""
    if not causal:
        raise ValueError(
            "log_decay needs causal=True: a gate weighs key j at query i by the gates between "
            "them, Σ_{t=j+1..i}, which only a causal query has"
        )
    if log_decay.shape != tuple(q_shape[:3]):
        raise ValueError(
            f"log_decay has shape {log_decay.shape}; expected [B, L, N] = {tuple(q_shape[:3])}"
        )


def heads_last(log_decay, dtype):
    """Log gates [B, L, N] -> [B, N, L] in `dtype`, as the kernel sums take them."""
    return jnp.swapaxes(log_decay, 1, 2).astype(dtype)


def retention(num_heads: int):
    """RetNet's fixed log gates, log γ_n with γ_n = 1 - 2^(-5-n) for head n: float32 [N].

    Head 0 forgets over ~32 tokens, head n over ~2^(5+n) (Sun et al. 2023, sec. 2.2)."""
    return jnp.log1p(-jnp.exp2(-5.0 - jnp.arange(num_heads, dtype=jnp.float32)))


def per_query_head(x, heads: int):
    """Keys, values or states [B, K, ...] repeated for `heads` query heads [B, N, ...]:
    head n reads n // G, HF's `repeat_kv` order. A gate per query head makes each query
    head's sums its own."""
    return jnp.repeat(x, heads // x.shape[1], axis=1)


def chunk_gates(log_decay, visible):
    """What a gate does to one chunk's terms, from log gates [B, K, J, C] (K = N).

    With b_i = Σ_{t<=i in the chunk} log_decay[t] and A = b at the chunk's last position, key
    j's term at query i of the chunk is weighted by exp(b_i - b_j), and by exp(b_i) ·
    exp(A_{J'} - b_j) · exp(A of the chunks between) for a key j of an earlier chunk J'.
    visible: bool, broadcastable to [B, K, J, C, C].
    Returns (exp(b_i - b_j) where visible [B, K, J, C, C], the chunks' decays exp(A)
    [J, B, K, 1, 1], the queries' scales exp(b_i) and the keys' exp(A - b_j) [B, K, J, C, 1]).
    """
    inside = jnp.cumsum(log_decay, axis=-1)  # b, [B, K, J, C]
    total = inside[..., -1:]  # A, [B, K, J, 1]
    # where twice: exp(b_i - b_j) for j > i may overflow, and its gradient with it.
    between = inside[..., :, None] - inside[..., None, :]
    weights = jnp.where(visible, jnp.exp(jnp.where(visible, between, 0.0)), 0.0)
    decay = jnp.moveaxis(jnp.exp(total), 2, 0)[..., None]  # [J, B, K, 1, 1]
    return weights, decay, jnp.exp(inside)[..., None], jnp.exp(total - inside)[..., None]


def decayed_sum_step(total, chunk):
    """One chunk of the gated carry: (decay · total + state, total). At decay 1 this is
    `_attention_cpu.exclusive_cumsum`'s step bit for bit. Module-level, so that eager calls
    reuse the compiled scan."""
    state, decay = chunk
    return decay * total + state, total


def later_sums(log_decay):
    """Σ_{t=j+1..T} log_decay[t] for each j: [..., T] -> [..., T], summed from the end (a
    difference of prefix sums would lose digits to their size)."""
    flipped = jnp.cumsum(jnp.flip(log_decay, axis=-1), axis=-1)
    return jnp.concatenate([jnp.flip(flipped, axis=-1)[..., 1:], 0 * log_decay[..., :1]], -1)


def chunked_sums(log_decay, chunk: int = 64):
    """`attention.decay_sums` from sums over chunks of C: [B, L, N] -> [B, N, L, L] (0 where
    j >= i), with nothing of size [L, L] but the answer, so that XLA fuses it into the
    scores where `decay_sums` sums [L, L] terms.

    Query i in chunk I, key j in an earlier chunk J: b_i (I's gates up to i) + the chunks
    strictly between (their totals, summed as `decay_sums` sums gates) + J's gates after j
    (`later_sums`): terms <= 0 each, so no digit is lost to a difference of long sums. j in
    I: b_i - b_j, as `chunk_gates`.
    """
    b, length, n = log_decay.shape
    c = min(chunk, length)
    x = jnp.pad(heads_last(log_decay, log_decay.dtype), ((0, 0), (0, 0), (0, -length % c)))
    x = x.reshape(b, n, -1, c)  # [B, N, J, C]
    inside, after = jnp.cumsum(x, axis=-1), later_sums(x)  # b_i; the gates after j
    totals = inside[..., -1]  # [B, N, J]
    chunks = jnp.arange(x.shape[2])
    later = chunks[:, None] > chunks[None, :]  # chunk I after chunk J, [J, J]
    upto = jnp.cumsum(jnp.where(later, totals[..., :, None], 0.0), axis=-2)  # J < K <= I
    between = jnp.pad(upto[..., :-1, :], ((0, 0), (0, 0), (1, 0), (0, 0)))  # J < K < I
    far = inside[..., :, :, None, None] + between[..., :, None, :, None]
    far = far + after[..., None, None, :, :]  # [B, N, J(I), C(i), J, C(j)]
    near = inside[..., :, :, None] - inside[..., :, None, :]  # [B, N, J, C(i), C(j)]
    t = jnp.arange(c)
    near = jnp.where(t[:, None] > t[None, :], near, 0.0)[..., :, :, None, :]
    same = (chunks[:, None] == chunks[None, :])[:, None, :, None]  # [J, 1, J, 1]
    sums = jnp.where(same, near, jnp.where(later[:, None, :, None], far, 0.0))
    padded = x.shape[2] * c
    return sums.reshape(b, n, padded, padded)[..., :length, :length]


def decay_state(seen, kx, log_decay):
    """A decode step's gates on what it reads of the state and adds to it.

    seen: the state of the earlier tokens [B, N, F, E]; kx: the new keys' features
    [B, N, T, F]; log_decay [B, N, T]. Returns (exp(b_i) [B, N, T, 1], which scales new query
    i's read of `seen`, b_i the new gates' prefix sum; seen decayed through the T tokens; kx
    weighted by exp(Σ_{t=j+1..T} log_decay[t]), its decay to the block's end).
    """
    scales = jnp.exp(jnp.cumsum(log_decay, axis=-1))[..., None]
    seen = jnp.exp(jnp.sum(log_decay, axis=-1))[..., None, None] * seen
    return scales, seen, kx * jnp.exp(later_sums(log_decay))[..., None]
