"""Tests for roformer_jax/hf.py: HF's own golden values, save/load, parity with transformers.

The parity tests need `pip install torch==2.13.0 transformers` and are skipped without them;
everything else runs with the project's own dependencies.
"""

import json
import os
import pickle
import sys
import tempfile
import unittest
from unittest import mock

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
import tiny
import traces
from absl.testing import absltest, parameterized

from roformer_jax import hf
from roformer_jax.nn import decoding, heads, rope, rope_phase
from roformer_jax.nn import model as model_lib

try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None
NO_TRANSFORMERS = "needs transformers and torch: pip install torch==2.13.0 transformers"

# From transformers tests/models/roformer/test_modeling_roformer.py.
HF_TABLE_6x6_ROWS_0_1 = [
    [0.0000, 0.0000, 0.0000, 1.0000, 1.0000, 1.0000],
    [0.8415, 0.0464, 0.0022, 0.5403, 0.9989, 1.0000],
]
HF_TABLE_512x512_SLICE = [  # weight[:3, :5]
    [0.0000, 0.0000, 0.0000, 0.0000, 0.0000],
    [0.8415, 0.8219, 0.8020, 0.7819, 0.7617],
    [0.9093, 0.9364, 0.9581, 0.9749, 0.9870],
]
HF_ROTATED_QUERY_SLICE = [  # query_layer[0, 0, :6, :8]; the key is its negation
    [0.0000, 0.0100, 0.0200, 0.0300, 0.0400, 0.0500, 0.0600, 0.0700],
    [-0.2012, 0.8897, 0.0263, 0.9401, 0.2074, 0.9463, 0.3481, 0.9343],
    [-1.7057, 0.6271, -1.2145, 1.3897, -0.6303, 1.7647, -0.1173, 1.8985],
    [-2.1731, -1.6397, -2.7358, 0.2854, -2.1840, 1.7183, -1.3018, 2.4871],
    [0.2717, -3.6173, -2.9206, -2.1988, -3.6638, 0.3858, -2.9155, 2.2980],
    [3.9859, -2.1580, -0.7984, -4.4904, -4.1181, -2.0252, -4.4782, 1.1253],
]
HF_TOLERANCE = 1e-4  # the tolerance of those HF tests (values printed to 4 decimals)
PARITY_TOLERANCE = 1e-5  # max abs difference against transformers, float32


def _hf_style_rotation(x, table):
    """HF's apply_rotary_position_embeddings, transcribed to numpy: x [B, N, L, H]."""
    sin, cos = np.split(table[None, None], 2, axis=-1)
    sin_pos = np.stack([sin, sin], axis=-1).reshape(table[None, None].shape)
    cos_pos = np.stack([cos, cos], axis=-1).reshape(table[None, None].shape)
    rotate_half = np.stack([-x[..., 1::2], x[..., ::2]], axis=-1).reshape(x.shape)
    return x * cos_pos + rotate_half * sin_pos


class _RunsCode:
    """What a malicious pickle holds: unpickling it calls a function of the file's choice."""

    def __reduce__(self):
        return (os.getcwd, ())


