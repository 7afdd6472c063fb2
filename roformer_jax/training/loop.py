"""The pre-training loop: data → model and optimizer → restore → step functions → loop.

    final_metrics = train_and_evaluate(cfg, workdir)   # cfg: training.config.ExperimentConfig

Steps are dispatched asynchronously (the host prepares step t + 1 while the devices run step
t); metrics reach the host only to log, evaluate or save, and are checked for NaN/Inf there.

Determinism. The data of step t depend only on (seed, t) (rows, and each row's masks on its
global index), dropout only on (seed, t, global row index) (see step.py), and the host-side
metric sums travel in the checkpoint: a run resumed from any checkpoint logs bitwise the same
numbers as an uninterrupted one on CPU, and 1 or 8 devices, 1 or 2 hosts and any grad_accum
give the same numbers up to float32 summation order.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
from collections.abc import Callable, Iterator
from typing import Any, NamedTuple

import jax
from absl import logging

from roformer_jax.data import doc_pairs, staging
from roformer_jax.data.batches import held_out_pairs
from roformer_jax.data.corpus import Corpus, load_corpus
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance, runtime
from roformer_jax.training.checkpoints import Checkpoints
from roformer_jax.training.config import ExperimentConfig
from roformer_jax.training.runs import model_and_optimizer, params_from, run_rngs, state_shapes
from roformer_jax.training.step import make_eval_step, make_train_step


def train_and_evaluate(cfg: ExperimentConfig, workdir: str, *, until: int | None = None) -> dict:
    """Trains `cfg` in `workdir`, resuming from its latest checkpoint; returns final metrics.

    until: stop after this step, with a checkpoint there: the start of the run, on its whole
    schedule (the learning rate still decays to train.steps), which a later call finishes.

    Writes workdir/config.json, provenance.json (the code and machine of each session),
    metrics.jsonl, tensorboard/ and checkpoints/ (process 0).
    Raises FloatingPointError on a non-finite loss or gradient (no checkpoint is written
    after it), runtime.TrainingInterrupted after saving when stopped by a signal, and
    ValueError when workdir holds a checkpoint of a different model.
    """
    devices = runtime.Devices()
    stages = _stages(cfg, devices)

    # --- Data: this host's rows of every global batch, and the held-out sets.
    data = _data(cfg, workdir, stages, devices)

    # --- Model and optimizer; shapes first.
    model, schedule, tx, init = model_and_optimizer(cfg)
    init_rng, step_rng = run_rngs(cfg.seed)
    abstract_state = state_shapes(init)
    n_params = sum(x.size for x in jax.tree.leaves(abstract_state.params))
    logging.info("%s parameters; %d device(s) on %d host(s)", f"{n_params:,}", jax.device_count(),
                 jax.process_count())  # fmt: skip

    # --- Restore, or initialize.
    checkpoints = Checkpoints(os.path.join(workdir, "checkpoints"), keep=cfg.train.keep_checkpoints)
    restored = checkpoints.restore(abstract_state, cfg.model)
    if restored is None:
        state, progress = _initial_state(cfg, init, init_rng, tx, data.corpus)
    else:
        state, progress = jax.device_put(restored[0]), restored[1]
    start, elapsed = int(state.step), runtime.Clock(progress.get("elapsed_s", 0.0))
    logging.info("%s at step %d", "resuming" if start else "starting", start)
    _record_session(cfg, workdir, start)

    # --- Step functions: one code path, jitted on one device or pmapped.
    train_step, eval_step = _step_functions(cfg, model, tx)
    state = devices.replicate(state)

    # --- Loop: log, evaluate, checkpoint.
    loop = _Loop(
        cfg, devices, data, schedule, eval_step, checkpoints,
        writer=metrics_lib.MetricsWriter(workdir, resume_step=start,
                                         enabled=jax.process_index() == 0),
        speed=runtime.Speed(stages, start),
        elapsed=elapsed,
        window=progress["window"],
        end=cfg.train.steps if until is None else min(until, cfg.train.steps),
    )  # fmt: skip
    return loop.run(train_step, state, step_rng, start)


# ---------------------------------------------------------------- data


class RunData(NamedTuple):
    """What a run reads, turned from its config's data section once (`_data`)."""

    corpus: Corpus
    train: Callable[..., Iterator[dict]]  # (start_step=t) -> this host's batches of t + 1, ...
    valid_sets: dict[int, list[dict]]  # length -> this host's validation batches
    pair_sets: list[dict]  # an objective of pairs: held-out pairs for the pair accuracy


