"""Study 1, the paper's Fig. 3 (left): position encodings with softmax attention, 3 seeds.

  python experiments/compare.py --config=configs/study_positions.py --workdir=runs/positions

Learned absolute (BERT) vs sinusoidal (Vaswani) vs RoPE (RoFormer) vs none, everything else
as configs/compare.py. On WikiText-2:
  --config.experiment.data.source=../shared/data/wikitext-2/train.txt
"""

from ml_collections import ConfigDict

from configs import compare


def get_config(arg=None):
    config = compare.get_config(arg)
    config.runs = ConfigDict(
        {
            "learned (BERT)": {"model": {"position": "learned"}},
            "sinusoidal": {"model": {"position": "sinusoidal"}},
            "RoPE (RoFormer)": {"model": {"position": "rope"}},
            "none": {"model": {"position": "none"}},
        }
    )
    config.seeds = (0, 1, 2)
    config.title = "MLM, softmax attention: position encodings"
    return config
