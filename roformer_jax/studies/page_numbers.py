"""The results page's blocks of numbers: a study's figure, its tables and the values quoted in
its prose, each from the raw files through the functions the studies' entry points use
(tables, length_report, plots). Each is a kind of results_page.KINDS: (RawStudy, *args) ->
markdown.
"""

from __future__ import annotations

import dataclasses
import os

import numpy as np

from roformer_jax.nn import rope_reference
from roformer_jax.studies import (
    compare_report,
    length_report,
    length_study,
    plots,
    reproduction,
    run_dirs,
    stats,
    study_record,
    tables,
)
from roformer_jax.studies.page_source import Page, read_json
from roformer_jax.studies.position_table import POSITION_TABLE_FILE, POSITION_TABLE_STEPS_FILE
from roformer_jax.studies.study_record import RawStudy

FIGURES = "results"  # figures' folder, relative to the page


def figure(
    raw: RawStudy,
    curves: bool = False,
    runs: list | None = None,
    baseline: str | None = None,
    *,
    page: Page,
) -> str:
    """The study's figure, drawn into page.figures_dir when given, with its n: a length
    study's loss by length, or with `curves` its runs' training curves (those of every other
    study), of `runs` alone where given (a joined study's, study_record.join), differences
    from `baseline` where given (else the study's baseline)."""
    if runs is not None:
        raw = dataclasses.replace(
            raw, runs={n: raw.runs[n] for n in runs}, results={n: raw.results[n] for n in runs}
        )
    config, seeds = raw.config, raw.config["seeds"]
    by_length = raw.scores is not None and not curves
    name = raw.name + ("_curves" if raw.scores is not None and curves else "")
    if page.figures_dir is not None:
        path = os.path.join(page.figures_dir, f"{name}.png")
        machine, unigram = raw.record["machine"], raw.record["unigram_cross_entropy"]
        if by_length:
            exp = raw.runs[config["evaluations"][config["eval_baselines"][0]]["run"]][0]
            note = length_report.footnote(exp, seeds, targets(raw), machine, unigram)
            plots.plot_lengths(
                raw.scores,
                path,
                title=config["title"],
                floor=unigram,
                footnote=note,
                trained_length=length_study.trained_length(exp),
                reference=_present(config.get("position_reference"), raw.scores),
            )
        else:
            exp, baseline = next(iter(raw.runs.values()))[0], baseline or config.get("baseline")
            paired = None
            if baseline is not None:
                paired = tables.paired_curves(raw.results, baseline, _paired_key(raw))
            plots.plot_curves(
                tables.curves(raw.results, config["plot_keys"]),
                path,
                title=config["title"],
                metrics=config["plot_keys"],
                footnote=compare_report.footnote(exp, seeds, machine, unigram),
                floor=unigram,
                paired=paired,
                paired_label=f"{_paired_key(raw)} − {baseline}",
            )
    spread = (
        "bars: 95% t-interval of the mean"
        if by_length
        else "bands: ±1 sample std (ddof 1); differences from the baseline: 95% t-interval"
    )
    counts = sorted({len(configs) for configs in raw.runs.values()})  # a joined study's differ
    n = str(counts[0]) if len(counts) == 1 else f"{counts[0]}–{counts[-1]}"
    n = f"n = {n} seeds per line" + (f"; {spread}" if counts[-1] > 1 else "")
    return f"![{name}]({FIGURES}/{name}.png)\n\n*{n}.*"


def _present(evaluation: str | None, scores: dict) -> str | None:
    """`evaluation` if it has scores: a study in progress may not have scored it yet."""
    return evaluation if evaluation in scores else None


def length_table(raw: RawStudy, key: str = "loss") -> str:
    return length_report.length_table(raw.scores, raw.config["eval_lengths"], key=key)


def length_paired_table(raw: RawStudy, baseline: str) -> str:
    return length_report.length_paired_table(raw.scores, baseline, raw.config["eval_lengths"])


def summary_table(raw: RawStudy) -> str:
    return tables.summary_table(raw.results, raw.config["table_keys"])


def extremes_table(raw: RawStudy, extremes: dict[str, str]) -> str:
    """tables.extremes_table: `extremes_table({"train/min_denominator": "min"})`."""
    return tables.extremes_table(raw.results, extremes)


def extremes(raw: RawStudy, run: str, key: str, how: str) -> str:
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


def paired_table(raw: RawStudy) -> str:
    return tables.paired_table(raw.results, raw.config["baseline"], _paired_key(raw))


