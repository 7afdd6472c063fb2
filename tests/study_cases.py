"""The study tests' shared fixtures: a small experiment config (`_config`) and a stand-in for
training that writes what a finished run leaves (`_fake_training`). Kept under the names they
had in tests/study_test.py, underscores included."""

import json
import os

from roformer_jax.training.config import experiment_config_from_dict


def _config(seed, steps=4, init_from=None):
    return experiment_config_from_dict(
        {
            "seed": seed,
            "data": {"tokenizer": "bytes"},
            "model": {"hidden_size": 8, "num_layers": 1, "num_heads": 2, "intermediate_size": 8},
            "optim": {"warmup_steps": 1},
            "train": {"steps": steps, "init_from": init_from},
        }
    )


def _fake_training(cfg, workdir):
    """Writes what a finished run leaves: one record per step, the last with a valid loss."""
    os.makedirs(workdir, exist_ok=True)
    with open(os.path.join(workdir, "metrics.jsonl"), "w", encoding="utf-8") as f:
        for step in range(1, cfg.train.steps + 1):
            record = {"step": step, "train/loss": 10.0 - step - cfg.seed, "elapsed_s": step}
            if step == cfg.train.steps:
                record["valid/loss_128"] = 9.0 - cfg.seed
            f.write(json.dumps(record) + "\n")
    return {}