class GoldenValuesTest(parameterized.TestCase):
    """HF's RoFormer golden values, reproduced with hf.py's table and rope.py's rotation."""

    def test_sinusoidal_table(self):
        np.testing.assert_allclose(
            hf.hf_sinusoidal_table(6, 6)[:2], HF_TABLE_6x6_ROWS_0_1, atol=HF_TOLERANCE
        )
        np.testing.assert_allclose(
            hf.hf_sinusoidal_table(512, 512)[:3, :5], HF_TABLE_512x512_SLICE, atol=HF_TOLERANCE
        )

    def test_table_halves_hold_ropes_angles(self):
        # [sin | cos] of the same angles m θ_i that rope.py rotates pair i by.
        angles = rope_phase.rotation_angles(jnp.arange(64), 16)  # [L, H/2]
        expected = np.concatenate([np.sin(angles), np.cos(angles)], axis=-1)
        np.testing.assert_allclose(hf.hf_sinusoidal_table(64, 16), expected, atol=1e-6)

    def test_rotated_query_and_key(self):
        query = np.arange(2 * 12 * 16 * 64, dtype=np.float32).reshape(2, 12, 16, 64) / 100
        positions = jnp.arange(16)
        # HF's layout is [B, N, L, H]; ours [B, L, N, H]. layout="interleaved" is HF's pairing.
        ours = rope.apply_rope(query.transpose(0, 2, 1, 3), positions, layout="interleaved")
        ours = np.asarray(ours).transpose(0, 2, 1, 3)
        key = np.asarray(rope.apply_rope(-query, positions, seq_axis=-2))  # [B, N, L, H]
        np.testing.assert_allclose(ours[0, 0, :6, :8], HF_ROTATED_QUERY_SLICE, atol=HF_TOLERANCE)
        np.testing.assert_allclose(
            key[0, 0, :6, :8], -np.array(HF_ROTATED_QUERY_SLICE), atol=HF_TOLERANCE
        )
        # The whole tensor, against HF's rotation fed with HF's [sin | cos] table.
        reference = _hf_style_rotation(query, hf.hf_sinusoidal_table(32, 64)[:16])
        # Entries reach 246, whose float32 ulp is 1.5e-5; x cos - y sin cancels a few ulps.
        np.testing.assert_allclose(ours, reference, atol=2e-4)
        # The "half" (GPT-NeoX) pairing is a different rotation: the layout is what matters.
        half = rope.apply_rope(query, positions, layout="half", seq_axis=-2)
        self.assertGreater(float(np.abs(np.asarray(half) - reference).max()), 1.0)


def _tiny_config(**overrides):
    return tiny.model_config(
        **{
            **dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37),
            **dict(max_len=64, initializer_range=0.2),
            **overrides,
        }
    )


def _random_variables(config, with_mlm_head=True, seed=0):
    """Random parameters of the model's shapes; LayerNorms and biases non-trivial too, so that
    a swapped or transposed weight shows."""
    model = model_lib.RoFormer(config, with_mlm_head=with_mlm_head)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    rng = np.random.default_rng(seed)
    params = {
        path: np.float32((path[-1] == "scale") + rng.normal(0, 0.2, x.shape))
        for path, x in flax.traverse_util.flatten_dict(shapes).items()
    }
    return model, flax.traverse_util.unflatten_dict(params)


