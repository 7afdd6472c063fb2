"""BERT and RoFormer as configurations of one Flax (Linen) encoder.

RoFormer (Su et al. 2021) is BERT with the absolute position table removed and RoPE applied to
q and k in every self-attention (eq. 34). Here both are one `RoFormer` module: the position
encoding (any entry of `roformer_jax.nn.positions.ENCODINGS`: "learned", "sinusoidal", "rope",
"alibi", "none") and the attention kind (any entry of
`roformer_jax.nn.attention_kinds.ATTENTION_KINDS`) are fields of a frozen `ModelConfig`.
With the defaults (post-LN, exact-erf GELU, softmax, rope) it computes what HuggingFace's
`RoFormerModel` / `RoFormerForMaskedLM` compute, parameter for parameter (see hf.py).

Glossary of shapes:
  B batch, L sequence length, N heads, K key/value heads (N / K query heads share each),
  H head dim, D hidden size (model dim), E embedding size (= D unless factorized),
  F intermediate (feed-forward) size, V vocab.

Parameter tree (names follow HF's where the structure allows; hf.py maps them):
  embeddings/{word_embeddings, token_type_embeddings, position_embeddings?, LayerNorm}
  embeddings_project?                      E -> D, only when E != D
  encoder/layer_{i}/{attention/{query, key, value, output}, attention_norm,
                     intermediate, output, output_norm}
  encoder/final_norm?                      pre-LN only
  mlm_head/{dense, LayerNorm, bias}        decoder tied to embeddings/word_embeddings
  pair_head/{kernel, bias}                 D -> 2 at [CLS], with_pair_head only
"""

import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from roformer_jax.nn import _threefry, gates, model_inputs
from roformer_jax.nn.attention_kinds import AttentionContext
from roformer_jax.nn.model_config import ACTIVATIONS, DTYPES, ModelConfig


def evaluation_update(steps_done):
    """The update whose random features a model is evaluated (or decodes) with after
    `steps_done` optimizer updates (int, may be traced): the last one made, so that the
    parameters meet the features they last trained with, as a Performer layer keeps the
    matrix it drew last. Period 0's for an untrained model; None (period 0) when unknown.
    Scoring with period 0's after a redraw would measure features the model has left."""
    return None if steps_done is None else jnp.maximum(jnp.asarray(steps_done) - 1, 0)


class EncoderOutput(NamedTuple):
    hidden_states: jax.Array  # [B, L, D], compute dtype
    logits: jax.Array | None  # [B, L or P, V] float32; None without the MLM head
    pair_logits: jax.Array | None = None  # [B, 2] float32; None without the pair head


# The modules of a pre-training model beside the encoder: what fine-tuning leaves behind.
PRETRAINING_HEADS = ("mlm_head", "pair_head")


def _dense(cfg: ModelConfig, features: int, name: str) -> nn.Dense:
    return nn.Dense(
        features,
        dtype=DTYPES[cfg.dtype],
        kernel_init=nn.initializers.normal(cfg.initializer_range),
        name=name,
    )


def _layer_norm(cfg: ModelConfig, name: str) -> nn.LayerNorm:
    # Two-pass variance, as torch's LayerNorm: E[x²] - E[x]² loses digits when |mean| >> std.
    return nn.LayerNorm(
        epsilon=cfg.layer_norm_eps, dtype=DTYPES[cfg.dtype], use_fast_variance=False, name=name
    )


class Dropout(nn.Module):
    """`nn.Dropout` whose mask of row b depends on the "dropout" key and example_ids[b] only
    (`_threefry.bernoulli_rows`): the same masks for an example on any number of devices.

    x [B, ...]; example_ids int [B], each row's index in the global batch (default arange(B)).
    """

    rate: float
    deterministic: bool | None = None

    @nn.compact
    def __call__(self, x, deterministic: bool | None = None, example_ids=None):
        if nn.merge_param("deterministic", self.deterministic, deterministic) or not self.rate:
            return x
        if example_ids is None:
            example_ids = jnp.arange(x.shape[0])
        keep = _threefry.bernoulli_rows(
            self.make_rng("dropout"), example_ids, 1.0 - self.rate, x.shape
        )
        return _threefry.dropped(x, keep, self.rate)


