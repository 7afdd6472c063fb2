"""Our position="learned" encoder is BERT: parity with transformers' PyTorch BertForMaskedLM.

A small random HF `BertForMaskedLM` is mapped into our parameter tree with hf.py's RoFormer
names (HF BERT's are the same under "bert." instead of "roformer.", plus the learned table
`bert.embeddings.position_embeddings.weight`, which is ours at
`embeddings/position_embeddings`, positions.py's `_learned`). Logits, hidden states, the MLM
loss and every gradient must then equal HF's in float32. Both sides keep their own defaults
for the activation and LayerNorm eps, so that a drift of ours from BERT's (tanh GELU, eps) shows.

Needs `pip install torch==2.13.0 transformers`; skipped without them.
"""

import unittest

import chex
import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest, parameterized

from roformer_jax import hf
from roformer_jax.nn import model as model_lib

try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None
NO_TRANSFORMERS = "needs transformers and torch: pip install torch==2.13.0 transformers"

PARITY_TOLERANCE = 1e-5  # max abs difference against transformers, float32
V, D, LAYERS, HEADS, F, MAX_LEN = 99, 64, 2, 4, 128, 32
PAD = 0  # HF BERT's pad_token_id (its word embedding's padding_idx)
_PREFIX = "bert."
_POSITION_TABLE = ("embeddings", "position_embeddings", "embedding")
# Weights HF ties to others (one tensor under two names), and the name of the one we load.
_TIED = {
    "cls.predictions.decoder.weight": "bert.embeddings.word_embeddings.weight",
    "cls.predictions.decoder.bias": "cls.predictions.bias",
}


def _bert_name(path: tuple[str, ...]) -> tuple[str, bool]:
    """Our parameter path -> (HF BertForMaskedLM name, transposed?): hf.py's RoFormer mapping
    with the "bert." prefix, and the learned position table that HF RoFormer lacks."""
    if path == _POSITION_TABLE:
        return _PREFIX + "embeddings.position_embeddings.weight", False
    name, transposed = hf._hf_name(path)
    prefix = _PREFIX if name.split(".")[0] in hf._ENCODER_MODULES else ""
    return prefix + name, transposed


def _our_config():
    return tiny.model_config(
        vocab_size=V,
        hidden_size=D,
        num_layers=LAYERS,
        num_heads=HEADS,
        intermediate_size=F,
        max_len=MAX_LEN,
        position="learned",
    )


def _hf_bert(seed=0):
    torch.manual_seed(seed)
    config = transformers.BertConfig(
        vocab_size=V,
        hidden_size=D,
        num_hidden_layers=LAYERS,
        num_attention_heads=HEADS,
        intermediate_size=F,
        max_position_embeddings=MAX_LEN,
        type_vocab_size=2,
        hidden_act="gelu",
        pad_token_id=PAD,
    )
    model = transformers.BertForMaskedLM(config).eval()
    with torch.no_grad():  # HF initializes LayerNorms to 1 and biases to 0: perturb everything
        for p in model.parameters():
            p.add_(0.1 * torch.randn_like(p))
    return model


def _variables_from_bert(model, state: dict[str, np.ndarray]) -> tuple[dict, dict]:
    """({"params": ...} of `model`, {our path: (HF name, transposed?)}) from a BertForMaskedLM
    state dict; every HF weight is used, or is a tied copy of one that is."""
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 1), jnp.int32))
    names = {p: _bert_name(p) for p in flax.traverse_util.flatten_dict(shapes["params"])}
    state, params = dict(state), {}
    for path, (name, transposed) in names.items():
        value = state.pop(name)
        params[path] = jnp.asarray(value.T if transposed else value, jnp.float32)
    chex.assert_trees_all_equal_shapes(flax.traverse_util.unflatten_dict(params), shapes["params"])
    loaded = {name: params[path] for path, (name, _) in names.items()}
    for name, source in _TIED.items():
        np.testing.assert_array_equal(state.pop(name), loaded[source], err_msg=name)
    assert not state, f"HF weights not mapped: {sorted(state)}"
    return {"params": flax.traverse_util.unflatten_dict(params)}, names


