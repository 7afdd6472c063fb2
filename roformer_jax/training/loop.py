"""Pre-training: data → model and optimizer → restore → step functions → loop.

    final_metrics = train_and_evaluate(cfg, workdir)   # cfg: training.config.ExperimentConfig

The loop is the one fine-tuning runs too (train_loop.TrainLoop: asynchronous steps, records,
the NaN stop, checkpoints, signals); pre-training brings its data, its validation at every
length and when each is due.

Determinism. The data of step t depend only on (seed, t) (rows, and each row's masks on its
global index), dropout only on (seed, t, global row index) (see step.py), and the host-side
metric sums travel in the checkpoint: a run resumed from any checkpoint logs bitwise the same
numbers as an uninterrupted one on CPU, and 1 or 8 devices, 1 or 2 hosts and any grad_accum
give the same numbers up to float32 summation order.
"""

from __future__ import annotations

import dataclasses
import functools
import os
from collections.abc import Callable, Iterator
from typing import NamedTuple

import jax
from absl import logging

from roformer_jax.data import doc_pairs, staging
from roformer_jax.data.batches import held_out_pairs
from roformer_jax.data.corpus import Corpus, load_corpus
from roformer_jax.nn import input_range
from roformer_jax.training import mesh as mesh_lib
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance, runtime
from roformer_jax.training import workdir as workdir_lib
from roformer_jax.training.checkpoints import Checkpoints
from roformer_jax.training.config import ExperimentConfig, TrainConfig
from roformer_jax.training.runs import model_and_optimizer, params_from, run_rngs, state_shapes
from roformer_jax.training.step import make_eval_step, make_train_step
from roformer_jax.training.train_loop import Due, TrainLoop


def train_and_evaluate(
    cfg: ExperimentConfig,
    workdir: str,
    *,
    until: int | None = None,
    resume_with_changes: bool = False,
) -> dict:
    """Trains `cfg` in `workdir`, resuming from its latest checkpoint; returns final metrics.

    until: stop after this step, with a checkpoint there: the start of the run, on its whole
    schedule (the learning rate still decays to train.steps), which a later call finishes.
    resume_with_changes: resume even where `cfg` changes what the run computes (the seed,
    data, model, optimizer, schedule); the changes are recorded (training.workdir).

    Writes workdir/config.json, provenance.json (the code and machine of each session),
    metrics.jsonl, tensorboard/ and checkpoints/ (process 0).
    Raises FloatingPointError on a non-finite loss or gradient (no checkpoint is written
    after it), runtime.TrainingInterrupted after saving when stopped by a signal, and
    ValueError when workdir is not empty nor this run's, is in use by another process, holds
    a checkpoint of a different model, or a run of another config (training.workdir).
    """
    workdir_lib.check_corpus_outside(cfg.data.source, workdir)
    with workdir_lib.claimed(workdir):
        return _train_and_evaluate(cfg, workdir, until, resume_with_changes)


def _train_and_evaluate(
    cfg: ExperimentConfig, workdir: str, until: int | None, resume_with_changes: bool
) -> dict:
    """train_and_evaluate in a workdir this process holds."""
    devices = mesh_lib.devices_for(cfg.mesh)
    stages = _stages(cfg, devices)
    devices.check_model(
        cfg.model, lengths=sorted({s[1] for s in stages} | set(cfg.data.valid_lengths))
    )
    checkpoints = Checkpoints(os.path.join(workdir, "checkpoints"), keep=cfg.train.keep_checkpoints)
    changes = workdir_lib.resume_changes(
        workdir, cfg, latest_step=checkpoints.latest_step(), allow=resume_with_changes
    )

    # --- Data: this host's rows of every global batch, and the held-out sets.
    data = _data(cfg, workdir, stages, devices)

    # --- Model and optimizer; shapes first.
    model, schedule, tx, init = model_and_optimizer(cfg)
    init_rng, step_rng = run_rngs(cfg.seed)
    abstract_state = state_shapes(init)
    n_params = sum(x.size for x in jax.tree.leaves(abstract_state.params))
    hosts = f"{jax.device_count()} device(s) on {jax.process_count()} host(s)"
    logging.info("%s parameters; %s", f"{n_params:,}", hosts)

    # --- Restore, or initialize.
    # Onto this run's devices, whichever mesh (or none) the checkpoint was written under.
    restored = checkpoints.restore(
        abstract_state, cfg.model, shardings=devices.shardings(abstract_state)
    )
    if restored is None:
        state, progress = _initial_state(cfg, init, init_rng, tx, data.corpus)
    else:
        state, progress = jax.device_put(restored[0]), restored[1]
    start = int(state.step)
    logging.info("%s at step %d", "resuming" if start else "starting", start)

    # --- Step functions: one code path, jitted on one device, pmapped, or jitted over a mesh.
    train_step, eval_step = _step_functions(cfg, model, tx, init)
    state = devices.replicate(state)
    _record_session(cfg, workdir, start, changes, devices, state)

    # --- Loop: log, evaluate, checkpoint.
    steps = cfg.train.steps
    evaluate = functools.partial(_evaluate, devices, eval_step, data)
    loop = TrainLoop(
        workdir,
        devices,
        checkpoints,
        stages,
        schedule,
        config=dataclasses.asdict(cfg),
        due=functools.partial(_due, cfg.train),
        evaluate=lambda state, done: evaluate(state),
    )
    batches = data.train(start_step=start)
    end = steps if until is None else min(until, steps)
    last = loop.run(train_step, state, step_rng, batches, progress, start=start, end=end)
    if start >= steps:  # a finished run rerun: report, write nothing
        last.update(evaluate(state))
    return last


