"""The loop pre-training and fine-tuning share: steps, metrics, records, stops, checkpoints.

    last = TrainLoop(workdir, devices, checkpoints, ...).run(train_step, state, step_rng,
                                                             batches, progress, start=s, end=e)

Steps s + 1, ..., e are dispatched asynchronously (the host prepares step t + 1 while the
devices run step t); their metrics reach the host only at a step due to log, evaluate or save
(`Due`) or asked to stop, and are checked for NaN/Inf there: a non-finite loss or gradient
stops the run before any save, naming the last good checkpoint. SIGTERM or Ctrl-C (or a
multi-host preemption notice) saves after the current step and raises
runtime.TrainingInterrupted. Step e is always saved.

What a trainer brings: which steps are due for what, its evaluation, the entries its records
start with, where a checkpoint goes (fine-tuning keeps its best epoch too), and `progress`,
the host-side state a resumed run continues from: the metric sums since the last record
(metrics.empty_window), the training seconds, and the trainer's own (fine-tuning's best
epoch). It rides in every checkpoint's meta with the config, so a resumed run logs bitwise
the same numbers as an uninterrupted one.
"""

from __future__ import annotations

import contextlib
import dataclasses
from collections.abc import Callable, Iterator, Sequence
from typing import Any, NamedTuple

import jax
from absl import logging

from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import runtime
from roformer_jax.training.checkpoints import Checkpoints


class Due(NamedTuple):
    """What a step is due for."""

    log: bool  # a record of the train/* metrics since the previous one
    evaluate: bool  # the evaluation, in the step's record
    save: bool  # a checkpoint


def _no_entries(step: int) -> dict:
    return {}


@dataclasses.dataclass
class TrainLoop:
    """A trainer's loop: what it runs on, and the trainer's own parts (see module doc)."""

    workdir: str  # metrics.jsonl and tensorboard/
    devices: runtime.Devices
    # the latest steps': what a stop saves to, what a NaN names; closed when `run` ends
    checkpoints: Checkpoints
    # (steps, seq_len, batch_size) of each stage of the whole run: its length, and the tokens
    # of a step for tokens/s
    stages: Sequence[tuple[int, int, int]]
    schedule: Callable[[int], Any]  # the learning rate of update t (0-based)
    config: dict  # every checkpoint's meta["config"]
    due: Callable[[int], Due]
    evaluate: Callable[[Any, int], dict]  # (replicated state, step) -> the record's entries
    # (step, state as host arrays, meta) -> None; None: into `checkpoints`
    save: Callable[[int, Any, dict], None] | None = None
    entries: Callable[[int], dict] = _no_entries  # a record's first after "step": the epoch

    def run(
        self,
        train_step,
        state,
        step_rng,
        batches: Iterator[dict],
        progress: dict,
        *,
        start: int,
        end: int,
    ) -> dict:
        """Steps start + 1, ..., end of the replicated `state` on `batches` (those of steps
        start + 1, ...; closed at the end); returns the records' values, the latest of each.

        progress: {"window": ..., ...} as a checkpoint's meta has it (updated in place).
        """
        writer = metrics_lib.MetricsWriter(
            self.workdir, resume_step=start, enabled=jax.process_index() == 0
        )
        session = _Session(
            progress,
            writer,
            runtime.Speed(self.stages, start),
            runtime.Clock(progress.get("elapsed_s", 0.0)),
            end,
            last={"step": start},
        )
        with (
            runtime.stop_requests() as stop_requested,
            contextlib.closing(writer),
            contextlib.closing(batches),
        ):
            try:
                for done in range(start + 1, end + 1):
                    state, step_metrics = train_step(
                        state, self.devices.shard(next(batches)), step_rng
                    )
                    session.pending.append(step_metrics)
                    if len(session.pending) > 2:  # at most 2 steps in flight: a stop or a save
                        jax.block_until_ready(session.pending[-3])  # waits for 2, not a backlog
                    session.speed.stepped(done, step_metrics)
                    if done == start + 1:
                        logging.info(
                            "first step (with compilation): %.1f s", session.elapsed.session()
                        )
                    stop = stop_requested() or runtime.preemption(done)
                    self._after_step(session, state, done, stop)
            finally:
                self.checkpoints.close()
        return session.last

    def _after_step(self, session: _Session, state, done: int, stop: bool) -> None:
        """Logs, evaluates and saves where step `done` is due to; stops on request."""
        due = self.due(done)
        save = due.save or done == session.end
        if not (due.log or due.evaluate or save or stop):
            return
        # Fetch the pending metrics; a non-finite one stops the run before any save.
        fetched = [self.devices.first(m) for m in session.pending]
        _accumulate(session.window, fetched, done - len(fetched) + 1, self.checkpoints)
        session.pending.clear()
        if due.log or due.evaluate:
            record = self._record(session, state, done, due)
            session.writer.write(record)
            eta = session.speed.eta_s(done, record.get("train/tokens_per_s"))
            total = sum(steps for steps, _, _ in self.stages)
            metrics_lib.log_progress(record, total_steps=total, eta_s=eta)
            session.last.update(record)
        if save or stop:
            meta = {**session.progress, "config": self.config, "elapsed_s": session.elapsed()}
            # A stop's save is the run's last: whole on disk before the process goes.
            with runtime.interrupts_deferred() if stop else contextlib.nullcontext():
                (self.save or self.checkpoints.save)(done, self.devices.saved(state), meta)
                if stop:
                    self.checkpoints.wait_until_finished()
            logging.info("checkpoint of step %d saved to %s", done, self.checkpoints.directory)
        if stop:
            raise runtime.TrainingInterrupted(
                f"stopped at step {done} on request; checkpoint saved in "
                f"{self.checkpoints.directory}. Rerun with the same workdir to resume."
            )
        session.speed.restart()  # evaluations and saves are not training time

    def _record(self, session: _Session, state, done: int, due: Due) -> dict:
        """The record of step `done`: the window's train/* metrics, the evaluation."""
        record = {"step": done, **self.entries(done)}
        if due.log:
            lr = float(self.schedule(done - 1))
            tokens_per_s = session.speed.rate()
            record.update(
                metrics_lib.window_record(session.window, lr=lr, tokens_per_s=tokens_per_s)
            )
            session.window.update(metrics_lib.empty_window())
        if due.evaluate:
            record.update(self.evaluate(state, done))
        record["elapsed_s"] = session.elapsed()
        return record


@dataclasses.dataclass
class _Session:
    """What one `TrainLoop.run` keeps as it goes."""

    progress: dict  # what its checkpoints' meta carries (module doc), updated in place
    writer: metrics_lib.MetricsWriter
    speed: runtime.Speed
    elapsed: runtime.Clock  # training seconds over every session of the run
    end: int  # the last step to train now
    last: dict  # the records' values, the latest of each
    pending: list = dataclasses.field(default_factory=list)  # metrics of steps not fetched yet

    @property
    def window(self) -> dict:  # metric sums since the last record
        return self.progress["window"]


def _accumulate(window: dict, fetched: list[dict], first_step: int, checkpoints: Checkpoints):
    """metrics.accumulate, its FloatingPointError told where to restart from and how."""
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
