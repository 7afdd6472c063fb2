"""Tests for roformer_jax/model.py: one encoder, every position encoding × attention kind."""

import dataclasses
import itertools

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from model_cases import B, L, V, _config, _count, _init, _inputs

from roformer_jax.nn import attention_kinds, positions
from roformer_jax.nn import model as model_lib
from roformer_jax.nn import model_config as model_config_lib
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS

# Parameters of each named size at the ModelConfig defaults (vocab 30522, rope, MLM head).
# `base` with position="learned" has 109,514,298: exactly HF BertForMaskedLM (BERT-base).
GOLDEN_PARAM_COUNTS = {"tiny": 2_088_442, "small": 11_070_522, "base": 109_121_082}
BERT_BASE_MLM_PARAMS = 109_514_298
# "small" with one key/value head (multi-query): k and v project D = 256 to H = 64 features
# instead of 256, 2 x (256 x 192 + 192) fewer in each of 4 layers.
SMALL_MQA_PARAMS = 11_070_522 - 4 * 2 * (256 * 192 + 192)

KINDS = tuple(ATTENTION_KINDS)
# A bias on the scores (ALiBi) needs the score matrix: softmax only. The encodings on several
# position axes reach every kind through the same `rope.Rotation` as "rope" does: softmax
# only here (positions_test.py checks them with more positions).
COMBINATIONS = [
    dict(testcase_name=f"{p}_{a}", position=p, attention=a)
    for p, a in itertools.product(positions.ENCODINGS, KINDS)
    if (positions.ENCODINGS[p].bias is None and positions.ENCODINGS[p].axes is None)
    or a == "softmax"
]


