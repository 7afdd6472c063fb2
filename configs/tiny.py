"""A 2-layer, 64-wide RoFormer on bytes: the config of the tests and of quick experiments.

Run (40 s on the 2-core CPU of the README, compilation included):
  python experiments/train_mlm.py --config=configs/tiny.py --workdir=/tmp/tiny

Expect at step 1500 (measured at commit 5463437): valid loss 2.34 (accuracy 0.41) at 64 tokens
and 2.38 (0.39) at 128, on the same 1,189 held-out targets at both lengths; train loss 2.27
over the last 100 steps; from 5.6 = ln(261) at the start.
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("tiny")
    config.data.tokenizer = "bytes"  # no tokenizer training: starts in seconds
    config.data.max_chars = 400_000  # a fifth of the builtin corpus
    config.data.seq_len = 64
    config.data.valid_lengths = (128,)
    config.optim.learning_rate = 1e-3
    config.optim.warmup_steps = 30
    config.train.steps = 1500
    config.train.batch_size = 16
    config.train.log_every = 100
    config.train.eval_batches = 8
    return base.finish(config, arg)
