"""Tests for roformer_jax/decoding.py and the model's decode mode: every kind × encoding."""

import functools
import json

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny
import tolerance
from absl.testing import absltest, parameterized
from logit_bounds import _depth, _logits_and_terms

from roformer_jax.nn import decoding, heads
from roformer_jax.nn import model as model_lib
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS
from roformer_jax.nn.sections import freeze

V, P, T = 64, 5, 4  # vocabulary, prompt length, new tokens
MASK = np.array([[1, 1, 1, 1, 1], [0, 0, 1, 1, 1], [1, 1, 0, 0, 0]], bool)  # 3 prompts
DYNAMIC = json.dumps({"rope_type": "dynamic", "factor": 2.0, "original_max_position_embeddings": 4})
# Every kind with RoPE, in two layers (each layer's memory, fed by the one below).
ROPE_KINDS = [
    dict(testcase_name=f"rope_{a}", position="rope", attention=a) for a in ATTENTION_KINDS
] + [
    dict(
        testcase_name="rope_linear_eq18",
        position="rope",
        attention="linear",
        sections={"linear": {"placement": "both"}},
    ),
    dict(
        testcase_name="rope_favor",
        position="rope",
        attention="linear",
        sections={"linear": {"feature_map": "favor", "random_features": 16}},
    ),
]
# Every other way positions enter (embedded, rotated and scaled, a bias from the cache's key
# positions, frequencies by the whole length) with one kind, in one layer: positions enter
# every layer alike (or the embeddings only), one layer's bound is tighter, and its steps
# compile in about half the time.
POSITIONS = [
    dict(testcase_name="none_linear", position="none", attention="linear"),
    # With key/value heads shared by pairs of query heads (a cache of K = 2 heads) and a
    # sliding window (a ring of 3 keys, fewer than the sequence's 9): they change how keys
    # are kept, not how positions enter, so they ride along here rather than compile alone.
    dict(
        testcase_name="learned_softmax_gqa_window",
        position="learned",
        attention="softmax",
        num_kv_heads=2,
        sections={"softmax": {"window": 3}},
    ),
    dict(testcase_name="xpos_cosine", position="xpos", attention="cosine"),
    dict(testcase_name="alibi_softmax", position="alibi", attention="softmax"),
    dict(
        testcase_name="dynamic_rope",
        position="rope",
        attention="softmax",
        sections={"rope": {"scaling": DYNAMIC}},
    ),
]
# Decay gates (attention_sections.GateSection): FoX without positions and with RoPE (and two
# key/value heads, a cache of K keys but N gates), retention (a fixed gate, RoPE in eq. 19's
# numerator), cosine with a learned gate.
GATES = [
    dict(
        testcase_name="fox_none",
        position="none",
        attention="softmax",
        sections={"softmax": {"gate": "learned", "output_gate": True}},
    ),
    dict(
        testcase_name="fox_rope_gqa",
        attention="softmax",
        num_kv_heads=2,
        sections={"softmax": {"gate": "learned"}},
    ),
    dict(testcase_name="retention", attention="linear", sections={"linear": {"gate": "fixed"}}),
    dict(
        testcase_name="gated_cosine", attention="cosine", sections={"cosine": {"gate": "learned"}}
    ),
]
# Softmax per layer (attention_sections.SoftmaxSection.by_type), three layers as Gemma 3's,
# Llama 4's and gpt-oss's configs give them: a window of 3 (a ring) with QK-norm, chunks of
# 4 with sinks (a ring of 4), every key with sinks and Llama 4's query temperature (from
# position 1 on: floor_scale 2).
LAYERS = [
    dict(
        testcase_name="per_layer_softmax",
        attention="softmax",
        num_layers=3,
        num_kv_heads=2,
        sections={
            "softmax": {
                "layer_types": ("sliding", "chunked", "full"),
                "by_type": {
                    "sliding": {"window": 3, "qk_norm": True},
                    "chunked": {"chunk": 4, "sinks": True},
                    "full": {"sinks": True, "attn_scale": 0.5, "floor_scale": 2.0},
                },
            }
        },
    ),
]
COMBINATIONS = ROPE_KINDS + [dict(c, num_layers=1) for c in POSITIONS + GATES] + LAYERS


def _model(**overrides):
    """A tiny causal model with weights at ten times the init scale (attention far from
    uniform, so that positions matter)."""
    model, variables = _made(freeze(overrides))  # hashable, sections included
    # Fresh dicts around the shared (immutable) arrays: a test may edit its tree.
    return model, jax.tree.map(lambda x: x, variables)


