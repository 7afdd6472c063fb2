"""The long-document study: encoders pre-trained with and without long stages, fine-tuned on
the triplet task (studies/long_doc_task.py) at several maximum lengths, with controls.

    runs = pretraining_runs(config)              # {encoder: [ExperimentConfig per seed]}
    study.run_study(runs, workdir)               # pre-training, cached and resumed
    task_dir = build_task(config.task, workdir)  # the triplets, as multiple choice files
    finetune_cells(config, workdir, task_dir)    # every cell x fine-tuning seed, cached
    results = read_results(workdir, config)      # from a workdir or a raw folder alike

A cell is (encoder, max length, truncation): every encoder at each of `lengths` it can read,
with "head" truncation, plus the control at the shortest length with `control_truncation`
(head and tail of each side). An encoder whose position table is shorter than a length gets
no cell there; the tables say "n/a (learned table of 512)". Fine-tuning seed i starts from
pre-training seed seeds[i % len(seeds)]. Fine-tuning runs live in
<workdir>/finetune/<cell>/seed<k>/ (training/finetune.py's workdir); a finished one (its
final_metrics.json) is not run again, an interrupted one resumes.

A study longer than one sitting on a machine that keeps nothing resumes from its raw folder:
with `raw_dir`, each fine-tuning's small files go there as it finishes, and one finished
there is taken back instead of run again. Its encoder is then not needed either: pre-training
restores the encoders every fine-tuning of which is finished (`encoders_needed`) and trains
the others, whose checkpoints a raw folder does not hold.
"""

from __future__ import annotations

import dataclasses
import json
import os
import shutil
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np
from ml_collections import ConfigDict

from roformer_jax.data import tasks
from roformer_jax.data.corpus import load_corpus
from roformer_jax.studies import bow_baseline, long_doc_task, run_dirs, study
from roformer_jax.studies.long_doc_articles import Measure
from roformer_jax.training import finetune as finetune_lib
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training.config import (
    ExperimentConfig,
    config_diff,
    experiment_config_from_dict,
)
from roformer_jax.training.finetune_config import FinetuneExperiment, finetune_experiment_from_dict

FINETUNE_DIR = "finetune"
TASK_DIR = "task"
SURVIVAL_FILE = "survival.json"  # {length: {split: [fraction of B's tokens kept] per triplet}}
BOW_FILE = "bow.json"


def scale_stages(stages: Sequence[Sequence[int]], steps: int) -> tuple[tuple[int, int, int], ...]:
    """(steps, seq_len, batch) stages with the steps rescaled to sum to `steps`, each stage
    keeping its share (rounded by largest remainders, so the sum is exact; the stages' own
    steps give them back) and at least 1 step."""
    if steps < len(stages):
        raise ValueError(f"{steps} steps cannot hold {len(stages)} stages of at least 1 step")
    share = np.array([s[0] for s in stages], float)
    exact = share / share.sum() * steps
    counts = np.floor(exact).astype(int)
    counts[np.argsort(counts - exact, kind="stable")[: steps - counts.sum()]] += 1
    while counts.min() == 0:  # a stage too small for its share: a step from the largest
        counts[np.argmin(counts)] += 1
        counts[np.argmax(counts)] -= 1
    return tuple((int(c), int(s[1]), int(s[2])) for c, s in zip(counts, stages))


def pretraining_runs(config: ConfigDict) -> dict[str, list[ExperimentConfig]]:
    """study.study_runs of `config`, each encoder trained for `pretrain_steps` in the stages of
    its schedule (config.schedules[config.schedule_of[name]], rescaled by scale_stages)."""
    runs = study.study_runs(config)
    for name, seeds in runs.items():
        stages = scale_stages(config.schedules[config.schedule_of[name]], config.pretrain_steps)
        runs[name] = [
            dataclasses.replace(
                c, train=dataclasses.replace(c.train, steps=config.pretrain_steps, stages=stages)
            )
            for c in seeds
        ]
    return runs


