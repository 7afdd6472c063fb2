"""Masked-language-model pre-training: configuration, the pure train step, and the loop.

    cfg = experiment_config_from_dict(config.to_dict())   # from an ml_collections config
    final_metrics = train_and_evaluate(cfg, workdir)

`train_and_evaluate` reads top to bottom: data → model and optimizer (shapes by
`jax.eval_shape`) → restore → step functions → loop (log, eval, checkpoint).

Parallelism. The step is one pure function `(state, batch, rng) → (state, metrics)`, jitted on
a single device and `jax.pmap`ped over the local devices otherwise (every host runs the same
program; collectives span all devices of all hosts). Each host reads only its rows of the
global batch. Gradients and metrics are reduced as sums: the loss is the sum of token losses
over all masked tokens of the global batch divided by their count, so its gradient is
psum(∑ grads) / psum(count) — the same number on 1 or 8 devices. (A lax.pmean of per-device
means would weight a device holding fewer masked tokens as much as one holding more.)

Determinism. The dropout key of update t is fold_in(key, t) (then the device index and the
micro-batch index), the data of step t depend only on (seed, t), and the host-side metric sums
travel in the checkpoint: a run resumed from any checkpoint logs bitwise the same numbers as
an uninterrupted one on CPU.

Shapes: B batch (global), b this host's share, A micro-batches (grad_accum), n local devices,
L sequence length, V vocabulary.
"""

from __future__ import annotations

import contextlib
import dataclasses
import json
import os
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
import optax
from absl import logging
from jax import lax
from jax.experimental import multihost_utils

from roformer_jax import data as data_lib
from roformer_jax import masking, optim
from roformer_jax import metrics as metrics_lib
from roformer_jax.checkpoints import Checkpoints
from roformer_jax.model import ModelConfig, RoFormer
from roformer_jax.tokenizer import ByteTokenizer, WordPieceTokenizer

