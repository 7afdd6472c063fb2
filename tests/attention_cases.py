"""The attention tests' shared cases: the shapes B, L, N, H, random q, k, v, masks and
positions drawn with numpy, every kind under test (KINDS), and the explicit O(L·M) formula
that the kinds are checked against (`_reference`, its feature maps written out in PHI;
`_call` calls a kind with the same keywords).

Kept under the names they had in tests/attention_test.py, underscores included, so that the
tests split from it (attention_step_test.py, attention_core_test.py, ...) read as they did.
"""

import jax.numpy as jnp
import numpy as np
import tolerance

from roformer_jax.nn import attention
from roformer_jax.nn.rope import rope_rotation
from roformer_jax.nn.rope_reference import apply_rope_dense, rotation_matrices

B, L, N, H = 2, 7, 2, 8
LINEAR_ROPES = (None, "numerator", "both", "before_feature_map")
# FAVOR+'s random matrix [F, H] for the formula tests: any matrix serves there.
FAVOR_W = np.random.default_rng(99).standard_normal((2 * H, H)).astype(np.float32)
# Every kind under test as (name, function, keywords); a rotation is added unless the
# keywords say rotation=None.
KINDS = (
    [("softmax", attention.softmax_attention, {})]
    + [("linear_None", attention.linear_attention, {"rotation": None})]
    + [(f"linear_{p}", attention.linear_attention, {"placement": p}) for p in LINEAR_ROPES[1:]]
    + [
        (
            "linear_favor",
            attention.linear_attention,
            {"feature_map": "favor", "projection": FAVOR_W},
        )
    ]
    + [("cosine", attention.cosine_attention, {})]
)


def _qkv(seed, *, length=L, keys=L, dtype=jnp.float32):
    # numpy draws: compiling jax.random.normal for each new shape costs seconds on CPU.
    rng = np.random.default_rng(seed)
    shapes = ((B, length, N, H), (B, keys, N, H), (B, keys, N, H))
    return tuple(jnp.asarray(rng.standard_normal(shape), dtype) for shape in shapes)


def _mask(seed, keys=L):
    mask = np.random.default_rng(seed).random((B, keys)) < 0.6
    mask[:, 0] = True  # every causal row keeps a real key
    return jnp.asarray(mask)


def _positions(seed, length, batched):
    """Increasing positions with gaps and an offset: [B, length] or [length]."""
    rng = np.random.default_rng(seed)
    pos = 5 + np.cumsum(rng.integers(1, 4, size=(B, length)), axis=-1)
    return jnp.asarray(pos if batched else pos[0])


def _takes_positions(kw):
    return "rotation" not in kw


def _with_positions(kw, length=L, seed=1, shift=0):
    if not _takes_positions(kw):
        return kw
    return {**kw, "rotation": rope_rotation(_positions(seed, length, batched=False) + shift)}


EPS = 1e-6

# Written out independently of feature_maps.FEATURE_MAPS. FAVOR+ without the stabilizer of
# its queries: that it cancels is part of what is tested.
PHI = {
    "elu": lambda x: jnp.where(x > 0, x + 1.0, jnp.exp(x)),
    "relu": lambda x: jnp.maximum(x, 0.0),
    "softplus": lambda x: jnp.log1p(jnp.exp(x)),
    "favor": lambda x: (
        jnp.exp(
            jnp.einsum("...H,FH->...F", x / H**0.25, FAVOR_W)
            - jnp.sum(x**2, -1, keepdims=True) / (2 * H**0.5)
        )
        / jnp.sqrt(FAVOR_W.shape[0])
    ),
}


def _call(
    fn,
    q,
    k,
    v,
    *,
    rope="no placement",
    q_positions=None,
    k_positions=None,
    layout="interleaved",
    rotary_dim=None,
    **kw,
):
    """fn called with the `_reference` keywords: positions become a RoPE rotation."""
    if q_positions is not None:
        kw["rotation"] = rope_rotation(
            q_positions, k_positions, layout=layout, rotary_dim=rotary_dim
        )
        if rope != "no placement":
            kw["placement"] = rope
    return fn(q, k, v, **kw)


