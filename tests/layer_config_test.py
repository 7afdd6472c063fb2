"""Tests for roformer_jax.nn.layer_config: HF v5 configs of Llama 4, gpt-oss, Gemma 3, SmolLM3
and Qwen3 read into per-layer sections, checked against transformers' own reading of the same
tiny random config (each layer's type, mask, RoPE parameters, sinks, QK-norm, temperature)
and against its attention forward on tiny random weights, one layer of each kind per family;
the decode steps equal the full form. Needs torch and transformers 5.x; skipped without."""

import unittest

import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.nn import layer_config, masks, rope_layouts, rope_scaling
from roformer_jax.nn.attention_kinds import AttentionContext
from roformer_jax.nn.model import SelfAttention

try:
    import torch
    import transformers
    from transformers import masking_utils
except ImportError:  # pragma: no cover
    torch = transformers = None

L, D, N, K, H, LAYERS = 9, 32, 4, 2, 8, 4
SIZES = dict(
    hidden_size=D,
    num_attention_heads=N,
    num_key_value_heads=K,
    num_hidden_layers=LAYERS,
    intermediate_size=16,
    vocab_size=64,
)
# family -> (config class, its modeling module, config fields beyond SIZES)
FAMILIES = {
    "qwen3": (
        "Qwen3Config",
        "qwen3",
        dict(head_dim=H, use_sliding_window=True, sliding_window=3, max_window_layers=2),
    ),
    "gpt_oss": ("GptOssConfig", "gpt_oss", dict(head_dim=H, sliding_window=3, num_local_experts=2)),
    "gemma3_text": (
        "Gemma3TextConfig",
        "gemma3",
        dict(
            head_dim=H,
            sliding_window=3,
            query_pre_attn_scalar=H,
            layer_types=["sliding_attention", "full_attention"] * 2,
        ),
    ),
    "smollm3": ("SmolLM3Config", "smollm3", dict(no_rope_layers=[1, 0, 1, 0])),
    "llama4_text": (
        "Llama4TextConfig",
        "llama4",
        dict(
            head_dim=H,
            no_rope_layers=[1, 1, 0, 1],
            attention_chunk_size=4,
            attn_temperature_tuning=True,
            floor_scale=2,
            attn_scale=0.5,
            use_qk_norm=True,
        ),
    ),
}


def _hf_config(family):
    name, _, fields = FAMILIES[family]
    config = getattr(transformers, name)(**SIZES, **fields)
    config._attn_implementation = "eager"
    return config


def _ours(config):
    sections = layer_config.hf_sections(config.to_dict())
    return tiny.model_config(
        hidden_size=D,
        num_heads=N,
        num_kv_heads=K,
        num_layers=LAYERS,
        causal=True,
        sections=sections,
    )


def _hf_visible(config, layer):
    """bool [L, L]: transformers' mask function of the layer's type, index by index."""
    kind = config.layer_types[layer]
    if kind == "sliding_attention":
        rule = masking_utils.sliding_window_causal_mask_function(config.sliding_window)
    elif kind == "chunked_attention":
        rule = masking_utils.chunked_causal_mask_function(
            config.attention_chunk_size, torch.zeros(1, dtype=torch.long)
        )
    else:
        rule = masking_utils.causal_mask_function
    i, j = torch.arange(L)[:, None], torch.arange(L)[None, :]
    zero = torch.zeros((), dtype=torch.long)
    return np.broadcast_to(rule(zero, zero, i, j).numpy(), (L, L))


def _hf_attention(family, config, layer):
    module = getattr(transformers.models, FAMILIES[family][1])
    modeling = getattr(module, f"modeling_{FAMILIES[family][1]}")
    prefix = {
        "qwen3": "Qwen3",
        "gpt_oss": "GptOss",
        "gemma3_text": "Gemma3",
        "smollm3": "SmolLM3",
        "llama4_text": "Llama4Text",
    }[family]
    torch.manual_seed(layer)
    attention = getattr(modeling, f"{prefix}Attention")(config, layer).eval()
    with torch.no_grad():
        for p in attention.parameters():
            p.normal_(0.0, 0.3)
    rotary = getattr(modeling, f"{prefix}RotaryEmbedding")(config)
    return attention, rotary