class Cell(NamedTuple):
    encoder: str
    max_length: int
    truncation: str

    @property
    def name(self) -> str:
        suffix = f" {self.truncation}" if self.truncation != "head" else ""
        return f"{self.encoder} @ {self.max_length}{suffix}"


def cells(config: Mapping) -> list[Cell | str]:
    """Every cell in table order; where an encoder cannot read a length, the reason instead
    (a str: "n/a (learned table of 512)"). `config`: the study config or its dict (study.json's
    "config"), so that a raw folder gives the same cells."""
    if isinstance(config, ConfigDict):
        config = config.to_dict()  # keeps the runs' order (a ConfigDict built anew sorts them)
    out = []
    for encoder, overrides in config["runs"].items():
        run = ConfigDict(config["experiment"])
        run.update(overrides)
        longest = experiment_config_from_dict(run.to_dict()).model.max_length
        for length in config["lengths"]:
            if longest is not None and length > longest:
                out.append(f"n/a (learned table of {longest})")
            else:
                out.append(Cell(encoder, length, "head"))
        out.append(Cell(encoder, min(config["lengths"]), config["control_truncation"]))
    return out


def cell_names(config: Mapping) -> list[str]:
    """The names of the cells that are fine-tuned, in table order."""
    return [c.name for c in cells(config) if isinstance(c, Cell)]


def build_task(task: ConfigDict, workdir: str) -> str:
    """<workdir>/task: the triplets (long_doc_task.build_from_sources with `task`'s fields)
    and choices/{split}.jsonl, the same as multiple choice; built once, then reused."""
    directory = os.path.join(workdir, TASK_DIR)
    stats_path = os.path.join(directory, "stats.json")
    if not os.path.exists(stats_path):
        fractions = None if task.splits == "sources" else [float(f) for f in task.splits]
        splits, stats, _ = long_doc_task.build_from_sources(
            list(task.sources),
            format=task.format,
            tokenizer=task.tokenizer,
            window_tokens=task.window_tokens,
            seed=task.seed,
            fractions=fractions,
            min_window_tokens=task.min_window_tokens,
        )
        long_doc_task.write_task(directory, splits, stats)  # stats.json last: the task is whole
    return directory


def finetune_config(config, cell: Cell, seed: int, encoder_dir: str, task_dir: str):
    """The FinetuneExperiment of one cell and fine-tuning seed."""
    d = config.finetune.to_dict()
    files = {
        f"{split}_file": long_doc_task.choices_path(task_dir, split)
        for split in long_doc_task.SPLITS
    }
    d["task"].update(
        **files,
        format="multiple_choice",
        metric="accuracy",
        max_length=cell.max_length,
        truncation=cell.truncation,
    )
    return finetune_experiment_from_dict({**d, "init_from": encoder_dir, "seed": seed})


def finetune_dir(root: str, cell_name: str, seed: int) -> str:
    """Fine-tuning `seed` of a cell, under a workdir or a raw folder."""
    return run_dirs.run_dir(os.path.join(root, FINETUNE_DIR), cell_name, seed)


def finetunings(config) -> list[tuple[Cell, int, int]]:
    """(cell, fine-tuning seed, the pre-training seed it starts from) of every fine-tuning,
    in table order."""
    seeds = config["seeds"]
    return [
        (cell, seed, seeds[i % len(seeds)])
        for cell in cells(config)
        if isinstance(cell, Cell)
        for i, seed in enumerate(config["finetune_seeds"])
    ]


def encoders_needed(config, workdir: str, raw_dir: str | None = None) -> set[str]:
    """The encoders that a fine-tuning finished neither in `workdir` nor in `raw_dir` starts
    from: pre-training must leave their checkpoints (study.run_study's checkpoints_needed)."""
    return {
        cell.encoder
        for cell, seed, _ in finetunings(config)
        if not any(
            _is_finished(finetune_dir(root, cell.name, seed)) for root in (workdir, raw_dir) if root
        )
    }