class SaveLoadTest(parameterized.TestCase):
    @parameterized.parameters(
        dict(overrides={}, with_mlm_head=True),
        dict(overrides={}, with_mlm_head=False),
        dict(overrides=dict(embedding_size=24, rotary_value=True), with_mlm_head=True),
        dict(overrides=dict(causal=True), with_mlm_head=True),
    )
    def test_load_save_load_is_identity(self, overrides, with_mlm_head):
        config = _tiny_config(**overrides)
        _, variables = _random_variables(config, with_mlm_head)
        with tempfile.TemporaryDirectory() as d:
            # A pair head ("mlm_same_doc" pre-training) has no HF name: it is left out.
            pair_head = {"kernel": np.ones((config.hidden_size, 2)), "bias": np.zeros(2)}
            with_pair = {"params": {**variables["params"], "pair_head": pair_head}}
            hf.save_hf_roformer(config, with_pair, os.path.join(d, "a"))
            model, loaded = hf.load_hf_roformer(os.path.join(d, "a"))
            hf.save_hf_roformer(model.config, loaded, os.path.join(d, "b"))
            with traces.counted() as traced:  # the model's shapes: traced for "a" only
                model_b, loaded_b = hf.load_hf_roformer(os.path.join(d, "b"))
            self.assertEqual(traced["init"], 0)
            first = hf.read_hf_state_dict(os.path.join(d, "a"))
            second = hf.read_hf_state_dict(os.path.join(d, "b"))
        self.assertEqual(model.config, config)
        self.assertEqual(model_b.config, config)
        self.assertEqual(model.with_mlm_head, with_mlm_head)
        chex.assert_trees_all_equal(loaded, variables)
        chex.assert_trees_all_equal(loaded_b, loaded)
        chex.assert_trees_all_equal(first, second)
        # RoFormerForMaskedLM's names when there is a head, RoFormerModel's otherwise.
        prefix = "roformer." if with_mlm_head else ""
        self.assertIn(f"{prefix}encoder.layer.1.attention.self.query.weight", first)

    @parameterized.parameters(
        dict(causal=False, with_mlm_head=True, architecture="RoFormerForMaskedLM"),
        dict(causal=True, with_mlm_head=True, architecture="RoFormerForCausalLM"),
        dict(causal=False, with_mlm_head=False, architecture="RoFormerModel"),
        dict(causal=True, with_mlm_head=False, architecture="RoFormerModel"),
    )
    def test_config_to_hf_names_the_architecture(self, causal, with_mlm_head, architecture):
        hf_config = hf.config_to_hf(_tiny_config(causal=causal), with_mlm_head=with_mlm_head)
        self.assertEqual(hf_config["architectures"], [architecture])
        self.assertIs(hf_config["is_decoder"], causal)
        self.assertEqual(hf.config_from_hf(hf_config).causal, causal)

    def test_flax_msgpack(self):
        # HF Flax's tree: torch names split on ".", kernels [in, out], no position table.
        config = _tiny_config()
        _, variables = _random_variables(config)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            state = hf.read_hf_state_dict(d)
            os.remove(os.path.join(d, "model.safetensors"))
            tree = {}
            for name, value in state.items():
                if name.endswith("embed_positions.weight"):
                    continue
                path = tuple(name.split("."))
                leaf = {"LayerNorm": "scale", "embeddings": "embedding"}.get(path[-2], "kernel")
                if path[-1] == "weight":
                    path, value = (*path[:-1], leaf), (value.T if leaf == "kernel" else value)
                tree[path] = value
            with open(os.path.join(d, "flax_model.msgpack"), "wb") as f:
                f.write(
                    flax.serialization.msgpack_serialize(flax.traverse_util.unflatten_dict(tree))
                )
            _, loaded = hf.load_hf_roformer(d)
        chex.assert_trees_all_equal(loaded, variables)

    def test_pytorch_bin_without_torch_says_so(self):
        config = _tiny_config()
        _, variables = _random_variables(config)
        with tempfile.TemporaryDirectory() as d, mock.patch.dict(sys.modules, {"torch": None}):
            hf.save_hf_roformer(config, variables, d)
            os.rename(os.path.join(d, "model.safetensors"), os.path.join(d, "pytorch_model.bin"))
            with self.assertRaisesRegex(ImportError, "pytorch_model.bin is a torch pickle"):
                hf.load_hf_roformer(d)

    def test_a_pickle_that_runs_code_is_refused_without_torchs_advice(self):
        config = _tiny_config()
        _, variables = _random_variables(config)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            os.remove(os.path.join(d, "model.safetensors"))
            with open(os.path.join(d, "pytorch_model.bin"), "wb") as f:
                pickle.dump({"x": _RunsCode()}, f, protocol=2)
            with self.assertRaisesRegex(ValueError, r"objects other than tensors.*refused") as e:
                hf.load_hf_roformer(d)
            self.assertNotIn("weights_only", str(e.exception))
            with mock.patch("torch.__version__", "2.5.1"):
                with self.assertRaisesRegex(ValueError, r"torch 2.5.1's weights_only load can run"):
                    hf.load_hf_roformer(d)

    def test_a_shard_outside_the_checkpoint_is_refused(self):
        config = _tiny_config()
        _, variables = _random_variables(config)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            os.remove(os.path.join(d, "model.safetensors"))
            with open(os.path.join(d, "model.safetensors.index.json"), "w") as f:
                json.dump({"weight_map": {"a": "../elsewhere/model.safetensors"}}, f)
            with self.assertRaisesRegex(ValueError, r"names a shard outside .*'\.\./elsewhere"):
                hf.load_hf_roformer(d)

    def test_save_rejects_what_hf_cannot_express(self):
        for overrides, message in (
            (dict(position="learned"), "position"),
            (dict(attention="linear"), "attention"),
            (dict(pre_ln=True), "pre_ln"),
            (dict(num_kv_heads=2), "'num_kv_heads': 2"),
            (dict(window=4), "'window': 4"),
        ):
            config = _tiny_config(**overrides)
            _, variables = _random_variables(config)
            with tempfile.TemporaryDirectory() as d, self.assertRaisesRegex(ValueError, message):
                hf.save_hf_roformer(config, variables, d)

    def test_load_errors_name_the_problem(self):
        config = _tiny_config()
        _, variables = _random_variables(config)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            state = hf.read_hf_state_dict(d)
            os.remove(os.path.join(d, "model.safetensors"))
            with self.assertRaisesRegex(ValueError, r"no model.safetensors.*\['config.json'\]"):
                hf.load_hf_roformer(d)
            del state["roformer.encoder.layer.1.output.dense.bias"]
            state["cls.predictions.decoder.weight"] = (
                state["roformer.embeddings.word_embeddings.weight"] + 1
            )
            safetensors.numpy.save_file(state, os.path.join(d, "model.safetensors"))
            with self.assertRaisesRegex(
                ValueError, r"lacks \['encoder.layer.1.output.dense.bias'\]"
            ):
                hf.load_hf_roformer(d)
            state["roformer.encoder.layer.1.output.dense.bias"] = np.zeros(32, np.float32)
            safetensors.numpy.save_file(state, os.path.join(d, "model.safetensors"))
            with self.assertRaisesRegex(ValueError, r"decoder.weight is not .*untied"):
                hf.load_hf_roformer(d)
            with open(os.path.join(d, "config.json")) as f:
                hf_config = json.load(f)
            with open(os.path.join(d, "config.json"), "w") as f:
                json.dump({**hf_config, "is_decoder": True, "add_cross_attention": True}, f)
            with self.assertRaisesRegex(ValueError, "add_cross_attention=True: cross-attention"):
                hf.load_hf_roformer(d)


