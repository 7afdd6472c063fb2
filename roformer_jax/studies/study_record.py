"""A study's record beside its raw outputs: the command, the config, the code and the machine.

    before = study_record.kept_record(raw_dir, config)    # the entry points, with --raw_dir
    study_record.export(raw_dir, runs, workdir, record, before=before)
    raw = study_record.read_raw("docs/results/raw/length_wikitext2")   # a results page

`<raw_dir>/study.json` (FILE) holds:
  argv: the command line as it was typed (sys.argv);
  config_file: the --config value, file and argument ("configs/study_length.py:wikitext2");
  config: the resolved study config as a dictionary, runs in the order the study used them;
  code: {"commit": sha or None, "dirty": bool or None} (provenance.code_version());
  wall_s: seconds from the start of the command to the export (None where unknown, and while
    the study runs);
  finished: False while the study runs: the command writes its record first (`write`), so
    that a study that takes several sittings can be read, and its page regenerated, from the
    runs it has exported so far; True once every run is in (absent in older records: True);
  machine: provenance.machine()'s fields and "platform" (platform.platform());
  unigram_cross_entropy: of the validation tokens, which the raw files cannot give (they hold
    no corpus), for the figures' floor;
  reconstructed: True for a record written by hand after the fact, from the page that quoted
    the command; its code may then name "first_commit", the first of a range of commits over
    which a study ran in pieces.
Each run's own files (metrics.jsonl, config.json, provenance.json, length_eval/) are under
`<raw_dir>/<run>/seed<k>/` (raw_files.export_raw); a run with a learned position table may also
have position_table.POSITION_TABLE_FILE there, what training did to that table
(experiments/position_table.py, from the run's checkpoints).
"""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import platform
from collections.abc import Mapping, Sequence

from absl import logging
from ml_collections import ConfigDict

from roformer_jax.studies import length_study, raw_files, run_dirs
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance
from roformer_jax.training.config import (
    ExperimentConfig,
    config_diff,
    experiment_config_from_dict,
)

FILE = "study.json"


def make_record(
    *,
    argv: Sequence[str],
    config_file: str,
    config: ConfigDict,
    wall_s: float | None,
    unigram: float,
    finished: bool = True,
) -> dict:
    """study.json's fields (module doc) for a command running now, from this checkout."""
    return {
        "argv": list(argv),
        "config_file": config_file,
        "config": _as_read_back(config),
        "code": provenance.code_version(),
        "wall_s": wall_s,
        "machine": {**provenance.machine(), "platform": platform.platform()},
        "unigram_cross_entropy": unigram,
        "reconstructed": False,
        "finished": finished,
    }


def export(
    raw_dir: str,
    runs: Mapping[str, Sequence[ExperimentConfig]],
    workdir: str,
    record: Mapping,
    *,
    folders: Sequence[str] = (),
    before: Mapping[str, str] | None = None,
) -> int:
    """Copies every run's raw files to `raw_dir` (raw_files.export_raw) and writes `record` as
    raw_dir/study.json; returns the number of files written.

    `before`: the folder's `contents` when the command started, where it held a finished
    record of the same config (`kept_record`). A command that then changed nothing (every run
    cached, every score read) keeps that record: its own would replace the commit and wall
    time of the command that trained the runs with those of one that trained nothing.
    """
    copied = raw_files.export_raw(runs, workdir, raw_dir, folders=folders)
    if unchanged(raw_dir, before):
        return copied
    write(raw_dir, record)
    return copied + 1


def kept_record(raw_dir: str, config: ConfigDict, name: str = FILE) -> dict[str, str] | None:
    """The folder's `contents` where it holds a finished record of `config` (named `name`: a
    study of own runs names its own, own_runs), else None: a command gives it to `export` or
    `unchanged` as `before`, and writes no in-progress record over it."""
    path = os.path.join(raw_dir, name)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        record = json.load(f)
    same = record.get("config") == _as_read_back(config)
    return contents(raw_dir, name) if same and is_finished(record) else None


