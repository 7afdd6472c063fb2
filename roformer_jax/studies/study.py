"""Runs several experiment configurations side by side and summarizes them as a study.

A study is `{run name: [ExperimentConfig, one per seed]}`. Every run trains in
`workdir/<name>/seed<k>/`; a run whose metrics.jsonl already reaches its last step is not
trained again, and an interrupted one resumes from its checkpoint, so rerunning a study only
does the missing work and redraws the figures. With a raw folder (`run_study(raw_dir=...)`),
each run's small outputs are copied there as it finishes, so a study that spans several
machines or sessions keeps its finished runs in the repository; a fresh workdir takes them
back from there instead of training them again.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
import shutil
from collections.abc import Collection, Mapping, Sequence

import numpy as np
from absl import logging
from ml_collections import ConfigDict

from roformer_jax.studies import plots
from roformer_jax.studies.stats import t_interval
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance
from roformer_jax.training.config import (
    ExperimentConfig,
    config_diff,
    default_experiment_config,
    experiment_config_from_dict,
)
from roformer_jax.training.loop import train_and_evaluate


def study_runs(config: ConfigDict) -> dict[str, list[ExperimentConfig]]:
    """{run name: one ExperimentConfig per seed} of a study config (see configs/compare.py).

    config.experiment is what every run shares, config.runs maps a name to overrides of it,
    and config.seeds lists the seeds every run is trained with.
    """
    runs = {}
    for name, overrides in config.runs.items():
        runs[name] = []
        for seed in config.seeds:
            run = config.experiment.copy_and_resolve_references()
            run.update(overrides.to_dict())
            run.seed = seed
            runs[name].append(experiment_config_from_dict(run.to_dict()))
    return runs


def run_dir(workdir: str, name: str, seed: int) -> str:
    slug = re.sub(r"[^A-Za-z0-9_.+-]+", "_", name)
    return os.path.join(workdir, slug, f"seed{seed}")


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


RUN_PREFIX = "run:"  # train.init_from="run:<name>": that run of the study, same seed


def run_study(
    runs: Mapping[str, Sequence[ExperimentConfig]],
    workdir: str,
    raw_dir: str | None = None,
    checkpoints_needed: Collection[str] = (),
) -> dict:
    """Trains every (run, seed) that is not finished; returns their metrics records.

    A run whose train.init_from is "run:<name>" starts from the final parameters of run
    <name> of the same seed, so that run is trained first (runs come in the order given
    otherwise; a ConfigDict of runs gives them sorted by name).

    With `raw_dir`, every run is exported there (export_raw) as soon as it is trained or
    found finished, and a run finished in `raw_dir` but not in `workdir` is copied back and
    counted as cached (restore_raw): only for studies whose numbers are the runs' metrics,
    since a raw folder holds no checkpoints. A run another starts from is trained again, and
    so are the runs named in `checkpoints_needed`, whose checkpoints the caller reads after
    the study (the long-document study fine-tunes its encoders).

    Returns:
      {name: [records of seed 0, records of seed 1, ...]} in the order of `runs`, records as
      in metrics.jsonl.
    """
    order = _training_order(runs)
    sources = set(checkpoints_needed).union(*(_init_sources(c) for c in runs.values()))
    total = sum(len(seeds) for seeds in runs.values())
    done = 0
    results, cached = {}, []
    for name in order:
        results[name] = []
        for cfg in runs[name]:
            done += 1
            directory = run_dir(workdir, name, cfg.seed)
            cfg = resolve_init_from(cfg, workdir)
            check_same_config(directory, cfg, workdir)
            if cfg.train.data_cache_dir is None:  # the runs share one tokenizer and token cache
                train_cfg = dataclasses.replace(
                    cfg.train, data_cache_dir=os.path.join(workdir, "data")
                )
                cfg = dataclasses.replace(cfg, train=train_cfg)
            restored = (
                bool(raw_dir)
                and name not in sources
                and restore_raw(directory, cfg, raw_dir, name, workdir)
            )
            if restored:
                logging.info("[%d/%d] %s seed %d: finished in %s, restored", done, total, name,
                             cfg.seed, raw_dir)  # fmt: skip
                cached.append(directory)
            elif is_finished(directory, cfg.train.steps):
                logging.info("[%d/%d] %s seed %d: finished earlier, cached", done, total, name,
                             cfg.seed)  # fmt: skip
                cached.append(directory)
            else:
                logging.info("[%d/%d] %s seed %d: training in %s", done, total, name, cfg.seed,
                             directory)  # fmt: skip
                train_and_evaluate(cfg, directory)
            if raw_dir and not restored:  # a restored run's files are the raw copy already
                _export_run(directory, run_dir(raw_dir, name, cfg.seed))
            results[name].append(metrics_lib.read_metrics(directory))
    _warn_if_older_code(cached)
    return {name: results[name] for name in runs}


def _warn_if_older_code(directories: Sequence[str]) -> None:
    """One warning for the cached runs whose last session ran code that differs from HEAD's.

    A cached run is reused by its config alone, so a change to the numerics since would
    otherwise pass unseen until a results page marks the study stale.
    """
    older = {}
    for directory in directories:
        sessions = (provenance.read(directory) or {}).get("sessions") or [{}]
        commit = sessions[-1].get("commit")
        changed = provenance.code_changed(commit) if commit else None
        if changed:
            older.setdefault(commit, []).append(directory)
    if older:
        where = "; ".join(f"{len(d)} at {c[:7]}: git diff --stat {c[:7]} HEAD"
                          for c, d in older.items())  # fmt: skip
        logging.warning(
            "%d cached run(s) were trained by code that differs from HEAD in roformer_jax/ or "
            "configs/ (%s); their numbers are that code's: delete a run's directory to retrain it",
            sum(map(len, older.values())), where,
        )  # fmt: skip


def resolve_init_from(cfg: ExperimentConfig, workdir: str) -> ExperimentConfig:
    """`cfg` with train.init_from "run:<name>" made the absolute workdir of that run.

    Absolute, so that config.json says where the parameters came from and a rerun of the
    study from the same --workdir resolves to the same config (check_same_config; from a moved
    workdir too, by `moved_with_workdir`).
    """
    init_from = cfg.train.init_from
    if init_from is None or not init_from.startswith(RUN_PREFIX):
        return cfg
    source = os.path.abspath(run_dir(workdir, init_from[len(RUN_PREFIX) :], cfg.seed))
    return dataclasses.replace(cfg, train=dataclasses.replace(cfg.train, init_from=source))


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
    _export_run(source, directory)
    return True


def _init_sources(configs: Sequence[ExperimentConfig]) -> set[str]:
    """The names of the runs that `configs` start from (train.init_from "run:<name>")."""
    named = (c.train.init_from or "" for c in configs)
    return {n[len(RUN_PREFIX) :] for n in named if n.startswith(RUN_PREFIX)}


def _training_order(runs: Mapping[str, Sequence[ExperimentConfig]]) -> list[str]:
    """The run names with every run after the one its "run:<name>" names, else as given.

    Raises ValueError, before anything is trained, for a name that is not a run of the study
    and for runs that start from each other in a cycle.
    """
    sources = {}
    for name, configs in runs.items():
        sources[name] = _init_sources(configs)
        unknown = sorted(sources[name] - set(runs))
        if unknown:
            raise ValueError(
                f"run {name!r} starts from run {unknown[0]!r} (train.init_from="
                f"{RUN_PREFIX + unknown[0]!r}), which is not a run of the study: {list(runs)}"
            )
    order = []
    while len(order) < len(runs):
        ready = [n for n in runs if n not in order and sources[n] <= set(order)]
        if not ready:
            cycle = sorted(n for n in runs if n not in order)
            raise ValueError(f"runs {cycle} start from each other (train.init_from): a cycle")
        order.append(ready[0])
    return order


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
            copied += _export_run(source, target, folders)
    return copied


def _export_run(source: str, target: str, folders: Sequence[str] = ()) -> int:
    """export_raw for one run directory; returns the number of files copied."""
    os.makedirs(target, exist_ok=True)
    copied = 0
    for file in RAW_FILES:
        if os.path.exists(os.path.join(source, file)):
            shutil.copyfile(os.path.join(source, file), os.path.join(target, file))
            copied += 1
    for folder in folders:
        if os.path.isdir(os.path.join(source, folder)):
            shutil.copytree(os.path.join(source, folder), os.path.join(target, folder),
                            dirs_exist_ok=True)  # fmt: skip
            copied += len(os.listdir(os.path.join(source, folder)))
    return copied


def curves(results: Mapping[str, Sequence[list[dict]]], keys: Sequence[str]) -> dict:
    """{name: [{"step": [...], key: [...]} per seed]} from metrics records, for plots."""
    out = {}
    for name, seeds in results.items():
        out[name] = []
        for records in seeds:
            series = {"step": [r["step"] for r in records]}
            for key in keys:
                series[key] = [r.get(key) for r in records]
            out[name].append(series)
    return out


def paired_curves(
    results: Mapping[str, Sequence[list[dict]]], baseline: str, key: str
) -> dict[str, dict[str, list[float]]]:
    """Each run's `key` minus the baseline's, seed by seed, through training:
    {name: {"step", "mean", "low", "high": [T]}}, the 95% t-interval of the mean difference
    at each step both logged in every seed (low = high = mean for one seed)."""
    out = {}
    for name, seeds in results.items():
        if name == baseline:
            continue
        pairs = [
            ({r["step"]: r[key] for r in run if r.get(key) is not None},
             {r["step"]: r[key] for r in base if r.get(key) is not None})
            for run, base in zip(seeds, results[baseline])
        ]  # fmt: skip
        steps = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs))) if pairs else []
        rows = []
        for step in steps:
            diffs = [a[step] - b[step] for a, b in pairs]
            rows.append(t_interval(diffs) if len(diffs) > 1 else (diffs[0],) * 3)
        mean, low, high = (list(column) for column in zip(*rows)) if rows else ([], [], [])
        out[name] = {"step": steps, "mean": mean, "low": low, "high": high, "n": len(pairs)}
    return out


def final_values(records: list[dict], key: str) -> float | None:
    """The last value of `key` in a run's records (None if it was never logged)."""
    values = [r[key] for r in records if r.get(key) is not None]
    return values[-1] if values else None