class ModelTest(parameterized.TestCase):
    def test_without_mlm_head(self):
        model, variables = _init(_config(), with_mlm_head=False)
        self.assertNotIn("mlm_head", variables["params"])
        self.assertIsNone(model.apply(variables, _inputs()[0]).logits)

    def test_jit_matches_eager(self):
        model, variables = _init(_config())
        ids, types = _inputs()
        eager = model.apply(variables, ids, token_type_ids=types)
        jitted = jax.jit(lambda v, i, t: model.apply(v, i, token_type_ids=t))(variables, ids, types)
        chex.assert_trees_all_close(jitted, eager, atol=1e-5)

    def test_mlm_positions_gather_the_head(self):
        model, variables = _init(_config())
        ids, types = _inputs()
        full = model.apply(variables, ids, token_type_ids=types).logits  # [B, L, V]
        where = jnp.array([[7, 0, 3], [2, 2, 5]])  # [B, P]: any order, repeats allowed
        out = model.apply(variables, ids, token_type_ids=types, mlm_positions=where)
        chex.assert_shape(out.logits, (B, 3, V))
        chex.assert_trees_all_close(out.logits, full[jnp.arange(B)[:, None], where], atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"mlm_positions has shape \(3,\)"):
            model.apply(variables, ids, mlm_positions=where[0])

    def test_dropout(self):
        model, variables = _init(_config(hidden_dropout=0.2, attention_dropout=0.2))
        ids, _ = _inputs()

        # Jitted where dropout acts: op by op, its random bits compiled ~60 primitives of their
        # own (~3 s). Without it, eager as `off` below: one program's rounding, compared to 1e-6.
        @jax.jit
        def dropped(key):
            return model.apply(variables, ids, deterministic=False, rngs={"dropout": key}).logits

        def run(seed, deterministic):
            if not deterministic:
                return dropped(jax.random.key(seed))
            rngs = {"dropout": jax.random.key(seed)}
            return model.apply(variables, ids, deterministic=True, rngs=rngs).logits

        chex.assert_trees_all_equal(run(0, False), run(0, False))
        self.assertGreater(float(jnp.abs(run(0, False) - run(1, False)).max()), 1e-3)
        # deterministic=True is dropout-free: equal to a model whose rates are 0.
        off = model_lib.RoFormer(
            dataclasses.replace(model.config, hidden_dropout=0.0, attention_dropout=0.0)
        )
        chex.assert_trees_all_equal(run(0, True), run(1, True))
        chex.assert_trees_all_close(run(0, True), off.apply(variables, ids).logits, atol=1e-6)

    @parameterized.parameters(*KINDS)
    def test_rope_encoder_is_shift_invariant(self, attention):
        model, variables = _init(_config(attention=attention, hidden_dropout=0.0))
        ids, types = _inputs()
        base = model.apply(variables, ids, token_type_ids=types)
        shifted = model.apply(variables, ids, token_type_ids=types, position_ids=jnp.arange(L) + 37)
        per_row = model.apply(
            variables,
            ids,
            token_type_ids=types,
            position_ids=jnp.arange(L)[None] + jnp.array([[5], [900]]),
        )
        chex.assert_trees_all_close(shifted, base, atol=2e-5)
        chex.assert_trees_all_close(per_row, base, atol=2e-5)
        # ... while the order of positions does matter.
        reversed_ = model.apply(
            variables, ids, token_type_ids=types, position_ids=jnp.arange(L)[::-1]
        )
        self.assertGreater(float(jnp.abs(reversed_.hidden_states - base.hidden_states).max()), 1e-2)

    def test_learned_positions_too_long(self):
        model, variables = _init(_config(position="learned"))
        with self.assertRaisesRegex(ValueError, r"length 17 .* max_len 16"):
            model.apply(variables, jnp.ones((1, 17), jnp.int32))

    def test_rope_runs_at_four_times_training_length(self):
        model, variables = _init(_config(), length=L)
        # Jitted: a length no other test has would compile each primitive anew (~80, ~4 s).
        out = jax.jit(model.apply)(variables, jnp.ones((B, 4 * L), jnp.int32))
        chex.assert_shape(out.logits, (B, 4 * L, V))
        chex.assert_tree_all_finite(out)

    @parameterized.named_parameters(*COMBINATIONS)
    def test_shapes_and_appended_padding(self, position, attention):
        causal = position == "rope_learned_positions"  # a cumulative sum: causal models only
        model, variables = _init(_config(position=position, attention=attention, causal=causal))
        ids, types = _inputs()
        real = model.apply(variables, ids, token_type_ids=types, attention_mask=jnp.ones((B, L)))
        chex.assert_shape(real.hidden_states, (B, L, 64))
        chex.assert_shape(real.logits, (B, L, V))
        self.assertEqual(real.logits.dtype, jnp.float32)
        chex.assert_tree_all_finite(real)
        # Pad tokens appended with mask False leave every real position unchanged.
        pad = 5
        padded_ids = jnp.concatenate([ids, jnp.full((B, pad), 7, jnp.int32)], axis=1)
        padded_types = jnp.concatenate([types, jnp.ones((B, pad), jnp.int32)], axis=1)
        mask = jnp.arange(L + pad)[None, :] < L
        padded = model.apply(
            variables,
            padded_ids,
            token_type_ids=padded_types,
            attention_mask=jnp.broadcast_to(mask, (B, L + pad)),
        )
        chex.assert_trees_all_close(jax.tree.map(lambda x: x[:, :L], padded), real, atol=2e-5)

    @parameterized.named_parameters(*COMBINATIONS)
    def test_causal_outputs_do_not_see_later_tokens(self, position, attention):
        model, variables = _init(_config(position=position, attention=attention, causal=True))
        ids, types = _inputs()
        changed = ids.at[:, 5:].set((ids[:, 5:] + 1) % V)
        one, two = (model.apply(variables, x, token_type_ids=types).logits for x in (ids, changed))
        chex.assert_trees_all_close(one[:, :5], two[:, :5], atol=1e-5)
        self.assertGreater(float(jnp.max(jnp.abs(one[:, 5:] - two[:, 5:]))), 1e-2)

    def test_mask_masks(self):
        # The same pad ids unmasked do change the real positions: the test above can fail.
        model, variables = _init(_config())
        ids, _ = _inputs()
        longer = jnp.concatenate([ids, jnp.full((B, 5), 7, jnp.int32)], axis=1)
        diff = model.apply(variables, longer).hidden_states[:, :L] - model.apply(variables, ids)[0]
        self.assertGreater(float(jnp.abs(diff).max()), 1e-2)

    @parameterized.parameters(*KINDS)
    def test_bfloat16_close_to_float32(self, attention):
        config = _config(attention=attention)
        model, variables = _init(config)
        ids, types = _inputs()
        full = model.apply(variables, ids, token_type_ids=types)
        bf16 = model_lib.RoFormer(dataclasses.replace(config, dtype="bfloat16"))
        shapes = jax.eval_shape(bf16.init, jax.random.key(0), ids)
        self.assertTrue(all(x.dtype == jnp.float32 for x in jax.tree.leaves(shapes)))
        # Jitted: op by op, every bfloat16 primitive compiled anew (~150, ~5 s).
        half = jax.jit(bf16.apply)(variables, ids, token_type_ids=types)
        self.assertEqual(half.hidden_states.dtype, jnp.bfloat16)
        self.assertEqual(half.logits.dtype, jnp.float32)
        # Tolerance: hidden states (LayerNorm outputs, unit scale) within 0.1, logits within 2%
        # of the largest logit; measured 0.03-0.04 and 1.1-1.5% (bf16 has an 8-bit mantissa).
        hidden_error = jnp.abs(half.hidden_states.astype(jnp.float32) - full.hidden_states).max()
        self.assertLess(float(hidden_error), 0.1)
        logit_error = jnp.abs(half.logits - full.logits).max()
        self.assertLess(float(logit_error), 0.02 * float(jnp.abs(full.logits).max()))

    def test_factorized_embedding_and_pre_ln(self):
        model, variables = _init(_config(embedding_size=16, pre_ln=True))
        params = variables["params"]
        chex.assert_shape(params["embeddings"]["word_embeddings"]["embedding"], (V, 16))
        chex.assert_shape(params["embeddings_project"]["kernel"], (16, 64))
        chex.assert_shape(params["mlm_head"]["dense"]["kernel"], (64, 16))
        self.assertIn("final_norm", params["encoder"])
        out = model.apply(variables, _inputs()[0])
        chex.assert_shape(out.logits, (B, L, V))
        post = model_lib.RoFormer(dataclasses.replace(model.config, pre_ln=False))
        post_params = {
            **params,
            "encoder": {k: v for k, v in params["encoder"].items() if k != "final_norm"},
        }
        post_out = post.apply({"params": post_params}, _inputs()[0])
        self.assertGreater(float(jnp.abs(post_out.logits - out.logits).max()), 1e-2)

    def test_rotary_value_rotates_values(self):
        config = _config(rotary_value=True)
        model, variables = _init(config)
        ids, _ = _inputs()
        plain = model_lib.RoFormer(dataclasses.replace(config, rotary_value=False))
        diff = model.apply(variables, ids).logits - plain.apply(variables, ids).logits
        self.assertGreater(float(jnp.abs(diff).max()), 1e-3)

    @parameterized.parameters(*GOLDEN_PARAM_COUNTS)
    def test_golden_param_count(self, size):
        model = model_lib.RoFormer(model_config_lib.model_config(size))
        shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
        self.assertEqual(_count(shapes), GOLDEN_PARAM_COUNTS[size])

    def test_every_size_has_a_golden_count(self):
        self.assertEqual(set(model_config_lib.SIZES), set(GOLDEN_PARAM_COUNTS))

    def test_base_with_learned_positions_is_bert_base(self):
        model = model_lib.RoFormer(model_config_lib.model_config("base", position="learned"))
        shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
        self.assertEqual(_count(shapes), BERT_BASE_MLM_PARAMS)

    def test_grouped_query_param_count(self):
        model = model_lib.RoFormer(model_config_lib.model_config("small", num_kv_heads=1))
        shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
        self.assertEqual(_count(shapes), SMALL_MQA_PARAMS)


