"""Position encodings as a table: each one is a small definition of what it does.

An encoder learns nothing of word order unless it is told where each token is. An encoding
can tell it in three places, and says which through the hooks it fills in:
  embed     a vector added to each token's embedding (BERT's learned table, the sinusoid of
            Vaswani et al. 2017): absolute positions;
  rotation  a transform of q and k in every self-attention (RoPE, Su et al. 2021): scores
            that depend on m - n only, and the one relative encoding that works with linear
            attention, since it needs no attention matrix;
  bias      a term added to the attention scores (ALiBi, Press et al. 2022; nn/alibi.py):
            relative, but only for attention kinds that form the scores.
`ENCODINGS` maps a name (`ModelConfig.position`) to its definition; the model and trainer
look encodings up here and never branch on their names. A new encoding is one definition and
one entry; its hyperparameters, if it has any, are a `Section` the entry names, which
`ModelConfig.sections` holds under the encoding's name (docs/model.md's recipe).

Hooks receive the encoding's own section (None for an encoding without one), the model config
(`roformer_jax.nn.model_config.ModelConfig`: its sizes) and the position ids.
Glossary of shapes: B batch, L query length, M key length, N heads, E embedding size,
A position axes, P rotated pairs. Position ids are int [L] or [B, L], or [L, A] or [B, L, A]
for an encoding that says it takes A axes (time, height and width; an image's x and y).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable
from typing import Any

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import alibi, learned_positions, rope, rope_nd, rope_phase, rope_scaling
from roformer_jax.nn.sections import FrozenDict, Section

Hook = Callable[..., Any]  # (section, config, ...) -> what the hook gives, as below


@dataclasses.dataclass(frozen=True)
class PositionEncoding:
    """What one position encoding does to the encoder; every hook is optional.

    Every hook takes (section, config, ...): the encoding's own section (an instance of
    `section`, or None) and the model config, then what the hook says.

    Attributes:
      section: the `Section` subclass of the encoding's hyperparameters, or None.
      embed: (..., position_ids, dtype) -> [(B,) L, E], added to the token embeddings. Runs
        inside the embedding module, so it may create Flax parameters (a learned table).
      rotation: (..., position_ids, seq_len, layer, x, segment_ids) -> `rope.Rotation` of q
        and k in that layer, or None for a layer without positions (`RopeSection.layer_rope`).
        seq_len: None in a full pass, or when decoding the cache's capacity, so that each step
        rotates as the whole sequence would (scalings by the length, xPos's centre). x [B, L, D]
        (the layer's input) and segment_ids int [B, L] or None: for positions learned from x.
        Runs inside the attention module: it may create parameters and "cache" variables.
      bias: (..., q_positions, k_positions) -> [B or 1, N, L, M] added to softmax scores.
        Attention kinds that never form the scores (linear, cosine) cannot take it.
      max_length: (...) -> the longest sequence it supports, or None for any length.
      check: (...) -> None; raises ValueError for a model it cannot serve (its section's
        own fields are checked when the section is made).
      scale_embeddings: multiply the word and token type embeddings by √E before `embed` is
        added, as Vaswani et al. 2017 (sec. 3.4) do for a fixed sinusoid of amplitude 1:
        embeddings initialized with std 0.02 (BERT's) would otherwise be swamped by it.
      axes: (...) -> A, for an encoding whose positions have A axes: its hooks receive
        position ids [L, A] or [B, L, A] (ids [L] or [B, L] are every axis alike, as HF's
        M-RoPE reads text tokens). None: one integer per token.
    """

    section: type[Section] | None = None
    embed: Hook | None = None
    rotation: Hook | None = None
    bias: Hook | None = None
    max_length: Hook = lambda section, config: None
    check: Hook = lambda section, config: None
    scale_embeddings: bool = False
    axes: Hook | None = None


# ---------------------------------------------------------------- sections: the hyperparameters


@dataclasses.dataclass(frozen=True)
class RopeSection(Section):
    """RoPE's frequencies θ_i = base^(-2i/R) (paper eq. (15)), and HF's scaling of them.

    scaling: HF's rope scaling dictionary (v4 `rope_scaling` or v5 `rope_parameters`), e.g.
      {"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}; None:
      plain RoPE.
    layer_types: HF v5's `layer_types`, one name per layer, e.g. ("sliding_attention",
      "full_attention"): with `scaling` nested by these names ({"full_attention":
      {"rope_theta": 1e6}, "sliding_attention": None}), each layer rotates with its type's
      base, scaling and partial_rotary_factor, or not at all (None).
    """

    base: float = 10000.0
    scaling: FrozenDict | None = None
    layer_types: tuple[str, ...] | None = None

    def __post_init__(self):
        super().__post_init__()
        rope_scaling.check_base(self.base)
        if self.scaling is not None and not isinstance(self.scaling, FrozenDict):
            raise ValueError(f"scaling={self.scaling!r} is not a dictionary (HF's rope_scaling)")

    def layer_rope(self, layer: int, config) -> rope_scaling.LayerRope | None:
        """How `layer` of a model (`config`, a ModelConfig: its head dim and layers) rotates
        (base, rotary dim, scaling); None for a layer without positions."""
        params = rope_scaling.layer_parameters(self.scaling, self.layer_types, config.num_layers)
        return rope_scaling.layer_rope(config.head_dim, params[layer], base=self.base)


@dataclasses.dataclass(frozen=True)
class XposSection(RopeSection):
    """xPos: RoPE's frequencies, and the scale base γ of its decay ζ_i^((m-n)/γ)."""

    scale_base: float = 512.0

    def __post_init__(self):
        super().__post_init__()
        rope.check_scale_base(self.scale_base)


@dataclasses.dataclass(frozen=True)
class AxesSection(RopeSection):
    """RoPE over A position axes: `axes` = A (time, height and width; an image's x and y);
    position_ids [(B,) L, A]; HF's "mrope_section" in `scaling` has A entries."""

    axes: int = 1

    def __post_init__(self):
        super().__post_init__()
        if self.axes < 1:
            raise ValueError(f"axes={self.axes} must be a positive integer")


@dataclasses.dataclass(frozen=True)
class LearnedFrequencySection(AxesSection):
    """Learned RoPE frequencies over A axes; `per_head`: each head its own (RoPE-Mixed)."""

    per_head: bool = False


# ---------------------------------------------------------------- absolute: added to embeddings


def _learned(section, config, position_ids, dtype):
    """BERT: a trained table of `max_len` rows, initialized like the other embeddings."""
    del section
    return _table(config, position_ids, dtype, nn.initializers.normal(config.initializer_range))


def _learned_sinusoid(section, config, position_ids, dtype):
    """BERT's trained table started at the sinusoid, the embeddings × √E as the fixed
    sinusoid's are: at step 0 the "sinusoidal" model, then free to move (issue 31: does a
    learned table that starts where the sinusoid is learn as fast as the fixed one?)."""
    del section

    def init(key, shape, dtype):
        del key
        return sinusoidal_embedding(jnp.arange(shape[0]), shape[1]).astype(dtype)

    return _table(config, position_ids, dtype, init)


def _table(config, position_ids, dtype, init):
    table = nn.Embed(
        config.max_len,
        config.embed_dim,
        dtype=dtype,
        embedding_init=init,
        name="position_embeddings",
    )
    return table(position_ids)  # [(B,) L, E]


def sinusoidal_embedding(positions, dim: int) -> jax.Array:
    """Vaswani et al. 2017, sec. 3.5: PE[m, 2i] = sin(m θ_i), PE[m, 2i+1] = cos(m θ_i).

    θ_i = 10000^(-2i/dim). positions: int [L] or [B, L]. Returns [L, dim] or [B, L, dim] float32.
    """
    angles = rope_phase.rotation_angles(positions, dim, base=10000.0)  # [..., L, dim/2]
    return jnp.stack([jnp.sin(angles), jnp.cos(angles)], axis=-1).reshape(*angles.shape[:-1], dim)


def _sinusoidal(section, config, position_ids, dtype):
    del section
    return sinusoidal_embedding(position_ids, config.embed_dim).astype(dtype)


def _even_embedding(section, config):
    del section
    if config.embed_dim % 2:
        raise ValueError(f"embedding size {config.embed_dim} is odd; sin/cos come in pairs")


def _table_rows(section, config):
    del section
    return config.max_len


# ---------------------------------------------------------------- relative: q and k rotated


def _rope(section: RopeSection, config, position_ids, seq_len, layer, x, segment_ids):
    layer_rope = section.layer_rope(layer, config)
    if layer_rope is None:
        return None
    return rope.rope_rotation(
        position_ids,
        base=layer_rope.base,
        rotary_dim=layer_rope.rotary_dim,
        scaling=layer_rope.scaling,
        seq_len=seq_len,
    )


def _xpos(section: XposSection, config, position_ids, seq_len, layer, x, segment_ids):
    layer_rope = section.layer_rope(layer, config)
    if layer_rope is None:
        return None
    return rope.xpos_rotation(
        position_ids,
        base=layer_rope.base,
        scale_base=section.scale_base,
        scaling=layer_rope.scaling,
        seq_len=seq_len,
    )


def _rope_check(section: RopeSection, config):
    """Even heads, and a scaling that HF's keys make sense of for every layer."""
    if config.head_dim % 2:
        raise ValueError(f"head dim {config.head_dim} is odd; RoPE rotates pairs of features")
    if not rope_scaling.is_nested(section.scaling, section.layer_types):
        # One dictionary for every layer, as before HF v5: its "rope_theta" must agree.
        rope.scaled_frequencies(config.head_dim, base=section.base, scaling=section.scaling)
    for layer in range(config.num_layers):  # fails now, with HF's key names
        section.layer_rope(layer, config)


def _xpos_check(section: XposSection, config):
    _rope_check(section, config)
    for layer in range(config.num_layers):
        layer_rope = section.layer_rope(layer, config)
        if layer_rope is not None and layer_rope.rotary_dim is not None:
            raise ValueError(
                f"xPos rotates and scales every feature; layer {layer} has rotary dim "
                f"{layer_rope.rotary_dim} of head dim {config.head_dim} (partial_rotary_factor)"
            )


# ------------------------------------------------- relative: q and k rotated, positions on A axes


def nd_frequencies(section: AxesSection, config, layer: int) -> np.ndarray | None:
    """RoPE's frequencies over `section.axes` axes for `layer`: [A, P] float64, or None for a
    layer without positions.

    M-RoPE's (`rope_nd.mrope_frequencies`) when the layer's rope parameters carry HF's
    "mrope_section" (and "mrope_interleaved" for Qwen3-VL), RoPE-Axial's otherwise; A = 1 is
    RoPE's own. The layer's base and rotary dim (partial_rotary_factor) apply.
    """
    layer_rope = section.layer_rope(layer, config)
    if layer_rope is None:
        return None
    params = layer_rope.scaling or {}
    rotary_dim = layer_rope.rotary_dim or config.head_dim
    if "mrope_section" in params:
        interleaved = bool(params.get("mrope_interleaved", False))
        return rope_nd.mrope_frequencies(
            rotary_dim, params["mrope_section"], base=layer_rope.base, interleaved=interleaved
        )
    return rope_nd.axial_frequencies(rotary_dim, section.axes, base=layer_rope.base)


def _nd_rotation(position_ids, freqs):
    rotate = functools.partial(rope_nd.apply_rope_nd, positions=position_ids, freqs=freqs)
    return rope.Rotation(q=rotate, k=rotate)


def _rope_nd(section: AxesSection, config, position_ids, seq_len, layer, x, segment_ids):
    freqs = nd_frequencies(section, config, layer)
    return None if freqs is None else _nd_rotation(position_ids, freqs)


class LearnedFrequencies(nn.Module):
    """RoPE's frequencies as a parameter, [A, P] or per head [N, A, P], initialised to `init`."""

    init: np.ndarray

    @nn.compact
    def __call__(self):
        return self.param("frequencies", lambda rng: jnp.asarray(self.init, jnp.float32))


def _rope_learned(
    section: LearnedFrequencySection, config, position_ids, seq_len, layer, x, segment_ids
):
    """Learned frequencies (rotary-embedding-torch's `learned_freq`; with per_head, RoPE-Mixed
    of Heo et al. 2024, eq. 11), each layer its own, initialised to `nd_frequencies`: RoPE's
    for A = 1, RoPE-Axial's for more axes."""
    init = nd_frequencies(section, config, layer)
    if init is None:
        return None
    if section.per_head:
        init = np.repeat(init[None], config.num_heads, axis=0)  # [N, A, P]
    return _nd_rotation(position_ids, LearnedFrequencies(init, name="rope_frequencies")())


def _nd_check(section: AxesSection, config):
    _rope_check(section, config)
    for layer in range(config.num_layers):
        layer_rope = section.layer_rope(layer, config)
        if layer_rope is None:
            continue
        params = layer_rope.scaling or {}
        if not rope_scaling.is_plain(params):
            raise ValueError(
                f"position={config.position!r} rotates by RoPE-Axial's or M-RoPE's frequencies; "
                f"layer {layer}'s rope scaling {layer_rope.scaling} is not plain RoPE"
            )
        sections = params.get("mrope_section")
        if sections is not None and len(sections) != section.axes:
            raise ValueError(
                f"mrope_section {list(sections)} has {len(sections)} axes; axes is {section.axes}"
            )
        nd_frequencies(section, config, layer)  # sections that fit the head, axes that split it


def _axes(section: AxesSection, config):
    del config
    return section.axes


ENCODINGS: dict[str, PositionEncoding] = {
    "learned": PositionEncoding(embed=_learned, max_length=_table_rows),
    "sinusoidal": PositionEncoding(embed=_sinusoidal, check=_even_embedding, scale_embeddings=True),
    "learned_sinusoid": PositionEncoding(
        embed=_learned_sinusoid,
        max_length=_table_rows,
        check=_even_embedding,
        scale_embeddings=True,
    ),
    "rope": PositionEncoding(section=RopeSection, rotation=_rope, check=_rope_check),
    "xpos": PositionEncoding(section=XposSection, rotation=_xpos, check=_xpos_check),
    "rope_nd": PositionEncoding(
        section=AxesSection, rotation=_rope_nd, check=_nd_check, axes=_axes
    ),
    "rope_learned": PositionEncoding(
        section=LearnedFrequencySection, rotation=_rope_learned, check=_nd_check, axes=_axes
    ),
    "rope_learned_positions": PositionEncoding(
        section=learned_positions.LearnedPositionSection, rotation=learned_positions.rotation
    ),
    "alibi": PositionEncoding(section=alibi.AlibiSection, bias=alibi.bias, check=alibi.check),
    "none": PositionEncoding(),
}
