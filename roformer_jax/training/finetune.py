"""Fine-tuning: a pre-trained encoder plus a fresh task head, trained and evaluated per epoch.

    final_metrics = finetune(cfg, workdir)   # cfg: training.finetune_config.FinetuneExperiment

Reads top to bottom: encoder and tokenizer → data → model and optimizer → restore → step
functions → loop (log; at each epoch's end validate, keep the best, save the latest) → the
best checkpoint on the test file. The task kind (task_kinds.TASK_KINDS[cfg.task.format])
gives the head, the encoding, the loss and the metrics; task_model.py the encoder and the
optimizer. What pre-training provides is reused: `runs.load_run` (or `hf.load_hf_roformer`)
for the encoder, `step.make_sums_train_step` for the update (per-row dropout keys, sums over
devices), `optim` for AdamW with warm-up, `mesh.devices_for` for jit on one device, pmap on
several or one jit over a mesh (cfg.mesh: data, fsdp, tensor, context), and the loop
pre-training runs, `train_loop.TrainLoop` (records, the NaN stop with its advice,
checkpoints, signals), given fine-tuning's validation and keep-best save.

Workdir: config.json, metrics.jsonl, tensorboard/, checkpoints/ (the latest epoch, for
resume), best/ (the epoch with the best validation metric), data/ (a builtin task's files),
predictions.json (the kinds with one label per example: classification, multiple choice),
final_metrics.json.

Determinism. The rows of step t depend only on (seed, t // steps per epoch): each epoch is a
permutation drawn from (seed, epoch), the remainder dropped; dropout as in step.py. A run
resumed from its latest checkpoint logs the same numbers as an uninterrupted one.
Single host only: validation gathers every prediction on the one host.
"""

from __future__ import annotations

import dataclasses
import functools
import itertools
import json
import os
import shutil
from collections.abc import Callable
from typing import Any, NamedTuple

import jax
import numpy as np
from absl import logging

from roformer_jax.data import builtin_tasks
from roformer_jax.nn.model import evaluation_update
from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.training import mesh as mesh_lib
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import runtime
from roformer_jax.training import workdir as workdir_lib
from roformer_jax.training.checkpoints import Checkpoints
from roformer_jax.training.finetune_config import FinetuneExperiment, TaskConfig
from roformer_jax.training.step import make_sums_train_step
from roformer_jax.training.task_kinds import TASK_KINDS, TaskKind, apply_model, read_examples
from roformer_jax.training.task_model import load_encoder, model_and_optimizer, state_shapes
from roformer_jax.training.train_loop import Due, TrainLoop

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
# The latest epoch's state, for resume, and the best epoch's.
_CHECKPOINTS = ("checkpoints", "best")
FINAL_METRICS_FILE = "final_metrics.json"
# {split: {"prediction": [N], "label": [N]}} of the best checkpoint (the kinds with
# TaskKind.predictions): what a paired test of two runs on the same examples reads.
PREDICTIONS_FILE = "predictions.json"
# A run's small outputs: what its numbers are (no checkpoints); predictions where it has them.
RAW_FILES = (metrics_lib.METRICS_FILE, "config.json", FINAL_METRICS_FILE, PREDICTIONS_FILE)


def copy_raw_files(source: str, target: str) -> int:
    """Copies a finished run's RAW_FILES from `source` to `target` (a raw folder, or back);
    returns how many it copied (a QA run has no predictions)."""
    if not os.path.exists(os.path.join(source, FINAL_METRICS_FILE)):
        raise ValueError(f"{source} holds no finished fine-tuning run ({FINAL_METRICS_FILE})")
    os.makedirs(target, exist_ok=True)
    present = [f for f in RAW_FILES if os.path.exists(os.path.join(source, f))]
    for file in present:
        shutil.copyfile(os.path.join(source, file), os.path.join(target, file))
    return len(present)


# ---------------------------------------------------------------- data


class Split(NamedTuple):
    examples: list[dict]
    rows: dict[str, np.ndarray]


class TaskData(NamedTuple):
    """A task's encoded splits and what the model and loop read from them."""

    kind: TaskKind
    splits: dict[str, Split]  # "train", "valid" and, with a test file, "test"
    labels: tuple[str, ...]  # label names in id order; () for a kind without
    tok: Any  # the encoder's tokenizer
    steps_per_epoch: int  # the remainder of an epoch's permutation is dropped
    total: int  # updates in all

    @property
    def row_shape(self) -> tuple[int, ...]:  # (L,) or (C, L)
        return self.splits["train"].rows["input_ids"].shape[1:]


