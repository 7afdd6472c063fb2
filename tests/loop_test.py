"""Tests for roformer_jax/training/loop.py (with train_loop.py, checkpoints.py, metrics.py): end
to end on `tiny`.

Every run trains configs/tiny.py on a small generated corpus with the byte tokenizer.
"""

import json
import os
import shutil
import signal
import subprocess
import sys
from unittest import mock

import chex
import jax
import numpy as np
import traces
from absl.testing import absltest, parameterized
from loop_cases import (
    _FAVOR,
    _ROOT,
    _TMP,
    _at,
    _config,
    _free_port,
    _initial_state,
    _overrides,
    _records,
    _reference_run,
)

from roformer_jax.data import batches as batches_lib
from roformer_jax.data.length_eval import length_eval_set
from roformer_jax.nn import decoding
from roformer_jax.training import loop, provenance, runs, runtime
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import step as step_lib


def tearDownModule():
    shutil.rmtree(_TMP, ignore_errors=True)
    _reference_run.cache_clear()  # their workdirs are gone


class EndToEndTest(parameterized.TestCase):
    def test_three_steps_write_metrics_config_and_checkpoints(self):
        # _reference_run fails when the step is traced again after step 1.
        workdir, final = _reference_run()
        records = metrics_lib.read_metrics(workdir)
        self.assertEqual([r["step"] for r in records], [1, 2, 3])
        for key in ("train/loss", "train/accuracy", "train/lr", "train/grad_norm", "elapsed_s"):
            self.assertTrue(np.isfinite(records[-1][key]), key)
        for record in records:  # softmax: no denominator to report; one step per record
            self.assertNotIn("train/min_denominator", record)
            self.assertEqual(record["train/grad_norm_max"], record["train/grad_norm"])
        self.assertIsNone(records[0]["train/tokens_per_s"])  # step 1 compiles: not timed
        self.assertGreater(records[1]["train/tokens_per_s"], 0)
        for length in (32, 64):
            self.assertGreater(final[f"valid/tokens_{length}"], 0)
            self.assertBetween(final[f"valid/loss_{length}"], 1.0, 7.0)
            loss = final[f"valid/loss_{length}"]
            self.assertAlmostEqual(final[f"valid/perplexity_{length}"], np.exp(loss), places=4)
        self.assertEqual(sorted(os.listdir(os.path.join(workdir, "checkpoints"))), ["2", "3"])
        with open(os.path.join(workdir, "config.json")) as f:
            self.assertEqual(json.load(f)["model"]["hidden_size"], 64)
        (session,) = provenance.read(workdir)["sessions"]  # what made these numbers
        self.assertEqual(session["start_step"], 0)
        self.assertNotEmpty(os.listdir(os.path.join(workdir, metrics_lib.TENSORBOARD_DIR)))

    def test_linear_runs_log_their_smallest_denominator(self):
        # FAVOR+ with RoPE in the numerator (eq. 19), trained end to end: its draws follow the
        # run's seed, and each record has the smallest |denominator| since the previous one.
        self.assertEqual(_config(**_FAVOR).model.sections["linear"].feature_seed, 3)
        workdir, _ = _reference_run("favor")
        records = metrics_lib.read_metrics(workdir)
        self.assertEqual([r["step"] for r in records], [1, 2, 3])
        for record in records:
            self.assertBetween(record["train/min_denominator"], 1e-30, 1e30)
            self.assertTrue(np.isfinite(record["train/grad_norm_max"]))

    def test_a_favor_run_is_evaluated_with_its_last_draw(self):
        # Redrawn every 2 updates, the 3-step run's last update drew period 1: its final
        # validation loss is its parameters' with those features, not with the first draw.
        workdir, final = _reference_run("favor")
        run = runs.load_run(workdir)
        held_out = length_eval_set(run.corpus, [32, 64], batch_size=8, max_tokens=2 * 8 * 30)
        # Jitted as the loop's, with the step as an int32 []: the loop's compiled step (from
        # the persistent cache), not an op-by-op run.
        eval_step = jax.jit(step_lib.make_eval_step(run.model))

        def loss(steps_done):
            steps = np.int32(steps_done)
            sums = [eval_step(run.params, b, steps) for b in held_out.batches[32]]
            return float(sum(s["loss"] for s in sums) / sum(s["count"] for s in sums))

        self.assertAlmostEqual(loss(run.step), final["valid/loss_32"], 5)
        # After 1 update: update 0's features, the first draw (period 0).
        self.assertGreater(abs(loss(1) - final["valid/loss_32"]), 1e-4)

    def test_clm_scores_every_next_token(self):
        # eval_batches=2 of 8 rows of 32 bound the held-out text to 480 tokens, rounded up to
        # whole windows of the longest length, 64: 496 tokens, every one a next-token target
        # at both lengths (not the closing [SEP]s; a head gathered at MLM's 15% would score
        # 5 of 30 per row).
        _, final = _reference_run("clm")
        self.assertEqual(final["valid/tokens_32"], 8 * 62)
        self.assertEqual(final["valid/tokens_64"], 8 * 62)
        self.assertAlmostEqual(final["valid/perplexity_32"], np.exp(final["valid/loss_32"]), 4)

    def test_a_finished_causal_run_loads_and_generates(self):
        workdir, final = _reference_run("clm")
        run = runs.load_run(workdir)
        self.assertEqual(run.step, 3)
        # The parameters read back give the validation loss the run logged at its end.
        held_out = length_eval_set(run.corpus, [32, 64], batch_size=8, max_tokens=2 * 8 * 30)
        eval_step = jax.jit(step_lib.make_eval_step(run.model))  # the loop's compiled step
        sums = [eval_step(run.params, b, np.int32(run.step)) for b in held_out.batches[32]]
        loss = sum(s["loss"] for s in sums) / sum(s["count"] for s in sums)
        self.assertAlmostEqual(float(loss), final["valid/loss_32"], 5)
        prompt = np.asarray([[run.tokenizer.cls_id, *run.tokenizer.encode("the cat")]])
        tokens = decoding.generate(run.model, {"params": run.params}, prompt, max_new_tokens=5)
        self.assertEqual(tokens.shape, (1, prompt.shape[1] + 5))
        with self.assertRaisesRegex(FileNotFoundError, "holds no training run"):
            runs.load_run(os.path.join(_TMP, "nothing here"))

    def test_rerun_of_a_finished_run_trains_nothing(self):
        workdir, final = _reference_run()
        copy = os.path.join(_TMP, "finished_copy")
        shutil.copytree(workdir, copy)
        again = loop.train_and_evaluate(_config(), copy)
        self.assertEqual(_records(copy), _records(workdir))
        self.assertEqual(again["valid/loss_64"], final["valid/loss_64"])

    def test_a_run_stopped_early_is_the_whole_runs_start_and_finishes_as_it(self):
        workdir, _ = _reference_run()
        early = os.path.join(_TMP, "until_1")
        loop.train_and_evaluate(_config(), early, until=1)  # off the checkpoint grid of 2
        self.assertEqual(_records(early), _records(workdir)[:1])  # the learning rate: of 3 steps
        loop.train_and_evaluate(_config(), early)
        self.assertEqual(provenance.read(early)["sessions"][-1]["start_step"], 1)  # saved at 1
        self.assertEqual(_records(early), _records(workdir))

    def test_resume_after_signal_and_crash_is_bitwise_identical(self):
        overrides = dict(
            model__hidden_dropout=0.1,  # dropout on: its keys must be redrawn identically
            train__steps=8,
            train__log_every=2,
            train__eval_every=4,
            train__checkpoint_every=3,
        )
        whole = os.path.join(_TMP, "whole")
        loop.train_and_evaluate(_config(**overrides), whole)

        parts = os.path.join(_TMP, "parts")
        real_write = metrics_lib.MetricsWriter.write

        def write_then(step, action):
            def write(self, record):
                real_write(self, record)
                if record["step"] == step:
                    action()

            return mock.patch.object(metrics_lib.MetricsWriter, "write", write)

        # SIGTERM while writing step 4 is seen after step 5: saved there, off the grid of 3;
        # a Ctrl-C while that save is written waits for it (it raised KeyboardInterrupt and
        # left no checkpoint).
        real_save = loop.Checkpoints.save

        def save_interrupted(self, step, *args):
            if step == 5:
                os.kill(os.getpid(), signal.SIGINT)
            real_save(self, step, *args)

        with write_then(4, lambda: os.kill(os.getpid(), signal.SIGTERM)):
            with mock.patch.object(loop.Checkpoints, "save", save_interrupted):
                with self.assertRaisesRegex(runtime.TrainingInterrupted, "step 5"):
                    loop.train_and_evaluate(_config(**overrides), parts)
        self.assertEqual(sorted(os.listdir(os.path.join(parts, "checkpoints"))), ["3", "5"])

        def crash():
            raise RuntimeError("power cut")

        # A crash after record 6 is written but before checkpoint 6: record 6 is redone.
        with write_then(6, crash), self.assertRaisesRegex(RuntimeError, "power cut"):
            loop.train_and_evaluate(_config(**overrides), parts)
        self.assertEqual(metrics_lib.read_metrics(parts)[-1]["step"], 6)
        # A restored state has the types of a stepped one: the step the runs above compiled
        # for this config serves it without a new trace.
        with traces.counted() as traced:
            loop.train_and_evaluate(_config(**overrides), parts)
        self.assertEqual(traced["train_step"], 0, traced)

        self.assertEqual([r["step"] for r in _records(whole)], [2, 4, 6, 8])
        self.assertEqual(_records(parts), _records(whole))  # bitwise: floats compared with ==

    def test_non_finite_loss_stops_and_keeps_last_good_checkpoint(self):
        real = batches_lib.train_batches

        def nan_at_step_3(corpus, **kwargs):
            for step, batch in enumerate(real(corpus, **kwargs), start=kwargs["start_step"] + 1):
                if step == 3:  # NaN weights: a NaN loss and NaN gradients
                    batch = {**batch, "weights": np.full_like(batch["weights"], np.nan)}
                yield batch

        workdir = os.path.join(_TMP, "nan")
        with mock.patch.object(batches_lib, "train_batches", nan_at_step_3):
            with self.assertRaisesRegex(
                FloatingPointError, r"at step 3\. The last good checkpoint is step 2"
            ):
                loop.train_and_evaluate(_config(), workdir)
        self.assertEqual(os.listdir(os.path.join(workdir, "checkpoints")), ["2"])
        self.assertEqual([r["step"] for r in metrics_lib.read_metrics(workdir)], [1, 2])

    def test_checkpoint_of_another_model_is_a_clear_error(self):
        workdir, _ = _reference_run()
        copy = os.path.join(_TMP, "mismatch")
        shutil.copytree(workdir, copy)
        # Even a change asked for cannot load a checkpoint of another model (without the flag
        # the config's own check refuses it first: workdir_test.py).
        with self.assertRaisesRegex(ValueError, r"hidden_size: 64 in the checkpoint, 32 now"):
            loop.train_and_evaluate(_config(model__hidden_size=32), copy, resume_with_changes=True)
        with open(os.path.join(copy, "config.json")) as f:  # left as it was
            self.assertEqual(json.load(f)["model"]["hidden_size"], 64)

    def test_gradient_accumulation_matches_one_batch(self):
        workdir, _ = _reference_run()
        accumulated = os.path.join(_TMP, "accumulated")
        loop.train_and_evaluate(_config(train__grad_accum=4), accumulated)
        self._assert_records_close(_records(accumulated), _records(workdir))

    def _assert_records_close(self, records, expected):
        self.assertEqual([r["step"] for r in records], [1, 2, 3])
        for a, b in zip(expected, records, strict=True):
            self.assertEqual(a.keys(), b.keys())
            for key in a:
                np.testing.assert_allclose(b[key], a[key], rtol=2e-5, err_msg=key)


