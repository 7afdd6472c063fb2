"""Context parallelism: attention over rows whose positions are split across devices
(issue 53 item 3).

Glossary of shapes: B batch, L length (a whole row), l = L / C positions a device holds,
N query heads, K key/value heads, G = N / K, H head dim, F feature dim, E value columns,
C devices on the context axis.

When the ambient mesh (`jax.set_mesh`) has a "context" axis of C > 1 devices, the attention
kinds (attention.py) hand their sums over to this module after rotating q and k at the
global positions: each device holds l = L / C positions of every row, inside `jax.shard_map`
manual over "context" only (rows and heads stay XLA's to place, so data, fsdp and tensor
parallelism compose with it).

  softmax   ring attention (Liu et al. 2023): each device keeps its queries and passes its
            keys and values, with their positions, padding and segments, around the ring
            (C - 1 hops), folding each block into an online softmax (running max, sum and
            output; Milakov and Gimelshein 2018). Causal rows are laid out zig-zag: of 2C
            chunks, device d holds d and 2C-1-d (hence L divisible by 2C), so that after the
            first hop every device folds exactly half a block, and none idles while another
            works.
  linear,   LASP (Sun et al. 2024): each device forms its block's own sums (the chunked
  cosine    `attention_core.kernel_sums`) and its block's state Σ_j φ(k_j) v_jᵀ [B, K, F, E]
            (with RoPE in the numerator, eq. 19, R_jφ(k_j): the rotation is in the
            features, so the state is summed as any other); the states of the earlier
            devices, gathered (C states: O(F·E) per hop, never O(L)), decayed by the
            blocks' gates and restarted where a segment starts, are what its queries read of
            the earlier keys (`attention_core.carry_step`, the carry of the chunked sums).

Outputs and gradients equal the single-device forms to float32 rounding; dropout draws the
same bits (`_threefry.bernoulli_at` at the global indices). tests/context_parallel_test.py.
"""

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax.sharding import PartitionSpec as P

from roformer_jax.nn import _threefry, attention_core, decay, masks
from roformer_jax.nn.attention_core import (
    KernelOptions,
    carry_step,
    compute_dtype,
    grouped_product,
)

AXIS = "context"  # the mesh axis the positions are split over


def context_size() -> int:
    """C, the devices on the ambient mesh's "context" axis (1: no mesh, or no such axis)."""
    mesh = jax.sharding.get_abstract_mesh()
    return 1 if mesh.empty or AXIS not in mesh.axis_names else mesh.shape[AXIS]


def check_length(length: int, context: int) -> None:
    """Raises ValueError unless `context` devices can hold L = `length` positions zig-zag."""
    if length % (2 * context):
        raise ValueError(
            f"length {length} is not divisible by 2 x mesh.context = {2 * context}: each of the "
            f"{context} devices holds two chunks of every row (zig-zag, for causal balance)"
        )


def check_model(cfg, context: int, lengths=()) -> None:
    """Raises ValueError unless the ModelConfig `cfg` runs with each row's positions split
    over `context` devices, at each of `lengths` (every length the run feeds it)."""
    for length in lengths:
        check_length(length, context)
    refused = cfg.kind.no_ring
    if refused is None:
        raise ValueError(
            f"attention={cfg.attention!r} has no context-parallel form (ring attention or "
            "state passing between devices): run it with mesh.context=1"
        )
    uses = {
        "bias": (cfg.encoding.bias is not None, f"position={cfg.position!r}'s bias [N, L, M]"),
        "log_decay": (
            getattr(cfg.attention_section, "gate", "none") != "none",
            f"sections.{cfg.attention}.gate's decay between every query and key",
        ),
    }
    for name, (used, what) in uses.items():
        if used and name in refused:
            raise ValueError(
                f"mesh.context={context}: attention={cfg.attention!r} cannot pass {what} "
                "around the ring of devices; use mesh.context=1 or a linear kind"
            )


def _split(in_specs, out_specs):
    """shard_map manual over the context axis only, of the ambient mesh."""
    return functools.partial(
        jax.shard_map, in_specs=in_specs, out_specs=out_specs, axis_names={AXIS}
    )


# ---------------------------------------------------------------- softmax: ring attention


class _Block(NamedTuple):
    """The keys a device holds, passed around the ring: k, v [B, l, K, H], positions int
    [l] (global), mask bool [B, l] or None, segments int [B, l] (numbered along the whole
    row, `segments.segment_index`) or None."""

    k: jax.Array
    v: jax.Array
    positions: jax.Array
    mask: jax.Array | None
    segments: jax.Array | None


class _Online(NamedTuple):
    """The online softmax of l queries: the running max and sum [B, K, G, l, 1] and output
    [B, K, G, l, H], all in the compute dtype."""

    top: jax.Array
    total: jax.Array
    out: jax.Array


