"""What a test pays for one train step: trace, lower, compile and two runs of the tests' tiny
model (tests/tiny.py, one layer) under the suite's XLA flags, by dropout setting; and the size
of the program, in jaxpr equations (nested ones counted).

    python benchmarks/compile_step.py [--vocab_size=300] [--batch=8] [--seq_len=64]
                                      [--optimizer=adamw|sgd]

--optimizer=sgd prices the optimizer: AdamW's update is traced, lowered and compiled leaf by
leaf (25 leaves in one layer).

Each setting runs in a fresh process (XLA's flags are read once per process; nothing cached
between settings). The suite's time is mostly this: docs/speed.md, "The main command and the
test suite".
"""

import json
import os
import subprocess
import sys
import time

from absl import app, flags

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_VOCAB = flags.DEFINE_integer("vocab_size", 300, "the model's vocabulary (bytes: ~261)")
_BATCH = flags.DEFINE_integer("batch", 8, "rows per step")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 64, "tokens per row")
_OPTIMIZER = flags.DEFINE_enum("optimizer", "adamw", ["adamw", "sgd"], "the step's optimizer")
_CHILD = flags.DEFINE_string("child", None, "internal: one setting's JSON, run here")

SETTINGS = {
    "no dropout": dict(hidden_dropout=0.0, attention_dropout=0.0),
    "hidden dropout": dict(hidden_dropout=0.1, attention_dropout=0.0),
    "hidden and attention dropout": dict(hidden_dropout=0.1, attention_dropout=0.1),
}


def _measure(fields: dict) -> dict:
    import jax
    import jax.numpy as jnp
    import optax

    sys.path.insert(0, os.path.join(_ROOT, "tests"))
    import tiny

    from roformer_jax.nn.model import RoFormer
    from roformer_jax.training import step as step_lib

    model = RoFormer(tiny.model_config(vocab_size=_VOCAB.value, **fields))
    b, n = _BATCH.value, _SEQ_LEN.value
    ids = jnp.ones((b, n), jnp.int32)
    params = jax.jit(model.init)(jax.random.key(0), ids)["params"]
    tx = {"adamw": optax.adamw, "sgd": optax.sgd}[_OPTIMIZER.value](1e-3)
    state = step_lib.TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))
    batch = dict(
        input_ids=ids,
        attention_mask=jnp.ones((b, n), jnp.int32),
        token_type_ids=jnp.zeros((b, n), jnp.int32),
        targets=ids,
        weights=jnp.ones((b, n), jnp.float32),
        index=jnp.arange(b),
    )
    out, t = {}, time.perf_counter()
    traced = jax.jit(step_lib.make_train_step(model, tx)).trace(state, batch, jax.random.key(1))
    out["trace_s"], t = time.perf_counter() - t, time.perf_counter()
    out["equations"] = _equations(traced.jaxpr.jaxpr)
    lowered = traced.lower()
    out["lower_s"], t = time.perf_counter() - t, time.perf_counter()
    compiled = lowered.compile()
    out["compile_s"] = time.perf_counter() - t
    for name in ("run1_s", "run2_s"):
        t = time.perf_counter()
        jax.block_until_ready(compiled(state, batch, jax.random.key(1)))
        out[name] = time.perf_counter() - t
    return out


def _equations(jaxpr) -> int:
    """Equations of a jaxpr, those of the jaxprs nested in them (jit, scan, custom_jvp) included."""
    from jax.extend import core

    return sum(1 + sum(map(_equations, core.jaxprs_in_params(eqn.params))) for eqn in jaxpr.eqns)


def main(argv):
    del argv
    if _CHILD.value is not None:
        print(json.dumps(_measure(json.loads(_CHILD.value))))
        return
    sys.path.insert(0, os.path.join(_ROOT, "tests"))
    import conftest  # noqa: F401  (sets the suite's XLA flags in os.environ, as pytest does)

    env = {**os.environ, "PYTHONPATH": _ROOT, "JAX_PLATFORMS": "cpu"}
    env.pop("JAX_COMPILATION_CACHE_DIR", None)  # each setting compiles from nothing
    print(f"XLA_FLAGS={env['XLA_FLAGS']}")
    print(f"optimizer: {_OPTIMIZER.value}")
    print("| setting | equations | trace s | lower s | compile s | 1st run s | 2nd run s |")
    print("|---|---|---|---|---|---|---|")
    for name, fields in SETTINGS.items():
        command = [
            sys.executable,
            __file__,
            f"--child={json.dumps(fields)}",
            f"--vocab_size={_VOCAB.value}",
            f"--batch={_BATCH.value}",
            f"--seq_len={_SEQ_LEN.value}",
            f"--optimizer={_OPTIMIZER.value}",
        ]
        result = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
        r = json.loads(result.stdout.strip().splitlines()[-1])
        print(
            f"| {name} | {r['equations']:,} | {r['trace_s']:.2f} | {r['lower_s']:.2f} | "
            f"{r['compile_s']:.2f} | {r['run1_s']:.3f} | {r['run2_s']:.3f} |"
        )


if __name__ == "__main__":
    app.run(main)
