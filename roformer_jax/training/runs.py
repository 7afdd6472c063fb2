"""A run's model and optimizer, and a training run read back from its workdir.

    run = load_run("runs/causal/softmax_+_RoPE/seed0")
    tokens = decoding.generate(run.model, {"params": run.params}, ids, max_new_tokens=32,
                               steps_done=run.step)

For what comes after pre-training (generation, evaluation, fine-tuning), the parameters of
the run's newest readable checkpoint, with the corpus and tokenizer it was trained with.
"""

from __future__ import annotations

import functools
import os
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from absl import logging

from roformer_jax.data.corpus import Corpus, load_corpus
from roformer_jax.nn.model import PRETRAINING_HEADS, RoFormer
from roformer_jax.training import optim
from roformer_jax.training import workdir as workdir_lib
from roformer_jax.training.checkpoints import Checkpoints
from roformer_jax.training.config import ExperimentConfig, experiment_config_from_dict
from roformer_jax.training.step import TrainState


class TrainedRun(NamedTuple):
    config: ExperimentConfig
    model: RoFormer
    params: Any  # host arrays, the model's "params" collection
    corpus: Corpus  # its data: tokenizer, training and held-out token streams
    step: int  # the updates the parameters have had

    @property
    def tokenizer(self):
        return self.corpus.tokenizer


def load_run(workdir: str) -> TrainedRun:
    """The newest checkpoint of the run in `workdir` (written by `train_and_evaluate`).

    Raises FileNotFoundError when `workdir` holds no run or no checkpoint yet.
    """
    cfg, params, step = load_params(workdir)
    cache = cfg.train.data_cache_dir or os.path.join(workdir, "data")
    model = model_and_optimizer(cfg)[0]  # with the heads its objective trained
    return TrainedRun(cfg, model, params, load_corpus(cfg.data, cache), step)


def load_params(workdir: str, step: int | None = None) -> tuple[ExperimentConfig, Any, int]:
    """(config, params, step) of the newest checkpoint in `workdir` (or of `step`'s), without
    its data.

    params are host arrays. Raises FileNotFoundError when `workdir` holds no run or no
    checkpoint yet, ValueError when it keeps no checkpoint of `step`.
    """
    cfg, checkpoints = _config_and_checkpoints(workdir)
    _, _, _, init = model_and_optimizer(cfg)
    try:
        restored = checkpoints.restore(state_shapes(init), cfg.model, step=step)
    finally:
        checkpoints.close()
    if restored is None:
        raise FileNotFoundError(f"{workdir} has no checkpoint yet")
    state, _ = restored  # on this host's first device, whichever mesh wrote it
    return cfg, jax.tree.map(np.asarray, state.params), int(state.step)


def checkpoint_steps(workdir: str) -> list[int]:
    """The steps of the checkpoints that the run in `workdir` keeps, oldest first."""
    _, checkpoints = _config_and_checkpoints(workdir)
    try:
        return checkpoints.all_steps()
    finally:
        checkpoints.close()


def _config_and_checkpoints(workdir: str) -> tuple[ExperimentConfig, Checkpoints]:
    path = os.path.join(workdir, workdir_lib.CONFIG_FILE)
    saved = workdir_lib.read_config(workdir) if os.path.exists(path) else None
    if saved is None:
        raise FileNotFoundError(f"{workdir} holds no training run (no config.json of one)")
    cfg = experiment_config_from_dict(saved)
    directory = os.path.join(workdir, "checkpoints")
    return cfg, Checkpoints(directory, keep=cfg.train.keep_checkpoints)


def model_and_optimizer(cfg: ExperimentConfig):
    """(model, learning-rate schedule, optimizer, init): init(rng) is the initial TrainState.

    The same objects for the same model, optimizer and length of training, so that a second
    run of one model in a process (a study's next seed, a resumed run, a run read back) finds
    its init, train and eval steps already traced and compiled by jax.jit.
    """
    return _model_and_optimizer(
        cfg.model, cfg.data.pairs, cfg.data.seq_len, cfg.optim, cfg.train.steps
    )