# transformers 5.9 to 5.17 built RoFormerForCausalLM's mask without the causal part: each
# token saw the tokens after it (5.8 and 5.18 on do not; checked on every release between).
_HF_CAUSAL = (
    f"transformers {transformers.__version__ if transformers else None}'s "
    "RoFormerForCausalLM (5.9 to 5.17 attend to later tokens)"
)


def _hf_model(cls, seed, **config_overrides):
    torch.manual_seed(seed)
    config = transformers.RoFormerConfig(
        **{
            **dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
            **dict(intermediate_size=37, max_position_embeddings=64),
            **config_overrides,
        }
    )
    model = cls(config).eval()
    with torch.no_grad():  # HF initializes LayerNorms to 1 and biases to 0: perturb everything
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(seed=0, b=3, length=12, vocab=99):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (b, length))
    types = rng.integers(0, 2, (b, length))
    mask = np.ones((b, length), np.int64)
    mask[1, 7:] = 0  # padded rows: HF and we must agree on the padded positions too
    mask[2, 3:] = 0
    return ids, types, mask


def _max_diff(ours, theirs):
    return float(np.abs(np.asarray(ours, np.float64) - theirs.detach().numpy()).max())


@unittest.skipIf(transformers is None, NO_TRANSFORMERS)
class TransformersParityTest(parameterized.TestCase):
    @parameterized.named_parameters(
        dict(testcase_name="plain", overrides={}),
        dict(testcase_name="embedding_size", overrides=dict(embedding_size=24)),
        dict(testcase_name="rotary_value", overrides=dict(rotary_value=True)),
    )
    def test_masked_lm(self, overrides):
        theirs = _hf_model(transformers.RoFormerForMaskedLM, 0, **overrides)
        ids, types, mask = _batch()
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        t = [torch.tensor(x) for x in (ids, mask, types)]
        with torch.no_grad():
            hidden = theirs.roformer(t[0], attention_mask=t[1], token_type_ids=t[2])
            logits = theirs(t[0], attention_mask=t[1], token_type_ids=t[2]).logits
        self.assertLessEqual(
            _max_diff(out.hidden_states, hidden.last_hidden_state), PARITY_TOLERANCE
        )
        self.assertLessEqual(_max_diff(out.logits, logits), PARITY_TOLERANCE)

    def test_causal_lm(self):
        theirs = _hf_model(transformers.RoFormerForCausalLM, 3, is_decoder=True)
        ids, types, mask = _batch(seed=3)
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        self.assertTrue(model.config.causal)
        self.assertTrue(model.with_mlm_head)

        def our_logits(batch):
            out = model.apply(variables, batch, attention_mask=mask, token_type_ids=types)
            return np.asarray(out.logits)

        def hf_logits(batch):
            with torch.no_grad():
                t = [torch.tensor(x) for x in (batch, mask, types)]
                return theirs(t[0], attention_mask=t[1], token_type_ids=t[2]).logits.numpy()

        # Row 0 has no padding: a token changed at position 6 moves the logits from 6 on only.
        changed = ids.copy()
        changed[0, 6] = ids[0, 6] % 98 + 1
        for name, logits in (("ours", our_logits), (_HF_CAUSAL, hf_logits)):
            before, after = logits(ids)[0], logits(changed)[0]
            np.testing.assert_allclose(after[:6], before[:6], atol=1e-6, err_msg=name)
            self.assertGreater(float(np.abs(after[6:] - before[6:]).min()), 0.0)
        real = mask.astype(bool)  # padded positions predict nothing; compare the real tokens
        difference = np.abs(our_logits(ids)[real] - hf_logits(ids)[real]).max()
        self.assertLessEqual(float(difference), PARITY_TOLERANCE)

    def test_greedy_generation_equals_transformers(self):
        theirs = _hf_model(transformers.RoFormerForCausalLM, 4, is_decoder=True)
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        ids, _, _ = _batch(seed=4, length=6)
        mask = np.ones_like(ids)
        mask[1, :2] = mask[2, :4] = 0  # left-padded prompts, as transformers wants them
        ours = decoding.generate(model, variables, ids, attention_mask=mask, max_new_tokens=8)
        with torch.no_grad():
            expected = theirs.generate(
                torch.tensor(ids),
                attention_mask=torch.tensor(mask),
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=0,
            )
        np.testing.assert_array_equal(np.asarray(ours)[:, 6:], expected.numpy()[:, 6:])

    def test_base_model_from_pytorch_bin(self):
        theirs = _hf_model(transformers.RoFormerModel, 1)
        ids, types, mask = _batch(seed=1)
        with tempfile.TemporaryDirectory() as d:
            theirs.config.save_pretrained(d)
            torch.save(theirs.state_dict(), os.path.join(d, "pytorch_model.bin"))
            model, variables = hf.load_hf_roformer(d)
        self.assertFalse(model.with_mlm_head)
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        self.assertIsNone(out.logits)
        with torch.no_grad():
            expected = theirs(*[torch.tensor(x) for x in (ids, mask, types)]).last_hidden_state
        self.assertLessEqual(_max_diff(out.hidden_states, expected), PARITY_TOLERANCE)

    def test_transformers_loads_what_we_save(self):
        config = _tiny_config(embedding_size=24)
        model, variables = _random_variables(config)
        ids, types, mask = _batch(seed=2)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            theirs, info = transformers.RoFormerForMaskedLM.from_pretrained(
                d, output_loading_info=True
            )
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), (set(), set()))
        theirs.eval()
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        with torch.no_grad():
            logits = theirs(*[torch.tensor(x) for x in (ids, mask, types)]).logits
        self.assertLessEqual(_max_diff(out.logits, logits), PARITY_TOLERANCE)

    def test_transformers_causal_lm_loads_what_we_save(self):
        config = _tiny_config(causal=True)
        model, variables = _random_variables(config, seed=4)
        ids, types, mask = _batch(seed=4)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            theirs, info = transformers.RoFormerForCausalLM.from_pretrained(
                d, output_loading_info=True
            )
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), (set(), set()))
        self.assertTrue(theirs.config.is_decoder)
        self.assertEqual(theirs.config.architectures, ["RoFormerForCausalLM"])
        theirs.eval()
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        with torch.no_grad():
            logits = theirs(*[torch.tensor(x) for x in (ids, mask, types)]).logits
        real = mask.astype(bool)
        self.assertLessEqual(
            _max_diff(out.logits[real], logits[real]), PARITY_TOLERANCE, msg=_HF_CAUSAL
        )