def summary_table(results: Mapping[str, Sequence[list[dict]]], keys: Sequence[str]) -> str:
    """Markdown table: one row per run, mean ± sample std (ddof 1) of each key's final value.

    With one seed the value alone: no spread can be estimated from one run.
    """
    header = "| run | seeds | " + " | ".join(keys) + " | wall time (s) |"
    lines = [header, "|" + "---|" * (len(keys) + 3)]
    for name, seeds in results.items():
        cells = []
        for key in [*keys, "elapsed_s"]:
            values = [v for v in (final_values(r, key) for r in seeds) if v is not None]
            cells.append(mean_std_text(values))
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def extremes_table(results: Mapping[str, Sequence[list[dict]]], extremes: Mapping[str, str]) -> str:
    """Markdown table: one row per run, each key's most extreme value over all of training
    ("min" or "max", as `extremes` says for that key), seed by seed.

    Not a mean over seeds: an instability (a denominator near zero, a gradient spike) is the
    one seed it happens in. "–" where a run never logged the key (e.g. softmax attention has
    no denominator to watch).
    """
    keys = list(extremes)
    lines = ["| run | seeds | " + " | ".join(f"{extremes[k]} {k} (per seed)" for k in keys) + " |",
             "|" + "---|" * (len(keys) + 2)]  # fmt: skip
    for name, seeds in results.items():
        cells = [", ".join("–" if v is None else f"{v:.3g}"
                           for v in seed_extremes(seeds, key, extremes[key]))
                 for key in keys]  # fmt: skip
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_extremes(seeds: Sequence[list[dict]], key: str, how: str) -> list[float | None]:
    """Each seed's smallest ("min") or largest ("max") `key` over all of its records; None for
    a seed that never logged it."""
    pick = {"min": min, "max": max}[how]
    per_seed = [[r[key] for r in records if r.get(key) is not None] for records in seeds]
    return [pick(v) if v else None for v in per_seed]