@functools.lru_cache(maxsize=32)
def _model_and_optimizer(model_cfg, pairs: bool, seq_len: int, optim_cfg, steps: int):
    model = RoFormer(model_cfg, with_pair_head=pairs)
    schedule = optim.learning_rate_schedule(optim_cfg, steps)
    tx = optim.optimizer_on(optim_cfg, schedule)

    def init(rng):
        params = model.init(rng, jnp.zeros((1, seq_len), jnp.int32))["params"]
        return TrainState(step=jnp.zeros((), jnp.int32), params=params, opt_state=tx.init(params))

    return model, schedule, tx, init


@functools.lru_cache(maxsize=32)
def state_shapes(init) -> TrainState:
    """The shapes and dtypes of the TrainState that init(rng) returns (model_and_optimizer),
    traced once per init: jax.eval_shape keeps no cache of its own."""
    return jax.eval_shape(init, jax.random.key(0))


def run_rngs(seed: int) -> tuple[jax.Array, jax.Array]:
    """(init_rng, step_rng) of a run of `seed`: its initial parameters are
    jax.jit(init)(init_rng) (model_and_optimizer), which analyses of a run can redo."""
    init_rng, step_rng = jax.random.split(jax.random.key(seed))
    return init_rng, step_rng


def params_from(workdir: str, initial_params, tokenizer):
    """The params of the newest checkpoint in `workdir` (train.init_from), host arrays.

    initial_params: this run's fresh params. A pre-training head this run has and that run
    lacks (model.PRETRAINING_HEADS: the pair head of "mlm_same_doc" after an MLM run) keeps
    its initial values. tokenizer: this run's, which must be that run's: the same shapes
    under another vocabulary would load, and mean nothing. Raises FileNotFoundError when
    `workdir` holds no run or no checkpoint, and ValueError when the tokenizers differ or
    naming the first other parameter whose path or shape differs from this run's.
    """
    try:
        run = load_run(workdir)
    except FileNotFoundError as e:
        raise FileNotFoundError(f"train.init_from={workdir!r}: {e}") from None
    params, step = run.params, run.step
    if not same_tokenizer(run.tokenizer, tokenizer):
        raise ValueError(
            f"train.init_from={workdir!r} was trained with another tokenizer (its corpus "
            f"{run.config.data.source!r}, max_chars {run.config.data.max_chars}): its "
            "embeddings would be read under the wrong ids. Use the same data settings"
        )
    added = [h for h in PRETRAINING_HEADS if h in initial_params and h not in params]
    params = {**params, **{h: jax.device_get(initial_params[h]) for h in added}}
    found, wanted = _shapes(params), _shapes(initial_params)
    for path in [*wanted, *(p for p in found if p not in wanted)]:
        if found.get(path) != wanted.get(path):
            raise ValueError(
                f"train.init_from={workdir!r} has parameters of another model: {path} is "
                f"{found.get(path, 'absent')} there and {wanted.get(path, 'absent')} here "
                "(only what holds no parameters may differ, e.g. RoPE's scaling or dropout)"
            )
    logging.info(
        "parameters from %s (step %d)%s",
        workdir,
        step,
        f"; {', '.join(added)} initialized afresh" if added else "",
    )
    return params


def same_tokenizer(a, b) -> bool:
    """Whether two tokenizers give every text the same ids."""
    return type(a) is type(b) and all(
        getattr(a, name, None) == getattr(b, name, None) for name in ("vocab", "lowercase")
    )


def _shapes(tree) -> dict[str, tuple[int, ...]]:
    """{path: shape} of every leaf, e.g. {"['embeddings']['LayerNorm']['bias']": (64,)}."""
    leaves = jax.tree_util.tree_flatten_with_path(tree)[0]
    return {jax.tree_util.keystr(path): tuple(x.shape) for path, x in leaves}