class Embeddings(nn.Module):
    """Word + token type embeddings of size E (× √E where the encoding asks), plus the
    position encoding's; LayerNorm, dropout."""

    config: ModelConfig

    @nn.compact
    def __call__(self, input_ids, token_type_ids, position_ids, deterministic, example_ids=None):
        cfg = self.config
        embed = functools.partial(
            nn.Embed,
            features=cfg.embed_dim,
            dtype=DTYPES[cfg.dtype],
            embedding_init=nn.initializers.normal(cfg.initializer_range),
        )
        x = embed(cfg.vocab_size, name="word_embeddings")(input_ids)  # [B, L, E]
        x = x + embed(cfg.type_vocab_size, name="token_type_embeddings")(token_type_ids)
        if cfg.encoding.scale_embeddings:  # × √E against a fixed sinusoid (positions.py)
            x = x * jnp.asarray(cfg.embed_dim**0.5, x.dtype)
        if cfg.encoding.embed is not None:  # absolute encodings; others act in attention
            x = x + cfg.encoding.embed(cfg.position_section, cfg, position_ids, DTYPES[cfg.dtype])
        x = _layer_norm(cfg, "LayerNorm")(x)
        return Dropout(cfg.hidden_dropout)(x, deterministic, example_ids)


class SelfAttention(nn.Module):
    """Projections q [B, L, N, H], k, v [B, L, K, H] → attention kind → output projection
    [B, L, D], for x [B, L, D] in a layer of `context` (`AttentionContext`).

    The kind's record makes its options (`AttentionKind.build_options`). With
    context.decode_length the layer keeps its kind's memory of earlier tokens (its
    `AttentionKind.step`) in the "cache" collection, and the L tokens of each call come after
    those of the calls before. A kind that reports its denominators (in training) returns
    them with its output; the smallest |denominator| is sown into "intermediates" as
    "min_denominator" (step.py logs it). The section's decay gate, if any, is made here from
    x (it may own parameters) and given to the kind as log_decay [B, L, N].
    """

    config: ModelConfig
    layer: int = 0  # its index in the encoder: a per-layer RoPE or decay gate reads it

    @nn.compact
    def __call__(self, x, context: AttentionContext):
        cfg = self.config
        b, length, d = x.shape
        q = _dense(cfg, d, "query")(x).reshape(b, length, cfg.num_heads, cfg.head_dim)
        k, v = (
            _dense(cfg, cfg.kv_heads * cfg.head_dim, name)(x).reshape(
                b, length, cfg.kv_heads, cfg.head_dim
            )  # [B, L, K, H]
            for name in ("key", "value")
        )
        kind, section = cfg.kind, cfg.attention_section
        q, k = kind.prepare(section, cfg, self.layer, q, k, context.position_ids, self.param)
        encoding, where = cfg.encoding, {}  # what the position encoding does in attention
        hooked = (cfg.position_section, cfg)  # what every hook of the encoding takes first
        positions = context.position_ids
        rotation = encoding.rotation and encoding.rotation(
            *hooked, positions, context.decode_length, self.layer, x, context.segment_ids
        )  # None in a layer without positions
        if rotation is not None:
            where["rotation"] = rotation
            if cfg.rotary_value:  # HF RoFormer's option: v is rotated too, and not rotated back.
                v = rotation.k(v)
        log_decay = gates.log_gates(cfg, x)  # [B, L, N], or None: no decay gate
        if log_decay is not None:
            where["log_decay"] = log_decay
        for name, (init, shape) in kind.parameters(section, cfg, self.layer).items():
            where[name] = self.param(name, init, shape)  # the layer's own: softmax's sinks [N]
        if context.decode_length is None:
            if encoding.bias is not None:
                where["bias"] = encoding.bias(*hooked, positions, positions)  # [B|1, N, L, L]
            options = kind.build_options(section, cfg, context, self.layer, self.make_rng)
            out = kind.full(q, k, v, mask=context.mask, causal=cfg.causal, **where, **options)
            if isinstance(out, tuple):  # eq. (18)'s instability, measured
                out, smallest = out
                self.sow("intermediates", "min_denominator", smallest)
        else:  # the kind's step after the memory of the earlier calls, which it updates
            if encoding.bias is not None:  # of key positions that only the cache knows
                where["bias"] = functools.partial(encoding.bias, *hooked)
            options = kind.build_step_options(section, cfg, context, self.layer)
            memory = self.get_variable("cache", "memory")  # None at the first call
            out, memory = kind.step(memory, q, k, v, mask=context.mask, **where, **options)
            self.put_variable("cache", "memory", memory)
        out = gates.output_gate(cfg, x, out.reshape(b, length, d))
        return _dense(cfg, d, "output")(out)  # [B, L, D]


