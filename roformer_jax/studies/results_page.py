"""docs/results.md's generated parts, rebuilt from the studies' raw folders alone.

    text = results_page.render(page, "docs/results/raw", figures_dir="docs/results")
    print(results_page.differences(page, results_page.render(page, "docs/results/raw")))

The page is prose written by hand, with generated parts between markers:

    <!-- generated: STUDY KIND(ARGS) -->...<!-- end generated -->

STUDY names a folder of the raw root (study_record.read_raw), or is "raw" for all of them;
KIND is a key of KINDS, called with ARGS, Python literals by position or name
(`length_paired_table("RoPE")`, `diff("RoPE + YaRN", "RoPE", 2048)`, `diff("none", step=500)`).
A table or figure sits on lines of its own between its markers; an inline value (INLINE)
sits inside a sentence. `render` rewrites the inside of every marker pair with the same table
and figure functions the study entry points use (study, length_study, plots), fed from the
raw files, and leaves everything else as written.

Staleness: `stale()` marks a study whose oldest commit (of its runs' training sessions, else
study.json's) differs from HEAD in roformer_jax/ or configs/ and counts the files
(`git diff --name-only <commit> HEAD -- roformer_jax configs`), or says "commit unknown"
without git or the commit. `differences` blanks those marks on both sides
before comparing: the check asks whether the page's numbers are what the raw files give,
which a commit to the code does not change; a check that failed on every such commit could
only be fixed by rerunning the studies, and would teach everyone to ignore it. Writing the
page refreshes the marks.
"""

from __future__ import annotations

import ast
import dataclasses
import difflib
import glob
import json
import os
import re
import shlex
import textwrap
from collections.abc import Callable

import numpy as np

from roformer_jax.studies import (
    compare_report,
    length_study,
    long_doc_report,
    long_doc_study,
    plots,
    run_dirs,
    study_record,
    tables,
)
from roformer_jax.studies.position_table import POSITION_TABLE_FILE
from roformer_jax.studies.study_record import RawStudy, read_raw
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import provenance

MARKER = re.compile(r"<!-- generated: (\S+) (\w+)\((.*?)\) -->(.*?)<!-- end generated -->", re.S)
ALL = "raw"  # the STUDY of a marker whose kind reads every raw folder
FIGURES = "results"  # figures' folder, relative to the page


@dataclasses.dataclass
class _Page:
    raw_root: str
    figures_dir: str | None  # None: figures are named, not drawn
    changed: Callable[[str], list[str] | None]
    studies: dict[str, RawStudy] = dataclasses.field(default_factory=dict)

    def study(self, name: str) -> RawStudy:
        if name not in self.studies:
            if not os.path.isdir(os.path.join(self.raw_root, name)):
                folders = sorted(os.listdir(self.raw_root))
                raise ValueError(f"no study {name!r} in {self.raw_root}: {folders}")
            self.studies[name] = read_raw(os.path.join(self.raw_root, name))
        return self.studies[name]


def render(
    text: str,
    raw_root: str,
    *,
    figures_dir: str | None = None,
    changed: Callable[[str], list[str] | None] = provenance.code_changed,
) -> str:
    """`text` with the inside of every marker pair regenerated (module doc).

    figures_dir: where `figure()` draws its PNG; None draws nothing (a check compares text).
    changed: commit -> the code files changed since (None: unknown), for `stale()`.
    Raises ValueError for an unknown kind or study, and for a marker without its end or its
    KIND(ARGS), which would otherwise swallow the text up to the next block's end.
    """
    opened, blocks = text.count("<!-- generated: "), len(MARKER.findall(text))
    if opened != blocks:
        raise ValueError(
            f"{opened} '<!-- generated: ' markers but {blocks} whole blocks: one lacks its "
            "'<!-- end generated -->' or is not 'STUDY KIND(ARGS) -->'"
        )
    page = _Page(raw_root, figures_dir, changed)

    def replace(match: re.Match) -> str:
        name, kind, args, _ = match.groups()
        if kind not in KINDS:
            raise ValueError(f"{match.group(0)[:80]}: unknown kind {kind!r}; one of {list(KINDS)}")
        target = page if name == ALL else page.study(name)
        extra = {"page": page} if kind in _USES_PAGE else {}
        call = ast.parse(f"f({args})", mode="eval").body  # literals only, by position or name
        positional = [ast.literal_eval(arg) for arg in call.args]
        named = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        inner = KINDS[kind](target, *positional, **named, **extra)
        if kind not in INLINE:
            inner = f"\n{inner}\n"
        return match.group(0)[: match.start(4) - match.start(0)] + inner + "<!-- end generated -->"

    return MARKER.sub(replace, text)