class _Ring(NamedTuple):
    """What every fold of a ring takes beyond the blocks: see `softmax_attention`."""

    causal: bool
    window: int | None
    chunk: int | None
    length: int  # L, of the whole row (dropout's element index)
    dropout_rate: float
    dropout_rng: jax.Array | None
    example_ids: jax.Array | None


def softmax_attention(
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    segments=None,
    window=None,
    chunk=None,
    sinks=None,
    dropout_rate=0.0,
    dropout_rng=None,
    example_ids=None,
):
    """`attention.softmax_attention`'s sums as ring attention over the context axis.

    q [B, L, N, H], k, v [B, L, K, H], rotated at their global positions; mask [B, L];
    segments int [B, L], the segments numbered along the row (`segments.segment_index`);
    window, chunk, sinks [N], dropout and example_ids [B] as there. Returns [B, L, N, H] in
    q's dtype.
    """
    b, length, n, h = q.shape
    context = context_size()
    check_length(length, context)
    if n * length * length >= 2**32 and dropout_rate > 0.0:
        raise ValueError(f"rows of {(n, length, length)} have 2^32 or more elements")
    ring = _Ring(causal, window, chunk, length, dropout_rate, None, None)
    extra = dict(dropout_rng=dropout_rng, example_ids=example_ids, sinks=sinks)
    if dropout_rate > 0.0:
        extra["example_ids"] = jnp.arange(b) if example_ids is None else example_ids
        extra["dropout_rng"] = jax.random.key_data(dropout_rng)
    extra = {name: x for name, x in extra.items() if x is not None}
    rows = P(None, AXIS)
    split = _split((rows, rows, rows, rows, rows, P()), rows)

    @split
    def ring_of_devices(q, k, v, mask, segments, extra):
        ring_here = ring._replace(
            dropout_rng=extra.get("dropout_rng"), example_ids=extra.get("example_ids")
        )
        return _ring_softmax(q, k, v, mask, segments, extra.get("sinks"), ring_here)

    return ring_of_devices(q, k, v, mask, segments, extra)


