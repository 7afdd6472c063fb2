"""Fine-tuning: a pre-trained encoder plus a fresh task head, trained and evaluated per epoch.

    final_metrics = finetune(cfg, workdir)   # cfg: training.finetune_config.FinetuneExperiment

Reads top to bottom: encoder and tokenizer → data → model and optimizer → restore → step
functions → loop (log; at each epoch's end validate, keep the best, save the latest) → the
best checkpoint on the test file. What pre-training provides is reused: `runs.load_run` (or
`hf.load_hf_roformer`) for the encoder, `step.make_sums_train_step` for the update (per-row
dropout keys, sums over devices), `optim` for AdamW with warm-up, `runtime.Devices` for jit
on one device and pmap on several, `Checkpoints` and `MetricsWriter`.

Workdir: config.json, metrics.jsonl, tensorboard/, checkpoints/ (the latest epoch, for
resume), best/ (the epoch with the best validation metric), data/ (a builtin task's files),
predictions.json (classification, multiple choice), final_metrics.json.

Determinism. The rows of step t depend only on (seed, t // steps per epoch): each epoch is a
permutation drawn from (seed, epoch), the remainder dropped; dropout as in step.py. A run
resumed from its latest checkpoint logs the same numbers as an uninterrupted one.
Single host only: validation gathers every prediction on the one host.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import json
import os
import shutil
from typing import Any, NamedTuple

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging

from roformer_jax import hf
from roformer_jax.data import tasks
from roformer_jax.data.tokenizer import ByteTokenizer, WordPieceTokenizer
from roformer_jax.nn import heads
from roformer_jax.nn.model import PRETRAINING_HEADS, evaluation_update
from roformer_jax.nn.model_config import model_config
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import optim, runs, runtime
from roformer_jax.training import task_metrics as tm
from roformer_jax.training.checkpoints import Checkpoints
from roformer_jax.training.finetune_config import FinetuneExperiment, TaskConfig
from roformer_jax.training.step import TrainState, make_sums_train_step

_INPUTS = ("input_ids", "attention_mask", "token_type_ids")
FINAL_METRICS_FILE = "final_metrics.json"
# {split: {"prediction": [N], "label": [N]}} of the best checkpoint (classification and
# multiple choice): what a paired test of two runs on the same examples reads.
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


# ---------------------------------------------------------------- the encoder


def load_encoder(init_from: str | None, random_init_size: str = "tiny"):
    """(ModelConfig, encoder params or None, tokenizer) to start fine-tuning from.

    init_from: a pre-training workdir (it holds checkpoints/), a local HF RoFormer directory
    (config.json, weights, vocab.txt), or None: no parameters, a ModelConfig of
    `random_init_size` over the byte tokenizer. Any MLM, pair or task head is dropped.
    """
    if init_from is None:
        tok = ByteTokenizer()
        return model_config(random_init_size, vocab_size=tok.vocab_size), None, tok
    if os.path.isdir(os.path.join(init_from, "checkpoints")):
        run = runs.load_run(init_from)
        params = {k: v for k, v in run.params.items() if k not in PRETRAINING_HEADS}
        return run.config.model, params, run.tokenizer
    if not os.path.isfile(os.path.join(init_from, "config.json")):
        raise FileNotFoundError(
            f"init_from {init_from!r} is neither a pre-training workdir (no checkpoints/) nor "
            "an HF RoFormer directory (no config.json)"
        )
    model, variables = hf.load_hf_roformer(init_from)
    params = variables["params"]
    params = params["roformer"] if isinstance(model, heads.TaskModel) else params
    return model.config, {k: v for k, v in params.items() if k not in PRETRAINING_HEADS}, (
        WordPieceTokenizer.from_vocab(init_from))  # fmt: skip


def initial_params(model: heads.TaskModel, encoder_params, rng, ids):
    """The TaskModel's params: a fresh head (and encoder, without `encoder_params`) from
    `rng`; ValueError when the encoder's tree or shapes are not the model's."""
    params = model.init(rng, ids)["params"]
    if encoder_params is None:
        return params
    want = jax.tree.map(jnp.shape, params["roformer"])
    have = jax.tree.map(jnp.shape, encoder_params)
    if want != have:
        raise ValueError(f"the pre-trained encoder's parameters {have} are not the model's {want}")
    return {**params, "roformer": jax.tree.map(jnp.asarray, encoder_params)}


def layer_decay_factors(params, *, num_layers: int, decay: float):
    """The lr factor of each leaf of a TaskModel's params (see FinetuneConfig.layer_decay):
    head 1, encoder layer i decay^(num_layers - i), embeddings decay^(num_layers + 1)."""

    def factor(path: tuple[str, ...]) -> float:
        if path[0] != "roformer":
            return 1.0
        if path[1] in ("embeddings", "embeddings_project"):
            return decay ** (num_layers + 1)
        if path[1] == "encoder" and path[2].startswith("layer_"):
            return decay ** (num_layers - int(path[2].removeprefix("layer_")))
        return 1.0  # above the layers (a pre-LN model's final norm)

    flat = flax.traverse_util.flatten_dict(params)
    return flax.traverse_util.unflatten_dict({p: factor(p) for p in flat})


def scale_by_factors(factors) -> optax.GradientTransformation:
    """Multiplies each leaf's update by its factor: after AdamW, lr(t)·factor per leaf."""
    return optax.stateless(lambda updates, params=None: jax.tree.map(jnp.multiply, updates,
                                                                       factors))  # fmt: skip


