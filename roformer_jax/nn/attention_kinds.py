"""The attention kinds as one table: each kind's full form, its decode step and its options.

A new kind is its functions (attention.py, attention_step.py) plus one entry here; the model
(model.py) and its config (model_config.py) read the record and name no kind themselves.
Every full form takes q, k, v and the common keywords mask, causal, rotation, log_decay;
every step takes its memory, q, k, v and mask, rotation, log_decay (attention.py and
attention_step.py say what each means). Beyond those a form takes exactly the options its
record names, and the record's builders make their values from the kind's own section of
the model config (its hyperparameters: `SoftmaxSection`, `CosineSection` and `GateSection`
in attention_sections.py, `LinearSection` here beside its random features), the model config
and the layer's context: a new option of a kind is written here and in its functions (and a
new hyperparameter in its section), nowhere else. Every kind's section is a `GateSection`:
the decay gate whose log_decay the model makes (model.py).
"""

import dataclasses
from collections.abc import Callable
from typing import NamedTuple

import jax

from roformer_jax.nn import attention, attention_step, qk
from roformer_jax.nn.attention_core import PLACEMENTS, KernelOptions, LinearOptions, option_names
from roformer_jax.nn.attention_sections import CosineSection, GateSection, SoftmaxSection
from roformer_jax.nn.feature_maps import FEATURE_MAPS
from roformer_jax.nn.sections import Section


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


def _no_parameters(section, cfg, layer: int) -> dict:
    del section, cfg, layer
    return {}


