"""The numbers tests/mesh_test.py compares, computed once on 8 fake CPU devices.

    python tests/mesh_cases.py OUT.pkl        # XLA_FLAGS with 8 host devices: mesh_test's job

tiny's model in one layer, dropout on, 2 train steps of a 16 x 32 batch (grad_accum 2), on
one device (plain jit), pmapped over 8 (runtime.Devices) and jitted over each mesh of
MESHES (each step under its mesh as the ambient mesh where context > 1): per run the metrics
of each step, the final parameters, the gradient of the summed loss at the initial
parameters, and, per state leaf, its PartitionSpec and whether device 0 holds less than all
of it. And a checkpoint across meshes: the state after step 1 under fsdp, saved sharded,
restored onto the data mesh and onto one device, where step 2 runs (each with the step
compiled above). One process for every case, so the tests share its compiles.
"""

import dataclasses
import functools
import os
import pickle
import sys
import tempfile

import jax
import numpy as np
import tiny

from roformer_jax.data import masking
from roformer_jax.training import mesh as mesh_lib
from roformer_jax.training import runs, runtime
from roformer_jax.training import step as step_lib
from roformer_jax.training.checkpoints import Checkpoints

MESHES = {  # name -> MeshConfig fields: each axis alone, and all three
    "data": dict(data=8),
    "fsdp": dict(fsdp=8),
    "tensor": dict(tensor=4),  # data 2 (the devices left): tiny has 4 heads
    "data_fsdp_tensor": dict(data=2, fsdp=2, tensor=2),
    "data_context": dict(context=2),  # data 4: rows of 32 positions, 16 a device
}
REPLICATED = ("data", "data_context")  # the meshes that split no parameter
GRAD_ACCUM = 2


def _setup():
    cfg = tiny.experiment_config(
        model__num_layers=1,
        model__hidden_dropout=0.1,
        model__attention_dropout=0.1,
        data__seq_len=32,
        train__grad_accum=GRAD_ACCUM,
    )
    model, _, tx, init = runs.model_and_optimizer(cfg)
    state = jax.device_get(jax.jit(init)(jax.random.key(0)))
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, cfg.model.vocab_size, size=(16, 32))
    tokens[3, 20:] = 0
    batch = masking.mask_tokens(
        tokens, rng, vocab_size=cfg.model.vocab_size, mask_id=4, special_ids=range(5)
    )
    batch.update(
        attention_mask=tokens != 0,
        token_type_ids=np.zeros_like(tokens),
        index=np.arange(16, dtype=np.int32),
    )
    return cfg.model, model, tx, state, batch


def _loss_fn(model, rng):
    def loss(params, batch):  # the summed loss of the step's first micro-batch draw
        rows = {k: v for k, v in batch.items() if k != "index"}
        sums = step_lib.mlm_apply(
            model,
            params,
            rows,
            None,
            deterministic=False,
            rngs={"dropout": rng},
            example_ids=batch["index"],
            update=0,
        )
        return sums["loss"]

    return jax.grad(loss)


def _run(devices, train_step, grad_fn, state, batch, rng) -> dict:
    """Two steps of `train_step` and the gradient, as host numpy, through `devices`."""
    grads = grad_fn(state.params, devices.shard(batch))
    if devices.axis is None:
        grads = devices.first(grads)
    else:  # pmap: each device's gradient of its rows, summed
        grads = jax.tree.map(lambda g: np.asarray(g).sum(0), grads)
    metrics = []
    for _ in range(2):
        state, step_metrics = train_step(state, devices.shard(batch), rng)
        metrics.append(devices.first(step_metrics))
    return {"metrics": metrics, "params": devices.first(state.params), "grads": grads}


class _OneDevice:
    """runtime.Devices on one device, among 8: the step jitted on the default device."""

    axis = None

    @staticmethod
    def shard(batch):
        return batch

    @staticmethod
    def first(tree):
        return jax.tree.map(np.asarray, tree)

    shardings = staticmethod(runtime.on_first_device)


def _across_meshes(compiled: dict, model_config, state, batch, rng, directory: str) -> dict:
    """Step 1 under fsdp, saved sharded to `directory`; restored onto the data mesh and onto
    one device ({name: (devices, train_step)} of `compiled`), step 2 there: {name: its two
    steps' metrics, final parameters, whether the restored state is the saved bit for bit,
    and whether each array landed where the target's shardings say}."""
    devices, train_step = compiled["fsdp"]
    stepped, first = train_step(devices.replicate(state), devices.shard(batch), rng)
    first, saved = devices.first(first), devices.first(stepped)
    checkpoints = Checkpoints(directory, keep=1)
    meta = {"config": {"model": dataclasses.asdict(model_config)}}
    checkpoints.save(1, devices.saved(stepped), meta)
    checkpoints.close()
    results = {}
    for name in ("data", "one"):
        devices, train_step = compiled[name]
        checkpoints = Checkpoints(directory, keep=1)
        shardings = devices.shardings(state)
        restored, _ = checkpoints.restore(
            jax.eval_shape(lambda: state), model_config, shardings=shardings
        )
        checkpoints.close()
        exact = jax.tree.leaves(jax.tree.map(np.array_equal, devices.first(restored), saved))
        placed = jax.tree.map(
            lambda x, s: x.sharding.is_equivalent_to(s, x.ndim), restored, shardings
        )
        restored, second = train_step(restored, devices.shard(batch), rng)
        results[name] = {
            "metrics": [first, devices.first(second)],
            "params": devices.first(restored.params),
            "exact": all(exact),
            "placed": all(jax.tree.leaves(placed)),
        }
    return results


def main(out: str) -> None:
    model_config, model, tx, state, batch = _setup()
    rng = jax.random.key(1)
    grad_fn = _loss_fn(model, jax.random.fold_in(rng, 0))
    make = functools.partial(step_lib.make_train_step, model, tx, grad_accum=GRAD_ACCUM)
    compiled = {"one": (_OneDevice, jax.jit(make()))}
    results = {"one": _run(*compiled["one"], jax.jit(grad_fn), state, batch, rng)}
    pmap = runtime.Devices()
    train_step = pmap.compile(make(axis_name=pmap.axis), lambda *a: None)[0]
    results["pmap"] = _run(
        pmap, train_step, jax.pmap(grad_fn, pmap.axis), pmap.replicate(state), batch, rng
    )
    for name, sizes in MESHES.items():
        devices = mesh_lib.MeshDevices(mesh_lib.MeshConfig(**sizes))
        train_step = devices.compile(make(), lambda *a: None, state)[0]
        compiled[name] = (devices, train_step)
        placed = devices.replicate(state)
        result = _run(devices, train_step, devices.ambient(jax.jit(grad_fn)), placed, batch, rng)
        stepped, _ = train_step(devices.replicate(state), devices.shard(batch), rng)
        device = jax.devices()[0]
        result["specs"] = jax.tree.leaves(
            mesh_lib.state_specs(state, devices.sizes),
            is_leaf=lambda x: isinstance(x, jax.sharding.PartitionSpec),
        )
        result["split"] = [
            x.addressable_shards[0].data.shape != x.shape for x in jax.tree.leaves(stepped)
        ]
        result["bytes"] = runtime.bytes_on_device(stepped, device)
        results[name] = result
    directory = tempfile.mkdtemp(dir=os.path.dirname(out))
    results["restored"] = _across_meshes(compiled, model_config, state, batch, rng, directory)
    with open(out, "wb") as f:
        pickle.dump(results, f)


if __name__ == "__main__":
    main(sys.argv[1])
