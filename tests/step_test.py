"""Tests for roformer_jax/training/step.py: MLM and next-token sums, the head at targets,
per-row dropout."""

import functools
import inspect

import chex
import jax
import jax.numpy as jnp
import numpy as np
import optax
import tiny
from absl.testing import absltest, parameterized
from scipy.special import log_softmax

from roformer_jax.data import masking
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.sections import freeze
from roformer_jax.training import optim
from roformer_jax.training.step import (
    TrainState,
    make_eval_step,
    make_train_step,
    mlm_sums,
)


def _cached(fn):
    """functools.cache of `fn(named..., **model)` keyed by its bound arguments: however a test
    spells a config (`_train_step(0.1)`, `_train_step(dropout=0.1)`), it gets the one built."""
    signature = inspect.signature(fn)

    @functools.cache
    def call(named, model):
        return fn(*named, **dict(model))

    @functools.wraps(fn)
    def cached(*args, **kwargs):
        bound = signature.bind(*args, **kwargs)
        bound.apply_defaults()
        *named, model = bound.arguments.values()
        return call(tuple(named), tuple(sorted(model.items())))

    return cached


@_cached  # built once per config: the tests that share one share _train_step's compile
def _setup(dropout: float, objective: str = "mlm", **model):
    """tiny's model (bytes) in one layer with the given dropout (and `model` fields), its
    optimizer, a state and a 4 x 64 batch of the objective ("clm": a causal model;
    "mlm_same_doc": masked rows of two segments with pair labels, and a pair head)."""
    model = dict(num_layers=1, hidden_dropout=dropout, attention_dropout=dropout, **model)
    model["causal"] = objective == "clm"
    cfg = tiny.experiment_config(
        data__objective=objective, **{f"model__{k}": v for k, v in model.items()}
    )
    model = RoFormer(cfg.model, with_pair_head=cfg.data.pairs)
    tx = optim.make_optimizer(cfg.optim, 10)
    rng = np.random.default_rng(0)
    tokens = rng.integers(5, cfg.model.vocab_size, size=(4, 64))
    tokens[1, 40:] = 0  # padding: fewer targets in that row
    if objective == "clm":
        batch = masking.next_token_targets(tokens, pad_id=0)
    else:
        batch = masking.mask_tokens(
            tokens, rng, vocab_size=cfg.model.vocab_size, mask_id=4, special_ids=range(5)
        )
    batch.update(
        attention_mask=tokens != 0,
        token_type_ids=np.zeros_like(tokens),
        index=np.arange(4, dtype=np.int32),
    )
    if cfg.data.pairs:
        batch.update(
            token_type_ids=np.repeat([[0] * 32 + [1] * 32], 4, axis=0),
            pair_label=np.array([1, 0, 0, 1], np.int32),
        )
    params = jax.jit(model.init)(jax.random.key(0), tokens[:1])["params"]  # 1 compile, not ~80
    state = TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))
    return model, tx, state, batch


@_cached
def _train_step(dropout: float, grad_accum: int = 1, mask_prob: float | None = None, **model):
    """The jitted train step of `_setup(dropout, **model)`: the tests that train one config
    with one option share its compile (one for each batch shape)."""
    model, tx, _, _ = _setup(dropout=dropout, **model)
    return jax.jit(make_train_step(model, tx, grad_accum=grad_accum, mask_prob=mask_prob))


@_cached
def _eval_step(dropout: float, mask_prob: float | None = None, **model):
    """The jitted eval step of `_setup(dropout, **model)`, shared as `_train_step` is."""
    model, _, _, _ = _setup(dropout=dropout, **model)
    return jax.jit(make_eval_step(model, mask_prob=mask_prob))