def task_files(task: TaskConfig, workdir: str) -> dict[str, str | None]:
    """{"train", "valid", "test"} paths; a builtin task's are written to <workdir>/data."""
    files = {"train": task.train_file, "valid": task.valid_file, "test": task.test_file}
    if task.train_file.startswith("builtin:"):
        name = task.train_file.removeprefix("builtin:")
        known = builtin_tasks.BUILTIN_TASKS
        if name not in known:
            raise ValueError(f"unknown builtin task {name!r}; known: {sorted(known)}")
        directory = os.path.join(workdir, "data", name)
        built = builtin_tasks.split_paths(directory)
        if not all(os.path.exists(p) for p in built.values()):
            known[name](directory)
        files = {
            "train": built["train"],
            "valid": files["valid"] or built["valid"],
            "test": files["test"] or built["test"],
        }
    return files


def load_data(cfg: FinetuneExperiment, tok, workdir: str) -> TaskData:
    """The task's files read, checked and encoded with `tok`; the schedule's length."""
    task, kind = cfg.task, TASK_KINDS[cfg.task.format]
    files = task_files(task, workdir)
    examples = {s: read_examples(p, task.format) for s, p in files.items() if p}
    labels = ()
    if kind.label_list is not None:
        labels = task.labels or kind.label_list(examples["train"])
    splits = {
        s: Split(ex, kind.encode(ex, tok, labels, task, files[s])) for s, ex in examples.items()
    }
    n_train, batch_size = len(examples["train"]), cfg.finetune.batch_size
    steps_per_epoch = n_train // batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"{n_train} training examples make no batch of {batch_size}")
    logging.info(
        "%d training examples, %d steps per epoch; labels %s",
        n_train,
        steps_per_epoch,
        list(labels),
    )
    return TaskData(
        kind, splits, labels, tok, steps_per_epoch, cfg.finetune.epochs * steps_per_epoch
    )


