"""Optimizers for MLM pre-training: AdamW (BERT) or LAMB (RoFormerV2), warm-up then decay.

The update for one step, with g the gradient averaged over every masked token of the global
batch (see `step.py`):

  g <- g * min(1, clip_norm / ||g||_2)             global-norm clipping (BERT, Devlin et al. 2019)
  u <- AdamW(g) or LAMB(g), weight decay λ·w on the masked leaves only
  w <- w - lr(t) · u

`lr(t)` rises linearly from 0 to the peak over `warmup_steps`, then follows one of
`SCHEDULES`: down to `end_learning_rate` linearly (BERT) or along a half cosine (Loshchilov &
Hutter 2017; a floor end > 0 keeps it from annealing to zero), or held at the peak.

Weight decay follows BERT's `AdamWeightDecayOptimizer`: every parameter decays except biases
and LayerNorm parameters. In a Flax tree those are exactly the 1-D leaves (biases, LayerNorm
scales and offsets), while kernels and embedding tables are 2-D or more, so the mask is built
from the ranks of the leaves and not from their names. `no_decay` exempts more by name, as a
study asks: ("position_embeddings",) keeps the decay off BERT's position table (issue 56: is
decay what holds a slowly learned table at its start?).
"""

from __future__ import annotations

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp
import optax
from absl import logging

OPTIMIZERS = ("adamw", "lamb")

# lr after warm-up: (peak, end, p) -> lr, where p in [0, 1] is the share of the decay done.
SCHEDULES: dict[str, Callable[[float, float, jax.Array], jax.Array]] = {
    # BERT (Devlin et al. 2019): a straight line from the peak to `end` at the last step.
    "linear": lambda peak, end, p: peak + (end - peak) * p,
    # Half a cosine period from the peak to `end` (Loshchilov & Hutter 2017, no restarts).
    "cosine": lambda peak, end, p: end + (peak - end) * 0.5 * (1.0 + jnp.cos(jnp.pi * p)),
    # The peak to the end: no curve ends in an annealed snapshot, and lr(t) does not depend
    # on the run's length, so a run of N steps is the first N steps of a longer one.
    "constant": lambda peak, end, p: jnp.full_like(p, peak),
}


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """Hyperparameters of the optimizer and its learning-rate schedule.

    Defaults are this codebase's recipe for its 2000-step runs: BERT's optimizer (Devlin et
    al. 2019, appendix A.2: AdamW, β = (0.9, 0.999), ε = 1e-6, weight decay 0.01, linear
    decay to zero, gradients clipped to global norm 1) at a peak lr of 5e-4 after 200 warm-up
    steps. BERT itself used lr 1e-4 and 10k warm-up steps over 1M steps.
    """

    optimizer: str = "adamw"  # "adamw" | "lamb" (RoFormerV2)
    learning_rate: float = 5e-4  # peak learning rate, reached at the end of warm-up
    # Learning rate at the last step ("linear"), or the floor of "cosine", e.g. 0.1 x the
    # peak; "constant" never reaches it.
    end_learning_rate: float = 0.0
    schedule: str = "linear"  # after warm-up, a key of SCHEDULES: "linear" | "cosine" | "constant"
    warmup_steps: int = 200  # linear warm-up from 0; clipped to the run's length
    b1: float = 0.9  # Adam's first-moment decay
    b2: float = 0.999  # Adam's second-moment decay
    eps: float = 1e-6  # BERT's Adam epsilon
    weight_decay: float = 0.01  # decoupled (AdamW) or trust-ratio (LAMB), not on biases/LayerNorm
    clip_norm: float = 1.0  # global-norm clipping threshold; 0 = no clipping
    # Names in the parameter tree (a module or a leaf) whose leaves do not decay either,
    # e.g. ("position_embeddings",): the learned position table. () = BERT's mask alone.
    no_decay: tuple[str, ...] = ()

    def __post_init__(self):
        if self.optimizer not in OPTIMIZERS:
            raise ValueError(f"optimizer {self.optimizer!r} is not one of {OPTIMIZERS}")
        if self.schedule not in SCHEDULES:
            raise ValueError(f"schedule {self.schedule!r} is not one of {tuple(SCHEDULES)}")
        if self.learning_rate <= 0:
            raise ValueError(f"learning_rate must be > 0, got {self.learning_rate}")
        if self.warmup_steps < 0:
            raise ValueError(f"warmup_steps must be >= 0, got {self.warmup_steps}")
        if self.weight_decay < 0:
            raise ValueError(f"weight_decay must be >= 0, got {self.weight_decay}")
        if self.clip_norm < 0:
            raise ValueError(f"clip_norm must be >= 0 (0 = no clipping), got {self.clip_norm}")
        names = self.no_decay
        if isinstance(names, str) or not all(isinstance(n, str) and n for n in names):
            raise ValueError(f"no_decay={self.no_decay!r} must be names of parameters or modules")


