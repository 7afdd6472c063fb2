"""The runs of a study that trains its own small models outside the trainer (the ViT study,
the retrieval bench): each run's RESULT in <workdir>/<run>/seed<k>/, reused where its settings
are the same (so a killed study resumes) and refused where they differ; the study's record
beside the runs' results in its raw folder, from which the page reads them all back.

A result names the code it trained at (its "code", provenance.code_version's, recorded since
2026-12-07): a study that runs in pieces, across commits, says which runs ran at which.
"""

from __future__ import annotations

import glob
import json
import os
from collections.abc import Mapping

from roformer_jax.studies.run_dirs import run_dir

RESULT = "result.json"
CLOCKS = ("train_s", "run_s")  # a result's own clock: the ViT study's, the bench's


def cached_result(directory: str, settings: Mapping) -> dict | None:
    """The run's RESULT in `directory`, None where there is none; ValueError where it is a run
    of other settings (a cached run is reused by name, so changed settings must not be)."""
    path = os.path.join(directory, RESULT)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        result = json.load(f)
    if result["settings"] != json.loads(json.dumps(settings)):  # tuples read back as lists
        raise ValueError(
            f"{directory} holds a run of other settings ({result['settings']} != {settings}); "
            "delete it or use another --workdir"
        )
    return result


def code_of_runs(record: Mapping, results: Mapping) -> dict[str | None, int]:
    """{commit: how many runs trained at it}, in the runs' order: a run's own code, else the
    record's where the command ran whole (it trained every run), else None: not known."""
    whole = command_wall_s(record, results) is not None
    counts: dict[str | None, int] = {}
    for seeds in results.values():
        for result in seeds:
            code = result.get("code") or (record["code"] if whole else {})
            counts[code.get("commit")] = counts.get(code.get("commit"), 0) + 1
    return counts


def dirty(record: Mapping, results: Mapping) -> bool:
    """Whether the command or any run ran with uncommitted changes to the code."""
    codes = [record["code"]] + [r.get("code", {}) for seeds in results.values() for r in seeds]
    return any(code.get("dirty") for code in codes)


def result_files(raw_dir: str) -> set[str]:
    """The RESULT files a raw folder holds (<run>/seed<k>/RESULT)."""
    return set(glob.glob(os.path.join(glob.escape(raw_dir), "*", "seed*", RESULT)))


def write_json(path: str, value) -> None:
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
        json.dump(value, f, indent=1)
        f.write("\n")


def read_results(raw_dir: str, record_name: str, runs_key: str) -> tuple[dict, dict[str, list]]:
    """(record, {run: [result per seed]}) from a raw folder alone: the record's
    config[runs_key] names the runs, its config["seeds"] the seeds."""
    with open(os.path.join(raw_dir, record_name), encoding="utf-8") as f:
        record = json.load(f)
    config, results = record["config"], {}
    for name in config[runs_key]:
        results[name] = []
        for seed in config["seeds"]:
            with open(os.path.join(run_dir(raw_dir, name, seed), RESULT), encoding="utf-8") as f:
                results[name].append(json.load(f))
    return record, results


def clock_s(result: Mapping) -> float:
    """A run's own clock (CLOCKS: training, compiling and scoring, pauses excluded)."""
    return next(result[key] for key in CLOCKS if key in result)


def command_wall_s(record: Mapping, results: Mapping) -> float | None:
    """The command's wall time, or None where it is unknown or shorter than its runs' clocks
    summed: a command that found runs cached (a study resumed) timed only its own part."""
    wall = record.get("wall_s")
    total = sum(clock_s(r) for seeds in results.values() for r in seeds)
    return wall if wall and wall >= total else None
