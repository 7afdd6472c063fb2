"""A workdir that knows its run: what may write into it, and what a resume may change.

    with workdir.claimed(path):                  # the folder is a run's, and this process's
        changes = workdir.resume_changes(path, cfg, allow=False)
        workdir.record_config(path, cfg, changes, start_step=step)

A run writes into an empty folder or one that holds its own run (a config.json of
sections this package writes, or only what a run writes before its config.json); any other
folder, e.g. an HF checkpoint or a corpus, is refused naming what is there. An exclusive
`flock` on workdir/run.lock keeps a second process out while the run trains; the kernel
drops it when its process dies, so a run killed by `kill -9` blocks no resume.

A resume compares the config.json the run wrote with the new config (`config.config_diff`,
nested keys, nothing known of the model's fields). `RESUMABLE` lists what it may change
silently; a longer train.steps ("train further") and another mesh are recorded but never
refused; any other difference is refused, listed, unless the caller allows it (train_mlm.py's and
finetune.py's --resume_with_changes), and then recorded: config.json holds the new config and, under
"history", each session's changes; provenance.json's session names them too.
"""

from __future__ import annotations

import contextlib
import dataclasses
import errno
import fcntl
import json
import os
from collections.abc import Callable
from typing import Any

import jax

from roformer_jax.training import config as config_lib
from roformer_jax.training.config import ExperimentConfig
from roformer_jax.training.finetune_config import FinetuneExperiment

CONFIG_FILE = "config.json"
LOCK_FILE = "run.lock"


# What a pre-training resume may change without changing what the run computes: how often it
# logs, evaluates and checkpoints, how many checkpoints it keeps, where its cache lives, how
# the batch is split over devices and micro-batches (the same numbers up to float32 summation
# order), and init_from, which a resumed run ignores. train.steps and the mesh are apart:
# recorded, not refused (`_recorded`).
RESUMABLE = (
    "train.log_every",
    "train.eval_every",
    "train.checkpoint_every",
    "train.keep_checkpoints",
    "train.data_cache_dir",
    "train.eval_batch_size",
    "train.grad_accum",
    "train.init_from",
)
# A fine-tuning resume: how often it logs and the evaluation's batch. Not init_from: the
# encoder it names sets the model's shapes, and the task its head's (a checkpoint of another
# shape would read as damaged).
FINETUNING_RESUMABLE = ("finetune.log_every", "finetune.eval_batch_size")


@dataclasses.dataclass(frozen=True)
class RunFiles:
    """What one command's run holds: the top-level keys its config.json may have, the one it
    must have, what it writes before its config.json (a folder holding only these is a run
    stopped while it started, not a foreign folder), what a resume may change (`resumable`)
    and the config whose defaults stand for a field added since a save."""

    keys: frozenset[str]
    required: str
    before_config: tuple[str, ...]
    resumable: tuple[str, ...]
    defaults: Callable[[], Any]


PRETRAINING = RunFiles(
    frozenset(config_lib.SECTIONS) | {"seed", config_lib.HISTORY},
    "train",
    (LOCK_FILE, "checkpoints", "data"),
    RESUMABLE,
    config_lib.default_experiment_config,
)
FINETUNING = RunFiles(
    frozenset(f.name for f in dataclasses.fields(FinetuneExperiment)) | {config_lib.HISTORY},
    "finetune",
    (LOCK_FILE, "checkpoints", "best", "data"),
    FINETUNING_RESUMABLE,
    FinetuneExperiment,
)


def _recorded(key: str, saved: Any, new: Any) -> bool:
    """Whether a resume may change `key` from `saved` to `new`, recorded, without being
    asked: a longer train.steps (a shorter one leaves checkpoints past its end), or the
    mesh: the same numbers up to float32 summation order, as grad_accum's, but another
    memory and speed, which a reader of the run's times needs (checkpoints restore onto any
    mesh)."""
    return key.startswith("mesh.") or (key == "train.steps" and new > saved)


@contextlib.contextmanager
def claimed(workdir: str, run: RunFiles = PRETRAINING):
    """Checks that `workdir` is empty or a `run`'s (`check_folder`), creates it, and holds its
    lock for the block (process 0; other hosts share its folder or write none of these files).

    Raises ValueError for a foreign folder or one whose lock another process holds.
    """
    check_folder(workdir, run)
    os.makedirs(workdir, exist_ok=True)
    if jax.process_index() != 0:
        yield
        return
    with open(os.path.join(workdir, LOCK_FILE), "a", encoding="utf-8") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError as e:
            if e.errno not in (errno.EAGAIN, errno.EACCES):
                raise
            raise ValueError(
                f"{workdir} is in use by another process (it holds {lock.name}); wait for it "
                "to finish, or use another --workdir"
            ) from None
        try:
            yield
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)


