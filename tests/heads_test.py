"""Tests for roformer_jax/heads.py: every task head's outputs, pairs, choices, gradients, jit.

HF parity of every head is in tests/hf_test.py.
"""

import functools

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax.nn import heads
from roformer_jax.nn import model as model_lib

B, C, L, K, V = 2, 3, 8, 5, 50
# Every head's output fields and their shapes, for input_ids [B, L] ([B, C, L] for choices).
EXPECTED = {
    "sequence_classification": {"logits": (B, K)},
    "token_classification": {"logits": (B, L, K)},
    "question_answering": {"start_logits": (B, L), "end_logits": (B, L)},
    "multiple_choice": {"logits": (B, C)},
}
HEAD_NAMES = [dict(testcase_name=h, head=h) for h in EXPECTED]


def _config():
    return tiny.model_config(
        vocab_size=V, hidden_size=16, num_layers=1, num_heads=2, intermediate_size=32, max_len=16
    )


def _batch(head, seed=0):
    """ids, token types (a pair: 0 then 1) and a mask with a padded row; [B, C, L] for choices."""
    rng = np.random.default_rng(seed)
    shape = (B, C, L) if head == "multiple_choice" else (B, L)
    ids = rng.integers(1, V, shape)
    types = np.broadcast_to((np.arange(L) >= L // 2).astype(np.int32), shape)
    mask = np.ones(shape, np.int32)
    mask[1, ..., 6:] = 0
    return ids, types, mask


@functools.cache
def _init(head, seed=0):
    """The model and N(0, 0.3²) parameters of its shapes (no compiled init: fast tests), once
    per process (tracing the init takes ~0.2 s); numpy leaves, which no test edits."""
    model = heads.TaskModel(_config(), head, K)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 1, 1), jnp.int32))
    rng = np.random.default_rng(seed)
    params = {
        path: np.float32((path[-1] == "scale") + rng.normal(0, 0.3, x.shape))
        for path, x in flax.traverse_util.flatten_dict(shapes).items()
    }
    return model, flax.traverse_util.unflatten_dict(params)


@functools.cache
def _with_dropout(head):
    """(params, seed) -> (gradients of Σ sin(outputs), outputs) with dropout drawn from the
    seed, on `_batch(head)`: jitted once per head (one compile, not one per op), shared by the
    gradient and dropout tests."""
    model, _ = _init(head)
    ids, types, mask = _batch(head)

    def loss(params, seed):
        out = model.apply(
            {"params": params},
            ids,
            attention_mask=mask,
            token_type_ids=types,
            deterministic=False,
            rngs={"dropout": jax.random.key(seed)},
        )
        return sum(jnp.sum(jnp.sin(x)) for x in out), out

    return jax.jit(jax.grad(loss, has_aux=True))