# ---------------------------------------------------------------- task kinds


def _outputs(model, params, batch, **kwargs):
    return model.apply({"params": params}, batch["input_ids"],
                       attention_mask=batch["attention_mask"],
                       token_type_ids=batch["token_type_ids"], **kwargs)  # fmt: skip


def _classification_sums(model, params, batch, **kwargs) -> dict[str, jax.Array]:
    logits = _outputs(model, params, batch, **kwargs).logits  # [B, K]
    labels = batch["label"]
    return {
        "loss": jnp.sum(optax.softmax_cross_entropy_with_integer_labels(logits, labels)),
        "correct": jnp.sum(jnp.argmax(logits, -1) == labels).astype(jnp.float32),
        "count": jnp.asarray(labels.shape[0], jnp.float32),
    }


def _qa_sums(model, params, batch, **kwargs) -> dict[str, jax.Array]:
    out = _outputs(model, params, batch, **kwargs)  # start, end [B, L]
    xent = optax.softmax_cross_entropy_with_integer_labels
    # HF's loss: the mean of the start and end cross-entropies.
    loss = (xent(out.start_logits, batch["start"]) + xent(out.end_logits, batch["end"])) / 2
    correct = (jnp.argmax(out.start_logits, -1) == batch["start"]) & (
        jnp.argmax(out.end_logits, -1) == batch["end"]
    )
    return {"loss": jnp.sum(loss), "correct": jnp.sum(correct).astype(jnp.float32),
            "count": jnp.asarray(loss.shape[0], jnp.float32)}  # fmt: skip


def _classification_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    predictions = np.argmax(outputs.logits, -1)
    return {
        "accuracy": tm.accuracy(predictions, rows["label"]),
        "macro_f1": tm.macro_f1(predictions, rows["label"], len(labels)),
    }


def _choice_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    return {"accuracy": tm.accuracy(np.argmax(outputs.logits, -1), rows["label"])}


def _qa_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    texts = []
    for i in range(len(examples)):
        last = int(rows["attention_mask"][i].sum()) - 2  # the last context token
        s, e = tm.best_span(outputs.start_logits[i], outputs.end_logits[i],
                            int(rows["context_start"][i]), last)  # fmt: skip
        texts.append(tok.decode(rows["input_ids"][i, s : e + 1]))
    references = [e["answers"]["text"] for e in examples]
    return {"exact_match": tm.exact_match(texts, references), "f1": tm.token_f1(texts, references)}


