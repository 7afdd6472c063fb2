"""What the attention kinds' full forms (attention.py) and decode steps (attention_step.py)
share: softmax over the visible keys, the linear kinds' options, features and kernel sums.

Glossary of shapes:
  B batch, L query length, M key length, N query heads, K key/value heads (N a multiple of
  K), G = N / K query heads per key/value head, H head dim,
  F feature dim (of a feature map φ), E value columns (H, or H + 1 with a column of ones),
  J number of chunks, C chunk length.
Heads-major arrays ([B, N, L, F]) are what the kernel sums take: XLA's CPU matmuls want the
batch axes first, so one transpose in and out beats one per product.
Grouped-query attention (GQA): query head n reads key/value head n // G (HF's `repeat_kv`
order). Keys and values are never repeated: the G query heads of a group meet their key/value
head in one product, as if they were G times as many queries.
"""

import dataclasses

import jax
import jax.numpy as jnp

from roformer_jax.nn import _attention_cpu, _threefry, decay, feature_maps
from roformer_jax.nn.attention_inputs import check_array
from roformer_jax.nn.sections import check_count
from roformer_jax.nn.sinks import refuse, softmax_with_sinks

# Where linear attention applies the rotation (see `attention.linear_attention`).
PLACEMENTS = ("numerator", "both", "before_feature_map")


def on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def compute_dtype(x):
    # Sums over up to M keys: accumulate in float32 at least, float64 when given.
    return jnp.promote_types(x.dtype, jnp.float32)


def heads(x):
    """[B, L, N, F] <-> [B, N, L, F]."""
    return jnp.swapaxes(x, 1, 2)


@dataclasses.dataclass(frozen=True)
class KernelOptions:
    """The options of every linear kind, full form and decode step alike.

    eps: how far the denominator is moved away from zero, keeping its sign (`guard`).
    chunk_size: C, the positions per chunk of the causal sums (`kernel_sums`).
    """

    eps: float = 1e-6
    chunk_size: int = 64

    def __post_init__(self):
        # eps = 0 lets a zero denominator (relu's φ) divide into NaN; a chunk is >= 1 position.
        if not isinstance(self.eps, jax.core.Tracer) and not self.eps > 0:
            raise ValueError(f"eps={self.eps!r}; expected a number > 0")
        check_count("chunk_size", self.chunk_size, " (positions per chunk)")


@dataclasses.dataclass(frozen=True)
class LinearOptions(KernelOptions):
    """`attention.linear_attention`'s options (its step's too), beyond KernelOptions'.

    placement: where a rotation goes, one of PLACEMENTS (see `linear_attention`).
    feature_map: φ, a key of feature_maps.FEATURE_MAPS.
    projection: a random φ's matrix (FAVOR+: [F, H], drawn by the caller with
      FEATURE_MAPS["favor"].draw); None for a deterministic φ.
    """

    placement: str = "numerator"
    feature_map: str = "elu"
    projection: jax.Array | None = None

    def check(self, head_dim: int, *, rotated: bool) -> None:
        """Raises ValueError naming the option that does not fit q's head dim H, or a
        rotation (`rotated`) of φ's features."""
        if self.projection is not None:
            check_array(self.projection, "projection")
        feature_maps.check(self.feature_map, self.projection, head_dim)
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement={self.placement!r}; expected one of {PLACEMENTS}")
        features = None if self.projection is None else self.projection.shape[0]
        if rotated and self.placement != "before_feature_map" and features and features % 2:
            # Said here: RoPE would call the F features it rotates a "head dim".
            raise ValueError(
                f"projection has {features} random features; placement={self.placement!r} "
                "rotates φ's features in pairs, so their number must be even"
            )

    def phi(self):
        """(φ of queries, φ of keys), each x [..., H] -> [..., F]."""
        return feature_maps.query_and_key_maps(self.feature_map, self.projection)


def option_names(options: type) -> frozenset[str]:
    """The keywords an options dataclass takes (an `AttentionKind`'s record of them)."""
    return frozenset(field.name for field in dataclasses.fields(options))


