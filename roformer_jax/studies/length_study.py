"""Length studies: trained runs read at several context lengths, RoPE scalings applied when read.

    scores = evaluate_runs(config.evaluations, runs, workdir, lengths=(128, ..., 2048),
                           max_tokens=139_128)
    print(length_report.length_table(scores, lengths))

An evaluation names a run of the study and optionally a RoPE scaling (HF's dictionary) to
read it with: zero-shot position interpolation, NTK or YaRN of a model trained at 128. A
scaling without "factor" gets factor = length / trained length at each length past the
trained one, and original_max_position_embeddings = the trained length; up to the trained
length the model is read as trained (every scaling is the identity there, or should be).
Every evaluation of a study scores the same held-out targets (data/length_eval.py, windows
that never cross a document), and each (evaluation, seed) is cached as JSON in its run's
directory, so a rerun only scores what is new.

A study longer than one sitting on a machine that keeps nothing resumes from its raw folder:
with `raw_dir`, each score goes there as it is written and is taken back from there, so only
the runs with a score missing from both (`runs_to_score`) need their checkpoints.
The tables and the report of a length study are length_report.py's.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
import time
from collections.abc import Mapping, Sequence

from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.length_eval import length_eval_set
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.studies.run_dirs import run_dir
from roformer_jax.training import evaluation
from roformer_jax.training.config import ExperimentConfig
from roformer_jax.training.runs import load_params

BATCH_TOKENS = 16_384  # rows per batch at length C: BATCH_TOKENS // C (at least 1)
EVAL_DIR = "length_eval"  # under a run's directory: <evaluation>.json per evaluation


def trained_length(cfg: ExperimentConfig) -> int:
    """The longest rows a run was trained on (its stages' or data.seq_len)."""
    return max([cfg.data.seq_len, *(length for _, length, _ in cfg.train.stages)])


def scaling_at(scaling: Mapping | None, length: int, trained: int) -> dict | None:
    """The rope_scaling to read a model trained at `trained` tokens at `length` (module doc)."""
    if not scaling or length <= trained:
        return None
    return {"factor": length / trained, "original_max_position_embeddings": trained, **scaling}


def evaluate_runs(
    evaluations: Mapping[str, Mapping],
    runs: Mapping[str, Sequence[ExperimentConfig]],
    workdir: str,
    *,
    lengths: Sequence[int],
    max_tokens: int | None,
    raw_dir: str | None = None,
) -> dict[str, list[dict]]:
    """{evaluation: [scores of each seed]}, scores as `evaluation.score_lengths` gives them.

    evaluations: name -> {"run": a name of `runs`, "scaling": optional dictionary}. Lengths
    past a model's table (BERT's learned positions) are left out of its scores. With
    `raw_dir`, a score cached there but not in `workdir` is copied back instead of computed,
    and each score computed is copied there.
    """
    held_out_sets = {}  # (corpus cache path, lengths) -> the held-out set, shared by runs
    same_model = {}  # (run directory, length, model config) -> scores at that length
    scores = {}
    for name, spec in evaluations.items():
        _check_run(name, spec, runs)
        scores[name] = []
        for cfg in runs[spec["run"]]:
            directory = run_dir(workdir, spec["run"], cfg.seed)
            scaling = dict(spec["scaling"]) if spec.get("scaling") else None
            path, identity = _cache_path(directory, name), _identity(spec, cfg, lengths, max_tokens)
            raw = raw_dir and _cache_path(run_dir(raw_dir, spec["run"], cfg.seed), name)
            if not _cached(path, identity) and raw and _cached(raw, identity):
                _copy(raw, path)
            if _cached(path, identity):
                scores[name].append(_int_keys(_read(path)["scores"]))
                continue
            result, seconds = _score(
                directory,
                workdir,
                scaling,
                lengths,
                max_tokens=max_tokens,
                held_out_sets=held_out_sets,
                same_model=same_model,
            )
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                record = {"identity": identity, "scores": result, "seconds": seconds}
                json.dump(record, f)
            os.replace(path + ".tmp", path)
            if raw:
                _copy(path, raw)
            scores[name].append(result)
    return scores


def _score(
    directory: str,
    workdir: str,
    scaling: dict | None,
    lengths: Sequence[int],
    *,
    max_tokens: int | None,
    held_out_sets: dict,
    same_model: dict,
) -> tuple[dict, float]:
    """The scores of the run in `directory` read with `scaling`, at the `lengths` its model can
    read, and the seconds the scoring took (loading the model and the data not counted);
    `held_out_sets` and `same_model` (evaluate_runs's) are filled as it goes."""
    run_cfg, params, steps_done = load_params(directory)
    cache = run_cfg.train.data_cache_dir or os.path.join(workdir, "data")
    corpus = load_corpus(run_cfg.data, cache)
    longest = run_cfg.model.max_length
    readable = [n for n in lengths if longest is None or n <= longest]
    key = (corpus.path, tuple(readable))
    if key not in held_out_sets:
        held_out_sets[key] = length_eval_set(
            corpus,
            readable,
            batch_size={n: max(1, BATCH_TOKENS // n) for n in readable},
            windows="documents",
            max_tokens=max_tokens,
        )
    trained = trained_length(run_cfg)
    models = {n: _model_config(run_cfg.model, scaling_at(scaling, n, trained)) for n in readable}
    # A length where this evaluation reads the same model as an earlier one of the same run
    # (any scaling is the identity up to the trained length) is not scored twice.
    result = {
        n: same_model[directory, n, models[n]]
        for n in readable
        if (directory, n, models[n]) in same_model
    }
    held_out = held_out_sets[key]
    todo = {n: b for n, b in held_out.batches.items() if n not in result}
    start = time.time()
    if todo:
        result |= evaluation.score_lengths(
            lambda n, models=models: RoFormer(models[n]),
            params,
            dataclasses.replace(held_out, batches=todo),
            steps_done=steps_done,
        )
    result = {n: result[n] for n in readable}
    same_model.update({(directory, n, models[n]): result[n] for n in readable})
    return result, time.time() - start


def runs_to_score(
    evaluations: Mapping[str, Mapping],
    runs: Mapping[str, Sequence[ExperimentConfig]],
    roots: Sequence[str | None],
    *,
    lengths: Sequence[int],
    max_tokens: int | None,
) -> set[str]:
    """The runs with an (evaluation, seed) scored with these settings in none of `roots` (a
    workdir, a raw folder; None skipped): evaluate_runs reads their checkpoints, so training
    must leave them (study.run_study's checkpoints_needed)."""
    needed = set()
    for name, spec in evaluations.items():
        _check_run(name, spec, runs)
        for cfg in runs[spec["run"]]:
            identity = _identity(spec, cfg, lengths, max_tokens)
            paths = (_cache_path(run_dir(r, spec["run"], cfg.seed), name) for r in roots if r)
            if not any(_cached(path, identity) for path in paths):
                needed.add(spec["run"])
    return needed


def read_scores(
    evaluations: Mapping[str, Mapping],
    runs: Mapping[str, Sequence[ExperimentConfig]],
    workdir: str,
    *,
    lengths: Sequence[int],
    max_tokens: int | None,
    complete: bool = True,
) -> dict[str, list[dict]]:
    """What `evaluate_runs` returns, from its cached scores alone (no model, no data).

    `workdir` is a study's workdir or its raw copy (raw_files.export_raw with folders=(EVAL_DIR,)).
    Raises ValueError where an (evaluation, seed) was not scored with these settings; with
    `complete` False (a study still running), leaves that evaluation out, and any evaluation
    of a run not in `runs`.
    """
    scores = {}
    for name, spec in evaluations.items():
        if not complete and spec["run"] not in runs:
            continue
        _check_run(name, spec, runs)
        seeds = []
        for cfg in runs[spec["run"]]:
            path = _cache_path(run_dir(workdir, spec["run"], cfg.seed), name)
            cached = _read(path)
            if cached is None or cached["identity"] != _identity(spec, cfg, lengths, max_tokens):
                if not complete:
                    break
                raise ValueError(f"{path}: no scores of evaluation {name!r} with these settings")
            seeds.append(_int_keys(cached["scores"]))
        else:
            scores[name] = seeds
    return scores


def _check_run(name: str, spec: Mapping, runs: Mapping) -> None:
    if spec["run"] not in runs:
        raise ValueError(f"evaluation {name!r} reads run {spec['run']!r}, not one of {list(runs)}")


def _identity(spec: Mapping, cfg: ExperimentConfig, lengths: Sequence[int], max_tokens) -> dict:
    """What a cached score must match to be reused: anything that changes the numbers."""
    return {
        "lengths": sorted(lengths),
        "max_tokens": max_tokens,
        "scaling": dict(spec["scaling"]) if spec.get("scaling") else None,
        "eval_seed": cfg.data.eval_seed,
        "steps": cfg.train.steps,
    }


def _cache_path(directory: str, name: str) -> str:
    return os.path.join(directory, EVAL_DIR, _slug(name) + ".json")


def _model_config(model_cfg: ModelConfig, scaling: dict | None) -> ModelConfig:
    """The run's model read with `scaling` (None: as trained, its own scaling kept)."""
    if scaling is None:
        return model_cfg
    return model_cfg.with_section(model_cfg.position, scaling=scaling)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name)


def _cached(path: str, identity: dict) -> bool:
    cached = _read(path)
    return cached is not None and cached["identity"] == identity


def _copy(source: str, target: str) -> None:
    os.makedirs(os.path.dirname(target), exist_ok=True)
    shutil.copyfile(source, target)


def _read(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _int_keys(scores: dict) -> dict:
    return {int(length): value for length, value in scores.items()}
