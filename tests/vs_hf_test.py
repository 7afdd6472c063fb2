"""Tests for benchmarks/vs_hf.py: its HF masked-head step optimizes HF's own MLM loss.

Needs `pip install torch==2.13.0 transformers`; skipped without them.
"""

import os
import sys
import unittest

from absl.testing import absltest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(__file__)), "benchmarks"))
import vs_hf  # noqa: E402

from roformer_jax import hf  # noqa: E402
from roformer_jax.nn.model_config import model_config  # noqa: E402

try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None


@unittest.skipIf(transformers is None, "needs transformers and torch")
class MaskedHeadTest(absltest.TestCase):
    def test_masked_head_loss_and_grads_equal_stock(self):
        cfg = model_config("tiny", vocab_size=97, max_len=32)
        torch.manual_seed(0)
        config = transformers.RoFormerConfig(**hf.config_to_hf(cfg, with_mlm_head=True))
        model = transformers.RoFormerForMaskedLM(config).eval()  # dropout off
        batch = vs_hf.torch_batch(vs_hf.mlm_batch(3, 20, cfg.vocab_size, seed=1))
        self.assertGreater(int((batch["labels"] != -100).sum()), 3)
        losses, grads = [], []
        for loss_fn in (vs_hf.hf_stock_loss, vs_hf.hf_masked_head_loss):
            model.zero_grad()
            loss = loss_fn(model, batch)
            loss.backward()
            losses.append(loss.item())
            grads.append([p.grad.clone() for p in model.parameters() if p.grad is not None])
        self.assertAlmostEqual(losses[0], losses[1], delta=1e-5)
        self.assertEqual(len(grads[0]), len(grads[1]))
        for g_stock, g_masked in zip(grads[0], grads[1]):
            torch.testing.assert_close(g_masked, g_stock, atol=1e-6, rtol=1e-5)


if __name__ == "__main__":
    absltest.main()
