"""Parameter grids sampled per run: every required case always, the rest drawn from a seed.

A grid of hundreds of cases (tests/rope_scaling_test.py's) costs minutes, and most of its cases
check the same code path. Each run checks the cases that must never be left to chance (each
kind, each value of each axis, each edge case) and a random sample of the others, drawn anew
each run so that, over runs, the whole grid is checked.

  ROFORMER_TEST_SEED=<int>  replays a run's draw; pytest prints the seed it used in its header
                            and its summary (tests/conftest.py).
  ROFORMER_FULL_SUITE=1     runs every case of every grid (and every class: tests/rotation.py).
"""

import itertools
import os
import random
from collections.abc import Callable, Mapping, Sequence

SEED_VARIABLE = "ROFORMER_TEST_SEED"
FULL_VARIABLE = "ROFORMER_FULL_SUITE"


def seed() -> int:
    """This run's seed: $ROFORMER_TEST_SEED, else drawn now and put there.

    Written to the environment so that every process of the run draws the same sample:
    pytest-xdist's workers, started from the process that loaded conftest.py, inherit it, and
    must collect the same tests.
    """
    if not os.environ.get(SEED_VARIABLE):
        os.environ[SEED_VARIABLE] = str(random.SystemRandom().randrange(2**32))
    value = os.environ[SEED_VARIABLE]
    try:
        return int(value)
    except ValueError:
        raise ValueError(f"{SEED_VARIABLE}={value!r} is not an integer") from None


def full() -> bool:
    """Whether $ROFORMER_FULL_SUITE asks for every case."""
    return os.environ.get(FULL_VARIABLE, "") not in ("", "0")


def product(**axes: Sequence) -> list[dict]:
    """Every combination of the axes' values, as keyword dictionaries (parameterized.product's)."""
    return [dict(zip(axes, values)) for values in itertools.product(*axes.values())]


def sample(
    cases: Sequence[Mapping],
    required: Sequence[Callable[[Mapping], bool]],
    *,
    extra: int,
    name: str,
) -> list[dict]:
    """Cases that satisfy every predicate of `required`, plus `extra` drawn at random.

    Greedy set cover: while a predicate has no case in the sample, add the case that satisfies
    the most unsatisfied predicates (ties drawn at random), so the sample stays small. With
    ROFORMER_FULL_SUITE=1, every case. `name` makes each grid's draw its own.
    """
    if full():
        return [dict(c) for c in cases]
    rng = random.Random(f"{seed()}/{name}")
    for i, predicate in enumerate(required):
        if not any(predicate(c) for c in cases):
            raise ValueError(f"grid {name!r}: required predicate {i} matches no case")
    chosen, todo = [], list(required)
    while todo:
        counts = [sum(p(c) for p in todo) for c in cases]
        best = max(counts)
        chosen.append(rng.choice([i for i, n in enumerate(counts) if n == best]))
        todo = [p for p in todo if not p(cases[chosen[-1]])]
    rest = [i for i in range(len(cases)) if i not in chosen]
    chosen += rng.sample(rest, min(extra, len(rest)))
    return [dict(cases[i]) for i in sorted(chosen)]


def covering(name: str, *, extra: int, **axes: Sequence) -> list[dict]:
    """`sample` of the axes' product that has each value of each axis at least once."""
    required = [
        lambda c, a=axis, v=value: c[a] == v for axis, values in axes.items() for value in values
    ]
    return sample(product(**axes), required, extra=extra, name=name)