class Layer(nn.Module):
    """One encoder block: self-attention and a feed-forward (`hidden_act`), each with residual + LN,
    x [B, L, D] -> [B, L, D] in `context`."""

    config: ModelConfig
    layer: int = 0  # its index in the encoder

    @nn.compact
    def __call__(self, x, context: AttentionContext):
        cfg = self.config
        attention = SelfAttention(cfg, self.layer, name="attention")
        dropout = functools.partial(
            Dropout(cfg.hidden_dropout, deterministic=context.deterministic),
            example_ids=context.example_ids,
        )

        def feed_forward(h):  # [B, L, D] -> [B, L, F] -> [B, L, D]
            h = ACTIVATIONS[cfg.hidden_act](_dense(cfg, cfg.intermediate_size, "intermediate")(h))
            return _dense(cfg, cfg.hidden_size, "output")(h)

        def sublayer(h, function, norm):
            if cfg.pre_ln:  # Xiong et al. 2020: the residual path stays un-normalized.
                return h + dropout(function(norm(h)))
            return norm(h + dropout(function(h)))  # BERT / RoFormer (post-LN)

        x = sublayer(x, lambda h: attention(h, context), _layer_norm(cfg, "attention_norm"))
        return sublayer(x, feed_forward, _layer_norm(cfg, "output_norm"))


class Encoder(nn.Module):
    """The layers, x [B, L, D] -> [B, L, D], each in the same `context`."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, context: AttentionContext):
        for i in range(self.config.num_layers):
            x = Layer(self.config, i, name=f"layer_{i}")(x, context)
        if self.config.pre_ln:
            x = _layer_norm(self.config, "final_norm")(x)
        return x


class MlmHead(nn.Module):
    """BERT's head: dense D → E, activation, LayerNorm, then the tied decoder E → V plus a bias."""

    config: ModelConfig

    @nn.compact
    def __call__(self, x, word_embeddings):
        cfg = self.config
        x = ACTIVATIONS[cfg.hidden_act](_dense(cfg, cfg.embed_dim, "dense")(x))
        x = _layer_norm(cfg, "LayerNorm")(x)  # [B, L, E]
        logits = jnp.einsum(
            "BLE,VE->BLV", x, word_embeddings.astype(x.dtype), preferred_element_type=jnp.float32
        )
        bias = self.param("bias", nn.initializers.zeros, (cfg.vocab_size,), jnp.float32)
        return logits + bias  # [B, L, V] float32