def multiplicity(raw: RawStudy, pairs: list | None = None) -> str:
    """tables.holm_text over the study's paired intervals: `pairs` [[run, baseline], ...]
    (final values), else the paired table (each run minus the baseline, final); in a length
    study, `pairs` of evaluations at every length (length_verdicts' family), else each
    evaluation minus each of its baselines at every length."""
    if raw.scores is None:
        key, base = _paired_key(raw), raw.config["baseline"]
        chosen = pairs or [[name, base] for name in raw.results if name != base]
        family = {f"{a} − {b}": tables.paired_diffs(raw.results, a, b, key) for a, b in chosen}
        what = "final" if pairs else f'each run minus "{base}", final'
        return tables.holm_text(family, what)
    config = raw.config
    return length_report.multiplicity(
        raw.scores, config["eval_lengths"], config["eval_baselines"], pairs
    )


def length_verdicts(raw: RawStudy, pairs: list) -> str:
    """A length study's verdicts: each [evaluation, baseline] of `pairs` lower, higher or
    level at every length, bold where Holm's correction for these pairs at every length
    keeps it, as `multiplicity(pairs)` says (length_report.verdict_table)."""
    return length_report.verdict_table(raw.scores, pairs, raw.config["eval_lengths"])


def stage_table(raw: RawStudy, run: str) -> str:
    return length_report.stage_table(raw.runs[run][0], raw.results[run])


def stage_change(
    raw: RawStudy, run: str, stage: int, earlier: int, key: str = "accuracy", held_out=False
) -> str:
    """Mean [95% t-interval] of run `run`'s training `key` at the end of stage `stage` minus
    at the end of stage `earlier` (1-based, as the stage table numbers them), seed by seed;
    `held_out`: the held-out `key` of the evaluation at each stage's last step instead
    (`stage_held_out_table`'s)."""
    values = _stage_ends(raw, run, key, held_out)
    if {len(values[stage - 1]), len(values[earlier - 1])} != {len(raw.results[run])}:
        raise ValueError(f"{run!r}: a seed logged no {key} in stage {earlier} or {stage}")
    return tables.interval_text([a - b for a, b in zip(values[stage - 1], values[earlier - 1])])


def stage_held_out_table(raw: RawStudy, run: str) -> str:
    """Each stage's model read on the held-out set at one length (the run's data.seq_len), by
    the evaluation at the stage's last step (mean ± sample std over seeds): unlike the
    training accuracy of `stage_table`, the same text at the same length for every stage."""
    cfg = raw.runs[run][0]
    length = cfg.data.seq_len
    loss, accuracy = (_stage_ends(raw, run, key, True) for key in ("loss", "accuracy"))
    lines = [
        f"| stage | length | steps | n | held-out loss at {length} | "
        f"held-out accuracy at {length} |",
        "|---|---|---|---|---|---|",
    ]
    for i, (steps, stage_length, _) in enumerate(cfg.train.stages):
        lines.append(
            f"| {i + 1} | {stage_length} | {steps} | {len(loss[i])} | "
            f"{tables.mean_std_text(loss[i])} | {tables.mean_std_text(accuracy[i])} |"
        )
    return "\n".join(lines)


def _stage_ends(raw: RawStudy, run: str, key: str, held_out: bool) -> list[list[float]]:
    """[stage][seed] of `key`: training's over each stage's last 5 logged steps, or the
    held-out evaluation's at the stage's last step (an error where a stage does not end on
    an evaluation)."""
    cfg, seeds = raw.runs[run][0], raw.results[run]
    if not held_out:
        return length_report.stage_values(cfg, seeds, f"train/{key}")
    full_key, end = f"valid/{key}_{cfg.data.seq_len}", 0
    for steps, _, _ in cfg.train.stages:
        end += steps
        if any(not any(r["step"] == end and full_key in r for r in s) for s in seeds):
            raise ValueError(
                f"{run!r} has no {full_key} at step {end}, where stage ends: its stages "
                "are read held out only where every one ends on an evaluation"
            )
    return length_report.stage_values(cfg, seeds, full_key, last=1)


def mean(raw: RawStudy, evaluation: str, length: int, key: str = "loss") -> str:
    """An evaluation's mean `key` at `length` over seeds, as the tables round it."""
    return f"{np.mean([s[length][key] for s in raw.scores[evaluation]]):.3f}"


