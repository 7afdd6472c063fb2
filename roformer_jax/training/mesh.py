"""The run jitted over a device mesh: data, fsdp and tensor parallelism under one `jit`.

    devices = mesh.devices_for(cfg.mesh)        # runtime.Devices where no mesh is asked for
    devices.check_model(cfg.model)
    state = devices.replicate(state)            # each leaf placed by the rules below
    train_step, eval_step = devices.compile(train_step, eval_step, shapes)  # shardings in, out
    checkpoints.restore(shapes, model, shardings=devices.shardings(shapes))  # from any mesh

The mesh has four axes (MaxText's names): "data" (replicas of the model, each on its rows of
the batch), "fsdp" (rows too, and the parameters and optimizer state split, gathered where a
layer uses them), "tensor" (heads, MLP features and vocabulary split: each device computes
its part of a layer) and "context" (each row's positions split: the attention kinds run as
ring attention or pass their linear states between devices, nn/context_parallel.py, under the
mesh made ambient with `jax.set_mesh`).

Where parameters go is two tables in one place, so that nn/ knows no mesh: PARAMETER_AXES
names the logical axes of each parameter's dimensions by its path (embed, heads, kv_heads,
mlp, vocab, or None), and RULES maps logical axes to mesh axes. Optimizer leaves that mirror
a parameter (Adam's moments) go where it goes; the rest (counts, the step) are replicated.
The batch's rows are split over data x fsdp, its positions over context. Everything else is
XLA's (GSPMD): the step is the one pure function that pmap runs too (training.step), its sums
global by construction.
"""

from __future__ import annotations

import dataclasses
import functools
import math
import re

import jax
import numpy as np
from jax.sharding import NamedSharding, PartitionSpec

from roformer_jax.nn import context_parallel
from roformer_jax.training.runtime import Devices, host_array

AXES = ("data", "fsdp", "tensor", "context")
BATCH = ("data", "fsdp")  # the mesh axes the batch's rows are split over

# (pattern matching a parameter's whole path "module/.../name", the logical axes of its
# dimensions); the first match wins. A fused [D, N * H] projection splits whole heads as long
# as `tensor` divides N (`MeshDevices.check_model`).
PARAMETER_AXES = (
    (r".*word_embeddings/embedding", ("vocab", "embed")),  # [V, D]
    (r".*(position|token_type)_embeddings/embedding", (None, "embed")),
    (r".*embeddings_project/kernel", (None, "embed")),  # [E, D]
    (r".*attention/query/kernel", ("embed", "heads")),  # [D, N * H]
    (r".*attention/query/bias", ("heads",)),
    (r".*attention/(key|value)/kernel", ("embed", "kv_heads")),  # [D, K * H]
    (r".*attention/(key|value)/bias", ("kv_heads",)),
    (r".*attention/output/kernel", ("heads", "embed")),  # [N * H, D]
    (r".*layer_\d+/intermediate/kernel", ("embed", "mlp")),  # [D, F]
    (r".*layer_\d+/intermediate/bias", ("mlp",)),
    (r".*layer_\d+/output/kernel", ("mlp", "embed")),  # [F, D]
    (r".*mlm_head/dense/kernel", ("embed", "embed")),
    (r".*mlm_head/bias", ("vocab",)),
    (r".*pair_head/kernel", ("embed", None)),
    (r".*pair_head/bias", (None,)),
    (r".*(attention/output|layer_\d+/output|mlm_head/dense|embeddings_project)/bias", ("embed",)),
    (r".*(LayerNorm|_norm)/(scale|bias)", (None,)),  # a few numbers: gathering costs more
    (r".*rope_frequencies/frequencies", (None, None)),  # [A, P]
    (r".*rope_frequencies/frequencies", (None, None, None)),  # per head: [N, A, P]
    (r".*attention/forget_gate/kernel", ("embed", None)),  # [D, N]: a few numbers a head
    (r".*attention/forget_gate/bias", (None,)),
    (r".*attention/output_gate/kernel", ("embed", "embed")),  # [D, D]
    (r".*position_gate/kernel", ("embed", None)),  # [D, K]: learned positions' increments
    (r".*position_gate/bias", (None,)),
    (r".*attention/(sinks|q_norm|k_norm)", (None,)),  # softmax's sinks [N], QK-norm's [H]
    # Fine-tuning's task heads (nn/heads.py): a dense layer as the MLM head's, then a
    # projection to a few labels.
    (r"head/classifier/dense/kernel", ("embed", "embed")),
    (r"head/classifier/dense/bias", ("embed",)),
    (r"head/(classifier(/out_proj)?|qa_outputs)/kernel", ("embed", None)),  # [D, labels]
    (r"head/(classifier(/out_proj)?|qa_outputs)/bias", (None,)),
)

