"""The suite's XLA setting, made before any test module imports JAX; the seed of sampled grids.

XLA's CPU backend compiles without LLVM's optimizations (`--xla_backend_optimization_level=0`):
most tests compile more than they run (tiny models, a few steps), and at -O0 compiling takes
about 2/3 of the time. float32 results can change in their last bits (decoding_test's
FAVOR+ logits by 1.1e-5 against 9.9e-6 at full optimization, both against the full forward
pass), inside every tolerance; float64 references are unaffected at their tolerances.
Subprocesses the tests start inherit it through the environment. Measured on 2 idle cores,
step_test, heads_test, finetuning_test and attention_test together (`python -m pytest -q -n 2
<them>` with and without the flag): 240 s against 267 s; the whole suite (`bash .ci/run`):
see README.md.
"""

import os

import grid

_FLAG = "--xla_backend_optimization_level=0"
if _FLAG not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {_FLAG}".strip()

# Drawn here, in the process that starts pytest-xdist's workers, so that they inherit it.
_SEED = grid.seed()


def _grids() -> str:
    if grid.full():
        return f"full parameter grids ({grid.FULL_VARIABLE}=1)"
    return f"sampled parameter grids: replay with {grid.SEED_VARIABLE}={_SEED}"


def pytest_report_header(config):
    return _grids()


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(_grids())
