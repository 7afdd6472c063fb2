"""When, where and on what code a study ran, for the results page: its header (commit, machine,
command), whether the code changed since (staleness from git) and every study's wall time.

Staleness: `stale` marks a study whose oldest commit (of its runs' training sessions, else
study.json's) differs from HEAD in roformer_jax/ or configs/ and counts the files (`git diff
--name-only <commit> HEAD -- roformer_jax configs`), marks it **Current** where no such file
changed (a kind of its own: "the code is as at X" read like no mark at all), or says "commit
unknown" without git or the commit; a study of own runs (the ViT's `vit_stale`, the bench's
`bench_stale`) reads its runs' commits (own_runs.code_of_runs). Every study the page introduces
with a header says one of these or what a rerun gave (`reproduced`): `unmarked` names those
that do not.

results_page.differences blanks the stale marks on both sides before comparing: the check
asks whether the page's numbers are what the raw files give, which a commit to the code does
not change; a check that failed on every such commit could only be fixed by rerunning the
studies, and would teach everyone to ignore it. Writing the page refreshes the marks.
"""

from __future__ import annotations

import glob
import os
import shlex
import textwrap

from roformer_jax.studies import length_bench, own_runs, study_record, tables, vit_study
from roformer_jax.studies.page_source import Page, read_json
from roformer_jax.studies.study_record import RawStudy
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance


def header(raw: RawStudy) -> str:
    """The commit and machine a study ran on, and its command."""
    record, code, machine = raw.record, raw.record["code"], raw.record["machine"]
    commit = "commit " + (_short(code.get("commit")) or "unknown")
    if code.get("first_commit"):
        commit = f"commits {_short(code['first_commit'])}–{_short(code.get('commit'))}"
    if len(raw.commits) > 1:
        commit = (
            f"commits {', '.join(map(_short, raw.commits))} (oldest first; each run's "
            "provenance.json says which)"
        )
    dirty = " with uncommitted changes" if code.get("dirty") or raw.dirty else ""
    wall = _command_wall_s(raw)
    if not raw.finished:
        done = f"{len(raw.runs)} of its {len(raw.config['runs'])} runs"
        when = "in progress: these are the runs it has finished so far."
    else:
        done = f"{len(raw.runs)} runs"
        when = f"{took(wall)}."
    line = (
        f"Ran at {commit}{dirty}, {machine_text(machine)}: {done} × n = "
        f"{len(raw.config['seeds'])} seeds; {when}"
    )
    if record.get("reconstructed"):
        line += " (Its study.json was reconstructed by hand from this page's earlier text.)"
    command = textwrap.wrap(
        "python " + shlex.join(record["argv"]), 90, break_long_words=False, break_on_hyphens=False
    )
    return line + "\n\n    " + " \\\n        ".join(command)


def stale(raw: RawStudy, *, page: Page) -> str:
    """Whether the code changed since the study ran, with how much and the command that lists
    it, so that a reader can judge whether it touches the study's numbers."""
    # The oldest code that trained any run: what changed since then may touch some numbers.
    code = raw.record["code"]
    commit = raw.commits[0] if raw.commits else code.get("first_commit") or code.get("commit")
    return _stale_text(commit, page)


def vit_stale(page: Page, name: str) -> str:
    """`stale` for a ViT study (vit_study's raw files)."""
    return own_runs_stale(page, *vit_study.read_results(os.path.join(page.raw_root, name)))


def bench_stale(page: Page, name: str) -> str:
    """`stale` for a task of the retrieval bench (length_bench's raw files)."""
    return own_runs_stale(page, *length_bench.read_results(os.path.join(page.raw_root, name)))


def own_runs_stale(page: Page, record: dict, results: dict) -> str:
    """`stale` for a study of own runs: from the commit of its runs with the most changed since
    (the oldest, as far as the code goes); where some runs name none, from the last command's,
    saying that older code may have trained them."""
    counts = own_runs.code_of_runs(record, results)
    commits = [c for c in counts if c] or [record["code"].get("commit")]
    if None in counts and record["code"].get("commit") not in commits:
        commits.append(record["code"]["commit"])
    oldest = max(commits, key=lambda c: len(page.changed(c) or []) if c else -1)
    text = _stale_text(oldest, page)
    if None in counts and oldest:
        runs = f"{counts[None]} of its {sum(counts.values())} runs"
        text += f" ({runs} name no commit: older code may have trained them.)"
    return text