def diff(
    raw: RawStudy,
    name: str,
    baseline: str | None = None,
    length: int | None = None,
    step: int | None = None,
) -> str:
    """Mean [95% t-interval] of a paired difference, seed by seed: an evaluation minus
    `baseline` at `length` (length studies), or, without a length, a run's validation loss
    minus `baseline`'s (the study's baseline run by default), final or at `step`."""
    if length is not None:
        return tables.interval_text(length_report.paired_diffs(raw.scores, name, baseline, length))
    return tables.interval_text(_run_diffs(raw, name, baseline, step))


# tables.interval_side in verdict()'s words, and in claim()'s (a claim that loss is lower).
VERDICTS = {-1: "lower than", 0: "level with", 1: "higher than"}
CLAIMS = {-1: "shown", 0: "not shown", 1: "contradicted"}


def verdict(raw: RawStudy, name: str, baseline: str | None = None, step: int | None = None) -> str:
    """Where diff's 95% interval lies (the same arguments, without a length): "lower than",
    "higher than", or "level with" where it holds 0, for a sentence "A's loss is ... B's";
    a ValueError under two seeds, where there is no interval to read (say one seed instead)."""
    return VERDICTS[_side(raw, name, baseline, step)[0]]


def claim(raw: RawStudy, name: str, baseline: str | None = None, step: int | None = None) -> str:
    """README's status of the claim that run `name`'s loss is below `baseline`'s (verdict's
    arguments): "shown", "not shown" (the interval holds 0) or "contradicted", and its n."""
    side, n = _side(raw, name, baseline, step)
    return f"{CLAIMS[side]} (n = {n})"


def _run_diffs(raw: RawStudy, name: str, baseline: str | None, step: int | None) -> list[float]:
    """A run's validation loss minus `baseline`'s (the study's by default), seed by seed."""
    baseline = baseline or raw.config["baseline"]
    return tables.paired_diffs(raw.results, name, baseline, _paired_key(raw), step)


def _side(raw: RawStudy, name: str, baseline: str | None, step: int | None) -> tuple[int, int]:
    """(tables.interval_side of diff's interval, its seeds); ValueError under two seeds."""
    diffs = _run_diffs(raw, name, baseline, step)
    if len(diffs) < 2:
        baseline = baseline or raw.config["baseline"]
        raise ValueError(f"{name} − {baseline}: {len(diffs)} seed(s), no interval to judge by")
    _, low, high = stats.t_interval(diffs)
    return tables.interval_side(low, high), len(diffs)


def length_change(raw: RawStudy, name: str, length: int, shorter: int) -> str:
    """Mean [95% t-interval] of evaluation `name`'s loss at `length` minus its loss at
    `shorter`, seed by seed (length studies): what the extra context does to one model."""
    diffs = [s[length]["loss"] - s[shorter]["loss"] for s in raw.scores[name]]
    return tables.interval_text(diffs)


def below_from(raw: RawStudy, name: str, baseline: str) -> str:
    """ "step S" from which run `name`'s validation loss stays below `baseline`'s, the 95%
    interval of the paired difference under zero at every later evaluation; else "never"."""
    curve = tables.paired_curves(raw.results, baseline, _paired_key(raw))[name]
    step = tables.below_from(curve)
    return "never" if step is None else f"step {step:,}"


def reaches(raw: RawStudy, name: str, baseline: str) -> str:
    """ "step S" at which run `name`'s validation loss first reaches `baseline`'s final one
    (tables.reaches), said to be an upper bound where S is its first evaluation, else "not by
    step N" (its last step)."""
    key = _paired_key(raw)
    step = tables.reaches(raw.results, name, baseline, key)
    if step is None:
        return f"not by step {raw.results[name][0][-1]['step']:,}"
    first = min(r["step"] for r in raw.results[name][0] if r.get(key) is not None)
    return f"step {step:,}" + (
        " (its first evaluation: it may have been sooner)" if step == first else ""
    )


def position_table(raw: RawStudy, *runs: str, page: Page) -> str:
    """What training did to the learned position table of each run in `runs`, seed by seed,
    beside its word table (experiments/position_table.py); a column names the run when there
    are several."""
    records = [
        (run, cfg.seed, r) for run in runs for cfg, r in _position_files(raw, run, page, False)
    ]
    return _table_changes(records, named=len(runs) > 1)


def position_table_steps(raw: RawStudy, run: str, *, page: Page) -> str:
    """position_table at every checkpoint the runs kept (position_table.py --every_checkpoint)."""
    files = _position_files(raw, run, page, True)
    return _table_changes([(run, cfg.seed, r) for cfg, records in files for r in records])