# One causal model for the next-token tests: #55's parameters (FoX's gates, learned positions)
# in one config, so that the loss and the new parameters' training share one compiled step.
_GATED = dict(
    objective="clm",
    sections=freeze({"softmax": {"gate": "learned", "output_gate": True}}),
    position="rope_learned_positions",
)
# FAVOR+'s random features, redrawn every 2 steps: the redraw test and the metrics test's favor
# kind share one model and its step.
_FAVOR = dict(attention="linear", feature_map="favor", random_features=16, feature_redraw=2)


class MlmHeadAtTargetsTest(absltest.TestCase):
    def test_train_and_eval_steps_match_the_head_everywhere(self):
        # With dropout: the head at targets must also draw the encoder's dropout unchanged.
        _, _, state, batch = _setup(dropout=0.1)
        full, at_targets = (
            _train_step(0.1, mask_prob=p)(state, batch, jax.random.key(1)) for p in (None, 0.15)
        )
        chex.assert_trees_all_close(at_targets, full, rtol=1e-5, atol=1e-6)
        evals = [_eval_step(0.1, mask_prob=p)(state.params, batch) for p in (None, 0.15)]
        chex.assert_trees_all_close(evals[1], evals[0], rtol=1e-5)


class DropoutPerRowTest(parameterized.TestCase):
    """Dropout is drawn per global row: how rows are split must not change the numbers."""

    def test_micro_batches_of_one_row_give_the_numbers_of_one_batch(self):
        _, _, state, batch = _setup(dropout=0.1)
        key = jax.random.key(1)
        one = _train_step(dropout=0.1)(state, batch, key)
        split = _train_step(dropout=0.1, grad_accum=4)(state, batch, key)
        chex.assert_trees_all_close(split, one, rtol=2e-5, atol=1e-6)

    def test_a_row_draws_the_same_dropout_in_any_batch(self):
        # Rows 2 and 3 alone, keeping their global indices, give their share of the sums.
        _, _, state, batch = _setup(dropout=0.1)
        step = _train_step(dropout=0.1)
        key = jax.random.key(1)
        _, whole = step(state, batch, key)
        halves = [
            step(state, jax.tree.map(lambda x, s=s: x[s], batch), key)[1]
            for s in (slice(0, 2), slice(2, 4))
        ]
        for k in ("loss", "correct", "count"):
            np.testing.assert_allclose(halves[0][k] + halves[1][k], whole[k], rtol=2e-5)

    def test_dropout_is_on_and_differs_between_rows_and_steps(self):
        _, _, state, batch = _setup(dropout=0.1)
        step = _train_step(dropout=0.1)
        key = jax.random.key(1)
        _, first = step(state, batch, key)
        _, other_index = step(state, {**batch, "index": batch["index"] + 4}, key)
        _, later = step(state.replace(step=state.step + 1), batch, key)
        self.assertNotEqual(float(first["loss"]), float(other_index["loss"]))
        self.assertNotEqual(float(first["loss"]), float(later["loss"]))


class IsolatedDocumentsTest(absltest.TestCase):
    def test_a_batch_of_segments_is_read_with_them(self):
        model, _, state, batch = _setup(dropout=0.1)  # evaluation drops nothing
        segments = np.repeat([[0] * 20 + [1] * 44], 4, axis=0).astype(np.int32)  # [B, L]
        step = _eval_step(0.1)
        isolated = step(state.params, {**batch, "segment_ids": segments})
        apply = jax.jit(
            lambda params, ids, mask, segments: (
                model.apply(
                    {"params": params}, ids, attention_mask=mask, segment_ids=segments
                ).logits
            )
        )
        logits = apply(state.params, batch["input_ids"], batch["attention_mask"], segments)
        want = mlm_sums(logits, batch["targets"], batch["weights"])
        chex.assert_trees_all_close(isolated, want, rtol=1e-5)
        self.assertGreater(abs(float(step(state.params, batch)["loss"] - isolated["loss"])), 1e-3)


