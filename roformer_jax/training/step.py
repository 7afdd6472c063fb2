"""The pure train and eval steps: `(state, batch, rng) → (state, metrics)`.

The batch's targets and weights say what is learnt (BERT's masked tokens, or every next token
for a causal LM: data.objectives.OBJECTIVES); the steps do not know which. Gradients and metrics
are sums: the loss is the sum of token losses over all weighted (target) tokens of the global
batch divided by their count, so its gradient is psum(∑ grads) / psum(count),
the same number on 1 or 8 devices. (A lax.pmean of per-device means would weight a device
holding fewer masked tokens as much as one holding more.) A batch of pairs (its
"pair_label") adds the pair head's loss of each row, weighted by the row's target count
(`pair_sums`), so that the loss stays one sum over one count.

Randomness. Dropout's masks for row r of the global batch (its `batch["index"]`) at update t
depend on fold_in(rng, t) and r only (the model's `example_ids`; `_threefry.bernoulli_rows`
counts (r, element)). So the numbers do not depend on which device, host or micro-batch a
row lands on: 1 or 8 devices, 1 or 2 hosts and any grad_accum draw the same dropout masks.

Random attention features (FAVOR+) are drawn from the update count (`state.step`, passed
to the model as `update`) and the config, never from a device, so they agree too.

Shapes: b this device's rows, A micro-batches (grad_accum), L sequence length, P MLM
positions per row, V vocabulary.
"""

from __future__ import annotations

from typing import Any

import flax
import flax.traverse_util
import jax
import jax.numpy as jnp
import optax
from jax import lax

from roformer_jax.data import masking
from roformer_jax.nn.model import RoFormer, evaluation_update

# What a sums_fn may report beside its sums: minima over its rows, reduced by min over
# micro-batches and devices (the smallest |denominator| of linear attention, model.py).
_MINIMA = ("min_denominator",)


@flax.struct.dataclass
class TrainState:
    step: jax.Array  # int32 [], updates done so far
    params: Any
    opt_state: Any


def target_scores(logits, targets) -> tuple[jax.Array, jax.Array]:
    """(cross-entropy, 1.0 where the argmax is right), each [B, L], of logits [B, L, V]
    float32 against int targets [B, L]."""
    xent = optax.softmax_cross_entropy_with_integer_labels(logits, targets)
    return xent, (jnp.argmax(logits, axis=-1) == targets).astype(jnp.float32)


def mlm_sums(logits, targets, weights) -> dict[str, jax.Array]:
    """Summed MLM loss, correct predictions and target count over the weighted positions.

    logits [B, L, V] float32; targets int [B, L]; weights [B, L] (1 at masked targets).
    """
    xent, correct = target_scores(logits, targets)
    weights = weights.astype(jnp.float32)
    return {
        "loss": jnp.sum(xent * weights),
        "correct": jnp.sum(correct * weights),
        "count": jnp.sum(weights),
    }


def pair_sums(pair_logits, labels, row_weights) -> dict[str, jax.Array]:
    """The pair head's loss, added to the MLM sums: "loss" ∑_r n_r xent_r, with n_r the MLM
    targets of row r, so that the objective's loss (this plus ∑ token xent, over ∑ n_r)
    is the MLM loss plus the rows' pair loss weighted by their targets: BERT's sum of its two
    mean losses, up to how n_r varies between rows. The pair loss alone and its accuracy are
    reported as "pair_loss", "pair_correct" and "pair_count" (rows).

    pair_logits [B, 2] float32; labels int [B] (1: one document); row_weights [B] (n_r).
    """
    xent, correct = target_scores(pair_logits, labels)  # [B], [B]
    return {
        "loss": jnp.sum(xent * row_weights),
        "pair_loss": jnp.sum(xent),
        "pair_correct": jnp.sum(correct),
        "pair_count": jnp.asarray(xent.shape[0], jnp.float32),
    }


def mlm_apply(model, params, batch, mask_prob, **kwargs) -> dict[str, jax.Array]:
    """`mlm_sums` of the model on `batch` (and `pair_sums` where it has a pair_label [B]),
    its documents isolated where it has segment_ids [B, L]; the head runs at the batch's
    head_positions [B, P] where it has them (targets and weights are then [B, P] too), else
    with mask_prob at targets only, else everywhere.

    Each row's masking.max_targets(L, mask_prob) highest-weight positions are gathered: they
    hold every target that masking.mask_tokens chose at that rate without whole words, so the
    sums are those of the full head. In training, kinds with a denominator add
    "min_denominator", its smallest |value| over the layers (see `SelfAttention`).
    """
    targets, weights = batch["targets"], batch["weights"]
    if "segment_ids" in batch:  # isolated documents (data.documents); positions follow them
        kwargs["segment_ids"] = batch["segment_ids"]
    if "head_positions" in batch:  # held-out sets say where (data/length_eval.py)
        kwargs["mlm_positions"] = batch["head_positions"]
    elif mask_prob is not None:
        _, mlm_positions = lax.top_k(weights, masking.max_targets(weights.shape[-1], mask_prob))
        targets, weights = (
            jnp.take_along_axis(x, mlm_positions, axis=-1) for x in (targets, weights)
        )  # [B, P]
        kwargs["mlm_positions"] = mlm_positions
    out, sown = model.apply(
        {"params": params},
        batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        mutable=["intermediates"],
        **kwargs,
    )
    sums = mlm_sums(out.logits, targets, weights)
    if "pair_label" in batch:
        row_weights = jnp.sum(weights.astype(jnp.float32), axis=-1)  # [B]
        pairs = pair_sums(out.pair_logits, batch["pair_label"], row_weights)
        sums = {**sums, **pairs, "loss": sums["loss"] + pairs["loss"]}
    return {**sums, **_sown_minima(sown)}


