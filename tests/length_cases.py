"""The length-study tests' shared cases: a small experiment config (`_config`), kept under
the name it had in tests/length_study_test.py so that length_report_test.py reads as it did."""

import dataclasses

from roformer_jax.training.config import default_experiment_config


def _config(seed=0, **model):
    cfg = default_experiment_config()
    return dataclasses.replace(
        cfg,
        seed=seed,
        model=dataclasses.replace(cfg.model, **model),
        train=dataclasses.replace(cfg.train, steps=10),
    )
