"""The results page's blocks of the retrieval bench (experiments/length_bench.py): its header,
heat map, tables and verdicts, read from a task's raw folder by length_bench.read_results.

As the ViT study's, the raw folder holds the bench's own files, so these kinds take the page
and the folder's name, as `<!-- generated: raw bench_table("bench_passkey", "text") -->`;
bench_mean, bench_seeds, bench_diff and bench_verdict give one number or verdict for the
section's prose, bench_claim README's cells.
A folder not yet in the raw root (the bench not run yet), or one without the bench's record
(its runs committed as they finish), gives a header that says so and empty blocks after it,
so the page's section stands before the bench has run and fills in when it has finished.
"""

from __future__ import annotations

import os
import shlex

import numpy as np

from roformer_jax.studies import (
    length_bench,
    length_bench_report,
    own_runs,
    page_provenance,
    tables,
)
from roformer_jax.studies.page_numbers import FIGURES
from roformer_jax.studies.page_source import Page, read_json


def _not_run(page: Page, name: str) -> str | None:
    """The line the header shows until `name` has its record, written when the bench
    finishes; None once it has."""
    folder = os.path.join(page.raw_root, name)
    if os.path.exists(os.path.join(folder, length_bench.RECORD)):
        return None
    if os.path.isdir(folder):
        done = len(own_runs.result_files(folder))
        return (
            f"*In progress: {tables.count_text(done, 'run')} finished so far, in {name}/; the "
            "blocks below are drawn when the bench has finished (docs/studies.md's command "
            "resumes from them).*"
        )
    return f"*Not run yet: no raw files in {name}/ (docs/studies.md's command writes them).*"


def _read(page: Page, name: str) -> tuple[dict, dict]:
    """(config, {arm: [result per seed]}) of the bench in raw folder `name`."""
    record, results = length_bench.read_results(os.path.join(page.raw_root, name))
    return record["config"], results


def bench_header(page: Page, name: str) -> str:
    """The commit, machine and wall time of the command, and the command."""
    not_run = _not_run(page, name)
    if not_run:
        return not_run
    record, results = length_bench.read_results(os.path.join(page.raw_root, name))
    return page_provenance.own_runs_header(record, results, "arms")


def bench_stale(page: Page, name: str) -> str:
    """Whether the code changed since the bench's runs trained (page_provenance's)."""
    return "" if _not_run(page, name) else page_provenance.bench_stale(page, name)


def bench_heat_map(page: Page, name: str, eval_set: str) -> str:
    """length_bench_report.heat_maps, drawn into page.figures_dir when given."""
    if _not_run(page, name):
        return ""
    config, results = _read(page, name)
    figure = f"{name}_{eval_set}.png"
    if page.figures_dir is not None:
        path = os.path.join(page.figures_dir, figure)
        length_bench_report.heat_maps(config, results, eval_set, path)
    return f"![{name} {eval_set}]({FIGURES}/{figure})"


def bench_table(page: Page, name: str, eval_set: str) -> str:
    if _not_run(page, name):
        return ""
    return length_bench_report.accuracy_table(*_read(page, name), eval_set)


def bench_paired_table(page: Page, name: str, eval_set: str) -> str:
    if _not_run(page, name):
        return ""
    return length_bench_report.paired_table(*_read(page, name), eval_set)


def bench_verdicts(page: Page, name: str, eval_set: str) -> str:
    if _not_run(page, name):
        return ""
    return length_bench_report.verdict_table(*_read(page, name), eval_set)


def bench_mean(page: Page, name: str, eval_set: str, arm: str, length: int) -> str:
    """Inline: `arm`'s exact match at `length`, the mean over seeds."""
    config, results = _read(page, name)
    return f"{np.mean(length_bench_report.accuracies(results, arm, eval_set, length)):.2f}"


def bench_seeds(page: Page, name: str, eval_set: str, arm: str, length: int) -> str:
    """Inline: `arm`'s exact match at `length`, seed by seed."""
    _, results = _read(page, name)
    return ", ".join(
        f"{a:.2f}" for a in length_bench_report.accuracies(results, arm, eval_set, length)
    )


def bench_diff(page: Page, name: str, eval_set: str, arm: str, length: int) -> str:
    """Inline: `arm` minus the baseline at `length`, paired by seed: mean [95% t-interval]."""
    config, results = _read(page, name)
    diffs = length_bench_report.paired_differences(config, results, arm, eval_set, length)
    return tables.interval_text(diffs)


def bench_verdict(page: Page, name: str, eval_set: str, arm: str) -> str:
    """Inline: the verdict table's cell of `arm`."""
    return length_bench_report.verdict(*_read(page, name), eval_set, arm)


def bench_claim(page: Page, name: str, eval_set: str, arm: str) -> str:
    """README's "STATUS | MEASURED" cells of the claim that `arm` retrieves better than the
    baseline past the trained length (tables.holm_claim, Holm over every arm and length of
    the set, as the verdicts); "(not run yet)" in both until the bench has finished."""
    if _not_run(page, name):
        return "(not run yet) | (not run yet)"
    config, results = _read(page, name)
    kept = tables.holm_kept(length_bench_report.family(config, results, eval_set))
    past = [n for n in length_bench.eval_lengths(config) if n != config["train_length"]]
    diffs = {
        n: length_bench_report.paired_differences(config, results, arm, eval_set, n) for n in past
    }
    return tables.holm_claim(diffs, [n for n in past if f"{arm} at {n}" in kept], "tokens")


def bench_needle_table(page: Page, name: str, period: int) -> str:
    """experiments/needle_sweep.py's table (length_bench_report.needle_table), after the
    commit, machine and command that measured it."""
    path = os.path.join(page.raw_root, name, length_bench.NEEDLE_SWEEP)
    if not os.path.exists(path):
        missing = f"no {length_bench.NEEDLE_SWEEP} in {name}/"
        return f"*Not run yet: {missing} (the command above writes it).*"
    sweep = read_json(path)
    machine, commit = sweep["machine"], sweep["code"].get("commit") or "unknown"
    first_arm = next(iter(sweep["arms"].values()))  # {length: [[accuracy per place] per seed]}
    seeds = len(next(iter(first_arm.values())))
    return (
        f"Ran at commit {commit[:7]}, {page_provenance.machine_text(machine)}, "
        f"{sweep['rows']} rows a place, "
        f"{seeds} seeds:\n\n"
        f"    python {shlex.join(sweep['argv'])}\n\n"
        + length_bench_report.needle_table(sweep, period)
    )