def kind_options(kind: str, options_type: type, options: dict):
    """options_type(**options), a linear kind's options; TypeError for a keyword it does not
    take, naming those it does (ValueError for sinks, `sinks.refuse`)."""
    refuse(kind, options)
    names = option_names(options_type)
    unknown = sorted(set(options) - names)
    if unknown:
        raise TypeError(f"{kind} takes no {unknown[0]!r}; its options are {sorted(names)}")
    return options_type(**options)


def softmax_over_visible(
    q,
    k,
    v,
    visible,
    bias,
    dropout_rate=0.0,
    dropout_rng=None,
    example_ids=None,
    sinks=None,
    scale=None,
):
    """softmax(q kᵀ / √H + bias) v over the visible keys; q, k already rotated.

    q [B, L, N, H], k, v [B, M, K, H]; visible: bool, broadcastable to [B, N, L, M]; bias
    [B or 1, N, L, M] or None. A row with no visible key gets zeros. Dropout as in
    `attention.softmax_attention`; sinks [N] or None, as `sinks.softmax_with_sinks`.
    scale: the scores' factor, 1/√H of q's H when None; given where q and k are wider than v
    (`decay.with_gate_features`), which the fused form does not take.
    Returns [B, L, N, H] in q's dtype.
    """
    if bias is not None:
        _check_bias(bias, q, k)
    dtype = compute_dtype(q)
    # The fused form forms its scores in float32: float64 inputs keep the einsum form's.
    fits = dropout_rate == 0.0 and sinks is None and scale is None
    if fits and not on_cpu() and dtype == jnp.float32:
        return _fused_softmax(q, k, v, visible, bias)
    b, length, n, h = q.shape
    kv, keys = k.shape[2], k.shape[1]
    g = n // kv
    # Everything [B, K, G, L, M], the scores in the order the product yields them: q as
    # [B, L, K, G, H] made XLA transpose the whole [L, M] scores of every head, and reshaping
    # the scores to [B, N, L, M] cost forward + backward 10-25% at L = 4096, more with grouped
    # heads (benchmarks/attention.py --case=softmax,4096,fwd+bwd,K=2, 2 quiet cores).
    q = q.reshape(b, length, kv, g, h).transpose(0, 2, 3, 1, 4)

    def grouped(x):  # [B or 1, N or 1, L or 1, M] -> [B or 1, K or 1, G or 1, L or 1, M]
        x = jnp.asarray(x)
        x = x.reshape((1,) * (4 - x.ndim) + x.shape)
        heads_ = (kv, g) if x.shape[1] == n else (1, 1)
        return x.reshape(x.shape[0], *heads_, *x.shape[2:])

    visible = grouped(visible)
    scale = h**-0.5 if scale is None else scale
    scores = jnp.einsum("BKGLH,BMKH->BKGLM", q, k, preferred_element_type=dtype) * scale
    if bias is not None:
        scores = scores + grouped(bias).astype(dtype)
    logits = jnp.where(visible, scores, jnp.finfo(dtype).min)
    if sinks is None:
        weights = jax.nn.softmax(logits, axis=-1)
    else:
        weights = softmax_with_sinks(logits, grouped(sinks[None, :, None, None]))
    # A row with no visible key would otherwise be a uniform average over padding.
    weights = jnp.where(visible, weights, 0.0)
    if dropout_rate > 0.0:
        if example_ids is None:
            example_ids = jnp.arange(weights.shape[0])
        shape = (b, n, length, keys)
        keep = _threefry.bernoulli_rows(dropout_rng, example_ids, 1.0 - dropout_rate, shape)
        weights = _threefry.dropped(weights, grouped(keep), dropout_rate)
    weights = weights.astype(v.dtype)  # [B, K, G, L, M]
    out = jnp.einsum("BKGLM,BMKH->BLKGH", weights, v).reshape(b, length, n, v.shape[-1])
    return out.astype(q.dtype)