def _batch(seed=0, b=3, length=MAX_LEN):
    """Ids, token types, a padding mask (row 0 full: every position of the table), and MLM
    labels (-100: not predicted) at some real tokens."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(1, V, (b, length))
    types = rng.integers(0, 2, (b, length))
    mask = np.ones((b, length), np.int64)
    mask[1, 19:] = 0
    mask[2, 5:] = 0
    ids[mask == 0] = PAD
    labels = np.where((rng.random((b, length)) < 0.3) & (mask == 1), ids, -100)
    labels[:, 0] = ids[:, 0]  # at least one label per row
    return ids, types, mask, labels


def _our_loss(model, variables, ids, types, mask, labels):
    logits = model.apply(variables, ids, attention_mask=mask, token_type_ids=types).logits
    log_probs = jax.nn.log_softmax(logits, axis=-1)
    picked = jnp.take_along_axis(log_probs, jnp.maximum(labels, 0)[..., None], axis=-1)[..., 0]
    real = labels != -100
    return -jnp.sum(jnp.where(real, picked, 0.0)) / jnp.sum(real)


@unittest.skipIf(transformers is None, NO_TRANSFORMERS)
class BertParityTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.theirs = _hf_bert()
        self.model = model_lib.RoFormer(_our_config())
        state = {k: v.detach().numpy().copy() for k, v in self.theirs.state_dict().items()}
        self.variables, self.names = _variables_from_bert(self.model, state)

    def test_configs_agree_on_what_the_sizes_do_not_say(self):
        config, hf_config = self.model.config, self.theirs.config
        self.assertEqual(config.hidden_act, hf_config.hidden_act)  # "gelu": exact erf
        self.assertEqual(config.layer_norm_eps, hf_config.layer_norm_eps)  # 1e-12
        self.assertEqual(config.type_vocab_size, hf_config.type_vocab_size)
        # transformers 5 BERT has absolute positions only (no `position_embedding_type`).
        self.assertEqual(getattr(hf_config, "position_embedding_type", "absolute"), "absolute")
        self.assertFalse(config.pre_ln)
        self.assertTrue(hf_config.tie_word_embeddings)

    def test_logits_and_hidden_states_equal_transformers(self):
        ids, types, mask, _ = _batch()
        out = self.model.apply(self.variables, ids, attention_mask=mask, token_type_ids=types)
        t = [torch.tensor(x) for x in (ids, mask, types)]
        with torch.no_grad():
            hidden = self.theirs.bert(t[0], attention_mask=t[1], token_type_ids=t[2])
            logits = self.theirs(t[0], attention_mask=t[1], token_type_ids=t[2]).logits
        real = mask.astype(bool)  # padded positions are nobody's output
        for ours, theirs in (
            (out.hidden_states, hidden.last_hidden_state),
            (out.logits, logits),
        ):
            difference = np.abs(np.asarray(ours)[real] - theirs.numpy()[real]).max()
            self.assertLessEqual(float(difference), PARITY_TOLERANCE)
        # The positions matter: the same tokens shifted along the table give other logits.
        shifted = self.model.apply(
            self.variables,
            ids,
            attention_mask=mask,
            token_type_ids=types,
            position_ids=np.arange(MAX_LEN)[::-1],
        )
        self.assertGreater(float(np.abs(np.asarray(shifted.logits) - out.logits).max()), 0.1)

    def test_loss_and_gradients_equal_transformers(self):
        ids, types, mask, labels = _batch(seed=1)
        loss, grads = jax.value_and_grad(
            lambda v: _our_loss(self.model, v, ids, types, mask, labels)
        )(self.variables)
        self.theirs.zero_grad()
        t = [torch.tensor(x) for x in (ids, mask, types, labels)]
        their_loss = self.theirs(t[0], attention_mask=t[1], token_type_ids=t[2], labels=t[3]).loss
        their_loss.backward()
        self.assertAlmostEqual(float(loss), their_loss.item(), delta=PARITY_TOLERANCE)
        their_grads = dict(self.theirs.named_parameters(remove_duplicate=False))
        flat = flax.traverse_util.flatten_dict(grads["params"])
        self.assertLen(flat, len({id(p) for p in their_grads.values()}))
        for path, grad in flat.items():
            name, transposed = self.names[path]
            expected = their_grads[name].grad.numpy()
            np.testing.assert_allclose(
                np.asarray(grad).T if transposed else grad,
                expected,
                atol=PARITY_TOLERANCE,
                err_msg=name,
            )


if __name__ == "__main__":
    absltest.main()