class HeadsTest(parameterized.TestCase):
    def test_table_covers_every_head(self):
        self.assertEqual(set(heads.HEADS), set(EXPECTED))
        for name, head in heads.HEADS.items():
            self.assertTrue(issubclass(head, flax.linen.Module), name)

    @parameterized.named_parameters(HEAD_NAMES)
    def test_output_names_and_shapes(self, head):
        model, variables = _init(head)
        ids, types, mask = _batch(head)
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        self.assertEqual(out._fields, tuple(EXPECTED[head]))
        chex.assert_trees_all_equal_shapes_and_dtypes(
            out._asdict(),
            {k: jax.ShapeDtypeStruct(s, jnp.float32) for k, s in EXPECTED[head].items()},
        )
        chex.assert_tree_all_finite(out)

    @parameterized.named_parameters(HEAD_NAMES)
    def test_pair_token_types_change_the_logits(self, head):
        # Sentence pairs are told apart only by token_type_ids: all 0 must give other logits.
        model, variables = _init(head)
        ids, types, mask = _batch(head)
        pair = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        single = model.apply(variables, ids, attention_mask=mask)
        for field, with_types, without in zip(pair._fields, pair, single):
            self.assertGreater(float(jnp.abs(with_types - without).min()), 1e-4, field)

    @parameterized.parameters(("last", -1), ("first", 0))  # HF's default; [CLS]
    def test_multiple_choice_is_each_choice_scored_alone(self, summary_type, position):
        # One score per choice, each from its own [B, L] sequence: the classifier on the
        # summary token of the encoder run on that choice alone, with the same weights.
        model, variables = _init("multiple_choice")
        model = model.clone(summary_type=summary_type)
        ids, types, mask = _batch("multiple_choice")
        logits = model.apply(variables, ids, attention_mask=mask, token_type_ids=types).logits
        encoder = model_lib.RoFormer(_config(), with_mlm_head=False)
        kernel = variables["params"]["head"]["classifier"]
        for c in range(C):
            hidden = encoder.apply(
                {"params": variables["params"]["roformer"]},
                ids[:, c],
                attention_mask=mask[:, c],
                token_type_ids=types[:, c],
            ).hidden_states  # [B, L, D]
            alone = hidden[:, position] @ kernel["kernel"][:, 0] + kernel["bias"][0]
            np.testing.assert_allclose(logits[:, c], alone, atol=1e-5)
        with self.assertRaisesRegex(ValueError, r"multiple choice takes input_ids \[B, C, L\]"):
            model.apply(variables, ids[:, 0])

    def test_summary_type_is_multiple_choices_and_one_of_the_table(self):
        model, variables = _init("multiple_choice")
        ids, _, _ = _batch("multiple_choice")
        with self.assertRaisesRegex(ValueError, r"unknown summary_type 'mean'; expected one of"):
            model.clone(summary_type="mean").apply(variables, ids)
        model, variables = _init("sequence_classification")
        ids, _, _ = _batch("sequence_classification")
        with self.assertRaisesRegex(ValueError, "summary_type='first' is for multiple_choice"):
            model.clone(summary_type="first").apply(variables, ids)

    @parameterized.named_parameters(HEAD_NAMES)
    def test_gradients_are_finite_and_reach_the_head(self, head):
        _, variables = _init(head)
        grads, _ = _with_dropout(head)(variables["params"], 1)
        chex.assert_tree_all_finite(grads)
        for path, g in flax.traverse_util.flatten_dict(grads["head"]).items():
            self.assertGreater(float(jnp.abs(g).max()), 0.0, path)

    @parameterized.named_parameters(HEAD_NAMES)
    def test_jit_equals_no_jit(self, head):
        model, variables = _init(head)
        ids, types, mask = _batch(head)

        def apply(v, ids, types, mask):
            return model.apply(v, ids, attention_mask=mask, token_type_ids=types)

        chex.assert_trees_all_close(
            jax.jit(apply)(variables, ids, types, mask),
            apply(variables, ids, types, mask),
            atol=1e-5,
        )

    def test_dropout_draws_from_the_dropout_rng(self):
        _, variables = _init("token_classification")

        def run(seed):
            return _with_dropout("token_classification")(variables["params"], seed)[1].logits

        chex.assert_trees_all_equal(run(0), run(0))
        self.assertGreater(float(jnp.abs(run(0) - run(1)).max()), 1e-3)

    def test_errors_name_the_problem(self):
        model, variables = _init("sequence_classification")
        ids, _, mask = _batch("sequence_classification")
        with self.assertRaisesRegex(ValueError, r"attention_mask has shape \(2, 7\)"):
            model.apply(variables, ids, attention_mask=mask[:, :7])
        with self.assertRaisesRegex(ValueError, "unknown head 'ner'"):
            heads.TaskModel(_config(), "ner").apply(variables, ids)
        for labels in (0, 2.0, -1):  # logits [B, 0], a float shape, an MLIR error
            with self.assertRaisesRegex(ValueError, rf"num_labels={labels} must be a positive"):
                heads.TaskModel(_config(), num_labels=labels).init(jax.random.key(0), ids)


if __name__ == "__main__":
    absltest.main()
