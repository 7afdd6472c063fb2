"""Tests for roformer_jax/training/task_model.py: the encoder a fine-tuning starts from, and
layer-wise learning-rate decay."""

import os
import shutil
from unittest import mock

import chex
import jax
import numpy as np
import tiny
import tiny_tasks
from absl.testing import absltest

from roformer_jax import hf
from roformer_jax.nn import heads
from roformer_jax.nn.model_config import model_config
from roformer_jax.training import task_model

_TMP = tiny.workdir("task_model_test_")


def tearDownModule():
    shutil.rmtree(_TMP, ignore_errors=True)


class LayerDecayTest(absltest.TestCase):
    def test_factors_fall_from_the_head_to_the_embeddings(self):
        cfg = model_config("tiny", num_layers=3)
        shapes = jax.eval_shape(
            heads.TaskModel(cfg).init, jax.random.key(0), np.zeros((1, 4), np.int32)
        )["params"]
        f = task_model.layer_decay_factors(shapes, num_layers=3, decay=0.5)
        self.assertEqual(f["head"]["classifier"]["out_proj"]["kernel"], 1.0)
        for i in range(3):
            self.assertEqual(
                f["roformer"]["encoder"][f"layer_{i}"]["output"]["bias"], 0.5 ** (3 - i)
            )
        self.assertEqual(f["roformer"]["embeddings"]["word_embeddings"]["embedding"], 0.5**4)

    def test_updates_are_scaled_by_their_factor(self):
        tx = task_model.scale_by_factors({"head": 1.0, "roformer": 0.25})
        updates, _ = tx.update({"head": np.ones(2), "roformer": np.ones(2)}, tx.init(None))
        np.testing.assert_allclose(updates["roformer"], [0.25, 0.25])
        np.testing.assert_allclose(updates["head"], [1.0, 1.0])


class EncoderTest(absltest.TestCase):
    # Rows of tiny_tasks.config()'s 16 tokens, as the fine-tuning runs' (finetune_test.py): a
    # program of theirs that the suite's compilation cache holds is not compiled again.
    _IDS = np.zeros((1, 16), np.int32)

    def test_hf_encoder_without_its_mlm_head_starts_the_task_model(self):
        cfg, params, tok = task_model.load_encoder(tiny_tasks.hf_dir())
        self.assertEqual(sorted(params), ["embeddings", "encoder"])  # no mlm_head
        self.assertEqual(tok.vocab_size, cfg.vocab_size)
        ids = self._IDS
        task_params = task_model.initial_params(
            heads.TaskModel(cfg), params, jax.random.key(0), ids
        )
        chex.assert_trees_all_equal(task_params["roformer"], params)
        self.assertIn("classifier", task_params["head"])
        with self.assertRaisesRegex(ValueError, "encoder's parameters"):
            task_model.initial_params(
                heads.TaskModel(cfg), {"embeddings": params["embeddings"]}, jax.random.key(0), ids
            )

    def test_hf_task_checkpoint_gives_its_encoder(self):
        cfg, params, _ = task_model.load_encoder(tiny_tasks.hf_dir())
        task = heads.TaskModel(cfg, "question_answering")
        variables = {
            "params": task_model.initial_params(task, params, jax.random.key(2), self._IDS)
        }
        path = os.path.join(_TMP, "hf_qa")
        hf.save_hf_roformer(task, variables, path)
        shutil.copy(tiny_tasks.vocab(), path)
        _, loaded, _ = task_model.load_encoder(path)
        chex.assert_trees_all_equal(loaded, params)

    def test_pretraining_workdir_gives_its_model_params_and_tokenizer(self):
        workdir = os.path.join(_TMP, "run")
        os.makedirs(os.path.join(workdir, "checkpoints"), exist_ok=True)
        run = mock.Mock(params={"embeddings": 1, "encoder": 2, "mlm_head": 3, "pair_head": 4})
        with mock.patch.object(task_model.runs, "load_run", return_value=run) as load_run:
            cfg, params, tok = task_model.load_encoder(workdir)
        load_run.assert_called_once_with(workdir)
        self.assertEqual(
            (cfg, params, tok), (run.config.model, {"embeddings": 1, "encoder": 2}, run.tokenizer)
        )


if __name__ == "__main__":
    absltest.main()
