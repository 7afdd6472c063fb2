"""RoFormer-small (4 layers, 256 wide, RoPE) by MLM on the builtin corpus.

Run (about 55 min on this 2-core CPU: 2,000 steps of 32 x 128 at ~2,600 tokens/s):
  python experiments/train_mlm.py --config=configs/roformer_small.py --workdir=/tmp/roformer_small
Smoke test: --config=configs/roformer_small.py:runlocal

Expect (measured up to step 700, seed 0): valid loss 4.22 / accuracy 0.35 at 128 tokens
at step 500 (4.22 at 256, 4.26 at 512), train loss 4.08 at step 700; the run was not finished.
Compare with configs/bert_small.py (the same run with BERT's learned absolute positions).
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    config.model.position = "rope"
    return base.finish(config, arg)