class NextTokenLossTest(absltest.TestCase):
    def test_clm_step_loss_is_the_mean_next_token_cross_entropy(self):
        model, _, state, batch = _setup(dropout=0.0, **_GATED)
        logits = jax.jit(model.apply)(
            {"params": state.params}, batch["input_ids"], attention_mask=batch["attention_mask"]
        ).logits  # [B, L, V]
        # Independently: position i of row b predicts token i + 1 of the same row, for every
        # i + 1 inside the text but the row's last token; row 1 is padded from 40 on.
        log_p = np.asarray(jax.nn.log_softmax(logits.astype(jnp.float32)), np.float64)
        tokens = np.asarray(batch["input_ids"])
        lengths = [64, 40, 64, 64]
        xent = [-log_p[b, i, tokens[b, i + 1]] for b in range(4) for i in range(lengths[b] - 2)]
        _, metrics = _train_step(0.0, **_GATED)(state, batch, jax.random.key(1))
        self.assertEqual(float(metrics["count"]), len(xent))
        np.testing.assert_allclose(metrics["loss"] / metrics["count"], np.mean(xent), rtol=1e-5)
        sums = _eval_step(0.0, **_GATED)(state.params, batch)
        np.testing.assert_allclose(sums["loss"] / sums["count"], np.mean(xent), rtol=1e-5)


class GatedStepTest(absltest.TestCase):
    """Train steps of a causal model with #55's parameters: FoX's gates, learned positions."""

    def test_a_step_trains_the_new_parameters(self):
        _, _, state, batch = _setup(dropout=0.0, **_GATED)
        step = _train_step(0.0, **_GATED)
        new, metrics = step(state, batch, jax.random.key(1))
        self.assertTrue(np.isfinite(float(metrics["loss"])))
        new, _ = step(new, batch, jax.random.key(2))  # the first update's rate is warmup's 0
        self.assertEqual(int(new.step), 2)
        before, after = (s.params["encoder"]["layer_0"]["attention"] for s in (state, new))
        for name in ("forget_gate", "output_gate", "position_gate"):
            for old, now in zip(jax.tree.leaves(before[name]), jax.tree.leaves(after[name])):
                self.assertGreater(float(jnp.max(jnp.abs(now - old))), 0.0, name)


class TrainingMetricsTest(parameterized.TestCase):
    """The smallest |denominator| of linear attention and the gradient norm, per step."""

    # The minimum over micro-batches is taken by the step, whatever the kind: one kind checks it.
    # Softmax keeps dropout (the step DropoutPerRowTest compiled); the kinds with a denominator
    # drop it: their steps take about a third less to trace and compile
    # (benchmarks/compile_step.py).
    @parameterized.parameters(
        ({"attention": "softmax"}, False, False, 0.1),
        ({"attention": "linear", "linear_rope": "both"}, True, True, 0.0),
        (_FAVOR, True, False, 0.0),
        ({"attention": "cosine"}, True, False, 0.0),
    )
    def test_min_denominator_only_where_the_kind_has_one(
        self, model, reported, micro_batches, dropout
    ):
        # Softmax is _setup's default: the same cached config as the other tests'.
        model = {k: v for k, v in model.items() if (k, v) != ("attention", "softmax")}
        _, _, state, batch = _setup(dropout=dropout, **model)
        key = jax.random.key(1)
        _, metrics = _train_step(dropout, **model)(state, batch, key)
        want = {"loss", "correct", "count", "grad_norm"} | (
            {"min_denominator"} if reported else set()
        )
        self.assertEqual(set(metrics), want)  # softmax: the metrics it always had
        chex.assert_tree_all_finite(metrics)
        self.assertGreater(float(metrics["grad_norm"]), 0.0)
        if reported:
            self.assertGreater(float(metrics["min_denominator"]), 0.0)
        if micro_batches:  # the minimum over micro-batches is the minimum over the batch
            _, split = _train_step(dropout, grad_accum=2, **model)(state, batch, key)
            self.assertEqual(float(split["min_denominator"]), float(metrics["min_denominator"]))
        # Which sums evaluation returns is known from its trace: no compile needed.
        sums = jax.eval_shape(_eval_step(dropout, **model), state.params, batch)
        self.assertEqual(set(sums), {"loss", "correct", "count"})

    def test_favor_redraws_its_features_by_the_step(self):
        _, _, state, batch = _setup(dropout=0.0, **_FAVOR)
        step = _train_step(0.0, **_FAVOR)
        key = jax.random.key(1)
        losses = [
            float(step(state.replace(step=jnp.int32(t)), batch, key)[1]["loss"]) for t in (0, 1, 2)
        ]
        self.assertEqual(losses[0], losses[1])  # one redraw period: the same features
        self.assertNotEqual(losses[0], losses[2])