def learning_rate_schedule(cfg: OptimConfig, total_steps: int) -> optax.Schedule:
    """Returns lr(t) for update t = 0, 1, ..., total_steps - 1.

    Warm-up: lr(t) = peak · t / W for t < W (so the first update has lr 0, as in BERT);
    W = min(warmup_steps, total_steps), with a warning when the warm-up is clipped.
    Then `SCHEDULES[cfg.schedule]` with p = (t - W) / (T - W) clipped to [0, 1]:
      linear   lr = peak + (end - peak) · p
      cosine   lr = end + (peak - end) · (1 + cos(π p)) / 2
      constant lr = peak
    """
    if total_steps <= 0:
        raise ValueError(f"total_steps must be > 0, got {total_steps}")
    warmup = cfg.warmup_steps
    if warmup > total_steps:  # a short test of a long recipe: warm up over the whole run
        logging.warning(
            "warmup_steps=%d is longer than the whole run (%d steps); warming up "
            "over all %d steps instead",
            warmup,
            total_steps,
            total_steps,
        )
        warmup = total_steps
    peak, end = cfg.learning_rate, cfg.end_learning_rate
    decay_steps = max(total_steps - warmup, 1)
    after_warmup = SCHEDULES[cfg.schedule]

    def schedule(count):
        t = jnp.asarray(count, jnp.float32)
        warm = peak * t / max(warmup, 1)
        p = jnp.clip((t - warmup) / decay_steps, 0.0, 1.0)
        return jnp.where(t < warmup, warm, after_warmup(peak, end, p))

    return schedule


def weight_decay_mask(params, no_decay: tuple[str, ...] = ()):
    """True for the leaves that decay: every leaf of rank >= 2 (kernels, embedding tables)
    whose path in the tree names none of `no_decay`.

    Rank-1 leaves are biases and LayerNorm scales/offsets, which BERT exempts from decay.
    Raises ValueError for a name of `no_decay` that no path has: misspelt, it would leave the
    leaf it meant decaying without a word.
    """
    names = {path: {_key_name(k) for k in path} for path, _ in jax.tree.leaves_with_path(params)}
    missing = [name for name in no_decay if not any(name in n for n in names.values())]
    if missing:
        raise ValueError(
            f"optim.no_decay names {missing}, which no parameter's path has; the model's "
            f"top-level modules are {sorted({_key_name(path[0]) for path in names})}"
        )
    return jax.tree.map_with_path(
        lambda path, p: jnp.ndim(p) >= 2 and not names[path] & set(no_decay), params
    )


def _key_name(key) -> str:
    """The name a step of a tree path gives: a dict's key, a dataclass's field."""
    return str(getattr(key, "key", getattr(key, "name", key)))


def make_optimizer(cfg: OptimConfig, total_steps: int) -> optax.GradientTransformation:
    """Clipping followed by AdamW or LAMB on the schedule of `learning_rate_schedule`."""
    return optimizer_on(cfg, learning_rate_schedule(cfg, total_steps))


def optimizer_on(cfg: OptimConfig, schedule: optax.Schedule) -> optax.GradientTransformation:
    """`make_optimizer` on a given schedule (the trainer also logs lr(t) from it)."""
    # AdamW and LAMB (RoFormerV2) take the same hyperparameters; LAMB adds layer-wise trust ratios.
    opt = {"adamw": optax.adamw, "lamb": optax.lamb}[cfg.optimizer](
        schedule,
        b1=cfg.b1,
        b2=cfg.b2,
        eps=cfg.eps,
        weight_decay=cfg.weight_decay,
        mask=functools.partial(weight_decay_mask, no_decay=cfg.no_decay),
    )
    if not cfg.clip_norm:
        return opt
    return optax.chain(optax.clip_by_global_norm(cfg.clip_norm), opt)
