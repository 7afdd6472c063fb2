"""A length study's tables and report: loss by context length, paired differences from a
baseline, the per-stage training table, and the footnote of what was measured where.

They read the scores `length_study.evaluate_runs` gives: {evaluation: [one {length: {"loss",
"accuracy", ...}} per seed]}; the results page reads the same through page_numbers.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from roformer_jax.studies.stats import t_interval
from roformer_jax.studies.tables import (
    devices_text,
    holm_kept,
    holm_text,
    interval_side,
    interval_text,
    mean_std_text,
    summary_table,
)
from roformer_jax.training.config import ExperimentConfig


def footnote(
    exp: ExperimentConfig, seeds: Sequence[int], targets: int, machine: Mapping, unigram: float
) -> str:
    """The figure's and report's line on what was measured where.

    exp: the baseline evaluation's run config; targets: held-out targets at the first length;
    machine: provenance.machine()'s fields; unigram: Corpus.unigram_cross_entropy().
    """
    data = exp.data
    joined = f" joined to >= {data.min_doc_chars:,} characters" if data.min_doc_chars else ""
    what = "next-token" if data.objective == "clm" else "masked"
    return (
        f"data: {data.source} ({data.doc_separator} documents{joined}), {targets:,} held-out "
        f"{what} targets scored at every length (eval seed {data.eval_seed}); "
        f"{exp.model.num_layers} layers x {exp.model.hidden_size}, {exp.train.steps} steps of "
        f"{exp.train.batch_size} x {data.seq_len}; seeds {tuple(seeds)}; unigram cross-entropy "
        f"{unigram:.3f}; {devices_text(machine)}"
    )


def report(
    config: Mapping,
    runs: Mapping[str, Sequence[ExperimentConfig]],
    results: Mapping[str, Sequence[list[dict]]],
    scores: Mapping[str, Sequence[dict]],
    footnote: str,
) -> str:
    """lengths.md: every table of a length study, under headings.

    config: the study config as a dictionary (eval_lengths, eval_baselines, table_keys, title);
    results: study.run_study's records; scores: evaluate_runs's.
    """
    lengths = tuple(config["eval_lengths"])
    sections = [
        f"# {config['title']}",
        footnote,
        "## Held-out loss at each context length (mean ± std over seeds)",
        length_table(scores, lengths),
        "## Held-out accuracy at each context length",
        length_table(scores, lengths, key="accuracy"),
    ]
    for baseline in config["eval_baselines"]:
        sections += [
            f"## Loss minus {baseline}'s, seed by seed: mean [95% t-interval]",
            length_paired_table(scores, baseline, lengths),
        ]
    sections += ["## Training (final values)", summary_table(results, config["table_keys"])]
    for name, configs in runs.items():
        if configs[0].train.stages:
            sections += [f"## {name}: per stage", stage_table(configs[0], results[name])]
    return "\n\n".join(sections) + "\n"


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
    for name, seeds in scores.items():
        if name == baseline:
            continue
        cells = [interval_text(paired_diffs(scores, name, baseline, n)) for n in lengths]
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_diffs(
    scores: Mapping[str, Sequence[dict]], name: str, baseline: str, length: int
) -> list[float]:
    """Evaluation `name`'s loss at `length` minus the baseline's, seed by seed (seeds where
    both read that length)."""
    return [
        s[length]["loss"] - b[length]["loss"]
        for s, b in zip(scores[name], scores[baseline])
        if length in s and length in b
    ]


def paired_family(
    scores: Mapping[str, Sequence[dict]], pairs: Sequence[Sequence[str]], lengths: Sequence[int]
) -> dict[str, list[float]]:
    """{"A − B at n": A's loss minus B's at n, seed by seed} for each (A, B) of `pairs` at each
    length n: a family of paired intervals, which a multiplicity line corrects for."""
    unknown = sorted({name for pair in pairs for name in pair} - set(scores))
    if unknown:
        raise ValueError(f"pairs name {unknown}, not evaluations of the study: {list(scores)}")
    return {
        _label(name, baseline, n): paired_diffs(scores, name, baseline, n)
        for name, baseline in pairs
        for n in lengths
    }


def multiplicity(
    scores: Mapping[str, Sequence[dict]],
    lengths: Sequence[int],
    baselines: Sequence[str],
    pairs: Sequence[Sequence[str]] | None = None,
) -> str:
    """tables.holm_text over `pairs` (evaluation, baseline) at every length, or without them
    over each evaluation minus each of `baselines` at every length."""
    if pairs:
        what = f"{len(pairs)} chosen pairs at every length"
    else:
        pairs = [[name, b] for b in baselines for name in scores if name != b]
        what = "each evaluation minus " + " and ".join(f'"{b}"' for b in baselines)
        what += " at every length"
    return holm_text(paired_family(scores, pairs, lengths), what)


def verdict_table(
    scores: Mapping[str, Sequence[dict]], pairs: Sequence[Sequence[str]], lengths: Sequence[int]
) -> str:
    """Markdown: for each (evaluation, baseline) of `pairs`, at each length, whether the
    evaluation's loss is lower or higher than the baseline's (its paired 95% t-interval below
    or above 0) or level with it (the interval holds 0), with the mean difference; in bold
    where it stays apart from 0 under Holm's correction for these pairs at these lengths
    (tables.holm_kept over paired_family's family)."""
    family = paired_family(scores, pairs, lengths)
    kept = set(holm_kept(family))
    lines = [
        "| evaluation − baseline | n | " + " | ".join(f"at {n}" for n in lengths) + " |",
        "|---|---|" + "---|" * len(lengths),
    ]
    for name, baseline in pairs:
        labels = [_label(name, baseline, n) for n in lengths]
        cells = [_verdict(family[label], label in kept) for label in labels]
        seeds = max(len(family[label]) for label in labels)
        lines.append(f"| {name} − {baseline} | {seeds} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def _label(name: str, baseline: str, length: int) -> str:
    return f"{name} − {baseline} at {length}"


def _verdict(diffs: list[float], kept: bool) -> str:
    if len(diffs) < 2:
        return "n/a"
    mean, low, high = t_interval(diffs)
    side = {-1: "lower", 1: "higher", 0: "level"}[interval_side(low, high)]
    return f"**{side}** ({mean:+.3f})" if kept else f"{side} ({mean:+.3f})"


def stage_table(cfg: ExperimentConfig, seeds: Sequence[list[dict]], *, last: int = 5) -> str:
    """Markdown, as the RoFormer blog's pre-training table: each stage's length, batch, steps
    and the training loss and accuracy over its last `last` logged steps (mean ± sample std
    over the n seeds)."""
    lines = [
        "| stage | length | batch | steps | tokens/step | n | train loss | train accuracy |",
        "|---|---|---|---|---|---|---|---|",
    ]
    loss, accuracy = (
        stage_values(cfg, seeds, key, last=last) for key in ("train/loss", "train/accuracy")
    )
    for i, (steps, length, batch) in enumerate(_stages(cfg)):
        cells = (mean_std_text(loss[i]), mean_std_text(accuracy[i]))
        lines.append(
            f"| {i + 1} | {length} | {batch} | {steps} | {length * batch:,} | "
            f"{len(seeds)} | {cells[0]} | {cells[1]} |"
        )
    return "\n".join(lines)


def stage_values(
    cfg: ExperimentConfig, seeds: Sequence[list[dict]], key: str, *, last: int = 5
) -> list[list[float]]:
    """[stage][seed]: the mean of `key` over each stage's last `last` logged steps, per seed
    (a seed that logged no `key` in a stage is left out of it)."""
    values, first = [], 0
    for steps, _, _ in _stages(cfg):
        end = first + steps
        per_seed = []
        for records in seeds:
            logged = [r[key] for r in records if first < r["step"] <= end and key in r]
            if logged:
                per_seed.append(float(np.mean(logged[-last:])))
        values.append(per_seed)
        first = end
    return values


def _stages(cfg: ExperimentConfig) -> tuple:
    return cfg.train.stages or ((cfg.train.steps, cfg.data.seq_len, cfg.train.batch_size),)
