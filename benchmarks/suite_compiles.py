"""Where the test suite's time goes: JAX's trace, lower and compile events, per test file,
split into operations run one by one (`jnp.sin(x)` outside jit: each new shape compiles the
operation alone) and whole jitted programs (a train step, a jitted init).

    rm -rf /tmp/suite_compiles
    PYTHONPATH=benchmarks python -m pytest -q -n auto tests -p suite_compiles
    python benchmarks/suite_compiles.py [--top=15]

As a pytest plugin (-p suite_compiles), each process of the run (pytest-xdist's workers too)
writes its events to $SUITE_COMPILES_DIR (default /tmp/suite_compiles) at the end; run as a
script, it sums them: per test file, the tests' wall and CPU time (of the process running
them) and what JAX spent in them. Subprocesses that tests start are not counted. The suite's
time: docs/speed.md, "The main command and the test suite".
"""

import collections
import gc
import json
import os
import time

import pytest

_DIR = os.environ.get("SUITE_COMPILES_DIR", "/tmp/suite_compiles")
_PHASES = {
    "/jax/core/compile/jaxpr_trace_duration": "trace",
    "/jax/core/compile/jaxpr_to_mlir_module_duration": "lower",
    "/jax/core/compile/backend_compile_duration": "compile",
}

# ---------------------------------------------------------------- the pytest plugin

# (test file, phase, function, seconds); phase "test": a test phase's own duration
_events: list[tuple[str, str, str, float]] = []
_current = ["(collection)"]


def _listen(event, duration, **kwargs):
    if event in _PHASES:
        _events.append((_current[0], _PHASES[event], kwargs.get("fun_name", "?"), duration))


def pytest_configure(config):
    from jax._src import monitoring

    monitoring.register_event_duration_secs_listener(_listen)


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_protocol(item, nextitem):
    """A test's setup, call and teardown: its wall and its process's CPU time. Here, not in
    pytest_runtest_logreport, which pytest-xdist's controller also calls for each worker's
    report (every test counted twice)."""
    _current[0] = item.nodeid.split("::")[0]
    wall, cpu = time.perf_counter(), time.process_time()
    yield
    _events.append((_current[0], "test", "", time.perf_counter() - wall))
    _events.append((_current[0], "cpu", "", time.process_time() - cpu))


def pytest_sessionfinish(session):
    from jax._src import core

    # An operation run alone compiles as jit(<its primitive's name>); jnp's own jitted
    # helpers (jit(_where), jit(_reduce_sum)) run alone the same way.
    primitives = sorted({p.name for p in gc.get_objects() if isinstance(p, core.Primitive)})
    os.makedirs(_DIR, exist_ok=True)
    with open(os.path.join(_DIR, f"{os.getpid()}.json"), "w", encoding="utf-8") as f:
        json.dump({"events": _events, "primitives": primitives}, f)


# ---------------------------------------------------------------- the summary


def _run_alone_names(primitives: set[str]) -> set[str]:
    """The names an operation run alone compiles under: a primitive's, a jnp function's
    (jnp.multiply compiles as jit(multiply)); jnp's private jitted helpers start with "_"."""
    import jax.numpy as jnp

    return primitives | set(dir(jnp)) | set(dir(jnp.linalg))


def _one_by_one(name: str, alone: set[str]) -> bool:
    bare = name.removeprefix("jit(").removesuffix(")")
    return bare in alone or bare.startswith("_")


def main():
    import argparse

    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--top", type=int, default=15, help="programs and test files to list")
    args = parser.parse_args()
    events, primitives = [], set()
    for name in sorted(os.listdir(_DIR)):
        with open(os.path.join(_DIR, name), encoding="utf-8") as f:
            record = json.load(f)
        events += record["events"]
        primitives |= set(record["primitives"])
    alone = _run_alone_names(primitives)
    totals = collections.defaultdict(lambda: [0, 0.0])
    by_file = collections.defaultdict(lambda: collections.defaultdict(float))
    programs = collections.defaultdict(lambda: [0, 0.0])  # name: [compiles, lower + compile s]
    for file, phase, name, seconds in events:
        if phase in ("test", "cpu"):
            by_file[file][phase] += seconds
            continue
        kind = "one by one" if _one_by_one(name, alone) else "program"
        totals[kind, phase][0] += 1
        totals[kind, phase][1] += seconds
        by_file[file][kind] += seconds
        if kind == "program" and phase != "trace":  # traces nest: a step's holds its model's
            programs[name][0] += phase == "compile"
            programs[name][1] += seconds
    tested, cpu = (sum(f[phase] for f in by_file.values()) for phase in ("test", "cpu"))
    print(
        f"{len(os.listdir(_DIR))} processes, {len(events)} events, tests {tested:.0f} s "
        f"({cpu:.0f} s of their processes' CPU)\n"
    )
    print("| run as | trace s (n) | lower s (n) | compile s (n) |\n|---|---|---|---|")
    for kind in ("one by one", "program"):
        cells = [f"{totals[kind, p][1]:.1f} ({totals[kind, p][0]:,})" for p in _PHASES.values()]
        print(f"| {kind} | " + " | ".join(cells) + " |")
    print("\n| program | compiles | lower + compile s |\n|---|---|---|")
    for name, (count, seconds) in sorted(programs.items(), key=lambda kv: -kv[1][1])[: args.top]:
        print(f"| {name} | {count} | {seconds:.1f} |")
    print("\n| test file | test s | CPU s | one by one s | programs s |\n|---|---|---|---|---|")
    ranked = sorted(by_file.items(), key=lambda kv: -kv[1]["test"])
    for file, seconds in ranked[: args.top]:
        print(
            f"| {file} | {seconds['test']:.1f} | {seconds['cpu']:.1f} | "
            f"{seconds['one by one']:.1f} | {seconds['program']:.1f} |"
        )


if __name__ == "__main__":
    main()
