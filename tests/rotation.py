"""The costliest test classes, taken in turns: each run of the suite checks one shard of them.

The suite's budget is 6 minutes on 2 cores. About 1,800 tests, most of them a few programs to
compile, cost twice that, and their cost is spread thin: the largest grids are sampled already
(tests/grid.py), and sampling every parameterized family down to a third would save ~10% more.
So the classes whose tests cost the most (`costs()`, seconds per class from a whole run) are
split into SHARDS shards of about equal cost, and a run of the whole suite checks every other
class and one shard, picked by the run's seed: over runs, every class is checked, and a
failure replays with the seed pytest prints.

  ROFORMER_TEST_SEED=<int>   replays a run's shard (and grid draws).
  ROFORMER_FULL_SUITE=1      runs every class (and every grid case).
  python -m pytest tests/x_test.py  (files or tests named, or -k, -m): all of what is asked for.

A class's cost includes what its tests share (a subprocess started once, a module's reference
run), so it goes, or stays, whole. The costs are data, remade from a whole run:

  python -m pytest -q -n auto tests/*_test.py --junitxml=/tmp/suite.xml   # every class
  python tests/rotation.py /tmp/suite.xml        # rewrites tests/class_seconds.json
"""

import json
import os
import sys
import xml.etree.ElementTree as ET
from collections.abc import Mapping, Sequence

COSTS_FILE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "class_seconds.json")
SHARDS = 3
THRESHOLD_S = 5.0  # classes cheaper than this always run


def costs() -> dict[str, float]:
    """{"file.py::Class": seconds} of the last whole run (`COSTS_FILE`)."""
    with open(COSTS_FILE, encoding="utf-8") as f:
        return json.load(f)


def shards(class_costs: Mapping[str, float], count: int, threshold: float) -> list[list[str]]:
    """The classes costing >= threshold in `count` shards of about equal cost: the costliest
    first, each into the cheapest shard so far (ties: the lower index), so the split depends
    on the costs alone."""
    heavy = sorted(
        (c for c in class_costs.items() if c[1] >= threshold), key=lambda c: (-c[1], c[0])
    )
    groups, totals = [[] for _ in range(count)], [0.0] * count
    for name, cost in heavy:
        i = totals.index(min(totals))
        groups[i].append(name)
        totals[i] += cost
    return groups


def turn(seed: int, count: int) -> int:
    """The shard whose turn a run of `seed` is."""
    return seed % count


def skipped(class_costs: Mapping[str, float], seed: int, count: int, threshold: float) -> set[str]:
    """The heavy classes a run of `seed` leaves out: those of every shard but its turn's."""
    groups = shards(class_costs, count, threshold)
    return {name for i, group in enumerate(groups) if i != turn(seed, count) for name in group}


def class_of(nodeid: str) -> str:
    """The class of a node id, "tests/a_test.py::Class::test_x[1]" -> "a_test.py::Class" (the
    file alone for a test function outside a class)."""
    path, *rest = nodeid.split("::")
    name = os.path.basename(path)
    return f"{name}::{rest[0]}" if len(rest) > 1 else name


def whole_suite(args: Sequence[str], rootdir: str) -> bool:
    """Whether pytest was asked for folders only (or nothing: testpaths), not named files or
    tests: only then are classes taken in turns."""
    return all(os.path.isdir(os.path.join(rootdir, arg)) for arg in args)


def from_junit(path: str) -> dict[str, float]:
    """{"file.py::Class": summed seconds} from a --junitxml report (classname
    "tests.a_test.Class")."""
    totals: dict[str, float] = {}
    for case in ET.parse(path).iter("testcase"):
        module, _, cls = case.get("classname").removeprefix("tests.").partition(".")
        key = f"{module}.py::{cls}" if cls else f"{module}.py"
        totals[key] = totals.get(key, 0.0) + float(case.get("time"))
    return {k: round(v, 1) for k, v in sorted(totals.items())}


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(f"usage: python {sys.argv[0]} JUNIT_XML  (from a whole run, see the docstring)")
    with open(COSTS_FILE, "w", encoding="utf-8") as f:
        json.dump(from_junit(sys.argv[1]), f, indent=0)
        f.write("\n")
