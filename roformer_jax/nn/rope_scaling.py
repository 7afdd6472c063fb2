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

Shapes: R rotary dim. Each kind returns (inv_freq [R/2] float64, attention_factor float), and
`scaled_frequencies` casts the frequencies to the dtype asked. The arithmetic is float64 numpy:
the frequencies are constants of the model, not traced values.
"""

import math
import numbers
from collections.abc import Callable, Mapping, Sequence
from typing import NamedTuple

import numpy as np

from roformer_jax.nn import rope_layouts


def _exponents(dim: int, denominator: int | None = None) -> np.ndarray:
    """2i/R for i < R/2 (the exponent of base^(-2i/R)), float64 [R/2]."""
    return np.arange(0, dim, 2, dtype=np.float64) / (denominator or dim)


def plain_frequencies(dim: int, base: float) -> np.ndarray:
    """θ_i = base^(-2i/R), eq. (15) of RoFormer: float64 [R/2]. Every RoPE reads its angles
    from here, scaled or not."""
    return base ** -_exponents(dim)


_REQUIRED = object()  # `_number`'s default for a key without one


def _number(
    params: Mapping,
    key: str,
    kind: str,
    expected: str,
    valid: Callable = lambda value: True,
    *,
    default=_REQUIRED,
    integer: bool = False,
):
    """params[key], checked: a real number (an integer with `integer`; numpy scalars too, not
    bool) for which valid(value) holds, as a Python float or int. Absent or None: `default`
    (a given 0 stays 0), or an error naming the key when there is none."""
    value = params.get(key)
    if value is None:
        if default is _REQUIRED:
            raise ValueError(
                f"rope scaling {kind!r} needs key {key!r} ({expected}); got {dict(params)}"
            )
        return default
    number = numbers.Integral if integer else numbers.Real
    if isinstance(value, bool) or not isinstance(value, number) or not valid(value):
        raise ValueError(f"rope scaling {kind!r}: {key!r} must be {expected}, got {value!r}")
    return int(value) if integer else float(value)


def _factor(params: Mapping, kind: str) -> float:
    return _number(params, "factor", kind, "a float >= 1", lambda factor: factor >= 1)


def _original_length(params: Mapping, kind: str) -> int:
    return _number(
        params,
        "original_max_position_embeddings",
        kind,
        "a positive integer, the pre-training length",
        lambda length: length > 0,
        integer=True,
    )


def _partial(params: Mapping, kind: str) -> float:
    return _number(
        params,
        "partial_rotary_factor",
        kind,
        "a fraction in [0, 1]",
        lambda partial: 0 <= partial <= 1,
        default=1.0,
    )


def check_base(base) -> None:
    """θ_i = base^(-2i/R) needs a positive finite base: 0 or less gives inf or NaN."""
    if isinstance(base, bool) or not isinstance(base, numbers.Real) or not 0 < base < math.inf:
        raise ValueError(f"base={base!r} must be positive and finite: θ_i = base^(-2i/R)")


# --- The kinds: (dim, base, params, seq_len) -> (inv_freq float64 [R/2], attention_factor) ----

# Keys every kind takes: its name, HF v5's base and rotated fraction, the pre-training length
# (HF's config standardization writes it into any kind), and M-RoPE's sections (Qwen2-VL's and
# Qwen3-VL's, read by positions.nd_frequencies).
COMMON_KEYS = frozenset(
    {
        "rope_type",
        "type",
        "rope_theta",
        "partial_rotary_factor",
        "original_max_position_embeddings",
        "mrope_section",
        "mrope_interleaved",
    }
)


def takes(*keys: str) -> Callable:
    """Declares the keys a kind reads beside COMMON_KEYS (HF's required and optional keys for
    its rope_type); any other key is refused. A kind without the declaration takes only those."""

    def declare(kind: Callable) -> Callable:
        kind.keys = frozenset(keys)
        return kind

    return declare


def default(dim, base, params, seq_len):
    """Plain RoPE, θ_i = base^(-2i/R) (Su et al. 2021, eq. 15)."""
    return plain_frequencies(dim, base), 1.0


@takes("factor")
def linear(dim, base, params, seq_len):
    """Position interpolation, θ_i / factor (Chen et al. 2023, "Extending context window of
    large language models via positional interpolation", eq. 2)."""
    return plain_frequencies(dim, base) / _factor(params, "linear"), 1.0


@takes("factor")
def proportional(dim, base, params, seq_len):
    """HF v5's "proportional": the first partial_rotary_factor·R/2 pairs keep the exponents of
    a full head, base^(-2i/R), the rest get frequency 0 (not rotated); all divided by factor.

    Here R is the whole head (HF's head_dim): this kind returns R/2 frequencies whatever the
    partial factor, unlike the others, whose R is already the rotated part.
    """
    factor = _number(params, "factor", "proportional", "a float > 0", lambda f: f > 0, default=1.0)
    pairs = int(_partial(params, "proportional") * dim // 2)
    inv_freq = np.zeros(dim // 2)
    inv_freq[:pairs] = base ** -_exponents(2 * pairs, denominator=dim)
    return inv_freq / factor, 1.0


@takes("factor")
def ntk(dim, base, params, seq_len):
    """Static NTK-aware scaling, base' = base·factor^(R/(R-2)) (bloc97 2023, "NTK-aware scaled
    RoPE"): the lowest frequency is interpolated by exactly `factor`, the highest not at all.
    HF has no static form; "dynamic" is this with a factor grown from the sequence length."""
    if dim <= 2:
        raise ValueError(f"rope scaling 'ntk' needs rotary dim > 2 (R/(R-2)), got {dim}")
    factor = _factor(params, "ntk")
    return plain_frequencies(dim, base * factor ** (dim / (dim - 2))), 1.0


@takes("factor")
def dynamic(dim, base, params, seq_len):
    """Dynamic NTK (emozilla 2023, after bloc97): NTK-aware scaling whose factor grows with the
    sequence, base' = base·(factor·s/L₀ - (factor - 1))^(R/(R-2)) with s = max(seq_len, L₀),
    L₀ = original_max_position_embeddings. At s <= L₀ it is plain RoPE."""
    if dim <= 2:
        raise ValueError(f"rope scaling 'dynamic' needs rotary dim > 2 (R/(R-2)), got {dim}")
    factor = _factor(params, "dynamic")
    length = _original_length(params, "dynamic")
    s = length if seq_len is None else max(seq_len, length)
    return plain_frequencies(
        dim, base * (factor * s / length - (factor - 1)) ** (dim / (dim - 2))
    ), 1.0


def _attention_factor(params: Mapping, kind: str) -> float | None:
    return _number(params, "attention_factor", kind, "> 0", lambda a: a > 0, default=None)


def _yarn_mscale(factor: float, mscale: float = 1.0) -> float:
    # YaRN eq. (22): sqrt(1/t) = 0.1·ln(s) + 1, scaled by mscale as in DeepSeek-V2.
    return 1.0 if factor <= 1 else 0.1 * mscale * math.log(factor) + 1.0


@takes(
    "factor", "attention_factor", "beta_fast", "beta_slow", "mscale", "mscale_all_dim", "truncate"
)
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
    attention = _attention_factor(params, "yarn")
    if attention is None:
        mscale, mscale_all = (
            _number(params, key, "yarn", "a float", default=None)
            for key in ("mscale", "mscale_all_dim")
        )
        if mscale and mscale_all:  # as HF: a zero mscale is no mscale
            attention = _yarn_mscale(factor, mscale) / _yarn_mscale(factor, mscale_all)
        else:
            attention = _yarn_mscale(factor)
    # Turns over L₀ (d(r) takes the log of 1/r); an explicit 0 is refused, not read as absent.
    beta_fast, beta_slow = (
        _number(params, key, "yarn", "a number of turns > 0", lambda r: r > 0, default=default)
        for key, default in (("beta_fast", 32), ("beta_slow", 1))
    )
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
    theta = plain_frequencies(dim, base)
    # ramp 0: extrapolate (keep θ_i); ramp 1: interpolate (θ_i / factor).
    return theta * (1 - ramp) + theta / factor * ramp, float(attention)


@takes("short_factor", "long_factor", "factor", "attention_factor")
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
        values = params.get(key)
        if values is None:
            raise ValueError(
                f"rope scaling 'longrope' needs key {key!r} (a list of {dim // 2} numbers); "
                f"got {dict(params)}"
            )
        if len(values) != dim // 2:
            raise ValueError(
                f"rope scaling 'longrope': {key!r} has {len(values)} numbers; expected "
                f"{dim // 2} (rotary dim {dim} / 2)"
            )
    attention = _attention_factor(params, "longrope")
    if attention is None:
        factor = _number(
            params,
            "factor",
            "longrope",
            "max length / L₀ (> 0), or attention_factor",
            lambda f: f > 0,
        )
        attention = 1.0 if factor <= 1 else math.sqrt(1 + math.log(factor) / math.log(length))
    lam = np.asarray(params[name], np.float64)
    return plain_frequencies(dim, base) / lam, float(attention)


@takes("factor", "low_freq_factor", "high_freq_factor")
def llama3(dim, base, params, seq_len):
    """Llama 3.1's scaling (Meta 2024, "The Llama 3 herd of models"; HF's "llama3").

    By wavelength λ_i = 2π/θ_i against the pre-training length L₀: λ_i < L₀/high_freq_factor
    keeps θ_i, λ_i > L₀/low_freq_factor gets θ_i/factor, and between them a blend with weight
    s = (L₀/λ_i - low_freq_factor)/(high_freq_factor - low_freq_factor) on θ_i.
    """
    factor = _factor(params, "llama3")
    length = _original_length(params, "llama3")
    # L₀/low_freq_factor is a wavelength: the factor must be > 0.
    low = _number(
        params, "low_freq_factor", "llama3", "a float > 0, 1 in Llama 3.1", lambda f: f > 0
    )
    high = _number(params, "high_freq_factor", "llama3", "a float, 4 in Llama 3.1")
    if high <= low:
        raise ValueError(
            f"rope scaling 'llama3': 'high_freq_factor' must be greater than 'low_freq_factor', "
            f"got high_freq_factor={high}, low_freq_factor={low}"
        )
    theta = plain_frequencies(dim, base)
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


def _as_dict(scaling: Mapping | None) -> dict:
    """A scaling dictionary as a dict; None is {} (plain RoPE)."""
    if scaling is None:
        return {}
    if not isinstance(scaling, Mapping):
        raise ValueError(
            f"rope scaling {scaling!r} is not a dictionary; expected None or HF's rope scaling "
            "dictionary, e.g. {'rope_type': 'linear', 'factor': 4.0}"
        )
    return dict(scaling)


def kind_of(scaling: Mapping | None) -> str:
    """The kind a scaling dictionary names: "rope_type", v4's "type", or "default"."""
    params = _as_dict(scaling)
    return params.get("rope_type", params.get("type", "default"))


def is_plain(scaling: Mapping | None) -> bool:
    """Whether a dictionary is plain RoPE, in either spelling transformers uses: "default", or
    "proportional" with factor 1 over the whole head (releases that dropped "default")."""
    params = _as_dict(scaling)
    kind = kind_of(params)
    return kind == "default" or (
        kind == "proportional"
        and float(params.get("factor", 1.0)) == 1.0
        and float(params.get("partial_rotary_factor", 1.0)) == 1.0
    )


def _checked_kind(params: dict) -> str:
    """The kind `params` names, one of SCALINGS, with no key that the kind does not take (HF
    warns of those and ignores them; a misspelt key would leave its default in force)."""
    kind = kind_of(params)
    if not isinstance(kind, str) or kind not in SCALINGS:
        raise ValueError(f"rope scaling 'rope_type' {kind!r} is not one of {sorted(SCALINGS)}")
    own = getattr(SCALINGS[kind], "keys", frozenset())
    unknown = sorted(set(params) - COMMON_KEYS - own, key=str)
    if unknown:
        unnamed = "rope_type" not in params and "type" not in params
        raise ValueError(
            f"rope scaling {kind!r}"
            + (" (no 'rope_type' or 'type' given, so 'default')" if unnamed else "")
            + f" takes no key {unknown}: its keys are {sorted(own)}, and every kind takes "
            f"{sorted(COMMON_KEYS)}"
        )
    return kind


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
      base: θ_i = base^(-2i/R) before scaling, positive and finite. A "rope_theta" in
        `scaling` (v5) must agree.
      scaling: None, or a dictionary with "rope_type" (or v4's "type"; neither: "default")
        naming a kind of `SCALINGS`, that kind's keys and COMMON_KEYS, as HF writes them.
        Any other key is an error.
      seq_len: the sequence length, for "dynamic" and "longrope"; None as at HF's init.
      dtype: float32 as HF; float64 keeps what float32 rounding would lose at large positions
        (apply_rope takes these).

    Returns:
      (inv_freq, attention_factor): numpy [R/2] of `dtype` and a Python float.
    """
    rope_layouts.check_dim(rotary_dim, "rotary dim")
    check_base(base)
    params = _as_dict(scaling)
    kind = _checked_kind(params)
    theta = _number(params, "rope_theta", kind, "a float equal to base", default=None)
    if theta is not None and theta != float(base):
        raise ValueError(f"rope scaling 'rope_theta' {theta} disagrees with base {base}")
    inv_freq, attention = SCALINGS[kind](rotary_dim, float(base), params, seq_len)
    return np.asarray(inv_freq, dtype), float(attention)


def rotated_features(head_dim: int, params: Mapping | None) -> int:
    """R for a dictionary's partial_rotary_factor (in [0, 1]), as HF counts it: int(H·factor),
    or all H for "proportional", which gives the pairs past the fraction frequency 0 instead."""
    params = _as_dict(params)
    kind = kind_of(params)
    partial = _partial(params, kind)
    return head_dim if kind == "proportional" else int(head_dim * partial)


def check_rotary_dim(head_dim: int, rotary_dim: int, scaling: Mapping | None) -> None:
    """Checks `apply_rope`'s R of H features against the keys of `scaling` that speak of it.

    partial_rotary_factor: the caller applies it (`layer_rope`); apply_rope reads R alone, so
    R must be the one HF rotates (`rotated_features`). mrope_section (M-RoPE): its blocks
    must add up to the R/2 pairs; positions of one axis are every axis alike, as HF reads text
    tokens, which is RoPE itself (several axes: rope_nd.apply_rope_nd).
    """
    params = _as_dict(scaling)
    partial = params.get("partial_rotary_factor")
    want = rotary_dim if partial is None else rotated_features(head_dim, params)
    if rotary_dim != want:
        fix = f"pass rotary_dim={want}" if want else "rotate nothing (skip apply_rope)"
        raise ValueError(
            f"rope scaling {kind_of(params)!r} with partial_rotary_factor {partial} rotates "
            f"{want} features of head dim {head_dim}, but rotary_dim is {rotary_dim}: {fix}"
        )
    sections = params.get("mrope_section")
    if sections is not None and sum(sections) != rotary_dim // 2:
        raise ValueError(
            f"mrope_section {list(sections)} adds up to {sum(sections)} pairs; rotary dim "
            f"{rotary_dim} rotates {rotary_dim // 2}"
        )


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
    rotary_dim = rotated_features(head_dim, params)
    if rotary_dim == 0:
        return None
    if rotary_dim % 2:
        raise ValueError(
            f"partial_rotary_factor {params['partial_rotary_factor']} of head dim {head_dim} "
            f"rotates {rotary_dim} features, an odd number; RoPE rotates pairs of features"
        )
    scaled_frequencies(rotary_dim, base=base, scaling=params)  # fails now, with HF's key names
    return LayerRope(base, None if rotary_dim == head_dim else rotary_dim, params or None)