def differences(page: str, regenerated: str, *, name: str = "docs/results.md") -> str:
    """A unified diff of the page against its regenerated text, stale marks left out (module
    doc); "" where they agree."""

    def without_marks(text):
        return MARKER.sub(lambda m: m.group(0) if m.group(2) != "stale" else "", text)

    return "".join(
        difflib.unified_diff(
            without_marks(page).splitlines(keepends=True),
            without_marks(regenerated).splitlines(keepends=True),
            fromfile=name,
            tofile=f"{name}, regenerated",
        )
    )


# Kinds: (RawStudy, *args) -> markdown; (_Page) for ALL; _USES_PAGE also get page=.


def _header(raw: RawStudy) -> str:
    """The commit and machine a study ran on, and its command."""
    record, code, machine = raw.record, raw.record["code"], raw.record["machine"]
    commit = "commit " + (_short(code.get("commit")) or "unknown")
    if code.get("first_commit"):
        commit = f"commits {_short(code['first_commit'])}–{_short(code.get('commit'))}"
    if len(raw.commits) > 1:
        commit = (f"commits {', '.join(map(_short, raw.commits))} (oldest first; each run's "
                  "provenance.json says which)")  # fmt: skip
    dirty = " with uncommitted changes" if code.get("dirty") else ""
    wall = _command_wall_s(raw)
    line = (
        f"Ran at {commit}{dirty}, {machine['cpus']} {machine['architecture']} cores, "
        f"JAX {machine['jax']} ({machine['backend']}): {len(raw.runs)} runs × n = "
        f"{len(raw.config['seeds'])} seeds; "
        + (
            f"the command took {_minutes(wall)}."
            if wall
            else "it ran in pieces, so no single wall time."
        )
    )
    if record.get("reconstructed"):
        line += " (Its study.json was reconstructed by hand from this page's earlier text.)"
    command = textwrap.wrap(
        "python " + shlex.join(record["argv"]), 90, break_long_words=False, break_on_hyphens=False
    )
    return line + "\n\n    " + " \\\n        ".join(command)


def _stale(raw: RawStudy, *, page: _Page) -> str:
    """Whether the code changed since the study ran, with how much and the command that lists
    it, so that a reader can judge whether it touches the study's numbers."""
    # The oldest code that trained any run: what changed since then may touch some numbers.
    code = raw.record["code"]
    commit = raw.commits[0] if raw.commits else code.get("first_commit") or code.get("commit")
    changed = page.changed(commit) if commit else None
    if changed is None:
        return "(commit unknown: cannot tell whether the code changed since)"
    if not changed:
        return f"The code is as at {_short(commit)}."
    return (
        f"**Stale:** {len(changed)} files of roformer_jax/ and configs/ changed since "
        f"{_short(commit)} (`git diff --stat {_short(commit)} HEAD -- roformer_jax configs`)."
    )


