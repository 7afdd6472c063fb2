"""RoPE frequency scaling for long context, with the keys and meanings of HF's `rope_scaling`.

Each kind maps the plain frequencies θ_i = base^(-2i/R) to scaled ones and an attention
factor (cos and sin are multiplied by it, as HF does). The dictionary is the one a checkpoint
carries, in either generation: transformers v4's `rope_scaling` (base given apart, kind under
"type" or "rope_type") or v5's `rope_parameters` (the same keys, with "rope_theta" inside).
Where HF reads the pre-training length from the model config (`max_position_embeddings` for
"dynamic"), the dictionary carries it as "original_max_position_embeddings".

Per layer (`layer_parameters`, `layer_rope`): v5's `rope_parameters` may be nested by layer
type, `{"full_attention": {...}, "sliding_attention": {...}}` beside `layer_types` (one type
per layer), each type with its own base, scaling and partial_rotary_factor, or None for a layer
without positions (NoPE, as Llama 4's every 4th layer).

Shapes: R rotary dim; every function returns (inv_freq [R/2] float32, attention_factor float).
The arithmetic is float64 numpy: the frequencies are constants of the model, not traced values.
"""

import math
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from roformer_jax.nn import rope_layouts


def _exponents(dim: int, denominator: int | None = None) -> np.ndarray:
    """2i/R for i < R/2 (the exponent of base^(-2i/R)), float64 [R/2]."""
    return np.arange(0, dim, 2, dtype=np.float64) / (denominator or dim)


def _plain(dim: int, base: float) -> np.ndarray:
    """θ_i = base^(-2i/R), eq. (15) of RoFormer: float64 [R/2]."""
    return base ** -_exponents(dim)


def _require(params: Mapping, key: str, kind: str, expected: str):
    if params.get(key) is None:
        raise ValueError(
            f"rope scaling {kind!r} needs key {key!r} ({expected}); got {dict(params)}"
        )
    return params[key]


def _factor(params: Mapping, kind: str) -> float:
    factor = _require(params, "factor", kind, "a float >= 1")
    if not isinstance(factor, int | float) or factor < 1:
        raise ValueError(f"rope scaling {kind!r}: 'factor' must be a float >= 1, got {factor!r}")
    return float(factor)


def _original_length(params: Mapping, kind: str) -> int:
    length = _require(params, "original_max_position_embeddings", kind, "the pre-training length")
    if not isinstance(length, int) or length <= 0:
        raise ValueError(
            f"rope scaling {kind!r}: 'original_max_position_embeddings' must be a positive "
            f"integer, got {length!r}"
        )
    return length


# --- The kinds: (dim, base, params, seq_len) -> (inv_freq float64 [R/2], attention_factor) ----


def default(dim, base, params, seq_len):
    """Plain RoPE, θ_i = base^(-2i/R) (Su et al. 2021, eq. 15)."""
    return _plain(dim, base), 1.0


def linear(dim, base, params, seq_len):
    """Position interpolation, θ_i / factor (Chen et al. 2023, "Extending context window of
    large language models via positional interpolation", eq. 2)."""
    return _plain(dim, base) / _factor(params, "linear"), 1.0


