"""Attention kinds as pure functions: softmax, linear (RoFormer eqs. 18-19) and cosine.

Glossary of shapes:
  B batch, L query length, M key length, N heads, H head dim,
  F feature dim (of a feature map φ), E value columns (H, or H + 1 with a column of ones),
  K number of chunks, C chunk length.

Every function takes q [B, L, N, H] and k, v [B, M, N, H] and returns [B, L, N, H] in q's
dtype. Common keyword arguments:
  mask          [B, M] bool, True = real token. Padded keys add nothing to any numerator or
                denominator; a query whose keys are all padded gets zeros.
  causal        query i sees keys j <= i (needs L == M).
  rotation      how q and k are rotated (a `roformer_jax.nn.rope.Rotation`, e.g.
                `rope.rope_rotation(positions)`: RoPE, Su et al. 2021, eq. 14), or None. The
                kinds never see positions themselves, so any encoding that rotates q and k
                (scaled RoPE, xPos, ...) needs no keyword here.
Softmax attention also takes `bias` [B or 1, N, L, M], added to the scores (ALiBi); the
linear kinds cannot, since they never form the scores. Linear attention's feature maps φ
(elu + 1, ..., FAVOR+'s random features) are the table of `feature_maps.py`.

The linear kinds (`linear_attention`, `cosine_attention`) never form the L x M matrix: their
memory is O(L) with or without `causal`. The causal form splits the sequence into chunks of
C positions, is quadratic inside a chunk and carries prefix sums of the per-chunk states
[K, B, N, F, E] across chunks, so no [L, F, E] tensor is ever built.
Speed is measured in benchmarks/attention.py; what makes the CPU path fast is in
`_attention_cpu.py`, apart from the formulas.
"""

from collections.abc import Callable

import jax
import jax.numpy as jnp

from roformer_jax.nn import _attention_cpu, _threefry, feature_maps
from roformer_jax.nn.rope import Rotation

# Where linear attention applies the rotation (see `linear_attention`).
PLACEMENTS = ("numerator", "both", "before_feature_map")


def _on_cpu() -> bool:
    return jax.default_backend() == "cpu"


def _check_shapes(q, k, v, mask, causal) -> None:
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            f"q, k, v must be [B, L, N, H], [B, M, N, H], [B, M, N, H]; got shapes "
            f"{q.shape}, {k.shape}, {v.shape}"
        )
    b, length, n, h = q.shape
    if k.shape[0] != b or k.shape[2:] != (n, h) or v.shape[:3] != k.shape[:3]:
        raise ValueError(
            f"q {q.shape}, k {k.shape}, v {v.shape} do not agree as [B, L, N, H], [B, M, N, H]"
        )
    if mask is not None and mask.shape != k.shape[:2]:
        raise ValueError(f"mask has shape {mask.shape}; expected [B, M] = {k.shape[:2]}")
    if causal and length != k.shape[1]:
        raise ValueError(f"causal attention needs L == M; got L={length}, M={k.shape[1]}")


def _compute_dtype(x):
    # Sums over up to M keys: accumulate in float32 at least, float64 when given.
    return jnp.promote_types(x.dtype, jnp.float32)


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
):
    """softmax(R q (R k)ᵀ / √H + bias) v: R the rotation (when given), bias [B or 1, N, L, M].

    Scores and softmax are computed in float32 (float64 for float64 inputs). O(L·M) memory.
    `dropout_rate` > 0 drops attention weights (scaled by 1/(1 - rate)); needs `dropout_rng`.
    Row b's mask depends on that key and example_ids[b] only (int [B]; default arange(B)).
    Returns [B, L, N, H] in q's dtype.
    """
    _check_shapes(q, k, v, mask, causal)
    if dropout_rate > 0.0 and dropout_rng is None:
        raise ValueError(f"dropout_rate={dropout_rate} needs a dropout_rng")
    if rotation is not None:
        q, k = rotation.q(q), rotation.k(k)
    visible = jnp.ones((1, 1, 1, k.shape[1]), bool) if mask is None else mask[:, None, None, :]
    if causal:
        visible = visible & jnp.tril(jnp.ones((q.shape[1], k.shape[1]), bool))
    return _softmax(q, k, v, visible, bias, dropout_rate, dropout_rng, example_ids)