@functools.cache
def _made(overrides):
    """`_model`'s, once per process: tracing the model's init takes ~0.2 s, and several tests
    build the same model."""
    config = tiny.model_config(  # two layers: each keeps its own memory of earlier tokens
        **{"vocab_size": V, "max_len": 16, "causal": True, "num_layers": 2, **overrides}
    )
    model = model_lib.RoFormer(config)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    rng = np.random.default_rng(0)
    params = {
        path: jnp.asarray((path[-1] == "scale") + rng.normal(0, 0.2, x.shape), jnp.float32)
        for path, x in flax.traverse_util.flatten_dict(shapes).items()
    }
    return model, flax.traverse_util.unflatten_dict(params)


def _one_layer(**overrides):
    """`_model` with one layer, for what acts on the logits alone: sampling, eos, which
    features a model decodes with. Its generate loop compiles in ~1.3 s, two layers' in
    ~2.3 s."""
    return _model(num_layers=1, **overrides)


def _prompts(seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(1, V, MASK.shape), jnp.int32)


def _full_forward(model, variables, ids, mask, **kwargs):
    """Logits of the causal forward pass over whole left-padded sequences [B, L, V]."""
    ids, mask, position_ids = decoding.left_padded(ids, mask)
    return model.apply(
        variables, ids, attention_mask=mask, position_ids=position_ids, **kwargs
    ).logits


class DecodeModeTest(parameterized.TestCase):
    @parameterized.named_parameters(*COMBINATIONS)
    def test_cached_steps_give_the_logits_of_the_whole_sequence(self, **overrides):
        model, variables = _model(**overrides)
        ids = jnp.concatenate([_prompts(), _prompts(2)[:, :T]], axis=1)  # [B, P + T]
        mask = jnp.concatenate([MASK, np.ones((len(MASK), T), bool)], axis=1)
        want, magnitude = _logits_and_terms(model, variables, ids, mask)
        ids, mask, position_ids = decoding.left_padded(ids, mask)
        total = P + T
        step = decoding.decode_step(model, variables, total)  # total fixes the cache's shapes

        # One program, as decoding.generate runs them (two jitted steps compiled ~15% more).
        @jax.jit
        def stepwise(ids, mask, position_ids):  # the prompt in two blocks, then one by one
            # The first block is all padding in row 2 (MASK, left-padded): a block of a long
            # prompt may be (`decoding.generate`'s prefill_chunk).
            first, cache = step({}, ids[:, :3], mask[:, :3], position_ids[:, :3])
            out, cache = step(cache, ids[:, 3:P], mask[:, 3:P], position_ids[:, 3:P])

            def one_token(cache, token):  # token: ([B], [B], [B])
                out, cache = step(cache, *(x[:, None] for x in token))
                return cache, out.logits[:, 0]  # [B, V]

            later = tuple(x[:, P:].T for x in (ids, mask, position_ids))  # [T, B] each
            _, logits = jax.lax.scan(one_token, cache, later)  # [T, B, V]
            return jnp.concatenate([first.logits, out.logits, logits.transpose(1, 0, 2)], axis=1)

        got = stepwise(ids, mask, position_ids)
        real = np.asarray(mask)[..., None]
        # The same float32 sums in another order (one block of keys at a time, a cache or a
        # state instead of the whole sequence): each logit of either is within
        # γ_depth · Σ_e |h_e W_ve| of exact, depth ~1.9e3 roundings (`_depth`: two layers of
        # D = 64, F = 256, 16 random features, P + T = 9 keys; ~1.1e3 in one layer),
        # Σ|terms| ~10 here; so the two differ by at most twice that (~2e-3). Measured: up to
        # 2.3e-5. A wrong cache or position is off by far more.
        depth = _depth(model.config, keys=total)
        atol = 2 * tolerance.dot(n=depth, magnitude=magnitude)
        np.testing.assert_allclose(
            np.where(real, got, 0), np.where(real, want, 0), rtol=0, atol=atol
        )

    @parameterized.named_parameters(
        dict(testcase_name="softmax_window", sections={"softmax": {"window": 3}}),
        dict(testcase_name="retention", attention="linear", sections={"linear": {"gate": "fixed"}}),
    )
    def test_a_prompt_in_chunks_leaves_the_logits_and_memory_of_one_pass(self, **overrides):
        # The memory is judged by what reads it: the logits of one more token decoded from it.
        model, variables = _one_layer(**overrides)
        ids, mask = _prompts(), jnp.asarray(MASK)
        token = _prompts(2)[:, :1]  # [B, 1]
        _, magnitude = _logits_and_terms(
            model,
            variables,
            jnp.concatenate([ids, token], 1),
            jnp.pad(mask, ((0, 0), (0, 1)), constant_values=True),
        )

        @functools.partial(jax.jit, static_argnums=0)
        def prefill(chunk):
            step = decoding.decode_step(model, variables, P + T)
            prompt = decoding.left_padded(ids, mask)
            last, memory = decoding.prefill(step, *prompt, chunk)
            out, _ = step(memory, token, jnp.ones_like(token, bool), prompt[2][:, -1:] + 1)
            return last, out.logits[:, 0]  # [B, V] each

        # Chunks of 2: a first pass of P mod 2 = 1 token, all padding in rows 1 and 2, then
        # two chunks, the first of them all padding in row 2. Chunks of 4: larger than the ring.
        # Each logit of either pass is within γ_depth · Σ|terms| of exact (as in
        # test_cached_steps_give_the_logits_of_the_whole_sequence), so they differ by twice that.
        want = prefill(None)
        atol = 2 * tolerance.dot(n=_depth(model.config, keys=P + 1), magnitude=magnitude)
        for chunk in (2, 4):
            chex.assert_trees_all_close(prefill(chunk), want, rtol=0, atol=atol)

    @parameterized.parameters("linear", "cosine")
    def test_linear_memory_does_not_grow_with_the_length(self, kind):
        model, variables = _model(attention=kind)

        def cache_shapes(total):
            _, cache = jax.eval_shape(
                lambda v: model.apply(v, _prompts(), decode_length=total, mutable=["cache"]),
                variables,
            )
            return jax.tree.map(lambda x: x.shape, cache)

        self.assertEqual(cache_shapes(8), cache_shapes(4096))

    def test_softmax_cache_holds_the_whole_sequence(self):
        model, variables = _model()
        # Jitted: op by op, decode mode at these shapes compiled ~100 primitives of its own.
        apply = jax.jit(lambda v, ids: model.apply(v, ids, decode_length=12, mutable=["cache"]))
        _, cache = apply(variables, _prompts())
        memory = cache["cache"]["encoder"]["layer_0"]["attention"]["memory"]
        chex.assert_shape(memory.keys, (len(MASK), 4, 12, 16))  # [B, N, S, H]
        self.assertEqual(int(memory.length), P)