class TaskKind(NamedTuple):
    head: str  # a key of heads.HEADS
    targets: tuple[str, ...]  # the row arrays the loss reads
    encode: Any  # (examples, tok, labels, TaskConfig, path) -> rows
    sums: Any  # (model, params, batch, **apply kwargs) -> {"loss", "correct", "count"}
    scores: Any  # (outputs, rows, examples, labels, tok) -> {metric: value}


TASK_KINDS = {
    "classification": TaskKind(
        "sequence_classification", ("label",),
        lambda ex, tok, labels, t, path: tasks.encode_classification(
            ex, tok, labels, max_length=t.max_length, truncation=t.truncation, path=path),
        _classification_sums, _classification_scores,
    ),
    "qa": TaskKind(
        "question_answering", ("start", "end"),
        lambda ex, tok, labels, t, path: tasks.encode_qa(ex, tok, max_length=t.max_length,
                                                         path=path),
        _qa_sums, _qa_scores,
    ),
    # The loss of classification: the logits [B, C] score the choices.
    "multiple_choice": TaskKind(
        "multiple_choice", ("label",),
        lambda ex, tok, labels, t, path: tasks.encode_multiple_choice(
            ex, tok, max_length=t.max_length, truncation=t.truncation, path=path),
        _classification_sums, _choice_scores,
    ),
}  # fmt: skip


class Split(NamedTuple):
    examples: list[dict]
    rows: dict[str, np.ndarray]


def task_files(task: TaskConfig, workdir: str) -> dict[str, str | None]:
    """{"train", "valid", "test"} paths; a builtin task's are written to <workdir>/data."""
    files = {"train": task.train_file, "valid": task.valid_file, "test": task.test_file}
    if task.train_file.startswith("builtin:"):
        name = task.train_file.removeprefix("builtin:")
        if name not in tasks.BUILTIN_TASKS:
            raise ValueError(f"unknown builtin task {name!r}; known: {sorted(tasks.BUILTIN_TASKS)}")
        directory = os.path.join(workdir, "data", name)
        built = tasks.split_paths(directory)
        if not all(os.path.exists(p) for p in built.values()):
            tasks.BUILTIN_TASKS[name](directory)
        files = {"train": built["train"], "valid": files["valid"] or built["valid"],
                 "test": files["test"] or built["test"]}  # fmt: skip
    return files


def load_splits(task: TaskConfig, kind: TaskKind, tok, files) -> tuple[dict, tuple]:
    """({split: Split}, label names) of the task's files."""
    examples = {s: tasks.read_examples(p, task.format) for s, p in files.items() if p}
    labels = ()
    if task.format == "classification":
        labels = task.labels or tasks.label_list(examples["train"])
    splits = {
        s: Split(ex, kind.encode(ex, tok, labels, task, files[s])) for s, ex in examples.items()
    }
    return splits, labels


# ---------------------------------------------------------------- the loop


