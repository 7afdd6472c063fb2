"""The encoder's architecture as data: `ModelConfig`, the named sizes, dtypes, activations.

One frozen dataclass holds every architectural choice of `roformer_jax.nn.model.RoFormer`: the
position encoding (a key of `positions.ENCODINGS`), the attention kind (a key of
`attention_kinds.ATTENTION_KINDS`) and their options, validated when the config is made.
"""

import dataclasses
import functools
import json
from collections.abc import Callable

import jax
import jax.numpy as jnp

from roformer_jax.nn import rope
from roformer_jax.nn import rope_scaling as scalings  # the field rope_scaling shadows the name
from roformer_jax.nn.attention_core import PLACEMENTS
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS, AttentionKind
from roformer_jax.nn.feature_maps import FEATURE_MAPS
from roformer_jax.nn.positions import ENCODINGS, PositionEncoding

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


@dataclasses.dataclass(frozen=True)
class ModelConfig:
    """Architecture of the encoder; the defaults are BERT-base with RoPE (RoFormer-base)."""

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
    feature_map: str = "elu"  # linear attention's φ, a key of feature_maps.FEATURE_MAPS
    # A random φ (FAVOR+, feature_map="favor"): F features per head (even: RoPE may rotate
    # them in pairs), redrawn every `feature_redraw` training steps (0: drawn once), from
    # `feature_seed` (None: the experiment's seed, training.config sets it; 0 for a model
    # alone), each layer its own draw (`attention_kinds.feature_projection`).
    random_features: int = 256
    feature_redraw: int = 1000
    feature_seed: int | None = None
    linear_rope: str = "numerator"  # linear attention's rotation placement (eq. 19): PLACEMENTS
    rope_base: float = 10000.0  # θ_i = base^(-2i/H), paper eq. (15)
    # HF's rope scaling dictionary as JSON (v4 `rope_scaling` or v5 `rope_parameters`), e.g.
    # '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}'; a dict
    # is accepted and stored as JSON, which stays hashable, overridable and checkpointable.
    rope_scaling: str | None = None
    # HF v5's `layer_types` as JSON (a list is accepted), one name per layer, e.g.
    # '["sliding_attention", "full_attention"]': with rope_scaling nested by these names
    # ('{"full_attention": {"rope_theta": 1e6}, "sliding_attention": null}'), each layer
    # rotates with its type's base, scaling and partial_rotary_factor, or not at all (null).
    layer_types: str | None = None
    # A, the axes of each token's position for encodings that take several ("rope_nd",
    # "rope_learned"): position_ids [(B,) L, A]; M-RoPE's mrope_section has A entries.
    position_axes: int = 1
    rope_per_head: bool = False  # "rope_learned": frequencies per head (RoPE-Mixed)
    rotary_value: bool = False  # also rotate v, as HF RoFormer's `rotary_value`
    pre_ln: bool = False  # LayerNorm before each sublayer (and once at the end) instead of after
    # Token i attends to tokens j <= i only: a decoder (HF's `is_decoder`), for next-token
    # prediction and generation (roformer_jax.nn.decoding); every attention kind has a causal form.
    causal: bool = False
    # Query i sees keys j with |i - j| < window (causal: i - window < j <= i), as Mistral's
    # and Gemma's local layers; a decode cache then holds `window` keys. None: every key.
    # Only kinds that form the scores can take it (`AttentionKind.options` names "window").
    window: int | None = None
    initializer_range: float = 0.02  # std of the normal initializer (BERT)
    hidden_act: str = "gelu"  # a key of ACTIVATIONS

    def __post_init__(self):
        self._check_fields()
        if self.random_features < 2 or self.random_features % 2:
            raise ValueError(
                f"random_features={self.random_features} must be even and positive: RoPE "
                "rotates features in pairs"
            )
        if self.feature_redraw < 0:
            raise ValueError(f"feature_redraw={self.feature_redraw} must be >= 0 (0: never)")
        if self.position_axes < 1:
            raise ValueError(f"position_axes={self.position_axes} must be a positive integer")
        self._canonical_json("rope_scaling", dict)
        self._canonical_json("layer_types", list)
        if self.rope_scaling is not None or self.layer_types is not None:
            self._check_rope_scaling()
        self.encoding.check(self)
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
        if self.window is not None:
            self._check_window()

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
            if int(getattr(self, name)) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be a positive integer")
        if self.embedding_size is not None and self.embedding_size < 1:
            raise ValueError(f"embedding_size={self.embedding_size} must be positive or None")
        for name in ("hidden_dropout", "attention_dropout"):
            if not 0.0 <= getattr(self, name) < 1.0:
                raise ValueError(f"{name}={getattr(self, name)} is not in [0, 1)")
        if self.hidden_size % self.num_heads:
            raise ValueError(
                f"hidden_size {self.hidden_size} is not divisible by num_heads {self.num_heads}"
            )
        if self.num_kv_heads is not None and (
            self.num_kv_heads < 1 or self.num_heads % self.num_kv_heads
        ):
            raise ValueError(
                f"num_kv_heads={self.num_kv_heads} must divide num_heads={self.num_heads}: "
                "each key/value head serves num_heads / num_kv_heads query heads"
            )
        choices = {
            "dtype": tuple(DTYPES),
            "position": tuple(ENCODINGS),
            "attention": tuple(ATTENTION_KINDS),
            "feature_map": tuple(FEATURE_MAPS),
            "linear_rope": PLACEMENTS,
            "hidden_act": tuple(ACTIVATIONS),
        }
        for name, allowed in choices.items():
            if getattr(self, name) not in allowed:
                raise ValueError(f"{name}={getattr(self, name)!r} is not one of {allowed}")

    def _check_window(self):
        if self.window < 1:
            raise ValueError(f"window={self.window} must be >= 1 (None: every key)")
        if "window" not in self.kind.options:
            raise ValueError(
                f"window={self.window} limits which keys a query scores, but {self.attention!r} "
                "attention never forms the scores; use attention='softmax' or window=None"
            )

    def _canonical_json(self, name, kind):
        """Field `name` (JSON of a `kind`, or a `kind`) as canonical JSON (sorted keys), so
        that equal values give equal configs however they were written, and a resumed run is
        not refused for the order of its keys."""
        value = getattr(self, name)
        if value is None:
            return
        parsed = value
        if isinstance(parsed, str):
            try:
                parsed = json.loads(parsed)
            except json.JSONDecodeError as error:
                raise ValueError(f"{name}={value!r} is not JSON: {error}") from None
        if isinstance(parsed, tuple):
            parsed = list(parsed)
        if not isinstance(parsed, kind):
            what = "a JSON object" if kind is dict else "a JSON list"
            raise ValueError(f"{name}={value!r} is not {what}")
        object.__setattr__(self, name, json.dumps(parsed, sort_keys=True))

    def _check_rope_scaling(self):
        if self.encoding.rotation is None:
            raise ValueError(
                f"rope_scaling={self.rope_scaling} and layer_types={self.layer_types} set "
                f"RoPE's frequencies, but position={self.position!r} rotates nothing; use "
                "position='rope'"
            )
        parsed, layer_types = self.rope_scaling_dict, self.layer_types_list
        if not scalings.is_nested(parsed, layer_types):
            # One dictionary for every layer, as before HF v5: its "rope_theta" must agree.
            rope.scaled_frequencies(self.head_dim, base=self.rope_base, scaling=parsed)
        for layer in range(self.num_layers):  # fails now, with HF's key names
            self.layer_rope(layer)

    def layer_rope(self, layer: int) -> scalings.LayerRope | None:
        """How `layer` rotates (base, rotary dim, scaling); None for a layer without positions."""
        params = scalings.layer_parameters(
            self.rope_scaling_dict, self.layer_types_list, self.num_layers
        )
        return scalings.layer_rope(self.head_dim, params[layer], base=self.rope_base)

    @property
    def layer_types_list(self) -> list[str] | None:
        """`layer_types` parsed."""
        return None if self.layer_types is None else json.loads(self.layer_types)

    @property
    def rope_scaling_dict(self) -> dict | None:
        """`rope_scaling` parsed, for `rope.apply_rope(scaling=...)`."""
        return None if self.rope_scaling is None else json.loads(self.rope_scaling)

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
        """Whether attention draws random features (FAVOR+): a kind that takes a projection,
        with a random feature map."""
        takes = "projection" in self.kind.options
        return takes and FEATURE_MAPS[self.feature_map].draw is not None

    @property
    def max_length(self) -> int | None:
        """The longest sequence the position encoding supports; None = any length."""
        return self.encoding.max_length(self)


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
