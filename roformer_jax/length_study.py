"""Length studies: trained runs read at several context lengths, RoPE scalings applied when read.

    scores = evaluate_runs(config.evaluations, runs, workdir, lengths=(128, ..., 2048),
                           max_tokens=139_128)
    print(length_table(scores, lengths))

An evaluation names a run of the study and optionally a RoPE scaling (HF's dictionary) to
read it with: zero-shot position interpolation, NTK or YaRN of a model trained at 128. A
scaling without "factor" gets factor = length / trained length at each length past the
trained one, and original_max_position_embeddings = the trained length; up to the trained
length the model is read as trained (every scaling is the identity there, or should be).
Every evaluation of a study scores the same held-out targets (data/length_eval.py, windows
that never cross a document), and each (evaluation, seed) is cached as JSON in its run's
directory, so a rerun only scores what is new.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import time
from collections.abc import Mapping, Sequence

import numpy as np

from roformer_jax import evaluation
from roformer_jax.data.batches import load_corpus
from roformer_jax.data.length_eval import length_eval_set
from roformer_jax.model import ModelConfig, RoFormer
from roformer_jax.study import interval_text, mean_std_text, run_dir
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
) -> dict[str, list[dict]]:
    """{evaluation: [scores of each seed]}, scores as `evaluation.score_lengths` gives them.

    evaluations: name -> {"run": a name of `runs`, "scaling": optional dictionary}. Lengths
    past a model's table (BERT's learned positions) are left out of its scores.
    """
    held_out_sets = {}  # (corpus cache path, lengths) -> the held-out set, shared by runs
    same_model = {}  # (run directory, length, model config) -> scores at that length
    scores = {}
    for name, spec in evaluations.items():
        if spec["run"] not in runs:
            raise ValueError(
                f"evaluation {name!r} reads run {spec['run']!r}, not one of {list(runs)}"
            )
        scores[name] = []
        for cfg in runs[spec["run"]]:
            directory = run_dir(workdir, spec["run"], cfg.seed)
            scaling = dict(spec["scaling"]) if spec.get("scaling") else None
            identity = {
                "lengths": sorted(lengths), "max_tokens": max_tokens, "scaling": scaling,
                "eval_seed": cfg.data.eval_seed, "steps": cfg.train.steps,
            }  # fmt: skip
            path = os.path.join(directory, EVAL_DIR, _slug(name) + ".json")
            cached = _read(path)
            if cached is not None and cached["identity"] == identity:
                scores[name].append(_int_keys(cached["scores"]))
                continue
            run_cfg, params, _ = load_params(directory)
            cache = run_cfg.train.data_cache_dir or os.path.join(workdir, "data")
            corpus = load_corpus(run_cfg.data, cache)
            longest = run_cfg.model.max_length
            readable = [n for n in lengths if longest is None or n <= longest]
            key = (corpus.path, tuple(readable))
            if key not in held_out_sets:
                held_out_sets[key] = length_eval_set(
                    corpus, readable, batch_size={n: max(1, BATCH_TOKENS // n) for n in readable},
                    windows="documents", max_tokens=max_tokens,
                )  # fmt: skip
            trained = trained_length(run_cfg)
            models = {n: _model_config(run_cfg.model, scaling_at(scaling, n, trained))
                      for n in readable}  # fmt: skip
            # A length where this evaluation reads the same model as an earlier one of the
            # same run (any scaling is the identity up to the trained length) is not scored
            # twice.
            result = {n: same_model[directory, n, models[n]] for n in readable
                      if (directory, n, models[n]) in same_model}  # fmt: skip
            held_out = held_out_sets[key]
            todo = {n: b for n, b in held_out.batches.items() if n not in result}
            start = time.time()
            if todo:
                result |= evaluation.score_lengths(
                    lambda n, models=models: RoFormer(models[n]), params,
                    dataclasses.replace(held_out, batches=todo),
                )  # fmt: skip
            result = {n: result[n] for n in readable}
            same_model.update({(directory, n, models[n]): result[n] for n in readable})
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path + ".tmp", "w", encoding="utf-8") as f:
                record = {"identity": identity, "scores": result, "seconds": time.time() - start}
                json.dump(record, f)
            os.replace(path + ".tmp", path)
            scores[name].append(result)
    return scores


def _model_config(model_cfg: ModelConfig, scaling: dict | None) -> ModelConfig:
    """The run's model read with `scaling` (None: as trained, its own rope_scaling kept)."""
    if scaling is None:
        return model_cfg
    return dataclasses.replace(model_cfg, rope_scaling=json.dumps(scaling, sort_keys=True))


def length_table(scores: Mapping[str, Sequence[dict]], lengths: Sequence[int], key="loss") -> str:
    """Markdown: one row per evaluation, mean ± sample std (ddof 1) of `key` at each length."""
    lines = [
        "| evaluation | n | " + " | ".join(f"{key} at {n}" for n in lengths) + " |",
        "|---|---|" + "---|" * len(lengths),
    ]
    for name, seeds in scores.items():
        cells = [mean_std_text([s[n][key] for s in seeds if n in s]) for n in lengths]
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def length_paired_table(
    scores: Mapping[str, Sequence[dict]], baseline: str, lengths: Sequence[int]
) -> str:
    """Markdown: each evaluation's loss minus the baseline's, seed by seed, at each length:
    mean [95% t-interval] (the seeds of one run share batches and masks, so much of their
    spread cancels)."""
    if baseline not in scores:
        raise ValueError(f"baseline {baseline!r} is not one of the evaluations {list(scores)}")
    lines = [
        f"| evaluation − {baseline} | n | " + " | ".join(f"at {n}" for n in lengths) + " |",
        "|---|---|" + "---|" * len(lengths),
    ]
    base = scores[baseline]
    for name, seeds in scores.items():
        if name == baseline:
            continue
        cells = []
        for n in lengths:
            diffs = [s[n]["loss"] - b[n]["loss"] for s, b in zip(seeds, base) if n in s and n in b]
            cells.append(interval_text(diffs))
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def stage_table(cfg: ExperimentConfig, seeds: Sequence[list[dict]], *, last: int = 5) -> str:
    """Markdown, as the RoFormer blog's pre-training table: each stage's length, batch, steps
    and the training loss and accuracy over its last `last` logged steps (mean ± std over
    seeds)."""
    stages = cfg.train.stages or ((cfg.train.steps, cfg.data.seq_len, cfg.train.batch_size),)
    lines = [
        "| stage | length | batch | steps | tokens/step | train loss | train accuracy |",
        "|---|---|---|---|---|---|---|",
    ]
    first = 0
    for i, (steps, length, batch) in enumerate(stages, 1):
        end = first + steps
        cells = []
        for key in ("train/loss", "train/accuracy"):
            per_seed = []
            for records in seeds:
                values = [r[key] for r in records if first < r["step"] <= end and key in r]
                if values:
                    per_seed.append(float(np.mean(values[-last:])))
            cells.append(mean_std_text(per_seed))
        lines.append(
            f"| {i} | {length} | {batch} | {steps} | {length * batch:,} | "
            + " | ".join(cells)
            + " |"
        )
        first = end
    return "\n".join(lines)


def _slug(name: str) -> str:
    return re.sub(r"[^A-Za-z0-9_.+-]+", "_", name)


def _read(path: str) -> dict | None:
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _int_keys(scores: dict) -> dict:
    return {int(length): value for length, value in scores.items()}