def _train_batch(rows, targets, step: int, steps_per_epoch: int, batch_size: int, seed: int):
    """The rows of update `step` (0-based): a slice of the epoch's permutation."""
    epoch, k = divmod(step, steps_per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(len(rows["input_ids"]))
    take = order[k * batch_size : (k + 1) * batch_size]
    batch = {name: rows[name][take] for name in (*_INPUTS, *targets)}
    return {**batch, "index": np.arange(batch_size, dtype=np.int32)}


# ---------------------------------------------------------------- restore


def _restore(workdir: str, abstract_state, model_cfg: ModelConfig, init, init_rng, devices):
    """(state, progress) of the latest checkpoint, or the initial ones; progress holds the
    metric window since the last record, the best epoch so far and the training seconds."""
    latest = Checkpoints(os.path.join(workdir, "checkpoints"), keep=1)
    try:
        restored = latest.restore(
            abstract_state, model_cfg, shardings=devices.shardings(abstract_state)
        )
    finally:
        latest.close()
    if restored is None:
        return init(init_rng), {"window": metrics_lib.empty_window(), "best": None}
    return jax.device_put(restored[0]), restored[1]


# ---------------------------------------------------------------- the run


class _Run(NamedTuple):
    """What the loop and the final evaluation share; fixed for the run."""

    cfg: FinetuneExperiment
    workdir: str
    devices: runtime.Devices | mesh_lib.MeshDevices
    data: TaskData
    model_cfg: ModelConfig
    schedule: Any
    abstract_state: Any
    evaluate: Callable  # (params, steps_done, Split, prefix) -> ({prefix/metric: v}, outputs)


def finetune(cfg: FinetuneExperiment, workdir: str, *, resume_with_changes: bool = False) -> dict:
    """Fine-tunes in `workdir`, resuming from its latest checkpoint; returns the final metrics
    (also in <workdir>/final_metrics.json): the best epoch's valid/* and its test/*.

    `workdir` must be empty or a fine-tuning run's, and one process trains in it at a time
    (`workdir.claimed`). A resume whose `cfg` changes what the run computes (the task, the
    encoder, epochs, rates, ...) is refused, listing the changes, unless
    `resume_with_changes`; then config.json records them (`workdir.resume_changes`)."""
    with workdir_lib.claimed(workdir, workdir_lib.FINETUNING):
        return _finetune(cfg, workdir, resume_with_changes)


def _finetune(cfg: FinetuneExperiment, workdir: str, resume_with_changes: bool) -> dict:
    changes = workdir_lib.resume_changes(
        workdir, cfg, latest_step=None, allow=resume_with_changes, run=workdir_lib.FINETUNING
    )
    fcfg, devices = cfg.finetune, mesh_lib.devices_for(cfg.mesh)
    if devices.process_count > 1:
        raise ValueError("fine-tuning runs on one host (its devices: any number)")
    eval_batch = fcfg.eval_batch_size or fcfg.batch_size
    devices.check_batch(fcfg.batch_size, 1, "batch_size")
    devices.check_batch(eval_batch, 1, "eval_batch_size")

    # --- Encoder, tokenizer and data.
    model_cfg, encoder_params, tok = load_encoder(cfg.init_from, cfg.random_init_size)
    model_cfg = fcfg.encoder_config(model_cfg)
    data = load_data(cfg, tok, workdir)
    devices.check_model(model_cfg, lengths=(data.row_shape[-1],))

    # --- Model and optimizer; the encoder's parameters replace the fresh ones. Shapes first.
    model, schedule, tx, init = model_and_optimizer(
        cfg,
        model_cfg,
        encoder_params,
        head=data.kind.head,
        num_labels=max(len(data.labels), 1),
        row_shape=data.row_shape,
        steps=data.total,
    )
    init_rng, step_rng = jax.random.split(jax.random.key(cfg.seed))
    abstract_state = jax.eval_shape(init, init_rng)

    # --- Restore, or initialize.
    state, progress = _restore(workdir, abstract_state, model_cfg, init, init_rng, devices)
    logging.info(
        "%s at step %d of %d", "resuming" if state.step else "starting", int(state.step), data.total
    )
    workdir_lib.record_config(
        workdir, cfg, changes, start_step=int(state.step), run=workdir_lib.FINETUNING
    )
    train_step, predict = _step_functions(model, tx, data.kind, cfg.mesh, data.row_shape)
    evaluate = functools.partial(_evaluate, predict, devices, eval_batch, data)
    run = _Run(cfg, workdir, devices, data, model_cfg, schedule, abstract_state, evaluate)

    # --- Loop: log; at each epoch's end validate, keep the best, save the latest.
    _train(run, state, progress, train_step, step_rng)

    # --- The best checkpoint on valid and test.
    return _final_metrics(run)


@functools.lru_cache(maxsize=32)
def _step_functions(model, tx, kind: TaskKind, mesh: mesh_lib.MeshConfig, row_shape):
    """(train_step, predict), compiled for this process's devices or `mesh`: the same pair
    for the same model, optimizer, kind, mesh and rows (model_and_optimizer gives the same
    model and optimizer for the same settings), so that jax.jit's caches serve a later run
    of them in this process."""
    devices = mesh_lib.devices_for(mesh)  # a process's devices do not change

    def sums(params, batch, **kwargs):  # the kind's loss, correct and count sums
        return kind.sums(apply_model(model, params, batch, **kwargs), batch)

    def predict(params, batch, steps_done):
        update = evaluation_update(steps_done)
        return apply_model(model, params, batch, deterministic=True, update=update)

    train_step = make_sums_train_step(sums, tx, axis_name=devices.axis)
    return devices.compile(train_step, predict, state_shapes(model, tx, row_shape))


def _evaluate(
    predict, devices, batch_size: int, data: TaskData, params, steps_done, split: Split, prefix: str
) -> tuple[dict, Any]:
    """({prefix/metric: value}, the head's outputs on every row); steps_done: the updates
    `params` have had (replicated like them), for random attention features."""
    outputs = _predict(
        lambda b: devices.unshard(predict(params, devices.shard(b), steps_done)),
        split.rows,
        batch_size,
    )
    scores = data.kind.scores(outputs, split.rows, split.examples, data.labels, data.tok)
    return {f"{prefix}/{k}": v for k, v in scores.items()}, outputs


def _predict(predict_fn, rows, batch_size: int):
    """predict_fn's outputs on every row, in batches padded with copies of row 0."""
    n = len(rows["input_ids"])
    outputs = []
    for lo in range(0, n, batch_size):
        wanted = np.arange(lo, lo + batch_size)
        take = np.where(wanted < n, wanted, 0)
        outputs.append(predict_fn({k: rows[k][take] for k in _INPUTS}))
    return jax.tree.map(lambda *x: np.concatenate(x)[:n], *outputs)


def _train(run: _Run, state, progress: dict, train_step, step_rng) -> None:
    """The updates from the state's step to the last; a record every log_every steps and
    at each epoch's end, where the epoch is validated, the best kept and the latest saved."""
    fcfg, data = run.cfg.finetune, run.data
    start, per_epoch = int(state.step), data.steps_per_epoch
    latest, best = (Checkpoints(os.path.join(run.workdir, d), keep=1) for d in _CHECKPOINTS)

    def due(done: int) -> Due:
        is_epoch = done % per_epoch == 0
        return Due(log=done % fcfg.log_every == 0 or is_epoch, evaluate=is_epoch, save=is_epoch)

    def save(step: int, host_state, meta: dict) -> None:
        is_best = meta["best"] is not None and meta["best"]["step"] == step
        for checkpoints in (best, latest) if is_best else (latest,):
            if checkpoints.latest_step() == step:  # a rerun after a crash between an epoch's
                continue  # two saves: the same state is there already
            checkpoints.save(step, host_state, meta)

    loop = TrainLoop(
        run.workdir,
        run.devices,
        latest,
        # Every row is padded to the task's length, so an update reads the same tokens each time.
        stages=[(data.total, int(np.prod(data.row_shape)), fcfg.batch_size)],
        schedule=run.schedule,
        config={**dataclasses.asdict(run.cfg), "model": dataclasses.asdict(run.model_cfg)},
        due=due,
        evaluate=functools.partial(_validate, run, progress),
        save=save,
        entries=lambda done: {"epoch": done / per_epoch},
    )
    rows, targets = data.splits["train"].rows, data.kind.targets
    batches = (
        _train_batch(rows, targets, t, per_epoch, fcfg.batch_size, run.cfg.seed)
        for t in itertools.count(start)
    )
    state = run.devices.replicate(state)
    try:
        loop.run(train_step, state, step_rng, batches, progress, start=start, end=data.total)
    finally:
        best.close()


def _validate(run: _Run, progress: dict, state, done: int) -> dict:
    """valid/* of the replicated `state` after update `done`, an epoch's last; a better
    metric than progress["best"]'s makes it the best (saved with the latest checkpoint)."""
    record = run.evaluate(state.params, state.step, run.data.splits["valid"], "valid")[0]
    key = f"valid/{run.cfg.task.metric}"
    if progress["best"] is None or record[key] > progress["best"][key]:
        progress["best"] = {"step": done, key: record[key]}
    logging.info(
        "epoch %d: %s",
        done // run.data.steps_per_epoch,
        ", ".join(f"{k} {v:.4f}" for k, v in record.items()),
    )
    return record


def _final_metrics(run: _Run) -> dict:
    """The best checkpoint's valid/* and test/*, written to final_metrics.json (last: its
    presence says the run is done), and its predictions where the kind has them."""
    best = Checkpoints(os.path.join(run.workdir, "best"), keep=1)
    try:
        best_state, _ = best.restore(run.abstract_state, run.model_cfg)
    finally:
        best.close()
    kind, splits = run.data.kind, run.data.splits
    placed = run.devices.replicate(best_state)
    params, steps_done = placed.params, placed.step
    final, predictions = {"best_step": int(best_state.step)}, {}
    for name in ("valid", "test"):
        if name in splits:
            scores, outputs = run.evaluate(params, steps_done, splits[name], name)
            final.update(scores)
            if kind.predictions is not None:  # per example, for paired tests between runs
                labels = splits[name].rows[kind.targets[0]]
                predictions[name] = {
                    "prediction": kind.predictions(outputs).tolist(),
                    "label": labels.tolist(),
                }
    if predictions:
        with open(os.path.join(run.workdir, PREDICTIONS_FILE), "w", encoding="utf-8") as f:
            json.dump(predictions, f)
    with open(os.path.join(run.workdir, FINAL_METRICS_FILE), "w", encoding="utf-8") as f:
        json.dump(final, f, indent=2)
    return final
