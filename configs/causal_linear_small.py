"""configs/causal_small.py with causal linear attention and RoPE, paper eq. (19).

φ(x) = elu(x) + 1 on q and k; RoPE rotates φ(q), φ(k) in the numerator only, and the
denominator keeps the un-rotated features so that it stays positive (the defaults of
model.sections.linear: feature_map="elu", placement="numerator"). Causal: the sums over keys
j <= i are prefix sums, as in Katharopoulos et al. 2020, eq. (9).

Run (300 steps of 16 x 128 on the builtin corpus; a few minutes on 2 quiet CPU cores;
measured 12.7 min with the 2 cores shared with other jobs, 650-1,450 tokens/s):
  python experiments/train_mlm.py --config=configs/causal_linear_small.py \\
      --workdir=/tmp/causal_linear_small

Expect at step 300 (seed 0, measured at commit 5463437): valid loss 4.91 (perplexity 136,
next-token accuracy 0.23) at 128 tokens and 4.94 (139, 0.22) at 256, on the same 16,256
held-out targets; train loss 4.67 over the last 25 steps. That is 0.21 above
configs/causal_small.py (softmax) at 128, on the same batches.
"""

from configs import base, causal_small


def get_config(arg=None):
    config = causal_small.get_config()
    config.model.attention = "linear"
    return base.finish(config, arg)
