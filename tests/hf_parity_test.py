"""Tests for roformer_jax/hf.py against transformers: what we load computes what transformers
computes, every head, and transformers loads what we save.

They need `pip install torch==2.13.0 transformers` and are skipped without them; hf_test.py
holds the tests that run with the project's own dependencies.
"""

import os
import tempfile
import unittest

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from hf_cases import NO_TRANSFORMERS, _random_variables, _tiny_config, torch, transformers

from roformer_jax import hf
from roformer_jax.nn import decoding, heads

PARITY_TOLERANCE = 1e-5  # max abs difference against transformers, float32


# transformers 5.9 to 5.17 built RoFormerForCausalLM's mask without the causal part: each
# token saw the tokens after it (5.8 and 5.18 on do not; checked on every release between).
_HF_CAUSAL = (
    f"transformers {transformers.__version__ if transformers else None}'s "
    "RoFormerForCausalLM (5.9 to 5.17 attend to later tokens)"
)


def _hf_model(cls, seed, **config_overrides):
    torch.manual_seed(seed)
    config = transformers.RoFormerConfig(
        **{
            **dict(vocab_size=99, hidden_size=32, num_hidden_layers=2, num_attention_heads=4),
            **dict(intermediate_size=37, max_position_embeddings=64),
            **config_overrides,
        }
    )
    model = cls(config).eval()
    with torch.no_grad():  # HF initializes LayerNorms to 1 and biases to 0: perturb everything
        for name, p in model.named_parameters():
            if "embed_positions" not in name:
                p.add_(0.1 * torch.randn_like(p))
    return model


def _batch(seed=0, b=3, length=12, vocab=99):
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, vocab, (b, length))
    types = rng.integers(0, 2, (b, length))
    mask = np.ones((b, length), np.int64)
    mask[1, 7:] = 0  # padded rows: HF and we must agree on the padded positions too
    mask[2, 3:] = 0
    return ids, types, mask


def _max_diff(ours, theirs):
    return float(np.abs(np.asarray(ours, np.float64) - theirs.detach().numpy()).max())


