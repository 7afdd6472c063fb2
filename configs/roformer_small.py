"""RoFormer-small (4 layers, 256 wide, RoPE) by MLM on the builtin corpus.

Run (about 55 min on this 2-core CPU: 2,000 steps of 32 x 128 at ~2,600 tokens/s):
  python experiments/train_mlm.py --config=configs/roformer_small.py --workdir=/tmp/roformer_small
Smoke test: --config=configs/roformer_small.py:runlocal

Expect at step 2000 (seed 0): valid loss 3.41 / accuracy 0.44 at 128 tokens, 3.41 / 0.44
at 256 and 3.54 / 0.43 at 512 (4x the training length); train loss 3.36 (ln(8192) = 9.0 at
the start). Measured before dropout and masks were drawn per example (commit 49ca5f7): a run
of this version draws other masks and dropout, so expect these within a few hundredths.
Compare with configs/bert_small.py (the same run with BERT's learned absolute positions).
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    return base.finish(config, arg)
