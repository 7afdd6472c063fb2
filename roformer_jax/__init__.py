"""roformer_jax: Rotary Position Embedding (RoPE), RoPE-compatible attention and the RoFormer
encoder in JAX/Flax.

    import roformer_jax as rj
    q, k = rj.apply_rope(q, positions), rj.apply_rope(k, positions)   # [B, L, N, H]
    out = rj.softmax_attention(q, k, v)

The sub-packages, floor by floor (each imports only from those below): `nn` (RoPE and its
scaling, attention kinds, positions, the model, task heads, decoding), `data` (corpora,
tokenizers, masking, batches), `hf` (HuggingFace checkpoints in and out), `training` (the
step, the trainer, fine-tuning), and `studies` (the lab; not imported here).
"""

from roformer_jax.hf import load_hf_roformer, save_hf_roformer
from roformer_jax.nn.alibi import alibi_bias
from roformer_jax.nn.attention import cosine_attention, linear_attention, softmax_attention
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS, AttentionKind
from roformer_jax.nn.decoding import generate
from roformer_jax.nn.heads import TaskModel
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import ModelConfig, model_config
from roformer_jax.nn.positions import ENCODINGS, PositionEncoding
from roformer_jax.nn.rope import (
    Rotation,
    apply_rope,
    rope_frequencies,
    rope_rotation,
    xpos_rotation,
)
from roformer_jax.nn.rope_nd import apply_rope_nd, axial_frequencies, mrope_frequencies
from roformer_jax.nn.rope_scaling import scaled_frequencies
from roformer_jax.nn.segments import segment_positions

__all__ = [
    # The tables a new kind or encoding is one entry of, and their records.
    "ATTENTION_KINDS",
    "AttentionKind",
    "ENCODINGS",
    "PositionEncoding",
    # Functions, modules and configs.
    "ModelConfig",
    "RoFormer",
    "Rotation",
    "TaskModel",
    "alibi_bias",
    "apply_rope",
    "apply_rope_nd",
    "axial_frequencies",
    "cosine_attention",
    "generate",
    "linear_attention",
    "load_hf_roformer",
    "model_config",
    "mrope_frequencies",
    "rope_frequencies",
    "rope_rotation",
    "save_hf_roformer",
    "scaled_frequencies",
    "segment_positions",
    "softmax_attention",
    "xpos_rotation",
]
