"""What fine-tuning starts from: a pre-trained encoder, a fresh task head, and AdamW whose
updates fall layer by layer from the head down (layer-wise learning-rate decay).

    model_cfg, encoder_params, tok = load_encoder("/tmp/tiny")   # or an HF directory, or None
    model, schedule, tx, init = model_and_optimizer(cfg, model_cfg, encoder_params, data)
"""

from __future__ import annotations

import functools
import os

import flax
import jax
import jax.numpy as jnp
import optax

from roformer_jax import hf
from roformer_jax.data.tokenizer import ByteTokenizer, WordPieceTokenizer
from roformer_jax.nn import heads
from roformer_jax.nn.model import PRETRAINING_HEADS
from roformer_jax.nn.model_config import ModelConfig, model_config
from roformer_jax.training import optim, runs
from roformer_jax.training.finetune_config import FinetuneExperiment
from roformer_jax.training.step import TrainState

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
    return (
        model.config,
        {k: v for k, v in params.items() if k not in PRETRAINING_HEADS},
        (WordPieceTokenizer.from_vocab(init_from)),
    )


def initial_params(model: heads.TaskModel, encoder_params, rng, ids):
    """The TaskModel's params: a fresh head (and encoder, without `encoder_params`) from
    `rng`; ValueError when the encoder's tree or shapes are not the model's."""
    params = _jitted_init(model)(rng, ids)["params"]
    if encoder_params is None:
        return params
    want = jax.tree.map(jnp.shape, params["roformer"])
    have = jax.tree.map(jnp.shape, encoder_params)
    if want != have:
        raise ValueError(f"the pre-trained encoder's parameters {have} are not the model's {want}")
    return {**params, "roformer": jax.tree.map(jnp.asarray, encoder_params)}


@functools.lru_cache(maxsize=32)
def state_shapes(model: heads.TaskModel, tx, row_shape: tuple[int, ...]):
    """The TrainState's shapes for `model` and `tx` at rows of `row_shape`, whichever encoder
    it starts from: what step functions over a mesh are compiled for."""
    ids = jnp.zeros((1, *row_shape), jnp.int32)

    def init(rng):
        params = model.init(rng, ids)["params"]
        return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

    return jax.eval_shape(init, jax.random.key(0))


@functools.lru_cache(maxsize=32)
def _jitted_init(model: heads.TaskModel):
    """jax.jit(model.init), one per model: a bound method is a new function at each access,
    and jit would trace it anew each time (unjitted, each op would compile on its own)."""
    return jax.jit(model.init)


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
    return optax.stateless(
        lambda updates, params=None: jax.tree.map(jnp.multiply, updates, factors)
    )


# ---------------------------------------------------------------- model and optimizer


def model_and_optimizer(
    cfg: FinetuneExperiment,
    model_cfg: ModelConfig,
    encoder_params,
    *,
    head: str,
    num_labels: int,
    row_shape: tuple[int, ...],
    steps: int,
):
    """(model, schedule, tx, init): the TaskModel of `head` (a key of heads.HEADS); AdamW
    with warm-up over `steps`, each leaf's update scaled by its layer's decay (cfg.finetune);
    init(rng) -> the first TrainState, its encoder `encoder_params` (None: fresh). row_shape:
    an example's input_ids, (L,) or (C, L)."""
    model, schedule, tx = _model_and_optimizer(
        model_cfg,
        head,
        num_labels,
        cfg.task.summary_type,
        cfg.optim,
        cfg.finetune.layer_decay,
        row_shape,
        steps,
    )
    ids = jnp.zeros((1, *row_shape), jnp.int32)  # [1, (C,) L]

    def init(rng):
        params = initial_params(model, encoder_params, rng, ids)
        return TrainState(jnp.zeros((), jnp.int32), params, jax.jit(tx.init)(params))

    return model, schedule, tx, init


@functools.lru_cache(maxsize=32)
def _model_and_optimizer(
    model_cfg, head, num_labels, summary_type, optim_cfg, layer_decay, row_shape, steps
):
    """The same (model, schedule, tx) for the same settings, so that jax.jit's caches serve
    another run of them in this process (a study's seeds and lengths)."""
    model = heads.TaskModel(model_cfg, head, num_labels, summary_type)
    schedule = optim.learning_rate_schedule(optim_cfg, steps)
    ids = jnp.zeros((1, *row_shape), jnp.int32)
    factors = layer_decay_factors(
        jax.eval_shape(model.init, jax.random.key(0), ids)["params"],
        num_layers=model_cfg.num_layers,
        decay=layer_decay,
    )
    return (
        model,
        schedule,
        optax.chain(optim.optimizer_on(optim_cfg, schedule), scale_by_factors(factors)),
    )