# (logical axis, the mesh axes it may take), in priority order: each parameter's dimensions
# take their mesh axes in this order, each axis at most once per parameter and only where it
# divides the dimension. So tensor goes to heads, MLP features or vocabulary first, and to
# `embed` only where no other dimension took it (a vocabulary of 261 bytes or BERT's 30,522
# ids does not divide by 4): every device holds 1 / (fsdp x tensor) of each large matrix.
RULES = (
    ("heads", ("tensor",)),
    ("kv_heads", ("tensor",)),
    ("mlp", ("tensor",)),
    ("vocab", ("tensor",)),
    ("embed", ("fsdp", "tensor")),
)


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """The device mesh of a run. None everywhere: no mesh, the run is jitted on one device or
    pmapped over several (runtime.Devices), data parallel as before the mesh. Any size given:
    the run is one jit over a mesh of data x fsdp x tensor x context devices, the sizes not
    given 1 but data, which is -1 (the devices left) unless given."""

    data: int | None = None  # replicas, each on its rows of the batch; -1: the devices left
    fsdp: int | None = None  # rows too, and the parameters and optimizer state split
    tensor: int | None = None  # heads, MLP features and vocabulary split; divides the heads
    context: int | None = None  # each row's positions split; 2 x context divides L

    def __post_init__(self):
        given = {a: getattr(self, a) for a in AXES if getattr(self, a) is not None}
        if any(n != -1 and n < 1 for n in given.values()):
            raise ValueError(f"mesh sizes {given} must be >= 1, or -1 for the devices left")
        if list(given.values()).count(-1) > 1:
            raise ValueError(f"mesh sizes {given}: at most one of them may be -1")

    @property
    def enabled(self) -> bool:
        return any(getattr(self, a) is not None for a in AXES)

    def sizes(self, device_count: int) -> dict[str, int]:
        """{axis: size} over `device_count` devices, -1 resolved; ValueError where their
        product is not device_count."""
        sizes = {a: getattr(self, a) for a in AXES}
        sizes = {a: 1 if n is None else n for a, n in sizes.items()}
        if self.data is None and -1 not in sizes.values():
            sizes["data"] = -1
        shown = " x ".join(f"{a}={n}" for a, n in sizes.items())
        known = math.prod(n for n in sizes.values() if n != -1)
        for axis, n in sizes.items():
            if n == -1:
                sizes[axis] = device_count // known if device_count % known == 0 else 0
        if math.prod(sizes.values()) != device_count:
            raise ValueError(
                f"the mesh {shown} does not fit {device_count} devices: their product must "
                "be the number of devices of all hosts (-1: the devices left)"
            )
        return sizes


def partition_spec(logical: tuple, shape: tuple[int, ...], sizes: dict[str, int]):
    """The PartitionSpec of an array of `shape` whose dimensions have the `logical` axes,
    on a mesh of `sizes`, by RULES (see there)."""
    taken: list[list[str]] = [[] for _ in shape]
    used = set()
    for name, candidates in RULES:
        for dim in (d for d, n in enumerate(logical) if n == name):
            for axis in candidates:
                size = math.prod(sizes[a] for a in taken[dim]) * sizes[axis]
                if axis not in used and sizes[axis] > 1 and shape[dim] % size == 0:
                    taken[dim].append(axis)
                    used.add(axis)
    return PartitionSpec(*(tuple(t) if len(t) > 1 else (t[0] if t else None) for t in taken))


