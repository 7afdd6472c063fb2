"""Tests for roformer_jax/positions.py: the table of position encodings (ALiBi: alibi_test)."""

import dataclasses
import functools
from unittest import mock

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.nn import model as model_lib
from roformer_jax.nn import model_config, positions, rope
from roformer_jax.nn.sections import Section

B, L, V = 2, 8, 64
RELATIVE = ("rope", "alibi")  # scores depend on m - n only
# Positions summed from the input (learned_positions_test.py): a causal model's, ids unread.
LEARNED = "rope_learned_positions"


def _model(position, seed=0, **overrides):
    """(model, variables); the plain ones (`position` alone) built once per module, shared by
    the tests that read them."""
    if seed == 0 and not overrides:
        return _plain_model(position)
    return _build(position, seed, **overrides)


@functools.cache
def _plain_model(position):
    return _build(position, 0)


def _build(position, seed, **overrides):
    config = tiny.model_config(
        vocab_size=V,
        max_len=16,
        position=position,
        hidden_dropout=0.0,
        initializer_range=0.2,  # 10x BERT's: attention far from uniform
        **{"causal": position == LEARNED, **overrides},
    )
    model = model_lib.RoFormer(config)
    # Inputs [B, L] as the tests': init runs op by op, and its ops then compile once for both.
    return model, model.init(jax.random.key(seed), jnp.zeros((B, L), jnp.int32))


def _ids(length=L, seed=1):
    return jnp.asarray(np.random.default_rng(seed).integers(5, V, (B, length)), jnp.int32)


class TableTest(parameterized.TestCase):
    @parameterized.parameters(*positions.ENCODINGS)
    def test_every_encoding_builds_and_runs(self, name):
        model, variables = _model(name)
        out = model.apply(variables, _ids())
        chex.assert_shape(out.logits, (B, L, V))

    @parameterized.parameters(*RELATIVE)
    def test_relative_encodings_ignore_a_shift(self, name):
        model, variables = _model(name)
        ids = _ids()
        base = model.apply(variables, ids)
        shifted = model.apply(variables, ids, position_ids=jnp.arange(L) + 1000)
        chex.assert_trees_all_close(shifted, base, atol=2e-5)

    @parameterized.parameters(*(p for p in positions.ENCODINGS if p not in ("none", LEARNED)))
    def test_the_positions_matter(self, name):
        # Spread out, not reversed: ALiBi's |m - n| cannot tell a sequence from its mirror.
        model, variables = _model(name)
        ids = _ids()
        base = model.apply(variables, ids).hidden_states
        spread = model.apply(variables, ids, position_ids=2 * jnp.arange(L)).hidden_states
        self.assertGreater(float(jnp.abs(spread - base).max()), 1e-3)

    def test_max_length(self):
        for name, encoding in positions.ENCODINGS.items():
            config = tiny.model_config(position=name, max_len=16, causal=name == LEARNED)
            want = 16 if name in ("learned", "learned_sinusoid") else None
            self.assertEqual(config.max_length, want, name)
            self.assertEqual(encoding.max_length(config.position_section, config), want)

    def test_only_the_sinusoids_scale_the_embeddings(self):
        scaled = {name for name, e in positions.ENCODINGS.items() if e.scale_embeddings}
        self.assertEqual(scaled, {"sinusoidal", "learned_sinusoid"})

    @parameterized.parameters(("sinusoidal", 64**0.5), ("learned", 1.0), ("rope", 1.0))
    def test_embeddings_are_scaled_before_the_position_term(self, name, scale):
        # Vaswani et al. sec. 3.4: (word + type) × √E + PE, then (ours) LayerNorm. Unscaled,
        # embeddings of std 0.02 are swamped by the sinusoid's amplitude 1.
        config = tiny.model_config(vocab_size=V, max_len=16, position=name)
        ids, types, pos = _ids(), jnp.ones((B, L), jnp.int32), jnp.arange(L)
        embeddings = model_lib.Embeddings(config)
        variables = embeddings.init(jax.random.key(0), ids, types, pos, True)
        got = embeddings.apply(variables, ids, types, pos, True)
        p = variables["params"]
        x = p["word_embeddings"]["embedding"][ids] + p["token_type_embeddings"]["embedding"][types]
        x = x * scale
        if name == "sinusoidal":
            x = x + positions.sinusoidal_embedding(pos, 64)
        elif name == "learned":
            x = x + p["position_embeddings"]["embedding"][pos]
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        want = (x - mean) / jnp.sqrt(var + config.layer_norm_eps)  # LayerNorm at its init
        chex.assert_trees_all_close(got, want, atol=1e-5)

    def test_a_learned_table_started_at_the_sinusoid_is_the_sinusoid_until_trained(self):
        ids = _ids()
        fixed, fixed_vars = _model("sinusoidal")
        learned, learned_vars = _model("learned_sinusoid")
        params = flax.core.unfreeze(learned_vars["params"])
        table = params["embeddings"].pop("position_embeddings")["embedding"]
        # The same function's values, looked up or computed: the same floats.
        chex.assert_trees_all_equal(table, positions.sinusoidal_embedding(jnp.arange(16), 64))
        chex.assert_trees_all_equal(params, fixed_vars["params"])  # the same other weights
        chex.assert_trees_all_equal(
            learned.apply(learned_vars, ids).logits, fixed.apply(fixed_vars, ids).logits
        )

        def loss(variables):
            return jnp.sum(learned.apply(variables, ids).logits ** 2)

        # Jitted: op by op, the backward pass compiled each of its primitives on its own.
        grad = jax.jit(jax.grad(loss))(learned_vars)["params"]["embeddings"]["position_embeddings"]
        self.assertGreater(float(jnp.abs(grad["embedding"][:L]).max()), 0.0)  # it trains

    def test_sinusoid_is_vaswani_formula(self):
        pos = np.arange(50)
        got = positions.sinusoidal_embedding(jnp.asarray(pos), 16)
        theta = 10000.0 ** (-np.arange(0, 16, 2) / 16)
        want = np.zeros((50, 16))
        want[:, 0::2], want[:, 1::2] = np.sin(pos[:, None] * theta), np.cos(pos[:, None] * theta)
        chex.assert_trees_all_close(got, want.astype(np.float32), atol=1e-5)