def check_folder(workdir: str, run: RunFiles = PRETRAINING) -> None:
    """Raises ValueError unless `workdir` is absent, empty, or holds a `run` (module doc)."""
    if not os.path.isdir(workdir):
        if os.path.exists(workdir):
            raise ValueError(f"--workdir {workdir} is a file, not a folder")
        return
    entries = sorted(os.listdir(workdir))
    saved = read_config(workdir, run) if CONFIG_FILE in entries else None
    if saved is not None or set(entries) <= set(run.before_config):
        return
    what = f"a {CONFIG_FILE} of no training run" if CONFIG_FILE in entries else "no run"
    shown = ", ".join(entries[:8]) + (", ..." if len(entries) > 8 else "")
    raise ValueError(
        f"--workdir {workdir} holds {what} ({shown}); a run writes into an empty folder or "
        "its own. Use a new --workdir"
    )


def read_config(workdir: str, run: RunFiles = PRETRAINING) -> dict | None:
    """The `run`'s config.json as a dict, or None when it is not one (an HF config.json).

    Raises ValueError naming the file when it is cut off or not JSON.
    """
    path = os.path.join(workdir, CONFIG_FILE)
    try:
        with open(path, encoding="utf-8") as f:
            saved = json.load(f)
    except json.JSONDecodeError as e:
        raise ValueError(
            f"{path} is cut off or not JSON ({e}); restore it from the newest checkpoint's "
            "meta/metadata ('config'), or use a new --workdir"
        ) from None
    if not isinstance(saved, dict) or run.required not in saved or not set(saved) <= run.keys:
        return None
    return saved


def resume_changes(
    workdir: str,
    cfg: ExperimentConfig | FinetuneExperiment,
    *,
    latest_step: int | None,
    allow: bool,
    run: RunFiles = PRETRAINING,
) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (saved, new)} of what `cfg` changes of the `run` in `workdir` ({} for a
    new run), leaving out its `resumable` keys.

    Raises ValueError listing the changes when one changes the run's meaning and `allow` is
    False, and when train.steps falls below the newest checkpoint (`latest_step`).
    """
    path = os.path.join(workdir, CONFIG_FILE)
    saved = read_config(workdir, run) if os.path.exists(path) else None
    if saved is None:
        return {}
    changes = config_lib.config_diff(saved, cfg, defaults=run.defaults(), ignore=run.resumable)
    if latest_step is not None and cfg.train.steps < latest_step:
        raise ValueError(
            f"train.steps={cfg.train.steps} is below the newest checkpoint of {workdir} (step "
            f"{latest_step}); use a new --workdir to train a shorter run"
        )
    refused = {k: v for k, v in changes.items() if not _recorded(k, *v)}
    if refused and not allow:
        listed = "; ".join(f"{k}: {old!r} -> {new!r}" for k, (old, new) in refused.items())
        raise ValueError(
            f"{workdir} holds a run of another config ({listed}). Use a new --workdir, or "
            "--resume_with_changes to change this run on purpose (recorded in config.json)"
        )
    return changes


def record_config(
    workdir: str,
    cfg: ExperimentConfig | FinetuneExperiment,
    changes: dict,
    *,
    start_step: int,
    run: RunFiles = PRETRAINING,
):
    """Writes workdir/config.json atomically: `cfg`, and under "history" every earlier
    session's changes with this one's (when it has any)."""
    path = os.path.join(workdir, CONFIG_FILE)
    saved = read_config(workdir, run) if os.path.exists(path) else None
    history = list((saved or {}).get(config_lib.HISTORY, []))
    if changes:
        changed = {k: [old, new] for k, (old, new) in changes.items()}
        history.append({"start_step": start_step, "changed": changed})
    record = dataclasses.asdict(cfg)
    if history:
        record[config_lib.HISTORY] = history
    write_json_atomically(os.path.join(workdir, CONFIG_FILE), record)


def write_json_atomically(path: str, value: Any) -> None:
    """`path` holds the JSON of `value` whole, or its old content: never a cut-off file."""
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(value, f, indent=2)
        f.flush()
        os.fsync(f.fileno())
    os.replace(path + ".tmp", path)


def check_corpus_outside(source: str, workdir: str) -> None:
    """Raises ValueError when the corpus at `source` (a local file or folder) and the run's
    `workdir` overlap: a run would read its own checkpoints and metrics as text on resume."""
    if not os.path.exists(source):
        return  # "builtin", "hf:...": not a local path
    corpus, run = os.path.realpath(source), os.path.realpath(workdir)
    if os.path.commonpath([corpus, run]) in (corpus, run):
        raise ValueError(
            f"data.source {source} and --workdir {workdir} overlap: a run would read its own "
            "files as text. Put the workdir outside the corpus folder"
        )
