"""Tests for roformer_jax/data/corpus.py: a damaged cache names its file and what to do."""

import glob
import os

import tiny
from absl.testing import absltest, parameterized

from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DataConfig


class DamagedCacheTest(parameterized.TestCase):
    @parameterized.parameters("meta.json", "train.npy", "valid.npy")
    def test_a_cut_off_cache_file_is_named(self, name):
        tmp = tiny.workdir()
        cfg = DataConfig(source=tiny.corpus(tmp, documents=200), tokenizer="bytes", seq_len=32)
        load_corpus(cfg, tmp)
        (path,) = glob.glob(os.path.join(tmp, "corpus-*", name))
        with open(path, "r+b") as f:
            f.truncate(os.path.getsize(path) // 2)
        with self.assertRaisesRegex(
            ValueError, rf"data cache file {path} is damaged .*; delete the folder .* to rebuild"
        ):
            load_corpus(cfg, tmp)


if __name__ == "__main__":
    absltest.main()
