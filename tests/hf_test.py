"""Tests for roformer_jax/hf.py: HF's own golden values, save and load.

They run with the project's own dependencies; the parity with transformers, which needs
`pip install torch==2.13.0 transformers`, is hf_parity_test.py's.
"""

import dataclasses
import json
import os
import pickle
import sys
import tempfile
from unittest import mock

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
import traces
from absl.testing import absltest, parameterized
from hf_cases import _random_variables, _tiny_config

from roformer_jax import hf
from roformer_jax.nn import heads, rope, rope_phase

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
            hf.save_hf_roformer(model, loaded, os.path.join(d, "b"))  # what load returned
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

    def test_weights_that_do_not_fit_the_config_are_refused_by_name(self):
        config = _tiny_config()
        _, variables = _random_variables(config, True)
        with tempfile.TemporaryDirectory() as d:
            wider = dataclasses.replace(config, vocab_size=config.vocab_size + 1)
            with self.assertRaisesRegex(ValueError, r"word_embeddings/embedding has shape"):
                hf.save_hf_roformer(wider, variables, d)
            with self.assertRaisesRegex(ValueError, r"expected \{'params': ...\}"):
                hf.save_hf_roformer(config, variables["params"], d)
            task = heads.TaskModel(config, "sequence_classification", 3)
            task_variables = task.init(jax.random.key(0), np.zeros((1, 4), np.int32))
            with self.assertRaisesRegex(ValueError, r"out_proj/bias has shape \(3,\).*\(5,\)"):
                hf.save_hf_roformer(dataclasses.replace(task, num_labels=5), task_variables, d)
            self.assertFalse(os.listdir(d))  # nothing written
            hf.save_hf_roformer(config, variables, d)
            with open(os.path.join(d, "config.json"), encoding="utf-8") as f:
                hf_config = json.load(f)
            hf_config["max_position_embeddings"] //= 2  # the stored table is longer
            with open(os.path.join(d, "config.json"), "w", encoding="utf-8") as f:
                json.dump(hf_config, f)
            with self.assertRaisesRegex(ValueError, r"embed_positions.weight has shape"):
                hf.load_hf_roformer(d)

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
            (dict(sections={"softmax": {"window": 4}}), "'sections.softmax.window': 4"),
            (dict(causal=True, sections={"softmax": {"gate": "fixed"}}), "sections.softmax.gate"),
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


if __name__ == "__main__":
    absltest.main()