# Two rows of two documents each, A|B and C|D with |A| = |D| = 3 and |B| = |C| = 5.
SEGMENTS = jnp.array([[0, 0, 0, 1, 1, 1, 1, 1], [0, 0, 0, 0, 0, 1, 1, 1]])
_ALONE = ((0, 0, 3), (0, 3, 8), (1, 0, 5), (1, 5, 8))  # (row, start, end) of A, B, C, D
# Each way positions enter (a table, a bias, RoPE's rotation) and each kind: softmax, linear
# (also causal: chunked, a chunk crosses a boundary) and cosine (causal); one layer: what a
# token read of another document would show in the first.
PACKED = [
    dict(testcase_name="learned_softmax", position="learned"),
    dict(testcase_name="alibi_softmax", position="alibi"),
    dict(testcase_name="rope_linear", attention="linear"),
    dict(testcase_name="rope_linear_causal", attention="linear", causal=True),
    dict(testcase_name="rope_cosine_causal", attention="cosine", causal=True),
    # A decay gate restarts with each document: FoX, and retention in chunks across them.
    dict(testcase_name="fox", causal=True, sections={"softmax": {"gate": "learned"}}),
    dict(
        testcase_name="retention",
        attention="linear",
        causal=True,
        sections={"linear": {"gate": "fixed"}},
    ),
]


