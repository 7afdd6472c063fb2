"""RoFormer-small with linear attention (Katharopoulos et al. 2020) and RoPE, paper sec. 3.3.

φ(x) = elu(x) + 1 on q and k; RoPE rotates φ(q), φ(k) in the numerator only and the
denominator keeps the un-rotated features so that it stays positive (paper eq. 19).

Run:
  python experiments/train_mlm.py --config=configs/linear_small.py --workdir=/tmp/linear_small

Expect: not run to the end here. One step costs about what a softmax step costs at length
128 (docs/speed.md, "Attention"); linear attention pays off at long sequences.
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    config.model.attention = "linear"

    return base.finish(config, arg)