def _softmax(q, k, v, visible, bias, dropout_rate=0.0, dropout_rng=None, example_ids=None):
    """softmax(q kᵀ / √H + bias) v over the visible keys; q, k already rotated.

    visible: bool, broadcastable to [B, N, L, M]. Returns [B, L, N, H] in q's dtype.
    """
    if dropout_rate == 0.0 and not _on_cpu():
        return _fused_softmax(q, k, v, visible, bias)
    dtype = _compute_dtype(q)
    scores = jnp.einsum("BLNH,BMNH->BNLM", q, k, preferred_element_type=dtype)
    scores = scores * (q.shape[-1] ** -0.5)
    if bias is not None:
        expected = (q.shape[2], q.shape[1], k.shape[1])
        if bias.ndim != 4 or bias.shape[1:] != expected or bias.shape[0] not in (1, q.shape[0]):
            raise ValueError(
                f"bias has shape {bias.shape}; expected [B or 1, N, L, M] = "
                f"[{q.shape[0]} or 1, {', '.join(map(str, expected))}]"
            )
        scores = scores + bias.astype(dtype)
    weights = jax.nn.softmax(jnp.where(visible, scores, jnp.finfo(dtype).min), axis=-1)
    # A row with no visible key would otherwise be a uniform average over padding.
    weights = jnp.where(visible, weights, 0.0)
    if dropout_rate > 0.0:
        if example_ids is None:
            example_ids = jnp.arange(weights.shape[0])
        keep = _threefry.bernoulli_rows(dropout_rng, example_ids, 1.0 - dropout_rate, weights.shape)
        weights = jnp.where(keep, weights / (1.0 - dropout_rate), 0.0)
    out = jnp.einsum("BNLM,BMNH->BLNH", weights.astype(v.dtype), v)
    return out.astype(q.dtype)


def _fused_softmax(q, k, v, visible, bias):
    """`_softmax` without dropout, through `jax.nn.dot_product_attention`: cuDNN's fused
    kernel on GPUs where its contract fits, XLA's form elsewhere.

    Not used on CPU, where the einsum form above is what XLA runs fastest
    (benchmarks/attention.py); tests/attention_test.py checks that the two agree.
    """
    b, length, n, h = q.shape
    mask = jnp.broadcast_to(visible, (b, n, length, k.shape[1]))
    if bias is not None:
        bias = jnp.broadcast_to(bias, (b, n, length, k.shape[1])).astype(q.dtype)
    out = jax.nn.dot_product_attention(q, k, v, bias=bias, mask=mask, scale=h**-0.5)
    # A row with no visible key: zeros, as `_softmax` gives, not an average over padding.
    seen = jnp.swapaxes(jnp.any(mask, axis=-1), 1, 2)[..., None]  # [B, L, N, 1]
    return jnp.where(seen, out, 0).astype(q.dtype)


def _guard(den, eps):
    """Moves den away from zero by at least eps, keeping its sign (0 counts as positive)."""
    return jnp.where(den < 0, jnp.minimum(den, -eps), jnp.maximum(den, eps))


def _kernel_sums(qf, kf, values, *, causal, chunk_size):
    """Σ_j (qf_i·kf_j) values_j over all j, or over j <= i when causal; O(L) memory.

    qf [B, N, L, F], kf [B, N, M, F], values [B, N, M, E] -> [B, N, L, E]. Heads lead: XLA's
    CPU matmuls want the batch axes first, so one transpose in and out beats one per product.
    Non-causal: qf (kfᵀ values), O(L·F·E). Causal: chunks of C positions; inside a chunk the
    masked C x C products are explicit, earlier chunks enter through an exclusive prefix sum
    of the per-chunk states [B, N, K, F, E]. Sums are thus hierarchical (C terms, then K),
    which also keeps float32 rounding small. Never an [L, F, E] tensor.
    """
    if not causal:
        return jnp.einsum("BNLF,BNFE->BNLE", qf, jnp.einsum("BNMF,BNME->BNFE", kf, values))
    b, n, length = qf.shape[:3]
    c = min(chunk_size, length)
    pad = -length % c
    if pad:  # zero keys and values add nothing; the padded queries are cut off below
        widths = ((0, 0), (0, 0), (0, pad), (0, 0))
        qf, kf, values = (jnp.pad(x, widths) for x in (qf, kf, values))
    kc = (length + pad) // c
    qf, kf, values = (x.reshape(b, n, kc, c, x.shape[-1]) for x in (qf, kf, values))

    tril = jnp.tril(jnp.ones((c, c), bool))
    scores = jnp.where(tril, jnp.einsum("BNKCF,BNKDF->BNKCD", qf, kf), 0.0)
    out = jnp.einsum("BNKCD,BNKDE->BNKCE", scores, values)
    states = jnp.einsum("BNKDF,BNKDE->KBNFE", kf, values)
    # Earlier chunks: an exclusive prefix sum of the states over chunks.
    if _on_cpu():
        prefix = _attention_cpu.exclusive_cumsum(states)
    else:
        prefix = jnp.cumsum(states, axis=0) - states
    out = out + jnp.einsum("BNKCF,KBNFE->BNKCE", qf, prefix)
    return out.reshape(b, n, kc * c, -1)[:, :, :length]