def paired_table(results: Mapping[str, Sequence[list[dict]]], baseline: str, key: str) -> str:
    """Markdown table: each run's final `key` minus the baseline's, seed by seed.

    Runs of one seed see the same batches and masks, so much of the spread over seeds cancels
    in these differences: a sharper comparison than two means ± std. The mean difference
    comes with its 95% t-interval (n - 1 degrees of freedom); an interval that excludes 0
    is a difference that the seeds do not explain.
    """
    if baseline not in results:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {list(results)}")
    lines = [
        f"| run − {baseline} | {key}: mean [95% interval] | n | per seed |",
        "|---|---|---|---|",
    ]
    for name in results:
        if name == baseline:
            continue
        diffs = paired_diffs(results, name, baseline, key)
        per_seed = ", ".join(f"{d:+.3f}" for d in diffs) or "n/a"
        lines.append(f"| {name} | {interval_text(diffs)} | {len(diffs)} | {per_seed} |")
    return "\n".join(lines)


def paired_diffs(
    results: Mapping[str, Sequence[list[dict]]],
    name: str,
    baseline: str,
    key: str,
    step: int | None = None,
) -> list[float]:
    """Run `name`'s `key` minus the baseline's, seed by seed (seeds where both have it): the
    final values, or those logged at `step`."""

    def value(records):
        if step is None:
            return final_values(records, key)
        logged = [r[key] for r in records if r["step"] == step and r.get(key) is not None]
        return logged[-1] if logged else None

    base = [value(r) for r in results[baseline]]
    return [
        v - b
        for v, b in zip((value(r) for r in results[name]), base)
        if v is not None and b is not None
    ]