# (HF class, its RoFormerConfig overrides); regression is sequence classification with one label.
TASKS = [
    dict(testcase_name="sequence_classification", cls="SequenceClassification", num_labels=3),
    dict(testcase_name="regression", cls="SequenceClassification", num_labels=1),
    dict(testcase_name="token_classification", cls="TokenClassification", num_labels=5),
    dict(testcase_name="question_answering", cls="QuestionAnswering", num_labels=2),
    dict(testcase_name="multiple_choice", cls="MultipleChoice", num_labels=2),
    # HF's summary_type: the last token by default, [CLS] when config.json says "first".
    dict(
        testcase_name="multiple_choice_first",
        cls="MultipleChoice",
        num_labels=2,
        summary_type="first",
    ),
]


def _task_batch(cls, seed):
    """A padded batch with token types; choices [1, 3, L] for multiple choice."""
    ids, types, mask = _batch(seed=seed)
    if cls == "MultipleChoice":  # the padded rows become padded choices
        return tuple(x.reshape(1, 3, -1) for x in (ids, types, mask))
    return ids, types, mask


def _task_diff(model, variables, theirs, batch):
    """Max abs difference of every output (logits; start_logits, end_logits) against HF's."""
    ids, types, mask = batch
    out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        expected = theirs(*[torch.tensor(x) for x in (ids, mask, types)])
    return max(_max_diff(getattr(out, field), expected[field]) for field in out._fields)


