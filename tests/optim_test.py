"""Tests for roformer_jax/optim.py."""

import dataclasses
import math

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from roformer_jax.training import optim


def _params():
    return {
        "dense": {"kernel": jnp.full((3, 2), 2.0), "bias": jnp.full((2,), 2.0)},
        "LayerNorm": {"scale": jnp.full((2,), 2.0), "bias": jnp.full((2,), 2.0)},
        "embed": {"embedding": jnp.full((5, 2), 2.0)},
    }


class ScheduleTest(parameterized.TestCase):
    @parameterized.parameters("linear", "cosine", "constant")
    def test_warmup_is_linear_from_zero_to_peak(self, kind):
        cfg = optim.OptimConfig(learning_rate=1e-3, warmup_steps=10, schedule=kind)
        lr = optim.learning_rate_schedule(cfg, total_steps=100)
        np.testing.assert_allclose([lr(t) for t in (0, 5, 10)], [0.0, 5e-4, 1e-3], rtol=1e-6)

    @parameterized.parameters(
        # (schedule, step, expected fraction of the way from peak to end)
        ("linear", 55, 0.5),
        ("linear", 100, 1.0),
        ("cosine", 55, 0.5),
        ("cosine", 32.5, 0.5 * (1 - math.cos(math.pi / 4))),
        ("cosine", 100, 1.0),
        ("constant", 100, 0.0),
    )
    def test_decay(self, kind, step, fraction):
        cfg = optim.OptimConfig(
            learning_rate=1e-3, end_learning_rate=1e-4, warmup_steps=10, schedule=kind
        )
        lr = optim.learning_rate_schedule(cfg, total_steps=100)
        np.testing.assert_allclose(lr(step), 1e-3 + (1e-4 - 1e-3) * fraction, rtol=1e-5)

    def test_default_is_bert_linear_decay_to_zero(self):
        # What every config that names no schedule trained with before the table existed.
        cfg = optim.OptimConfig(learning_rate=1e-3, warmup_steps=10)
        self.assertEqual((cfg.schedule, cfg.end_learning_rate), ("linear", 0.0))
        lr = optim.learning_rate_schedule(cfg, total_steps=100)
        np.testing.assert_allclose(
            [lr(t) for t in (0, 5, 10, 55, 99, 100)],
            [0.0, 5e-4, 1e-3, 5e-4, 1e-3 / 90, 0.0],
            rtol=1e-5,
            atol=1e-12,
        )

    @parameterized.parameters(
        # (schedule, lr at the end of warm-up, midway, at the last update) for peak 1e-3 and
        # end 1e-4: neither non-default schedule anneals to zero.
        ("constant", 1e-3, 1e-3, 1e-3),
        ("cosine", 1e-3, 5.5e-4, 1e-4 + 9e-4 * 0.5 * (1 + math.cos(math.pi * 89 / 90))),
    )
    def test_schedules_that_do_not_anneal_to_zero(self, kind, at_warmup, middle, last):
        cfg = optim.OptimConfig(
            learning_rate=1e-3, end_learning_rate=1e-4, warmup_steps=10, schedule=kind
        )
        lr = optim.learning_rate_schedule(cfg, total_steps=100)
        np.testing.assert_allclose([lr(10), lr(55), lr(99)], [at_warmup, middle, last], rtol=1e-5)
        self.assertGreaterEqual(float(lr(10_000)), 1e-4 * (1 - 1e-6))  # past the end: the floor

    def test_constant_does_not_depend_on_the_run_length(self):
        # A run of 200 steps is the first 200 steps of one of 2000: its curve can be extended.
        cfg = optim.OptimConfig(learning_rate=1e-3, warmup_steps=10, schedule="constant")
        short, long = (optim.learning_rate_schedule(cfg, n) for n in (200, 2000))
        np.testing.assert_array_equal([short(t) for t in range(200)], [long(t) for t in range(200)])

    def test_no_warmup_starts_at_peak(self):
        cfg = optim.OptimConfig(learning_rate=1e-3, warmup_steps=0)
        np.testing.assert_allclose(optim.learning_rate_schedule(cfg, 10)(0), 1e-3)

    def test_warmup_longer_than_run_is_clipped_with_one_warning(self):
        cfg = optim.OptimConfig(learning_rate=1e-3, warmup_steps=10)
        with self.assertLogs(level="WARNING") as logs:
            clipped = optim.learning_rate_schedule(cfg, total_steps=5)
            optim.optimizer_on(cfg, clipped)  # what the trainer does: no second warning
        self.assertLen(logs.output, 1)
        self.assertRegex(logs.output[0], r"warmup_steps=10 .*\(5 steps\).*all 5 steps")
        lrs = np.array([clipped(t) for t in range(5)])
        np.testing.assert_allclose(lrs, 1e-3 * np.arange(5) / 5, rtol=1e-6)

    @parameterized.parameters(
        {"optimizer": "sgd"},
        {"schedule": "step"},
        {"learning_rate": 0.0},
        {"clip_norm": -1.0},
        {"no_decay": ("",)},
        {"no_decay": "position_embeddings"},  # a name, not a tuple of names
    )
    def test_bad_config_names_the_value(self, **kwargs):
        with self.assertRaisesRegex(ValueError, str(list(kwargs.values())[0])):
            optim.OptimConfig(**kwargs)


