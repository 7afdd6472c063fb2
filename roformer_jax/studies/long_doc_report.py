"""The long-document study's tables, figure and report, from long_doc_study.Results alone.

    results = long_doc_study.read_results(workdir_or_raw_dir, config)
    print(accuracy_table(results)); print(paired_table(results))

The same functions make <workdir>/long_doc.md and docs/results.md's generated sections
(results_page.py), so the page can be rebuilt from the raw folder. Accuracies are of the best
checkpoint (by validation accuracy) of each fine-tuning run; seeds are fine-tuning seeds.
"""

from __future__ import annotations

import os
from collections.abc import Mapping, Sequence

import numpy as np

from roformer_jax.studies import plots, stats, tables
from roformer_jax.studies.long_doc_study import Cell, Finetuning, Results, cells

CHANCE = 0.5  # two choices, balanced labels


def _values(results: Results, name: str, key: str) -> list[float]:
    return [f[key] for f in results.final[name]]


def accuracy_table(results: Results, key: str = "test/accuracy") -> str:
    """Markdown: one row per encoder, one column per length and the control; mean ± sample
    std over seeds of `key`, or why a cell was not run."""
    config = results.config
    short = min(config["lengths"])
    header = [f"{n}" for n in config["lengths"]] + [f"{short} {config['control_truncation']}"]
    lines = [
        f"| encoder ({key}) | " + " | ".join(header) + " | seeds |",
        "|---|" + "---|" * (len(header) + 1),
    ]
    per_encoder = len(header)
    all_cells = cells(config)
    for row in range(len(all_cells) // per_encoder):
        group = all_cells[row * per_encoder : (row + 1) * per_encoder]
        encoder = next(c.encoder for c in group if isinstance(c, Cell))
        texts = [
            tables.mean_std_text(_values(results, c.name, key)) if isinstance(c, Cell) else c
            for c in group
        ]
        seeds = len(config["finetune_seeds"])
        lines.append(f"| {encoder} | " + " | ".join(texts) + f" | {seeds} |")
    return "\n".join(lines)


def comparisons(config: Mapping) -> list[tuple[str, str, str]]:
    """(label, cell, baseline cell) of every paired comparison: each longer length against the
    shortest, the control against the shortest, and each pair of `encoder_pairs` at every
    length both can read."""
    run = {c.name for c in cells(config) if isinstance(c, Cell)}
    short, out = min(config["lengths"]), []
    for encoder in config["runs"]:
        base = Cell(encoder, short, "head").name
        for length in config["lengths"][1:]:
            if Cell(encoder, length, "head").name in run:
                out.append(
                    (f"{encoder}: {length} − {short}", Cell(encoder, length, "head").name, base)
                )
        control = Cell(encoder, short, config["control_truncation"]).name
        out.append((f"{encoder}: {short} {config['control_truncation']} − {short}", control, base))
    for a, b in config["encoder_pairs"]:
        for length in config["lengths"]:
            x, y = Cell(a, length, "head").name, Cell(b, length, "head").name
            if x in run and y in run:
                out.append((f"{a} − {b} @ {length}", x, y))
    return out


def paired_table(results: Results, split: str = "test") -> str:
    """Markdown: every comparison's accuracy difference seed by seed, its mean with the 95%
    t-interval (n − 1 degrees of freedom), and each seed's exact McNemar test on the
    per-example predictions (examples only the first run gets right : only the baseline
    gets right, two-sided p)."""
    lines = [
        f"| comparison ({split}) | accuracy difference: mean [95% interval] | per seed | "
        "McNemar per seed (only first : only baseline, p) |",
        "|---|---|---|---|",
    ]
    key = f"{split}/accuracy"
    for label, name, base in comparisons(results.config):
        diffs = [a - b for a, b in zip(_values(results, name, key), _values(results, base, key))]
        tests = [
            _mcnemar(a[split], b[split])
            for a, b in zip(results.predictions[name], results.predictions[base])
        ]
        per_seed = ", ".join(f"{d:+.3f}" for d in diffs)
        mcnemar = ", ".join(f"{t.only_a}:{t.only_b} p={t.p:.2g}" for t in tests)
        lines.append(f"| {label} | {tables.interval_text(diffs)} | {per_seed} | {mcnemar} |")
    return "\n".join(lines)


def _correct(predictions: Mapping) -> np.ndarray:
    """bool [N] of a split's {"prediction": [N], "label": [N]}."""
    return np.asarray(predictions["prediction"]) == np.asarray(predictions["label"])


def _mcnemar(a: Mapping, b: Mapping) -> stats.McNemar:
    if a["label"] != b["label"]:
        raise ValueError("paired runs were scored on different examples (labels differ)")
    return stats.mcnemar_exact(_correct(a), _correct(b))


def finetuning_table(runs: Mapping[str, Finetuning], split: str = "test") -> str:
    """Markdown: one row per named fine-tuning run (a pilot's), with its validation accuracy
    after each epoch, its training accuracy logged last in each epoch (against which a gap
    shows memorizing), the best epoch, and that epoch's valid and `split` accuracy: how many
    right of how many, and the sign test's p against chance (two choices)."""
    lines = [
        "| fine-tuning | valid accuracy after each epoch | training accuracy, end of each "
        f"epoch | best epoch | valid | {split} | {split} against chance |",
        "|---|---|---|---:|---:|---:|---:|",
    ]
    for name, run in runs.items():
        epochs = [r for r in run.records if "valid/accuracy" in r]
        best = next(int(r["epoch"]) for r in epochs if r["step"] == run.final["best_step"])
        correct = _correct(run.predictions[split])
        right, n = int(correct.sum()), len(correct)
        valid, train = (
            ", ".join(f"{r[key]:.3f}" for r in epochs)
            for key in ("valid/accuracy", "train/accuracy")
        )
        lines.append(
            f"| {name} | {valid} | {train} | {best} | "
            f"{run.final['valid/accuracy']:.3f} | {right / n:.3f} ({right} of {n}) | "
            f"p = {stats.sign_test(right, n):.2g} |"
        )
    return "\n".join(lines)


def finetuning_paired_table(
    pairs: Mapping[str, tuple[Finetuning, Finetuning]], splits: Sequence[str] = ("valid", "test")
) -> str:
    """Markdown: for each named pair of fine-tuning runs (one seed each, scored on the same
    examples), the accuracy difference (first minus second) on each split and its exact
    McNemar test (examples only the first gets right : only the second, two-sided p). With one
    seed a run, the test is over examples, not seeds: it says whether the two fine-tuned
    models differ, not how a rerun of either would land."""
    header = " | ".join(f"{s} difference | {s} McNemar (only first : only second)" for s in splits)
    lines = [f"| comparison | {header} |", "|---|" + "---:|---|" * len(splits)]
    for label, (a, b) in pairs.items():
        cells = []
        for split in splits:
            test = _mcnemar(a.predictions[split], b.predictions[split])
            diff = (test.only_a - test.only_b) / len(a.predictions[split]["label"])
            cells += [f"{diff:+.3f}", f"{test.only_a} : {test.only_b}, p = {test.p:.2g}"]
        lines.append(f"| {label} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def survival_table(results: Results, split: str = "test") -> str:
    """Markdown: each cell's accuracy, pooled over seeds, by the fraction of B's tokens that
    survive truncation at the shortest length (the same bins for every cell, so a gain at a
    longer length can be seen to sit where the short input lost most of B)."""
    config = results.config
    short = min(config["lengths"])
    kept = np.asarray(results.survival[str(short)][split])
    edges = config["survival_edges"]
    bins = [
        f"[{lo:.2f}, {hi:.2f}{']' if i == len(edges) - 2 else ')'}"
        for i, (lo, hi) in enumerate(zip(edges[:-1], edges[1:]))
    ]
    counts = [b.count for b in stats.binned_accuracy(kept, np.ones(len(kept), bool), edges=edges)]
    lines = [
        f"| cell ({split}; fraction of B kept at {short}) | "
        + " | ".join(f"{b} (n = {c})" for b, c in zip(bins, counts))
        + " |",
        "|---|" + "---|" * len(bins),
    ]
    for name in (c.name for c in cells(config) if isinstance(c, Cell)):
        correct = np.concatenate([_correct(p[split]) for p in results.predictions[name]])
        pooled = stats.binned_accuracy(
            np.tile(kept, len(results.predictions[name])), correct, edges=edges
        )
        lines.append(
            f"| {name} | "
            + " | ".join("–" if b.accuracy is None else f"{b.accuracy:.3f}" for b in pooled)
            + " |"
        )
    return "\n".join(lines)


def survival_summary(results: Results, split: str = "test") -> str:
    """One line per length: the mean, min and max fraction of B's tokens kept."""
    return "\n".join(
        f"- at {length}: mean {np.mean(v):.3f}, min {np.min(v):.3f}, max {np.max(v):.3f} "
        f"({len(v)} triplets)"
        for length, v in ((k, results.survival[k][split]) for k in results.survival)
    )


def bow_text(results: Results) -> str:
    """The bag-of-words baseline's accuracies, the exact binomial p of its test accuracy
    against chance (a McNemar-style two-sided test: right vs wrong at p = 1/2), and its
    accuracies on what each length reads where bow.json has them."""
    bow = results.bow
    right = _correct(bow["test"])
    p = stats.mcnemar_exact(right, ~right).p  # right vs wrong, each 1/2 under chance
    views = "; ".join(
        f"{n}: valid {v['valid/accuracy']:.3f}, test {v['test/accuracy']:.3f}"
        for n, v in bow.get("views", {}).items()
    )
    return (
        f"valid {bow['valid/accuracy']:.3f}, test {bow['test/accuracy']:.3f} (test against "
        f"chance: {int(right.sum())} of {len(right)} right, p = {p:.2g})"
        + (f"; on what each length reads, {views}" if views else "")
    )


def figure(results: Results, path: str, *, title: str, footnote: str = "") -> str:
    """Test accuracy against maximum length, one line per encoder (95% t-interval bars); the
    control as a marker at the shortest length; the bag-of-words baseline and chance as
    horizontal lines."""
    config, key = results.config, "test/accuracy"
    lines, controls = {}, {}
    for cell in (c for c in cells(config) if isinstance(c, Cell)):
        values = _values(results, cell.name, key)
        if cell.truncation == "head":
            lines.setdefault(cell.encoder, {})[cell.max_length] = values
        else:
            controls[f"{cell.encoder} ({cell.truncation})"] = (cell.max_length, values)
    return plots.plot_accuracy_lengths(
        lines,
        path,
        controls=controls,
        title=title,
        chance=CHANCE,
        reference=("bag of words", results.bow["test/accuracy"]),
        footnote=footnote,
    )


def footnote(config: Mapping, machine: Mapping) -> str:
    """What was trained where: the corpus, the encoders' size and pre-training, the task and
    fine-tuning settings, the machine (provenance.machine()'s fields)."""
    exp, ft, task = config["experiment"], config["finetune"], config["task"]
    model = exp["model"]
    return (
        f"pre-training: {exp['data']['source']} ({exp['data']['tokenizer']}), "
        f"{model['num_layers']} layers x {model['hidden_size']}, {config['pretrain_steps']} "
        f"steps in stages (steps, length, batch) rescaled from {dict(config['schedules'])}, "
        f"pre-training seeds {tuple(config['seeds'])}; task: {task['format']} triplets of "
        f"{_windows_text(task)}; fine-tuning: {ft['finetune']['epochs']} epochs "
        f"of batch {ft['finetune']['batch_size']}, lr {ft['optim']['learning_rate']}, seeds "
        f"{tuple(config['finetune_seeds'])}; {tables.devices_text(machine)}"
    )


def _windows_text(task: Mapping) -> str:
    """The task's windows: "760-token windows", or "windows of 256 to 760 tokens (budgets
    drawn per article)". A study.json from before min_window_tokens existed had fixed ones."""
    low, high = task.get("min_window_tokens") or task["window_tokens"], task["window_tokens"]
    if low == high:
        return f"{high}-token windows"
    return f"windows of {low} to {high} tokens (budgets drawn per article)"


def report(results: Results, *, title: str, footnote: str, figure_name: str) -> str:
    """The markdown report: footnote, figure, tables."""
    short = min(results.config["lengths"])
    return (
        f"# {title}\n\n{footnote}\n\n![accuracy]({figure_name})\n\n"
        f"## Accuracy (best validation epoch; mean ± std over seeds)\n\n"
        f"{accuracy_table(results, 'test/accuracy')}\n\n{accuracy_table(results, 'valid/accuracy')}"
        f"\n\n## Paired by fine-tuning seed\n\n{paired_table(results)}\n\n"
        f"## Accuracy by how much of B survives truncation at {short}\n\n"
        f"{survival_summary(results)}\n\n{survival_table(results)}\n\n"
        f"## Bag-of-words logistic baseline\n\n{bow_text(results)}\n"
    )


def write(results: Results, workdir: str, *, title: str, footnote: str) -> tuple[str, str]:
    """Writes <workdir>/long_doc.png and <workdir>/long_doc.md; returns their paths."""
    png = figure(results, os.path.join(workdir, "long_doc.png"), title=title, footnote=footnote)
    md = os.path.join(workdir, "long_doc.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write(report(results, title=title, footnote=footnote, figure_name="long_doc.png"))
    return png, md