def finetune_cells(
    config, workdir: str, task_dir: str, *, raw_dir: str | None = None, log=print
) -> None:
    """Fine-tunes every cell for every seed of config.finetune_seeds that is not finished.

    With `raw_dir`, each fine-tuning's small files (finetune_lib.RAW_FILES) go there as soon
    as it is finished or found finished, and one finished there but not in `workdir` is
    copied back instead of run.
    Raises ValueError where a run directory, or its raw copy, holds a run of another config.
    """
    todo = finetunings(config)
    for done, (cell, seed, pretrain_seed) in enumerate(todo, 1):
        encoder = os.path.abspath(run_dirs.run_dir(workdir, cell.encoder, pretrain_seed))
        cfg = finetune_config(config, cell, seed, encoder, task_dir)
        directory = finetune_dir(workdir, cell.name, seed)
        raw = raw_dir and finetune_dir(raw_dir, cell.name, seed)
        _check_same(directory, cfg, workdir)
        where = f"[{done}/{len(todo)}] {cell.name} seed {seed}"
        if raw and not _is_finished(directory) and _is_finished(raw):
            _check_same(raw, cfg, workdir)
            finetune_lib.copy_raw_files(raw, directory)
            log(f"{where}: finished in {raw_dir}, restored")
            continue
        if _is_finished(directory):
            log(f"{where}: finished earlier, cached")
        else:
            log(f"{where}: fine-tuning in {directory}")
            finetune_lib.finetune(cfg, directory)
        if raw:
            finetune_lib.copy_raw_files(directory, raw)


def _is_finished(directory: str) -> bool:
    return os.path.exists(os.path.join(directory, finetune_lib.FINAL_METRICS_FILE))


def _check_same(directory: str, cfg: FinetuneExperiment, workdir: str) -> None:
    path = os.path.join(directory, "config.json")
    if os.path.exists(path):
        with open(path, encoding="utf-8") as f:
            changed = config_diff(json.load(f), cfg, defaults=FinetuneExperiment())
        changed = run_dirs.changed_unless_moved(changed, workdir)  # the encoder's and task's paths
        if changed:
            raise ValueError(
                f"{directory} holds a fine-tuning run of another config (differs in "
                f"{', '.join(changed)}); delete it or use another --workdir"
            )


def encoder_tokenizer(runs, workdir: str):
    """The encoders' tokenizer: their corpus's (study.run_study gives the runs one data cache,
    <workdir>/data), so it needs no checkpoint of theirs."""
    first = next(iter(runs.values()))[0]
    return load_corpus(first.data, os.path.join(workdir, "data")).tokenizer


def write_survival(config, runs, workdir: str, task_dir: str) -> str:
    """<workdir>/survival.json: per triplet of valid and test, the fraction of B's tokens that
    a pair [CLS] A [SEP] B [SEP] keeps at each length (tasks.pair_budgets, the encoding's own
    rule), with the first encoder's tokenizer (the runs share one, trained on their corpus)."""
    tok = encoder_tokenizer(runs, workdir)
    survival = {str(length): {} for length in config.lengths}
    for split in ("valid", "test"):
        triplets = _triplets(task_dir, split)
        a = tok.encode_batch([t["A"] for t in triplets])
        b = tok.encode_batch([t["B"] for t in triplets])
        for length in config.lengths:
            kept = [
                tasks.pair_budgets(len(x), len(y), length - 3)[1] / max(len(y), 1)
                for x, y in zip(a, b)
            ]
            survival[str(length)][split] = [round(k, 4) for k in kept]
    path = os.path.join(workdir, SURVIVAL_FILE)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(survival, f)
    return path


def _triplets(task_dir: str, split: str) -> list[dict]:
    with open(os.path.join(task_dir, f"{split}.jsonl"), encoding="utf-8") as f:
        return [json.loads(line) for line in f if line.strip()]