class PairLossTest(absltest.TestCase):
    """ "mlm_same_doc": each row's pair loss joins the MLM sums, weighted by its targets."""

    def test_sums_against_the_model_outputs(self):
        model, _, state, batch = _setup(dropout=0.0, objective="mlm_same_doc")
        sums = _eval_step(0.0, mask_prob=0.15, objective="mlm_same_doc")(state.params, batch)
        out = jax.jit(model.apply)(
            {"params": state.params},
            batch["input_ids"],
            attention_mask=batch["attention_mask"],
            token_type_ids=batch["token_type_ids"],
        )
        log_p = log_softmax(np.asarray(out.logits, np.float64), axis=-1)  # [B, L, V]
        w = batch["weights"]
        token_xent = -np.take_along_axis(log_p, batch["targets"][..., None], -1)[..., 0]
        pair_log_p = log_softmax(np.asarray(out.pair_logits, np.float64), axis=-1)  # [B, 2]
        pair_xent = -pair_log_p[np.arange(4), batch["pair_label"]]
        n = w.sum(-1)
        self.assertGreater(n.max() - n.min(), 0)  # the padded row has fewer targets
        np.testing.assert_allclose(
            sums["loss"], (token_xent * w).sum() + (n * pair_xent).sum(), rtol=1e-5
        )
        np.testing.assert_allclose(sums["pair_loss"], pair_xent.sum(), rtol=1e-5)
        right = np.argmax(out.pair_logits, -1) == batch["pair_label"]
        self.assertEqual(sums["pair_correct"], right.sum())
        self.assertEqual(sums["pair_count"], 4)
        self.assertEqual(sums["count"], w.sum())

    def test_micro_batches_match_and_the_pair_head_has_a_gradient(self):
        # No dropout: DropoutPerRowTest splits dropped rows into micro-batches; here the pair
        # loss is split, at a third less compiling.
        _, _, state, batch = _setup(dropout=0.0, objective="mlm_same_doc")
        key = jax.random.key(1)
        steps = {a: _train_step(0.0, a, 0.15, objective="mlm_same_doc") for a in (1, 2)}
        new, one = steps[1](state, batch, key)
        chex.assert_trees_all_close(steps[2](state, batch, key), (new, one), rtol=2e-5, atol=1e-6)
        self.assertEqual(one["pair_count"], 4)
        # The first update's learning rate is 0 (warm-up), so read the gradient where AdamW
        # keeps it: its first moment, (1 - b1) · g.
        first_moment = optax.tree_utils.tree_get(new.opt_state, "mu")
        for leaf in jax.tree.leaves(first_moment["pair_head"]):
            self.assertGreater(float(jnp.abs(leaf).max()), 0)


class MlmSumsTest(absltest.TestCase):
    def test_mlm_sums_count_only_weighted_positions(self):
        logits = jnp.log(jnp.array([[[0.7, 0.2, 0.1], [0.1, 0.1, 0.8]]]))  # [1, 2, 3]
        sums = mlm_sums(logits, jnp.array([[0, 0]]), jnp.array([[1.0, 0.0]]))
        np.testing.assert_allclose(sums["loss"], -np.log(0.7), rtol=1e-6)
        self.assertEqual((float(sums["correct"]), float(sums["count"])), (1.0, 1.0))


if __name__ == "__main__":
    absltest.main()