MROPE_SECTION = {"axes": 3, "scaling": {"mrope_section": [2, 3, 3]}}
MROPE = dict(position="rope_nd", sections={"rope_nd": MROPE_SECTION})


def _nd(**section):
    """rope_nd's model settings with `section`'s fields over M-RoPE's."""
    return dict(position="rope_nd", sections={"rope_nd": {**MROPE_SECTION, **section}})


def _axes_ids(axes, seed=2):
    return jnp.asarray(np.random.default_rng(seed).integers(0, 30, (B, L, axes)), jnp.int32)


class MultiAxisTest(parameterized.TestCase):
    def test_one_axis_is_rope(self):
        model, variables = _model("rope")
        ids = _ids()
        want = model.apply(variables, ids, position_ids=jnp.arange(L) * 7)
        nd, _ = _model("rope_nd")
        got = nd.apply(variables, ids, position_ids=(jnp.arange(L) * 7)[:, None])
        chex.assert_trees_all_close(got, want, atol=1e-6, rtol=0)

    def test_mrope_model_reads_three_axes(self):
        model, variables = _model(**MROPE)
        ids, where = _ids(), _axes_ids(3)
        run = jax.jit(lambda p: model.apply(variables, ids, position_ids=p).hidden_states)
        out = run(where)
        for axis in range(3):  # relative on each axis ...
            shift = 1000 * (jnp.arange(3) == axis)
            chex.assert_trees_all_close(run(where + shift), out, atol=2e-5)
            # ... and each axis matters
            moved = run(where * (1 + (jnp.arange(3) == axis)))
            self.assertGreater(float(jnp.abs(moved - out).max()), 1e-3)
        # Positions [B, L] are every axis alike, as HF's M-RoPE reads text.
        text = jnp.broadcast_to(jnp.arange(L)[None, :, None], (B, L, 3))
        chex.assert_trees_all_equal(run(jnp.arange(L)[None].repeat(B, 0)), run(text))
        with self.assertRaisesRegex(ValueError, r"position_ids has shape \(2, 8, 2\).*3 axes"):
            model.apply(variables, ids, position_ids=_axes_ids(2))

    def test_mrope_sections_must_match_the_axes(self):
        with self.assertRaisesRegex(ValueError, "mrope_section \\[2, 3, 3\\] has 3 axes"):
            _model(**_nd(axes=2))
        with self.assertRaisesRegex(ValueError, "add up to 7 pairs"):
            _model(**_nd(scaling={"mrope_section": [2, 3, 2]}))
        with self.assertRaisesRegex(ValueError, "not plain RoPE"):
            _model(**_nd(scaling={"rope_type": "linear", "factor": 2.0}))

    def test_cached_steps_take_positions_on_axes(self):
        model, variables = _model(**MROPE, causal=True, num_layers=1)
        ids, where = _ids(), _axes_ids(3)
        want = jax.jit(model.apply)(variables, ids, position_ids=where).logits

        @jax.jit
        def step(cache, ids, where):  # one token at a time: one compilation
            return model.apply(
                {**variables, **cache}, ids, position_ids=where, decode_length=L, mutable=["cache"]
            )

        cache, logits = {}, []
        for i in range(L):
            out, cache = step(cache, ids[:, i : i + 1], where[:, i : i + 1])  # [B, 1, A]
            logits.append(out.logits)
        chex.assert_trees_all_close(jnp.concatenate(logits, 1), want, atol=1e-4)


