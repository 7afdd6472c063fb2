"""Runs several experiment configurations side by side: the runs of a study.

A study is `{run name: [ExperimentConfig, one per seed]}`. Every run trains in
`workdir/<name>/seed<k>/`; a run whose metrics.jsonl already reaches its last step is not
trained again, and an interrupted one resumes from its checkpoint, so rerunning a study only
does the missing work and redraws the figures. With a raw folder (`run_study(raw_dir=...)`),
each run's small outputs are copied there as it finishes, so a study that spans several
machines or sessions keeps its finished runs in the repository; a fresh workdir takes them
back from there instead of training them again.

A run's directory and its resume checks: run_dirs; the raw folder: raw_files; the study's numbers as
text: tables; the report of a study of training curves: compare_report.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Collection, Mapping, Sequence

from absl import logging
from ml_collections import ConfigDict

from roformer_jax.studies.raw_files import export_run, restore_raw
from roformer_jax.studies.run_dirs import check_same_config, is_finished, run_dir
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance
from roformer_jax.training.config import ExperimentConfig, experiment_config_from_dict
from roformer_jax.training.loop import train_and_evaluate


def study_runs(config: ConfigDict) -> dict[str, list[ExperimentConfig]]:
    """{run name: one ExperimentConfig per seed} of a study config (see configs/compare.py).

    config.experiment is what every run shares, config.runs maps a name to overrides of it,
    and config.seeds lists the seeds every run is trained with. Raises ValueError, before
    anything trains, for no seeds or a repeated one, and for a name the config refers to
    (baseline, eval_baselines, position_reference) that is none of its runs or evaluations.
    """
    _check_names(config)
    runs = {}
    for name, overrides in config.runs.items():
        runs[name] = []
        for seed in config.seeds:
            run = config.experiment.copy_and_resolve_references()
            run.update(overrides.to_dict())
            run.seed = seed
            runs[name].append(experiment_config_from_dict(run.to_dict()))
    return runs


def _check_names(config: ConfigDict) -> None:
    seeds = list(config.seeds)
    if not seeds:
        raise ValueError("config.seeds is empty: a study trains each run at one seed or more")
    repeated = sorted({s for s in seeds if seeds.count(s) > 1})
    if repeated:  # one run counted twice would read as two samples: an interval of width 0
        raise ValueError(f"config.seeds {tuple(seeds)} repeats {repeated}; each seed once")
    references = [("baseline", config.get("baseline"), config.runs)]
    references += [
        (field, name, config.get("evaluations", {}))
        for field, names in (
            ("eval_baselines", config.get("eval_baselines", ())),
            ("position_reference", [config.get("position_reference")]),
        )
        for name in names
    ]
    for field, name, known in references:
        if name is not None and name not in known:
            raise ValueError(f"config.{field} {name!r} is none of {sorted(known)}")


def select_runs(runs: dict[str, list[ExperimentConfig]], names: Sequence[str]) -> dict:
    """The runs named (all of them for no names), in the study's order: a share of a study
    for a second process on the same workdir (each run has its own lock, so two processes
    must take disjoint runs). ValueError for a name that is none of the runs."""
    unknown = [name for name in names if name not in runs]
    if unknown:
        raise ValueError(f"{unknown} are none of the study's runs {list(runs)}")
    return {name: seeds for name, seeds in runs.items() if not names or name in names}


RUN_PREFIX = "run:"  # train.init_from="run:<name>": that run of the study, same seed


def run_study(
    runs: Mapping[str, Sequence[ExperimentConfig]],
    workdir: str,
    raw_dir: str | None = None,
    checkpoints_needed: Collection[str] = (),
    after_run: Callable[[str], object] | None = None,
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
    the study (the long-document study fine-tunes its encoders). `after_run(name)` is called
    as soon as all seeds of run `name` are trained or found finished, before the next run
    starts: work that reads a run's checkpoints (the length study's scores) is then done
    and saved even if a later run is cut short and its machine lost.

    Returns:
      {name: [records of seed 0, records of seed 1, ...]} in the order of `runs`, records as
      in metrics.jsonl.
    """
    found = [
        f for f in ("config.json", "metrics.jsonl") if os.path.exists(os.path.join(workdir, f))
    ]
    if found:
        raise ValueError(
            f"{workdir} is a run's folder (it holds {found[0]}): a study's workdir holds "
            "<run>/seed<k>/ folders; give another"
        )
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
            cfg = _as_trained_in(cfg, workdir)
            check_same_config(directory, cfg, workdir)
            how = _train_or_reuse(
                cfg,
                directory,
                name=name,
                workdir=workdir,
                progress=f"[{done}/{total}]",
                raw_dir=None if name in sources else raw_dir,
            )
            if how != "trained":
                cached.append(directory)
            if raw_dir and how != "restored":  # a restored run's files are the raw copy already
                export_run(directory, run_dir(raw_dir, name, cfg.seed))
            results[name].append(metrics_lib.read_metrics(directory))
        if after_run is not None:
            after_run(name)
    _warn_if_older_code(cached)
    return {name: results[name] for name in runs}


def _as_trained_in(cfg: ExperimentConfig, workdir: str) -> ExperimentConfig:
    """`cfg` as the study trains it: its "run:<name>" resolved (resolve_init_from), and the
    study's data cache where it names none, so the runs share one tokenizer and token cache."""
    cfg = resolve_init_from(cfg, workdir)
    if cfg.train.data_cache_dir is not None:
        return cfg
    train_cfg = dataclasses.replace(cfg.train, data_cache_dir=os.path.join(workdir, "data"))
    return dataclasses.replace(cfg, train=train_cfg)


def _train_or_reuse(
    cfg: ExperimentConfig,
    directory: str,
    *,
    name: str,
    workdir: str,
    progress: str,
    raw_dir: str | None,
) -> str:
    """Trains run `name` in `directory` unless it finished there or, with `raw_dir`, in the raw
    folder (restore_raw); returns "restored", "cached" or "trained"."""
    if raw_dir and restore_raw(directory, cfg, raw_dir, name, workdir):
        logging.info("%s %s seed %d: finished in %s, restored", progress, name, cfg.seed, raw_dir)
        return "restored"
    if is_finished(directory, cfg.train.steps):
        logging.info("%s %s seed %d: finished earlier, cached", progress, name, cfg.seed)
        return "cached"
    logging.info("%s %s seed %d: training in %s", progress, name, cfg.seed, directory)
    train_and_evaluate(cfg, directory)
    return "trained"


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
        where = "; ".join(
            f"{len(d)} at {c[:7]}: git diff --stat {c[:7]} HEAD" for c, d in older.items()
        )
        logging.warning(
            "%d cached run(s) were trained by code that differs from HEAD in roformer_jax/ or "
            "configs/ (%s); their numbers are that code's: delete a run's directory to retrain it",
            sum(map(len, older.values())),
            where,
        )


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
