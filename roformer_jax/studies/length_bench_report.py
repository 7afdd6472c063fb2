"""The retrieval bench's tables, verdicts and heat map (studies/length_bench.py's results).

    print(accuracy_table(config, results, "text"), paired_table(config, results, "text"))
    print(verdict_table(config, results, "text"))       # each arm against the baseline
    heat_maps(config, results, "text", "bench.png")     # accuracy by length x depth per arm
    print(needle_table(sweep, 16))  # experiments/needle_sweep.py's, by the place in a chunk

`results` is {arm: [result per seed]} (length_bench.run_study or read_results); an evaluation
set names one of the config's `eval_sets`. Differences are paired by seed (a read arm reads
its trained arm's seed), with 95% t-intervals; verdicts also say where an interval stays
apart from 0 under Holm's correction for every arm at every length of the set.
"""

from __future__ import annotations

import os
import warnings
from collections.abc import Mapping

import numpy as np

from roformer_jax.studies import plots, stats, tables
from roformer_jax.studies.length_bench import eval_lengths


def accuracies(results: Mapping, arm: str, eval_set: str, length: int) -> list[float]:
    """Exact-match accuracy of `arm` at `length`, one per seed."""
    return [r["accuracy"][eval_set][str(length)] for r in results[arm]]


LEARNED = 0.9  # exact match at the trained length from which a seed counts as having learned


def _header(config: Mapping, what: str, extra: tuple[str, ...] = ()) -> list[str]:
    lengths = eval_lengths(config)
    cells = [f"{n}" + (" (trained)" if n == config["train_length"] else "") for n in lengths]
    cells += extra
    return [f"| {what} | " + " | ".join(cells) + " |", "|---|" + "---|" * len(cells)]


def accuracy_table(config: Mapping, results: Mapping, eval_set: str) -> str:
    """Markdown: one row per arm, one column per length; exact match, mean ± sample std over
    seeds; and how many seeds learned the task (LEARNED at the trained length): a mean past
    the training length is a mean over seeds that learned it and seeds that did not."""
    learned = f"seeds ≥ {LEARNED} at {config['train_length']}"
    lines = _header(config, "exact match (mean ± std over seeds)", (learned,))
    for arm in results:
        cells = [
            tables.mean_std_text(accuracies(results, arm, eval_set, n))
            for n in eval_lengths(config)
        ]
        trained = accuracies(results, arm, eval_set, config["train_length"])
        cells.append(f"{sum(a >= LEARNED for a in trained)} of {len(trained)}")
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def paired_differences(config, results, arm: str, eval_set: str, length: int) -> list[float]:
    """`arm`'s accuracy minus the baseline's, seed by seed, at `length`."""
    mine = accuracies(results, arm, eval_set, length)
    return [a - b for a, b in zip(mine, accuracies(results, config["baseline"], eval_set, length))]


def _compared(config: Mapping, results: Mapping) -> list[str]:
    return [arm for arm in results if arm != config["baseline"]]


