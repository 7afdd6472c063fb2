"""The tests' tiny model, tiny experiment, generated corpus and temporary folders: one place.

model_config(**fields)         the "tiny" size (64 wide, 4 heads) in one layer, with `fields`
experiment_config(**overrides) configs/tiny.py with `section__field=value` overrides
corpus(directory)              sentences of WORDS, one document per line, in directory
workdir(prefix)                a new empty folder, removed when the test process exits
"""

import atexit
import functools
import os
import shutil
import tempfile

import numpy as np

from configs import tiny as tiny_config
from roformer_jax.nn import model_config as model_config_lib
from roformer_jax.training.config import ExperimentConfig, experiment_config_from_dict

# A vocabulary small enough that a byte model learns it in a few hundred steps, and that a
# word-level vocab.txt holds whole (tiny_tasks.py).
WORDS = "the a cat dog sat on mat and ran to see big small red blue sun moon".split()


def model_config(**fields) -> model_config_lib.ModelConfig:
    """The "tiny" size in one layer with `fields` (any ModelConfig field): the tests' one
    model builder. One layer compiles in about two thirds of two's time; a test of what
    passes between layers asks for num_layers=2."""
    return model_config_lib.model_config("tiny", **{"num_layers": 1, **fields})


def experiment_config(**overrides) -> ExperimentConfig:
    """configs/tiny.py with `overrides`: section__field=value (train__steps=8, or nested:
    model__sections__rope__base=100.0) or a top-level field (seed=1)."""
    d = tiny_config.get_config().to_dict()
    for key, value in overrides.items():
        *path, field = key.split("__")
        target = d
        for part in path:
            if part not in target:
                raise ValueError(f"override {key!r}: no {part!r}; there are {sorted(target)}")
            target = target[part]
        target[field] = value
    return experiment_config_from_dict(d)


def corpus(directory: str, *, documents: int = 2000, most_words: int = 30) -> str:
    """directory/corpus.txt: `documents` lines of 8 to `most_words` - 1 words of WORDS (seed 0),
    ~60 kB at the defaults. Written once per directory; returns its path."""
    path = os.path.join(directory, "corpus.txt")
    if not os.path.exists(path):
        rng = np.random.default_rng(0)
        lines = [
            " ".join(rng.choice(WORDS, size=rng.integers(8, most_words))) for _ in range(documents)
        ]
        with open(path, "w", encoding="utf-8") as f:
            f.write("\n".join(lines) + "\n")
    return path


def workdir(prefix: str = "test_") -> str:
    """A new empty folder under this process's temporary folder, which is removed at exit."""
    return tempfile.mkdtemp(prefix=prefix, dir=_root())


@functools.cache
def _root() -> str:
    root = tempfile.mkdtemp(prefix="roformer_jax_tests_")
    atexit.register(shutil.rmtree, root, ignore_errors=True)
    return root