def finetune(cfg: FinetuneExperiment, workdir: str) -> dict:
    """Fine-tunes in `workdir`, resuming from its latest checkpoint; returns the final metrics
    (also in <workdir>/final_metrics.json): the best epoch's valid/* and its test/*."""
    fcfg, devices = cfg.finetune, runtime.Devices()
    if devices.process_count > 1:
        raise ValueError("fine-tuning runs on one host (its devices: any number)")
    eval_batch = fcfg.eval_batch_size or fcfg.batch_size
    devices.check_batch(fcfg.batch_size, 1, "batch_size")
    devices.check_batch(eval_batch, 1, "eval_batch_size")
    cfg_dict = dataclasses.asdict(cfg)

    # --- Encoder, tokenizer and data.
    model_cfg, encoder_params, tok = load_encoder(cfg.init_from, cfg.random_init_size)
    kind = TASK_KINDS[cfg.task.format]
    splits, labels = load_splits(cfg.task, kind, tok, task_files(cfg.task, workdir))
    n_train = len(splits["train"].examples)
    steps_per_epoch = n_train // fcfg.batch_size
    if steps_per_epoch == 0:
        raise ValueError(f"{n_train} training examples make no batch of {fcfg.batch_size}")
    total = fcfg.epochs * steps_per_epoch
    logging.info("%d training examples, %d steps per epoch; labels %s", n_train,
                 steps_per_epoch, list(labels))  # fmt: skip

    # --- Model and optimizer; the encoder's parameters replace the fresh ones.
    model = heads.TaskModel(model_cfg, kind.head, max(len(labels), 1), cfg.task.summary_type)
    schedule = optim.learning_rate_schedule(cfg.optim, total)

    ids = jnp.zeros((1, *splits["train"].rows["input_ids"].shape[1:]), jnp.int32)  # [1, (C,) L]
    factors = layer_decay_factors(
        jax.eval_shape(model.init, jax.random.key(0), ids)["params"],
        num_layers=model_cfg.num_layers, decay=fcfg.layer_decay,
    )  # fmt: skip
    tx = optax.chain(optim.optimizer_on(cfg.optim, schedule), scale_by_factors(factors))

    def init(rng):
        params = initial_params(model, encoder_params, rng, ids)
        return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

    init_rng, step_rng = jax.random.split(jax.random.key(cfg.seed))
    abstract_state = jax.eval_shape(init, init_rng)

    # --- Restore, or initialize.
    latest = Checkpoints(os.path.join(workdir, "checkpoints"), keep=1)
    best = Checkpoints(os.path.join(workdir, "best"), keep=1)
    restored = latest.restore(abstract_state, model_cfg)
    if restored is None:
        state, progress = init(init_rng), {"window": metrics_lib.empty_window(), "best": None}
    else:
        state, progress = jax.device_put(restored[0]), restored[1]
    start, window = int(state.step), progress["window"]
    elapsed = runtime.Clock(progress.get("elapsed_s", 0.0))
    # Every row is padded to the task's length, so an update reads the same tokens each time.
    row_tokens = int(np.prod(splits["train"].rows["input_ids"].shape[1:]))
    speed = runtime.Speed([(total, row_tokens, fcfg.batch_size)], start)
    logging.info("%s at step %d of %d", "resuming" if start else "starting", start, total)
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
        json.dump(cfg_dict, f, indent=2)

    # --- Step functions.
    train_step, predict = devices.compile(
        make_sums_train_step(functools.partial(kind.sums, model), tx, axis_name=devices.axis),
        lambda params, batch, steps_done: _outputs(
            model, params, batch, deterministic=True, update=evaluation_update(steps_done)
        ),
    )
    state = devices.replicate(state)

    def evaluate(params, steps_done, split: Split, prefix: str) -> tuple[dict, Any]:
        """({prefix/metric: value}, the head's outputs on every row); steps_done: the
        updates `params` have had (replicated like them), for random attention features."""
        outputs = _predict(
            lambda b: devices.unshard(predict(params, devices.shard(b), steps_done)),
            split.rows, eval_batch,
        )  # fmt: skip
        scores = kind.scores(outputs, split.rows, split.examples, labels, tok)
        return {f"{prefix}/{k}": v for k, v in scores.items()}, outputs

    def save(checkpoints, step):
        meta = {"config": {**cfg_dict, "model": dataclasses.asdict(model_cfg)},
                "window": window, "best": progress["best"], "elapsed_s": elapsed()}  # fmt: skip
        checkpoints.save(step, devices.first(state), meta)

    # --- Loop: log; at each epoch's end validate, keep the best, save the latest.
    writer = metrics_lib.MetricsWriter(workdir, resume_step=start)
    key, pending = f"valid/{cfg.task.metric}", []
    with runtime.stop_requests() as stop_requested, contextlib.closing(writer):
        try:
            for done in range(start + 1, total + 1):
                batch = _train_batch(splits["train"].rows, kind.targets, done - 1,
                                     steps_per_epoch, fcfg.batch_size, cfg.seed)  # fmt: skip
                state, step_metrics = train_step(state, devices.shard(batch), step_rng)
                pending.append(step_metrics)
                speed.stepped(done, step_metrics)
                if len(pending) > 2:  # at most 2 steps in flight, as in pre-training
                    jax.block_until_ready(pending[-3])
                is_log = done % fcfg.log_every == 0 or done % steps_per_epoch == 0
                is_epoch, stop = done % steps_per_epoch == 0, stop_requested()
                if not (is_log or stop):
                    continue
                metrics_lib.accumulate(window, [devices.first(m) for m in pending],
                                       done - len(pending) + 1)  # fmt: skip
                pending.clear()
                record = {"step": done, "epoch": done / steps_per_epoch}
                if is_log:
                    record.update(metrics_lib.window_record(window, lr=float(schedule(done - 1)),
                                                            tokens_per_s=speed.rate()))  # fmt: skip
                    window.update(metrics_lib.empty_window())
                if is_epoch:
                    record.update(evaluate(state.params, state.step, splits["valid"], "valid")[0])
                    if progress["best"] is None or record[key] > progress["best"][key]:
                        progress["best"] = {"step": done, key: record[key]}
                        if best.latest_step() != done:  # a rerun after a crash between
                            save(best, done)  # the two saves: the same state again
                    logging.info(
                        "epoch %d: %s",
                        done // steps_per_epoch,
                        ", ".join(
                            f"{k} {v:.4f}" for k, v in record.items() if k.startswith("valid/")
                        ),
                    )
                if is_log:
                    record["elapsed_s"] = elapsed()
                    writer.write(record)
                    eta = speed.eta_s(done, record.get("train/tokens_per_s"))
                    metrics_lib.log_progress(record, total_steps=total, eta_s=eta)
                if is_epoch or stop:
                    save(latest, done)
                speed.restart()  # evaluations and saves are not training time
                if stop:
                    raise runtime.TrainingInterrupted(
                        f"stopped at step {done} on request; checkpoint saved in "
                        f"{latest.directory}. Rerun with the same workdir to resume."
                    )
        finally:
            latest.close()
            best.close()

    # --- The best checkpoint on valid and test.
    best = Checkpoints(os.path.join(workdir, "best"), keep=1)
    try:
        best_state, _ = best.restore(abstract_state, model_cfg)
    finally:
        best.close()
    params, steps_done = devices.replicate((best_state.params, best_state.step))
    final, predictions = {"best_step": int(best_state.step)}, {}
    for name in ("valid", "test"):
        if name in splits:
            scores, outputs = evaluate(params, steps_done, splits[name], name)
            final.update(scores)
            if kind.targets == ("label",):  # per example, for paired tests between runs
                predictions[name] = {"prediction": np.argmax(outputs.logits, -1).tolist(),
                                     "label": splits[name].rows["label"].tolist()}  # fmt: skip
    if predictions:
        with open(os.path.join(workdir, PREDICTIONS_FILE), "w", encoding="utf-8") as f:
            json.dump(predictions, f)
    with open(os.path.join(workdir, FINAL_METRICS_FILE), "w", encoding="utf-8") as f:
        json.dump(final, f, indent=2)  # last: its presence says the run is done
    return final


def _train_batch(rows, targets, step: int, steps_per_epoch: int, batch_size: int, seed: int):
    """The rows of update `step` (0-based): a slice of the epoch's permutation."""
    epoch, k = divmod(step, steps_per_epoch)
    order = np.random.default_rng([seed, epoch]).permutation(len(rows["input_ids"]))
    take = order[k * batch_size : (k + 1) * batch_size]
    batch = {name: rows[name][take] for name in (*_INPUTS, *targets)}
    return {**batch, "index": np.arange(batch_size, dtype=np.int32)}


def _predict(predict_fn, rows, batch_size: int):
    """predict_fn's outputs on every row, in batches padded with copies of row 0."""
    n = len(rows["input_ids"])
    outputs = []
    for lo in range(0, n, batch_size):
        wanted = np.arange(lo, lo + batch_size)
        take = np.where(wanted < n, wanted, 0)
        outputs.append(predict_fn({k: rows[k][take] for k in _INPUTS}))
    return jax.tree.map(lambda *x: np.concatenate(x)[:n], *outputs)
