"""Tests for roformer_jax/checkpoints.py."""

import os
import tempfile

import jax
import numpy as np
from absl.testing import absltest

from roformer_jax.checkpoints import Checkpoints

MODEL = {"hidden_size": 64, "position": "rope", "valid": [1, 2]}


def _state(value: float):
    return {"step": np.int32(value), "params": {"kernel": np.full((2, 3), value, np.float32)}}


class CheckpointsTest(absltest.TestCase):
    def setUp(self):
        super().setUp()
        self.directory = os.path.join(tempfile.mkdtemp(), "checkpoints")

    def _save(self, keep, steps, model=MODEL):
        checkpoints = Checkpoints(self.directory, keep=keep)
        for step in steps:
            checkpoints.save(step, _state(step), {"config": {"model": model}, "window": step})
        checkpoints.close()

    def test_restores_the_latest_state_and_meta(self):
        self._save(keep=2, steps=(1, 2, 3))
        self.assertEqual(sorted(os.listdir(self.directory)), ["2", "3"])  # the last 2 kept
        checkpoints = Checkpoints(self.directory, keep=2)
        abstract = jax.eval_shape(lambda: _state(0))
        state, meta = checkpoints.restore(abstract, {**MODEL, "valid": (1, 2)})
        checkpoints.close()
        np.testing.assert_array_equal(state["params"]["kernel"], np.full((2, 3), 3.0))
        self.assertEqual((int(state["step"]), meta["window"]), (3, 3))

    def test_empty_directory_restores_nothing(self):
        checkpoints = Checkpoints(self.directory, keep=1)
        self.assertIsNone(checkpoints.restore(jax.eval_shape(lambda: _state(0)), MODEL))
        checkpoints.close()

    def test_another_model_names_the_differences(self):
        self._save(keep=1, steps=(5,))
        checkpoints = Checkpoints(self.directory, keep=1)
        other = {"hidden_size": 32, "position": "rope", "valid": [1, 2], "pre_ln": True}
        with self.assertRaisesRegex(
            ValueError,
            r"checkpoints/5 was trained with a different model config \(hidden_size: 64 in "
            r"the checkpoint, 32 now; pre_ln: '<absent>' in the checkpoint, True now\)",
        ):
            checkpoints.restore(jax.eval_shape(lambda: _state(0)), other)
        checkpoints.close()


if __name__ == "__main__":
    absltest.main()