def _data(cfg: ExperimentConfig, workdir: str, stages, devices: runtime.Devices) -> RunData:
    """The corpus, the train stream of `stages` and the held-out sets of `cfg`."""
    tcfg, hosts = cfg.train, dict(process_index=devices.process_index,
                                  process_count=devices.process_count)  # fmt: skip
    corpus = load_corpus(cfg.data, tcfg.data_cache_dir or os.path.join(workdir, "data"))
    if corpus.tokenizer.vocab_size > cfg.model.vocab_size:
        raise ValueError(
            f"the tokenizer has {corpus.tokenizer.vocab_size} ids but model.vocab_size is "
            f"{cfg.model.vocab_size}; leave model.vocab_size None to follow the tokenizer"
        )
    eval_rows = tcfg.eval_batch_size or tcfg.batch_size
    valid_sets = staging.valid_sets(
        corpus, (cfg.data.seq_len, *cfg.data.valid_lengths), batch_size=eval_rows,
        max_tokens=tcfg.eval_batches and tcfg.eval_batches * eval_rows * (cfg.data.seq_len - 2),
        max_length=cfg.model.max_length, **hosts,
    )  # fmt: skip
    pair_sets = []
    if cfg.data.pairs:
        try:
            pair_sets = held_out_pairs(
                corpus, num_batches=-(-cfg.data.eval_pairs // eval_rows), batch_size=eval_rows,
                **hosts,
            )  # fmt: skip
        except doc_pairs.TooFewDocuments as e:
            logging.warning("held-out pairs skipped: %s", e)
    train = functools.partial(staging.staged_batches, corpus, stages, seed=cfg.seed, **hosts)
    return RunData(corpus, train, valid_sets, pair_sets)


# ---------------------------------------------------------------- restore and step functions


def _initial_state(cfg: ExperimentConfig, init, init_rng, tx, corpus: Corpus):
    """(state, progress) of a fresh start: init(init_rng), or train.init_from's params with a
    fresh optimizer (a fresh start only: a resumed run has its own params)."""
    state = jax.jit(init)(init_rng)
    if cfg.train.init_from is not None:
        params = params_from(cfg.train.init_from, state.params, corpus.tokenizer)
        params = jax.device_put(params)
        state = state.replace(params=params, opt_state=jax.jit(tx.init)(params))
    return state, {"window": metrics_lib.empty_window()}


def _record_session(cfg: ExperimentConfig, workdir: str, start: int) -> None:
    """workdir/config.json, and this session in provenance.json (process 0 only)."""
    if jax.process_index() != 0:
        return
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(dataclasses.asdict(cfg), f, indent=2)
    if start < cfg.train.steps:  # a finished run rerun trains nothing: no session
        provenance.record_session(workdir, start_step=start)


def _step_functions(cfg: ExperimentConfig, model, tx):
    """(train_step, eval_step), compiled for this process's devices (runtime.Devices.compile).

    The same pair for the same model, optimizer and step settings (model_and_optimizer gives
    the same model and optimizer for the same settings), so that jax.jit's caches serve a
    later run of the model in this process.
    """
    # Where targets are not bounded by masking.max_targets (whole words, "clm"), the head
    # runs at every position.
    return _compiled_steps(model, tx, cfg.train.grad_accum, cfg.data.target_rate)


@functools.lru_cache(maxsize=32)
def _compiled_steps(model, tx, grad_accum: int, mask_prob):
    devices = runtime.Devices()  # a process's devices do not change
    return devices.compile(
        make_train_step(model, tx, grad_accum=grad_accum, axis_name=devices.axis,
                        mask_prob=mask_prob),
        make_eval_step(model, axis_name=devices.axis, mask_prob=mask_prob),
    )  # fmt: skip


# ---------------------------------------------------------------- the loop


@dataclasses.dataclass
class _Loop:
    """What the loop steps, logs, evaluates and saves with.

    window: host metric sums since the last record; it travels in the checkpoint with the
    elapsed time, so a resumed run logs what an uninterrupted one would.
    """

    cfg: ExperimentConfig
    devices: runtime.Devices
    data: RunData
    schedule: Callable[[int], Any]
    eval_step: Callable
    checkpoints: Checkpoints
    writer: metrics_lib.MetricsWriter
    speed: runtime.Speed
    elapsed: runtime.Clock
    window: dict
    end: int  # the last step to train now: train.steps, or an earlier stop

    def run(self, train_step, state, step_rng, start: int) -> dict:
        """Steps start + 1, ..., end; returns the last record's values."""
        steps, batches = self.cfg.train.steps, self.data.train(start_step=start)
        pending, last = [], {"step": start}  # pending: metrics of steps not yet fetched
        with (
            runtime.stop_requests() as stop_requested,
            contextlib.closing(self.writer),
            contextlib.closing(batches),
        ):
            try:
                for done in range(start + 1, self.end + 1):
                    state, step_metrics = train_step(
                        state, self.devices.shard(next(batches)), step_rng
                    )
                    pending.append(step_metrics)
                    if len(pending) > 2:  # at most 2 steps in flight: a stop request or a save
                        jax.block_until_ready(pending[-3])  # waits for 2 steps, not a backlog
                    self.speed.stepped(done, step_metrics)
                    if done == start + 1:
                        logging.info("first step (with compilation): %.1f s",
                                     self.elapsed.session())  # fmt: skip
                    self._after_step(state, done, pending, last, stop_requested)
                if start >= steps:  # a finished run rerun: report, write nothing
                    last.update(self._evaluate(state))
            finally:
                self.checkpoints.close()
        return last

    def _after_step(self, state, done: int, pending: list, last: dict, stop_requested) -> None:
        """Logs, evaluates and saves where step `done` calls for it; stops on request."""
        tcfg = self.cfg.train
        is_log, is_eval, is_save = (
            done % every == 0 or done == tcfg.steps
            for every in (tcfg.log_every, tcfg.eval_every, tcfg.checkpoint_every)
        )
        is_save = is_save or done == self.end
        stop = stop_requested() or runtime.preemption(done)
        if not (is_log or is_eval or is_save or stop):
            return
        # Fetch the pending metrics; a non-finite one stops the run before any save.
        fetched = [self.devices.first(m) for m in pending]
        _accumulate(self.window, fetched, done - len(pending) + 1, self.checkpoints)
        pending.clear()
        if is_log or is_eval:
            last.update(self._record(state, done, is_log=is_log, is_eval=is_eval))
        if is_save or stop:
            self._save(state, done)
        if stop:
            raise runtime.TrainingInterrupted(
                f"stopped at step {done} on request; checkpoint saved in "
                f"{self.checkpoints.directory}. Rerun with the same workdir to resume."
            )
        self.speed.restart()  # evaluations and saves are not training time

    def _record(self, state, done: int, *, is_log: bool, is_eval: bool) -> dict:
        """The record of step `done` (the window's metrics, validation), written and shown."""
        record = {"step": done}
        if is_log:
            lr = float(self.schedule(done - 1))
            record.update(
                metrics_lib.window_record(self.window, lr=lr, tokens_per_s=self.speed.rate())
            )
            self.window.update(metrics_lib.empty_window())
        if is_eval:
            record.update(self._evaluate(state))
        record["elapsed_s"] = self.elapsed()
        self.writer.write(record)
        eta = self.speed.eta_s(done, record.get("train/tokens_per_s"))
        metrics_lib.log_progress(record, total_steps=self.cfg.train.steps, eta_s=eta)
        return record

    def _evaluate(self, state) -> dict:
        def eval_fn(batch):
            return self.devices.first(
                self.eval_step(state.params, self.devices.shard(batch), state.step)
            )

        return _evaluate(eval_fn, self.data.valid_sets, self.data.pair_sets)

    def _save(self, state, step: int) -> None:
        meta = {
            "config": dataclasses.asdict(self.cfg),
            "window": self.window,
            "elapsed_s": self.elapsed(),
        }
        self.checkpoints.save(step, self.devices.first(state), meta)
        logging.info("checkpoint of step %d saved to %s", step, self.checkpoints.directory)


def _stages(cfg: ExperimentConfig, devices: runtime.Devices) -> tuple[tuple[int, int, int], ...]:
    """(steps, seq_len, batch_size) of each stage, checked against the devices and model."""
    tcfg, max_length = cfg.train, cfg.model.max_length
    stages = tcfg.stages or ((tcfg.steps, cfg.data.seq_len, tcfg.batch_size),)
    for _, seq_len, batch_size in stages:
        devices.check_batch(batch_size, tcfg.grad_accum, "batch_size")
        if max_length is not None and seq_len > max_length:
            raise ValueError(
                f"a stage trains at length {seq_len}, past the model's max_length {max_length}"
            )
    devices.check_batch(tcfg.eval_batch_size or tcfg.batch_size, 1, "eval_batch_size")
    return stages


def _evaluate(eval_fn, valid_sets: dict[int, list[dict]], pair_sets: list[dict] = ()) -> dict:
    """valid/{loss,perplexity,accuracy,tokens}_<length>: sums over all batches (and devices),
    then ratios; with pair_sets (held-out pairs) valid/pair_{loss,accuracy} and valid/pairs."""
    record = {}
    for length, batches in valid_sets.items():
        sums = {"loss": 0.0, "correct": 0.0, "count": 0.0}
        for batch in batches:
            for key, value in eval_fn(batch).items():
                sums[key] += float(value)
        count = max(sums["count"], 1.0)
        record[f"valid/loss_{length}"] = sums["loss"] / count
        record[f"valid/perplexity_{length}"] = metrics_lib.perplexity(sums["loss"] / count)
        record[f"valid/accuracy_{length}"] = sums["correct"] / count
        record[f"valid/tokens_{length}"] = int(sums["count"])
    if pair_sets:
        sums = dict.fromkeys(metrics_lib.PAIR_SUMS, 0.0)
        for batch in pair_sets:
            out = eval_fn(batch)
            for key in sums:
                sums[key] += float(out[key])
        record.update(metrics_lib.pair_record(sums, "valid"))
        record["valid/pairs"] = int(sums["pair_count"])
    return record


def _accumulate(window: dict, fetched: list[dict], first_step: int, checkpoints: Checkpoints):
    try:
        metrics_lib.accumulate(window, fetched, first_step)
    except FloatingPointError as e:
        latest = checkpoints.latest_step()
        where = (
            f"The last good checkpoint is step {latest} in {checkpoints.directory}."
            if latest is not None
            else "No checkpoint was written yet."
        )
        raise FloatingPointError(
            f"{e}. {where} Lower the learning rate, raise the warm-up, or use float32."
        ) from None
