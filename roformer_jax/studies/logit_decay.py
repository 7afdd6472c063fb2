"""What RoPE's long-term decay bound bounds, measured: the relative part of trained logits.

    terms = relative_terms(model_config, params, input_ids, attention_mask)
    # {"term": [layers] of [B, N, L, L], "bound": the same}
    sums, counts = attention_distance.distance_sums(terms["term"][layer], attention_mask)

With RoPE the logit of query m on key n is Re Z / √H, where for q and k (unrotated, each head's
R rotated features as R/2 complex pairs) Z = Σ_i h_i e^{i(m−n)θ_i}, h_i = q_i conj(k_i). Section
3.4.3 of the paper bounds its size by Abel summation (eq. 37): with S_j = Σ_{i<j} e^{i r θ_i}
and h_{R/2} = 0,
    |Z| ≤ Σ_j |h_j − h_{j−1}| |S_j| ≤ max_j |h_j − h_{j−1}| · (R/2) · f(r),
f(r) the mean |S_j| of `rope_reference.long_range_decay`. Here, for the trained q and k of
held-out text, each scaled to unit length (so that |Z| ≤ 1 and the bound's scale is the
trained vectors' differences h_j − h_{j−1}, not their norms), `term` is |Z| of every pair
(m, n) at its own distance and `bound` the right-hand side for that pair: a mean over pairs of
`term` at a distance can then be read beside the same mean of `bound`, which it never exceeds.
The softmax weights (attention_distance.py) are a different quantity: a bound on one logit
term says nothing about a ratio of weights.

Re Z is the model's own score: q and k come from its projections and are rotated by its
encoding's hook (as attention_distance reads them), and Im Z = Re of the same with each pair
of q multiplied by −i, so no second copy of the rotation can drift from the model's. Only plain
RoPE is read: a scaling changes the θ_i the bound is written for, and other encodings have no Z.

Shapes: B batch, L length (keys too), N heads, K kv heads, H head dim, R rotary dim.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import rope_layouts, rope_reference
from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.studies.attention_distance import queries_and_keys

NAMES = ("term", "bound")
LAYOUT = "interleaved"  # the pairs the "rope" encoding rotates (rope.rope_rotation's default)


def relative_terms(cfg: ModelConfig, params, input_ids, attention_mask) -> dict[str, list]:
    """{"term": [layers], "bound": [layers]}, float32 numpy [B, N, L, L] each (module doc),
    on input_ids int [B, L] with attention_mask bool [B, L], positions 0 .. L - 1."""
    check_model(cfg)
    found = _terms(cfg, params, input_ids, jnp.asarray(attention_mask, bool))
    return {name: [np.asarray(x) for x in layers] for name, layers in zip(NAMES, zip(*found))}


@functools.partial(jax.jit, static_argnums=0)
def _terms(cfg: ModelConfig, params, input_ids, attention_mask) -> list[tuple]:
    positions = jnp.arange(input_ids.shape[1])
    found = []
    for layer, (q, k) in enumerate(queries_and_keys(cfg, params, input_ids, attention_mask)):
        rotation = cfg.encoding.rotation(
            cfg.position_section, cfg, positions, None, layer, None, None
        )
        r = _rotary_dim(cfg, layer)
        k = jnp.repeat(k, cfg.num_heads // cfg.kv_heads, axis=2)  # [B, L, N, H]
        q, k = _unit(q, r), _unit(k, r)
        first, second = rope_layouts.split_pairs(q[..., :r], LAYOUT)
        minus_i_q = q.at[..., :r].set(rope_layouts.merge_pairs(second, -first, LAYOUT))
        k_rotated = rotation.k(k)
        real, imag = (
            jnp.einsum("blnh,bmnh->bnlm", rotation.q(x), k_rotated) for x in (q, minus_i_q)
        )
        found.append((jnp.sqrt(real**2 + imag**2), _bound(cfg, q, k, r)))
    return found


def check_model(cfg: ModelConfig) -> None:
    """Raises ValueError for a model whose relative term the bound is not written for."""
    for layer in range(cfg.num_layers):
        _rotary_dim(cfg, layer)


def _rotary_dim(cfg: ModelConfig, layer: int) -> int:
    """R of `layer`; ValueError for a model whose relative term the bound is not written for."""
    if cfg.position != "rope":
        raise ValueError(
            f"position={cfg.position!r}: the decay bound is RoPE's, a relative term of the "
            "logit that only position='rope' has"
        )
    layer_rope = cfg.position_section.layer_rope(layer, cfg)
    if layer_rope is None or layer_rope.scaling is not None:
        raise ValueError(
            f"layer {layer} rotates with {layer_rope}: the bound is written for plain RoPE's "
            "θ_i = base^(-2i/R) in every layer (sections.rope.scaling=None)"
        )
    return layer_rope.rotary_dim or cfg.head_dim


def _unit(x, rotary_dim: int):
    """x [B, L, N, H] with its rotated features scaled to unit length and the rest zeroed:
    the relative part alone, for unit vectors."""
    rotated = x[..., :rotary_dim].astype(jnp.float32)
    norm = jnp.linalg.norm(rotated, axis=-1, keepdims=True)
    return jnp.zeros(x.shape, jnp.float32).at[..., :rotary_dim].set(rotated / norm)


def _bound(cfg: ModelConfig, q, k, rotary_dim: int) -> jax.Array:
    """max_j |h_j − h_{j−1}| · (R/2) · f(|m − n|) of every pair, [B, N, L, L]; f is
    computed on the host (rope_reference, float64) at trace time."""
    qc, kc = (
        jax.lax.complex(*rope_layouts.split_pairs(x[..., :rotary_dim], LAYOUT)) for x in (q, k)
    )  # [B, L, N, R/2]
    length = q.shape[1]
    distance = np.abs(np.arange(length)[:, None] - np.arange(length)[None, :])  # [L, L]
    f = rope_reference.long_range_decay(
        np.arange(length), dim=rotary_dim, base=cfg.position_section.base
    )

    def largest_step(qk):  # one head's [B, L, L, R/2] at a time: lax.map keeps one live
        h = qk[0][:, :, None] * jnp.conj(qk[1][:, None, :])
        steps = jnp.diff(h, axis=-1, append=jnp.zeros_like(h[..., :1]))  # h_{R/2} = 0
        return jnp.abs(steps).max(-1)  # [B, L, L]

    heads_first = (jnp.moveaxis(qc, 2, 0), jnp.moveaxis(kc, 2, 0))  # [N, B, L, R/2]
    largest = jnp.moveaxis(jax.lax.map(largest_step, heads_first), 0, 1)  # [B, N, L, L]
    return largest * (rotary_dim // 2) * f[distance].astype(np.float32)