class PackedTest(parameterized.TestCase):
    """Documents packed in rows (segment_ids) and grouped-query heads in the whole model."""

    @parameterized.named_parameters(*PACKED)
    def test_each_document_as_if_alone(self, **overrides):
        model, variables = _init(_config(num_layers=1, **overrides))
        ids, types = _inputs()
        # The packed rows, then each document alone in a row of its own, padding after it
        # (which changes nothing: test_shapes_and_appended_padding): one batch, one program.
        alone_ids, alone_types = (
            jnp.stack([jnp.pad(x[r, a:b], (0, L - (b - a))) for r, a, b in _ALONE])
            for x in (ids, types)
        )  # [4, L]
        both_ids, both_types = (
            jnp.concatenate([ids, alone_ids]),
            jnp.concatenate([types, alone_types]),
        )
        mask = jnp.arange(L)[None] < jnp.array([[L]] * B + [[b - a] for _, a, b in _ALONE])
        segments = jnp.concatenate([SEGMENTS, jnp.zeros((4, L), SEGMENTS.dtype)])
        # Jitted: the batch of 6 rows is this test's own shape.
        logits = jax.jit(model.apply)(
            variables,
            both_ids,
            token_type_ids=both_types,
            attention_mask=mask,
            segment_ids=segments,
        ).logits
        for document, (r, a, b) in enumerate(_ALONE):
            # The same sums over fewer (masked) terms: float32 rounding of logits of ~10.
            chex.assert_trees_all_close(logits[r, a:b], logits[B + document, : b - a], atol=2e-5)

    def test_explicit_positions_win_over_segments(self):
        model, variables = _init(_config(position="learned"))
        ids, _ = _inputs()
        given = model.apply(variables, ids, segment_ids=SEGMENTS, position_ids=jnp.arange(L))
        restarted = model.apply(variables, ids, segment_ids=SEGMENTS)
        self.assertGreater(float(jnp.abs(given.logits - restarted.logits).max()), 1e-2)

    def test_grouped_heads_are_repeated_heads(self):
        # A model with K key/value heads computes what one of N heads computes whose k and v
        # kernels repeat each of the K heads N / K times in a row (HF's repeat_kv order).
        kv_heads = 2
        model, variables = _init(_config(num_kv_heads=kv_heads))
        full = model_lib.RoFormer(dataclasses.replace(model.config, num_kv_heads=None))
        repeated = flax.traverse_util.flatten_dict(variables)
        for path, x in list(repeated.items()):
            if path[-2] in ("key", "value"):  # kernel [D, K H] or bias [K H]
                heads = x.reshape(*x.shape[:-1], kv_heads, -1)
                heads = jnp.repeat(heads, 4 // kv_heads, axis=-2)  # [..., N, H]
                repeated[path] = heads.reshape(*x.shape[:-1], -1)
        repeated = flax.traverse_util.unflatten_dict(repeated)
        ids, types = _inputs()
        chex.assert_trees_all_close(
            model.apply(variables, ids, token_type_ids=types),
            full.apply(repeated, ids, token_type_ids=types),
            atol=1e-5,
        )

    def test_window_limits_what_a_token_reads(self):
        # Two layers of window 2: token 0 reads tokens 0, 1 and, through token 1, token 2.
        model, variables = _init(_config(sections={"softmax": {"window": 2}}))
        ids, _ = _inputs()
        changed = ids.at[:, 3:].set((ids[:, 3:] + 1) % V)
        one, two = (model.apply(variables, x).logits for x in (ids, changed))
        chex.assert_trees_all_close(one[:, :1], two[:, :1], atol=1e-5)
        self.assertGreater(float(jnp.abs(one[:, 1:] - two[:, 1:]).max()), 1e-2)

    def test_bad_segments(self):
        model, variables = _init(_config())
        ids, _ = _inputs()
        with self.assertRaisesRegex(ValueError, r"segment_ids has shape \(8,\)"):
            model.apply(variables, ids, segment_ids=SEGMENTS[0])
        with self.assertRaisesRegex(ValueError, r"dtype float32"):
            model.apply(variables, ids, segment_ids=SEGMENTS.astype(jnp.float32))
        causal = model_lib.RoFormer(dataclasses.replace(model.config, causal=True))
        with self.assertRaisesRegex(ValueError, r"decoding runs one sequence per row"):
            causal.apply(variables, ids, segment_ids=SEGMENTS, decode_length=L, mutable=["cache"])


def _favor(**linear):
    linear = {"feature_map": "favor", "random_features": 16, **linear}
    return _config(attention="linear", sections={"linear": linear})


def _draw(config, layer, update=None):
    """The model's draw of `layer`'s features at `update`."""
    section = config.sections["linear"]
    return attention_kinds.feature_projection(section, config.head_dim, layer, update)


class RandomFeaturesTest(parameterized.TestCase):
    """FAVOR+'s random features in the model: redrawn by update, evaluated on the last draw."""

    def test_evaluation_uses_the_draw_of_the_last_update(self):
        # After 10 updates with a redraw every 10, the parameters last trained with period
        # 0's features; after 11, with period 1's.
        config = _favor(feature_redraw=10)
        draw = _draw  # FeatureProjectionTest (attention_kinds_test.py) tests the draws
        last = model_lib.evaluation_update
        self.assertIsNone(last(None))
        self.assertEqual(int(last(0)), 0)  # untrained: the first draw
        chex.assert_trees_all_equal(draw(config, 1, update=last(10)), draw(config, 1))
        chex.assert_trees_all_equal(draw(config, 1, update=last(11)), draw(config, 1, update=10))
        self.assertEqual(int(jax.jit(last)(jnp.int32(11))), 10)

    def test_the_model_redraws_by_update_and_evaluates_on_one_draw(self):
        model, variables = _init(_favor(feature_redraw=2))
        ids, _ = _inputs()

        def logits(update=None):
            return model.apply(variables, ids, update=update).logits

        chex.assert_trees_all_equal(logits(0), logits(1), logits())
        self.assertGreater(float(jnp.abs(logits(2) - logits()).max()), 1e-4)

    @parameterized.parameters(
        ("linear", "elu", True),
        ("linear", "favor", True),
        ("cosine", "elu", True),
        ("softmax", "elu", False),
    )
    def test_training_sows_the_smallest_denominator(self, attention, feature_map, sown):
        linear = {"feature_map": feature_map, "random_features": 16, "placement": "both"}
        config = _config(
            attention=attention, sections={"linear": linear} if attention == "linear" else None
        )
        model, variables = _init(config)
        ids, _ = _inputs()
        for deterministic in (True, False):
            _, state = model.apply(
                variables,
                ids,
                deterministic=deterministic,
                mutable=["intermediates"],
                rngs={"dropout": jax.random.key(0)},
            )
            smallest = jax.tree.leaves(state.get("intermediates", {}))
            self.assertLen(smallest, config.num_layers if sown and not deterministic else 0)
            for value in smallest:
                self.assertTrue(0 <= float(value) < np.inf)


if __name__ == "__main__":
    absltest.main()
