"""The decay gates of a layer, made from its input: what `attention_sections.GateSection` names.

`log_gates` gives the [B, L, N] log gates that every attention kind takes as `log_decay`
(attention.py: the term of key j at query i weighted by exp(Σ_{t=j+1..i} log_decay[t])), and
`output_gate` FoX's gate on the attention output. Both run inside the attention module, so the
projections they create are its parameters ("forget_gate", "output_gate"). A new gate is one
function and one entry of GATE_MAKERS (and its name in attention_sections.GATES).
"""

import flax.linen as nn
import jax
import jax.numpy as jnp

from roformer_jax.nn import decay
from roformer_jax.nn.model_config import DTYPES, ModelConfig


def _dense(
    cfg: ModelConfig, features: int, name: str, use_bias: bool = True, bias: float = 0.0
) -> nn.Dense:
    return nn.Dense(
        features,
        use_bias=use_bias,
        dtype=DTYPES[cfg.dtype],
        kernel_init=nn.initializers.normal(cfg.initializer_range),
        bias_init=nn.initializers.constant(bias),
        name=name,
    )


def _retention_gate(cfg: ModelConfig, x):
    """RetNet's fixed log gates log γ_n for every token: [B, L, N] float32."""
    return jnp.broadcast_to(decay.retention(cfg.num_heads), (*x.shape[:2], cfg.num_heads))


def _forget_gate(cfg: ModelConfig, x):
    """FoX's log forget gates log σ(w_n·x_t + b_n) of x [B, L, D]: [B, L, N] in at least
    float32 (float64 for a float64 projection: its gradients checked), from the projection
    "forget_gate" (D -> N, with a bias, initially the section's gate_bias)."""
    bias = cfg.attention_section.gate_bias
    logits = _dense(cfg, cfg.num_heads, "forget_gate", bias=bias)(x)
    return jax.nn.log_sigmoid(logits.astype(jnp.promote_types(logits.dtype, jnp.float32)))


# How each decay gate of attention_sections.GATES but "none" makes its log gates from x.
GATE_MAKERS = {"fixed": _retention_gate, "learned": _forget_gate}


def log_gates(cfg: ModelConfig, x) -> jax.Array | None:
    """The log gates [B, L, N] of the attention section's `gate` for x [B, L, D], or None for
    "none" (and for a kind without a gate)."""
    gate = getattr(cfg.attention_section, "gate", "none")
    return None if gate == "none" else GATE_MAKERS[gate](cfg, x)


def output_gate(cfg: ModelConfig, x, out):
    """FoX's output gate, out × σ(W x) with W [D, D] and no bias, where the attention
    section asks for it; `out` as it is otherwise. x, out: [B, L, D]."""
    if not getattr(cfg.attention_section, "output_gate", False):
        return out
    return out * jax.nn.sigmoid(_dense(cfg, x.shape[-1], "output_gate", use_bias=False)(x))
