"""Step time and bytes per device of each device mesh, and the longest context that fits.

    python benchmarks/mesh.py [--meshes=data=8,fsdp=8,data=2:fsdp=2:tensor=2,tensor=2:data=4]
        [--context_meshes=fsdp=8] [--size=small] [--vocab_size=8192] [--seq_len=128]
        [--rounds=5] [--budget_mib=1024] [--min_len=128] [--max_len=65536] [--output=mesh.jsonl]

A mesh is `axis=size` fields joined by ':' (training.mesh.MeshConfig; sizes not given are
1 but data, the devices left); adding one is adding an entry, e.g. `context=8`. On a CPU the
devices are 8 fake ones of the host (XLA_FLAGS, set here unless given), which share its cores:
only the ratios mean anything there, never the milliseconds.

Per mesh, on one row of --seq_len per device along data x fsdp: the step time, best of
--rounds interleaved with the other meshes' (the least disturbed runs on a shared machine),
and over the first mesh of --meshes ("vs first": the data-only mesh by default); the train
state's bytes on device 0 (parameters and optimizer state as the rules split them); and the
compiled step's bytes per device (arguments + outputs - donated + temporaries, from XLA's
memory analysis).

Per mesh of --context_meshes: the longest row, doubling from --min_len, whose compiled step
(one row per device along data x fsdp) needs at most --budget_mib per device; compiled, never
run. Context 1 against context 8: `--context_meshes=fsdp=8,context=8`.
"""

import os

_DEVICES = "--xla_force_host_platform_device_count"
if _DEVICES not in os.environ.get("XLA_FLAGS", ""):  # before JAX reads it
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_DEVICES}=8"

import time  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402
from absl import app, flags  # noqa: E402
from mlm_batch import mlm_batch  # noqa: E402
from timing import report  # noqa: E402

from roformer_jax.data.data_config import DataConfig  # noqa: E402
from roformer_jax.nn.model import RoFormer  # noqa: E402
from roformer_jax.nn.model_config import model_config  # noqa: E402
from roformer_jax.training import mesh as mesh_lib  # noqa: E402
from roformer_jax.training import optim, runtime  # noqa: E402
from roformer_jax.training.step import TrainState, make_train_step  # noqa: E402

_MESHES = flags.DEFINE_list(
    "meshes",
    ["data=8", "fsdp=8", "data=2:fsdp=2:tensor=2", "tensor=2:data=4"],
    "Meshes to time, the first the baseline; each 'axis=size' fields joined by ':'.",
)
_CONTEXT_MESHES = flags.DEFINE_list(
    "context_meshes", ["fsdp=8"], "Meshes whose longest row within --budget_mib is sought."
)
_SIZE = flags.DEFINE_string("size", "small", "Model size (model_config.SIZES).")
_VOCAB = flags.DEFINE_integer("vocab_size", 8192, "The model's vocabulary.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Tokens per row of the timed steps.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed steps per mesh, interleaved.")
_BUDGET = flags.DEFINE_integer("budget_mib", 1024, "Memory per device a step may need, MiB.")
_MIN_LEN = flags.DEFINE_integer("min_len", 128, "The first row length tried.")
_MAX_LEN = flags.DEFINE_integer("max_len", 65536, "The longest row length tried.")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")

MIB = 2**20


def parse_mesh(entry: str) -> mesh_lib.MeshConfig:
    """'data=2:fsdp=2:tensor=2' -> MeshConfig(data=2, fsdp=2, tensor=2)."""
    fields = dict(field.partition("=")[::2] for field in entry.split(":"))
    if not all(
        axis in mesh_lib.AXES and size.lstrip("-").isdigit() for axis, size in fields.items()
    ):
        raise ValueError(
            f"mesh {entry!r}: expected 'axis=size' fields joined by ':', axes {mesh_lib.AXES}"
        )
    return mesh_lib.MeshConfig(**{axis: int(size) for axis, size in fields.items()})