def _figure(raw: RawStudy, *, page: _Page) -> str:
    """The study's figure, drawn into page.figures_dir when given, with its n."""
    config, seeds = raw.config, raw.config["seeds"]
    if page.figures_dir is not None:
        path = os.path.join(page.figures_dir, f"{raw.name}.png")
        machine, unigram = raw.record["machine"], raw.record["unigram_cross_entropy"]
        if raw.scores is not None:
            exp = raw.runs[config["evaluations"][config["eval_baselines"][0]]["run"]][0]
            note = length_study.footnote(exp, seeds, _targets(raw), machine, unigram)
            plots.plot_lengths(
                raw.scores, path, title=config["title"], floor=unigram, footnote=note,
                trained_length=length_study.trained_length(exp),
                reference=config.get("position_reference"),
            )  # fmt: skip
        else:
            exp, baseline = next(iter(raw.runs.values()))[0], config.get("baseline")
            paired = None
            if baseline is not None:
                paired = tables.paired_curves(raw.results, baseline, _paired_key(raw))
            plots.plot_curves(
                tables.curves(raw.results, config["plot_keys"]), path, title=config["title"],
                metrics=config["plot_keys"],
                footnote=compare_report.footnote(exp, seeds, machine, unigram), floor=unigram,
                paired=paired, paired_label=f"{_paired_key(raw)} − {baseline}",
            )  # fmt: skip
    spread = (
        "bars: 95% t-interval of the mean"
        if raw.scores is not None
        else "bands: ±1 sample std (ddof 1); differences from the baseline: 95% t-interval"
    )
    n = f"n = {len(seeds)} seeds per line" + (f"; {spread}" if len(seeds) > 1 else "")
    return f"![{raw.name}]({FIGURES}/{raw.name}.png)\n\n*{n}.*"


def _length_table(raw: RawStudy, key: str = "loss") -> str:
    return length_study.length_table(raw.scores, raw.config["eval_lengths"], key=key)


def _length_paired_table(raw: RawStudy, baseline: str) -> str:
    return length_study.length_paired_table(raw.scores, baseline, raw.config["eval_lengths"])


def _summary_table(raw: RawStudy) -> str:
    return tables.summary_table(raw.results, raw.config["table_keys"])


def _extremes_table(raw: RawStudy, extremes: dict[str, str]) -> str:
    """tables.extremes_table: `extremes_table({"train/min_denominator": "min"})`."""
    return tables.extremes_table(raw.results, extremes)


def _extremes(raw: RawStudy, run: str, key: str, how: str) -> str:
    """The range over seeds of each seed's extreme (tables.seed_extremes) of `key` in `run`, as
    the extremes table rounds it: `extremes("eq 18", "train/min_denominator", "min")`."""
    values = [v for v in tables.seed_extremes(raw.results[run], key, how) if v is not None]
    if not values:
        raise ValueError(f"run {run!r} never logged {key!r}")
    low, high = min(values), max(values)
    return f"{low:.3g}" if f"{low:.3g}" == f"{high:.3g}" else f"{low:.3g} to {high:.3g}"


def _paired_key(raw: RawStudy) -> str:
    """The key compare.py pairs: the validation loss at the runs' training length."""
    return f"valid/loss_{next(iter(raw.runs.values()))[0].data.seq_len}"


def _paired_table(raw: RawStudy) -> str:
    return tables.paired_table(raw.results, raw.config["baseline"], _paired_key(raw))


def _stage_table(raw: RawStudy, run: str) -> str:
    return length_study.stage_table(raw.runs[run][0], raw.results[run])


def _mean(raw: RawStudy, evaluation: str, length: int, key: str = "loss") -> str:
    """An evaluation's mean `key` at `length` over seeds, as the tables round it."""
    return f"{np.mean([s[length][key] for s in raw.scores[evaluation]]):.3f}"


def _diff(
    raw: RawStudy,
    name: str,
    baseline: str | None = None,
    length: int | None = None,
    step: int | None = None,
) -> str:
    """Mean [95% t-interval] of a paired difference, seed by seed: an evaluation minus
    `baseline` at `length` (length studies), or a run's validation loss minus `baseline`'s (the
    study's baseline run by default), final or at `step` (others)."""
    if raw.scores is not None:
        diffs = length_study.paired_diffs(raw.scores, name, baseline, length)
    else:
        baseline = baseline or raw.config["baseline"]
        diffs = tables.paired_diffs(raw.results, name, baseline, _paired_key(raw), step)
    return tables.interval_text(diffs)


def _below_from(raw: RawStudy, name: str, baseline: str) -> str:
    """ "step S" from which run `name`'s validation loss stays below `baseline`'s, the 95%
    interval of the paired difference under zero at every later evaluation; else "never"."""
    curve = tables.paired_curves(raw.results, baseline, _paired_key(raw))[name]
    step = tables.below_from(curve)
    return "never" if step is None else f"step {step:,}"