def below_from(curve: Mapping[str, list[float]]) -> int | None:
    """The first step from which a paired_curves entry's interval lies below zero at every
    later step (the run stays ahead of the baseline to the end); None if it does not end
    below zero."""
    first = None
    for step, high in zip(curve["step"], curve["high"]):
        first = (step if first is None else first) if high < 0 else None
    return first


def interval_text(diffs: list[float]) -> str:
    """ "mean [low, high]" of differences (their 95% t-interval); the value alone for one."""
    if not diffs:
        return "n/a"
    if len(diffs) == 1:
        return f"{diffs[0]:+.3f}"
    mean, low, high = t_interval(diffs)
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def mean_std_text(values: list[float]) -> str:
    """ "mean ± sample std (ddof 1)"; the value alone for one (no spread from one run)."""
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{np.mean(values):.4g} ± {np.std(values, ddof=1):.2g}"


def footnote(exp: ExperimentConfig, seeds: Sequence[int], machine: Mapping, unigram: float) -> str:
    """The figure's and report's line on what was trained where.

    exp: a run's config (the data and size every run shares); machine: provenance.machine()'s
    fields; unigram: the validation tokens' Corpus.unigram_cross_entropy(), the loss of
    predicting token frequencies alone, which a short run is read against.
    """
    return (
        f"data: {exp.data.source} ({exp.data.tokenizer}, vocab {exp.model.vocab_size}), "
        f"length {exp.data.seq_len}, batch {exp.train.batch_size}, {exp.train.steps} steps, "
        f"{exp.model.num_layers} layers x {exp.model.hidden_size}, seeds {tuple(seeds)}; "
        f"{machine['device_count']} {machine['backend']} device(s), {machine['cpus']} cores "
        f"({machine['architecture']}); unigram cross-entropy of the validation tokens "
        f"{unigram:.3f}"
    )


def write_report(
    results: Mapping[str, Sequence[list[dict]]],
    workdir: str,
    *,
    title: str,
    plot_keys: Sequence[str],
    table_keys: Sequence[str],
    footnote: str,
    baseline: str | None = None,
    paired_key: str | None = None,
    floor: float | None = None,
) -> tuple[str, str]:
    """Writes workdir/curves.png and workdir/results.md; returns their paths.

    With a baseline run name, results.md also gets `paired_table` of `paired_key` and the
    figure a panel of `paired_curves`; floor (the unigram cross-entropy) is drawn in the
    loss panels.
    """
    png = plots.plot_curves(
        curves(results, plot_keys),
        os.path.join(workdir, "curves.png"),
        title=title,
        metrics=plot_keys,
        footnote=footnote,
        floor=floor,
        paired=None if baseline is None else paired_curves(results, baseline, paired_key),
        paired_label=f"{paired_key} − {baseline}",
    )
    table = summary_table(results, table_keys)
    if baseline is not None:
        table += "\n\nPaired by seed (same batches and masks):\n\n"
        table += paired_table(results, baseline, paired_key)
    md = os.path.join(workdir, "results.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write(f"# {title}\n\n{footnote}\n\n![curves](curves.png)\n\n{table}\n")
    return png, md