class DevicesAndHostsTest(absltest.TestCase):
    """_reference_run("favor"): one layer on rows of 32, dropout on, FAVOR+ attention whose
    features are redrawn after 2 of the 3 steps, trained in this process on 1 device, and the
    same numbers from experiments/train_mlm.py on 2 hosts of 4 devices each (softmax's
    attention dropout is drawn per row as the hidden dropout is: step_test.py's
    DropoutPerRowTest).

    The hosts are subprocesses (XLA_FLAGS fakes CPU devices; jax.distributed joins two
    processes over loopback) given the reference's config as flags. Rows are split by device
    and host whatever the model's depth and length: one layer of 32 (validated at 32 and 64)
    shows it as two of 64 would, at half the compiling.
    """

    @staticmethod
    def _flags() -> list[str]:
        """`_config(**_FAVOR)` as train_mlm.py's flags: max_chars, None there, a bound past
        the generated corpus here, which cuts nothing."""
        overrides = _overrides(
            **_FAVOR,
            data__max_chars=10**6,
            train__data_cache_dir=os.path.join(_TMP, "hosts", "data"),
        )
        return [f"--config.{key.replace('__', '.')}={value}" for key, value in overrides.items()]

    @classmethod
    def _run(cls, name: str, *flags: str) -> list[dict]:
        """train_mlm.py as 2 processes of 4 devices each: its records."""
        workdir = os.path.join(_TMP, "hosts", name)
        command = [
            sys.executable,
            os.path.join(_ROOT, "experiments", "train_mlm.py"),
            f"--config={os.path.join(_ROOT, 'configs', 'tiny.py')}",
            f"--workdir={workdir}",
            *cls._flags(),
            *flags,
            "--distributed",
            f"--coordinator_address=127.0.0.1:{_free_port()}",
            "--num_processes=2",
        ]
        xla = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=4"
        env = dict(os.environ, XLA_FLAGS=xla)
        runs = [
            subprocess.Popen(
                [*command, f"--process_id={i}"],
                cwd=_ROOT,
                env=env,
                stdout=subprocess.PIPE,
                stderr=subprocess.STDOUT,
                text=True,
            )
            for i in range(2)
        ]
        for run in runs:
            output, _ = run.communicate(timeout=600)
            if run.returncode:
                raise AssertionError(f"{name} failed:\n{output[-3000:]}")
        return _records(workdir)

    def _assert_same_numbers(self, records, expected):
        self.assertEqual([r["step"] for r in records], [1, 2, 3])
        for a, b in zip(expected, records, strict=True):
            self.assertEqual(a.keys(), b.keys())
            for key in a:
                np.testing.assert_allclose(b[key], a[key], rtol=1e-4, err_msg=key)

    def test_two_hosts_of_four_devices_give_the_numbers_of_one(self):
        # 8 devices in all: rows split by host, then by device within each host, so that one
        # run shows both splits (each is red alone when broken). Then one jit over a mesh of
        # both hosts' devices, data 2 x fsdp 2 x tensor 2: each host places its own rows, and
        # the parameters are split across hosts.
        expected = _records(_reference_run("favor")[0])
        self._assert_same_numbers(self._run("hosts2x4"), expected)
        mesh = ("--config.mesh.data=2", "--config.mesh.fsdp=2", "--config.mesh.tensor=2")
        records = self._run("hosts2x4_mesh", *mesh)
        self._assert_same_numbers(records, expected)


