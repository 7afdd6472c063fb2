"""The report of a study of training curves (experiments/compare.py): its figure and results.md.

`footnote` says what was trained where; `write_report` draws the curves (plots.plot_curves) and
writes the tables (tables.summary_table, tables.paired_table) beside them.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

from roformer_jax.studies import plots
from roformer_jax.studies.tables import (
    curves,
    devices_text,
    paired_curves,
    paired_table,
    summary_table,
)
from roformer_jax.training.config import ExperimentConfig


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
        f"{devices_text(machine)}; unigram cross-entropy of the validation tokens "
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
    loss panels. ValueError for a key that no run logged (a misspelt table_keys entry
    would otherwise be a column of dashes).
    """
    logged = {key for seeds in results.values() for run in seeds for r in run for key in r}
    unknown = [key for key in (*plot_keys, *table_keys) if key not in logged]
    if unknown:
        raise ValueError(
            f"plot_keys/table_keys {unknown}: no run logged them; they logged "
            f"{sorted(logged - {'step'})}"
        )
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