def _position_table(raw: RawStudy, run: str, *, page: _Page) -> str:
    """What training did to run `run`'s learned position table, seed by seed, beside its word
    table (experiments/position_table.py)."""
    lines = [
        "| seed | step | position table: moved | row norm (at init) | neighbor cosine "
        "| word table: moved | row norm (at init) |",
        "|---|---|---|---|---|---|---|",
    ]
    for cfg in raw.runs[run]:
        path = os.path.join(run_dirs.run_dir(os.path.join(page.raw_root, raw.name), run, cfg.seed),
                            POSITION_TABLE_FILE)  # fmt: skip
        if not os.path.exists(path):
            raise ValueError(f"no {path}: run experiments/position_table.py with --raw_dir")
        r = _read_json(path)
        p, w = r["position"], r["word"]
        lines.append(
            f"| {cfg.seed} | {r['step']:,} | {p['moved']:.3f} | {p['row_norm']:.3f} "
            f"({p['row_norm_initial']:.3f}) | {p['neighbor_cosine']:+.3f} | {w['moved']:.3f} "
            f"| {w['row_norm']:.3f} ({w['row_norm_initial']:.3f}) |"
        )
    return "\n".join(lines)


def _unigram(raw: RawStudy) -> str:
    return f"{raw.record['unigram_cross_entropy']:.3f}"


def _targets(raw: RawStudy) -> int:
    """Held-out targets every evaluation scores (the same at every length, and for every run
    of a study on a fixed evaluation set)."""
    if raw.scores is not None:
        return next(iter(raw.scores.values()))[0][raw.config["eval_lengths"][0]]["targets"]
    key = _paired_key(raw).replace("loss", "tokens")
    return int(tables.final_values(next(iter(raw.results.values()))[0], key))


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


def _wall_time_table(page: _Page) -> str:
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
        if not os.path.exists(os.path.join(page.raw_root, name, study_record.FILE)):
            lines.append(_in_progress_row(os.path.join(page.raw_root, name)))
            continue
        raw = page.study(name)
        training = _training_s(raw)
        scoring = sum(
            _read_json(path).get("seconds", 0.0)
            for path in glob.glob(os.path.join(page.raw_root, name, "*", "*", "length_eval", "*"))
        )
        core_hours = raw.record["machine"]["cpus"] * (training + scoring) / 3600
        wall = _command_wall_s(raw)
        lines.append(
            f"| {name} | {sum(len(s) for s in raw.results.values())} | {_minutes(training)} | "
            f"{_minutes(scoring) if scoring else 'n/a'} | {core_hours:.1f} | "
            f"{_minutes(wall) if wall else 'n/a'} |"
        )
    return "\n".join(lines)


def _in_progress_row(raw_dir: str) -> str:
    """A wall-time row for a study still running: the runs it has exported so far (compare.py
    --raw_dir exports each as it finishes; study.json comes with the last)."""
    training, cpu_s, runs = 0.0, 0.0, 0
    for path in sorted(glob.glob(os.path.join(raw_dir, "*", "*", metrics_lib.METRICS_FILE))):
        records = metrics_lib.read_metrics(os.path.dirname(path))
        elapsed = tables.final_values(records, "elapsed_s") or 0.0
        sessions = (provenance.read(os.path.dirname(path)) or {}).get("sessions") or [{}]
        cpus = sessions[-1].get("machine", {}).get("cpus")
        training += elapsed
        cpu_s = None if cpu_s is None or cpus is None else cpu_s + elapsed * cpus
        runs += 1
    name = os.path.basename(os.path.normpath(raw_dir))
    core_hours = "n/a" if cpu_s is None else f"{cpu_s / 3600:.1f}"
    minutes = _minutes(training)
    return f"| {name} (in progress) | {runs} so far | {minutes} | n/a | {core_hours} | n/a |"


def _long_doc(raw: RawStudy, page: _Page) -> long_doc_study.Results:
    """The long-document study's results, from its raw folder (long_doc_study.read_results)."""
    return long_doc_study.read_results(os.path.join(page.raw_root, raw.name), raw.config)


