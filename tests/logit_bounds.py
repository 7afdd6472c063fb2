"""The rounding bound of a model's logits (tolerance.py's model): how many roundings lie on the
longest path to one logit, and how large the last dot product's terms are. Shared by the tests
that compare two ways of computing the same logits (decode steps, packed rows)."""

import numpy as np

from roformer_jax.nn import decoding


def _depth(config, keys: int) -> int:
    """The roundings on the longest path from the embeddings to one logit (tolerance.relative):
    each sum counts its terms, each elementwise step (exp, rsqrt, a division, GELU) one."""
    d, e, h, f = config.hidden_size, config.embed_dim, config.head_dim, config.intermediate_size
    layer_norm = 2 * d + 3  # mean, variance (d terms each), rsqrt, scale, shift
    # q, k, v (d terms); a similarity (h terms, or a random φ's h, exp and its f features);
    # the sums over the keys, the division; the output projection, the residual.
    features = config.attention_section.random_features if config.draws_features else 0
    attention = d + h + 2 + features + keys + 2 + d + 1
    feed_forward = d + 3 + f + 1  # dense, GELU, dense, residual
    embeddings = 1 + (2 * e + 3)  # word + type, LayerNorm
    head = d + 3 + (2 * e + 3) + e + 1  # dense, GELU, LayerNorm, the tied decoder, its bias
    layer = attention + layer_norm + feed_forward + layer_norm
    return embeddings + config.num_layers * layer + head


def _logits_and_terms(model, variables, ids, mask):
    """`_full_forward`'s logits [B, L, V], and the largest Σ_e |h_e W_ve| + |b_v| over them:
    what the last dot product adds up (h the head's LayerNorm output, W the tied embeddings).
    One pass for both: a second would cost as much again."""
    ids, mask, position_ids = decoding.left_padded(ids, mask)
    out, state = model.apply(
        variables, ids, attention_mask=mask, position_ids=position_ids, capture_intermediates=True
    )
    h = state["intermediates"]["mlm_head"]["LayerNorm"]["__call__"][0]  # [B, L, E]
    table = variables["params"]["embeddings"]["word_embeddings"]["embedding"]  # [V, E]
    bias = variables["params"]["mlm_head"]["bias"]  # [V]
    terms = np.einsum("BLE,VE->BLV", np.abs(h), np.abs(table)) + np.abs(bias)
    return out.logits, float((terms * np.asarray(mask)[..., None]).max())
