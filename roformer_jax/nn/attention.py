"""Attention kinds as pure functions: softmax, linear (RoFormer eqs. 18-19) and cosine.

Glossary of shapes:
  B batch, L query length, M key length, N query heads, K key/value heads (N a multiple of
  K), G = N / K, H head dim,
  F feature dim (of a feature map φ), E value columns (H, or H + 1 with a column of ones),
  J number of chunks, C chunk length.

Every function takes q [B, L, N, H] and k, v [B, M, K, H] and returns [B, L, N, H] in q's
dtype. K < N is grouped-query attention (GQA; K = 1: multi-query): query head n reads
key/value head n // G, HF's `repeat_kv` order; k and v are never repeated. Common keyword
arguments:
  mask          [B, M] bool, True = real token. Padded keys add nothing to any numerator or
                denominator; a query whose keys are all padded gets zeros.
  causal        query i sees keys j <= i (needs L == M).
  rotation      how q and k are rotated (a `roformer_jax.nn.rope.Rotation`, e.g.
                `rope.rope_rotation(positions)`: RoPE, Su et al. 2021, eq. 14), or None. The
                kinds never see positions themselves, so any encoding that rotates q and k
                (scaled RoPE, xPos, ...) needs no keyword here.
  segment_ids   int [B, L] (needs L == M): packed rows. Query i sees key j only if both lie
                in the same segment, a run of equal ids (`segments.py`; ids of documents
                packed one after another). Padding is still marked by mask=False, whatever
                its id. Positions restarting per segment are the caller's
                (`segments.segment_positions`), as every rotation is.
  log_decay     [B, L, N] log gates (<= 0, per query head), causal only: key j's term at
                query i is weighted by exp(Σ_{t=j+1..i} log_decay[t]) (`decay_sums`), a
                decay that segments restart. Softmax adds the sum to its scores (FoX, Lin
                et al. 2025); the linear kinds multiply their numerator's and denominator's
                terms by its exp (with RoPE in the numerator and a constant gate: RetNet's
                retention, Sun et al. 2023, the denominator kept). 0: no decay.
Softmax attention also takes `bias` [B or 1, N, L, M], added to the scores (ALiBi), a
sliding `window`, a `chunk` (`masks.py`) and `sinks` (`sinks.py`); the linear kinds cannot
take a bias or sinks, since they never form the scores.
Linear attention's feature maps φ (elu + 1, ..., FAVOR+'s random features) are the table of
`feature_maps.py`.

The linear kinds (`linear_attention`, `cosine_attention`) never form the L x M matrix: their
memory is O(L) with or without `causal` or `segment_ids`. The causal form splits the
sequence into chunks of C positions, is quadratic inside a chunk and carries prefix sums of
the per-chunk states [J, B, K, F, E] across chunks, so no [L, F, E] tensor is ever built;
segments restart those sums at each segment's start (`attention_core.kernel_sums`).
Every form and step checks its inputs first (`attention_inputs.py`: a mask that is not bool,
integer q, k, v, ... fail naming the argument). What the full forms share with their decode
steps (attention_step.py) is in `attention_core.py`; the table of kinds is
`attention_kinds.ATTENTION_KINDS`.
Speed is measured in benchmarks/attention.py; what makes the CPU path fast is in
`_attention_cpu.py`, apart from the formulas.
"""

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import _attention_cpu, context_parallel, decay, masks, segments
from roformer_jax.nn.attention_core import (
    KernelOptions,
    LinearOptions,
    compute_dtype,
    cosine_features,
    feature_sums,
    grouped_product,
    guard,
    heads,
    kernel_attention,
    kind_options,
    linear_features,
    softmax_over_visible,
)
from roformer_jax.nn.attention_inputs import check_array, check_inputs
from roformer_jax.nn.rope import Rotation
from roformer_jax.nn.sinks import check_sinks


def decay_sums(log_decay):
    """Σ_{t=j+1..i} log_decay[t], the log of key j's weight at query i: [B, L, N] ->
    [B, N, L, L] (0 where j >= i).

    Each entry sums its own terms (t > j, then a running sum over i), so a gate is exact
    however long the product before it; O(L²), as softmax's scores.
    """
    x = jnp.swapaxes(log_decay, 1, 2)  # [B, N, L]
    t = jnp.arange(x.shape[-1])
    terms = jnp.where(t[:, None] > t[None, :], x[..., :, None], 0.0)  # [B, N, L(t), L(j)]
    return jnp.cumsum(terms, axis=-2)  # [B, N, L(i), L(j)]


def _segment_index(segment_ids):
    return None if segment_ids is None else segments.segment_index(segment_ids)


