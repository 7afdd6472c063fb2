"""The attention kinds' sections: their hyperparameters, one frozen record per kind.

Every kind's section is a `GateSection` (the decay gate whose log_decay the model makes,
model.py); softmax's (`SoftmaxSection`) also sets each layer's mask, sinks, QK-norm and query
temperature, per layer type as HF's configs give them (`layer_config.py` reads those).
Linear attention's section lives with its random features in attention_kinds.py. The table
of kinds naming each section is `attention_kinds.ATTENTION_KINDS`.
"""

import dataclasses

from roformer_jax.nn.sections import FrozenDict, Section, check_count

# The decay gates a model can make (`GateSection.gate`; model.py makes each).
GATES = ("none", "fixed", "learned")


@dataclasses.dataclass(frozen=True)
class GateSection(Section):
    """The decay gate of a causal model, which every attention kind takes as `log_decay`.

    gate: "none"; "fixed": RetNet's decay γ_n = 1 - 2^(-5-n) for head n (Sun et al. 2023),
      which with RoPE in linear attention's numerator is retention, the denominator kept;
      "learned": FoX's forget gate f_t = σ(w_n·x_t + b_n) of each head n from the layer's
      input (Lin et al. 2025), w ~ N(0, initializer_range²) and b = gate_bias.
    gate_bias: the learned gate's initial b. 0, as FoX initializes it, starts every head
      keeping σ(0) = 1/2 of each earlier token's weight per token, so that little more than
      ten tokens back is seen at first; a positive b starts it nearer to keeping all
      (σ(4) = 0.98 a token), as xLSTM's forget gates (b in [3, 6]) and FoX's bias-initialized
      variants start.
    output_gate: FoX's output gate: the attention output times σ(W x) before the output
      projection (W [D, D], no bias), with any gate.
    """

    gate: str = "none"
    gate_bias: float = 0.0
    output_gate: bool = False

    def __post_init__(self):
        super().__post_init__()
        if self.gate not in GATES:
            raise ValueError(f"gate={self.gate!r} is not one of {GATES}")
        if self.gate_bias and self.gate != "learned":
            raise ValueError(
                f"gate_bias={self.gate_bias} starts a learned gate, but gate={self.gate!r}"
            )

    def check_model(self, config) -> None:
        """A gate decays what came before each token: a causal model's only."""
        if self.gate != "none" and not config.causal:
            raise ValueError(
                f"sections.{config.attention}.gate={self.gate!r} decays what came before each "
                "token, which needs causal=True"
            )


# The fields of SoftmaxSection that a layer type may set for itself (`by_type`).
LAYER_FIELDS = ("window", "chunk", "sinks", "qk_norm", "attn_scale", "floor_scale")


@dataclasses.dataclass(frozen=True)
class SoftmaxSection(GateSection):
    """Softmax attention's hyperparameters, beyond GateSection's; per layer as HF's configs
    give them (Gemma 3's sliding layers, Llama 4's chunked ones, gpt-oss's sinks).

    window: query i sees keys j with |i - j| < window (causal: i - window < j <= i), as
      Mistral's and Gemma's local layers; a decode cache then holds `window` keys. None:
      every key.
    chunk: query i sees key j only when i // chunk == j // chunk (Llama 4's chunked layers);
      a decode cache then holds `chunk` keys. None: no chunks.
    sinks: a learned logit per head joining the softmax's denominator (gpt-oss), a
      parameter of the layer ("sinks" [N], started at 0).
    qk_norm: q and k each RMS-normalized over a head's features before RoPE (Qwen3, Gemma 3,
      Llama 4; `qk.rms_norm`, eps `qk_norm_eps`), times a scale [H] of the layer ("q_norm",
      "k_norm", started at 1).
    attn_scale, floor_scale: Llama 4's query temperature in its layers without positions,
      q times 1 + attn_scale · log(floor((p + 1) / floor_scale) + 1) at position p
      (`qk.query_temperature`); attn_scale 0: none.
    layer_types: one name per layer (HF v5's `layer_types`, e.g. "sliding_attention",
      "full_attention"), or None: the position section's `layer_types` (RoPE's, which
      names each layer's rotation by the same names), so a config gives them once. Given in
      both, they must agree.
    by_type: {layer type: {field of LAYER_FIELDS: value}}, what a type's layers set for
      themselves; the others take this section's fields. E.g. {"sliding_attention":
      {"window": 512}} with layer_types ("sliding_attention", "full_attention").
    """

    window: int | None = None
    chunk: int | None = None
    sinks: bool = False
    qk_norm: bool = False
    qk_norm_eps: float = 1e-6
    attn_scale: float = 0.0
    floor_scale: float = 8192.0
    layer_types: tuple[str, ...] | None = None
    by_type: FrozenDict | None = None

    def __post_init__(self):
        super().__post_init__()
        for name in ("window", "chunk"):
            value = getattr(self, name)
            if value is not None:
                check_count(name, value, " (None: every key)")
        for name in ("qk_norm_eps", "floor_scale"):
            if not getattr(self, name) > 0:
                raise ValueError(f"{name}={getattr(self, name)} must be positive")
        for name, fields in (self.by_type or {}).items():
            unknown = set(fields) - set(LAYER_FIELDS)
            if unknown:
                raise ValueError(
                    f"by_type[{name!r}] sets {sorted(unknown)}; a layer type sets only "
                    f"{LAYER_FIELDS}"
                )
            try:  # its values, checked as the section's own
                dataclasses.replace(self, by_type=None, **fields)
            except ValueError as error:
                raise ValueError(f"by_type[{name!r}]: {error}") from None

    def types(self, config) -> tuple[str, ...] | None:
        """Each layer's type: this section's `layer_types`, else the position section's."""
        if self.layer_types is not None:
            return self.layer_types
        return getattr(config.position_section, "layer_types", None)

    def check_model(self, config) -> None:
        super().check_model(config)
        where = f"sections.{config.attention}"
        rope_types = getattr(config.position_section, "layer_types", None)
        if None not in (self.layer_types, rope_types) and self.layer_types != rope_types:
            raise ValueError(
                f"{where}.layer_types={self.layer_types} differs from sections."
                f"{config.position}.layer_types={rope_types}; give them once"
            )
        types = self.types(config)
        if types is not None and len(types) != config.num_layers:
            raise ValueError(
                f"{where}.layer_types has {len(types)} entries for {config.num_layers} layers"
            )
        if self.by_type and types is None:
            raise ValueError(f"{where}.by_type={dict(self.by_type)} needs layer_types")
        unknown = sorted(set(self.by_type or {}) - set(types or ()))
        if unknown:  # a misspelt type would leave its layers as the others, without a word
            raise ValueError(
                f"{where}.by_type names {unknown}, no layer type of {sorted(set(types))}"
            )

    def for_layer(self, layer: int, config) -> "SoftmaxSection":
        """The section as `layer` of a model (`config`, a ModelConfig) reads it: its type's
        `by_type` entry applied, no types left."""
        types = self.types(config)
        fields = {} if types is None else (self.by_type or {}).get(types[layer], {})
        return dataclasses.replace(self, layer_types=None, by_type=None, **fields)


@dataclasses.dataclass(frozen=True)
class CosineSection(GateSection):
    """Cosine attention's hyperparameters: GateSection's only."""
