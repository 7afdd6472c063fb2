"""Study 3 (second half): RoFormer's multi-length schedule against training at 128 only.

  python experiments/compare.py --config=configs/study_extrapolation.py --workdir=runs/extrapolation

The first half, every position encoding trained at 128 and evaluated at 128-1024, is
configs/study_positions.py. Here RoPE is trained twice with the shared setting of
configs/studies.py: at 128 tokens only, and with stages that alternate lengths and batch sizes
as RoFormer's Chinese pre-training did (the blog's Table 4: 512, 1536, 256, 128, 1536, 512
tokens with batches of 256-512), scaled to 200 steps of 2,048 tokens each so both runs see
the same number of tokens. Both are evaluated at 128, 256, 512 and 1024.
"""

from ml_collections import ConfigDict

from configs import studies

# (steps, seq_len, batch_size): 2,048 tokens per step in every stage.
MULTI_LENGTH = (
    (60, 128, 16),
    (20, 512, 4),
    (40, 64, 32),
    (40, 256, 8),
    (20, 512, 4),
    (20, 128, 16),
)


def get_config(arg=None):
    config = studies.evaluate_at_lengths(studies.get_config(arg))
    steps = config.experiment.train.steps
    config.runs = ConfigDict(
        {
            "RoPE, length 128": {"model": {"position": "rope"}},
            "RoPE, multi-length": {
                "model": {"position": "rope"},
                "train": {"stages": _scaled(MULTI_LENGTH, steps)},
            },
        }
    )
    config.baseline = "RoPE, length 128"
    config.title = "MLM with RoPE: one training length or RoFormer's alternating lengths"
    config.plot_keys = ("train/loss", "valid/loss_128", "valid/loss_1024")
    return config


def _scaled(stages, steps):
    """The stages with their steps scaled to sum to `steps` (runlocal trains 20)."""
    total = sum(s[0] for s in stages)
    scaled = [max(1, s[0] * steps // total) for s in stages]
    scaled[0] += steps - sum(scaled)
    return tuple((n, length, batch) for n, (_, length, batch) in zip(scaled, stages))