# ---------------------------------------------------------------- data


class RunData(NamedTuple):
    """What a run reads, turned from its config's data section once (`_data`)."""

    corpus: Corpus
    train: Callable[..., Iterator[dict]]  # (start_step=t) -> this host's batches of t + 1, ...
    valid_sets: dict[int, list[dict]]  # length -> this host's validation batches
    pair_sets: list[dict]  # an objective of pairs: held-out pairs for the pair accuracy


def _data(cfg: ExperimentConfig, workdir: str, stages, devices) -> RunData:
    """The corpus, the train stream of `stages` and the held-out sets of `cfg`."""
    tcfg, hosts = (
        cfg.train,
        dict(process_index=devices.process_index, process_count=devices.process_count),
    )
    corpus = load_corpus(cfg.data, tcfg.data_cache_dir or os.path.join(workdir, "data"))
    if corpus.tokenizer.vocab_size > cfg.model.vocab_size:
        raise ValueError(
            f"the tokenizer has {corpus.tokenizer.vocab_size} ids but model.vocab_size is "
            f"{cfg.model.vocab_size}; leave model.vocab_size None to follow the tokenizer"
        )
    for name, tokens in (("train", corpus.train_tokens), ("valid", corpus.valid_tokens)):
        # Once per session, on the host: the jitted model reads NaN past its table.
        input_range.check_in_table(
            tokens, cfg.model.vocab_size, f"{corpus.path}'s {name} ids", "model.vocab_size"
        )
    eval_rows = tcfg.eval_batch_size or tcfg.batch_size
    valid_sets = staging.valid_sets(
        corpus,
        (cfg.data.seq_len, *cfg.data.valid_lengths),
        batch_size=eval_rows,
        max_tokens=tcfg.eval_batches and tcfg.eval_batches * eval_rows * (cfg.data.seq_len - 2),
        max_length=cfg.model.max_length,
        **hosts,
    )
    pair_sets = []
    if cfg.data.pairs:
        try:
            pair_sets = held_out_pairs(
                corpus,
                num_batches=-(-cfg.data.eval_pairs // eval_rows),
                batch_size=eval_rows,
                **hosts,
            )
        except doc_pairs.TooFewDocuments as e:
            logging.warning("held-out pairs skipped: %s", e)
    for batch in [*(batches[0] for batches in valid_sets.values() if batches), *pair_sets[:1]]:
        input_range.check_batch(
            batch,
            vocab_size=cfg.model.vocab_size,
            type_vocab_size=cfg.model.type_vocab_size,
            max_length=cfg.model.max_length,
        )
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


def _record_session(
    cfg: ExperimentConfig, workdir: str, start: int, changes: dict, devices, state
) -> None:
    """workdir/config.json with the changes of this session, and this session in
    provenance.json with its mesh and the bytes of the placed `state` on device 0 (process 0
    only)."""
    if jax.process_index() != 0:
        return
    workdir_lib.record_config(workdir, cfg, changes, start_step=start)
    if start < cfg.train.steps:  # a finished run rerun trains nothing: no session
        provenance.record_session(
            workdir,
            start_step=start,
            config_changes=changes,
            mesh=devices.sizes,
            state_bytes_per_device=runtime.bytes_on_device(state, jax.devices()[0]),
        )


def _step_functions(cfg: ExperimentConfig, model, tx, init):
    """(train_step, eval_step), compiled for this process's devices (runtime.Devices.compile).

    The same pair for the same model, optimizer and step settings (model_and_optimizer gives
    the same model and optimizer for the same settings), so that jax.jit's caches serve a
    later run of the model in this process.
    """
    # Where targets are not bounded by masking.max_targets (whole words, "clm"), the head
    # runs at every position.
    tcfg = cfg.train
    return _compiled_steps(model, tx, init, tcfg.grad_accum, cfg.data.target_rate, cfg.mesh)


@functools.lru_cache(maxsize=32)
def _compiled_steps(model, tx, init, grad_accum: int, mask_prob, mesh: mesh_lib.MeshConfig):
    devices = mesh_lib.devices_for(mesh)  # a process's devices do not change
    return devices.compile(
        make_train_step(
            model, tx, grad_accum=grad_accum, axis_name=devices.axis, mask_prob=mask_prob
        ),
        make_eval_step(model, axis_name=devices.axis, mask_prob=mask_prob),
        state_shapes(init),  # a mesh's shardings of the state
    )


def _stages(cfg: ExperimentConfig, devices) -> tuple[tuple[int, int, int], ...]:
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


# ---------------------------------------------------------------- the loop's parts


def _due(tcfg: TrainConfig, done: int) -> Due:
    """A record every log_every steps, validation every eval_every, a checkpoint every
    checkpoint_every; all three at the last step."""
    every = (tcfg.log_every, tcfg.eval_every, tcfg.checkpoint_every)
    return Due(*(done % n == 0 or done == tcfg.steps for n in every))


def _evaluate(devices, eval_step, data: RunData, state) -> dict:
    """valid/{loss,perplexity,accuracy,tokens}_<length> of the replicated `state`: sums over
    all batches (and devices), then ratios; with held-out pairs valid/pair_{loss,accuracy}
    and valid/pairs."""

    def eval_fn(batch):
        return devices.first(eval_step(state.params, devices.shard(batch), state.step))

    valid_sets, pair_sets = data.valid_sets, data.pair_sets
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