def _check_bias(bias, q, k) -> None:
    check_array(bias, "bias")
    expected = (q.shape[2], q.shape[1], k.shape[1])
    if bias.ndim != 4 or bias.shape[1:] != expected or bias.shape[0] not in (1, q.shape[0]):
        raise ValueError(
            f"bias has shape {bias.shape}; expected [B or 1, N, L, M] = "
            f"[{q.shape[0]} or 1, {', '.join(map(str, expected))}]"
        )


def _fused_softmax(q, k, v, visible, bias):
    """`softmax_over_visible` without dropout, through `jax.nn.dot_product_attention`:
    cuDNN's fused kernel on GPUs where its contract fits, XLA's form elsewhere.

    Not used on CPU, where the einsum form above is what XLA runs fastest
    (benchmarks/attention.py); tests/attention_test.py checks that the two agree.
    """
    b, length, n, h = q.shape
    mask = jnp.broadcast_to(visible, (b, n, length, k.shape[1]))
    if bias is not None:
        bias = jnp.broadcast_to(bias, (b, n, length, k.shape[1])).astype(q.dtype)
    out = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=h**-0.5)
    # A row with no visible key: zeros, as `softmax_over_visible` gives, not an average over
    # padding.
    seen = jnp.swapaxes(jnp.any(mask, axis=-1), 1, 2)[..., None]  # [B, L, N, 1]
    return jnp.where(seen, out, 0).astype(q.dtype)


def guard(den, eps):
    """Moves den away from zero by at least eps, keeping its sign (0 counts as positive)."""
    return jnp.where(den < 0, jnp.minimum(den, -eps), jnp.maximum(den, eps))


