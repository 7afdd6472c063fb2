"""The attention kinds as one table: each kind's full form, its decode step and its options.

A new kind is its functions (attention.py, attention_step.py) plus one entry here; the model
(model.py) and its config (model_config.py) read the record and name no kind themselves.
Every full form takes q, k, v and the common keywords mask, causal, rotation; every step
takes its memory, q, k, v and mask, rotation (attention.py and attention_step.py say what
each means). Beyond those a form takes exactly the options its record names, and the
record's builders make their values from the model's config and the layer's context: a new
option of a kind is written here and in its functions, nowhere else.
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax

from roformer_jax.nn import attention, attention_step
from roformer_jax.nn.attention_core import KernelOptions, LinearOptions, option_names
from roformer_jax.nn.feature_maps import FEATURE_MAPS


class AttentionContext(NamedTuple):
    """What every layer receives beyond x [B, L, D]; the encoder makes it once.

    mask: bool [B, L] (True = real token; padded keys are never attended to), or None.
    position_ids: int [L] or [B, L] ([L, A] or [B, L, A] for an encoding on A axes).
    deterministic: no dropout, and no measured denominators.
    decode_length: None, or the length of the whole sequence being decoded: each call's
      tokens then follow those of the calls before (`model.SelfAttention`).
    example_ids: int [B], each row's index in the global batch (its dropout masks), or None.
    segment_ids: int [B, L], documents packed in a row, each attending within itself; or None.
    update: the optimizer updates done (int, may be traced), which pick the random features
      (`feature_projection`); None: the first draw.
    """

    mask: jax.Array | None
    position_ids: jax.Array
    deterministic: bool
    decode_length: int | None = None
    example_ids: jax.Array | None = None
    segment_ids: jax.Array | None = None
    update: jax.Array | int | None = None


@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """One attention kind.

    Attributes:
      full: (q, k, v, *, mask, causal, rotation, **options) -> out [B, L, N, H], or
        (out, smallest |denominator|) when it takes return_min_denominator=True.
      step: (memory, q, k, v, *, mask, rotation, **step_options) -> (out, memory): the
        causal form for new tokens after those in memory (None before the first).
      options: the keywords `full` takes beyond the common ones.
      step_options: the keywords `step` takes beyond the common ones.
      build_options: (config, context, layer, make_rng) -> the options `full` is called
        with in `layer` (its index in the encoder) of a `ModelConfig`'s model, given the
        layer's `AttentionContext`; make_rng(stream) draws a key (Flax's `make_rng`).
        A subset of `options` (a bias comes from the position encoding).
      build_step_options: (config, context, layer) -> the options `step` is called with.
    """

    full: Callable[..., jax.Array | tuple[jax.Array, jax.Array]]
    step: Callable[..., tuple[jax.Array, object]]
    options: frozenset[str]
    step_options: frozenset[str]
    build_options: Callable[..., dict]
    build_step_options: Callable[..., dict]


def feature_projection(cfg, layer: int, update=None) -> jax.Array | None:
    """The random features of `layer` (FAVOR+'s W [F, H], shared by its heads), or None when
    the model (a `ModelConfig`'s) draws none.

    A function of (feature_seed, layer, redraw period) only, so a run draws the same
    features on 1 or 8 devices and when resumed. Training update t (int, may be traced: the
    updates done before it) draws period t // feature_redraw's: resampled periodically, as
    the Performer paper does. Evaluation and decoding pass `model.evaluation_update`'s
    update; update None is period 0's draw. feature_redraw 0 draws period 0 for every update.
    """
    if not cfg.draws_features:
        return None
    period = 0 if update is None or not cfg.feature_redraw else update // cfg.feature_redraw
    key = jax.random.key(0 if cfg.feature_seed is None else cfg.feature_seed)
    key = jax.random.fold_in(jax.random.fold_in(key, layer), period)
    return FEATURE_MAPS[cfg.feature_map].draw(key, cfg.random_features, cfg.head_dim)


def _softmax_options(cfg, context: AttentionContext, layer: int, make_rng) -> dict:
    del layer  # every layer alike
    dropout = not context.deterministic and cfg.attention_dropout > 0.0
    return dict(
        dropout_rate=cfg.attention_dropout if dropout else 0.0,
        dropout_rng=make_rng("dropout") if dropout else None,
        example_ids=context.example_ids,
        segment_ids=context.segment_ids,
        window=cfg.window,
    )


def _softmax_step_options(cfg, context: AttentionContext, layer: int) -> dict:
    # The KV cache stores each key's position (for a bias) in `capacity` slots, or in a
    # ring of `window` slots. It keeps one position per key: N-D positions have no bias.
    del layer
    positions = context.position_ids
    if cfg.encoding.axes is not None:
        positions = positions[..., 0]
    return dict(positions=positions, capacity=context.decode_length, window=cfg.window)


def _full_only_options(cfg, context: AttentionContext, layer: int, make_rng) -> dict:
    # A linear kind's full form also takes packed rows' segment ids (its step decodes one
    # sequence per row) and, in training, reports how near the denominator's guard comes to
    # binding (eq. (18)'s instability, measured).
    del cfg, layer, make_rng
    return dict(segment_ids=context.segment_ids, return_min_denominator=not context.deterministic)


def _linear_step_options(cfg, context: AttentionContext, layer: int) -> dict:
    return dict(
        feature_map=cfg.feature_map,
        placement=cfg.linear_rope,
        projection=feature_projection(cfg, layer, context.update),
    )


def _linear_options(cfg, context: AttentionContext, layer: int, make_rng) -> dict:
    return {
        **_linear_step_options(cfg, context, layer),
        **_full_only_options(cfg, context, layer, make_rng),
    }


def _no_options(cfg, context: AttentionContext, layer: int) -> dict:
    del cfg, context, layer  # eps and chunk_size keep their defaults
    return {}


_FULL_ONLY = frozenset({"segment_ids", "return_min_denominator"})

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "softmax": AttentionKind(
        full=attention.softmax_attention,
        step=attention_step.softmax_attention_step,
        options=frozenset(
            {"bias", "dropout_rate", "dropout_rng", "example_ids", "segment_ids", "window"}
        ),
        step_options=frozenset({"bias", "positions", "capacity", "window"}),
        build_options=_softmax_options,
        build_step_options=_softmax_step_options,
    ),
    "linear": AttentionKind(
        full=attention.linear_attention,
        step=attention_step.linear_attention_step,
        options=option_names(LinearOptions) | _FULL_ONLY,
        step_options=option_names(LinearOptions),
        build_options=_linear_options,
        build_step_options=_linear_step_options,
    ),
    "cosine": AttentionKind(
        full=attention.cosine_attention,
        step=attention_step.cosine_attention_step,
        options=option_names(KernelOptions) | _FULL_ONLY,
        step_options=option_names(KernelOptions),
        build_options=_full_only_options,
        build_step_options=_no_options,
    ),
}