def _sown_minima(sown) -> dict[str, jax.Array]:
    """{name: the smallest value any layer sowed under it} for the names of _MINIMA."""
    flat = flax.traverse_util.flatten_dict(dict(sown.get("intermediates", {})))
    minima = {}
    for name in _MINIMA:
        values = [v for path, v in flat.items() if path[-1] == name]
        if values:
            minima[name] = jnp.min(jnp.stack(jax.tree.leaves(values)))
    return minima


def _train_sums(sums_fn, params, batch, rng, update) -> dict[str, jax.Array]:
    """`sums_fn` in training mode; each row's dropout masks from `rng` and its index in the
    global batch, batch["index"] int [b] (see the module doc); `update`: the updates done."""
    rows = {k: v for k, v in batch.items() if k != "index"}
    return sums_fn(
        params,
        rows,
        deterministic=False,
        rngs={"dropout": rng},
        example_ids=batch["index"],
        update=update,
    )


def make_train_step(
    model: RoFormer,
    tx,
    *,
    grad_accum: int = 1,
    axis_name: str | None = None,
    mask_prob: float | None = None,
):
    """The pure MLM (or next-token) update `(state, batch, rng) → (state, metrics)`.

    `make_sums_train_step` of `mlm_apply`. mask_prob: the rate the targets were chosen at
    without whole words; when given, the MLM head runs only where targets can be (see
    `mlm_apply`).
    """

    def sums_fn(params, batch, **kwargs):
        return mlm_apply(model, params, batch, mask_prob, **kwargs)

    return make_sums_train_step(sums_fn, tx, grad_accum=grad_accum, axis_name=axis_name)


def make_sums_train_step(sums_fn, tx, *, grad_accum: int = 1, axis_name: str | None = None):
    """The pure update `(state, batch, rng) → (state, metrics)` of any summed loss.

    sums_fn(params, batch, *, deterministic, rngs, example_ids, update) → {"loss",
    "correct", "count"}: sums over the batch's targets (masked tokens for MLM, examples for a
    task head), passing example_ids on to the model's dropout and update (the updates done so
    far) to its random features; it may add other sums (e.g. `pair_sums`'s) and minima
    (_MINIMA). batch: dict of [b, ...] arrays
    (b divisible by grad_accum) and "index", int [b], each row's index in the global batch
    (its example_ids). Gradients of the summed loss are accumulated over `grad_accum`
    micro-batches of b / A rows by a scan, summed over `axis_name` (when pmapped) and divided
    by the total target count. metrics: the sums ("loss", "correct", "count", ...) over the global
    batch, "grad_norm" of the mean gradient (before clipping), and the minima over the
    global batch.
    """

    def loss_fn(params, batch, rng, update):
        sums = _train_sums(sums_fn, params, batch, rng, update)
        return sums["loss"], sums

    grad_fn = jax.grad(loss_fn, has_aux=True)

    def train_step(state: TrainState, batch, rng):
        rng = jax.random.fold_in(rng, state.step)  # then each row's index, never the device
        micro = jax.tree.map(
            lambda x: x.reshape(grad_accum, x.shape[0] // grad_accum, *x.shape[1:]), batch
        )  # [A, b / A, L]

        def accumulate(grads, micro_batch):
            micro_grads, metrics = grad_fn(state.params, micro_batch, rng, state.step)
            return jax.tree.map(jnp.add, grads, micro_grads), metrics

        # Each micro-batch's metrics come out of the scan stacked ([A]) rather than carried, so
        # that the carry's shape is the parameters' and the gradient is traced once, not a
        # second time (by eval_shape) to learn which metrics sums_fn reports.
        zeros = jax.tree.map(jnp.zeros_like, state.params)
        grads, metrics = lax.scan(accumulate, zeros, micro)
        sums = {k: jnp.sum(v, axis=0) for k, v in metrics.items() if k not in _MINIMA}
        minima = {k: jnp.min(v, axis=0) for k, v in metrics.items() if k in _MINIMA}
        if axis_name is not None:
            grads, sums = lax.psum((grads, sums), axis_name)
            minima = lax.pmin(minima, axis_name)
        grads = jax.tree.map(lambda g: g / jnp.maximum(sums["count"], 1.0), grads)
        updates, opt_state = tx.update(grads, state.opt_state, state.params)
        state = state.replace(
            step=state.step + 1,
            params=optax.apply_updates(state.params, updates),
            opt_state=opt_state,
        )
        return state, {**sums, **minima, "grad_norm": optax.tree.norm(grads)}

    return train_step


def make_eval_step(
    model: RoFormer, *, axis_name: str | None = None, mask_prob: float | None = None
):
    """`(params, batch, steps_done=None) → sums` of `mlm_sums`, summed over `axis_name` when
    pmapped. steps_done: int [] (the state's step), the updates the parameters have had,
    which picks the random attention features (model.evaluation_update).

    mask_prob as in `make_train_step`. Rows need no "index": nothing is random.
    """

    def eval_step(params, batch, steps_done=None):
        batch = {k: v for k, v in batch.items() if k != "index"}
        sums = mlm_apply(
            model,
            params,
            batch,
            mask_prob,
            deterministic=True,
            update=evaluation_update(steps_done),
        )
        return sums if axis_name is None else lax.psum(sums, axis_name)

    return eval_step