def feature_sums(qf, key_sums):
    """qf_i·key_sums for each query and head: [B, L, N, F], [B, K, F] -> [B, N, L, 1]."""
    # The sums of each key/value head serve its G query heads: B·N·F numbers, not keys.
    key_sums = jnp.repeat(key_sums, qf.shape[2] // key_sums.shape[1], axis=1)  # [B, N, F]
    if on_cpu():
        return _attention_cpu.feature_sums(qf, key_sums)
    return heads(jnp.einsum("BLNF,BNF->BLN", qf, key_sums)[..., None])


def grouped_product(qf, states):
    """qf_i·states for each query of each head: [B, N, L, F], [B, K, F, E] -> [B, N, L, E].

    The G query heads of a key/value head are one product, as G·L queries."""
    b, n, length, f = qf.shape
    kv = states.shape[1]
    out = jnp.einsum("BKQF,BKFE->BKQE", qf.reshape(b, kv, n // kv * length, f), states)
    return out.reshape(b, n, length, -1)


def kernel_sums(terms, *, causal, chunk_size, segments=None, log_decay=None):
    """Σ_j (qf_i·kf_j) values_j over all j, or over j <= i when causal, for each term
    (qf, kf, values) of `terms`; O(L) memory. Returns one [B, N, L, E] per term.

    qf [B, N, L, F], kf [B, K, M, F], values [B, K, M, E] -> [B, N, L, E]; query head n reads
    key/value head n // G. segments: None, or int [B, L] (L == M), each token's segment
    numbered along the row (`segments.segment_index`): then only the j in i's segment count.
    Non-causal without segments: qf (kfᵀ values), O(L·F·E). Otherwise chunks of C positions;
    inside a chunk the masked C x C products are explicit, earlier (and, non-causal, later)
    chunks enter through sums of per-chunk states [J, B, K, F, E] (`_carried`). Sums are
    thus hierarchical (C terms, then J), which also keeps float32 rounding small. Never an
    [L, F, E] tensor, nor anything [L, L].
    log_decay: None, or [B, N, L] log gates (causal only, K = N: the caller repeats keys and
    values for each query head): key j's term at query i is weighted by
    exp(Σ_{t=j+1..i} log_decay[t]) (`decay.chunk_gates`). The terms share the mask and the
    gates, formed once (eq. 19's two sums: the gates' backward pass runs once, not twice).
    """
    if not causal and segments is None:
        return [
            grouped_product(qf, jnp.einsum("BKMF,BKME->BKFE", kf, values))
            for qf, kf, values in terms
        ]
    b, n, length, _ = terms[0][0].shape
    kv = terms[0][1].shape[1]
    g = n // kv
    c = min(chunk_size, length)
    pad = -length % c
    if pad:  # zero keys and values add nothing; the padded queries are cut off below
        widths = ((0, 0), (0, 0), (0, pad), (0, 0))
        terms = [tuple(jnp.pad(x, widths) for x in term) for term in terms]
        if segments is not None:
            segments = jnp.pad(segments, ((0, 0), (0, pad)), mode="edge")
        if log_decay is not None:
            log_decay = jnp.pad(log_decay, ((0, 0), (0, 0), (0, pad)))
    j = (length + pad) // c
    visible = jnp.tril(jnp.ones((c, c), bool)) if causal else None  # [C, C]
    if segments is not None:
        segments = segments.reshape(b, 1, j, c)  # [B, 1, J, C]
        same = segments[..., :, None] == segments[..., None, :]  # [B, 1, J, C, C]
        visible = same if visible is None else same & visible
    gates = None
    if log_decay is not None:
        inside, gates, q_scale, k_scale = decay.chunk_gates(log_decay.reshape(b, kv, j, c), visible)
    visible = jnp.tile(visible, (1,) * (visible.ndim - 2) + (g, 1))
    sums = []
    for qf, kf, values in terms:
        # A chunk's queries of the G heads of a group, [G·C, F], meet the chunk's keys in one
        # product: [B, N, L, F] = [B, K, G, J, C, F] -> [B, K, J, G·C, F] (no copy at G = 1).
        f = qf.shape[-1]
        qc = qf.reshape(b, kv, g, j, c, f).transpose(0, 1, 3, 2, 4, 5).reshape(b, kv, j, g * c, f)
        kc, vc = (x.reshape(b, kv, j, c, x.shape[-1]) for x in (kf, values))
        scores = jnp.einsum("BKJQF,BKJDF->BKJQD", qc, kc)
        if gates is None:
            carried = _carried(qc, kc, vc, segments, g)
        else:
            # exp(b_i) and exp(A - b_j) scale the product's ends, [C, E], not qc and kc,
            # [C, F]: rotated features are not formed again (and E = 1 for a denominator).
            scores = scores * inside
            carried = q_scale * _carried(qc, kc, k_scale * vc, segments, g, gates)
        scores = jnp.where(visible, scores, 0.0)
        out = jnp.einsum("BKJQD,BKJDE->BKJQE", scores, vc) + carried
        if not causal:
            out = out + _carried(qc, kc, vc, segments, g, later=True)
        out = out.reshape(b, kv, j, g, c, -1).transpose(0, 1, 3, 2, 4, 5)  # [B, K, G, J, C, E]
        sums.append(out.reshape(b, n, j * c, -1)[:, :, :length])
    return sums


def _carried(qc, kc, vc, segments, g, gates=None, *, later=False):
    """What the keys of earlier chunks (`later`: of later chunks) add to each query:
    Σ_j (qf_i·kf_j) values_j over those j, and only the j in i's segment when `segments`
    [B, 1, J, C] is given.

    qc [B, K, J, G·C, F], kc [B, K, J, C, F], vc [B, K, J, C, E] -> [B, K, J, G·C, E].
    Segments are runs, so the earlier keys in i's segment are those in the chunk's first
    segment, if i is in it (`later`: the later keys, of its last segment): R_j, summed by a
    scan over chunks that restarts where a segment starts at a chunk's first token and
    carries R_j on through a chunk wholly inside one segment. Only the states [J, B, K, F, E]
    of the chunks' last (`later`: first) segments are formed.
    gates: None, or each chunk's decay [J, B, K, 1, 1] (causal): the sums carried through a
    chunk are multiplied by it. The caller has scaled vc by `decay.chunk_gates`' exp(A - b_j)
    and scales the result by its exp(b_i); qc and kc are not scaled.
    """
    if gates is not None and segments is None:
        states = jnp.einsum("BKJDF,BKJDE->JBKFE", kc, vc)
        _, prefix = jax.lax.scan(decay.decayed_sum_step, jnp.zeros_like(states[0]), (states, gates))
        return jnp.einsum("BKJQF,JBKFE->BKJQE", qc, prefix)
    if segments is None:
        states = jnp.einsum("BKJDF,BKJDE->JBKFE", kc, vc)
        # Earlier chunks: an exclusive prefix sum of the states over chunks.
        if on_cpu():
            prefix = _attention_cpu.exclusive_cumsum(states)
        else:  # shifted, not cumsum - states: later chunks must not enter earlier sums' rounding
            prefix = jnp.concatenate(
                [jnp.zeros_like(states[:1]), jnp.cumsum(states[:-1], axis=0)], axis=0
            )
        return jnp.einsum("BKJQF,JBKFE->BKJQE", qc, prefix)
    first = segments == segments[..., :1]  # in the chunk's first segment
    last = segments == segments[..., -1:]  # in the chunk's last segment
    # Where the carried sums come from and who reads them; `edge` [B, 1, J]: the chunk's
    # segment at the side the sums come from; `shift`: the neighbour they come from.
    source, readers = (first, last) if later else (last, first)
    edge, shift = (0, -1) if later else (-1, 1)
    states = jnp.einsum("BKJDF,BKJDE->JBKFE", kc, jnp.where(source[..., None], vc, 0.0))
    whole = jnp.moveaxis(first[..., -1], 2, 0)  # [J, B, 1]: the chunk is one segment
    # The segment at the chunk's reading side continues from the neighbouring chunk: [J, B, 1].
    continued = segments[..., -1 - edge] == jnp.roll(segments[..., edge], shift, axis=-1)
    continued = jnp.moveaxis(continued.at[..., -1 - edge].set(False), 2, 0)
    flags = (whole[..., None, None], continued[..., None, None])  # [J, B, 1, 1, 1]
    _, carried = jax.lax.scan(
        carry_step, jnp.zeros_like(states[0]), (states, *flags, gates), reverse=later
    )
    reads = jnp.where(jnp.tile(readers, (1, 1, 1, g))[..., None], qc, 0.0)
    return jnp.einsum("BKJQF,JBKFE->BKJQE", reads, carried)


def carry_step(running, chunk):
    """One chunk of `_carried`'s scan. running: the keys' sums of the segment that the chunk
    before (in the scan's order) ended in; returns (the same after this chunk, R_j: those
    that this chunk's segment at its near side had before it); a decay (None: none) of the
    chunk multiplies what is carried through it."""
    state, whole, continued, decay = chunk
    before = jnp.where(continued, running, 0.0)
    through = before if decay is None else decay * before
    return state + jnp.where(whole, through, 0.0), before


def kernel_attention(
    qn,
    kn,
    v,
    *,
    den_features=None,
    mask,
    causal,
    options: KernelOptions,
    state=None,
    segments=None,
    log_decay=None,
    across=None,
):
    """Σ_j (qn_i·kn_j) v_j / guard(Σ_j qd_i·kd_j), all heads-major: queries [B, N, L, F],
    keys [B, K, M, F] and values [B, K, M, H] (query head n reads key/value head n // G).

    den_features=(qd, kd) when the denominator has its own features (eq. 19); otherwise it is
    Σ_j qn_i·kn_j, read off a column of ones appended to v in the same products.
    options: eps and chunk_size (a LinearOptions serves: it is a KernelOptions).
    segments: None, or int [B, L] numbering each token's segment (`kernel_sums`).
    Returns (out [B, N, L, H], the denominators before the guard [B, N, L, 1], None).

    With `state` (the sums over tokens seen before these, one per term, as in
    `attention_step.KernelState`), the queries also see those tokens, and the last item is
    the sums with these keys added: the recurrent form of the causal sums, one block of new
    tokens at a time.
    log_decay: None, or [B, N, L] log gates (causal): each term weighted by
    exp(Σ_{t=j+1..i} log_decay[t]) (`kernel_sums`), the state's too. The gates differ per
    query head, so keys, values and the state are then per query head (K = N).
    across: None, or (qx, kx, values) -> [B, N, L, E], what the keys held elsewhere add to
    each term's sums (context parallelism's other devices: `context_parallel.py`).
    """
    if log_decay is not None:
        n = qn.shape[1]
        kn, v = decay.per_query_head(kn, n), decay.per_query_head(v, n)
        if den_features is not None:
            den_features = (den_features[0], decay.per_query_head(den_features[1], n))

    def keys(x):  # padded keys -> 0; where, not *: a NaN in the padding must not leak
        return x if mask is None else jnp.where(mask[:, None, :, None], x, 0.0)

    ones = jnp.ones_like(v[..., :1])
    if den_features is None:
        terms = [(qn, kn, jnp.concatenate([v, ones], axis=-1))]
    else:
        qd, kd = den_features
        terms = [(qn, kn, v), (qd, kd, ones)]
    terms = [(qx, keys(kx), keys(values)) for qx, kx, values in terms]
    totals = kernel_sums(
        terms,
        causal=causal,
        chunk_size=options.chunk_size,
        segments=segments,
        log_decay=log_decay,
    )
    before = [None] * len(terms) if state is None else state
    sums, after = [], []
    for (qx, kx, values), total, seen in zip(terms, totals, before):
        if across is not None:
            total = total + across(qx, kx, values)
        if seen is not None:
            earlier = grouped_product(qx, seen)
            if log_decay is not None:  # the earlier tokens' sums decay by the new gates
                scales, seen, kx = decay.decay_state(seen, kx, log_decay)
                earlier = scales * earlier
            total = total + earlier
            after.append(seen + jnp.einsum("BKMF,BKME->BKFE", kx, values))
        sums.append(total)
    num, den = (sums[0][..., :-1], sums[0][..., -1:]) if den_features is None else sums
    return num / guard(den, options.eps), den, None if state is None else tuple(after)


def linear_features(q, k, *, rotation, options: LinearOptions):
    """Linear attention's (qn, kn, den_features), heads-major (queries [B, N, L, F], keys
    [B, K, M, F]): the features of the numerator and, under eq. (19), the denominator's own
    (`kernel_attention`)."""
    rotate = rotation is not None
    placement = options.placement
    if rotate and placement == "before_feature_map":
        q, k = rotation.q(q), rotation.k(k)
    phi_q, phi_k = options.phi()
    qf, kf = phi_q(q), phi_k(k)  # [B, L, N, F], [B, M, N, F]
    den_features = (heads(qf), heads(kf)) if rotate and placement == "numerator" else None
    if rotate and placement != "before_feature_map":
        # Fused into the rotation, φ is evaluated up to three times per feature (RoPE reads
        # each feature and its two neighbours). Still faster on CPU than materializing φ
        # first: the separate buffers that costs are fresh pages, and a first touch is slow
        # (benchmarks/attention.py).
        qf, kf = rotation.q(qf), rotation.k(kf)
    return heads(qf), heads(kf), den_features


def cosine_features(q, k, rotation):
    """[1, R_i q_i / |q_i|] and [1, R_j k_j / |k_j|], heads-major: [B, N, L, H + 1] and
    [B, K, M, H + 1]."""

    def unit(x):  # x / |x|, and 0 for x = 0
        squared = jnp.maximum(jnp.sum(x * x, axis=-1, keepdims=True), jnp.finfo(x.dtype).tiny)
        return x * jax.lax.rsqrt(squared)

    # Normalised before the rotation (the same, as RoPE preserves norms): RoPE reads every
    # feature twice, and the norms are then a separate pass instead of being recomputed.
    q, k = unit(q), unit(k)
    if rotation is not None:
        q, k = rotation.q(q), rotation.k(k)

    def features(x):  # [B, *, N, H] -> [1, x]: [B, *, N, H + 1]
        return jnp.concatenate([jnp.ones_like(x[..., :1]), x], axis=-1)

    return heads(features(q)), heads(features(k))