def _long_doc_figure(raw: RawStudy, *, page: _Page) -> str:
    """long_doc_report.figure, drawn into page.figures_dir when given, with its n."""
    if page.figures_dir is not None:
        long_doc_report.figure(
            _long_doc(raw, page), os.path.join(page.figures_dir, f"{raw.name}.png"),
            title=raw.config["title"],
            footnote=long_doc_report.footnote(raw.config, raw.record["machine"]),
        )  # fmt: skip
    n = len(raw.config["finetune_seeds"])
    return f"![{raw.name}]({FIGURES}/{raw.name}.png)\n\n*n = {n} fine-tuning seeds per point" + (
        "; bars: 95% t-interval of the mean.*" if n > 1 else ".*"
    )


def _long_doc_table(raw: RawStudy, key: str = "test/accuracy", *, page: _Page) -> str:
    return long_doc_report.accuracy_table(_long_doc(raw, page), key)


def _long_doc_paired_table(raw: RawStudy, split: str = "test", *, page: _Page) -> str:
    return long_doc_report.paired_table(_long_doc(raw, page), split)


def _long_doc_survival_table(raw: RawStudy, split: str = "test", *, page: _Page) -> str:
    return long_doc_report.survival_table(_long_doc(raw, page), split)


def _long_doc_bow(raw: RawStudy, *, page: _Page) -> str:
    return long_doc_report.bow_text(_long_doc(raw, page))


def _finetuning(raw: RawStudy, folder: str, page: _Page) -> long_doc_study.Finetuning:
    """A fine-tuning run kept under the study's raw folder (experiments/finetune.py
    --raw_dir=<raw folder>/<folder>); "../<study>/<folder>" reads another study's."""
    return long_doc_study.read_finetuning(os.path.join(page.raw_root, raw.name, folder))


def _finetuning_table(raw: RawStudy, runs: dict, split: str = "test", *, page: _Page) -> str:
    """long_doc_report.finetuning_table of fine-tuning runs, {row name: folder}."""
    return long_doc_report.finetuning_table(
        {name: _finetuning(raw, f, page) for name, f in runs.items()}, split
    )


def _finetuning_paired_table(raw: RawStudy, pairs: dict, *, page: _Page) -> str:
    """long_doc_report.finetuning_paired_table, {row name: [folder, baseline folder]}."""
    return long_doc_report.finetuning_paired_table(
        {
            name: (_finetuning(raw, a, page), _finetuning(raw, b, page))
            for name, (a, b) in pairs.items()
        }
    )


def _read_json(path: str) -> dict:
    with open(path, encoding="utf-8") as f:
        return json.load(f)


def _minutes(seconds: float) -> str:
    return f"{int(seconds // 60)} min {int(seconds % 60)} s"


def _short(commit: str | None) -> str | None:
    return commit[:7] if commit else None


KINDS = {
    "header": _header,
    "stale": _stale,
    "figure": _figure,
    "length_table": _length_table,
    "length_paired_table": _length_paired_table,
    "summary_table": _summary_table,
    "paired_table": _paired_table,
    "extremes_table": _extremes_table,
    "extremes": _extremes,
    "stage_table": _stage_table,
    "mean": _mean,
    "diff": _diff,
    "below_from": _below_from,
    "position_table": _position_table,
    "unigram": _unigram,
    "targets": lambda raw: f"{_targets(raw):,}",  # _targets, as the footnote prints it
    "wall_time_table": _wall_time_table,
    # The long-document study (experiments/long_doc_study.py): its tables read the fine-tuning
    # runs, survival.json and bow.json of the raw folder.
    "long_doc_figure": _long_doc_figure,
    "long_doc_table": _long_doc_table,
    "long_doc_paired_table": _long_doc_paired_table,
    "long_doc_survival_table": _long_doc_survival_table,
    "long_doc_bow": _long_doc_bow,
    # Fine-tuning runs beside a study's pre-training (issue 16's pilot).
    "finetuning_table": _finetuning_table,
    "finetuning_paired_table": _finetuning_paired_table,
}
INLINE = {"stale", "mean", "diff", "below_from", "unigram", "targets", "long_doc_bow", "extremes"}
_USES_PAGE = {"stale", "figure", "position_table", "long_doc_figure", "long_doc_table",
              "long_doc_paired_table", "long_doc_survival_table", "long_doc_bow",
              "finetuning_table", "finetuning_paired_table"}  # fmt: skip
