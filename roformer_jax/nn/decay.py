"""Decay gates: what every attention kind needs to take `log_decay` in its chunked and
recurrent forms (attention_core.py, attention_step.py).

A gate weighs key j's term at query i by exp(Σ_{t=j+1..i} log_decay[t]): the forget gate of
FoX (Lin et al. 2025), a decay learned from the input, or RetNet's fixed decay per head
(Sun et al. 2023). The formula, written out, is `attention.decay_sums`; here are its forms:
for the linear kinds, ones that never build [L, L] (within a chunk, the sums since the
chunk's start; between chunks, a state multiplied by each chunk's decay); for softmax's
scores, the same sums as features of the scores' own product (`gate_features`). Every
exponent they take is <= 0, so a long product of gates underflows to 0 and never overflows.

Glossary of shapes: B batch, L length, N query heads, K key/value heads, J chunks, C chunk
length, F features, E value columns, T new tokens of a decode step.
"""

import jax
import jax.numpy as jnp


def check_log_decay(log_decay, q_shape, causal: bool) -> None:
    """Raises ValueError unless log_decay fits queries of shape [B, L, N, H] as [B, L, N],
    attention is causal (a gate decays what came before) and, where its values are known
    (not traced: no check runs inside jit), every log gate is <= 0."""
    if not causal:
        raise ValueError(
            "log_decay needs causal=True: a gate weighs key j at query i by the gates between "
            "them, Σ_{t=j+1..i}, which only a causal query has"
        )
    if log_decay.shape != tuple(q_shape[:3]):
        raise ValueError(
            f"log_decay has shape {log_decay.shape}; expected [B, L, N] = {tuple(q_shape[:3])}"
        )
    # A gate > 1 up-weights distant keys (softmax) or overflows the chunks' exp(b_i - b_j)
    # into NaN (the linear kinds): wrong without an error.
    if not isinstance(log_decay, jax.core.Tracer) and jnp.any(log_decay > 0):
        raise ValueError(
            f"log_decay must be <= 0 (the log of a gate in (0, 1]); got a maximum of "
            f"{float(jnp.max(log_decay))}"
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
    inside, decay, q_scale, k_scale = block_scales(log_decay)
    # where twice: exp(b_i - b_j) for j > i may overflow, and its gradient with it.
    between = inside[..., :, None] - inside[..., None, :]
    weights = jnp.where(visible, jnp.exp(jnp.where(visible, between, 0.0)), 0.0)
    return weights, jnp.moveaxis(decay, 2, 0)[..., None], q_scale, k_scale


def block_scales(log_decay):
    """A block's gates as `chunk_gates` (and the context-parallel path, a device's positions
    as one block) carry them, from log gates [..., C]: (b [..., C], exp(A) [..., 1], the
    queries' exp(b_i) and the keys' exp(A - b_j) [..., C, 1])."""
    inside = jnp.cumsum(log_decay, axis=-1)  # b
    total = inside[..., -1:]  # A
    return inside, jnp.exp(total), jnp.exp(inside)[..., None], jnp.exp(total - inside)[..., None]


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


def gate_features(log_decay, chunk: int | None = None):
    """`attention.decay_sums` as features: [B, L, N] -> (qg, kg), each [B, L, N, 2 + J], with
    qg_i · kg_j = Σ_{t=j+1..i} log_decay[t] for j <= i (j > i: any value, for a causal mask
    to hide), so that softmax adds its gates in the scores' own product (`with_gate_features`).

    In chunks of C positions: qg_i = [b_i, 1, D(I, ·)] and kg_j = [1, -b_j, onehot(J)], b_i
    the gates of i's chunk I up to i (`chunk_gates`) and D(I, J) = Σ_{J <= K < I} A_K the
    totals A of chunk J and of those between it and I: b_i - b_j inside a chunk, b_i + (A_J -
    b_j) + the chunks between for a key of an earlier chunk J. Each D is a sum of terms <= 0,
    so no digit is lost to a difference of long sums; b_i - b_j is the difference of two
    sums of at most C gates.
    """
    b, length, n = log_decay.shape
    # 2 + J features widen the product: at most 32 chunks (H + 34), of 64 positions or more.
    c = min(chunk or max(64, -(-length // 32)), length)
    x = jnp.pad(log_decay, ((0, 0), (0, -length % c), (0, 0))).reshape(b, -1, c, n)
    j = x.shape[1]  # x [B, J, C, N]
    inside = jnp.cumsum(x, axis=2)  # b
    chunks = jnp.arange(j)
    from_j = (chunks[:, None] >= chunks[None, :])[:, :, None]  # K >= J, [J(K), J, 1]
    upto = jnp.cumsum(jnp.where(from_j, inside[:, :, None, -1], 0.0), axis=1)  # J <= K <= I
    d = jnp.pad(upto[:, :-1], ((0, 0), (1, 0), (0, 0), (0, 0)))  # J <= K < I: [B, I, J, N]
    d = jnp.broadcast_to(jnp.moveaxis(d, 2, 3)[:, :, None], (b, j, c, n, j))
    onehot = jnp.broadcast_to(jnp.eye(j, dtype=x.dtype)[None, :, None, None], (b, j, c, n, j))
    ones = jnp.ones_like(inside[..., None])
    qg = jnp.concatenate([inside[..., None], ones, d], axis=-1)
    kg = jnp.concatenate([ones, -inside[..., None], onehot], axis=-1)
    shape = (b, j * c, n, j + 2)
    return qg.reshape(shape)[:, :length], kg.reshape(shape)[:, :length]


def with_gate_features(q, k, v, log_decay):
    """q [B, L, N, H], k, v [B, M, K, H] and log gates [B, L, N] -> q and k widened by
    `gate_features` (the gates' part times √H, which the scores' 1/√H undoes), keys and values
    per query head: (q·k)/√H + Σ_{t=j+1..i} log_decay[t] in one product."""
    n, root = q.shape[2], q.shape[-1] ** 0.5
    k, v = (jnp.swapaxes(per_query_head(jnp.swapaxes(x, 1, 2), n), 1, 2) for x in (k, v))
    qg, kg = gate_features(log_decay)
    q = jnp.concatenate([q, (root * qg).astype(q.dtype)], axis=-1)
    return q, jnp.concatenate([k, kg.astype(k.dtype)], axis=-1), v


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