@unittest.skipIf(transformers is None, "needs torch and transformers")
class ReadingTest(parameterized.TestCase):
    @parameterized.parameters(*FAMILIES)
    def test_each_layer_as_transformers_reads_it(self, family):
        config = _hf_config(family)
        ours = _ours(config)
        section = ours.attention_section
        params = rope_scaling.layer_parameters(
            ours.position_section.scaling, ours.position_section.layer_types, LAYERS
        )
        for layer in range(LAYERS):
            mine = section.for_layer(layer, ours)
            seen = masks.sees(
                jnp.arange(L), jnp.arange(L), causal=True, window=mine.window, chunk=mine.chunk
            )
            np.testing.assert_array_equal(seen, _hf_visible(config, layer), f"layer {layer}")
            attention, _ = _hf_attention(family, config, layer)
            uses_rope = getattr(attention, "use_rope", True)
            want = config.rope_parameters
            if rope_scaling.is_nested(want, config.layer_types):
                want = want[config.layer_types[layer]]
            self.assertEqual(params[layer], dict(want) if uses_rope else None)
            self.assertEqual(mine.sinks, hasattr(attention, "sinks"))
            norms = hasattr(attention, "q_norm") or hasattr(attention, "qk_norm")
            self.assertEqual(mine.qk_norm, norms)
            tuned = getattr(attention, "attn_temperature_tuning", False) and not uses_rope
            self.assertEqual(mine.attn_scale, config.attn_scale if tuned else 0.0)

    def test_an_unknown_key_is_named(self):
        d = {**_hf_config("qwen3").to_dict(), "attn_logit_sofcapping": 30.0}
        with self.assertRaisesRegex(ValueError, r"\['attn_logit_sofcapping'\] are unknown"):
            layer_config.hf_sections(d)

    @parameterized.parameters(
        ({"model_type": "llama"}, "model_type='llama'"),
        ({"query_pre_attn_scalar": 2 * H}, "query_pre_attn_scalar=16"),
        ({"attn_logit_softcapping": 30.0}, "attn_logit_softcapping=30.0"),
    )
    def test_what_the_model_cannot_compute_is_an_error(self, change, message):
        d = {**_hf_config("gemma3_text").to_dict(), **change}
        with self.assertRaisesRegex(ValueError, message):
            layer_config.hf_sections(d)


def _our_parameters(family, attention, layer):
    """transformers' weights as SelfAttention's parameters: kernels transposed, q and k
    features from RoPE's halves to interleaved pairs (ours), QK-norm scales alike."""
    layout = "interleaved" if family == "llama4_text" else "half"

    def pairs(w):
        return rope_layouts.convert_qk_layout(w, head_dim=H, src=layout, dst="interleaved")

    def dense(proj, convert):
        w = proj.weight.detach().numpy().T
        b = np.zeros(w.shape[1]) if proj.bias is None else proj.bias.detach().numpy()
        return {"kernel": convert(w), "bias": convert(b)}

    params = {
        "query": dense(attention.q_proj, pairs),
        "key": dense(attention.k_proj, pairs),
        "value": dense(attention.v_proj, lambda w: w),
        "output": dense(attention.o_proj, lambda w: w),
    }
    if hasattr(attention, "sinks"):
        params["sinks"] = attention.sinks.detach().numpy()
    for name in ("q_norm", "k_norm"):
        if hasattr(attention, name):
            scale = getattr(attention, name).weight.detach().numpy()
            scale = 1.0 + scale if family == "gemma3_text" else scale
            params[name] = pairs(scale)
    if hasattr(attention, "qk_norm"):  # Llama 4's, unscaled
        params["q_norm"] = params["k_norm"] = np.ones(H)
    return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), params)


@unittest.skipIf(transformers is None, "needs torch and transformers")
class ForwardTest(parameterized.TestCase):
    @parameterized.parameters(*FAMILIES)
    def test_each_layer_computes_what_transformers_computes(self, family):
        config = _hf_config(family)
        ours = _ours(config)
        x = np.random.default_rng(0).standard_normal((1, L, D)).astype(np.float32)
        positions = jnp.arange(L)
        for layer in range(LAYERS):
            attention, rotary = _hf_attention(family, config, layer)
            tx = torch.from_numpy(x)
            pos = torch.arange(L)[None]
            if family == "gemma3_text":
                embeddings = rotary(tx, pos, layer_type=config.layer_types[layer])
            else:
                embeddings = rotary(tx, pos)
            visible = torch.from_numpy(_hf_visible(config, layer).copy())
            mask = torch.where(visible, 0.0, torch.finfo(torch.float32).min)[None, None]
            with torch.no_grad():
                want = attention(tx, position_embeddings=embeddings, attention_mask=mask)[0]
            model = SelfAttention(ours, layer=layer)
            variables = {"params": _our_parameters(family, attention, layer)}
            context = AttentionContext(None, positions, deterministic=True)
            got = model.apply(variables, jnp.asarray(x), context)
            np.testing.assert_allclose(got, want.numpy(), atol=2e-5, err_msg=f"layer {layer}")
            # The decode step: a prompt of 5, then one token at a time.
            cache, outs = {}, []
            for part in (slice(0, 5), *(slice(i, i + 1) for i in range(5, L))):
                step = AttentionContext(None, positions[part], deterministic=True, decode_length=L)
                out, cache = model.apply(
                    {**variables, **cache}, jnp.asarray(x[:, part]), step, mutable=["cache"]
                )
                outs.append(out)
            np.testing.assert_allclose(jnp.concatenate(outs, 1), got, atol=1e-5)


if __name__ == "__main__":
    absltest.main()