def _stale_text(commit: str | None, page: Page) -> str:
    """**Stale** with the files changed since `commit`, **Current** where none did (a line
    of its own kind, so that every study says one of the two), or that git cannot tell."""
    changed = page.changed(commit) if commit else None
    if changed is None and commit:  # e.g. a run trained at a commit that was never kept
        return (
            f"(trained at {_short(commit)}, a commit this repository does not hold: cannot "
            "tell whether the code changed since)"
        )
    if changed is None:
        return "(commit unknown: cannot tell whether the code changed since)"
    if not changed:
        return (
            f"**Current:** trained at {_short(commit)}; no file of roformer_jax/ or configs/ "
            "changed since."
        )
    return (
        f"**Stale:** {tables.count_text(len(changed), 'file')} of roformer_jax/ and configs/ "
        f"changed since {_short(commit)} "
        f"(`git diff --stat {_short(commit)} HEAD -- roformer_jax configs`)."
    )


def unmarked(blocks: list[tuple[str, str]]) -> list[str]:
    """The studies of a page with a header but neither a stale nor a reproduced line, from its
    markers' (study, kind) pairs: every study must say whether its code changed since or
    what a rerun gave."""
    headed = {study for study, kind in blocks if kind in HEADERS}
    said = {study for study, kind in blocks if kind in STALE or kind == "reproduced"}
    return sorted(headed - said)


HEADERS = {"header", "vit_header", "bench_header"}  # kinds that introduce a study
# Kinds whose text changes with HEAD, not with the raw files.
STALE = {"stale", "vit_stale", "bench_stale"}


def _training_s(raw: RawStudy) -> float:
    """The runs' own clocks summed: each run's last `elapsed_s` (pauses excluded)."""
    return sum(
        tables.final_values(records, "elapsed_s") or 0.0
        for seeds in raw.results.values()
        for records in seeds
    )


def _command_wall_s(raw: RawStudy) -> float | None:
    """The command's wall time, or None where it is unknown or the study ran in pieces: a
    command that resumed finished runs records only its own part, shorter than its runs'
    training."""
    wall = raw.record["wall_s"]
    return wall if wall and wall >= _training_s(raw) else None


def wall_time_table(page: Page) -> str:
    """Every raw study's training time (the runs' own clocks), scoring time, core-hours and
    command wall time."""
    lines = [
        "| study | runs × seeds | training, all runs | length scoring | core-hours "
        "| command wall time |",
        "|---|---|---|---|---|---|",
    ]
    for name in sorted(os.listdir(page.raw_root)):
        if not os.path.isdir(os.path.join(page.raw_root, name)):
            continue
        own = next(
            (r for r in OWN_RECORDS if os.path.exists(os.path.join(page.raw_root, name, r))), None
        )
        if own is not None:
            lines.append(_own_runs_row(page, name, own))
            continue
        record = os.path.join(page.raw_root, name, study_record.FILE)
        if not os.path.exists(record) or not study_record.is_finished(read_json(record)):
            lines.append(_in_progress_row(os.path.join(page.raw_root, name)))
            continue
        raw = page.study(name)
        training = _training_s(raw)
        scoring = sum(
            read_json(path).get("seconds", 0.0)
            for path in glob.glob(os.path.join(page.raw_root, name, "*", "*", "length_eval", "*"))
        )
        cpus = raw.record["machine"]["cpus"]  # the last command's, which scored the lengths
        runs = _exported_runs(os.path.join(page.raw_root, name))
        core_hours = (sum(s * (c or cpus) for s, c in runs) + cpus * scoring) / 3600
        wall = _command_wall_s(raw)
        lines.append(
            f"| {name} | {sum(len(s) for s in raw.results.values())} | {_minutes(training)} | "
            f"{_minutes(scoring) if scoring else 'n/a'} | {core_hours:.1f} | "
            f"{_minutes(wall) if wall else 'n/a'} |"
        )
    return "\n".join(lines)


# The records of the studies that train their own runs (own_runs): {file: its runs' key}.
OWN_RECORDS = {vit_study.RECORD: "runs", length_bench.RECORD: "arms"}


def _own_runs_row(page: Page, name: str, record_file: str) -> str:
    """A wall-time row for a study of own runs (the ViT study, the bench: each run's own
    clock, which includes its compilation and scoring)."""
    raw_dir = os.path.join(page.raw_root, name)
    record, results = own_runs.read_results(raw_dir, record_file, OWN_RECORDS[record_file])
    training = sum(own_runs.clock_s(r) for seeds in results.values() for r in seeds)
    core_hours = record["machine"]["cpus"] * training / 3600
    runs = sum(len(seeds) for seeds in results.values())
    wall = own_runs.command_wall_s(record, results)
    return (
        f"| {name} | {runs} | {_minutes(training)} | n/a | {core_hours:.1f} | "
        f"{_minutes(wall) if wall else 'n/a'} |"
    )