@unittest.skipIf(transformers is None, NO_TRANSFORMERS)
class TransformersParityTest(parameterized.TestCase):
    @parameterized.named_parameters(
        dict(testcase_name="plain", overrides={}),
        dict(testcase_name="embedding_size", overrides=dict(embedding_size=24)),
        dict(testcase_name="rotary_value", overrides=dict(rotary_value=True)),
    )
    def test_masked_lm(self, overrides):
        theirs = _hf_model(transformers.RoFormerForMaskedLM, 0, **overrides)
        ids, types, mask = _batch()
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        t = [torch.tensor(x) for x in (ids, mask, types)]
        with torch.no_grad():
            hidden = theirs.roformer(t[0], attention_mask=t[1], token_type_ids=t[2])
            logits = theirs(t[0], attention_mask=t[1], token_type_ids=t[2]).logits
        self.assertLessEqual(
            _max_diff(out.hidden_states, hidden.last_hidden_state), PARITY_TOLERANCE
        )
        self.assertLessEqual(_max_diff(out.logits, logits), PARITY_TOLERANCE)

    def test_causal_lm(self):
        theirs = _hf_model(transformers.RoFormerForCausalLM, 3, is_decoder=True)
        ids, types, mask = _batch(seed=3)
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        self.assertTrue(model.config.causal)
        self.assertTrue(model.with_mlm_head)

        def our_logits(batch):
            out = model.apply(variables, batch, attention_mask=mask, token_type_ids=types)
            return np.asarray(out.logits)

        def hf_logits(batch):
            with torch.no_grad():
                t = [torch.tensor(x) for x in (batch, mask, types)]
                return theirs(t[0], attention_mask=t[1], token_type_ids=t[2]).logits.numpy()

        # Row 0 has no padding: a token changed at position 6 moves the logits from 6 on only.
        changed = ids.copy()
        changed[0, 6] = ids[0, 6] % 98 + 1
        for name, logits in (("ours", our_logits), (_HF_CAUSAL, hf_logits)):
            before, after = logits(ids)[0], logits(changed)[0]
            np.testing.assert_allclose(after[:6], before[:6], atol=1e-6, err_msg=name)
            self.assertGreater(float(np.abs(after[6:] - before[6:]).min()), 0.0)
        real = mask.astype(bool)  # padded positions predict nothing; compare the real tokens
        difference = np.abs(our_logits(ids)[real] - hf_logits(ids)[real]).max()
        self.assertLessEqual(float(difference), PARITY_TOLERANCE)

    def test_greedy_generation_equals_transformers(self):
        theirs = _hf_model(transformers.RoFormerForCausalLM, 4, is_decoder=True)
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        ids, _, _ = _batch(seed=4, length=6)
        mask = np.ones_like(ids)
        mask[1, :2] = mask[2, :4] = 0  # left-padded prompts, as transformers wants them
        ours = decoding.generate(model, variables, ids, attention_mask=mask, max_new_tokens=8)
        with torch.no_grad():
            expected = theirs.generate(
                torch.tensor(ids),
                attention_mask=torch.tensor(mask),
                max_new_tokens=8,
                do_sample=False,
                pad_token_id=0,
            )
        np.testing.assert_array_equal(np.asarray(ours)[:, 6:], expected.numpy()[:, 6:])

    def test_base_model_from_pytorch_bin(self):
        theirs = _hf_model(transformers.RoFormerModel, 1)
        ids, types, mask = _batch(seed=1)
        with tempfile.TemporaryDirectory() as d:
            theirs.config.save_pretrained(d)
            torch.save(theirs.state_dict(), os.path.join(d, "pytorch_model.bin"))
            model, variables = hf.load_hf_roformer(d)
        self.assertFalse(model.with_mlm_head)
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        self.assertIsNone(out.logits)
        with torch.no_grad():
            expected = theirs(*[torch.tensor(x) for x in (ids, mask, types)]).last_hidden_state
        self.assertLessEqual(_max_diff(out.hidden_states, expected), PARITY_TOLERANCE)

    def test_transformers_loads_what_we_save(self):
        config = _tiny_config(embedding_size=24)
        model, variables = _random_variables(config)
        ids, types, mask = _batch(seed=2)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            theirs, info = transformers.RoFormerForMaskedLM.from_pretrained(
                d, output_loading_info=True
            )
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), (set(), set()))
        theirs.eval()
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        with torch.no_grad():
            logits = theirs(*[torch.tensor(x) for x in (ids, mask, types)]).logits
        self.assertLessEqual(_max_diff(out.logits, logits), PARITY_TOLERANCE)

    def test_transformers_causal_lm_loads_what_we_save(self):
        config = _tiny_config(causal=True)
        model, variables = _random_variables(config, seed=4)
        ids, types, mask = _batch(seed=4)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(config, variables, d)
            theirs, info = transformers.RoFormerForCausalLM.from_pretrained(
                d, output_loading_info=True
            )
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), (set(), set()))
        self.assertTrue(theirs.config.is_decoder)
        self.assertEqual(theirs.config.architectures, ["RoFormerForCausalLM"])
        theirs.eval()
        out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
        with torch.no_grad():
            logits = theirs(*[torch.tensor(x) for x in (ids, mask, types)]).logits
        real = mask.astype(bool)
        self.assertLessEqual(
            _max_diff(out.logits[real], logits[real]), PARITY_TOLERANCE, msg=_HF_CAUSAL
        )


# (HF class, its RoFormerConfig overrides); regression is sequence classification with one label.
TASKS = [
    dict(testcase_name="sequence_classification", cls="SequenceClassification", num_labels=3),
    dict(testcase_name="regression", cls="SequenceClassification", num_labels=1),
    dict(testcase_name="token_classification", cls="TokenClassification", num_labels=5),
    dict(testcase_name="question_answering", cls="QuestionAnswering", num_labels=2),
    dict(testcase_name="multiple_choice", cls="MultipleChoice", num_labels=2),
    # HF's summary_type: the last token by default, [CLS] when config.json says "first".
    dict(
        testcase_name="multiple_choice_first",
        cls="MultipleChoice",
        num_labels=2,
        summary_type="first",
    ),
]


def _task_batch(cls, seed):
    """A padded batch with token types; choices [1, 3, L] for multiple choice."""
    ids, types, mask = _batch(seed=seed)
    if cls == "MultipleChoice":  # the padded rows become padded choices
        return tuple(x.reshape(1, 3, -1) for x in (ids, types, mask))
    return ids, types, mask


