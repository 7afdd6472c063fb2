"""RoFormer-small (4 layers, 256 wide, RoPE) by MLM on the builtin corpus.

Run (about TIME_SMALL on this 2-core CPU):
  python experiments/train_mlm.py --config=configs/roformer_small.py --workdir=/tmp/roformer_small
Smoke test: --config=configs/roformer_small.py:runlocal

Expect: RESULT_SMALL
Compare with configs/bert_small.py (the same run with BERT's learned absolute positions).
"""

from configs import base


def get_config(arg=None):
    config = base.get_base_config("small")
    config.model.position = "rope"
    return base.finish(config, arg)
