"""The encoder's architecture as data: `ModelConfig`, the named sizes, dtypes, activations.

One frozen dataclass holds every architectural choice of `roformer_jax.nn.model.RoFormer`: the
position encoding (a key of `positions.ENCODINGS`), the attention kind (a key of
`attention_kinds.ATTENTION_KINDS`) and, in sections, their hyperparameters, validated when the
config is made. `model_config_from_dict` also reads the flat layout that runs saved before the
sections (`FLAT_FIELDS`).
"""

import dataclasses
import functools
import json
from collections.abc import Callable, Mapping

import jax
import jax.numpy as jnp

from roformer_jax.nn import rope_scaling as scalings
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS, AttentionKind
from roformer_jax.nn.positions import ENCODINGS, PositionEncoding
from roformer_jax.nn.sections import FrozenDict, Section, check_count, check_keys

DTYPES = {"float32": jnp.float32, "bfloat16": jnp.bfloat16}
ACTIVATIONS: dict[str, Callable[[jax.Array], jax.Array]] = {
    # HF's "gelu" is the exact erf form (torch.nn.functional.gelu); the tanh form is "gelu_new".
    "gelu": functools.partial(jax.nn.gelu, approximate=False),
    "gelu_new": functools.partial(jax.nn.gelu, approximate=True),
    "gelu_pytorch_tanh": functools.partial(jax.nn.gelu, approximate=True),
    "relu": jax.nn.relu,
    "silu": jax.nn.silu,
    "swish": jax.nn.silu,
}