def _visible(mask, causal, segment_ids, window, chunk, length, keys):
    """Which keys each query sees: bool, broadcastable to [B, 1, L, M]."""
    visible = jnp.ones((1, 1, 1, keys), bool) if mask is None else mask[:, None, None, :]
    by_index = masks.sees(
        jnp.arange(length), jnp.arange(keys), causal=causal, window=window, chunk=chunk
    )
    visible = visible & by_index  # [B or 1, 1, L, M]
    if segment_ids is not None:
        index = segments.segment_index(segment_ids)
        visible = visible & (index[:, None, :, None] == index[:, None, None, :])
    return visible


def softmax_attention(
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    rotation: Rotation | None = None,
    bias=None,
    dropout_rate=0.0,
    dropout_rng=None,
    example_ids=None,
    segment_ids=None,
    window: int | None = None,
    chunk: int | None = None,
    sinks=None,
    log_decay=None,
):
    """softmax(R q (R k)ᵀ / √H + bias) v: R the rotation (when given), bias [B or 1, N, L, M];
    with log_decay [B, L, N] (causal), `decay_sums` added to the scores: FoX's forgetting
    attention.

    Scores and softmax are computed in float32 (float64 for float64 inputs). O(L·M) memory.
    `dropout_rate` > 0 drops attention weights (scaled by 1/(1 - rate)); needs `dropout_rng`.
    Row b's mask depends on that key and example_ids[b] only (int [B]; default arange(B)).
    window: None, or an int >= 1: sliding-window attention (Mistral; Gemma's local layers),
    query i sees the keys j with |i - j| < window (causal: i - window < j <= i), counted in
    the rows' indices; it composes with mask, segment_ids and grouped heads.
    chunk: None, or an int C >= 1: chunked attention (Llama 4's chunked layers), query i sees
    key j only when i // C == j // C (causal inside a chunk when causal), counted as window is.
    sinks: None, or [N], one logit per query head joining the denominator (gpt-oss):
    out_i = Σ_j e^{s_ij} v_j / (Σ_j e^{s_ij} + e^{sinks_n}) (`sinks.py`).
    Returns [B, L, N, H] in q's dtype.
    """
    check_inputs(
        q,
        k,
        v,
        mask=mask,
        causal=causal,
        rotation=rotation,
        segment_ids=segment_ids,
        log_decay=log_decay,
    )
    masks.check_span(window, "window")
    masks.check_span(chunk, "chunk")
    if sinks is not None:
        check_sinks(sinks, q.shape[2])
    _check_dropout(dropout_rate, dropout_rng, example_ids, q.shape[0])
    if rotation is not None:
        q, k = rotation.q(q), rotation.k(k)
    if context_parallel.context_size() > 1:
        _no_ring("softmax attention", bias=bias, log_decay=log_decay)
        return context_parallel.softmax_attention(
            q,
            k,
            v,
            mask=mask,
            causal=causal,
            segments=_segment_index(segment_ids),
            window=window,
            chunk=chunk,
            sinks=sinks,
            dropout_rate=dropout_rate,
            dropout_rng=dropout_rng,
            example_ids=example_ids,
        )
    scale = None
    if log_decay is not None:  # decay_sums in the scores' own product (docs/speed.md)
        scale = q.shape[-1] ** -0.5
        q, k, v = decay.with_gate_features(q, k, v, log_decay.astype(compute_dtype(q)))
    visible = _visible(mask, causal, segment_ids, window, chunk, q.shape[1], k.shape[1])
    return softmax_over_visible(
        q, k, v, visible, bias, dropout_rate, dropout_rng, example_ids, sinks, scale
    )


def _check_dropout(rate, rng, example_ids, batch: int) -> None:
    """Raises ValueError unless 0 <= rate < 1 and, for rate > 0, rng is one PRNG key and
    example_ids None or int [B] (what `_threefry.bernoulli_rows` draws each row's mask from)."""
    if not 0.0 <= rate < 1.0:  # 1 would keep no weight and divide by 0
        raise ValueError(f"dropout_rate={rate!r}; expected 0 <= dropout_rate < 1")
    if rate == 0.0:
        return
    if rng is None:
        raise ValueError(f"dropout_rate={rate} needs a dropout_rng")
    typed = isinstance(rng, jax.Array) and jnp.issubdtype(rng.dtype, jax.dtypes.prng_key)
    raw = isinstance(rng, jax.Array | np.ndarray) and rng.dtype == np.uint32
    if not ((typed and rng.shape == ()) or (raw and rng.shape == (2,))):
        what = f"shape {rng.shape} {rng.dtype}" if hasattr(rng, "dtype") else type(rng).__name__
        raise ValueError(f"dropout_rng must be one PRNG key, e.g. jax.random.key(seed); got {what}")
    if example_ids is not None:
        check_array(example_ids, "example_ids")
        if example_ids.shape != (batch,) or not jnp.issubdtype(example_ids.dtype, jnp.integer):
            raise ValueError(
                f"example_ids has shape {example_ids.shape} and dtype {example_ids.dtype}; "
                f"expected int [B] = ({batch},), each row's index in the global batch"
            )


