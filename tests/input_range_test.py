"""Tests for roformer_jax/nn/input_range.py: ids outside the model's tables refused on the host,
where they enter (generate's own test is in decoding_test.py)."""

import glob
import os
import tempfile

import jax
import numpy as np
import tiny
from absl.testing import absltest

from roformer_jax import hf
from roformer_jax.data.corpus import load_corpus
from roformer_jax.nn import input_range
from roformer_jax.training.loop import train_and_evaluate


class CheckBatchTest(absltest.TestCase):
    def test_each_table_is_checked(self):
        sizes = dict(vocab_size=10, type_vocab_size=2, max_length=8)
        ids, types = np.ones((2, 8), np.int32), np.zeros((2, 8), np.int32)
        input_range.check_batch({"input_ids": ids, "token_type_ids": types}, **sizes)
        types[0, 3] = 2
        with self.assertRaisesRegex(ValueError, r"token_type_ids holds 2 \(at \(0, 3\)\)"):
            input_range.check_batch({"input_ids": ids, "token_type_ids": types}, **sizes)
        ids[1, 0] = -1
        with self.assertRaisesRegex(ValueError, r"input_ids holds -1 \(at \(1, 0\)\)"):
            input_range.check_batch({"input_ids": ids}, **sizes)
        longer = {"input_ids": np.ones((2, 9), np.int32)}
        with self.assertRaisesRegex(ValueError, r"positions holds 8 .* the model's positions"):
            input_range.check_batch(longer, **sizes)
        input_range.check_batch(longer, **{**sizes, "max_length": None})  # RoPE: no table


class WhereIdsEnterTest(absltest.TestCase):
    def test_the_data_pipeline_refuses_a_stream_past_the_vocabulary(self):
        tmp = tiny.workdir()
        cfg = tiny.experiment_config(
            data__source=tiny.corpus(tmp, documents=300),
            data__seq_len=32,
            data__valid_lengths=(),
            data__max_chars=None,
            model__num_layers=1,
            train__steps=1,
            train__batch_size=4,
            train__eval_batches=1,
            train__data_cache_dir=os.path.join(tmp, "data"),
        )
        load_corpus(cfg.data, cfg.train.data_cache_dir)
        (path,) = glob.glob(os.path.join(tmp, "data", "corpus-*", "train.npy"))
        stream = np.load(path, mmap_mode="r+")  # a cache written over after it was built
        stream[5] = cfg.model.vocab_size
        stream.flush()
        del stream
        with self.assertRaisesRegex(
            ValueError, rf"train ids holds {cfg.model.vocab_size} \(at \(5,\)\)"
        ):
            train_and_evaluate(cfg, os.path.join(tmp, "run"))

    def test_the_model_outside_jit_refuses_ids_past_its_tables(self):
        model = hf.RoFormer(tiny.model_config(vocab_size=20, position="learned", max_len=16))
        ids = np.arange(8)[None]
        variables = jax.jit(model.init)(jax.random.key(0), ids)
        for inputs, message, past_the_end in (
            (dict(input_ids=ids + 13), r"input_ids holds 20 \(at \(0, 7\)\)", True),
            (dict(input_ids=ids - 1), r"input_ids holds -1 \(at \(0, 0\)\)", False),
            (dict(token_type_ids=ids % 3), r"token_type_ids holds 2 .* token-type table", True),
            (dict(position_ids=ids + 9), r"position_ids holds 16 .* the model's positions", True),
            (dict(mlm_positions=ids[:, 4:] + 4), r"mlm_positions holds 11 .* the sequence", True),
        ):
            inputs = {"input_ids": ids, **inputs}
            with self.assertRaisesRegex(ValueError, message):
                model.apply(variables, **inputs)
            # Traced, the values are unknown: past the end the lookup gives NaN (the module's
            # docstring); a negative id wraps around.
            out = jax.jit(lambda v, i: model.apply(v, **i))(variables, inputs)
            self.assertEqual(bool(np.isnan(out.logits).any()), past_the_end)
        model.apply(variables, ids + 12, position_ids=ids + 8, mlm_positions=ids[:, 4:])

    def test_the_hf_loader_refuses_a_vocabulary_larger_than_its_table(self):
        config = tiny.model_config(vocab_size=20)
        model = hf.RoFormer(config, with_mlm_head=True)
        variables = model.init(jax.random.key(0), np.zeros((1, 4), np.int32))
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            with open(os.path.join(d, "vocab.txt"), "w", encoding="utf-8") as f:
                f.write("".join(f"t{i}\n" for i in range(21)))
            with self.assertRaisesRegex(
                ValueError, r"vocab.txt has 21 tokens but the embedding table 20"
            ):
                hf.load_hf_roformer(d)


if __name__ == "__main__":
    absltest.main()