def section_types() -> dict[str, type[Section]]:
    """{entry name: its Section class} of every encoding and attention kind that has one,
    read from the tables each time (an entry added to a table brings its section)."""
    table = {}
    for entries in (ENCODINGS, ATTENTION_KINDS):
        for name, record in entries.items():
            if record.section is not None:
                if name in table:
                    raise ValueError(f"{name!r} names an encoding and an attention kind")
                table[name] = record.section
    return table


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of the encoder; the defaults are BERT-base with RoPE (RoFormer-base).

    The position encoding and the attention kind are names of table entries; their
    hyperparameters are `sections`, one per entry that has any (`section_types`), e.g.
    ModelConfig(attention="linear", sections={"linear": {"feature_map": "favor"}}): a mapping
    gives some fields of a section, the rest keep their defaults. The sections of entries
    not chosen must stay at their defaults (a setting that would do nothing is an error).
    """

    vocab_size: int = 30522  # V; bert-base-uncased's (experiments follow the tokenizer)
    hidden_size: int = 768  # D
    num_layers: int = 12  # encoder blocks
    num_heads: int = 12  # N; head dim H = D / N
    # K key/value heads, each shared by N / K query heads (grouped-query attention, Ainslie
    # et al. 2023; K = 1 is multi-query): k and v project to K·H features, and a decode
    # cache holds K heads. None: K = N, every query head its own (BERT, RoFormer).
    num_kv_heads: int | None = None
    intermediate_size: int = 3072  # F
    hidden_dropout: float = 0.1  # after embeddings and after each sublayer
    attention_dropout: float = 0.1  # on softmax attention weights (other kinds have none)
    max_len: int = 512  # rows of the learned position table (and HF max_position_embeddings)
    type_vocab_size: int = 2  # segment ids (MLM batches use 0 only)
    layer_norm_eps: float = 1e-12  # BERT's value
    embedding_size: int | None = None  # E; None means E = D (no factorization)
    dtype: str = "float32"  # compute dtype; parameters are always float32
    position: str = "rope"  # a key of positions.ENCODINGS
    attention: str = "softmax"  # a key of attention_kinds.ATTENTION_KINDS
    # {entry name: its Section} for every name of section_types(); given as a partial mapping.
    sections: FrozenDict = None
    rotary_value: bool = False  # also rotate v, as HF RoFormer's `rotary_value`
    pre_ln: bool = False  # LayerNorm before each sublayer (and once at the end) instead of after
    # Token i attends to tokens j <= i only: a decoder (HF's `is_decoder`), for next-token
    # prediction and generation (roformer_jax.nn.decoding); every attention kind has a causal form.
    causal: bool = False
    initializer_range: float = 0.02  # std of the normal initializer (BERT)
    hidden_act: str = "gelu"  # a key of ACTIVATIONS

    def __post_init__(self):
        self._check_fields()
        object.__setattr__(self, "sections", _complete_sections(self.sections))
        for name, section in self.sections.items():
            if name not in (self.position, self.attention) and section.changed():
                raise ValueError(
                    f"sections.{name} sets {section.changed()}, but position={self.position!r} "
                    f"and attention={self.attention!r}: {name}'s hyperparameters would do "
                    f"nothing; leave them at their defaults or set position or attention to "
                    f"{name!r}"
                )
        self.encoding.check(self.position_section, self)
        for section in (self.position_section, self.attention_section):
            if section is not None:
                section.check_model(self)
        if self.rotary_value and self.encoding.rotation is None:
            raise ValueError(
                f"rotary_value=True rotates v as q and k are rotated, but position="
                f"{self.position!r} rotates nothing; use position='rope'"
            )
        if self.encoding.bias is not None and "bias" not in self.kind.options:
            raise ValueError(
                f"position={self.position!r} adds a bias to the attention scores, but "
                f"{self.attention!r} attention never forms the L x M score matrix (that is "
                "what makes it linear); RoPE rotates q and k instead, which linear attention "
                "can use: set position='rope', or attention='softmax'"
            )

    def _check_fields(self):
        """Each field alone: sizes, rates and names of table entries."""
        for name in (
            "vocab_size",
            "hidden_size",
            "num_layers",
            "num_heads",
            "intermediate_size",
            "max_len",
            "type_vocab_size",
        ):
            check_count(name, getattr(self, name))
        if self.embedding_size is not None:
            check_count("embedding_size", self.embedding_size, " or None")
        if self.num_kv_heads is not None:
            check_count("num_kv_heads", self.num_kv_heads, " or None")
        if not 0.0 < self.layer_norm_eps < float("inf"):
            raise ValueError(f"layer_norm_eps={self.layer_norm_eps} must be positive and finite")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} is not in [0, 1)")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if self.num_kv_heads is not None and self.num_heads % self.num_kv_heads:
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}: "
                "each key/value head serves num_heads / num_kv_heads query heads"
            )
        choices = {
            "dtype": tuple(DTYPES),
            "position": tuple(ENCODINGS),
            "attention": tuple(ATTENTION_KINDS),
            "hidden_act": tuple(ACTIVATIONS),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} is not one of {allowed}")

    def with_section(self, name: str, **changes) -> "ModelConfig":
        """This config with fields of section `name` changed."""
        section = dataclasses.replace(self.sections[name], **changes)
        return dataclasses.replace(self, sections={**self.sections, name: section})

    def layer_rope(self, layer: int) -> scalings.LayerRope | None:
        """How `layer` rotates (base, rotary dim, scaling); None for a layer without positions
        (every layer, for an encoding that rotates nothing). ValueError for a rotation that
        is not RoPE's (rope_learned_positions learns its angles)."""
        if self.encoding.rotation is None:
            return None
        if not hasattr(self.position_section, "layer_rope"):
            raise ValueError(f"position={self.position!r} rotates by no base and scaling")
        return self.position_section.layer_rope(layer, self)

    @property
    def position_section(self) -> Section | None:
        """The chosen encoding's hyperparameters (`sections[position]`), or None."""
        return self.sections.get(self.position)

    @property
    def attention_section(self) -> Section | None:
        """The chosen attention kind's hyperparameters (`sections[attention]`), or None."""
        return self.sections.get(self.attention)

    @property
    def head_dim(self) -> int:
        return self.hidden_size // self.num_heads

    @property
    def kv_heads(self) -> int:
        """K, the key/value heads (`num_kv_heads`, or N when None)."""
        return self.num_heads if self.num_kv_heads is None else self.num_kv_heads

    @property
    def embed_dim(self) -> int:
        return self.hidden_size if self.embedding_size is None else self.embedding_size

    @property
    def encoding(self) -> PositionEncoding:
        return ENCODINGS[self.position]

    @property
    def kind(self) -> AttentionKind:
        return ATTENTION_KINDS[self.attention]

    @property
    def draws_features(self) -> bool:
        """Whether attention draws random features (FAVOR+)."""
        return bool(getattr(self.attention_section, "draws_features", False))

    @property
    def axes(self) -> int | None:
        """A, the axes of each token's position for an encoding that takes several
        (position_ids [(B,) L, A]); None: one integer per token."""
        axes = self.encoding.axes
        return None if axes is None else axes(self.position_section, self)

    @property
    def max_length(self) -> int | None:
        """The longest sequence the position encoding supports; None = any length."""
        return self.encoding.max_length(self.position_section, self)