def logical_axes(path: str, ndim: int) -> tuple:
    """The logical axes of the parameter at `path` ("encoder/layer_0/output/kernel") by
    PARAMETER_AXES; ValueError for a parameter the table does not name."""
    for pattern, axes in PARAMETER_AXES:
        if re.fullmatch(pattern, path) and len(axes) == ndim:
            return axes
    raise ValueError(
        f"parameter {path} ({ndim} dimensions) has no entry in mesh.PARAMETER_AXES: name "
        "its logical axes there to run it over a mesh"
    )


def parameter_specs(params, sizes: dict[str, int]) -> dict[str, PartitionSpec]:
    """{path: PartitionSpec} of every parameter (`logical_axes`, `partition_spec`)."""
    return {
        path: partition_spec(logical_axes(path, x.ndim), x.shape, sizes)
        for path, x in _by_path(params).items()
    }


def state_specs(state, sizes: dict[str, int]):
    """The PartitionSpec of each leaf of a TrainState: its parameters' by the tables, an
    optimizer leaf of a parameter's path and shape (Adam's moments) the parameter's, any
    other leaf replicated."""
    specs = parameter_specs(state.params, sizes)
    shapes = {path: x.shape for path, x in _by_path(state.params).items()}

    def spec(key_path, x):
        path = _path_name(key_path)
        return specs[path] if shapes.get(path) == x.shape else PartitionSpec()

    return jax.tree_util.tree_map_with_path(spec, state)


def _path_name(key_path) -> str:
    """ "a/b/c" of the dict keys on a leaf's path (a parameter's path, also inside an
    optimizer's state, whose other keys are attributes and indices)."""
    return "/".join(str(k.key) for k in key_path if isinstance(k, jax.tree_util.DictKey))


def _by_path(tree) -> dict:
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {_path_name(path): x for path, x in leaves}


def check_heads(model, tensor: int) -> None:
    """ValueError where `tensor` does not divide the heads (or key/value heads) of the
    ModelConfig `model`: each device computes whole heads."""
    for name in ("num_heads", "num_kv_heads"):
        heads = getattr(model, name) or model.num_heads
        if heads % tensor:
            raise ValueError(
                f"model.{name}={heads} is not divisible by mesh.tensor={tensor}: each "
                "device computes whole heads"
            )


# ---------------------------------------------------------------- the runtime


@functools.lru_cache(maxsize=8)
def devices_for(mesh: MeshConfig) -> Devices | MeshDevices:
    """runtime.Devices where `mesh` asks for none, else this process's MeshDevices (one per
    config: jit's caches key on the mesh its step functions were made for)."""
    return MeshDevices(mesh) if mesh.enabled else Devices()


