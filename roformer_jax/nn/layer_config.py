"""HF v5 configs' per-layer attention, read into the model config's sections.

Llama 4 (text), gpt-oss, Gemma 3 (text), SmolLM3 and Qwen3 give each layer a type
(`layer_types`: "full_attention", "sliding_attention", "chunked_attention") and, by family,
a sliding window, chunks, sinks, QK-norm, layers without RoPE (`no_rope_layers`, 0 = none)
and Llama 4's query temperature in those. `hf_sections` turns such a dict into
{"rope": RopeSection's fields, "softmax": SoftmaxSection's fields}: the layer types once, in
RoPE's section (softmax's reads them there), a layer without RoPE given its own type
("<type>_nope") whose rotation is None. A key this reader does not know is a ValueError
naming it: it may change attention, so it is never ignored.
"""

from collections.abc import Mapping

from roformer_jax.nn import rope_scaling

FAMILIES = ("llama4_text", "gpt_oss", "gemma3_text", "smollm3", "qwen3")

# What the reader reads (the window pattern, max_window_layers and the interval of layers
# without RoPE through layer_types and no_rope_layers, which transformers derives from them).
READ = frozenset(
    """
    model_type layer_types num_hidden_layers sliding_window use_sliding_window
    max_window_layers _sliding_window_pattern attention_chunk_size no_rope_layers
    no_rope_layer_interval use_qk_norm attn_temperature_tuning attn_scale floor_scale
    rope_parameters rms_norm_eps head_dim hidden_size num_attention_heads
    query_pre_attn_scalar attn_logit_softcapping use_bidirectional_attention
    """.split()
)
# What does not change which keys a layer sees nor how it scores them: the rest of the
# architecture (sizes, MLP, experts, biases), training and generation; other readers' keys.
OUTSIDE = frozenset(
    """
    _name_or_path architectures chunk_size_feed_forward dtype id2label
    is_encoder_decoder label2id output_attentions output_hidden_states problem_type
    return_dict transformers_version attention_bias attention_dropout bos_token_id
    eos_token_id pad_token_id hidden_act hidden_activation initializer_range
    intermediate_size intermediate_size_mlp interleave_moe_layer_step
    max_position_embeddings moe_layers num_experts_per_tok num_key_value_heads
    num_local_experts output_router_logits router_aux_loss_coef router_jitter_noise
    tie_word_embeddings use_cache vocab_size swiglu_alpha swiglu_limit
    final_logit_softcapping mlp_bias
    """.split()
)


def hf_sections(hf: Mapping) -> dict:
    """{"rope": {...}, "softmax": {...}}: the sections (`ModelConfig.sections`) of the
    per-layer attention an HF v5 config dict (`config.to_dict()`) of a family in FAMILIES
    gives. Raises ValueError naming a key it does not know, a family it does not read, or a
    value the model cannot compute (Gemma 3's query_pre_attn_scalar != head_dim, a logit
    soft cap, bidirectional attention)."""
    family = hf.get("model_type")
    if family not in FAMILIES:
        raise ValueError(f"model_type={family!r}: the per-layer reader knows {FAMILIES}")
    unknown = sorted(set(hf) - READ - OUTSIDE)
    if unknown:
        raise ValueError(f"{family} config keys {unknown} are unknown to the per-layer reader")
    _check_computable(hf)
    types = _layer_types(hf)
    by_type = {t: _settings(hf, t) for t in dict.fromkeys(types)}
    scaling = {t: _rope(hf, t) for t in dict.fromkeys(types)}
    softmax = {"by_type": {t: s for t, s in by_type.items() if s}}
    if "rms_norm_eps" in hf:
        softmax["qk_norm_eps"] = float(hf["rms_norm_eps"])
    return {"rope": {"scaling": scaling, "layer_types": types}, "softmax": softmax}


def _check_computable(hf: Mapping) -> None:
    head_dim = hf.get("head_dim") or hf["hidden_size"] // hf["num_attention_heads"]
    if hf.get("query_pre_attn_scalar", head_dim) != head_dim:
        raise ValueError(
            f"query_pre_attn_scalar={hf['query_pre_attn_scalar']}: softmax scales its scores "
            f"by head_dim^-1/2 (head_dim={head_dim})"
        )
    for key in ("attn_logit_softcapping", "use_bidirectional_attention"):
        if hf.get(key):
            raise ValueError(f"{key}={hf[key]!r}: the per-layer reader has no such attention")


def _uses_rope(hf: Mapping, layer: int) -> bool:
    """Llama 4's and SmolLM3's `no_rope_layers`: 1 where a layer rotates, 0 where not."""
    flags = hf.get("no_rope_layers")
    return True if flags is None else bool(flags[layer])


def _layer_types(hf: Mapping) -> tuple[str, ...]:
    types = hf.get("layer_types")
    layers = hf["num_hidden_layers"]
    if types is None or len(types) != layers:
        raise ValueError(f"layer_types={types!r}: expected one type per layer ({layers})")
    return tuple(t if _uses_rope(hf, i) else f"{t}_nope" for i, t in enumerate(types))


def _settings(hf: Mapping, our_type: str) -> dict:
    """What the layers of `our_type` set for themselves (SoftmaxSection.by_type's entry)."""
    family, nope = hf["model_type"], our_type.endswith("_nope")
    hf_type = our_type.removesuffix("_nope")
    settings = {}
    if hf_type == "sliding_attention":
        settings["window"] = int(hf["sliding_window"])
    elif hf_type == "chunked_attention":
        settings["chunk"] = int(hf["attention_chunk_size"])
    elif hf_type != "full_attention":
        raise ValueError(f"layer_types has {hf_type!r}; the reader knows full, sliding, chunked")
    if family == "gpt_oss":
        settings["sinks"] = True
    # Llama 4 normalizes q and k in its RoPE layers only, without a scale (ours at 1).
    if family in ("qwen3", "gemma3_text") or (family == "llama4_text" and hf["use_qk_norm"]):
        settings["qk_norm"] = family != "llama4_text" or not nope
    if family == "llama4_text" and nope and hf.get("attn_temperature_tuning"):
        settings["attn_scale"] = float(hf["attn_scale"])
        settings["floor_scale"] = float(hf["floor_scale"])
    return {k: v for k, v in settings.items() if v}


def _rope(hf: Mapping, our_type: str) -> dict | None:
    """The RoPE parameters of `our_type`'s layers, None for a layer without RoPE."""
    if our_type.endswith("_nope"):
        return None
    params = hf.get("rope_parameters")
    types = hf["layer_types"]
    if rope_scaling.is_nested(params, types):
        params = params[our_type]
    return None if params is None else dict(params)