def unchanged(raw_dir: str, before: Mapping[str, str] | None, name: str = FILE) -> bool:
    """Whether a command found the folder as `kept_record` gave it and left every file as it
    was: then the record stays, naming the command that trained the runs (logged)."""
    if before is None or contents(raw_dir, name) != before:
        return False
    logging.info("every run was in %s already: its record is kept", raw_dir)
    return True


def _as_read_back(config: ConfigDict) -> dict:
    """The config as study.json holds it: through JSON, tuples read back as lists."""
    return json.loads(json.dumps(config.to_dict()))


def contents(raw_dir: str, name: str = FILE) -> dict[str, str]:
    """{path under raw_dir: SHA-256} of every file there but the record (`name`)."""
    found = {}
    for folder, _, files in os.walk(raw_dir):
        for name in files:
            path = os.path.join(folder, name)
            if os.path.relpath(path, raw_dir) != name:
                with open(path, "rb") as f:
                    found[os.path.relpath(path, raw_dir)] = hashlib.sha256(f.read()).hexdigest()
    return found


def write(raw_dir: str, record: Mapping) -> None:
    """Writes `record` as raw_dir/study.json (replaced whole: a reader never sees half)."""
    os.makedirs(raw_dir, exist_ok=True)
    path = os.path.join(raw_dir, FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1, ensure_ascii=False)
        f.write("\n")
    os.replace(path + ".tmp", path)


@dataclasses.dataclass(frozen=True)
class RawStudy:
    """A study read back from its raw folder alone.

    record: study.json (module doc); runs: {run: [ExperimentConfig per seed]} from each run's
    config.json, in the study's order (while the study runs, the runs exported so far);
    results: {run: [metrics records per seed]} as study.run_study returns them; scores:
    {evaluation: [scores per seed]} as length_study.evaluate_runs returns them (length
    studies; while the study runs, the evaluations scored so far), else None; commits: the
    commits that trained the runs, from their provenance.json sessions, oldest session first
    (empty for runs from before that file). A study resumed after a commit has more than one,
    and study.json names only the last command's. dirty: whether any of those sessions
    trained with uncommitted changes, which study.json's code may not say.
    """

    name: str
    record: dict
    runs: dict[str, list[ExperimentConfig]]
    results: dict[str, list[list[dict]]]
    scores: dict[str, list[dict]] | None
    commits: list[str]
    dirty: bool

    @property
    def config(self) -> dict:
        return self.record["config"]

    @property
    def finished(self) -> bool:
        return is_finished(self.record)


def is_finished(record: Mapping) -> bool:
    """Whether every run of the study is in (older records, which lack the field, are)."""
    return record.get("finished", True)


def read_raw(raw_dir: str) -> RawStudy:
    """Reads raw_dir/study.json and every run's files; raises FileNotFoundError where a file
    is missing and ValueError where a length score is missing (length_study.read_scores).
    While the study runs (record's "finished" False), a run not exported yet, for some seed,
    and an evaluation not scored yet are left out instead."""
    with open(os.path.join(raw_dir, FILE), encoding="utf-8") as f:
        record = json.load(f)
    config, finished = record["config"], is_finished(record)
    runs, results, sessions = {}, {}, []
    for name in config["runs"]:
        directories = [run_dirs.run_dir(raw_dir, name, seed) for seed in config["seeds"]]
        records = [metrics_lib.read_metrics(d) for d in directories]
        if not all(records):
            if not finished:
                continue
            raise FileNotFoundError(f"{raw_dir}: run {name!r} lacks a metrics.jsonl")
        runs[name] = [_read_config(d) for d in directories]
        results[name] = records
        sessions += [s for d in directories for s in (provenance.read(d) or {}).get("sessions", [])]
    sessions.sort(key=lambda s: s["started"])
    commits = list(dict.fromkeys(s["commit"] for s in sessions if s.get("commit")))
    scores = None
    if "evaluations" in config:
        scores = length_study.read_scores(
            config["evaluations"],
            runs,
            raw_dir,
            lengths=config["eval_lengths"],
            max_tokens=config["eval_tokens"],
            complete=finished,
        )
    name = os.path.basename(os.path.normpath(raw_dir))
    dirty = any(s.get("dirty") for s in sessions)
    return RawStudy(name, record, runs, results, scores, commits, dirty)


