"""Tests for roformer_jax/evaluation.py: loss by length and by position."""

import dataclasses

import jax
import numpy as np
import tiny
from absl.testing import absltest

from roformer_jax.data.length_eval import LengthEvalSet
from roformer_jax.nn.model import RoFormer
from roformer_jax.training.evaluation import score_lengths

_CONFIG = tiny.model_config(
    vocab_size=50, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32
)


def _batch(rng, rows, length, targets_per_row):
    ids = rng.integers(5, 50, (rows, length)).astype(np.int32)
    mask = np.ones((rows, length), np.int32)
    mask[-1, length // 2 :] = 0  # a shorter last row
    ids[mask == 0] = 0
    head = np.stack([rng.choice(length // 2, targets_per_row, replace=False) for _ in ids])
    weights = np.ones(head.shape, np.float32)
    weights[0, -1] = 0.0  # padding of the head positions
    return {
        "input_ids": ids,
        "attention_mask": mask,
        "token_type_ids": np.zeros_like(ids),
        "head_positions": head.astype(np.int32),
        "weights": weights,
        "targets": rng.integers(5, 50, head.shape).astype(np.int32),
    }


def _init(model: RoFormer) -> dict:
    return jax.jit(model.init)(jax.random.key(0), np.ones((1, 8), np.int32))["params"]


class ScoreLengthsTest(absltest.TestCase):
    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        rng = np.random.default_rng(0)
        cls.model = RoFormer(_CONFIG)
        # Once for the class, and jitted: one compile instead of one per operation.
        cls.params = _init(cls.model)
        cls.held_out = LengthEvalSet(
            {12: [_batch(rng, 3, 12, 4), _batch(rng, 3, 12, 4)], 24: [_batch(rng, 2, 24, 5)]},
            num_targets=0,
            num_tokens=0,
            num_pieces=1,
            target_offset=1,
        )

    def test_loss_and_curve_against_the_full_head(self):
        scores = score_lengths(self.model, self.params, self.held_out, bin_width=4)
        full_head = jax.jit(
            lambda p, ids, mask: (
                self.model.apply({"params": p}, ids, attention_mask=mask, deterministic=True).logits
            )
        )
        for length, batches in self.held_out.batches.items():
            losses, positions = [], []
            for b in batches:  # the reference: every position's logits, picked in numpy
                x = np.asarray(full_head(self.params, b["input_ids"], b["attention_mask"]), float)
                logp = x - np.log(np.exp(x - x.max(-1, keepdims=True)).sum(-1, keepdims=True))
                logp -= x.max(-1, keepdims=True)
                rows, cols = np.nonzero(b["weights"])
                heads = b["head_positions"][rows, cols]
                losses += list(-logp[rows, heads, b["targets"][rows, cols]])
                positions += list(heads + 1)
            got = scores[length]
            self.assertEqual(got["targets"], len(losses))
            np.testing.assert_allclose(got["loss"], np.mean(losses), rtol=1e-5)
            bins = np.asarray(positions) // 4
            self.assertEqual(got["position_bins"], list(range(0, length, 4)))
            for i, (loss, count) in enumerate(zip(got["position_loss"], got["position_targets"])):
                self.assertEqual(count, int(np.sum(bins == i)))
                if count:
                    np.testing.assert_allclose(
                        loss, np.mean(np.asarray(losses)[bins == i]), rtol=1e-5
                    )
                else:
                    self.assertTrue(np.isnan(loss))

    def test_a_model_per_length(self):
        asked = []

        def models(length):
            asked.append(length)
            return self.model

        by_length = score_lengths(models, self.params, self.held_out)
        self.assertEqual(asked, [12, 24])
        self.assertEqual(by_length, score_lengths(self.model, self.params, self.held_out))
        with self.assertRaisesRegex(ValueError, "bin_width 0"):
            score_lengths(self.model, self.params, self.held_out, bin_width=0)

    def test_random_features_are_those_of_the_last_update(self):
        # FAVOR+ redrawn every 2 updates: after 3 or 4 updates the last draw is period 1's;
        # after 2 it is period 0's, the first draw, as without steps_done. Weights far from
        # the 0.02 init make attention far from uniform, so that the features matter.
        favor = {"feature_map": "favor", "random_features": 8, "feature_redraw": 2}
        config = dataclasses.replace(
            _CONFIG, attention="linear", sections={"linear": favor}, initializer_range=0.5
        )
        model = RoFormer(config)
        params = _init(model)
        loss = {
            s: score_lengths(model, params, self.held_out, steps_done=s)[24]["loss"]
            for s in (None, 2, 3, 4)
        }
        self.assertEqual(loss[3], loss[4])
        self.assertEqual(loss[2], loss[None])
        self.assertGreater(abs(loss[3] - loss[2]), 1e-4)


if __name__ == "__main__":
    absltest.main()
