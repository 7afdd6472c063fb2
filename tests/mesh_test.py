"""Tests for roformer_jax/training/mesh.py: the mesh config, the rules table, and the step
jitted over a mesh of 8 fake CPU devices equal to one device and to pmap."""

import functools
import json
import os
import pickle
import subprocess
import sys

import jax
import jax.numpy as jnp
import mesh_cases
import numpy as np
import optax
import tiny
from absl.testing import absltest, parameterized
from jax.sharding import PartitionSpec as P

from configs import finetune_classification
from roformer_jax.nn import heads
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.positions import ENCODINGS
from roformer_jax.training import finetune, loop, provenance
from roformer_jax.training import mesh as mesh_lib
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training.finetune_config import finetune_experiment_from_dict
from roformer_jax.training.step import TrainState

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TMP = tiny.workdir("mesh_test_")
_SIZES = {"data": 2, "fsdp": 2, "tensor": 2, "context": 1}


def _env(devices: int) -> dict:
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count={devices}"
    path = os.pathsep.join([_ROOT, os.path.join(_ROOT, "tests")])
    return dict(os.environ, XLA_FLAGS=flags, PYTHONPATH=path)


@functools.cache
def _cases() -> dict:
    """mesh_cases.py's numbers on 8 fake devices: one process, its compiles shared."""
    out = os.path.join(_TMP, "cases.pkl")
    command = [sys.executable, os.path.join(_ROOT, "tests", "mesh_cases.py"), out]
    done = subprocess.run(command, env=_env(8), capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise AssertionError(f"mesh_cases.py failed:\n{done.stderr[-3000:]}")
    with open(out, "rb") as f:
        return pickle.load(f)


class MeshConfigTest(parameterized.TestCase):
    @parameterized.parameters(
        (dict(data=8), {"data": 8, "fsdp": 1, "tensor": 1, "context": 1}),
        (dict(fsdp=2, tensor=2), _SIZES),  # data: the devices left
        (dict(data=2, fsdp=-1), {"data": 2, "fsdp": 4, "tensor": 1, "context": 1}),
        (dict(tensor=-1, data=1), {"data": 1, "fsdp": 1, "tensor": 8, "context": 1}),
    )
    def test_sizes_fill_the_devices(self, given, sizes):
        self.assertEqual(mesh_lib.MeshConfig(**given).sizes(8), sizes)

    def test_no_size_given_is_no_mesh(self):
        self.assertFalse(mesh_lib.MeshConfig().enabled)
        self.assertTrue(mesh_lib.MeshConfig(data=-1).enabled)

    @parameterized.parameters(dict(data=3), dict(fsdp=2, tensor=3), dict(data=16))
    def test_a_mesh_that_does_not_fit_the_devices_is_refused(self, **given):
        with self.assertRaisesRegex(ValueError, "does not fit 8 devices"):
            mesh_lib.MeshConfig(**given).sizes(8)

    def test_context_takes_devices_as_the_other_axes(self):
        sizes = mesh_lib.MeshConfig(context=2, tensor=2).sizes(8)
        self.assertEqual(sizes, {"data": 2, "fsdp": 1, "tensor": 2, "context": 2})

    @parameterized.parameters(dict(data=0), dict(data=-1, fsdp=-1))
    def test_sizes_below_one_but_one_minus_one_are_refused(self, **given):
        with self.assertRaisesRegex(ValueError, "mesh sizes"):
            mesh_lib.MeshConfig(**given)

    def test_heads_not_divisible_by_tensor_are_refused(self):
        with self.assertRaisesRegex(ValueError, "num_heads=4 is not divisible by mesh.tensor=8"):
            mesh_lib.check_heads(tiny.model_config(), 8)
        with self.assertRaisesRegex(ValueError, "num_kv_heads=2 is not .* mesh.tensor=4"):
            mesh_lib.check_heads(tiny.model_config(num_kv_heads=2), 4)
        mesh_lib.check_heads(tiny.model_config(num_kv_heads=2), 2)

    def test_the_experiment_config_reads_the_mesh_section(self):
        cfg = tiny.experiment_config(mesh__fsdp=2, mesh__tensor=2)
        self.assertEqual(cfg.mesh, mesh_lib.MeshConfig(fsdp=2, tensor=2))
        self.assertFalse(tiny.experiment_config().mesh.enabled)


def _param_shapes(**fields):
    model = RoFormer(tiny.model_config(**fields), with_pair_head=True)
    init = functools.partial(model.init, jax.random.key(0), jnp.zeros((1, 8), jnp.int32))
    return jax.eval_shape(init)["params"]


class RulesTest(parameterized.TestCase):
    @parameterized.parameters(
        *(
            dict(attention=a, position=p, causal=True)  # causal: what every encoding takes
            for a in ATTENTION_KINDS
            for p in ENCODINGS
            if a == "softmax" or p != "alibi"  # a bias needs the scores
        ),
        dict(embedding_size=32, pre_ln=True, num_kv_heads=2),
        dict(causal=True, sections={"softmax": {"gate": "learned", "output_gate": True}}),
        dict(position="rope_learned", sections={"rope_learned": {"per_head": True}}),
        dict(causal=True, sections={"softmax": {"sinks": True, "qk_norm": True}}),
    )
    def test_every_parameter_of_every_kind_has_logical_axes(self, **fields):
        specs = mesh_lib.parameter_specs(_param_shapes(**fields), _SIZES)
        self.assertNotEmpty(specs)

    @parameterized.parameters(*heads.HEADS)
    def test_every_parameter_of_every_task_head_has_logical_axes(self, head):
        model = heads.TaskModel(tiny.model_config(), head, 3, "last")
        ids = jnp.zeros((1, 2, 8) if head == "multiple_choice" else (1, 8), jnp.int32)
        params = jax.eval_shape(model.init, jax.random.key(0), ids)["params"]
        specs = mesh_lib.parameter_specs(params, _SIZES)
        head_specs = {path: spec for path, spec in specs.items() if path.startswith("head/")}
        self.assertNotEmpty(head_specs)
        if head == "sequence_classification":  # its dense layer splits as the MLM head's
            dense = P(("fsdp", "tensor"), None)
            self.assertEqual(head_specs["head/classifier/dense/kernel"], dense)

    def test_a_parameter_the_table_does_not_name_is_an_error(self):
        with self.assertRaisesRegex(ValueError, "encoder/gate/kernel .*PARAMETER_AXES"):
            mesh_lib.logical_axes("encoder/gate/kernel", 2)

    def test_tensor_takes_heads_and_features_fsdp_the_model_width(self):
        specs = mesh_lib.parameter_specs(_param_shapes(vocab_size=261), _SIZES)
        layer = "encoder/layer_0/"
        self.assertEqual(specs[layer + "attention/query/kernel"], P("fsdp", "tensor"))
        self.assertEqual(specs[layer + "attention/output/kernel"], P("tensor", "fsdp"))
        self.assertEqual(specs[layer + "output/kernel"], P("tensor", "fsdp"))
        self.assertEqual(specs[layer + "attention_norm/scale"], P(None))
        # 261 byte ids do not divide by 2: tensor goes to the width with fsdp.
        embedding = specs["embeddings/word_embeddings/embedding"]
        self.assertEqual(embedding, P(None, ("fsdp", "tensor")))
        self.assertEqual(specs["mlm_head/dense/kernel"], P(("fsdp", "tensor"), None))

    def test_optimizer_moments_follow_their_parameters(self):
        params = {"embeddings": {"word_embeddings": {"embedding": jnp.zeros((8, 64))}}}
        state = TrainState(jnp.zeros((), jnp.int32), params, optax.adam(1.0).init(params))
        specs = mesh_lib.state_specs(state, _SIZES)
        path = ("embeddings", "word_embeddings", "embedding")
        adam = specs.opt_state[0]
        for tree in (specs.params, adam.mu, adam.nu):
            self.assertEqual(functools.reduce(dict.get, path, tree), P("tensor", "fsdp"))
        self.assertEqual((specs.step, adam.count), (P(), P()))


class EightDevicesTest(parameterized.TestCase):
    """mesh_cases.py: tiny in one layer, dropout on, grad_accum 2, two steps."""

    def _assert_same_run(self, run, expected, what=("grads", "params")):
        for a, b in zip(expected["metrics"], run["metrics"], strict=True):
            for key in a:
                np.testing.assert_allclose(b[key], a[key], rtol=1e-5, err_msg=key)
        for name in what:
            jax.tree.map(
                functools.partial(
                    np.testing.assert_allclose, rtol=1e-4 if name == "grads" else 1e-5, atol=1e-5
                ),
                run[name],
                expected[name],
            )

    @parameterized.parameters("pmap", *mesh_cases.MESHES)
    def test_each_mesh_gives_the_numbers_of_one_device(self, name):
        self._assert_same_run(_cases()[name], _cases()["one"])

    @parameterized.parameters("data", "one")
    def test_a_checkpoint_saved_under_fsdp_restores_onto_another_mesh(self, target):
        # Saved sharded over 8 devices; restored replicated over 8, or onto one device: the
        # same bits, where the target wants them, and step 2 there gives the fsdp run's loss
        # and parameters.
        restored = _cases()["restored"][target]
        self.assertTrue(restored["exact"])
        self.assertTrue(restored["placed"])
        self._assert_same_run(restored, _cases()["fsdp"], what=("params",))

    @parameterized.parameters(*mesh_cases.MESHES)
    def test_what_the_rules_split_stays_split_after_a_step(self, name):
        run = _cases()[name]
        for spec, split in zip(run["specs"], run["split"], strict=True):
            self.assertEqual(split, any(axis is not None for axis in spec), spec)
        self.assertEqual(any(run["split"]), name not in mesh_cases.REPLICATED)

    def test_fsdp_and_tensor_hold_under_a_third_of_the_state(self):
        data_only, split = _cases()["data"]["bytes"], _cases()["data_fsdp_tensor"]["bytes"]
        self.assertLessEqual(split, 0.3 * data_only)


class EndToEndTest(absltest.TestCase):
    """experiments/train_mlm.py with --config.mesh.fsdp=2 --config.mesh.tensor=2
    --config.mesh.context=2 on 8 devices, as its config trained in this process on 1 (the
    flags' run, not the process, is under test): configs/tiny.py in one layer, dropout on
    (attention's too: ring attention draws the same masks), 3 steps."""

    _OVERRIDES = dict(
        model__num_layers=1,
        data__seq_len=32,
        data__valid_lengths=(64,),
        model__hidden_dropout=0.1,
        train__steps=3,
        train__log_every=1,
        train__eval_every=3,
        train__checkpoint_every=3,
        train__eval_batches=2,
        data__max_chars=100000,
        train__data_cache_dir=os.path.join(_TMP, "data"),
    )

    def _run(self, name: str, config: str, *flags, script="train_mlm.py", overrides=_OVERRIDES):
        workdir = os.path.join(_TMP, name)
        command = [
            sys.executable,
            os.path.join(_ROOT, "experiments", script),
            f"--config={os.path.join(_ROOT, 'configs', config)}",
            f"--workdir={workdir}",
            *(f"--config.{k.replace('__', '.')}={v}" for k, v in overrides.items()),
            *flags,
        ]
        done = subprocess.run(
            command, cwd=_ROOT, env=_env(8), capture_output=True, text=True, timeout=600
        )
        if done.returncode:
            raise AssertionError(f"{name} failed:\n{done.stderr[-3000:]}")
        return workdir

    def test_fsdp_tensor_and_context_on_8_devices_train_as_1(self):
        one = os.path.join(_TMP, "one")
        loop.train_and_evaluate(tiny.experiment_config(**self._OVERRIDES), one)
        axes = ("--config.mesh.fsdp=2", "--config.mesh.tensor=2", "--config.mesh.context=2")
        mesh = self._run("mesh", "tiny.py", *axes)
        expected, records = (metrics_lib.read_metrics(w) for w in (one, mesh))
        self.assertEqual([r["step"] for r in records], [1, 2, 3])
        for a, b in zip(expected, records, strict=True):
            for key in a.keys() - metrics_lib.TIMING_KEYS:
                np.testing.assert_allclose(b[key], a[key], rtol=1e-4, err_msg=key)
        (session,) = provenance.read(mesh)["sessions"]
        self.assertEqual(session["mesh"], {**_SIZES, "data": 1, "context": 2})
        (single,) = provenance.read(one)["sessions"]
        self.assertEqual(single["mesh"], {"data": 1, "fsdp": 1, "tensor": 1, "context": 1})
        ratio = session["state_bytes_per_device"] / single["state_bytes_per_device"]
        self.assertLess(ratio, 0.3)
        with open(os.path.join(mesh, "config.json"), encoding="utf-8") as f:
            self.assertEqual(json.load(f)["mesh"]["tensor"], 2)

    def test_fine_tuning_over_fsdp_tensor_and_context_on_8_devices_trains_as_on_1(self):
        # A random tiny encoder and a fresh classifier on the builtin task, one epoch of 14
        # steps: every head's parameters split by the rules, each row's positions split over
        # context (the head reads its pooled token from another device), validated on
        # gathered outputs.
        overrides = dict(finetune__batch_size=64, finetune__log_every=7, task__max_length=32)
        config = finetune_classification.get_config("runlocal")
        config.update_from_flattened_dict({k.replace("__", "."): v for k, v in overrides.items()})
        one = os.path.join(_TMP, "finetune_one")
        final = finetune.finetune(finetune_experiment_from_dict(config.to_dict()), one)
        mesh = self._run(
            "finetune_mesh",
            "finetune_classification.py:runlocal",
            "--config.mesh.fsdp=2",
            "--config.mesh.tensor=2",
            "--config.mesh.context=2",
            script="finetune.py",
            overrides=overrides,
        )
        expected, records = (metrics_lib.read_metrics(w) for w in (one, mesh))
        self.assertEqual([r["step"] for r in records], [7, 14])
        for a, b in zip(expected, records, strict=True):
            for key in a.keys() - metrics_lib.TIMING_KEYS:
                np.testing.assert_allclose(b[key], a[key], rtol=1e-4, err_msg=key)
        with open(os.path.join(mesh, finetune.FINAL_METRICS_FILE), encoding="utf-8") as f:
            got = json.load(f)
        self.assertEqual(got.keys(), final.keys())
        for key, value in final.items():  # a near tie of a random head may flip an example
            self.assertAlmostEqual(got[key], value, delta=0.02, msg=key)
        with open(os.path.join(mesh, "config.json"), encoding="utf-8") as f:
            sizes = {"data": None, "fsdp": 2, "tensor": 2, "context": 2}  # data: what is left
            self.assertEqual(json.load(f)["mesh"], sizes)
