#!/usr/bin/env bash
# The GPU check: the test suite, then the speed benchmarks, on a machine with an NVIDIA GPU and
# a CUDA JAX. Every path but the CPU-only speed machinery (nn/_rope_cpu.py's scheduling,
# nn/_attention_cpu.py) and cuDNN's fused attention (attention_core.py) is the one the CPU
# runs, so this checks that the tolerances hold on another backend and times it.
#
#     bash benchmarks/on_gpu.sh OUT_DIR [PYTEST_SECONDS]    # about 9 min with the default 240
#
# Writes OUT_DIR/devices.txt, pytest.log and one JSON-lines file per benchmark (their --report
# or the tables they print read them). Each step has a time limit, so that a slow or hung step
# still leaves the others' results.
set -uo pipefail
out=${1:?usage: bash benchmarks/on_gpu.sh OUT_DIR [PYTEST_SECONDS]}
pytest_seconds=${2:-240}
mkdir -p "$out"
# Many test processes share one GPU: each takes memory as it needs it, not 75% up front.
export XLA_PYTHON_CLIENT_PREALLOCATE=false PYTHONUNBUFFERED=1

{
  nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader
  python3 -c "import jax, flax, optax, transformers, torch
print('jax', jax.__version__, 'flax', flax.__version__, 'optax', optax.__version__,
      'transformers', transformers.__version__, 'torch', torch.__version__)
print(jax.devices())"
} 2>&1 | tee "$out/devices.txt"

# -v names each test as it ends, and SIGINT at the limit lets pytest write its summary.
# tests/conftest.py sets float32 matmuls to 'highest' precision (not TF32) and XLA's
# deterministic GPU ops, so what fails here is not those (docs/speed.md, "On a GPU").
timeout -s INT -k 30 "$pytest_seconds" python3 -m pytest -v -n 14 --timeout=150 tests \
  > "$out/pytest.log" 2>&1
echo "pytest exit $? (124: stopped at ${pytest_seconds} s)"
grep -cE " PASSED " "$out/pytest.log"
grep -E " (FAILED|ERROR) " "$out/pytest.log" | sed 's/.* \(FAILED\|ERROR\) //' | head -60

bench() {  # seconds, script, flags...
  local seconds=$1 script=$2
  shift 2
  echo "== $script $*"
  timeout -k 10 "$seconds" python3 "benchmarks/$script.py" --output="$out/$script.jsonl" "$@" 2>&1 \
    | grep -v "^I[0-9]\{4\}" | tail -30
}
# Each benchmark prints its table at its end: a limit it reaches loses the whole table.
bench 150 train_step --mlm_head=targets --documents=open --rounds=3
bench 40 rope
bench 120 decode --quick