def _reference(
    q,
    k,
    v,
    *,
    kind,
    mask=None,
    causal=False,
    feature_map="elu",
    rope=None,
    q_positions=None,
    k_positions=None,
    layout="interleaved",
    rotary_dim=None,
    log_decay=None,
    segment_ids=None,
):
    """Explicit O(L·M) formula: similarity matrices [B, N, L, M], then weights @ v; with
    log_decay [B, L, N], both similarities times `decay_weights`; with segment_ids [B, L],
    only keys of the query's segment (ids that never recur)."""
    k_positions = q_positions if k_positions is None else k_positions
    rope_kw = dict(layout=layout, rotary_dim=rotary_dim)

    def rotate(x, pos):
        return x if pos is None else apply_rope_dense(x, pos, **rope_kw)

    def dot(a, b):
        return jnp.einsum("BLNF,BMNF->BNLM", a, b)

    if kind == "cosine":
        a, b = rotate(q, q_positions), rotate(k, k_positions)
        a = a / jnp.linalg.norm(a, axis=-1, keepdims=True)
        b = b / jnp.linalg.norm(b, axis=-1, keepdims=True)
        sim = den_sim = 1.0 + dot(a, b)
    else:
        phi = PHI[feature_map]
        if rope == "before_feature_map":
            sim = den_sim = dot(phi(rotate(q, q_positions)), phi(rotate(k, k_positions)))
        else:
            den_sim = dot(phi(q), phi(k))
            sim = den_sim
            if rope is not None:
                # (R_i a)ᵀ(R_j b) = aᵀ R_{j-i} b: the relative form of eq. (16).
                qp = jnp.broadcast_to(q_positions, q.shape[:2])
                kp = jnp.broadcast_to(k_positions, k.shape[:2])
                rel = kp[:, None, :] - qp[:, :, None]
                features = phi(q).shape[-1]
                rel = rotation_matrices(rel, features, dtype=q.dtype, **rope_kw)  # [B, L, M, F, F]
                sim = jnp.einsum("BLNF,BLMFG,BMNG->BNLM", phi(q), rel, phi(k))
                if rope == "both":
                    den_sim = sim
    valid = jnp.ones(sim.shape[-2:], bool)
    if causal:
        valid = jnp.tril(valid)
    if mask is not None:
        valid = valid & mask[:, None, None, :]
    if segment_ids is not None:
        valid = valid & (segment_ids[:, None, :, None] == segment_ids[:, None, None, :])
    if log_decay is not None:
        weights = decay_weights(log_decay)
        sim, den_sim = sim * weights, den_sim * weights
    num = jnp.einsum("BNLM,BMNH->BLNH", jnp.where(valid, sim, 0.0), v)
    den = jnp.where(valid, den_sim, 0.0).sum(-1).transpose(0, 2, 1)[..., None]
    den = jnp.where(den < 0, jnp.minimum(den, -EPS), jnp.maximum(den, EPS))
    return num / den


def decay_weights(log_decay):
    """exp(Σ_{t=j+1..i} log_decay[t]) for j <= i, else 0: [B, L, N] -> [B, N, L, L] float64,
    each sum written out term by term in numpy."""
    a = np.asarray(log_decay, np.float64)
    b, length, n = a.shape
    weights = np.zeros((b, n, length, length))
    for i in range(length):
        for j in range(i + 1):
            weights[:, :, i, j] = np.exp(a[:, j + 1 : i + 1].sum(axis=1))
    return weights


def softmax_reference(q, k, v, visible, sinks=None):
    """softmax(q kᵀ / √H) v in float64 numpy over `visible` (bool [B, N or 1, L, M]), key/value
    head n // G for query head n; with sinks [N], e^{sinks_n} joins each denominator (gpt-oss).
    A row with nothing visible and no sink gets zeros."""
    q, k, v = (np.asarray(x, np.float64) for x in (q, k, v))
    g = q.shape[2] // k.shape[2]
    k, v = np.repeat(k, g, axis=2), np.repeat(v, g, axis=2)  # HF's repeat_kv order
    scores = np.einsum("BLNH,BMNH->BNLM", q, k) / np.sqrt(q.shape[-1])
    visible = np.broadcast_to(np.asarray(visible), scores.shape)
    top = np.where(visible, scores, -np.inf).max(-1, keepdims=True, initial=0.0)
    if sinks is not None:
        sink = np.asarray(sinks, np.float64)[None, :, None, None]
        top = np.maximum(top, sink)
    e = np.where(visible, np.exp(scores - top), 0.0)
    den = e.sum(-1, keepdims=True)
    if sinks is not None:
        den = den + np.exp(sink - top)
    return np.einsum("BNLM,BMNH->BLNH", e / np.maximum(den, 1e-300), v)


def softmax_float32_bound(q, k, v) -> float:
    """The float32 error bound of softmax attention over q, k, v (tolerance.py's model): a
    score of H terms is off by γ_{H+2} of Σ_h |q_h k_h| / √H; a weight by twice that and the
    γ of its denominator's M terms; the output by at most max|v| times a weight's error."""
    q, k, v = (np.abs(np.asarray(x, np.float64)) for x in (q, k, v))
    h, keys = q.shape[-1], k.shape[1]
    score = q.max() * k.max() * h / np.sqrt(h)
    return float(v.max()) * (
        2 * tolerance.dot(n=h + 2, magnitude=score) + tolerance.gamma(keys + 3)
    )