class RoFormer(nn.Module):
    """The encoder (BERT, RoFormer, ... by `config.position`) with an optional tied MLM head,
    and for the "mlm_same_doc" objective a pair head: logits [B, 2] at [CLS] of whether the
    two texts of a pair are of one document (data/doc_pairs.py), as BERT's next-sentence
    head reads [CLS]; HF RoFormer has no such head (hf.py does not write it).

    Call with input_ids int [B, L]; attention_mask [B, L] (1/True = real token; padded keys are
    never attended to); token_type_ids int [B, L] (default 0); position_ids int [L] or [B, L]
    (default arange(L), or with segment_ids each segment's own from 0; relative encodings
    are invariant to adding a constant), or [L, A] or [B, L, A] for an encoding on A position
    axes ("rope_nd", "rope_learned"; [L] or [B, L] is then every axis alike, as HF's M-RoPE
    reads text). segment_ids int [B, L]: documents packed in a row, each token attending to
    its own segment's only, its position counted from the segment's start
    (`segments.segment_positions`) for every encoding; padding is still marked by
    attention_mask. Dropout
    draws from the "dropout" rng stream when deterministic=False, each row's masks from that
    key and its example_ids int [B] (its index in the global batch; default arange(B)). With
    mlm_positions int [B, P] the MLM head runs only at those positions of each row and logits
    are [B, P, V]:
    BERT's `gather_indexes`, which saves the decoder's P·V·E work at the L - P unmasked positions.
    update: int (may be traced), the optimizer updates done so far, given by the train step;
    random attention features (FAVOR+) are redrawn by it
    (`attention_kinds.feature_projection`). Evaluation passes `evaluation_update(steps
    done)`; None: the first draw.

    Decoding (a causal model; see roformer_jax.nn.decoding): with decode_length, the total length
    of the sequence being generated, each layer keeps what its attention kind needs of
    earlier tokens in the mutable "cache" collection (a KV cache for softmax, an O(1) state
    for linear and cosine), and each call's tokens follow those of the calls before: call
    with the prompt, then with each new token, passing the cache back and `position_ids` of
    the new tokens. Deterministic only.
    """

    config: ModelConfig
    with_mlm_head: bool = True
    with_pair_head: bool = False

    @nn.compact
    def __call__(
        self,
        input_ids,
        *,
        attention_mask=None,
        token_type_ids=None,
        position_ids=None,
        deterministic=True,
        mlm_positions=None,
        decode_length=None,
        example_ids=None,
        update=None,
        segment_ids=None,
    ) -> EncoderOutput:
        cfg = self.config
        input_ids = jnp.asarray(input_ids)
        if decode_length is not None:  # decoding runs deterministic only
            deterministic = True
        position_ids, token_type_ids, mask, segment_ids = model_inputs.checked_inputs(
            cfg, input_ids, attention_mask, token_type_ids, position_ids, decode_length, segment_ids
        )
        b = input_ids.shape[0]

        embeddings = Embeddings(cfg, name="embeddings")
        x = embeddings(input_ids, token_type_ids, position_ids, deterministic, example_ids)
        if cfg.embed_dim != cfg.hidden_size:
            x = _dense(cfg, cfg.hidden_size, "embeddings_project")(x)  # [B, L, D]
        context = AttentionContext(
            mask, position_ids, deterministic, decode_length, example_ids, segment_ids, update
        )
        x = Encoder(cfg, name="encoder")(x, context)
        logits = None
        if self.with_mlm_head:
            table = embeddings.variables["params"]["word_embeddings"]["embedding"]  # [V, E]
            head_in = x
            if mlm_positions is not None:
                mlm_positions = jnp.asarray(mlm_positions)
                if mlm_positions.ndim != 2 or mlm_positions.shape[0] != b:
                    raise ValueError(
                        f"mlm_positions has shape {mlm_positions.shape}; expected [{b}, P]"
                    )
                model_inputs.check_concrete_in_table(
                    mlm_positions, input_ids.shape[1], "mlm_positions", "the sequence"
                )
                head_in = jnp.take_along_axis(x, mlm_positions[..., None], axis=1)  # [B, P, D]
            logits = MlmHead(cfg, name="mlm_head")(head_in, table)
        pair_logits = None
        if self.with_pair_head:
            pair_logits = _dense(cfg, 2, "pair_head")(x[:, 0]).astype(jnp.float32)  # [B, 2]
        return EncoderOutput(hidden_states=x, logits=logits, pair_logits=pair_logits)