def _heads(x):
    """[B, L, N, F] <-> [B, N, L, F]."""
    return jnp.swapaxes(x, 1, 2)


def _feature_sums(qf, key_sums):
    """qf_i·key_sums for each query and head: [B, L, N, F], [B, N, F] -> [B, N, L, 1]."""
    if _on_cpu():
        return _attention_cpu.feature_sums(qf, key_sums)
    return _heads(jnp.einsum("BLNF,BNF->BLN", qf, key_sums)[..., None])


def _numerator_rope(q, k, v, *, phi, mask, eps, rotation):
    """Eq. (19), not causal: q [B, L, N, H], k, v [B, M, N, H] -> (out [B, N, L, H], the
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
    key_sums = jnp.sum(kf, axis=1)  # [B, N, F]
    state = jnp.einsum("BNMF,BNME->BNFE", _heads(rotation.k(kf)), _heads(v))  # [B, N, F, H]
    qf = phi_q(_attention_cpu.after(q, state))
    num = jnp.einsum("BNLF,BNFE->BNLE", _heads(rotation.q(qf)), state)
    den = _feature_sums(qf, key_sums)
    return num / _guard(den, eps), den


def _kernel_attention(qn, kn, v, *, den_features=None, mask, causal, eps, chunk_size, state=None):
    """Σ_j (qn_i·kn_j) v_j / guard(Σ_j qd_i·kd_j), all heads-major: [B, N, L, F], [B, N, M, F].

    den_features=(qd, kd) when the denominator has its own features (eq. 19); otherwise it is
    Σ_j qn_i·kn_j, read off a column of ones appended to v in the same products.
    Returns (out [B, N, L, H], the denominators before the guard [B, N, L, 1], None).

    With `state` (the sums over tokens seen before these, one per term, as in
    `attention_step.KernelState`), the queries also see those tokens, and the last item is
    the sums with these keys added: the recurrent form of the causal sums, one block of new
    tokens at a time.
    """

    def keys(x):  # padded keys -> 0; where, not *: a NaN in the padding must not leak
        return x if mask is None else jnp.where(mask[:, None, :, None], x, 0.0)

    ones = jnp.ones_like(v[..., :1])
    if den_features is None:
        terms = [(qn, kn, jnp.concatenate([v, ones], axis=-1))]
    else:
        qd, kd = den_features
        terms = [(qn, kn, v), (qd, kd, ones)]
    before = [None] * len(terms) if state is None else state
    sums, after = [], []
    for (qx, kx, values), seen in zip(terms, before):
        kx, values = keys(kx), keys(values)
        total = _kernel_sums(qx, kx, values, causal=causal, chunk_size=chunk_size)
        if seen is not None:
            total = total + jnp.einsum("BNLF,BNFE->BNLE", qx, seen)
            after.append(seen + jnp.einsum("BNMF,BNME->BNFE", kx, values))
        sums.append(total)
    num, den = (sums[0][..., :-1], sums[0][..., -1:]) if den_features is None else sums
    return num / _guard(den, eps), den, None if state is None else tuple(after)


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


def _linear_features(q, k, *, phi, rotation, placement):
    """Linear attention's (qn, kn, den_features), heads-major [B, N, L, F] (see below);
    phi: (φ of queries, φ of keys)."""
    rotate = rotation is not None
    if rotate and placement == "before_feature_map":
        q, k = rotation.q(q), rotation.k(k)
    qf, kf = phi[0](q), phi[1](k)  # [B, L, N, F], [B, M, N, F]
    den_features = (_heads(qf), _heads(kf)) if rotate and placement == "numerator" else None
    if rotate and placement != "before_feature_map":
        # Fused into the rotation, φ is evaluated up to three times per feature (RoPE reads
        # each feature and its two neighbours). Still faster on CPU than materializing φ
        # first: the separate buffers that costs are fresh pages, and a first touch is slow
        # (benchmarks/attention.py).
        qf, kf = rotation.q(qf), rotation.k(kf)
    return _heads(qf), _heads(kf), den_features


def _check_linear_options(feature_map, placement, projection, head_dim):
    feature_maps.check(feature_map, projection, head_dim)
    if placement not in PLACEMENTS:
        raise ValueError(f"placement={placement!r}; expected one of {PLACEMENTS}")


def linear_attention(
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    rotation: Rotation | None = None,
    placement="numerator",
    feature_map="elu",
    projection=None,
    eps=1e-6,
    chunk_size=64,
    return_min_denominator=False,
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
    `causal` uses chunks of `chunk_size` positions (see `_kernel_sums`).
    feature_map: a key of feature_maps.FEATURE_MAPS ("elu" = elu + 1, "relu", "softplus",
    "favor" = FAVOR+'s random features, whose matrix [F, H] is `projection`, drawn by the
    caller with FEATURE_MAPS["favor"].draw). No dropout.
    Returns [B, L, N, H] in q's dtype; with return_min_denominator, (that, the smallest
    |denominator| of a real query before the guard, a float32 scalar).
    """
    _check_shapes(q, k, v, mask, causal)
    _check_linear_options(feature_map, placement, projection, q.shape[-1])
    phi = feature_maps.query_and_key_maps(feature_map, projection)
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)

    if rotation is not None and placement == "numerator" and not causal:
        out, den = _numerator_rope(q, k, v, phi=phi, mask=mask, eps=eps, rotation=rotation)
    else:
        qn, kn, den = _linear_features(q, k, phi=phi, rotation=rotation, placement=placement)
        kernel = dict(mask=mask, causal=causal, eps=eps, chunk_size=chunk_size)
        out, den, _ = _kernel_attention(qn, kn, _heads(v), den_features=den, **kernel)
    out = _heads(out).astype(out_dtype)
    return (out, _min_abs_denominator(den, mask)) if return_min_denominator else out