def paired_table(config: Mapping, results: Mapping, eval_set: str) -> str:
    """Markdown: each arm minus the baseline at each length, mean [95% t-interval]."""
    lines = _header(config, f"minus {config['baseline']}: mean [95% t-interval]")
    for arm in _compared(config, results):
        cells = [
            tables.interval_text(paired_differences(config, results, arm, eval_set, n))
            for n in eval_lengths(config)
        ]
        lines.append(f"| {arm} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def family(config: Mapping, results: Mapping, eval_set: str) -> dict[str, list[float]]:
    """{"ARM at LENGTH": differences over seeds}: every arm at every length of the set."""
    return {
        f"{arm} at {n}": paired_differences(config, results, arm, eval_set, n)
        for arm in _compared(config, results)
        for n in eval_lengths(config)
    }


def verdict(config: Mapping, results: Mapping, eval_set: str, arm: str) -> str:
    """Where the arm's 95% interval against the baseline lies, length by length, then the
    lengths where it stays apart from 0 under Holm (module doc)."""
    where = {side: [] for side in tables.ZERO_SIDES.values()}
    for n in eval_lengths(config):
        diffs = paired_differences(config, results, arm, eval_set, n)
        if len(diffs) < 2:
            raise ValueError(f"a verdict needs 2 seeds or more; {arm} has {len(diffs)}")
        _, low, high = stats.t_interval(diffs)
        where[tables.ZERO_SIDES[tables.interval_side(low, high)]].append(str(n))
    text = "; ".join(f"{side} at {', '.join(n)}" for side, n in where.items() if n)
    kept = tables.holm_kept(family(config, results, eval_set))
    apart = [str(n) for n in eval_lengths(config) if f"{arm} at {n}" in kept]
    holm = f"apart from 0 at {', '.join(apart)}" if apart else "none apart from 0"
    return f"{text} (under Holm: {holm})"


def verdict_table(config: Mapping, results: Mapping, eval_set: str) -> str:
    """Markdown: each arm's verdict against the baseline."""
    lines = [f"| arm − {config['baseline']} | verdict (lengths in tokens) |", "|---|---|"]
    for arm in _compared(config, results):
        lines.append(f"| {arm} | {verdict(config, results, eval_set, arm)} |")
    return "\n".join(lines)


def needle_table(sweep: Mapping, period: int) -> str:
    """Markdown: passkey exact match (experiments/needle_sweep.py's `sweep`) by where the
    needle's marker sits in a `period`-token block (iRoPE's chunk), one column per arm and
    length: the mean over seeds and over every place with that offset, beside how many of
    the needle's digits fall past the block's end."""
    columns = [(arm, n) for arm, by_length in sweep["arms"].items() for n in by_length]
    lines = [
        f"| marker's place in its {period}-token block | digits past the block's end | "
        + " | ".join(f"{arm}, {n} tokens" for arm, n in columns)
        + " |",
        "|---|---|" + "---|" * len(columns),
    ]
    for offset in range(period):
        cells = []
        for arm, n in columns:
            seeds = np.asarray(sweep["arms"][arm][n])  # [seeds, places]
            cells.append(
                f"{seeds[:, (np.arange(seeds.shape[1]) + 1) % period == offset].mean():.2f}"
            )
        past = max(0, offset + sweep["digits"] + 1 - period)
        lines.append(f"| {offset} | {past} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def depth_grid(config: Mapping, results: Mapping, eval_set: str, arm: str) -> np.ndarray:
    """[depth bins, lengths]: accuracy by depth, the mean over seeds (NaN for an empty bin)."""
    lengths = eval_lengths(config)
    seeds = [[r["by_depth"][eval_set][str(n)] for n in lengths] for r in results[arm]]
    values = np.array([[[np.nan if a is None else a for a in b] for b in s] for s in seeds])
    with warnings.catch_warnings():  # a bin empty in every seed stays NaN, without a warning
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.nanmean(values, axis=0).T  # [seeds, lengths, bins] -> [bins, lengths]


def heat_maps(config: Mapping, results: Mapping, eval_set: str, path: str) -> str:
    """One panel per arm: accuracy (mean over seeds) by length (x) and the answer's depth
    (y, the bins of config["depth_edges"]), written as a PNG at `path`."""
    arms, lengths, edges = list(results), eval_lengths(config), config["depth_edges"]
    cols = min(5, len(arms))
    rows = -(-len(arms) // cols)
    fig, axes = plots.pyplot().subplots(
        rows, cols, figsize=(2.6 * cols, 2.4 * rows + 0.6), squeeze=False
    )
    labels = [f"{a:.2g}–{b:.2g}" for a, b in zip(edges[:-1], edges[1:])]
    for ax, arm in zip(axes.ravel(), arms):
        grid = depth_grid(config, results, eval_set, arm)
        ax.imshow(grid, vmin=0, vmax=1, cmap="viridis", origin="lower", aspect="auto")
        for (i, j), value in np.ndenumerate(grid):
            if np.isfinite(value):
                ink = "black" if value > 0.6 else "white"
                ax.text(j, i, f"{value:.2f}", ha="center", va="center", fontsize=6, color=ink)
        ax.set(title=arm, xticks=range(len(lengths)), yticks=range(len(labels)))
        ax.set_xticklabels(lengths, fontsize=7)
        ax.set_yticklabels(labels, fontsize=6)
        ax.title.set_fontsize(8)
    for ax in axes.ravel()[len(arms) :]:
        ax.axis("off")
    n = len(next(iter(results.values())))
    fig.suptitle(
        f"{config['title']} ({eval_set}; x: length, y: depth; mean of {n} seeds)", fontsize=9
    )
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plots.pyplot().close(fig)
    return path
