"""Tests for roformer_jax/training/runtime.py: devices, and a terminal a user can read."""

import functools
import logging as pylogging
import os
import shutil
import subprocess
import sys

import jax
import numpy as np
import tiny
from absl import logging
from absl.testing import absltest, flagsaver

from roformer_jax.training import provenance, runtime

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TRAIN = os.path.join(_ROOT, "experiments", "train_mlm.py")
_TINY = os.path.join(_ROOT, "configs", "tiny.py")


def _record(pathname: str, level: int) -> pylogging.LogRecord:
    return pylogging.LogRecord("absl", level, pathname, 1, "message", None, None)


def _train_mlm(*flags: str) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, _TRAIN, f"--config={_TINY}", *flags],
        cwd=_ROOT,
        capture_output=True,
        text=True,
        timeout=600,
    )


_QUIET = dict(cwd=_ROOT, capture_output=True, text=True, timeout=120)

# One layer on rows of 32: what the terminal shows does not depend on the model.
_THREE_STEPS = (
    "--config.model.num_layers=1",
    "--config.data.seq_len=32",
    "--config.data.valid_lengths=(32,)",
    "--config.train.steps=3",
    "--config.train.log_every=1",
    "--config.train.eval_every=3",
    "--config.train.checkpoint_every=2",
    "--config.train.eval_batches=1",
    "--config.data.max_chars=50000",
)


@functools.cache
def _three_steps() -> tuple[str, subprocess.CompletedProcess]:
    """A 3-step run of train_mlm.py: its workdir and its process, run once for the module."""
    workdir = tiny.workdir()
    return workdir, _train_mlm(f"--workdir={workdir}", *_THREE_STEPS)


class DevicesTest(absltest.TestCase):
    def test_one_device_is_plain_jit(self):
        devices = runtime.Devices()
        self.assertEqual(jax.device_count(), 1)
        self.assertIsNone(devices.axis)
        batch = {"x": np.arange(6).reshape(3, 2)}
        self.assertIs(devices.shard(batch), batch)
        with self.assertRaisesRegex(ValueError, "batch_size 6 is not divisible .* grad_accum 4"):
            devices.check_batch(6, 4, "batch_size")

    def test_xla_flags_reach_xla_before_the_backend_and_are_refused_after(self):
        # Before: XLA reads the flag as its backend starts (it ends the process on this
        # unknown one, so the flag was read).
        code = (
            "from roformer_jax.training import runtime; import jax.numpy as jnp; "
            "runtime.use_xla_flags('--xla_not_a_flag_of_xla=1'); jnp.ones(2).block_until_ready()"
        )
        env = {k: v for k, v in os.environ.items() if k != "XLA_FLAGS"}
        done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env)
        self.assertNotEqual(done.returncode, 0)
        self.assertIn("--xla_not_a_flag_of_xla=1", done.stderr)
        # After (this process has computed): refused, XLA_FLAGS left as it was.
        jax.numpy.ones(2).block_until_ready()
        before = os.environ.get("XLA_FLAGS")
        with self.assertRaisesRegex(RuntimeError, "come too late"):
            runtime.use_xla_flags("--xla_cpu_experimental_ynn_fusion_type=")
        runtime.use_xla_flags("")  # nothing to add: nothing to refuse
        self.assertEqual(os.environ.get("XLA_FLAGS"), before)