@unittest.skipIf(transformers is None, NO_TRANSFORMERS)
class TaskHeadParityTest(parameterized.TestCase):
    def test_every_head_has_an_hf_architecture(self):
        self.assertEqual(
            {
                hf.config_to_hf(_tiny_config(), with_mlm_head=False, head=h)["architectures"][0]
                for h in heads.HEADS
            },
            {f"RoFormerFor{t['cls']}" for t in TASKS},
        )
        for architecture in hf._TASK_ARCHITECTURES:
            self.assertTrue(hasattr(transformers, architecture), architecture)

    @parameterized.named_parameters(TASKS)
    def test_load_equals_transformers(self, cls, num_labels, summary_type="last"):
        theirs = _hf_model(
            getattr(transformers, f"RoFormerFor{cls}"),
            5,
            num_labels=num_labels,
            summary_type=summary_type,
        )
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        self.assertIsInstance(model, heads.TaskModel)
        self.assertEqual(model.summary_type, summary_type)
        self.assertEqual(
            f"RoFormerFor{cls}",
            hf.config_to_hf(model.config, with_mlm_head=False, head=model.head)["architectures"][0],
        )
        self.assertEqual(model.num_labels, num_labels)
        difference = _task_diff(model, variables, theirs, _task_batch(cls, seed=5))
        self.assertLessEqual(difference, PARITY_TOLERANCE)

    @parameterized.named_parameters(TASKS)
    def test_transformers_loads_what_we_save(self, cls, num_labels, summary_type="last"):
        head = hf._TASK_ARCHITECTURES[f"RoFormerFor{cls}"]
        model = heads.TaskModel(_tiny_config(), head, num_labels, summary_type)
        shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 1, 1), jnp.int32))
        rng = np.random.default_rng(6)
        variables = jax.tree.map(lambda x: np.float32(rng.normal(0, 0.2, x.shape)), shapes)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(model, variables, d)
            theirs, info = getattr(transformers, f"RoFormerFor{cls}").from_pretrained(
                d, output_loading_info=True
            )
            ours, loaded = hf.load_hf_roformer(d)
            names = set(hf.read_hf_state_dict(d))
        # HF's names exactly (transformers also accepts some misplaced prefixes silently).
        self.assertEqual(names, set(theirs.state_dict()))
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), (set(), set()))
        self.assertEqual(theirs.config.num_labels, num_labels)
        self.assertEqual(theirs.config.problem_type, "regression" if num_labels == 1 else None)
        self.assertEqual(ours, model)
        chex.assert_trees_all_equal(loaded, variables)
        difference = _task_diff(model, variables, theirs.eval(), _task_batch(cls, seed=6))
        self.assertLessEqual(difference, PARITY_TOLERANCE)

    @parameterized.parameters(
        dict(summary_type="mean"),  # HF's mean counts padding: not a token's state
        dict(summary_type="first", summary_use_proj=True),
        dict(summary_type="last", summary_activation="tanh"),
    )
    def test_multiple_choice_summary_other_than_a_tokens_state_is_refused(self, **summary):
        theirs = _hf_model(transformers.RoFormerForMultipleChoice, 7, **summary)
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            with self.assertRaisesRegex(
                ValueError, f"'summary_type': '{summary['summary_type']}'.* not supported"
            ):
                hf.load_hf_roformer(d)


if __name__ == "__main__":
    absltest.main()
