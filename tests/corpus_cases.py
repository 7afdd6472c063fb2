"""The corpus and batch tests' shared fixtures: a temporary folder, a written file, a generated
corpus of distinct sentences, and CorpusTestCase, which loads it (corpus_test.py,
batches_test.py). Kept under the names they had in tests/batches_test.py, underscores included."""

import os
import shutil

import numpy as np
import tiny
from absl.testing import parameterized

from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DataConfig


def _tempdir(test):
    path = tiny.workdir()
    test.addCleanup(shutil.rmtree, path)
    return path


def _write(folder, name, text, mode="w"):
    path = os.path.join(folder, name)
    with open(path, mode) as f:
        f.write(text)
    return path


def _generated_docs(num_docs=400, seed=0):
    """Distinct random sentences (one per line) over a small lexicon."""
    rng = np.random.default_rng(seed)
    lexicon = [f"w{i}x" if i % 3 else f"word{i}" for i in range(200)]
    return [" ".join(rng.choice(lexicon, size=rng.integers(4, 25))) for _ in range(num_docs)]


class CorpusTestCase(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = _tempdir(self)
        self.cache = os.path.join(self.dir, "cache")
        self.docs = _generated_docs()
        self.path = _write(self.dir, "corpus.txt", "\n".join(self.docs) + "\n")

    def load(self, **kwargs):
        kwargs = dict(source=self.path, seq_len=16, vocab_size=300, valid_fraction=0.1) | kwargs
        return load_corpus(DataConfig(**kwargs), self.cache)