class OptimizerTest(parameterized.TestCase):
    def test_mask_exempts_biases_and_layer_norm(self):
        mask = optim.weight_decay_mask(_params())
        self.assertEqual(
            mask,
            {
                "dense": {"kernel": True, "bias": False},
                "LayerNorm": {"scale": False, "bias": False},
                "embed": {"embedding": True},
            },
        )

    def test_no_decay_exempts_the_named_module_or_leaf(self):
        mask = optim.weight_decay_mask(_params(), no_decay=("embed", "kernel"))
        self.assertEqual(
            jax.tree.leaves(mask), jax.tree.leaves(jax.tree.map(lambda _: False, _params()))
        )
        self.assertEqual(
            optim.weight_decay_mask(_params(), no_decay=("embedding",))["dense"],
            {"kernel": True, "bias": False},
        )

    def test_a_name_no_path_has_is_an_error(self):
        # BERT's table is "position_embeddings"; a misspelt name would exempt nothing.
        cfg = optim.OptimConfig(no_decay=("position_embedding",))
        tx = optim.make_optimizer(cfg, total_steps=10)
        with self.assertRaisesRegex(ValueError, r"\['position_embedding'\].*'dense', 'embed'"):
            tx.init(_params())

    @parameterized.parameters(
        # AdamW: u = -lr·λ·w = -0.1·0.5·2. LAMB: u = -lr·r·λ·w with trust ratio
        # r = ||w|| / ||λ·w|| = 1/λ, so u = -lr·w = -0.1·2.
        ("adamw", -0.1),
        ("lamb", -0.2),
    )
    def test_zero_gradient_decays_only_masked_leaves(self, name, expected):
        cfg = optim.OptimConfig(
            optimizer=name, learning_rate=0.1, warmup_steps=0, weight_decay=0.5, schedule="constant"
        )
        tx = optim.make_optimizer(cfg, total_steps=10)
        params = _params()
        updates, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
        for path in (("dense", "kernel"), ("embed", "embedding")):
            np.testing.assert_allclose(updates[path[0]][path[1]], expected, rtol=1e-5)
        for path in (("dense", "bias"), ("LayerNorm", "scale"), ("LayerNorm", "bias")):
            np.testing.assert_array_equal(updates[path[0]][path[1]], 0.0)
        # The table exempted by name: no update from decay; the rest decays as before.
        exempt = dataclasses.replace(cfg, no_decay=("embed",))
        tx = optim.make_optimizer(exempt, total_steps=10)
        without, _ = tx.update(jax.tree.map(jnp.zeros_like, params), tx.init(params), params)
        np.testing.assert_array_equal(without["embed"]["embedding"], 0.0)
        chex.assert_trees_all_equal(without["dense"], updates["dense"])

    def test_adamw_matches_explicit_formula(self):
        cfg = optim.OptimConfig(learning_rate=1e-2, warmup_steps=2, weight_decay=0.1, clip_norm=0.0)
        tx = optim.make_optimizer(cfg, total_steps=4)
        rng = np.random.default_rng(0)
        w = {"kernel": rng.normal(size=(3, 4)).astype(np.float32)}
        grads = [{"kernel": rng.normal(size=(3, 4)).astype(np.float32)} for _ in range(4)]
        state, params = tx.init(w), w
        m = v = np.zeros((3, 4))
        w_ref = w["kernel"].astype(np.float64)
        for t, g in enumerate(grads):
            updates, state = tx.update(g, state, params)
            params = jax.tree.map(lambda p, u: p + u, params, updates)
            lr = 1e-2 * t / 2 if t < 2 else 1e-2 * (1 - (t - 2) / 2)
            g = g["kernel"].astype(np.float64)
            m, v = 0.9 * m + 0.1 * g, 0.999 * v + 0.001 * g * g
            m_hat, v_hat = m / (1 - 0.9 ** (t + 1)), v / (1 - 0.999 ** (t + 1))
            w_ref = w_ref - lr * (m_hat / (np.sqrt(v_hat) + 1e-6) + 0.1 * w_ref)
        np.testing.assert_allclose(params["kernel"], w_ref, rtol=1e-5, atol=1e-6)

    def test_clipping_bounds_the_global_norm(self):
        base = optim.OptimConfig(learning_rate=1.0, warmup_steps=0, weight_decay=0.0)
        # Clipping to norm 1 must be the same as feeding the optimizer g / ||g||.
        params = {"kernel": jnp.ones((2, 2))}
        g = {"kernel": jnp.array([[3.0, 4.0], [0.0, 0.0]])}  # norm 5
        clipped = {"kernel": g["kernel"] / 5.0}
        tx = optim.make_optimizer(dataclasses.replace(base, clip_norm=1.0), total_steps=3)
        plain = optim.make_optimizer(dataclasses.replace(base, clip_norm=0.0), total_steps=3)
        state, pstate = tx.init(params), plain.init(params)
        for _ in range(2):  # second step: the moments saw the clipped gradient
            u, state = tx.update(g, state, params)
            u_ref, pstate = plain.update(clipped, pstate, params)
        chex.assert_trees_all_close(u, u_ref, rtol=1e-6)


if __name__ == "__main__":
    absltest.main()