class LearnedFrequencyTest(absltest.TestCase):
    def test_init_is_ropes_then_trains_and_restores(self):
        learned = {"axes": 2, "per_head": True}
        config = dict(position="rope_learned", sections={"rope_learned": learned}, num_layers=1)
        model, variables = _model(**config)
        attention_params = variables["params"]["encoder"]["layer_0"]["attention"]
        freqs = attention_params["rope_frequencies"]["frequencies"]
        chex.assert_shape(freqs, (4, 2, 8))  # [N, A, P]: RoPE-Mixed, per head
        ids, where = _ids(), _axes_ids(2)
        fixed, _ = _model("rope_nd", sections={"rope_nd": {"axes": 2}}, num_layers=1)
        # Initialised to RoPE-Axial's frequencies, as float32 (fixed: exact phases).
        chex.assert_trees_all_close(
            jax.jit(model.apply)(variables, ids, position_ids=where),
            jax.jit(fixed.apply)(variables, ids, position_ids=where),
            atol=1e-5,
        )

        @jax.jit
        @jax.value_and_grad
        def loss(params):
            out = model.apply({"params": params}, ids, position_ids=where).logits
            return jnp.mean(jax.nn.log_softmax(out)[..., 0])

        before, grads = loss(variables["params"])
        grad = grads["encoder"]["layer_0"]["attention"]["rope_frequencies"]["frequencies"]
        chex.assert_tree_all_finite(grad)
        self.assertGreater(float(jnp.abs(grad).max()), 1e-4)  # the frequencies are trained
        # A small step on the frequencies alone lowers the loss.
        trained = jax.tree_util.tree_map_with_path(
            lambda path, p, g: p - 1e-3 * g / jnp.abs(g).max() if "rope_freq" in str(path) else p,
            variables["params"],
            grads,
        )
        self.assertLess(loss(trained)[0], before)
        restored = flax.serialization.from_bytes(
            variables["params"], flax.serialization.to_bytes(trained)
        )
        chex.assert_trees_all_equal(restored, trained)


@dataclasses.dataclass(frozen=True)
class StrideSection(Section):
    """The toy's hyperparameter: positions read at `stride` times their distance."""

    stride: int = 2

    def __post_init__(self):
        super().__post_init__()
        if self.stride < 1:
            raise ValueError(f"stride={self.stride} must be >= 1")


def _strided(section, config, position_ids, seq_len, layer, x, segment_ids):
    return rope.rope_rotation(section.stride * position_ids)


class AddAnEncodingTest(absltest.TestCase):
    """docs/model.md's recipe: one definition (StrideSection, _strided) and one entry of
    ENCODINGS, its hyperparameter set in the config's section."""

    def test_a_new_encoding_with_a_hyperparameter_is_one_definition_and_one_entry(self):
        strided = positions.PositionEncoding(section=StrideSection, rotation=_strided)
        ids = _ids()
        with mock.patch.dict(positions.ENCODINGS, strided=strided):
            model, variables = _model("strided", sections={"strided": {"stride": 3}})
            self.assertEqual(model.config.position_section, StrideSection(3))
            got = model.apply(variables, ids)
            from_dict = model_config.model_config_from_dict(
                {**dataclasses.asdict(model.config), "sections": {"strided": {"stride": 3}}}
            )
            self.assertEqual(from_dict, model.config)
            with self.assertRaisesRegex(ValueError, "stride=0 must be >= 1"):
                _model("strided", sections={"strided": {"stride": 0}})
        rope_model, _ = _model("rope")
        want = rope_model.apply(variables, ids, position_ids=3 * jnp.arange(L))
        chex.assert_trees_all_close(got, want, atol=1e-6, rtol=0)
        self.assertNotIn("strided", tiny.model_config().sections)


if __name__ == "__main__":
    absltest.main()