def _exported_runs(raw_dir: str) -> list[tuple[float, int | None]]:
    """(seconds, cores) of each trainer run exported to raw_dir: its own clock (the last
    `elapsed_s`) and the cores of its last session (None where unrecorded). Runs of one study
    may have had different cores: two studies side by side, a core each (docs/speed.md)."""
    runs = []
    for path in sorted(glob.glob(os.path.join(raw_dir, "*", "*", metrics_lib.METRICS_FILE))):
        records = metrics_lib.read_metrics(os.path.dirname(path))
        sessions = (provenance.read(os.path.dirname(path)) or {}).get("sessions") or [{}]
        cpus = sessions[-1].get("machine", {}).get("cpus")
        runs.append((tables.final_values(records, "elapsed_s") or 0.0, cpus))
    return runs


def _in_progress_row(raw_dir: str) -> str:
    """A wall-time row for a study still running: the runs it has exported so far (compare.py
    and length_study.py --raw_dir export each as it finishes; study.json, where there is
    one yet, says "finished" only once the last is in)."""
    exported = _exported_runs(raw_dir)
    training, runs = sum(s for s, _ in exported), len(exported)
    cpu_s = None if any(c is None for _, c in exported) else sum(s * c for s, c in exported)
    # A study of own runs (own_runs) before its record: its results so far, cores unknown.
    for path in sorted(glob.glob(os.path.join(raw_dir, "*", "*", own_runs.RESULT))):
        training += own_runs.clock_s(read_json(path))
        cpu_s, runs = None, runs + 1
    name = os.path.basename(os.path.normpath(raw_dir))
    core_hours = "n/a" if cpu_s is None else f"{cpu_s / 3600:.1f}"
    minutes = _minutes(training)
    return f"| {name} (in progress) | {runs} so far | {minutes} | n/a | {core_hours} | n/a |"


def own_runs_header(record: dict, results: dict, units: str) -> str:
    """The header of a study of own runs (own_runs: the ViT study, the bench): commit,
    machine, its `units` × seeds, the command's wall time where it has one, the command."""
    machine = record["machine"]
    dirty = " with uncommitted changes" if own_runs.dirty(record, results) else ""
    return (
        f"Ran at {_own_runs_commits(record, results)}{dirty}, {machine_text(machine)}: "
        f"{len(results)} {units} × n = {len(record['config']['seeds'])} seeds; "
        f"{took(own_runs.command_wall_s(record, results))}.\n\n"
        f"    python {shlex.join(record['argv'])}"
    )


def machine_text(machine: dict) -> str:
    """ "2 x86_64 cores (AMD EPYC), JAX 0.10.2 (cpu)": the cores, their kind where recorded
    (since 2026-11-28: float32's last bits differ between kinds), JAX and its backend."""
    kind = f" ({machine['cpu']})" if machine.get("cpu") else ""
    return (
        f"{tables.cores_text(machine['cpus'], machine['architecture'])}{kind}, "
        f"JAX {machine['jax']} ({machine['backend']})"
    )


def _own_runs_commits(record: dict, results: dict) -> str:
    """ "commit X" where every run trained at X; else each commit with its count of runs, and
    how many name none (results record their code since 2026-12-07) beside the commit of the
    last command."""
    counts = own_runs.code_of_runs(record, results)
    if len(counts) == 1 and None not in counts:
        return f"commit {_short(next(iter(counts)))}"
    last = f"the last command ran at {_short(record['code'].get('commit')) or 'an unknown commit'}"
    named = ", ".join(f"{_short(c)} ({_runs(n)})" for c, n in counts.items() if c)
    if not named:
        return f"commits not recorded ({_runs(counts[None])}, which name none; {last})"
    unnamed = ""
    if None in counts:
        unnamed = f", and {_runs(counts[None])} that name{'s' * (counts[None] == 1)} none ({last})"
    return f"commits {named}{unnamed}"


def _runs(n: int) -> str:
    return f"{n} run" + "s" * (n != 1)


def took(wall: float | None) -> str:
    """A header's clause on the command's wall time (None: it ran in pieces)."""
    return (
        f"the command took {_minutes(wall)}" if wall else "it ran in pieces, so no single wall time"
    )


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def _short(commit: str | None) -> str | None:
    return commit[:7] if commit else None