AXIS = "devices"  # the pmap axis name


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How long to train, on what batch, and how often to log, evaluate and checkpoint."""

    steps: int = 10_000  # optimizer updates
    batch_size: int = 64  # global: summed over every device of every host
    grad_accum: int = 1  # micro-batches per update (a scan inside the step)
    log_every: int = 100  # steps between metrics records / progress lines
    eval_every: int = 1000  # steps between validations (and always at the end)
    eval_batches: int | None = None  # validation batches per length; None = all
    eval_batch_size: int | None = None  # None = batch_size
    checkpoint_every: int = 1000  # steps between checkpoints (and always at the end)
    keep_checkpoints: int = 3  # the last K are kept
    data_cache_dir: str | None = None  # tokenizer + token ids; None = <workdir>/data
    # (steps, seq_len, batch_size) of each stage in turn, e.g. the alternating lengths and
    # batch sizes of RoFormer's Table 4; the steps sum to `steps`. () = one stage of `steps`
    # at data.seq_len and batch_size.
    stages: tuple[tuple[int, int, int], ...] = ()

    def __post_init__(self):
        object.__setattr__(self, "stages", tuple(tuple(s) for s in self.stages))  # JSON lists
        if any(len(s) != 3 or min(s) < 1 for s in self.stages):
            raise ValueError(f"stages {self.stages} must be (steps, seq_len, batch_size) >= 1")
        if self.stages and sum(s[0] for s in self.stages) != self.steps:
            raise ValueError(
                f"the stages' steps {[s[0] for s in self.stages]} sum to "
                f"{sum(s[0] for s in self.stages)}, not steps={self.steps}"
            )
        for name in ("steps", "batch_size", "grad_accum", "log_every", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError(
                f"checkpoint_every={self.checkpoint_every} and "
                f"keep_checkpoints={self.keep_checkpoints} must be >= 1"
            )


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    model: ModelConfig
    data: data_lib.DataConfig
    optim: optim.OptimConfig
    train: TrainConfig
    seed: int = 0


def experiment_config_from_dict(d: Mapping) -> ExperimentConfig:
    """Builds the frozen configs from a nested dict (e.g. `ConfigDict.to_dict()`).

    Unknown keys are errors. `model.vocab_size` None means "as the tokenizer": data.vocab_size
    for a trained WordPiece, 261 for bytes, the line count of a given vocab.txt.
    """
    sections = {
        "model": ModelConfig,
        "data": data_lib.DataConfig,
        "optim": optim.OptimConfig,
        "train": TrainConfig,
    }
    unknown = sorted(set(d) - set(sections) - {"seed"})
    if unknown:
        raise ValueError(f"unknown config keys {unknown}; expected {sorted(sections)} and seed")
    data = _from_dict(data_lib.DataConfig, d.get("data", {}), "data")
    model = dict(d.get("model", {}))
    if model.get("vocab_size") is None:
        model["vocab_size"] = _tokenizer_vocab_size(data)
    return ExperimentConfig(
        model=_from_dict(ModelConfig, model, "model"),
        data=data,
        optim=_from_dict(optim.OptimConfig, d.get("optim", {}), "optim"),
        train=_from_dict(TrainConfig, d.get("train", {}), "train"),
        seed=int(d.get("seed", 0)),
    )


def _from_dict(cls, values: Mapping, section: str):
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown keys in config.{section}: {unknown}; known: {sorted(fields)}")
    # JSON and ConfigDict overrides may turn tuples into lists; frozen configs want tuples.
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


def _tokenizer_vocab_size(data: data_lib.DataConfig) -> int:
    if data.tokenizer == "bytes":
        return ByteTokenizer().vocab_size
    if data.tokenizer == "wordpiece":
        return data.vocab_size
    return WordPieceTokenizer.from_vocab(data.tokenizer).vocab_size


# ---------------------------------------------------------------- state and step functions


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # int32 [], updates done so far
    params: Any
    opt_state: Any


def mlm_sums(logits, targets, weights) -> dict[str, jax.Array]:
    """Summed MLM loss, correct predictions and target count over the weighted positions.

    logits [B, L, V] float32; targets int [B, L]; weights [B, L] (1 at masked targets).
    """
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, targets)  # [B, L]
    correct = (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)
    weights = weights.astype(jnp.float32)
    return {
        "loss": jnp.sum(xent * weights),
        "correct": jnp.sum(correct * weights),
        "count": jnp.sum(weights),
    }


def _mlm_apply(model, params, batch, mask_prob, **kwargs) -> dict[str, jax.Array]:
    """`mlm_sums` of the model on `batch`; with mask_prob, the head runs at targets only.

    Each row's masking.max_targets(L, mask_prob) highest-weight positions are gathered: they
    hold every target that masking.mask_tokens chose at that rate without whole words, so the
    sums are those of the full head.
    """
    targets, weights = batch["targets"], batch["weights"]
    if mask_prob is not None:
        _, mlm_positions = lax.top_k(weights, masking.max_targets(weights.shape[-1], mask_prob))
        targets, weights = (
            jnp.take_along_axis(x, mlm_positions, axis=-1) for x in (targets, weights)
        )  # [B, P]
        kwargs["mlm_positions"] = mlm_positions
    out = model.apply(
        {"params": params},
        batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        **kwargs,
    )
    return mlm_sums(out.logits, targets, weights)


def make_train_step(
    model: RoFormer,
    tx,
    *,
    grad_accum: int = 1,
    axis_name: str | None = None,
    mask_prob: float | None = None,
):
    """The pure update `(state, batch, rng) → (state, metrics)`.

    batch: dict of [b, L] arrays (b divisible by grad_accum). Gradients of the summed loss are
    accumulated over `grad_accum` micro-batches of b / A rows by a scan, summed over
    `axis_name` (when pmapped) and divided by the total masked-token count. metrics: summed
    "loss", "correct", "count" over the global batch, and "grad_norm" of the mean gradient
    (before clipping). mask_prob: the rate the targets were chosen at without whole words;
    when given, the MLM head runs only where targets can be (see `_mlm_apply`).
    """

    def loss_fn(params, batch, rng):
        sums = _mlm_apply(
            model, params, batch, mask_prob, deterministic=False, rngs={"dropout": rng}
        )
        return sums["loss"], sums

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def train_step(state: TrainState, batch, rng):
        rng = jax.random.fold_in(rng, state.step)
        if axis_name is not None:
            rng = jax.random.fold_in(rng, lax.axis_index(axis_name))
        micro = jax.tree.map(
            lambda x: x.reshape(grad_accum, x.shape[0] // grad_accum, *x.shape[1:]), batch
        )  # [A, b / A, L]

        def accumulate(carry, inputs):
            i, micro_batch = inputs
            grads, sums = grad_fn(state.params, micro_batch, jax.random.fold_in(rng, i))
            return jax.tree.map(jnp.add, carry, (grads, sums)), None

        zero_sums = {k: jnp.zeros((), jnp.float32) for k in ("loss", "correct", "count")}
        init = (jax.tree.map(jnp.zeros_like, state.params), zero_sums)
        (grads, sums), _ = lax.scan(accumulate, init, (jnp.arange(grad_accum), micro))
        if axis_name is not None:
            grads, sums = lax.psum((grads, sums), axis_name)
        grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        state = state.replace(
            step=state.step + 1,
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
        )
        return state, {**sums, "grad_norm": optax.tree.norm(grads)}

    return train_step


def make_eval_step(
    model: RoFormer, *, axis_name: str | None = None, mask_prob: float | None = None
):
    """`(params, batch) → sums` of `mlm_sums`, summed over `axis_name` when pmapped.

    mask_prob as in `make_train_step`.
    """

    def eval_step(params, batch):
        sums = _mlm_apply(model, params, batch, mask_prob, deterministic=True)
        return sums if axis_name is None else lax.psum(sums, axis_name)

    return eval_step


class TrainingInterrupted(Exception):
    """SIGTERM / Ctrl-C (or a multi-host preemption notice) stopped the run after a save."""


# ---------------------------------------------------------------- the loop


def train_and_evaluate(cfg: ExperimentConfig, workdir: str) -> dict:
    """Trains `cfg` in `workdir`, resuming from its latest checkpoint; returns final metrics.

    Writes workdir/config.json, metrics.jsonl, tensorboard/ and checkpoints/ (process 0).
    Raises FloatingPointError on a non-finite loss or gradient (no checkpoint is written
    after it), TrainingInterrupted after saving when stopped by a signal, and ValueError
    when workdir holds a checkpoint of a different model.
    """
    tcfg, cfg_dict = cfg.train, dataclasses.asdict(cfg)
    stages = tcfg.stages or ((tcfg.steps, cfg.data.seq_len, tcfg.batch_size),)
    devices = _Devices()
    for _, seq_len, batch_size in stages:
        devices.check_batch(batch_size, tcfg.grad_accum, "batch_size")
        if cfg.model.position == "learned" and seq_len > cfg.model.max_len:
            raise ValueError(
                f"a stage trains at length {seq_len}, past the learned position table of "
                f"max_len {cfg.model.max_len} rows"
            )
    devices.check_batch(tcfg.eval_batch_size or tcfg.batch_size, 1, "eval_batch_size")

    # --- Data: this host's rows of every global batch.
    corpus = data_lib.load_corpus(cfg.data, tcfg.data_cache_dir or os.path.join(workdir, "data"))
    if corpus.tokenizer.vocab_size > cfg.model.vocab_size:
        raise ValueError(
            f"the tokenizer has {corpus.tokenizer.vocab_size} ids but model.vocab_size is "
            f"{cfg.model.vocab_size}; leave model.vocab_size None to follow the tokenizer"
        )
    valid_sets = _valid_sets(corpus, cfg)

    # --- Model and optimizer; shapes first.
    model = RoFormer(cfg.model)
    tx = optim.make_optimizer(cfg.optim, tcfg.steps)
    schedule = optim.learning_rate_schedule(cfg.optim, tcfg.steps)
    init_rng, step_rng = jax.random.split(jax.random.key(cfg.seed))

    def init(rng):
        params = model.init(rng, jnp.zeros((1, cfg.data.seq_len), jnp.int32))["params"]
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))

    abstract_state = jax.eval_shape(init, init_rng)
    n_params = sum(x.size for x in jax.tree.leaves(abstract_state.params))
    logging.info("%s parameters; %d devices on %d hosts", f"{n_params:,}", jax.device_count(),
                 jax.process_count())  # fmt: skip

    # --- Restore, or initialize.
    checkpoints = Checkpoints(os.path.join(workdir, "checkpoints"), keep=tcfg.keep_checkpoints)
    restored = checkpoints.restore(abstract_state, cfg_dict["model"])
    if restored is None:
        state, progress = jax.jit(init)(init_rng), {"window": metrics_lib.empty_window()}
    else:
        state, progress = jax.device_put(restored[0]), restored[1]
    start, window = int(state.step), progress["window"]  # window: host sums since last record
    session_start = time.time()

    def elapsed():  # training time over every session of this run
        return progress.get("elapsed_s", 0.0) + time.time() - session_start

    logging.info("%s at step %d", "resuming" if start else "starting", start)
    if jax.process_index() == 0:
        with open(os.path.join(workdir, "config.json"), "w", encoding="utf-8") as f:
            json.dump(cfg_dict, f, indent=2)

    # --- Step functions: one code path, jitted on one device or pmapped.
    # Whole-word masking can choose more targets than masking.max_targets; then the head
    # runs at every position.
    mask_prob = None if cfg.data.whole_word else cfg.data.mask_prob
    train_step, eval_step = devices.compile(
        make_train_step(
            model, tx, grad_accum=tcfg.grad_accum, axis_name=devices.axis, mask_prob=mask_prob
        ),
        make_eval_step(model, axis_name=devices.axis, mask_prob=mask_prob),
    )
    state = devices.replicate(state)

    def evaluate():
        return _evaluate(lambda b: devices.first(eval_step(state.params, devices.shard(b))),
                         valid_sets)  # fmt: skip

    def save(step):
        meta = {"config": cfg_dict, "window": window, "elapsed_s": elapsed()}
        checkpoints.save(step, devices.first(state), meta)

    # --- Loop: steps are dispatched asynchronously (the host prepares step t + 1 while the
    # devices run step t); metrics reach the host only to log, evaluate or save.
    batches = _staged_batches(corpus, stages, seed=cfg.seed, start_step=start)
    stage_steps = [s[0] for s in stages]
    stage_starts = set(np.cumsum([1, *stage_steps[:-1]]).tolist())  # each stage's first step
    step_tokens = np.repeat([s[1] * s[2] for s in stages], stage_steps)  # [steps]: of step t + 1
    writer = metrics_lib.MetricsWriter(workdir, resume_step=start, enabled=jax.process_index() == 0)
    pending, last = [], {"step": start}
    with (
        _stop_requests() as stop_requested,
        contextlib.closing(writer),
        contextlib.closing(batches),
    ):
        try:
            for done in range(start + 1, tcfg.steps + 1):
                state, step_metrics = train_step(state, devices.shard(next(batches)), step_rng)
                pending.append(step_metrics)
                if len(pending) > 2:  # at most 2 steps in flight: a stop request or a save
                    jax.block_until_ready(pending[-3])  # waits for 2 steps, not for a backlog
                if done == start + 1 or done in stage_starts:  # a new shape compiles: untimed
                    jax.block_until_ready(step_metrics)
                    if done == start + 1:
                        seconds = time.time() - session_start
                        logging.info("first step (with compilation): %.1f s", seconds)
                    timed_from, timed_steps, timed_tokens = time.time(), 0, 0
                else:
                    timed_steps += 1
                    timed_tokens += step_tokens[done - 1]
                is_log = done % tcfg.log_every == 0 or done == tcfg.steps
                is_eval = done % tcfg.eval_every == 0 or done == tcfg.steps
                is_save = done % tcfg.checkpoint_every == 0 or done == tcfg.steps
                stop = stop_requested() or (jax.process_count() > 1 and _preemption(done))
                if not (is_log or is_eval or is_save or stop):
                    continue
                # Fetch the pending metrics; a non-finite one stops the run before any save.
                fetched = [devices.first(m) for m in pending]
                _accumulate(window, fetched, done - len(pending) + 1, checkpoints)
                pending.clear()
                record = {"step": done}
                if is_log:
                    seconds, lr = time.time() - timed_from, float(schedule(done - 1))
                    speed = timed_tokens / seconds if timed_steps else None
                    record.update(metrics_lib.window_record(window, lr=lr, tokens_per_s=speed))
                    window.update(metrics_lib.empty_window())
                if is_eval:
                    record.update(evaluate())
                if is_log or is_eval:
                    record["elapsed_s"] = elapsed()
                    writer.write(record)
                    speed = record.get("train/tokens_per_s")
                    eta = step_tokens[done:].sum() / speed if speed else None
                    metrics_lib.log_progress(record, total_steps=tcfg.steps, eta_s=eta)
                    last.update(record)
                if is_save or stop:
                    save(done)
                if stop:
                    raise TrainingInterrupted(
                        f"stopped at step {done} on request; checkpoint saved in "
                        f"{checkpoints.directory}. Rerun with the same workdir to resume."
                    )
                timed_from, timed_steps, timed_tokens = time.time(), 0, 0  # evals and saves not
            if start >= tcfg.steps:  # a finished run rerun: report, write nothing
                last.update(evaluate())
        finally:
            checkpoints.close()
    return last


def _staged_batches(corpus: data_lib.Corpus, stages, *, seed: int, start_step: int):
    """This host's batches for steps start_step + 1, ..., each at its stage's length and size.

    Stage k draws the rows of global steps [first_k, first_k + steps_k) from the windows at
    its length, so a resumed run sees the batches it would have seen.
    """
    first = 0
    for steps, seq_len, batch_size in stages:
        if start_step < first + steps:
            begin = max(start_step, first)
            batches = corpus.train_batches(
                batch_size=batch_size, seq_len=seq_len, seed=seed, start_step=begin,
                process_index=jax.process_index(), process_count=jax.process_count(),
            )  # fmt: skip
            with contextlib.closing(batches):
                for _ in range(first + steps - begin):
                    yield next(batches)
        first += steps


def _valid_sets(corpus: data_lib.Corpus, cfg: ExperimentConfig) -> dict[int, list[dict]]:
    """{length: this host's validation batches} at the training length and data.valid_lengths."""
    sets = {}
    for length in dict.fromkeys((cfg.data.seq_len, *cfg.data.valid_lengths)):
        if cfg.model.position == "learned" and length > cfg.model.max_len:
            logging.warning("valid length %d skipped: the learned position table has %d rows",
                            length, cfg.model.max_len)  # fmt: skip
            continue
        batch_size = cfg.train.eval_batch_size or cfg.train.batch_size
        batches = corpus.valid_batches(seq_len=length, batch_size=batch_size, seed=cfg.seed)
        if not batches:
            logging.warning("too little held-out text for one sequence of %d tokens", length)
            continue
        sets[length] = batches[: cfg.train.eval_batches]
    return sets


def _evaluate(eval_fn, valid_sets: dict[int, list[dict]]) -> dict:
    """valid/{loss,accuracy,tokens}_<length>: sums over all batches (and devices), then ratios."""
    record = {}
    for length, batches in valid_sets.items():
        sums = {"loss": 0.0, "correct": 0.0, "count": 0.0}
        for batch in batches:
            for key, value in eval_fn(batch).items():
                sums[key] += float(value)
        count = max(sums["count"], 1.0)
        record[f"valid/loss_{length}"] = sums["loss"] / count
        record[f"valid/accuracy_{length}"] = sums["correct"] / count
        record[f"valid/tokens_{length}"] = int(sums["count"])
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


class _Devices:
    """One device: jit. Several (on this host or others): pmap over the local devices.

    Every host runs the same program on its own rows; pmap's collectives span all devices
    of all hosts. Replicated values carry a leading axis of the local device count.
    """

    def __init__(self):
        self.local = jax.local_devices()
        self.parallel = jax.device_count() > 1
        self.axis = AXIS if self.parallel else None

    def check_batch(self, batch_size: int, accum: int, name: str):
        if batch_size % (jax.device_count() * accum):
            raise ValueError(
                f"{name} {batch_size} is not divisible by {jax.device_count()} devices"
                + (f" x grad_accum {accum}" if accum > 1 else "")
            )

    def compile(self, train_step, eval_step):
        if not self.parallel:
            return jax.jit(train_step, donate_argnums=(0,)), jax.jit(eval_step)
        return (
            jax.pmap(train_step, AXIS, in_axes=(0, 0, None), donate_argnums=(0,)),
            jax.pmap(eval_step, AXIS),
        )

    def shard(self, batch):  # [b, L] -> [n, b / n, L]
        if not self.parallel:
            return batch
        return jax.tree.map(lambda x: x.reshape(len(self.local), -1, *x.shape[1:]), batch)

    def first(self, tree):
        """Host numpy copies of the device-0 values (np.array copies: a zero-copy view of a
        CPU buffer would change under orbax's background write once the step donates it)."""
        return jax.tree.map(lambda x: np.array(x[0] if self.parallel else x), tree)

    def replicate(self, tree):
        """[...] -> [n, ...] with a separate copy on each local device.

        Separate buffers matter: the step donates its state and every device updates its copy
        in place. Given a broadcast numpy view instead, pmap lets the CPU backend alias one
        host buffer for all devices (zero-copy), and the devices then race on it.
        """
        if not self.parallel:
            return tree
        mesh = jax.sharding.Mesh(np.array(self.local), (AXIS,))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))

        def put(x):
            x = np.asarray(x)[None]
            copies = [jax.device_put(np.array(x), d) for d in self.local]
            shape = (len(self.local), *x.shape[1:])
            return jax.make_array_from_single_device_arrays(shape, sharding, copies)

        return jax.tree.map(put, tree)


def _preemption(step: int) -> bool:
    # jax.distributed's preemption service turns a SIGTERM on any host into the same step
    # on every host, so that all of them save the same checkpoint.
    try:
        return multihost_utils.reached_preemption_sync_point(step)
    except RuntimeError:  # the service is disabled
        return False


@contextlib.contextmanager
def _stop_requests():
    """Yields `stop_requested()`: True once SIGTERM or SIGINT arrived (single process only).

    The first signal asks the loop to save and stop after the current step; a second Ctrl-C
    falls through to Python's default (KeyboardInterrupt, no save). Multi-host runs leave
    SIGTERM to jax's preemption service (see `_preemption`).
    """
    received = []
    if jax.process_count() > 1 or threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def handler(signum, frame):
        received.append(signum)
        logging.warning("%s: saving a checkpoint after this step", signal.Signals(signum).name)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield lambda: bool(received)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)
