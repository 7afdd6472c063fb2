"""RoFormer-small with cosine attention: sim(q_i, k_j) = 1 + cos(R_i q_i, R_j k_j), O(L) memory.

The similarity is non-negative and factorizes over features like linear attention, with
RoPE applied to q and k before normalization.

Run:
  python experiments/train_mlm.py --config=configs/cosine_small.py --workdir=/tmp/cosine_small

Expect: not run to the end here; steps cost about what roformer_small's do.
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    config.model.attention = "cosine"
    return base.finish(config, arg)