def _position_files(raw: RawStudy, run: str, page: Page, every: bool) -> list:
    name, flag = (
        (POSITION_TABLE_STEPS_FILE, " --every_checkpoint") if every else (POSITION_TABLE_FILE, "")
    )
    found = []
    for cfg in raw.runs[run]:
        path = _raw_file(raw, page, run, cfg.seed, name)
        if not os.path.exists(path):
            raise ValueError(f"no {path}: run experiments/position_table.py{flag} with --raw_dir")
        found.append((cfg, read_json(path)))
    return found


def _raw_file(raw: RawStudy, page: Page, run: str, seed: int, name: str) -> str:
    """The path of file `name` beside seed `seed` of run `run` in the study's raw folder (of
    a joined study, the first of its folders that has it)."""
    paths = [
        os.path.join(run_dirs.run_dir(os.path.join(page.raw_root, folder), run, seed), name)
        for folder in raw.name.split(study_record.JOIN)
    ]
    return next((path for path in paths if os.path.exists(path)), paths[0])


def _table_changes(records: list[tuple[str, int, dict]], named: bool = False) -> str:
    run = ("| run ", "|---") if named else ("", "")
    lines = [
        f"{run[0]}| seed | step | position table: moved | row norm (at init) | neighbor cosine "
        "| word table: moved | row norm (at init) |",
        f"{run[1]}|---|---|---|---|---|---|---|",
    ]
    for name, seed, r in records:
        p, w = r["position"], r["word"]
        lines.append(
            (f"| {name} " if named else "")
            + f"| {seed} | {r['step']:,} | {p['moved']:.3f} | {p['row_norm']:.3f} "
            f"({p['row_norm_initial']:.3f}) | {p['neighbor_cosine']:+.3f} | {w['moved']:.3f} "
            f"| {w['row_norm']:.3f} ({w['row_norm_initial']:.3f}) |"
        )
    return "\n".join(lines)


def reproduced(raw: RawStudy, *, page: Page) -> str:
    """What the study's reruns at a later commit gave (experiments/reproduce.py), one
    sentence per rerun run; "not rerun" when there is none."""
    sentences = []
    for run, seeds in raw.runs.items():
        for cfg in seeds:
            path = _raw_file(raw, page, run, cfg.seed, reproduction.FILE)
            if os.path.exists(path):
                r = read_json(path)
                commit = r["commit"][:7] if r["commit"] else "an unknown commit"
                commit += " (uncommitted changes)" if r["dirty"] else ""
                cpu = r.get("machine", {}).get("cpu")  # recorded since 2026-11-28
                commit += f" on {cpu}" if cpu else ""
                sentences.append(
                    f"{run}, seed {cfg.seed}, rerun at {commit}: {reproduction.summary(r)}."
                )
    return " ".join(sentences) or "Not rerun at a later commit."


def attention_distance_figure(raw: RawStudy, length: int, *, page: Page) -> str:
    """The runs' trained attention by distance (experiments/attention_distance.py), one panel
    per run, against RoPE's decay bound (plots.plot_attention_distance)."""
    weights, cfg = _attention_distance(raw, length, page)
    name = f"{raw.name}_attention_{length}"
    if page.figures_dir is not None:
        plots.plot_attention_distance(
            {run: np.asarray(r["weight"]) * length for run, r in weights.items()},
            _decay_bound(cfg, length),
            os.path.join(page.figures_dir, f"{name}.png"),
            title=f"{raw.config['title']}: attention by distance, read at {length} tokens",
            trained_length=length_study.trained_length(cfg),
        )
    return f"![{name}]({FIGURES}/{name}.png)\n\n*Seed 0 of each run; heads averaged.*"


def attention_distance_table(raw: RawStudy, length: int, distances: list, *, page: Page) -> str:
    """Each run's and layer's weight on one key at distance 1 (× uniform), and at each of
    `distances` as a fraction of that; RoPE's bound f(r)/f(1) as the last row."""
    weights, cfg = _attention_distance(raw, length, page)
    head = "| run | layer | at 1 (× uniform) | " + " | ".join(f"{d} / 1" for d in distances)
    lines = [head + " |", "|---|---|---|" + "---|" * len(distances)]
    for run, record in weights.items():
        for layer, heads in enumerate(np.asarray(record["weight"]) * length):
            line = np.nanmean(heads, axis=0)  # [L]
            ratios = " | ".join(f"{line[d] / line[1]:.3f}" for d in distances)
            lines.append(f"| {run} | {layer} | {line[1]:.2f} | {ratios} |")
    bound = _decay_bound(cfg, length)
    ratios = " | ".join(f"{bound[d] / bound[1]:.3f}" for d in distances)
    lines.append(f"| RoPE's bound f(r)/f(1), d = {cfg.model.head_dim} | | | {ratios} |")
    return "\n".join(lines)