def _complete_sections(given) -> FrozenDict:
    """Every entry's section: the given ones (instances or partial mappings), the rest at
    their defaults."""
    given, types = ({} if given is None else given), section_types()
    if not isinstance(given, Mapping):
        raise ValueError(f"sections={given!r} is not a mapping of {sorted(types)}")
    unknown = sorted(set(given) - set(types))
    if unknown:
        raise ValueError(f"unknown sections {unknown}; sections are {sorted(types)}")
    return FrozenDict(
        {name: cls.make(given.get(name), f"sections.{name}") for name, cls in types.items()}
    )


SIZES: dict[str, dict] = {
    "tiny": dict(num_layers=2, hidden_size=64, num_heads=4, intermediate_size=256),
    "small": dict(num_layers=4, hidden_size=256, num_heads=4, intermediate_size=1024),
    "base": dict(num_layers=12, hidden_size=768, num_heads=12, intermediate_size=3072),
}


def model_config(size: str, **overrides) -> ModelConfig:
    """The named size with `overrides` (any ModelConfig field, e.g. vocab_size=8192)."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; expected one of {sorted(SIZES)}")
    fields = {f.name for f in dataclasses.fields(ModelConfig)}
    unknown = sorted(set(overrides) - fields)
    if unknown:
        raise ValueError(f"unknown ModelConfig fields {unknown}; fields are {sorted(fields)}")
    return ModelConfig(**{**SIZES[size], **overrides})


# Fields of the flat layout (before the sections) -> the field of a section that took each.
FLAT_FIELDS = {
    "rope_base": "base",
    "rope_scaling": "scaling",
    "layer_types": "layer_types",
    "position_axes": "axes",
    "rope_per_head": "per_head",
    "window": "window",
    "feature_map": "feature_map",
    "linear_rope": "placement",
    "random_features": "random_features",
    "feature_redraw": "feature_redraw",
    "feature_seed": "feature_seed",
}


def nested_model_dict(values: Mapping) -> dict:
    """A model config dict in the sections layout: a flat one's FLAT_FIELDS moved into the
    sections of the chosen position encoding and attention kind (whichever has the field;
    neither: the field did nothing in that model, and is dropped). Other dicts as they are."""
    values = dict(values)
    flat = {key: values.pop(key) for key in FLAT_FIELDS if key in values}
    if not flat:
        return values
    chosen = (values.get("position", "rope"), values.get("attention", "softmax"))
    types = section_types()
    sections = {name: dict(fields) for name, fields in (values.get("sections") or {}).items()}
    for key, value in flat.items():
        if key in ("rope_scaling", "layer_types") and isinstance(value, str):
            value = json.loads(value)  # the flat layout stored them as JSON text
        for name in chosen:
            cls = types.get(name)
            if cls is not None and FLAT_FIELDS[key] in {f.name for f in dataclasses.fields(cls)}:
                sections.setdefault(name, {})[FLAT_FIELDS[key]] = value
                break
    values["sections"] = sections
    return values


def model_config_from_dict(values: Mapping) -> ModelConfig:
    """A ModelConfig from a dict (a config file's, or a saved run's in either layout)."""
    values = nested_model_dict(values)
    check_keys(ModelConfig, values, "model")
    return ModelConfig(**values)