JOIN = "+"  # between the folders of a joined study's name: "bert_seeds_x+long_training_x"


def join(studies: Sequence[RawStudy]) -> RawStudy:
    """Several studies read as one, named by their names joined with JOIN: every run of any of
    them, in their order, and a run that several have takes each one's seeds, ordered by seed.
    For runs trained apart, at a later sitting, that a study's intervals need together (issue
    56: BERT's seeds 1 and 2 beside seed 0's run).

    The record is the first study's, its config's runs and seeds the union; the length scores
    every study has, each evaluation from the one study that reads it (ALiBi at 8 heads, a
    study of its own, beside the 2-head run's evaluations). Raises ValueError where one seed of
    a run, or an evaluation, is in two studies, where a run's configs differ in anything but
    the seed and the data cache, and where a run's seeds are not the first of all the runs'
    seeds: the paired tables pair seeds by their place, which is then their
    seed (a one-seed run's seed 0 with seed 0 of three).
    """
    runs: dict[str, list[ExperimentConfig]] = {}
    results: dict[str, list[list[dict]]] = {}
    for raw in studies:
        for name, configs in raw.runs.items():
            for cfg, records in zip(configs, raw.results[name]):
                seen = runs.setdefault(name, [])
                if any(c.seed == cfg.seed for c in seen):
                    raise ValueError(f"run {name!r} seed {cfg.seed} is in two of the studies")
                if seen:
                    ignore = ("seed", "train.data_cache_dir")
                    changed = config_diff(dataclasses.asdict(seen[0]), cfg, ignore=ignore)
                    if changed:
                        raise ValueError(
                            f"run {name!r} differs between the studies in {', '.join(changed)}"
                        )
                seen.append(cfg)
                results.setdefault(name, []).append(records)
    for name, configs in runs.items():
        order = sorted(range(len(configs)), key=lambda i: configs[i].seed)
        runs[name] = [configs[i] for i in order]
        results[name] = [results[name][i] for i in order]
    seeds = sorted({cfg.seed for configs in runs.values() for cfg in configs})
    for name, configs in runs.items():
        if [c.seed for c in configs] != seeds[: len(configs)]:
            raise ValueError(
                f"run {name!r} has seeds {[c.seed for c in configs]}, not the first of {seeds}: "
                "its seeds would pair with others by place"
            )
    scores = {}  # each study's evaluations, whose seeds are its runs' (checked above)
    for raw in studies:
        for evaluation, per_seed in (raw.scores or {}).items():
            if evaluation in scores:
                raise ValueError(f"evaluation {evaluation!r} is in two of the studies")
            scores[evaluation] = per_seed
    first = studies[0]
    config = dict(first.config)
    config["runs"] = {n: r for raw in studies for n, r in raw.config["runs"].items()}
    config["seeds"] = seeds
    record = dict(first.record, config=config, finished=all(s.finished for s in studies))
    commits = list(dict.fromkeys(c for raw in studies for c in raw.commits))
    name = JOIN.join(raw.name for raw in studies)
    return RawStudy(
        name, record, runs, results, scores or None, commits, any(s.dirty for s in studies)
    )


def trained_runs(workdir: str, raw_dir: str | None = None) -> list[str]:
    """run_dirs.trained_runs(workdir); with raw_dir, only the runs its study.json lists (its
    runs x seeds). Two studies can share a workdir (a sweep and the best of it: the seeds they
    share are trained once), and a reading of one study's runs must not land in the other's
    raw folder."""
    found = run_dirs.trained_runs(workdir)
    if raw_dir is None:
        return found
    path = os.path.join(raw_dir, FILE)
    if not os.path.exists(path):
        raise FileNotFoundError(f"{path}: --raw_dir must be a study's raw folder (its --raw_dir)")
    with open(path, encoding="utf-8") as f:
        config = json.load(f)["config"]
    listed = {
        run_dirs.run_dir(workdir, n, seed) for n in config["runs"] for seed in config["seeds"]
    }
    return [d for d in found if d in listed]


def _read_config(directory: str) -> ExperimentConfig:
    with open(os.path.join(directory, "config.json"), encoding="utf-8") as f:
        return experiment_config_from_dict(json.load(f))
