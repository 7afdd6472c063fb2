"""A small causal RoFormer (4 layers, 256 wide, softmax + RoPE) by next-token prediction.

Run (300 steps of 16 x 128 on the builtin corpus; about 4 min on 2 quiet CPU cores, as
configs/compare.py's runs of this size and length; measured 15 min with the 2 cores shared
with other jobs, 700-1,400 tokens/s):
  python experiments/train_mlm.py --config=configs/causal_small.py --workdir=/tmp/causal_small
Smoke test: --config=configs/causal_small.py:runlocal

Expect at step 300 (seed 0, measured at commit 5463437): valid loss 4.70 (perplexity 110,
next-token accuracy 0.27) at 128 tokens and 4.71 (111, 0.26) at 256, twice the training
length, on the same 16,256 held-out targets at both; train loss 4.48 over the last 25 steps,
from 9.0 = ln(8192) at the start.
The loss is over every next token (data.objective="clm", model.causal=True), so it is not
comparable with an MLM loss; perplexity = exp(loss) is logged beside it.
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    config.model.causal = True  # token i attends to tokens j <= i only
    config.data.objective = "clm"  # targets are the next tokens, nothing masked
    config.data.valid_lengths = (256,)
    config.optim.update(learning_rate=1e-3, warmup_steps=60)
    config.train.update(
        steps=300,
        batch_size=16,
        log_every=25,
        eval_every=100,
        checkpoint_every=100,
        eval_batches=8,
    )
    return base.finish(config, arg)
