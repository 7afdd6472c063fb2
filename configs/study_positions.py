"""Study 1, the paper's Fig. 3 (left): position encodings with softmax attention, 3 seeds.

  python experiments/compare.py --config=configs/study_positions.py --workdir=runs/positions

Learned absolute (BERT) vs sinusoidal (Vaswani) vs RoPE (RoFormer) vs none, with the shared
setting of configs/studies.py, trained and evaluated at 128 tokens (longer contexts are
configs/study_length.py's). On WikiText-2:
  --config.experiment.data.source=../shared/data/wikitext-2/train.txt
"""

from ml_collections import ConfigDict

from configs import studies


def get_config(arg=None):
    config = studies.get_config(arg)
    config.runs = ConfigDict(
        {
            "learned (BERT)": {"model": {"position": "learned", "max_len": 128}},
            "sinusoidal": {"model": {"position": "sinusoidal"}},
            "RoPE (RoFormer)": {"model": {"position": "rope"}},
            "none": {"model": {"position": "none"}},
        }
    )
    config.baseline = "learned (BERT)"
    config.title = "MLM, softmax attention: position encodings"
    config.plot_keys = ("train/loss", "valid/loss_128")
    return config
