"""A run's raw outputs: its small files copied out of a study's workdir, and back.

A raw folder holds, per run, what its numbers are and the code and machine that made them
(RAW_FILES), kilobytes without checkpoints or data: a study that spans several machines or
sessions keeps its finished runs in the repository (`export_raw`), and a fresh workdir takes
them back from there instead of training them again (`restore_raw`).
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping, Sequence

from roformer_jax.studies.run_dirs import check_same_config, is_finished, run_dir
from roformer_jax.training.config import ExperimentConfig

# A run's small outputs: what its numbers are, and the code and machine that made them.
RAW_FILES = ("metrics.jsonl", "config.json", "provenance.json")


def export_raw(
    runs: Mapping[str, Sequence[ExperimentConfig]],
    workdir: str,
    dest: str,
    *,
    folders: Sequence[str] = (),
) -> int:
    """Copies each run's RAW_FILES, and its `folders` where it has them, from `workdir` to the
    same place under `dest`.

    Kilobytes per run (no checkpoints, no data): what a results page can be rebuilt and
    checked from. Returns the number of files copied.
    """
    copied = 0
    for name, configs in runs.items():
        for cfg in configs:
            source, target = run_dir(workdir, name, cfg.seed), run_dir(dest, name, cfg.seed)
            copied += export_run(source, target, folders)
    return copied


def export_run(source: str, target: str, folders: Sequence[str] = ()) -> int:
    """export_raw for one run directory; returns the number of files copied."""
    os.makedirs(target, exist_ok=True)
    copied = 0
    for file in RAW_FILES:
        if os.path.exists(os.path.join(source, file)):
            shutil.copyfile(os.path.join(source, file), os.path.join(target, file))
            copied += 1
    for folder in folders:
        if os.path.isdir(os.path.join(source, folder)):
            shutil.copytree(
                os.path.join(source, folder), os.path.join(target, folder), dirs_exist_ok=True
            )
            copied += len(os.listdir(os.path.join(source, folder)))
    return copied


def restore_raw(
    directory: str, cfg: ExperimentConfig, raw_dir: str, name: str, workdir: str
) -> bool:
    """Copies run `name`'s RAW_FILES from `raw_dir` into `directory` when the raw copy is
    finished and `directory`'s is not; returns whether it did.

    ValueError (check_same_config) when the raw copy is a run of another config; its paths
    under the study's old workdir count as the same under `workdir`.
    """
    source = run_dir(raw_dir, name, cfg.seed)
    if is_finished(directory, cfg.train.steps) or not is_finished(source, cfg.train.steps):
        return False
    check_same_config(source, cfg, workdir)
    export_run(source, directory)
    return True