def cosine_attention(
    q,
    k,
    v,
    *,
    mask=None,
    causal=False,
    rotation: Rotation | None = None,
    eps=1e-6,
    chunk_size=64,
    return_min_denominator=False,
):
    """Normalised-cosine attention: weights (1 + cos(R_i q_i, R_j k_j)) / Σ_j (same).

    Each similarity lies in [0, 2], so the weights are >= 0 and sum to 1 over the real keys.
    With a = R_i q_i / |q_i| and b = R_j k_j / |k_j| (the rotation must keep norms, as RoPE
    does),
    1 + aᵀb = [1, a]ᵀ[1, b]: linear attention with features F = H + 1, O(L) memory, the L x M
    matrix never formed. A zero q or k vector has cosine 0 with everything.
    Returns [B, L, N, H] in q's dtype; with return_min_denominator, (that, the smallest
    denominator of a real query, a float32 scalar), as `linear_attention`.
    """
    _check_shapes(q, k, v, mask, causal)
    out_dtype, dtype = q.dtype, _compute_dtype(q)
    q, k, v = q.astype(dtype), k.astype(dtype), v.astype(dtype)
    qf, kf = _cosine_features(q, k, rotation)
    out, den, _ = _kernel_attention(
        qf, kf, _heads(v), mask=mask, causal=causal, eps=eps, chunk_size=chunk_size
    )
    out = _heads(out).astype(out_dtype)
    return (out, _min_abs_denominator(den, mask)) if return_min_denominator else out


def _cosine_features(q, k, rotation):
    """[1, R_i q_i / |q_i|] and [1, R_j k_j / |k_j|], heads-major [B, N, L, H + 1]."""

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

    return _heads(features(q)), _heads(features(k))


ATTENTION_FUNCTIONS: dict[str, Callable[..., jax.Array]] = {
    "softmax": softmax_attention,
    "linear": linear_attention,
    "cosine": cosine_attention,
}
