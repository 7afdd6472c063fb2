"""A train step with and without XLA flags: whether a flag speeds up a model of a given size.

    python benchmarks/xla_flags.py --flags=--xla_cpu_experimental_ynn_fusion_type= \
        [--cases=bench,study] [--repeats=3] [--steps=20]

Each repeat times every case twice, in fresh processes, one under XLA_FLAGS as the caller set
it and one with --flags added (XLA reads its flags once, when its backend starts): the best
of each case's repeats, in ms a step, and their ratio. The cases:

  bench  the retrieval bench's step (configs/bench_length.py:mqar, its RoPE arm: 2 pre-LN
         layers x 64, 2 heads, 32 rows of 64 tokens, loss at 4 answer tokens)
  study  the MLM studies' step (4 post-LN layers x 128, 2 heads, 16 rows of 128 tokens,
         vocabulary 8,192; benchmarks/train_step.py's step)

Alternating the two settings repeat by repeat spreads a shared machine's load over both.
"""

import os
import subprocess
import sys
import time

import jax
from absl import app, flags
from timing import report
from train_step import MASK_PROB, _train_step  # defines train_step.py's flags too

from roformer_jax.data import retrieval_tasks
from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.studies import length_bench

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from configs import bench_length  # noqa: E402

_FLAGS = flags.DEFINE_string("flags", None, "XLA flags to compare against none.", required=True)
_CASES = flags.DEFINE_list("cases", ["bench", "study"], "Steps to time: bench, study.")
_REPEATS = flags.DEFINE_integer("repeats", 3, "Repeats (a fresh process per case and setting).")
_STEPS = flags.DEFINE_integer("steps", 20, "Steps a process times, after one to compile.")
_CHILD = flags.DEFINE_string("child", None, "Internal: time this case and print its ms.")


def _bench_step():
    """The bench's RoPE step on its first training rows, as a thunk."""
    settings = length_bench.arms(bench_length.get_config("mqar").to_dict())["RoPE"]
    net, step, _, optimizer = length_bench._programs(settings, settings["model"])
    rows = retrieval_tasks.generate(
        "mqar", seed=(0, 0, 0), length=settings["train_length"], batch=32, **settings["options"]
    )
    params = net.init(jax.random.key(0), rows.tokens[:1])
    state = [params, optimizer.init(params)]
    heads, targets = length_bench._heads(rows)

    def run():
        state[0], state[1], loss = step(*state, rows.tokens, heads, targets)
        return loss

    return run


def _study_step():
    """The MLM studies' step (benchmarks/train_step.py's), as a thunk."""
    cfg = ModelConfig(
        vocab_size=8192, num_layers=4, hidden_size=128, num_heads=2, intermediate_size=512
    )
    return _train_step(cfg, 16, 128, MASK_PROB)[0]


_CASE_STEPS = {"bench": _bench_step, "study": _study_step}


def _time(case: str, steps: int) -> float:
    """ms a step of `case`, the mean of `steps` after one to compile."""
    run = _CASE_STEPS[case]()
    jax.block_until_ready(run())
    start = time.perf_counter()
    for _ in range(steps):
        out = run()
    jax.block_until_ready(out)
    return 1e3 * (time.perf_counter() - start) / steps


def _child_ms(case: str, extra: str) -> float:
    env = {**os.environ, "XLA_FLAGS": f"{os.environ.get('XLA_FLAGS', '')} {extra}".strip()}
    command = [sys.executable, __file__, f"--flags={_FLAGS.value}", f"--child={case}"]
    command.append(f"--steps={_STEPS.value}")
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=True)
    return float(done.stdout.split()[-1])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    unknown = set(_CASES.value) - set(_CASE_STEPS)
    if unknown:
        raise app.UsageError(f"--cases: {sorted(unknown)} not among {sorted(_CASE_STEPS)}")
    if _CHILD.value:
        print(_time(_CHILD.value, _STEPS.value))
        return
    best = {(case, extra): float("inf") for case in _CASES.value for extra in ("", _FLAGS.value)}
    for _ in range(_REPEATS.value):
        for case, extra in best:
            best[case, extra] = min(best[case, extra], _child_ms(case, extra))
    records = [
        {
            "case": case,
            "ms": best[case, ""],
            "ms with flags": best[case, _FLAGS.value],
            "ratio": best[case, _FLAGS.value] / best[case, ""],
        }
        for case in _CASES.value
    ]
    print(f"--flags={_FLAGS.value}; best of {_REPEATS.value} repeats of {_STEPS.value} steps")
    report(records, ["case", "ms", "ms with flags", "ratio"])


if __name__ == "__main__":
    app.run(main)
