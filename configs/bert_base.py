"""BERT-base: configs/roformer_base.py (the paper's recipe) with learned absolute positions.

The baseline of the RoFormer paper's pre-training comparison (sec. 4): identical data,
batch 64, length 512, AdamW, 100k steps; only the position encoding differs. The learned
table has 512 rows, so the 1024-token evaluation of roformer_base is skipped here.

Run:
  python experiments/train_mlm.py --config=configs/bert_base.py --workdir=/tmp/bert_base

Expect: not run here. On the 2-core CPU of the README one float32 step of only 8 x 128
tokens takes about 5 s (benchmarks/train_step.py): this is a GPU/TPU job.
"""

from configs import roformer_base


def get_config(arg=None):
    config = roformer_base.get_config(arg)
    config.model.position = "learned"
    return config