def proportional(dim, base, params, seq_len):
    """HF v5's "proportional": the first partial_rotary_factor·R/2 pairs keep the exponents of
    a full head, base^(-2i/R), the rest get frequency 0 (not rotated); all divided by factor.

    Here R is the whole head (HF's head_dim): this kind returns R/2 frequencies whatever the
    partial factor, unlike the others, whose R is already the rotated part.
    """
    factor = float(params.get("factor", 1.0))
    pairs = int(float(params.get("partial_rotary_factor", 1.0)) * dim // 2)
    inv_freq = np.zeros(dim // 2)
    inv_freq[:pairs] = base ** -_exponents(2 * pairs, denominator=dim)
    return inv_freq / factor, 1.0


def ntk(dim, base, params, seq_len):
    """Static NTK-aware scaling, base' = base·factor^(R/(R-2)) (bloc97 2023, "NTK-aware scaled
    RoPE"): the lowest frequency is interpolated by exactly `factor`, the highest not at all.
    HF has no static form; "dynamic" is this with a factor grown from the sequence length."""
    if dim <= 2:
        raise ValueError(f"rope scaling 'ntk' needs rotary dim > 2 (R/(R-2)), got {dim}")
    factor = _factor(params, "ntk")
    return _plain(dim, base * factor ** (dim / (dim - 2))), 1.0


def dynamic(dim, base, params, seq_len):
    """Dynamic NTK (emozilla 2023, after bloc97): NTK-aware scaling whose factor grows with the
    sequence, base' = base·(factor·s/L₀ - (factor - 1))^(R/(R-2)) with s = max(seq_len, L₀),
    L₀ = original_max_position_embeddings. At s <= L₀ it is plain RoPE."""
    if dim <= 2:
        raise ValueError(f"rope scaling 'dynamic' needs rotary dim > 2 (R/(R-2)), got {dim}")
    factor = _factor(params, "dynamic")
    length = _original_length(params, "dynamic")
    s = length if seq_len is None else max(seq_len, length)
    return _plain(dim, base * (factor * s / length - (factor - 1)) ** (dim / (dim - 2))), 1.0


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    # YaRN eq. (22): sqrt(1/t) = 0.1·ln(s) + 1, scaled by mscale as in DeepSeek-V2.
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


def yarn(dim, base, params, seq_len):
    """YaRN (Peng et al. 2023, "YaRN: efficient context window extension", section 3.2).

    "NTK-by-parts" (eq. 18-19): pairs that turn more than beta_fast times over the pre-training
    length L₀ keep θ_i, those turning fewer than beta_slow times get θ_i/factor, and a linear
    ramp over the pair index blends between them. The pair where r rotations fit in L₀ is
    d(r) = R·ln(L₀/(2πr)) / (2 ln base); with `truncate` (default True) the ends are floored
    and ceiled to integers. Attention factor (eq. 22): 0.1·ln(factor) + 1, or
    mscale(factor, mscale)/mscale(factor, mscale_all_dim) when both are given, unless
    `attention_factor` is given.
    """
    factor = _factor(params, "yarn")
    length = _original_length(params, "yarn")
    attention = params.get("attention_factor")
    if attention is None:
        mscale, mscale_all = params.get("mscale"), params.get("mscale_all_dim")
        if mscale and mscale_all:
            attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            attention = _yarn_mscale(factor)
    elif attention <= 0:
        raise ValueError(f"rope scaling 'yarn': 'attention_factor' must be > 0, got {attention!r}")
    beta_fast = params.get("beta_fast") or 32
    beta_slow = params.get("beta_slow") or 1
    if beta_fast <= beta_slow:
        raise ValueError(
            f"rope scaling 'yarn': 'beta_fast' must be greater than 'beta_slow', got "
            f"beta_fast={beta_fast}, beta_slow={beta_slow}"
        )

    def pair_of(rotations):  # d(r): the (fractional) pair index where r turns fit in L₀
        return dim * math.log(length / (rotations * 2 * math.pi)) / (2 * math.log(base))

    low, high = pair_of(beta_fast), pair_of(beta_slow)
    if params.get("truncate", True):
        low, high = math.floor(low), math.ceil(high)
    low, high = max(low, 0), min(high, dim - 1)
    if low == high:
        high += 0.001  # HF's guard against a zero-width ramp
    ramp = np.clip((np.arange(dim // 2, dtype=np.float64) - low) / (high - low), 0, 1)
    theta = _plain(dim, base)
    # ramp 0: extrapolate (keep θ_i); ramp 1: interpolate (θ_i / factor).
    return theta * (1 - ramp) + theta / factor * ramp, float(attention)


def longrope(dim, base, params, seq_len):
    """LongRoPE (Ding et al. 2024, "LongRoPE: extending LLM context window beyond 2 million
    tokens"): searched per-pair rescale factors, θ_i / λ_i, with λ = long_factor when seq_len
    exceeds the pre-training length L₀ and short_factor otherwise. Attention factor
    sqrt(1 + ln(factor)/ln(L₀)) (1 for factor <= 1) unless `attention_factor` is given.
    """
    length = _original_length(params, "longrope")
    use_long = seq_len is not None and seq_len > length
    name = "long_factor" if use_long else "short_factor"
    for key in ("short_factor", "long_factor"):
        values = _require(params, key, "longrope", f"a list of {dim // 2} numbers")
        if len(values) != dim // 2:
            raise ValueError(
                f"rope scaling 'longrope': {key!r} has {len(values)} numbers; expected "
                f"{dim // 2} (rotary dim {dim} / 2)"
            )
    attention = params.get("attention_factor")
    if attention is None:
        factor = float(
            _require(params, "factor", "longrope", "max length / L₀, or attention_factor")
        )
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(length))
    lam = np.asarray(params[name], np.float64)
    return _plain(dim, base) / lam, float(attention)


def llama3(dim, base, params, seq_len):
    """Llama 3.1's scaling (Meta 2024, "The Llama 3 herd of models"; HF's "llama3").

    By wavelength λ_i = 2π/θ_i against the pre-training length L₀: λ_i < L₀/high_freq_factor
    keeps θ_i, λ_i > L₀/low_freq_factor gets θ_i/factor, and between them a blend with weight
    s = (L₀/λ_i - low_freq_factor)/(high_freq_factor - low_freq_factor) on θ_i.
    """
    factor = _factor(params, "llama3")
    length = _original_length(params, "llama3")
    low = float(_require(params, "low_freq_factor", "llama3", "a float, 1 in Llama 3.1"))
    high = float(_require(params, "high_freq_factor", "llama3", "a float, 4 in Llama 3.1"))
    if high <= low:
        raise ValueError(
            f"rope scaling 'llama3': 'high_freq_factor' must be greater than 'low_freq_factor', "
            f"got high_freq_factor={high}, low_freq_factor={low}"
        )
    theta = _plain(dim, base)
    wavelength = 2 * math.pi / theta
    smooth = (length / wavelength - low) / (high - low)
    blended = (1 - smooth) * theta / factor + smooth * theta
    out = np.where(wavelength > length / low, theta / factor, theta)
    medium = (wavelength >= length / high) & (wavelength <= length / low)
    return np.where(medium, blended, out), 1.0


# The name -> function table; HF's `ROPE_INIT_FUNCTIONS` keys plus "ntk".
SCALINGS: dict[str, Callable] = {
    "default": default,
    "linear": linear,
    "proportional": proportional,
    "ntk": ntk,
    "dynamic": dynamic,
    "yarn": yarn,
    "longrope": longrope,
    "llama3": llama3,
}


def kind_of(scaling: Mapping | None) -> str:
    """The kind a scaling dictionary names: "rope_type", v4's "type", or "default"."""
    params = scaling or {}
    return params.get("rope_type", params.get("type", "default"))


def is_plain(scaling: Mapping | None) -> bool:
    """Whether a dictionary is plain RoPE, in either spelling transformers uses: "default", or
    "proportional" with factor 1 over the whole head (releases that dropped "default")."""
    params = scaling or {}
    kind = kind_of(params)
    return kind == "default" or (
        kind == "proportional"
        and float(params.get("factor", 1.0)) == 1.0
        and float(params.get("partial_rotary_factor", 1.0)) == 1.0
    )


def scaled_frequencies(
    rotary_dim: int,
    *,
    base: float,
    scaling: Mapping | None = None,
    seq_len: int | None = None,
    dtype=np.float32,
) -> tuple[np.ndarray, float]:
    """Scaled RoPE frequencies θ'_i and the attention factor for HF's scaling dictionary.

    Args:
      rotary_dim: R (even): the rotated features. HF's partial_rotary_factor is applied by the
        caller (R = int(H·factor)), except for "proportional", whose R is the whole head.
      base: θ_i = base^(-2i/R) before scaling. A "rope_theta" in `scaling` (v5) must agree.
      scaling: None, or a dictionary with "rope_type" (or v4's "type") naming a kind of
        `SCALINGS` and that kind's keys, as HF writes them.
      seq_len: the sequence length, for "dynamic" and "longrope"; None as at HF's init.
      dtype: float32 as HF; float64 keeps what float32 rounding would lose at large positions
        (apply_rope takes these).

    Returns:
      (inv_freq, attention_factor): numpy [R/2] of `dtype` and a Python float.
    """
    rope_layouts.check_dim(rotary_dim, "rotary dim")
    params = dict(scaling or {})
    kind = kind_of(params)
    if kind not in SCALINGS:
        raise ValueError(f"rope scaling 'rope_type' {kind!r} is not one of {sorted(SCALINGS)}")
    theta = params.get("rope_theta")
    if theta is not None and float(theta) != float(base):
        raise ValueError(f"rope scaling 'rope_theta' {theta} disagrees with base {base}")
    inv_freq, attention = SCALINGS[kind](rotary_dim, float(base), params, seq_len)
    return np.asarray(inv_freq, dtype), float(attention)


class LayerRope(NamedTuple):
    """How one layer rotates: `apply_rope`'s base, rotary_dim and scaling."""

    base: float
    rotary_dim: int | None  # R; None for every feature (partial_rotary_factor 1)
    scaling: dict | None  # the layer's dictionary (kind and its keys), None for plain RoPE


def is_nested(rope_parameters: Mapping | None, layer_types: Sequence[str] | None) -> bool:
    """Whether `rope_parameters` is nested by layer type: a key of it is one of `layer_types`
    (HF's `nested_rope_parameter_keys`)."""
    return any(key in (layer_types or ()) for key in (rope_parameters or {}))


def layer_parameters(
    rope_parameters: Mapping | None, layer_types: Sequence[str] | None, num_layers: int
) -> list[dict | None]:
    """Each layer's flat dictionary, from v5's `rope_parameters`, flat or nested by layer type.

    Nested (as HF reads it) when a key of `rope_parameters` is one of `layer_types`; then
    layer l takes the entry of layer_types[l], which may be None (no positions). Flat: every
    layer takes the whole dictionary ({} for None).
    """
    params = dict(rope_parameters or {})
    types = list(layer_types or [])
    if layer_types is not None and len(types) != num_layers:
        raise ValueError(f"layer_types has {len(types)} entries for {num_layers} layers: {types}")
    if not is_nested(params, types):
        return [params] * num_layers
    missing = sorted(set(types) - set(params))
    if missing:
        raise ValueError(
            f"layer types {missing} are missing from rope_parameters, which has "
            f"{sorted(params)}; give each a dictionary, or None for a layer without positions"
        )
    for name in types:
        if params[name] is not None and not isinstance(params[name], Mapping):
            raise ValueError(f"rope_parameters[{name!r}] = {params[name]!r} is not a dictionary")
    return [None if params[name] is None else dict(params[name]) for name in types]


def layer_rope(head_dim: int, params: Mapping | None, *, base: float) -> LayerRope | None:
    """One layer's RoPE from its flat dictionary (`layer_parameters`); None: no positions.

    The layer's "rope_theta" overrides `base` (the model's). HF rotates the first
    int(H·partial_rotary_factor) features, except "proportional", which rotates the whole head
    with zero frequencies past the fraction. Fraction 0 rotates nothing, like a NoPE layer.
    """
    if params is None:
        return None
    params = dict(params)
    base = float(params.get("rope_theta", base))
    partial = float(params.get("partial_rotary_factor", 1.0))
    if not 0.0 <= partial <= 1.0:
        raise ValueError(f"partial_rotary_factor {partial} is not in [0, 1]")
    rotary_dim = head_dim if kind_of(params) == "proportional" else int(head_dim * partial)
    if rotary_dim == 0:
        return None
    if rotary_dim % 2:
        raise ValueError(
            f"partial_rotary_factor {partial} of head dim {head_dim} rotates {rotary_dim} "
            "features, an odd number; RoPE rotates pairs of features"
        )
    scaled_frequencies(rotary_dim, base=base, scaling=params)  # fails now, with HF's key names
    return LayerRope(base, None if rotary_dim == head_dim else rotary_dim, params or None)
