"""The suite's XLA settings and compilation cache, made before any test module imports JAX; the
seed of sampled grids and of the heavy classes' turn (tests/grid.py, tests/rotation.py).

Most tests compile more than they run (tiny models, a few steps), so the suite trades run time
for compile time. The settings are environment variables set here, in the process that starts
pytest-xdist's workers, so that the workers and every subprocess a test starts inherit them:

- XLA's CPU backend compiles without LLVM's optimizations (`--xla_backend_optimization_level=0`)
  and with its older elemental emitters, not the MLIR fusion emitters
  (`--xla_cpu_use_fusion_emitters=false`). One compile of a primitive that runs op by op
  (`jnp.sin(x)`) took 54 ms with the fusion emitters and 30 ms without; a tiny model's gradient
  2.7 s at full optimization, 2.1 s at -O0, 1.4 s at -O0 without the fusion emitters, and it
  then ran 2.6 times slower (0.21 s a step against 0.08 s).
- On a GPU, the suite's float32 is float32 and its runs repeat bit for bit: float32 matmuls at
  'highest' precision (JAX_DEFAULT_MATMUL_PRECISION; the GPU default rounds their inputs to
  TF32, and on an H200 108 of the 118 tests that failed at the default passed at 'highest') and
  `--xla_gpu_deterministic_ops=true` (without it a resumed run's metrics differed from an
  uninterrupted run's in their last digits there; tests/loop_test.py, tests/finetune_test.py).
  On a CPU, 'highest' left float32 and bfloat16 matmuls bit-identical, and XLA's CPU backend
  does not read an `xla_gpu_*` flag.
- One persistent compilation cache for the whole session, in a temporary folder removed at the
  end: a program that another test, worker or subprocess compiled is read back instead of
  compiled again (a model's train step built by two tests, a run redone by a resume test).

Each flag is set only where this JAX's XLA knows it, asked of a child process (~1 s): XLA ends
the process on a flag it does not know, and jax 0.11 has no fusion-emitter switch.

float32 results can change in their last bits with these settings, inside every tolerance; the
float64 references are unaffected at theirs. The suite's time: docs/speed.md, "The main command
and the test suite".
"""

import atexit
import gc
import os
import shutil
import subprocess
import sys
import tempfile

import grid
import rotation

_XLA_FLAGS = (
    "--xla_backend_optimization_level=0",
    "--xla_cpu_use_fusion_emitters=false",
    "--xla_gpu_deterministic_ops=true",
)
_CACHE_VARIABLE = "JAX_COMPILATION_CACHE_DIR"


def _xla_accepts(flags: str) -> bool:
    """Whether this JAX's XLA knows every flag: it aborts the process on one it does not (jax
    0.11 dropped --xla_cpu_use_fusion_emitters, and every worker died at its first JAX call), so
    a child process asks."""
    probe = [sys.executable, "-c", "import jax; jax.devices('cpu')"]
    env = {**os.environ, "XLA_FLAGS": flags}
    return subprocess.run(probe, env=env, capture_output=True).returncode == 0


def _set_flags() -> None:
    if os.environ.get("PYTEST_XDIST_WORKER"):  # a worker: the controller's flags, inherited
        return
    flags = os.environ.get("XLA_FLAGS", "")
    ours = [flag for flag in _XLA_FLAGS if flag.split("=")[0] not in flags]  # the user's win
    if _xla_accepts(" ".join([flags, *ours])):
        known = ours
    else:
        known = [flag for flag in ours if _xla_accepts(f"{flags} {flag}")]
    os.environ["XLA_FLAGS"] = " ".join([flags, *known]).strip()
    os.environ.setdefault("JAX_DEFAULT_MATMUL_PRECISION", "highest")


def _share_a_compilation_cache() -> None:
    if os.environ.get(_CACHE_VARIABLE):  # a worker: the controller's; or the user's own
        return
    directory = tempfile.mkdtemp(prefix="roformer_jax_test_compiles_")
    atexit.register(shutil.rmtree, directory, ignore_errors=True)
    os.environ[_CACHE_VARIABLE] = directory
    os.environ["JAX_PERSISTENT_CACHE_MIN_COMPILE_TIME_SECS"] = "0"  # the default skips < 1 s


_set_flags()
_share_a_compilation_cache()
# Drawn here, in the process that starts pytest-xdist's workers, so that they inherit it.
_SEED = grid.seed()


def _left_out(config) -> set[str]:
    """The heavy classes this run leaves to other runs' turns (tests/rotation.py): none where
    the full suite is asked for, or files or tests are named rather than folders, or -k or -m
    picks tests."""
    picked = config.option.keyword or config.option.markexpr
    if grid.full() or picked or not rotation.whole_suite(config.args, str(config.rootpath)):
        return set()
    return rotation.skipped(rotation.costs(), _SEED, rotation.SHARDS, rotation.THRESHOLD_S)


def pytest_collection_modifyitems(config, items):
    left_out = _left_out(config)
    kept, dropped = [], []
    for item in items:
        (dropped if rotation.class_of(item.nodeid) in left_out else kept).append(item)
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = kept


def _grids(config) -> str:
    if grid.full():
        return f"the full suite ({grid.FULL_VARIABLE}=1): every grid case and test class"
    turn, left_out, shards = "", _left_out(config), rotation.SHARDS
    if left_out:
        turn = (
            f"; heavy classes: shard {rotation.turn(_SEED, shards) + 1} of {shards}, "
            f"{len(left_out)} classes left to other runs (tests/rotation.py)"
        )
    return f"sampled parameter grids{turn}: replay with {grid.SEED_VARIABLE}={_SEED}"


def pytest_report_header(config):
    return _grids(config)


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(_grids(terminalreporter.config))


def pytest_sessionfinish(session):
    """Collect once, then freeze what survives, before a pytest-xdist worker reports finished.

    pytest ends with five full garbage collections (to report unraisable exceptions); a worker
    holds a million objects by then (torch, transformers, JAX's caches), and the five took 4 s
    for four test files. execnet gives a finished worker 5 s to exit, then sends it SIGINT,
    which landed in JAX's gc callback and ended the suite's output with a
    PytestUnraisableExceptionWarning (KeyboardInterrupt). What is frozen is alive now; what
    becomes garbage after this is collected as before.
    """
    gc.collect()
    gc.freeze()