class GenerateTest(parameterized.TestCase):
    @parameterized.named_parameters(
        dict(testcase_name="softmax_rope", attention="softmax"),
        dict(testcase_name="linear_eq19", attention="linear"),
        dict(testcase_name="cosine_rope", attention="cosine"),
        dict(testcase_name="softmax_learned", attention="softmax", position="learned"),
        dict(testcase_name="fox", attention="softmax", sections={"softmax": {"gate": "learned"}}),
        dict(testcase_name="retention", attention="linear", sections={"linear": {"gate": "fixed"}}),
    )
    def test_greedy_equals_recomputing_the_growing_sequence(self, **overrides):
        # Two layers: in one, greedy tokens missed a cosine state that forgot earlier tokens.
        model, variables = _model(**overrides)
        got = decoding.generate(model, variables, _prompts(), attention_mask=MASK, max_new_tokens=T)
        # Causal: the logits at each slot are those of the sequence up to it.
        _, mask, _ = decoding.left_padded(_prompts(), jnp.asarray(MASK))  # as `got` is laid out
        mask = jnp.concatenate([mask, jnp.ones((len(MASK), T), bool)], axis=1)
        logits = _full_forward(model, variables, got, mask)
        np.testing.assert_array_equal(got[:, P:], jnp.argmax(logits[:, P - 1 : -1], axis=-1))

    def test_a_prompt_in_chunks_gives_the_tokens_of_one_pass(self):
        # `prefill` is checked to the logit in DecodeModeTest; here that generate passes on its
        # chunk: 4 tokens at a time into a ring of 3 keys.
        model, variables = _one_layer(sections={"softmax": {"window": 3}})
        run = functools.partial(
            decoding.generate, model, variables, _prompts(), attention_mask=MASK, max_new_tokens=T
        )
        np.testing.assert_array_equal(run(prefill_chunk=4), run())

    def test_random_features_are_those_of_the_last_update(self):
        # A Performer trained 5 updates with a redraw every 2 decodes with update 4's draw
        # (period 2), the features it last trained with, not the first draw.
        favor = {"feature_map": "favor", "random_features": 16, "feature_redraw": 2}
        model, variables = _one_layer(attention="linear", sections={"linear": favor})
        got = decoding.generate(
            model, variables, _prompts(), attention_mask=MASK, max_new_tokens=T, steps_done=5
        )
        _, mask, _ = decoding.left_padded(_prompts(), jnp.asarray(MASK))
        mask = jnp.concatenate([mask, jnp.ones((len(MASK), T), bool)], axis=1)
        for update, same in ((4, True), (5, True), (3, False), (None, False)):  # periods 2, 2, 1, 0
            logits = _full_forward(model, variables, got, mask, update=update)
            greedy = jnp.argmax(logits[:, P - 1 : -1], axis=-1)
            self.assertEqual(bool(jnp.all(got[:, P:] == greedy)), same, update)

    def test_padding_on_either_side_gives_the_same_tokens(self):
        model, variables = _model()
        right = decoding.generate(
            model, variables, _prompts(), attention_mask=MASK, max_new_tokens=T
        )
        ids, mask, _ = decoding.left_padded(_prompts(), jnp.asarray(MASK))
        left = decoding.generate(model, variables, ids, attention_mask=mask, max_new_tokens=T)
        np.testing.assert_array_equal(right, left)

    def test_sampling(self):
        model, variables = _one_layer()
        ids = _prompts()

        def run(**kw):
            return decoding.generate(model, variables, ids, max_new_tokens=T, **kw)

        greedy = run()
        key = jax.random.key(3)
        np.testing.assert_array_equal(run(temperature=1.0, top_k=1, rng=key), greedy)
        np.testing.assert_array_equal(run(temperature=1.0, top_p=1e-6, rng=key), greedy)
        np.testing.assert_array_equal(run(temperature=2.0, rng=key), run(temperature=2.0, rng=key))
        # Temperature 2.0 again: each other setting compiles the loop anew (~1.3 s).
        draws = {
            tuple(np.asarray(run(temperature=2.0, rng=jax.random.key(s))).ravel()) for s in range(4)
        }
        self.assertGreater(len(draws), 1)

    def test_a_finished_row_repeats_eos(self):
        model, variables = _one_layer()
        greedy = np.asarray(decoding.generate(model, variables, _prompts(), max_new_tokens=T))
        # eos: the first new token of a row whose greedy tokens go on to others, so that the
        # eos repeated after it differs from what the model says next (a row that repeats
        # its first token anyway would pass with or without the rule).
        first = next(r for r in range(len(MASK)) if (greedy[r, P + 1 :] != greedy[r, P]).any())
        eos = int(greedy[first, P])
        out = np.asarray(
            decoding.generate(model, variables, _prompts(), max_new_tokens=T, eos_id=eos)
        )
        np.testing.assert_array_equal(out[first, P:], eos)
        for row in range(len(MASK)):  # up to its first eos, each row is the greedy one; then eos
            new = list(greedy[row, P:])
            stop = new.index(eos) + 1 if eos in new else T
            np.testing.assert_array_equal(out[row, P : P + stop], greedy[row, P : P + stop])
            np.testing.assert_array_equal(out[row, P + stop :], eos)

    @parameterized.named_parameters(
        (
            "no_new_tokens",
            {},
            dict(max_new_tokens=0),
            "max_new_tokens=0 must be a positive integer",
        ),
        (
            "float_new_tokens",
            {},
            dict(max_new_tokens=2.7),
            "max_new_tokens=2.7 must be a positive integer",
        ),
        ("not_causal", dict(causal=False), {}, "needs a causal model"),
        (
            "past_the_learned_table",
            dict(position="learned"),
            dict(max_new_tokens=12),
            r"prompt length 5 \+ max_new_tokens 12 = 17 exceeds the 16 positions",
        ),
        ("empty_prompt", {}, dict(attention_mask=np.zeros((3, P), bool)), r"prompts \[0, 1, 2\]"),
        ("no_rng", {}, dict(temperature=0.7), "needs an rng key"),
        ("top_p", {}, dict(temperature=1.0, top_p=0.0, rng=jax.random.key(0)), "top_p=0.0"),
        ("eos_past_the_vocab", {}, dict(eos_id=V), rf"eos_id holds {V} .* \[0, {V}\)"),
        ("no_prefill_chunk", {}, dict(prefill_chunk=0), "prefill_chunk=0 must be a positive"),
    )
    def test_bad_input(self, config, kwargs, message):
        model, variables = _model(**config)
        with self.assertRaisesRegex(ValueError, message):
            decoding.generate(model, variables, _prompts(), **{"max_new_tokens": T, **kwargs})

    def test_the_model_and_its_variables_are_what_generate_reads(self):
        model, variables = _model()
        with self.assertRaisesRegex(ValueError, r"expected \{'params': ...\}"):
            decoding.generate(model, variables["params"], _prompts(), max_new_tokens=T)
        task = heads.TaskModel(model.config)
        with self.assertRaisesRegex(ValueError, "needs a RoFormer with its LM head; got TaskModel"):
            decoding.generate(task, variables, _prompts(), max_new_tokens=T)

    @parameterized.parameters(V, -1)
    def test_ids_outside_the_vocabulary_are_refused(self, bad):
        # The jitted model would read NaN past the table, and wrap a negative id.
        model, variables = _model()
        prompts = np.array(_prompts())
        prompts[1, 2] = bad
        with self.assertRaisesRegex(ValueError, rf"input_ids holds {bad} \(at \(1, 2\)\)"):
            decoding.generate(model, variables, prompts, max_new_tokens=T)


if __name__ == "__main__":
    absltest.main()
