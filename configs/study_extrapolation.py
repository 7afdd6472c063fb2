"""Study 3: train at length 128, evaluate MLM at 128, 256, 512 and 1024.

  python experiments/compare.py --config=configs/study_extrapolation.py --workdir=runs/extrapolation

BERT's learned table has 128 rows here, so it cannot be evaluated past 128: its longer
columns read n/a. RoPE and sinusoidal positions have no table.
"""

from ml_collections import ConfigDict

from configs import compare

LENGTHS = (256, 512, 1024)


def get_config(arg=None):
    config = compare.get_config(arg)
    config.experiment.data.valid_lengths = LENGTHS
    config.runs = ConfigDict(
        {
            "learned (BERT)": {"model": {"position": "learned", "max_len": 128}},
            "sinusoidal": {"model": {"position": "sinusoidal"}},
            "RoPE (RoFormer)": {"model": {"position": "rope"}},
        }
    )
    config.title = "MLM trained at 128: loss at longer lengths"
    config.plot_keys = ("train/loss", *(f"valid/loss_{n}" for n in (128, *LENGTHS)))
    config.table_keys = tuple(
        f"valid/{m}_{n}" for n in (128, *LENGTHS) for m in ("loss", "accuracy")
    )
    return config