class QuietLogsTest(absltest.TestCase):
    def test_library_info_is_hidden_below_verbosity_1(self):
        keep = runtime._ActionableRecords().filter
        orbax = "/usr/lib/python3/site-packages/orbax/checkpoint/checkpoint_manager.py"
        ours = os.path.join(_ROOT, "roformer_jax", "training", "loop.py")
        self.assertFalse(keep(_record(orbax, pylogging.INFO)))
        self.assertTrue(keep(_record(orbax, pylogging.WARNING)))
        self.assertTrue(keep(_record(ours, pylogging.INFO)))
        with flagsaver.flagsaver(verbosity=logging.DEBUG):
            self.assertTrue(keep(_record(orbax, pylogging.INFO)))

    def test_a_run_shows_progress_saves_and_a_plain_summary_only(self):
        _, run = _three_steps()
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        lines = run.stderr.splitlines()
        self.assertEmpty([line for line in lines if "orbax" in line or "Options" in line])
        self.assertLen([line for line in lines if "checkpoint of step" in line], 2)  # 2, 3
        progress = [line for line in lines if "step 3/3" in line]
        self.assertLen(progress, 1)
        self.assertRegex(progress[0], r"tok/s  ETA 0:00:00")
        self.assertIn("final metrics: step 3, train/loss", lines[-1])
        self.assertNotIn("np.float", run.stderr)
        self.assertLess(len(lines), 20, run.stderr)

    def test_a_user_error_is_the_last_line_without_traceback(self):
        run = _train_mlm(f"--workdir={tiny.workdir()}", "--config.data.source=/no/corpus.txt")
        self.assertEqual(run.returncode, 1)
        self.assertNotIn("Traceback", run.stderr)
        last = run.stderr.strip().splitlines()[-1]
        self.assertRegex(last, r"^FileNotFoundError: .*/no/corpus.txt")
        run = _train_mlm(f"--workdir={tiny.workdir()}", "--config.optim.learning_rate=-1")
        self.assertNotIn("Traceback", run.stderr)
        self.assertRegex(run.stderr.strip().splitlines()[-1], r"^ValueError: learning_rate")

    def test_an_unreadable_config_file_or_a_stop_is_one_line(self):
        run = subprocess.run(
            [sys.executable, _TRAIN, "--config=configs/nope.py", f"--workdir={tiny.workdir()}"],
            **_QUIET,
        )
        self.assertEqual(run.returncode, 1)
        self.assertNotIn("Traceback", run.stderr)
        self.assertRegex(run.stderr.strip(), r"^OSError: --config: .*No such file.*nope.py'$")
        for raised, code, last in (
            ("runtime.TrainingInterrupted('stopped at step 4 on request')", 1, "step 4"),
            ("KeyboardInterrupt", 130, "KeyboardInterrupt: rerun the command to resume"),
        ):
            main = f"def main(argv):\n    raise {raised}\nruntime.run_main(main)"
            program = f"from roformer_jax.training import runtime\n{main}"
            run = subprocess.run([sys.executable, "-c", program], **_QUIET)
            self.assertEqual(run.returncode, code, run.stderr)
            self.assertNotIn("Traceback", run.stderr)
            self.assertIn(last, run.stderr.strip().splitlines()[-1])

    def test_a_misspelt_key_is_one_line_with_its_suggestion(self):
        run = _train_mlm(f"--workdir={tiny.workdir()}", "--config.train.stepz=3")
        self.assertEqual(run.returncode, 1)
        self.assertEqual(
            run.stderr.strip().splitlines(),
            [
                "ValueError: --config.train.stepz: the config has no key 'stepz'. "
                'Did you mean "steps" instead of "stepz"?'
            ],
        )

    def test_a_session_of_one_step_exits_0(self):
        # The 3-step run resumed from its checkpoint of step 2: a session of one step (its
        # programs the first session compiled, read back from the compilation cache), which
        # compiles and is not timed: train/tokens_per_s is None.
        finished, _ = _three_steps()
        workdir = tiny.workdir()
        shutil.copytree(finished, workdir, dirs_exist_ok=True)
        shutil.rmtree(os.path.join(workdir, "checkpoints", "3"))
        run = _train_mlm(f"--workdir={workdir}", *_THREE_STEPS)
        self.assertEqual(run.returncode, 0, run.stderr[-3000:])
        self.assertEqual(provenance.read(workdir)["sessions"][-1]["start_step"], 2)
        self.assertIn("train/tokens_per_s n/a", run.stderr.strip().splitlines()[-1])


if __name__ == "__main__":
    absltest.main()
