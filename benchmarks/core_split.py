"""One process on every core against one process per core, side by side: whether two studies
pinned a core each get more steps an hour from a small machine than one study on both.

    python benchmarks/core_split.py [--cases=study,bench] [--repeats=2] [--steps=20]

Each repeat times each case in a fresh process on all of this process's cores, then in one
process per core at once (`os.sched_setaffinity`, which XLA sizes its thread pool by): ms a
step (the best repeat; side by side, the slower process of the best repeat) and the
throughput ratio, steps a second of the processes side by side over one on every core. The
cases are benchmarks/xla_flags.py's.
"""

import os
import subprocess
import sys

from absl import app, flags
from timing import report

_CASES = flags.DEFINE_list("cases", ["study"], "Steps to time (benchmarks/xla_flags.py's).")
_REPEATS = flags.DEFINE_integer("repeats", 2, "Repeats, fresh processes each.")
_STEPS = flags.DEFINE_integer("steps", 20, "Steps a process times, after one to compile.")

_XLA_FLAGS = os.path.join(os.path.dirname(os.path.abspath(__file__)), "xla_flags.py")


def _start(case: str, core: int | None) -> subprocess.Popen:
    """xla_flags.py's child timing `case`, pinned to `core` (None: every core of ours)."""
    command = [sys.executable, _XLA_FLAGS, "--flags=", f"--child={case}", f"--steps={_STEPS.value}"]
    pin = None if core is None else lambda: os.sched_setaffinity(0, {core})
    return subprocess.Popen(command, stdout=subprocess.PIPE, text=True, preexec_fn=pin)


def _ms(children: list[subprocess.Popen]) -> float:
    """The slowest child's ms a step (each prints its own last)."""
    outs = [child.communicate()[0] for child in children]
    if any(child.returncode for child in children):
        raise RuntimeError(f"a timing process failed: {[c.returncode for c in children]}")
    return max(float(out.split()[-1]) for out in outs)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cores = sorted(os.sched_getaffinity(0))
    records = []
    for case in _CASES.value:
        whole, split = float("inf"), float("inf")
        for _ in range(_REPEATS.value):
            whole = min(whole, _ms([_start(case, None)]))
            split = min(split, _ms([_start(case, core) for core in cores]))
        records.append(
            {
                "case": case,
                f"ms, 1 process x {len(cores)} cores": whole,
                f"ms, {len(cores)} processes x 1 core": split,
                "throughput ratio": len(cores) * whole / split,
            }
        )
    report(records, list(records[0]))


if __name__ == "__main__":
    app.run(main)