class MeshDevices:
    """One `jit` over a Mesh of all hosts' devices; runtime.Devices' interface (see there),
    with global arrays in place of pmap's leading device axis."""

    axis = None  # no named axis: the step's sums are global sums under jit

    def __init__(self, config: MeshConfig):
        self.sizes = config.sizes(jax.device_count())
        self.mesh = jax.make_mesh(
            tuple(self.sizes.values()), AXES, axis_types=(jax.sharding.AxisType.Auto,) * 4
        )
        self.process_index, self.process_count = jax.process_index(), jax.process_count()
        self.rows = NamedSharding(self.mesh, PartitionSpec(BATCH))  # the batch's
        self.whole = NamedSharding(self.mesh, PartitionSpec())  # replicated

    def check_model(self, model, lengths=()) -> None:
        """ValueError where the ModelConfig `model` does not fit the mesh at `lengths` (every
        length the run feeds it): whole heads on each tensor device; with context > 1, a kind
        that runs split over devices and lengths that 2 x context divides."""
        check_heads(model, self.sizes["tensor"])
        if self.sizes["context"] > 1:
            context_parallel.check_model(model, self.sizes["context"], lengths)

    def check_batch(self, batch_size: int, accum: int, name: str):
        rows = self.sizes["data"] * self.sizes["fsdp"]
        if batch_size % (rows * accum):
            raise ValueError(
                f"{name} {batch_size} is not divisible by mesh.data x mesh.fsdp = {rows}"
                + (f" x grad_accum {accum}" if accum > 1 else "")
            )

    def compile(self, train_step, eval_step, state):
        """The steps as one jit each over the mesh, their shardings explicit in and out: the
        TrainState `state` (its shapes) by the rules, the batch's rows over data x fsdp, the
        rng, step and metrics replicated. The train step's new state lands as the old (its
        buffers donated). With context > 1, the steps see the batch's positions split over
        context (`_over_context`) and run with the mesh ambient (`ambient`)."""
        placed, rows, whole = self.shardings(state), self.rows, self.whole
        train = jax.jit(
            self._over_context(train_step),
            in_shardings=(placed, rows, whole),
            out_shardings=(placed, whole),
            donate_argnums=(0,),
        )
        evaluate = jax.jit(
            self._over_context(eval_step),
            in_shardings=(placed.params, rows, whole),
            out_shardings=whole,
        )
        return self.ambient(train), self.ambient(evaluate)

    def ambient(self, function):
        """`function` traced and run with the mesh ambient (`jax.set_mesh`), where the
        attention kinds find its context axis; as it is where context is 1."""
        if self.sizes["context"] == 1:
            return function

        def under_mesh(call):
            def called(*args):
                with jax.set_mesh(self.mesh):
                    return call(*args)

            return called

        ambient = functools.wraps(function)(under_mesh(function))
        ambient.lower = under_mesh(function.lower)  # ahead of time: benchmarks/mesh.py
        return ambient

    def _over_context(self, step):
        """`step(state, batch, rng)` with the batch's [B, L] leaves split over context too:
        each device's rows arrive whole, and each keeps its L / C positions (no transfer), so
        that XLA splits the activations along L from the embeddings on."""
        if self.sizes["context"] == 1:
            return step

        @functools.wraps(step)
        def split_step(state, batch, rng):
            return step(state, jax.lax.with_sharding_constraint(batch, self._placed(batch)), rng)

        return split_step

    def shardings(self, state):
        """The NamedSharding of each leaf of a TrainState (`state_specs`)."""
        return jax.tree.map(
            lambda spec: NamedSharding(self.mesh, spec),
            state_specs(state, self.sizes),
            is_leaf=lambda x: isinstance(x, PartitionSpec),
        )

    def replicate(self, state):
        """The TrainState `state` placed on the mesh, each leaf split as `shardings` says
        (the name is the interface's: pmap replicates)."""
        return jax.device_put(state, self.shardings(state))

    def shard(self, batch):  # this host's rows [b, ...] -> the global batch's [B, ...]
        return jax.tree.map(
            lambda x: jax.make_array_from_process_local_data(self.rows, np.asarray(x)), batch
        )

    def _placed(self, batch):
        """Each leaf's NamedSharding: rows over data x fsdp and, with context > 1, positions
        [B, L] over context (any second dimension that context divides: a placement, which
        changes no value)."""
        context = self.sizes["context"]

        def placed(x):
            split = context > 1 and x.ndim > 1 and x.shape[1] % context == 0
            return NamedSharding(self.mesh, PartitionSpec(BATCH, "context")) if split else self.rows

        return jax.tree.map(placed, batch)

    def unshard(self, tree):
        """Host numpy rows of the eval step's outputs, which it returns replicated."""
        return jax.tree.map(np.asarray, tree)

    def first(self, tree):
        """Host numpy copies of the global values (gathered from every host)."""
        return jax.tree.map(lambda x: np.array(host_array(x)), tree)

    def saved(self, state):
        """The state as its checkpoint holds it: the global arrays, which orbax writes each
        host's shards of, and restores onto any mesh (Checkpoints.restore's shardings)."""
        return state