class _Step:
    """The train step of `cfg` jitted over `mesh` for rows of `seq_len`, one row per device
    along data x fsdp: compiled (`memory`) and, once `run` is called, placed and run."""

    def __init__(self, cfg, mesh: mesh_lib.MeshConfig, seq_len: int):
        self.devices = devices = mesh_lib.MeshDevices(mesh)
        devices.check_model(cfg)
        model = RoFormer(cfg)
        tx = optim.make_optimizer(optim.OptimConfig(warmup_steps=0), total_steps=10_000)

        def init(key):
            params = model.init(key, jnp.zeros((1, seq_len), jnp.int32))["params"]
            return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

        self._init, self._key = init, jax.random.key(0)
        shapes = jax.eval_shape(init, self._key)
        self._shardings = devices.shardings(shapes)
        step = make_train_step(model, tx, mask_prob=DataConfig().mask_prob)
        self._step = devices.compile(step, lambda *a: None, shapes)[0]
        rows = devices.sizes["data"] * devices.sizes["fsdp"]
        self._batch = devices.shard(
            mlm_batch(cfg.vocab_size, rows, seq_len, np.random.default_rng(0))
        )
        self.compiled = self._step.lower(shapes, self._batch, self._key).compile()
        self._state = None

    def memory(self) -> int:
        """Bytes per device the compiled step needs: its arguments and outputs, less what
        the donated state shares with them, and its temporaries."""
        m = self.compiled.memory_analysis()
        return (
            m.argument_size_in_bytes
            + m.output_size_in_bytes
            - m.alias_size_in_bytes
            + m.temp_size_in_bytes
        )

    def state_bytes(self) -> int:
        return runtime.bytes_on_device(self._placed(), jax.devices()[0])

    def _placed(self):
        if self._state is None:
            self._state = jax.jit(self._init, out_shardings=self._shardings)(self._key)
        return self._state

    def seconds(self) -> float:
        state, t0 = self._placed(), time.perf_counter()
        self._state, metrics = self._step(state, self._batch, self._key)
        jax.block_until_ready(metrics)
        return time.perf_counter() - t0


def timed(cfg, entries: list[str], seq_len: int, rounds: int) -> list[dict]:
    """A record per mesh of `entries`: step time (best of `rounds`, interleaved, after a
    warm-up step), over the first's, and bytes per device."""
    steps = {entry: _Step(cfg, parse_mesh(entry), seq_len) for entry in entries}
    for step in steps.values():
        step.seconds()  # the state placed, the first run's costs paid
    times = {entry: [] for entry in entries}
    for _ in range(rounds):
        for entry, step in steps.items():
            times[entry].append(step.seconds())
    first = min(times[entries[0]])
    return [
        {
            "mesh": entry,
            "sizes": step.devices.sizes,
            "ms": 1e3 * min(times[entry]),
            "vs first": min(times[entry]) / first,
            "state MiB/device": step.state_bytes() / MIB,
            "step MiB/device": step.memory() / MIB,
            "seq_len": seq_len,
            "backend": jax.default_backend(),
        }
        for entry, step in steps.items()
    ]


def longest(cfg, entry: str, budget: int, min_len: int, max_len: int) -> dict:
    """The longest row, doubling from `min_len` up to `max_len`, whose compiled step over
    the mesh `entry` needs at most `budget` bytes per device, and those bytes (None when
    even `min_len` does not fit)."""
    record = {"mesh": entry, "longest row": None, "MiB/device": None}
    seq_len = min_len
    while seq_len <= max_len:
        needed = _Step(cfg, parse_mesh(entry), seq_len).memory()
        if needed > budget:
            break
        record.update({"longest row": seq_len, "MiB/device": needed / MIB})
        seq_len *= 2
    return record


def main(argv):
    del argv
    cfg = model_config(_SIZE.value, vocab_size=_VOCAB.value)
    records = timed(cfg, _MESHES.value, _SEQ_LEN.value, _ROUNDS.value)
    columns = ["mesh", "ms", "vs first", "state MiB/device", "step MiB/device"]
    report(records, columns, _OUTPUT.value)
    budget = _BUDGET.value * MIB
    lengths = [
        {**longest(cfg, entry, budget, _MIN_LEN.value, _MAX_LEN.value), "budget MiB": _BUDGET.value}
        for entry in _CONTEXT_MESHES.value
    ]
    report(lengths, ["mesh", "longest row", "MiB/device", "budget MiB"], _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