def _as_they_are(section, cfg, layer: int, q, k, positions, param):
    del section, cfg, layer, positions, param
    return q, k


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
      build_options: (section, config, context, layer, make_rng) -> the options `full` is
        called with in `layer` (its index in the encoder) of a `ModelConfig`'s model, given
        the kind's own section (an instance of `section`, or None) and the layer's
        `AttentionContext`; make_rng(stream) draws a key (Flax's `make_rng`). A subset of
        `options` (a bias comes from the position encoding).
      build_step_options: (section, config, context, layer) -> the options `step` is called
        with.
      section: the `GateSection` subclass of the kind's hyperparameters (the model reads
        its gate), or None: no hyperparameters and no gate.
      parameters: (section, config, layer) -> {option: (initializer, shape)}: the options
        that are parameters of `layer` (softmax's sinks), which the model makes and passes
        to `full` and `step`.
      no_ring: the common keywords `full` cannot take with the positions split over
        devices (mesh.context > 1: `context_parallel.py`), or None: no such form at all.
      prepare: (section, config, layer, q, k, positions, param) -> (q, k): what `layer`
        does to q [B, L, N, H] and k [B, L, K, H] before the kind (and before RoPE), at
        positions int [L] or [B, L]; param(name, init, shape) makes a parameter of the layer
        (Flax's `param`). Softmax's: QK-norm and the query temperature.
    """

    full: Callable[..., jax.Array | tuple[jax.Array, jax.Array]]
    step: Callable[..., tuple[jax.Array, object]]
    options: frozenset[str]
    step_options: frozenset[str]
    build_options: Callable[..., dict]
    build_step_options: Callable[..., dict]
    section: type[Section] | None = None
    parameters: Callable[..., dict] = _no_parameters
    no_ring: frozenset[str] | None = None
    prepare: Callable[..., tuple[jax.Array, jax.Array]] = _as_they_are


@dataclasses.dataclass(frozen=True)
class LinearSection(GateSection):
    """Linear attention's hyperparameters, beyond GateSection's.

    feature_map: φ, a key of feature_maps.FEATURE_MAPS.
    placement: where RoPE's rotation goes (eq. 19's "numerator"), one of PLACEMENTS.
    random_features, feature_redraw, feature_seed: a random φ (FAVOR+, feature_map="favor")
      has F = random_features features per head (even: RoPE may rotate them in pairs),
      redrawn every `feature_redraw` training steps (0: drawn once), from `feature_seed`
      (None: the experiment's seed, training.config sets it; 0 for a model alone), each layer
      its own draw (`feature_projection`).
    """

    feature_map: str = "elu"
    placement: str = "numerator"
    random_features: int = 256
    feature_redraw: int = 1000
    feature_seed: int | None = None

    def __post_init__(self):
        super().__post_init__()
        if self.feature_map not in FEATURE_MAPS:
            raise ValueError(
                f"feature_map={self.feature_map!r} is not one of {tuple(FEATURE_MAPS)}"
            )
        if self.placement not in PLACEMENTS:
            raise ValueError(f"placement={self.placement!r} is not one of {PLACEMENTS}")
        if self.random_features < 2 or self.random_features % 2:
            raise ValueError(
                f"random_features={self.random_features} must be even and positive: RoPE "
                "rotates features in pairs"
            )
        if self.feature_redraw < 0:
            raise ValueError(f"feature_redraw={self.feature_redraw} must be >= 0 (0: never)")

    @property
    def draws_features(self) -> bool:
        """Whether φ is random (FAVOR+): its features are drawn."""
        return FEATURE_MAPS[self.feature_map].draw is not None


def feature_projection(
    section: LinearSection, head_dim: int, layer: int, update=None
) -> jax.Array | None:
    """The random features of `layer` (FAVOR+'s W [F, H], shared by its heads, H = head_dim),
    or None for a φ that draws none.

    A function of (feature_seed, layer, redraw period) only, so a run draws the same
    features on 1 or 8 devices and when resumed. Training update t (int, may be traced: the
    updates done before it) draws period t // feature_redraw's: resampled periodically, as
    the Performer paper does. Evaluation and decoding pass `model.evaluation_update`'s
    update; update None is period 0's draw. feature_redraw 0 draws period 0 for every update.
    """
    if not section.draws_features:
        return None
    redraw = section.feature_redraw
    period = 0 if update is None or not redraw else update // redraw
    key = jax.random.key(0 if section.feature_seed is None else section.feature_seed)
    key = jax.random.fold_in(jax.random.fold_in(key, layer), period)
    return FEATURE_MAPS[section.feature_map].draw(key, section.random_features, head_dim)


def _softmax_options(
    section: SoftmaxSection, cfg, context: AttentionContext, layer: int, make_rng
) -> dict:
    section = section.for_layer(layer, cfg)
    dropout = not context.deterministic and cfg.attention_dropout > 0.0
    return dict(
        dropout_rate=cfg.attention_dropout if dropout else 0.0,
        dropout_rng=make_rng("dropout") if dropout else None,
        example_ids=context.example_ids,
        segment_ids=context.segment_ids,
        window=section.window,
        chunk=section.chunk,
    )


def _softmax_step_options(section: SoftmaxSection, cfg, context: AttentionContext, layer) -> dict:
    # The KV cache stores each key's position (for a bias) in `capacity` slots, or in a
    # ring of `window` (or `chunk`) slots. It keeps one position per key: N-D positions have
    # no bias.
    section = section.for_layer(layer, cfg)
    positions = context.position_ids
    if cfg.axes is not None:
        positions = positions[..., 0]
    return dict(
        positions=positions,
        capacity=context.decode_length,
        window=section.window,
        chunk=section.chunk,
    )


def _softmax_parameters(section: SoftmaxSection, cfg, layer: int) -> dict:
    if not section.for_layer(layer, cfg).sinks:
        return {}
    return {"sinks": (jax.nn.initializers.zeros, (cfg.num_heads,))}


def _full_only_options(section, cfg, context: AttentionContext, layer: int, make_rng) -> dict:
    # A linear kind's full form also takes packed rows' segment ids (its step decodes one
    # sequence per row) and, in training, reports how near the denominator's guard comes to
    # binding (eq. (18)'s instability, measured).
    del section, cfg, layer, make_rng
    return dict(segment_ids=context.segment_ids, return_min_denominator=not context.deterministic)


def _linear_step_options(section: LinearSection, cfg, context: AttentionContext, layer) -> dict:
    return dict(
        feature_map=section.feature_map,
        placement=section.placement,
        projection=feature_projection(section, cfg.head_dim, layer, context.update),
    )


def _linear_options(section: LinearSection, cfg, context, layer: int, make_rng) -> dict:
    return {
        **_linear_step_options(section, cfg, context, layer),
        **_full_only_options(section, cfg, context, layer, make_rng),
    }


def _softmax_prepare(section: SoftmaxSection, cfg, layer: int, q, k, positions, param):
    section = section.for_layer(layer, cfg)
    if section.qk_norm:
        ones = jax.nn.initializers.ones
        q, k = (
            qk.rms_norm(x, param(name, ones, (cfg.head_dim,)), eps=section.qk_norm_eps)
            for x, name in ((q, "q_norm"), (k, "k_norm"))
        )
    if section.attn_scale:
        if cfg.axes is not None:
            positions = positions[..., 0]
        scale = qk.query_temperature(
            positions, attn_scale=section.attn_scale, floor_scale=section.floor_scale
        )
        q = q * scale[..., None, None].astype(q.dtype)  # [B or 1, L, 1, 1]
    return q, k


def _no_options(section, cfg, context: AttentionContext, layer: int) -> dict:
    del section, cfg, context, layer  # eps and chunk_size keep their defaults
    return {}


_FULL_ONLY = frozenset({"segment_ids", "return_min_denominator"})

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "softmax": AttentionKind(
        full=attention.softmax_attention,
        step=attention_step.softmax_attention_step,
        options=frozenset(
            {
                "bias",
                "dropout_rate",
                "dropout_rng",
                "example_ids",
                "segment_ids",
                "window",
                "chunk",
                "sinks",
            }
        ),
        step_options=frozenset({"bias", "positions", "capacity", "window", "chunk", "sinks"}),
        build_options=_softmax_options,
        build_step_options=_softmax_step_options,
        section=SoftmaxSection,
        parameters=_softmax_parameters,
        # The [L, M] terms of a bias (ALiBi) or of FoX's gates would travel the ring.
        no_ring=frozenset({"bias", "log_decay"}),
        prepare=_softmax_prepare,
    ),
    "linear": AttentionKind(
        full=attention.linear_attention,
        step=attention_step.linear_attention_step,
        options=option_names(LinearOptions) | _FULL_ONLY,
        step_options=option_names(LinearOptions),
        build_options=_linear_options,
        build_step_options=_linear_step_options,
        section=LinearSection,
        no_ring=frozenset(),  # LASP: the states pass from device to device
    ),
    "cosine": AttentionKind(
        full=attention.cosine_attention,
        step=attention_step.cosine_attention_step,
        options=option_names(KernelOptions) | _FULL_ONLY,
        step_options=option_names(KernelOptions),
        build_options=_full_only_options,
        build_step_options=_no_options,
        section=CosineSection,
        no_ring=frozenset(),
    ),
}