def bow_scores(splits: Mapping[str, Sequence[dict]]) -> dict:
    """bow_baseline fitted on splits["train"]: its weights, and the accuracy and per-example
    predictions of valid and test."""
    model = bow_baseline.fit(splits["train"])
    out = {"features": list(bow_baseline.FEATURES), "weights": model.weights.tolist()}
    for split in ("valid", "test"):
        triplets = splits[split]
        predicted, truth = bow_baseline.predict(model, triplets), bow_baseline.labels(triplets)
        out[f"{split}/accuracy"] = float(np.mean(predicted == truth))
        out[split] = {"prediction": predicted.tolist(), "label": truth.tolist()}
    return out


def write_bow(workdir: str, task_dir: str, *, measure: Measure, lengths: Sequence[int]) -> dict:
    """Writes and returns <workdir>/bow.json: `bow_scores` of the whole windows, and under
    "views" of what a pair encoder of each of `lengths` reads (long_doc_task.pair_views with
    `measure`, refitted on the training triplets as cut): whether the text a short input keeps
    already holds the lexical evidence."""
    splits = {split: _triplets(task_dir, split) for split in long_doc_task.SPLITS}
    out = bow_scores(splits)
    out["views"] = {
        str(n): bow_scores({k: long_doc_task.pair_views(v, measure, n) for k, v in splits.items()})
        for n in lengths
    }
    with open(os.path.join(workdir, BOW_FILE), "w", encoding="utf-8") as f:
        json.dump(out, f)
    return out


class Results(NamedTuple):
    """What the tables read, from a workdir or a raw folder alike (read_results).

    config: the study config as a dict; final: {cell name: [final_metrics per fine-tuning
    seed]}; predictions: {cell name: [predictions.json per seed]}; survival, bow: the files.
    """

    config: dict
    final: dict[str, list[dict]]
    predictions: dict[str, list[dict]]
    survival: dict
    bow: dict


class Finetuning(NamedTuple):
    """One fine-tuning run's raw files (finetune_lib.RAW_FILES), as read_finetuning reads them:
    metrics.jsonl's records, final_metrics.json, predictions.json."""

    records: list[dict]
    final: dict
    predictions: dict


def read_finetuning(directory: str) -> Finetuning:
    """A fine-tuning run from its workdir or its raw copy."""
    return Finetuning(
        metrics_lib.read_metrics(directory),
        _read_json(os.path.join(directory, finetune_lib.FINAL_METRICS_FILE)),
        _read_json(os.path.join(directory, finetune_lib.PREDICTIONS_FILE)),
    )


def read_results(root: str, config: Mapping) -> Results:
    """Reads every cell's final metrics and predictions, survival.json and bow.json under
    `root` (a workdir, or --raw_dir); FileNotFoundError names what is missing."""
    final, predictions = {}, {}
    for name in cell_names(config):
        dirs = [finetune_dir(root, name, s) for s in config["finetune_seeds"]]
        final[name] = [_read_json(os.path.join(d, finetune_lib.FINAL_METRICS_FILE)) for d in dirs]
        predictions[name] = [
            _read_json(os.path.join(d, finetune_lib.PREDICTIONS_FILE)) for d in dirs
        ]
    survival = _read_json(os.path.join(root, SURVIVAL_FILE))
    return Results(
        dict(config), final, predictions, survival, _read_json(os.path.join(root, BOW_FILE))
    )


def _read_json(path: str):
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def export_raw(workdir: str, raw_dir: str) -> int:
    """Copies survival.json, bow.json and the task's stats.json (as task_stats.json) to
    raw_dir, beside the pre-training runs' (study_record.export) and the fine-tunings'
    (finetune_cells with raw_dir, as each finishes); returns the number of files copied."""
    files = (
        (SURVIVAL_FILE, SURVIVAL_FILE),
        (BOW_FILE, BOW_FILE),
        (os.path.join(TASK_DIR, "stats.json"), "task_stats.json"),
    )
    for source, name in files:
        shutil.copyfile(os.path.join(workdir, source), os.path.join(raw_dir, name))
    return len(files)