def _no_ring(kind: str, **given) -> None:
    """Raises ValueError for an option that `kind` cannot take with its positions split over
    devices (the ambient mesh's context axis)."""
    for name, value in given.items():
        if value is not None:
            raise ValueError(
                f"{kind} with the positions split over devices (mesh.context > 1) cannot take "
                f"{name}: its [L, M] terms would travel around the ring; run it on one device"
            )


def _numerator_rope(q, k, v, *, phi, mask, eps, rotation):
    """Eq. (19), not causal: q [B, L, N, H], k, v [B, M, K, H] -> (out [B, N, L, H], the
    denominators [B, N, L, 1]); phi: (φ of queries, φ of keys).

    Keys first: S = Σ_j φ(k_j) and the state Σ_j R_jφ(k_j) v_jᵀ; then each query's
    [R_iφ(q_i)]ᵀ state / guard(φ(q_i)ᵀ S). The queries wait for the state
    (`_attention_cpu.after` says why).
    """
    phi_q, phi_k = phi
    kf = phi_k(k)
    if mask is not None:  # where, not *: a NaN in the padding must not leak
        kf = jnp.where(mask[:, :, None, None], kf, 0.0)
        v = jnp.where(mask[:, :, None, None], v, 0.0)
    key_sums = jnp.sum(kf, axis=1)  # [B, K, F]
    state = jnp.einsum("BKMF,BKME->BKFE", heads(rotation.k(kf)), heads(v))  # [B, K, F, H]
    qf = phi_q(_attention_cpu.after(q, state))
    num = grouped_product(heads(rotation.q(qf)), state)
    den = feature_sums(qf, key_sums)
    return num / guard(den, eps), den


def _min_abs_denominator(den, mask):
    """The smallest |denominator| of the real queries, a float32 scalar held constant under
    differentiation (a metric: how near eq. 18's guard comes to binding).

    den [B, N, L, 1]; mask [B, M] marks the real queries too when L == M (self-attention);
    otherwise every query counts.
    """
    size = jnp.abs(den).astype(jnp.float32)
    if mask is not None and mask.shape[1] == den.shape[2]:
        size = jnp.where(mask[:, None, :, None], size, jnp.inf)
    return jax.lax.stop_gradient(jnp.min(size))


def linear_attention(
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    rotation: Rotation | None = None,
    segment_ids=None,
    return_min_denominator=False,
    log_decay=None,
    **options,
):
    """Linear attention Σ_j sim(i, j) v_j / Σ_j sim'(i, j) with a feature map φ.

    Without a rotation, sim = sim' = φ(q_i)ᵀφ(k_j) (no positions). With one (R_i rotates at
    query i, R_j at key j), `placement` says where it goes:
      "numerator"          sim = [R_i φ(q_i)]ᵀ[R_j φ(k_j)], sim' = φ(q_i)ᵀφ(k_j)   eq. (19)
      "both"               sim = sim' = [R_i φ(q_i)]ᵀ[R_j φ(k_j)]                 eq. (18)
      "before_feature_map" sim = sim' = φ(R_i q_i)ᵀφ(R_j k_j)     (Performer + RoPE, Fig. 3)
    Eq. (19) keeps the denominator positive for a positive φ. Under eq. (18) it can be ~0 or
    negative, so the denominator is moved at least `eps` away from zero, keeping its sign
    (the same guard, a no-op for the other placements with elu, is applied everywhere).
    With feature_map="relu" a query can have φ(q_i)ᵀφ(k_j) = 0 for all j; its output is then
    the numerator divided by eps.

    Computed as φ(q_i)ᵀ Σ_j φ(k_j) v_jᵀ in float32 (or float64): O(L·F·H) time and O(L) memory;
    `causal` and `segment_ids` use chunks of `chunk_size` positions, whose sums restart at
    each segment's start (see `attention_core.kernel_sums`); the sums are formed once per
    key/value head, whatever G.
    options: the fields of `attention_core.LinearOptions` (placement="numerator",
    feature_map="elu", projection=None, eps=1e-6, chunk_size=64), which its decode step takes
    too. feature_map: a key of feature_maps.FEATURE_MAPS ("elu" = elu + 1, "relu", "softplus",
    "favor" = FAVOR+'s random features, whose matrix [F, H] is `projection`, drawn by the
    caller with FEATURE_MAPS["favor"].draw). No dropout.
    log_decay (causal): sim and sim' both times exp(`decay_sums`), in chunks as the causal
    sums are (`attention_core.kernel_sums`).
    Returns [B, L, N, H] in q's dtype; with return_min_denominator, (that, the smallest
    |denominator| of a real query before the guard, a float32 scalar).
    """
    check_inputs(
        q,
        k,
        v,
        mask=mask,
        causal=causal,
        rotation=rotation,
        segment_ids=segment_ids,
        log_decay=log_decay,
    )
    options = kind_options("linear attention", LinearOptions, options)
    options.check(q.shape[-1], rotated=rotation is not None)
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)

    # One sum over all keys, on one device.
    plain = not causal and segment_ids is None and context_parallel.context_size() == 1
    if rotation is not None and options.placement == "numerator" and plain:
        out, den = _numerator_rope(
            q, k, v, phi=options.phi(), mask=mask, eps=options.eps, rotation=rotation
        )
    else:
        qn, kn, den = linear_features(q, k, rotation=rotation, options=options)
        out, den = _kernel_form(
            qn,
            kn,
            v,
            den,
            mask=mask,
            causal=causal,
            segment_ids=segment_ids,
            options=options,
            log_decay=log_decay,
        )
    return _result(out, den, mask, out_dtype, return_min_denominator)