class InitFromTest(absltest.TestCase):
    def test_a_fresh_run_starts_from_the_other_runs_final_params(self):
        source, _ = _reference_run()
        _, final_params, final_step = runs.load_params(source)
        self.assertEqual(final_step, 3)
        self.assertEqual(runs.checkpoint_steps(source), [2, 3])
        _, earlier, step = runs.load_params(source, 2)  # what position_table.py reads
        self.assertEqual(step, 2)
        word = ("embeddings", "word_embeddings", "embedding")
        self.assertFalse(np.array_equal(_at(earlier, word), _at(final_params, word)))
        # Another length and a RoPE scaling (position interpolation): no other parameters.
        cfg = _config(
            train__steps=2,
            train__init_from=source,
            data__seq_len=64,
            model__sections__rope__scaling='{"rope_type": "linear", "factor": 2.0}',
        )
        workdir = os.path.join(_TMP, "init_from")
        state = _initial_state(cfg, workdir)
        self.assertEqual(int(state.step), 0)
        chex.assert_trees_all_equal(state.params, final_params)
        for leaf in jax.tree.leaves(state.opt_state):  # fresh: Adam's moments and counts at 0
            np.testing.assert_array_equal(leaf, 0)
        self.assertEqual([r["step"] for r in metrics_lib.read_metrics(workdir)], [1, 2])

        # Resumed, the run has its own parameters: init_from is not read again.
        _, own_params, _ = runs.load_params(workdir)
        resumed = _initial_state(cfg, workdir)
        self.assertEqual(int(resumed.step), 2)
        chex.assert_trees_all_equal(resumed.params, own_params)

    def test_another_seed_of_one_model_is_not_traced_again(self):
        # A study's seeds, a resumed run, a run read back: jit's caches serve them.
        _reference_run()
        with traces.counted() as traced:
            loop.train_and_evaluate(_config(seed=1), os.path.join(_TMP, "seed1"))
        for name in ("init", "train_step", "eval_step"):
            self.assertEqual(traced[name], 0, traced)

    def test_run_rngs_redo_a_runs_initial_parameters(self):
        # What analyses of a finished run compare with (experiments/position_table.py).
        cfg = _config(seed=3)  # _config()'s steps: the reference run's step serves it
        started = _initial_state(cfg, os.path.join(_TMP, "run_rngs"))
        init = runs.model_and_optimizer(cfg)[3]
        chex.assert_trees_all_equal(jax.jit(init)(runs.run_rngs(3)[0]).params, started.params)
        other = jax.jit(init)(runs.run_rngs(4)[0]).params  # the seed matters
        word = ("embeddings", "word_embeddings", "embedding")
        self.assertFalse(np.array_equal(_at(other, word), _at(started.params, word)))

    def test_parameters_of_another_model_are_a_clear_error(self):
        source, _ = _reference_run()
        wider = _config(train__init_from=source, model__hidden_size=32)
        with self.assertRaisesRegex(
            ValueError,
            r"init_from='.*reference' .*\['embeddings'\]\['LayerNorm'\]\['bias'\] "
            r"is \(64,\) there and \(32,\) here",
        ):
            loop.train_and_evaluate(wider, os.path.join(_TMP, "init_from_wider"))
        learned = _config(train__init_from=source, model__position="learned")
        with self.assertRaisesRegex(ValueError, r"\['position_embeddings'\].* is absent there"):
            loop.train_and_evaluate(learned, os.path.join(_TMP, "init_from_learned"))

    def test_a_workdir_without_a_run_is_a_clear_error(self):
        missing = os.path.join(_TMP, "no run here")
        with self.assertRaisesRegex(
            FileNotFoundError, r"train.init_from='.*no run here': .* holds no training run"
        ):
            loop.train_and_evaluate(
                _config(train__init_from=missing), os.path.join(_TMP, "init_from_missing")
            )


class StagesTest(absltest.TestCase):
    def test_one_stage_is_the_plain_run(self):
        workdir, _ = _reference_run()
        staged = os.path.join(_TMP, "one_stage")
        loop.train_and_evaluate(_config(train__stages=((3, 32, 8),)), staged)
        self.assertEqual(_records(staged), _records(workdir))

    def test_stages_alternate_shapes(self):
        cfg = _config(train__steps=5, train__stages=((2, 32, 8), (1, 64, 4), (2, 16, 8)))
        final = loop.train_and_evaluate(cfg, os.path.join(_TMP, "stages"))
        self.assertTrue(np.isfinite(final["train/loss"]))

    def test_a_stage_past_the_models_max_length(self):
        cfg = _config(
            model__position="learned", model__max_len=32, train__stages=((2, 32, 8), (1, 64, 4))
        )
        with self.assertRaisesRegex(ValueError, "length 64, past the model's max_length 32"):
            loop.train_and_evaluate(cfg, os.path.join(_TMP, "too_long"))


if __name__ == "__main__":
    absltest.main()
