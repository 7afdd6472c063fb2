"""Tests for roformer_jax/training/checkpoints.py."""

import asyncio
import dataclasses
import glob
import os
import shutil
import sys
import types
from unittest import mock

import jax
import numpy as np
import orbax.checkpoint as ocp
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.nn.model import RoFormer
from roformer_jax.training.checkpoints import Checkpoints

MODEL = {"hidden_size": 64, "position": "rope", "valid": [1, 2]}


def _state(value: float):
    return {"step": np.int32(value), "params": {"kernel": np.full((2, 3), value, np.float32)}}


def _random_state(step: int):
    kernel = np.random.default_rng(step).standard_normal((64, 64)).astype(np.float32)
    return {"step": np.int32(step), "params": {"kernel": kernel}}


def _save(directory, keep, steps, state=_state):
    checkpoints = Checkpoints(directory, keep=keep)
    for step in steps:
        checkpoints.save(step, state(step), {"config": {"model": MODEL}, "window": step})
    checkpoints.close()


class CheckpointsTest(parameterized.TestCase):
    @classmethod
    def setUpClass(cls):
        # Steps 1 to 3 of the small and of the incompressible states, saved once and copied
        # by the tests that read or damage them: an orbax save is most of such a test's time.
        super().setUpClass()
        cls.saved = {state: os.path.join(tiny.workdir(), "checkpoints") for state in ("s", "r")}
        _save(cls.saved["s"], keep=3, steps=(1, 2, 3))
        _save(cls.saved["r"], keep=3, steps=(1, 2, 3), state=_random_state)

    def setUp(self):
        super().setUp()
        self.directory = os.path.join(tiny.workdir(), "checkpoints")

    def _save(self, keep, steps):
        if (keep, steps) == (3, (1, 2, 3)):
            shutil.copytree(self.saved["s"], self.directory)
        else:
            _save(self.directory, keep, steps)

    def _damage(self, pattern, damage):
        """Truncates or garbles the files of step 3 that match `pattern`."""
        rng = np.random.default_rng(0)
        paths = glob.glob(os.path.join(self.directory, "3", pattern))
        self.assertNotEmpty(paths)
        for path in paths:
            size = os.path.getsize(path)
            with open(path, "r+b") as f:
                if damage == "truncate":
                    f.truncate(size // 2)
                else:
                    f.write(rng.integers(0, 256, 100, dtype=np.uint8).tobytes())

    def test_restores_the_latest_state_and_meta(self):
        self._save(keep=2, steps=(1, 2, 3))
        self.assertEqual(sorted(os.listdir(self.directory)), ["2", "3"])  # the last 2 kept
        checkpoints = Checkpoints(self.directory, keep=2)
        abstract = jax.eval_shape(lambda: _state(0))
        state, meta = checkpoints.restore(abstract, {**MODEL, "valid": (1, 2)})
        checkpoints.close()
        np.testing.assert_array_equal(state["params"]["kernel"], np.full((2, 3), 3.0))
        self.assertEqual((int(state["step"]), meta["window"]), (3, 3))

    def test_a_gated_model_with_learned_positions_is_restored(self):
        # FoX's gates and learned positions: parameters of #55 that the model makes in attention.
        config = tiny.model_config(
            causal=True,
            position="rope_learned_positions",
            sections={"softmax": {"gate": "learned", "output_gate": True}},
        )
        # The model's parameter tree, traced but not compiled, holding random values.
        shapes = jax.eval_shape(
            RoFormer(config).init, jax.random.key(0), np.zeros((1, 4), np.int32)
        )
        rng = np.random.default_rng(0)
        params = jax.tree.map(
            lambda s: rng.standard_normal(s.shape).astype(s.dtype), shapes["params"]
        )
        attention = params["encoder"]["layer_0"]["attention"]
        self.assertLessEqual({"forget_gate", "output_gate", "position_gate"}, set(attention))
        state = {"step": np.int32(1), "params": jax.tree.map(np.asarray, params)}
        checkpoints = Checkpoints(self.directory, keep=1)
        checkpoints.save(1, state, {"config": {"model": dataclasses.asdict(config)}})
        checkpoints.close()
        checkpoints = Checkpoints(self.directory, keep=1)
        restored, _ = checkpoints.restore(jax.eval_shape(lambda: state), config)
        checkpoints.close()
        jax.tree.map(np.testing.assert_array_equal, restored, state)

    def test_restores_a_chosen_step(self):
        self._save(keep=3, steps=(1, 2, 3))
        checkpoints = Checkpoints(self.directory, keep=3)
        self.assertEqual(checkpoints.all_steps(), [1, 2, 3])
        abstract = jax.eval_shape(lambda: _state(0))
        state, meta = checkpoints.restore(abstract, MODEL, step=2)
        np.testing.assert_array_equal(state["params"]["kernel"], np.full((2, 3), 2.0))
        self.assertEqual(meta["window"], 2)
        with self.assertRaisesRegex(ValueError, r"no checkpoint of step 4 .* keeps \[1, 2, 3\]"):
            checkpoints.restore(abstract, MODEL, step=4)
        checkpoints.close()

    def test_a_save_cut_off_is_named_and_not_read(self):
        # What a process killed while orbax wrote step 4 leaves: the rerun used to start over
        # from step 0 or an older step without a word.
        self._save(keep=2, steps=(1, 2))
        os.makedirs(os.path.join(self.directory, "4.orbax-checkpoint-tmp"))
        checkpoints = Checkpoints(self.directory, keep=2)
        with self.assertLogs(level="WARNING") as logs:
            state, _ = checkpoints.restore(jax.eval_shape(lambda: _state(0)), MODEL)
        checkpoints.close()
        self.assertEqual(int(state["step"]), 2)
        self.assertRegex(logs.output[0], r"4.orbax-checkpoint-tmp\): not read; .* step 2")

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
            r"the checkpoint, 32 now; pre_ln: False in the checkpoint, True now\)",
        ):
            checkpoints.restore(jax.eval_shape(lambda: _state(0)), other)
        checkpoints.close()

    def test_a_field_added_since_the_save_counts_as_its_default(self):
        # Checkpoints written before ModelConfig gained a field (here its sections, RoPE's
        # base among them) hold none of it; the run trained with what the default stands for.
        self._save(keep=1, steps=(5,))
        checkpoints = Checkpoints(self.directory, keep=1)
        abstract = jax.eval_shape(lambda: _state(0))
        state, _ = checkpoints.restore(abstract, {**MODEL, "sections": {"rope": {"base": 1e4}}})
        self.assertEqual(int(state["step"]), 5)
        with self.assertRaisesRegex(ValueError, "sections.rope.base: 10000.0 in the .*, 500.0 now"):
            checkpoints.restore(abstract, {**MODEL, "sections": {"rope": {"base": 500.0}}})
        # The flat layout of before the sections reads as the sections: the same model.
        checkpoints.restore(abstract, {**MODEL, "rope_base": 1e4})
        checkpoints.close()

    @parameterized.named_parameters(
        ("meta_garbled", "meta/metadata", "garble"),
        ("state_data_truncated", "state/d/*", "truncate"),
        ("state_data_garbled", "state/d/*", "garble"),
        ("state_metadata_garbled", "state/_METADATA", "garble"),
        ("state_manifest_truncated", "state/manifest.ocdbt", "truncate"),
    )
    def test_a_damaged_newest_step_falls_back_to_the_one_before(self, pattern, damage):
        self._save(keep=3, steps=(1, 2, 3))
        self._damage(pattern, damage)
        checkpoints = Checkpoints(self.directory, keep=3)
        with self.assertLogs(level="WARNING") as logs:
            state, meta = checkpoints.restore(jax.eval_shape(lambda: _state(0)), MODEL)
        self.assertRegex("\n".join(logs.output), r"checkpoints/3 is damaged")
        # orbax's abandoned reads of the other arrays are not reported as asyncio errors.
        self.assertNotIn("never retrieved", "\n".join(logs.output))
        self.assertEqual((int(state["step"]), meta["window"]), (2, 2))
        np.testing.assert_array_equal(state["params"]["kernel"], np.full((2, 3), 2.0))
        # The damaged step is out of the way: the run's next saves are kept as usual.
        checkpoints.save(3, _state(3), {"config": {"model": MODEL}, "window": 3})
        checkpoints.close()
        self.assertEqual(sorted(os.listdir(self.directory)), ["1", "2", "3"])
        self.assertEqual(os.listdir(self.directory + ".damaged"), ["3"])

    @parameterized.parameters("Task", "Future")
    def test_asyncio_reports_of_reads_in_the_set_aside_step_are_dropped(self, kind):
        # Whether the garbage collector finds orbax's abandoned reads during the restore varies
        # from run to run, so the reports are made here as asyncio makes them.
        self._save(keep=3, steps=(1, 2, 3))
        self._damage("state/d/*", "garble")
        checkpoints = Checkpoints(self.directory, keep=3)
        with self.assertLogs(level="WARNING"):
            checkpoints.restore(jax.eval_shape(lambda: _state(0)), MODEL)
        loop = asyncio.new_event_loop()

        def report(where):
            error = ValueError(f"DATA_LOSS: Error reading {where}/state/d/0")
            message = f"{kind} exception was never retrieved"
            loop.default_exception_handler({"message": message, "exception": error})

        with self.assertNoLogs("asyncio"):
            report(os.path.join(self.directory, "3"))
        with self.assertLogs("asyncio", level="ERROR"):  # other asyncio errors still pass
            report("/elsewhere")
        checkpoints.close()
        loop.close()

    def _save_random(self, steps):
        """Steps of incompressible kernels, which orbax stores as their raw bytes."""
        if steps == (1, 2, 3):
            shutil.copytree(self.saved["r"], self.directory)
        else:
            _save(self.directory, len(steps), steps, state=_random_state)

    def _overwrite_middle(self, step, new_bytes):
        """new_bytes(old) replaces 8 bytes in the middle of step's largest array data file."""
        paths = glob.glob(os.path.join(self.directory, str(step), "state", "ocdbt.*", "d", "*"))
        path = max(paths, key=os.path.getsize)
        with open(path, "r+b") as f:
            f.seek(os.path.getsize(path) // 2)
            old = np.frombuffer(f.read(8), np.uint8)
            f.seek(-8, os.SEEK_CUR)
            f.write(new_bytes(old).tobytes())

    def _restore_warning(self, abstract):
        checkpoints = Checkpoints(self.directory, keep=3)
        with self.assertLogs(level="WARNING") as logs:
            state, _ = checkpoints.restore(abstract, MODEL)
        checkpoints.close()
        return state, "\n".join(logs.output)

    def test_flipped_bytes_make_a_step_damaged(self):
        self._save_random((1, 2, 3))
        self._overwrite_middle(3, lambda old: old ^ np.uint8(0x5A))
        state, log = self._restore_warning(jax.eval_shape(lambda: _random_state(0)))
        self.assertRegex(
            log, r"checkpoints/3 is damaged .*\['params'\]\['kernel'\] does not match the SHA"
        )
        self.assertEqual(int(state["step"]), 2)
        np.testing.assert_array_equal(
            state["params"]["kernel"], _random_state(2)["params"]["kernel"]
        )

    def test_a_non_finite_step_is_damaged_even_without_digests(self):
        # A step saved as before digests existed (orbax alone): only its finiteness is checked.
        self._save_random((1,))
        checkpoints = Checkpoints(self.directory, keep=3)
        state = _random_state(2)
        state["params"]["kernel"][5, 6] = np.nan
        items = dict(
            state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave({"config": {"model": MODEL}})
        )
        checkpoints._manager.save(2, args=ocp.args.Composite(**items))
        checkpoints.close()
        state, log = self._restore_warning(jax.eval_shape(lambda: _random_state(0)))
        self.assertRegex(log, r"checkpoints/2 is damaged .*\['params'\]\['kernel'\] holds NaN")
        self.assertEqual(int(state["step"]), 1)

    def test_a_non_finite_state_is_never_saved(self):
        checkpoints = Checkpoints(self.directory, keep=1)
        state = _state(1)
        state["params"]["kernel"][1, 2] = np.inf
        with self.assertRaisesRegex(FloatingPointError, r"\['params'\]\['kernel'\] holds NaN"):
            checkpoints.save(1, state, {"config": {"model": MODEL}})
        checkpoints.close()
        self.assertEqual(checkpoints.all_steps(), [])

    def test_reads_that_finish_into_the_closed_loop_are_not_reported(self):
        # orbax's other reads of a damaged step finish after it closed its event loop, at
        # times that vary; here they are reported as tensorstore reports them.
        def report(error):
            sys.unraisablehook(
                types.SimpleNamespace(
                    exc_type=type(error),
                    exc_value=error,
                    exc_traceback=error.__traceback__,
                    err_msg=None,
                    object=None,
                )
            )

        loop = asyncio.new_event_loop()
        loop.close()
        try:
            loop.call_soon_threadsafe(print)
        except RuntimeError as e:
            closed = e
        other = ValueError("another report")
        reported = []
        with mock.patch.object(sys, "unraisablehook", reported.append):
            self._save(keep=3, steps=(1, 2, 3))
            self._damage("state/d/*", "garble")
            checkpoints = Checkpoints(self.directory, keep=3)
            with self.assertLogs(level="WARNING"):
                checkpoints.restore(jax.eval_shape(lambda: _state(0)), MODEL)
            report(closed)
            report(other)
            checkpoints.close()
        self.assertEqual([r.exc_value for r in reported], [other])

    def test_another_model_is_an_error_even_behind_a_damaged_step(self):
        self._save(keep=2, steps=(1, 2))
        with open(os.path.join(self.directory, "2", "meta", "metadata"), "wb") as f:
            f.write(bytes(range(100)))
        checkpoints = Checkpoints(self.directory, keep=2)
        with self.assertRaisesRegex(ValueError, r"checkpoints/1 was trained with a different"):
            checkpoints.restore(jax.eval_shape(lambda: _state(0)), {**MODEL, "hidden_size": 8})
        checkpoints.close()

    def test_nothing_readable_is_an_error(self):
        self._save(keep=1, steps=(1,))
        with open(os.path.join(self.directory, "1", "meta", "metadata"), "wb") as f:
            f.write(bytes(range(100)))
        checkpoints = Checkpoints(self.directory, keep=1)
        with self.assertRaisesRegex(ValueError, r"none of the checkpoints \[1\].*can be read"):
            checkpoints.restore(jax.eval_shape(lambda: _state(0)), MODEL)
        checkpoints.close()


if __name__ == "__main__":
    absltest.main()