def _task_diff(model, variables, theirs, batch):
    """Max abs difference of every output (logits; start_logits, end_logits) against HF's."""
    ids, types, mask = batch
    out = model.apply(variables, ids, attention_mask=mask, token_type_ids=types)
    with torch.no_grad():
        expected = theirs(*[torch.tensor(x) for x in (ids, mask, types)])
    return max(_max_diff(getattr(out, field), expected[field]) for field in out._fields)


@unittest.skipIf(transformers is None, NO_TRANSFORMERS)
class TaskHeadParityTest(parameterized.TestCase):
    def test_every_head_has_an_hf_architecture(self):
        self.assertEqual(
            {
                hf.config_to_hf(_tiny_config(), with_mlm_head=False, head=h)["architectures"][0]
                for h in heads.HEADS
            },
            {f"RoFormerFor{t['cls']}" for t in TASKS},
        )
        for architecture in hf._TASK_ARCHITECTURES:
            self.assertTrue(hasattr(transformers, architecture), architecture)

    @parameterized.named_parameters(TASKS)
    def test_load_equals_transformers(self, cls, num_labels, summary_type="last"):
        theirs = _hf_model(
            getattr(transformers, f"RoFormerFor{cls}"),
            5,
            num_labels=num_labels,
            summary_type=summary_type,
        )
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            model, variables = hf.load_hf_roformer(d)
        self.assertIsInstance(model, heads.TaskModel)
        self.assertEqual(model.summary_type, summary_type)
        self.assertEqual(
            f"RoFormerFor{cls}",
            hf.config_to_hf(model.config, with_mlm_head=False, head=model.head)["architectures"][0],
        )
        self.assertEqual(model.num_labels, num_labels)
        difference = _task_diff(model, variables, theirs, _task_batch(cls, seed=5))
        self.assertLessEqual(difference, PARITY_TOLERANCE)

    @parameterized.named_parameters(TASKS)
    def test_transformers_loads_what_we_save(self, cls, num_labels, summary_type="last"):
        head = hf._TASK_ARCHITECTURES[f"RoFormerFor{cls}"]
        model = heads.TaskModel(_tiny_config(), head, num_labels, summary_type)
        shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 1, 1), jnp.int32))
        rng = np.random.default_rng(6)
        variables = jax.tree.map(lambda x: np.float32(rng.normal(0, 0.2, x.shape)), shapes)
        with tempfile.TemporaryDirectory() as d:
            hf.save_hf_roformer(model, variables, d)
            theirs, info = getattr(transformers, f"RoFormerFor{cls}").from_pretrained(
                d, output_loading_info=True
            )
            ours, loaded = hf.load_hf_roformer(d)
            names = set(hf.read_hf_state_dict(d))
        # HF's names exactly (transformers also accepts some misplaced prefixes silently).
        self.assertEqual(names, set(theirs.state_dict()))
        self.assertEqual((info["missing_keys"], info["unexpected_keys"]), (set(), set()))
        self.assertEqual(theirs.config.num_labels, num_labels)
        self.assertEqual(theirs.config.problem_type, "regression" if num_labels == 1 else None)
        self.assertEqual(ours, model)
        chex.assert_trees_all_equal(loaded, variables)
        difference = _task_diff(model, variables, theirs.eval(), _task_batch(cls, seed=6))
        self.assertLessEqual(difference, PARITY_TOLERANCE)

    @parameterized.parameters(
        dict(summary_type="mean"),  # HF's mean counts padding: not a token's state
        dict(summary_type="first", summary_use_proj=True),
        dict(summary_type="last", summary_activation="tanh"),
    )
    def test_multiple_choice_summary_other_than_a_tokens_state_is_refused(self, **summary):
        theirs = _hf_model(transformers.RoFormerForMultipleChoice, 7, **summary)
        with tempfile.TemporaryDirectory() as d:
            theirs.save_pretrained(d)
            with self.assertRaisesRegex(
                ValueError, f"'summary_type': '{summary['summary_type']}'.* not supported"
            ):
                hf.load_hf_roformer(d)


if __name__ == "__main__":
    absltest.main()