def cosine_attention(
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    rotation: Rotation | None = None,
    segment_ids=None,
    return_min_denominator=False,
    log_decay=None,
    **options,
):
    """Normalised-cosine attention: weights (1 + cos(R_i q_i, R_j k_j)) / Σ_j (same).

    Each similarity lies in [0, 2], so the weights are >= 0 and sum to 1 over the real keys.
    With a = R_i q_i / |q_i| and b = R_j k_j / |k_j| (the rotation must keep norms, as RoPE
    does),
    1 + aᵀb = [1, a]ᵀ[1, b]: linear attention with features F = H + 1, O(L) memory, the L x M
    matrix never formed. A zero q or k vector has cosine 0 with everything.
    options: the fields of `attention_core.KernelOptions` (eps=1e-6, chunk_size=64), which
    its decode step takes too.
    Returns [B, L, N, H] in q's dtype; with return_min_denominator, (that, the smallest
    denominator of a real query, a float32 scalar), as `linear_attention`; log_decay
    (causal) weights each term by exp(`decay_sums`), as there.
    """
    check_inputs(
        q,
        k,
        v,
        mask=mask,
        causal=causal,
        rotation=rotation,
        segment_ids=segment_ids,
        log_decay=log_decay,
    )
    options = kind_options("cosine attention", KernelOptions, options)
    out_dtype, dtype = q.dtype, compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qf, kf = cosine_features(q, k, rotation)
    out, den = _kernel_form(
        qf,
        kf,
        v,
        None,
        mask=mask,
        causal=causal,
        segment_ids=segment_ids,
        options=options,
        log_decay=log_decay,
    )
    return _result(out, den, mask, out_dtype, return_min_denominator)


def _kernel_form(qf, kf, v, den_features, *, mask, causal, segment_ids, options, log_decay):
    """The linear kinds' sums over keys (`attention_core.kernel_attention`): features qf
    [B, N, L, F], kf [B, K, M, F], v [B, M, K, H] -> (out [B, N, L, H], the denominators
    before the guard [B, N, L, 1]). den_features: None, or the denominator's own (eq. 19).
    log_decay: None, or [B, L, N] log gates."""
    split = context_parallel.context_size() > 1  # the positions split over devices
    kernel = context_parallel.kernel_attention if split else kernel_attention
    out, den, _ = kernel(
        qf,
        kf,
        heads(v),
        den_features=den_features,
        mask=mask,
        causal=causal,
        options=options,
        segments=_segment_index(segment_ids),
        log_decay=None if log_decay is None else decay.heads_last(log_decay, qf.dtype),
    )
    return out, den


def _result(out, den, mask, dtype, return_min_denominator: bool):
    """out [B, N, L, H] -> [B, L, N, H] in `dtype`; with return_min_denominator, (that, the
    smallest |denominator| of a real query)."""
    out = heads(out).astype(dtype)
    return (out, _min_abs_denominator(den, mask)) if return_min_denominator else out