def _ring_softmax(q, k, v, mask, segments, sinks, ring: _Ring):
    """One device's part (inside shard_map): q [B, l, N, H] and its block of keys, k, v
    [B, l, K, H], mask and segments [B, l] or None, in the row's order -> [B, l, N, H]."""
    c, d = jax.lax.axis_size(AXIS), jax.lax.axis_index(AXIS)
    b, l, n, h = q.shape
    kv = k.shape[2]
    half = l // 2
    if ring.causal:  # chunks d and 2C-1-d of 2C
        q, k, v, mask, segments = (_zigzag(x, c) for x in (q, k, v, mask, segments))
        positions = jnp.concatenate(
            [d * half + jnp.arange(half), (2 * c - 1 - d) * half + jnp.arange(half)]
        )
    else:
        positions = d * l + jnp.arange(l)
    dtype = compute_dtype(q)
    queries = (q.reshape(b, l, kv, n // kv, h).transpose(0, 2, 3, 1, 4), positions, segments)
    block = _Block(k, v, positions, mask, segments)
    start = jnp.full((b, kv, n // kv, l, 1), jnp.finfo(dtype).min, dtype)
    acc = _Online(start, jnp.zeros_like(start), jnp.zeros((b, kv, n // kv, l, h), dtype))
    acc = _fold(acc, queries, block, ring)
    shift = [(i, (i + 1) % c) for i in range(c)]
    for hop in range(1, c):
        block = jax.tree.map(functools.partial(jax.lax.ppermute, axis_name=AXIS, perm=shift), block)
        if ring.causal:  # the block of device (d - hop) mod C: half of it, or half the queries
            acc = jax.lax.cond(
                (d - hop) % c < d,
                lambda acc, block: _fold(acc, queries, _half(block, 0), ring),
                lambda acc, block: _fold_later_queries(acc, queries, block, ring),
                acc,
                block,
            )
        else:
            acc = _fold(acc, queries, block, ring)
    out = _finish(acc, sinks)  # [B, K, G, l, H]
    out = out.transpose(0, 3, 1, 2, 4).reshape(b, l, n, h).astype(q.dtype)
    return _zigzag(out, c, inverse=True) if ring.causal else out


def _half(x, which: int):
    """The first (0) or second (1) half of each [.., l, ..] array of a `_Block` or queries."""
    if isinstance(x, _Block):
        return _Block(*(None if a is None else _half(a, which) for a in x))
    axis = 0 if x.ndim == 1 else 1
    size = x.shape[axis] // 2
    return jax.lax.slice_in_dim(x, which * size, (which + 1) * size, axis=axis)


def _fold_later_queries(acc: _Online, queries, block: _Block, ring: _Ring) -> _Online:
    """`_fold` of a block that only the second half of the queries sees (zig-zag: a later
    device's keys, all after the first chunk and before the second)."""
    q, positions, segments = queries
    size = q.shape[3] // 2
    later = (q[:, :, :, size:], positions[size:], None if segments is None else segments[:, size:])
    rest = _Online(*(x[:, :, :, size:] for x in acc))
    done = _fold(rest, later, block, ring)
    return _Online(*(jnp.concatenate([x[:, :, :, :size], y], axis=3) for x, y in zip(acc, done)))


def _fold(acc: _Online, queries, block: _Block, ring: _Ring) -> _Online:
    """The online softmax `acc` of queries (q [B, K, G, l, H], positions [l], segments
    [B, l] or None) with one more block of keys."""
    q, positions, segments = queries
    b, kv, g, _, h = q.shape
    dtype = acc.top.dtype
    scores = jnp.einsum("BKGLH,BMKH->BKGLM", q, block.k, preferred_element_type=dtype)
    scores = scores * (h**-0.5)
    visible = masks.sees(
        positions, block.positions, causal=ring.causal, window=ring.window, chunk=ring.chunk
    )  # [l, M]
    if block.mask is not None:
        visible = visible & block.mask[:, None, None, None, :]
    if segments is not None:
        same = segments[:, :, None] == block.segments[:, None, :]  # [B, l, M]
        visible = visible & same[:, None, None]
    scores = jnp.where(visible, scores, jnp.finfo(dtype).min)
    top = jnp.maximum(acc.top, jax.lax.stop_gradient(jnp.max(scores, -1, keepdims=True)))
    scale = jnp.exp(acc.top - top)
    weights = jnp.where(visible, jnp.exp(scores - top), 0.0)
    total = acc.total * scale + jnp.sum(weights, -1, keepdims=True)
    if ring.dropout_rate > 0.0:
        head = jnp.arange(kv * g, dtype=jnp.uint32).reshape(kv, g, 1, 1)
        rows = head * np.uint32(ring.length) + positions.astype(jnp.uint32)[:, None]
        element = rows * np.uint32(ring.length) + block.positions.astype(jnp.uint32)[None, :]
        keep = _threefry.bernoulli_at(
            ring.dropout_rng, ring.example_ids, 1.0 - ring.dropout_rate, element
        )  # [B, K, G, l, M]
        weights = _threefry.dropped(weights, keep, ring.dropout_rate)
    update = jnp.einsum(
        "BKGLM,BMKH->BKGLH", weights.astype(block.v.dtype), block.v, preferred_element_type=dtype
    )
    return _Online(top, total, acc.out * scale + update)


def _finish(acc: _Online, sinks):
    """out / total, with sinks [N] (or None) in the denominator; zeros where no key was
    visible (as `attention_core.softmax_over_visible`)."""
    top, total, out = acc
    if sinks is not None:
        kv, g = top.shape[1:3]
        sinks = sinks.reshape(1, kv, g, 1, 1).astype(top.dtype)
        new_top = jnp.maximum(top, sinks)
        scale = jnp.exp(top - new_top)
        total, out = total * scale + jnp.exp(sinks - new_top), out * scale
    seen = total > 0
    return jnp.where(seen, out / jnp.where(seen, total, 1.0), 0.0)


def _zigzag(x, c, *, inverse=False):
    """Positions [B, l, ...] (or None) of a device's contiguous block (chunks 2d, 2d+1 of 2C)
    -> its zig-zag chunks d and 2C-1-d; `inverse` the way back. Two half-blocks sent per
    device (ppermute), never the row."""
    if x is None:
        return None
    # Chunk i of 2C: held at device i // 2 (contiguous) and at zig(i) (zig-zag).
    zig = [i if i < c else 2 * c - 1 - i for i in range(2 * c)]
    even = [(i // 2, zig[i]) for i in range(0, 2 * c, 2)]  # the even chunks' moves
    odd = [(i // 2, zig[i]) for i in range(1, 2 * c, 2)]
    swapped = jax.lax.axis_index(AXIS) % 2 == 1  # zig-zag: an odd device's first chunk is odd
    first, second = _half(x, 0), _half(x, 1)
    if inverse:
        even_chunk = jnp.where(swapped, second, first)
        odd_chunk = jnp.where(swapped, first, second)
        first = jax.lax.ppermute(even_chunk, AXIS, [(t, s) for s, t in even])
        second = jax.lax.ppermute(odd_chunk, AXIS, [(t, s) for s, t in odd])
    else:
        even_chunk = jax.lax.ppermute(first, AXIS, even)
        odd_chunk = jax.lax.ppermute(second, AXIS, odd)
        first = jnp.where(swapped, odd_chunk, even_chunk)
        second = jnp.where(swapped, even_chunk, odd_chunk)
    return jnp.concatenate([first, second], axis=1)


# ---------------------------------------------------------------- linear kinds: LASP


_KERNEL_INPUTS = ("den_features", "mask", "segments", "log_decay")  # those that may be None


def kernel_attention(
    qn, kn, v, *, den_features=None, mask, causal, options, segments=None, log_decay=None
):
    """`attention_core.kernel_attention` (without a decode state) with the positions split
    over the context axis: each device's own sums, plus what the other devices' keys add
    (`_across`). Arrays heads-major as there: [B, N or K, L, F]; mask, segments [B, L];
    log_decay [B, N, L]. Returns (out [B, N, L, H], denominators [B, N, L, 1], None)."""
    check_length(qn.shape[2], context_size())
    options = KernelOptions(eps=options.eps, chunk_size=options.chunk_size)
    heads_major, rows = P(None, None, AXIS), P(None, AXIS)
    given = zip(_KERNEL_INPUTS, (den_features, mask, segments, log_decay), strict=True)
    given = {name: x for name, x in given if x is not None}
    specs = {name: rows if name in ("mask", "segments") else heads_major for name in given}

    @_split((heads_major, heads_major, heads_major, specs), (heads_major, heads_major))
    def on_each_device(qn, kn, v, given):
        given = dict.fromkeys(_KERNEL_INPUTS) | given  # None: not given
        across = functools.partial(
            _across, causal=causal, segments=given["segments"], log_decay=given["log_decay"]
        )
        out, den, _ = attention_core.kernel_attention(
            qn, kn, v, causal=causal, options=options, across=across, **given
        )
        return out, den

    return (*on_each_device(qn, kn, v, given), None)


def _across(qx, kx, values, *, causal, segments, log_decay):
    """What the keys of the other devices add to each query's sums (inside shard_map):
    qx [B, N, l, F], kx [B, K, l, F], values [B, K, l, E] (padding already zero) ->
    [B, N, l, E]. The earlier devices' (and, not causal, the later devices') states, each
    of its block's edge segment, carried as `attention_core._carried` carries chunks'."""
    b, _, l, _ = qx.shape
    if segments is None:
        segments = jnp.zeros((b, l), jnp.int32)
    first = (segments == segments[:, :1])[:, None, :, None]  # [B, 1, l, 1]
    last = (segments == segments[:, -1:])[:, None, :, None]
    ends = jax.lax.all_gather(
        jnp.stack([segments[:, 0], segments[:, -1]], -1), AXIS
    )  # [C, B, 2]: first, last
    whole = ends[:, :, 0] == ends[:, :, 1]  # [C, B]
    q_scale = k_scale = gates = None
    if log_decay is not None:  # the device's positions as one block of gates
        _, block_decay, q_scale, k_scale = decay.block_scales(log_decay)
        gates = jax.lax.all_gather(block_decay[..., None], AXIS)  # [C, B, N, 1, 1]
    continued = ends[1:, :, 0] == ends[:-1, :, 1]  # [C - 1, B]: d's first is d-1's last
    out = _read(
        qx,
        kx,
        values,
        q_scale,
        k_scale,
        source=last,
        readers=first,
        whole=whole,
        continued=jnp.concatenate([jnp.zeros_like(continued[:1]), continued]),
        gates=gates,
    )
    if not causal:
        out = out + _read(
            qx,
            kx,
            values,
            None,
            None,
            source=first,
            readers=last,
            whole=whole,
            continued=jnp.concatenate([continued, jnp.zeros_like(continued[:1])]),
            gates=None,
            later=True,
        )
    return out


def _read(
    qx, kx, values, q_scale, k_scale, *, source, readers, whole, continued, gates, later=False
):
    """Each device's state of its `source` segment's keys, gathered and carried over the
    devices (from the earlier ones; `later`: the later ones), read by the queries of its
    `readers` segment. whole, continued [C, B]; gates [C, B, N, 1, 1] or None."""
    if k_scale is not None:
        kx = kx * k_scale
    if q_scale is not None:
        qx = qx * q_scale
    state = jnp.einsum("BKMF,BKME->BKFE", kx, jnp.where(source, values, 0.0))
    states = jax.lax.all_gather(state, AXIS)  # [C, B, K, F, E]
    flags = (whole[..., None, None, None], continued[..., None, None, None])
    _, carried = jax.lax.scan(
        carry_step, jnp.zeros_like(state), (states, *flags, gates), reverse=later
    )
    mine = carried[jax.lax.axis_index(AXIS)]
    return grouped_product(jnp.where(readers, qx, 0.0), mine)
