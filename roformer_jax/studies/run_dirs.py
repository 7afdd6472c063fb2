"""A run's directory in a study: where it lies, whether it finished, and whether it holds a run
of the config asked for (a cached run is reused by name, so a changed config must not be).

    directory = run_dir(workdir, "RoPE", seed=0)        # workdir/RoPE/seed0
    if not is_finished(directory, cfg.train.steps):
        check_same_config(directory, cfg, workdir)      # ValueError for another config's run
    for directory in trained_runs(workdir):             # every <run>/seed<k> with a config
        write_beside(directory, workdir, raw_dir, "reading.json", record)
"""

from __future__ import annotations

import glob
import json
import os
import re
from collections.abc import Mapping

from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training.config import (
    ExperimentConfig,
    config_diff,
    default_experiment_config,
)


def run_dir(workdir: str, name: str, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name)
    return os.path.join(workdir, slug, f"seed{seed}")


def trained_runs(workdir: str) -> list[str]:
    """The run directories of a study's workdir (<run>/seed<k>/ with a config.json), sorted."""
    configs = glob.glob(os.path.join(workdir, "*", "seed*", "config.json"))
    return sorted(os.path.dirname(path) for path in configs)


def write_beside(directory: str, workdir: str, raw_dir: str | None, name: str, record) -> None:
    """`record` as JSON file `name` in a run's directory and, with `raw_dir`, in the same
    place under the study's raw folder: a reading of a trained run (position tables,
    attention by distance) that the results page reads from the raw folder."""
    folders = [directory]
    if raw_dir:
        folders.append(os.path.join(raw_dir, os.path.relpath(directory, workdir)))
    for folder in folders:
        os.makedirs(folder, exist_ok=True)
        with open(os.path.join(folder, name), "w", encoding="utf-8") as f:
            json.dump(record, f, indent=1)


def is_finished(directory: str, steps: int) -> bool:
    """True when the run logged its final step (the trainer evaluates at the last step)."""
    records = metrics_lib.read_metrics(directory)
    return bool(records) and records[-1]["step"] >= steps


def check_same_config(directory: str, cfg: ExperimentConfig, workdir: str | None = None) -> None:
    """Raises ValueError when `directory` holds a run of another config than `cfg`.

    A cached run is reused by name, so a changed config must not silently reuse it. Where the
    data cache lives is not part of what a run is, nor where the study's `workdir` is
    (`moved_with_workdir`).
    """
    path = os.path.join(directory, "config.json")
    if not os.path.exists(path):
        return
    with open(path, encoding="utf-8") as f:
        saved = json.load(f)
    # A field added since the run was saved counts as its default.
    changed = config_diff(
        saved, cfg, defaults=default_experiment_config(), ignore=("train.data_cache_dir",)
    )
    if workdir is not None:
        changed = changed_unless_moved(changed, workdir)
    if changed:
        raise ValueError(
            f"{directory} holds a run of another config (differs in {', '.join(changed)}); "
            "delete it or use another --workdir"
        )


def moved_with_workdir(saved, current, workdir: str) -> bool:
    """Whether `saved` (a path as a run's config.json holds it) is `current` in a study whose
    workdir has moved since: `current` lies inside `workdir`, and `saved` ends with its path
    relative to `workdir` (e.g. .../<run>/seed0 for "run:<run>", .../task/choices/train.jsonl).

    A study's workdir may be renamed or copied to another disk; its runs then resolve the
    paths they read under the new workdir, and they are still the runs that were trained.
    """
    if not (isinstance(saved, str) and isinstance(current, str) and os.path.isabs(saved)):
        return False
    relative = os.path.relpath(os.path.abspath(current), os.path.abspath(workdir))
    return saved.endswith(os.sep + relative)  # outside workdir, relative has ".." and abspath none


def changed_unless_moved(changed: Mapping, workdir: str) -> dict:
    """`config_diff`'s {key: (saved, current)} less the paths that only moved with `workdir`."""
    return {k: v for k, v in changed.items() if not moved_with_workdir(*v, workdir)}
