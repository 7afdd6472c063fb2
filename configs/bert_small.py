"""BERT-small: configs/roformer_small.py with learned absolute positions instead of RoPE.

Run (about the time of roformer_small on this 2-core CPU):
  python experiments/train_mlm.py --config=configs/bert_small.py --workdir=/tmp/bert_small

Expect: not run to the end here; its steps cost what roformer_small's do. Run both
(or experiments/compare.py) to compare them on the same batches.
The learned table has max_len = 512 rows, so the evaluation at 256 and 512 tokens uses rows
that training at 128 never updated: this is the length-extrapolation baseline.
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    config.model.position = "learned"
    return base.finish(config, arg)