def _attention_distance(raw: RawStudy, length: int, page: Page) -> tuple[dict, object]:
    """{run: its seed 0's attention_distance_<length>.json} for the runs that have one, and
    the first such run's config."""
    found, first = _seed0_records(raw, page, f"attention_distance_{length}.json")
    if not found:
        raise ValueError(
            f"no attention_distance_{length}.json in {raw.name}: run "
            "experiments/attention_distance.py with --raw_dir"
        )
    return found, first


def logit_decay_table(raw: RawStudy, length: int, distances: list, *, page: Page) -> str:
    """Each RoPE run's and layer's mean size of the relative part of its logit for unit q
    and k (studies/logit_decay.py), heads averaged, at each of `distances`, and in brackets
    the mean of RoPE's decay bound over the same pairs; a line saying it is not measured yet
    where no run of the study has the file."""
    name = f"logit_decay_{length}.json"
    found, _ = _seed0_records(raw, page, name)
    if not found:
        return (
            f"*Not measured yet: no {name} in {raw.name} (experiments/attention_distance.py "
            f"--measure=logit_terms --length={length} --raw_dir=...).*"
        )
    head = "| run | layer | " + " | ".join(f"r = {d}" for d in distances) + " |"
    lines = [head, "|---|---|" + "---|" * len(distances)]
    for run, record in found.items():
        for layer, (term, bound) in enumerate(zip(record["term"], record["bound"], strict=True)):
            term, bound = np.nanmean(term, axis=0), np.nanmean(bound, axis=0)  # [L]
            cells = " | ".join(f"{term[d]:.3f} ({bound[d]:.2f})" for d in distances)
            lines.append(f"| {run} | {layer} | {cells} |")
    return "\n".join(lines)


def logit_decay_claim(raw: RawStudy, length: int, near: int, far: int, *, page: Page) -> str:
    """README's cells (inline, "STATUS | MEASURED") on whether the first RoPE run's relative
    logit term decays with distance as its bound does (logit_decay_table's file): the mean
    over layers and heads of its size |Z| at `far` over that at `near`, beside the same ratio of the
    bound; "not measured yet" where no run has the file."""
    name = f"logit_decay_{length}.json"
    found, _ = _seed0_records(raw, page, name)
    if not found:
        return "not measured yet | no logit terms yet"
    run, record = next(iter(found.items()))
    ratios = []
    for key in ("term", "bound"):
        by_distance = np.nanmean(np.asarray(record[key], float), axis=(0, 1))  # [L]
        ratios.append(by_distance[far] / by_distance[near])
    term, bound = ratios
    status = (
        "does not decay"
        if term >= 1
        else "decays faster than its bound"
        if term < bound
        else "decays, slower than its bound"
    )
    return (
        f"{status} ({run}, seed 0) | its size at r = {far} is {term:.2f} of r = {near}; "
        f"the bound's {bound:.2f}"
    )


def _seed0_records(raw: RawStudy, page: Page, name: str) -> tuple[dict, object]:
    """{run: its seed 0's raw file `name`} for the runs that have one, and the first such
    run's config (None where none has)."""
    found, first = {}, None
    for run, seeds in raw.runs.items():
        path = _raw_file(raw, page, run, seeds[0].seed, name)
        if os.path.exists(path):
            found[run], first = read_json(path), first or seeds[0]
    return found, first


def _decay_bound(cfg, length: int) -> np.ndarray:
    return rope_reference.long_range_decay(
        np.arange(length), dim=cfg.model.head_dim, base=cfg.model.position_section.base
    )


def unigram(raw: RawStudy) -> str:
    return f"{raw.record['unigram_cross_entropy']:.3f}"


def targets(raw: RawStudy) -> int:
    """Held-out targets every evaluation scores (the same at every length, and for every run
    of a study on a fixed evaluation set)."""
    if raw.scores is not None:
        return next(iter(raw.scores.values()))[0][raw.config["eval_lengths"][0]]["targets"]
    key = _paired_key(raw).replace("loss", "tokens")
    return int(tables.final_values(next(iter(raw.results.values()))[0], key))
