"""A training run read back from its workdir: config, model, parameters and tokenizer.

    run = load_run("runs/causal/softmax_+_RoPE/seed0")
    tokens = decoding.generate(run.model, {"params": run.params}, ids, max_new_tokens=32,
                               steps_done=run.step)

For what comes after pre-training (generation, evaluation, fine-tuning), the parameters of
the run's newest readable checkpoint, with the corpus and tokenizer it was trained with.
"""

from __future__ import annotations

import json
import os
from typing import Any, NamedTuple

import jax

from roformer_jax.data.batches import Corpus, load_corpus
from roformer_jax.model import RoFormer
from roformer_jax.training.checkpoints import Checkpoints
from roformer_jax.training.config import ExperimentConfig, experiment_config_from_dict
from roformer_jax.training.loop import model_and_optimizer


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


def load_params(workdir: str) -> tuple[ExperimentConfig, Any, int]:
    """(config, params, step) of the newest checkpoint in `workdir`, without its data.

    params are host arrays. Raises FileNotFoundError when `workdir` holds no run or no
    checkpoint yet.
    """
    path = os.path.join(workdir, "config.json")
    if not os.path.exists(path):
        raise FileNotFoundError(f"{workdir} holds no training run (no config.json)")
    with open(path, encoding="utf-8") as f:
        cfg = experiment_config_from_dict(json.load(f))
    _, _, _, init = model_and_optimizer(cfg)
    checkpoints = Checkpoints(os.path.join(workdir, "checkpoints"), keep=cfg.train.keep_checkpoints)
    try:
        restored = checkpoints.restore(jax.eval_shape(init, jax.random.key(0)), cfg.model)
    finally:
        checkpoints.close()
    if restored is None:
        raise FileNotFoundError(f"{workdir} has no checkpoint yet")
    state, _ = restored
    return cfg, state.params, int(state.step)
