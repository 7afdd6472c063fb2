"""Figures: RoPE's long-range decay, MLM loss curves, losses by length and trained attention by
distance, written as PNG files.

matplotlib runs with the Agg backend so that plots work on machines without a display.
"""

import os
import textwrap
from collections.abc import Mapping, Sequence

import numpy as np

from roformer_jax.studies.stats import t_interval


def pyplot():
    """matplotlib's pyplot on the Agg backend, imported at the first plot: ~1 s of import
    that the commands which import this module but draw nothing (a cached rerun) skip."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    return plt


def _save(fig, path: str, *, bottom: float = 0.0, right: float = 1.0) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout(rect=(0, bottom, right, 1))
    fig.savefig(path, dpi=120)
    pyplot().close(fig)
    return path


def plot_decay(distances, values, path: str, *, title: str) -> str:
    """Draws the long-range-decay bound f(r) against relative distance r (the blog's figure).

    Args:
      distances: [K] relative distances.
      values: [K] f(r).
      path: output PNG.
    """
    fig, ax = pyplot().subplots(figsize=(6, 4))
    ax.plot(distances, values, color="tab:blue")
    ax.set_xlabel("relative distance")
    ax.set_ylabel("relative upper bound")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    return _save(fig, path)


def plot_curves(
    curves: Mapping[str, Sequence[Mapping[str, Sequence[float]]]],
    path: str,
    *,
    title: str,
    metrics: Sequence[str] = ("train_loss", "valid_loss"),
    footnote: str = "",
    floor: float | None = None,
    paired: Mapping[str, Mapping[str, Sequence[float]]] | None = None,
    paired_label: str = "",
) -> str:
    """Draws one panel per metric, one line per run name, ±1 sample std (ddof 1) of the seeds
    as a band (none for one seed); then, with `paired`, a panel of each run's difference from
    a baseline with its 95% t-interval as the band (`tables.paired_curves`).

    Args:
      curves: run name -> list (one per seed) of {"step": [T], metric: [T], ...}. Seeds of one
        run are averaged at the steps they share.
      path: output PNG.
      metrics: keys to draw, one panel each.
      footnote: corpus, model, steps and hardware, printed under the panels.
      floor: the unigram cross-entropy, a dashed line in the panels of losses.
      paired: run name -> {"step", "mean", "low", "high": [T], "n": seeds}; paired_label
        names the difference (e.g. "valid/loss_128 − BERT"). Empty: no panel.
    """
    panels = len(metrics) + bool(paired)  # a study of one run has nothing to pair
    # One legend beside the panels, not one over each: a run has one color in every panel, and
    # a study's ten runs' legends would hide the curves they name.
    width = 5.5 * panels + _LEGEND_WIDTH
    fig, axes = pyplot().subplots(1, panels, figsize=(width, 4), squeeze=False)
    colors = {name: f"C{i % 10}" for i, name in enumerate(curves)}  # a run's color in every panel
    for ax, metric in zip(axes[0], metrics):
        _draw_metric(ax, curves, metric, colors, floor=floor if "loss" in metric else None)
    if paired:
        _draw_paired(axes[0][-1], paired, colors, paired_label)
    right = 1 - _LEGEND_WIDTH / width
    handles, labels = axes[0][0].get_legend_handles_labels()
    fig.legend(handles, labels, fontsize=8, loc="center left", bbox_to_anchor=(right, 0.5))
    fig.suptitle(title)
    if footnote:
        fig.text(0.01, 0.01, textwrap.fill(footnote, 105 * panels), fontsize=7, va="bottom")
    return _save(fig, path, bottom=0.09 if footnote else 0.0, right=right)


_LEGEND_WIDTH = 3.0  # inches beside the panels of plot_curves


def _draw_metric(ax, curves, metric: str, colors: Mapping[str, str], *, floor: float | None):
    """plot_curves's panel of one metric: each run's mean over seeds, ±1 sample std as a band."""
    missing = []
    for name, seeds in curves.items():
        steps, values = _aligned(seeds, metric)
        if steps.size == 0:
            missing.append(name)
            continue
        mean, color = values.mean(axis=0), colors[name]
        ax.plot(steps, mean, color=color, label=f"{name} (n={len(values)})")
        if len(values) > 1:
            std = values.std(axis=0, ddof=1)
            ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
    if missing:  # e.g. learned positions evaluated past their table
        ax.set_title(f"no values: {', '.join(missing)}", fontsize=8)
    if floor is not None:
        _draw_floor(ax, floor)
    ax.set_xlabel("step")
    ax.set_ylabel(metric.replace("_", " "))
    ax.grid(alpha=0.3)


def _draw_paired(ax, paired, colors: Mapping[str, str], label: str) -> None:
    """plot_curves's panel of paired differences from the baseline, 95% t-interval as a band."""
    for name, diff in paired.items():
        ax.plot(diff["step"], diff["mean"], color=colors[name], label=f"{name} (n={diff['n']})")
        if diff["n"] > 1:
            ax.fill_between(diff["step"], diff["low"], diff["high"], color=colors[name], alpha=0.2)
    ax.axhline(0.0, color="black", linewidth=0.8)
    ax.set_xlabel("step")
    ax.set_ylabel(label)
    ax.set_title("paired by seed; band: 95% t-interval", fontsize=8)
    ax.grid(alpha=0.3)


def _draw_floor(ax, floor: float) -> None:
    """The unigram line across a panel of losses; where it lies further from the curves than
    their own range, the panel keeps the curves' range and names the line at its edge: a run
    that starts from a trained encoder sits far below unigram, and the line would squash its
    curves flat."""
    low, high = ax.get_ylim()
    ax.axhline(floor, color="black", linestyle="--", linewidth=0.8, label="unigram")
    span = high - low
    if low - span <= floor <= high + span:
        return
    ax.set_ylim(low, high)
    above = floor > high
    ax.annotate(
        f"unigram {floor:.3f} {'↑' if above else '↓'}",
        xy=(0.99, 0.98 if above else 0.02),
        xycoords="axes fraction",
        ha="right",
        va="top" if above else "bottom",
        fontsize=7,
    )


def _aligned(seeds, metric):
    """Steps that every seed logged `metric` at, and the values there: ([T], [S, T])."""
    series = []
    for run in seeds:
        pairs = {s: v for s, v in zip(run["step"], run[metric]) if v is not None}
        series.append(pairs)
    common = sorted(set.intersection(*(set(s) for s in series))) if series else []
    return np.array(common), np.array([[s[t] for t in common] for s in series])


def _mean_error(values: Sequence[float]) -> tuple[float, float]:
    """The mean of `values` and the half-width of its 95% t-interval (0 for one value)."""
    if len(values) < 2:
        return values[0], 0.0
    mean, low, _ = t_interval(values)
    return mean, mean - low


_MORE_COLORS = ("black", "darkgoldenrod", "magenta", "teal", "navy")  # past matplotlib's 10


def plot_lengths(
    scores: Mapping[str, Sequence[Mapping[int, Mapping]]],
    path: str,
    *,
    title: str,
    trained_length: int,
    floor: float | None = None,
    reference: str | None = None,
    footnote: str = "",
) -> str:
    """Two panels: loss against context length, and loss by position at the longest length.

    Args:
      scores: evaluation name -> one {length: scores} per seed (roformer_jax.training.evaluation's
        score_lengths). Lines are means over seeds; the first panel's bars are the 95%
        t-interval of the mean where there are 2 seeds or more.
      trained_length: drawn as a dotted line: what the models were trained at.
      floor: the unigram cross-entropy, drawn as a dashed line.
      reference: an evaluation whose loss at each position (same seed, same targets) the
        position panel subtracts. A model without positions makes a good one: its loss does
        not depend on where a target sits, so what remains is what positions gain or lose
        there, without the difficulty of the tokens that happen to sit in each bin.
      footnote: corpus, targets, model and hardware, wrapped under the panels.
    """

    fig, (by_length, by_position) = pyplot().subplots(1, 2, figsize=(15, 5))
    longest = max(n for seeds in scores.values() for s in seeds for n in s)
    for i, (name, seeds) in enumerate(scores.items()):
        color = f"C{i}" if i < 10 else _MORE_COLORS[(i - 10) % len(_MORE_COLORS)]
        style = dict(color=color, linestyle="--" if i >= 10 else "-", label=name)
        _draw_by_length(by_length, seeds, style)
        if all(longest in s for s in seeds):
            reference_seeds = None if reference is None else scores[reference]
            _draw_by_position(by_position, seeds, longest, reference_seeds, style)
    by_length.set_xscale("log", base=2)
    by_length.set_xlabel("context length (tokens)")
    by_length.set_ylabel(f"held-out MLM loss (n={max(len(s) for s in scores.values())} seeds)")
    by_position.set_xlabel(f"position in a window of {longest} tokens")
    by_position.set_ylabel(
        f"loss − {reference}'s at that position" if reference else "loss at that position"
    )
    for ax in (by_length, by_position):
        ax.axvline(
            trained_length, color="gray", linestyle=":", label=f"trained at {trained_length}"
        )
        ax.grid(alpha=0.3)
    if floor is not None:
        by_length.axhline(floor, color="black", linestyle="--", linewidth=0.8, label="unigram")
        if reference is None:
            by_position.axhline(floor, color="black", linestyle="--", linewidth=0.8)
    handles, labels = by_length.get_legend_handles_labels()
    by_position.legend(handles, labels, fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.suptitle(title)
    if footnote:
        fig.text(0.01, 0.01, textwrap.fill(footnote, 230), fontsize=7, va="bottom")
    return _save(fig, path, bottom=0.07 if footnote else 0.0)


def _draw_by_length(ax, seeds: Sequence[Mapping[int, Mapping]], style: dict) -> None:
    """plot_lengths's first panel, one evaluation: its mean loss over seeds at each length they
    all scored, with the 95% t-interval of the mean as bars."""
    lengths = sorted(set.intersection(*(set(s) for s in seeds)))
    points = [_mean_error([s[n]["loss"] for s in seeds]) for n in lengths]
    means, errors = [mean for mean, _ in points], [error for _, error in points]
    ax.errorbar(lengths, means, yerr=errors, marker="o", ms=3, capsize=2, **style)


def _draw_by_position(ax, seeds, longest: int, reference_seeds, style: dict) -> None:
    """plot_lengths's second panel, one evaluation: its loss by position at the longest length,
    averaged over seeds, less the reference's of the same seed where there is one."""
    curves = np.array([s[longest]["position_loss"] for s in seeds])
    if reference_seeds is not None:
        curves -= np.array([s[longest]["position_loss"] for s in reference_seeds])
    ax.plot(seeds[0][longest]["position_bins"], np.nanmean(curves, 0), **style)


def plot_accuracy_lengths(
    lines: Mapping[str, Mapping[int, Sequence[float]]],
    path: str,
    *,
    title: str,
    controls: Mapping[str, tuple[int, Sequence[float]]] | None = None,
    chance: float | None = None,
    reference: tuple[str, float] | None = None,
    footnote: str = "",
    xlabel: str = "maximum input length (tokens)",
) -> str:
    """Accuracy against maximum input length (or what `xlabel` names): one line per model,
    the 95% t-interval of the mean over seeds as bars (2 seeds or more).

    Args:
      lines: name -> {max length: [accuracy per seed]}.
      controls: name -> (length, [accuracy per seed]), drawn as lone markers.
      chance, reference: horizontal lines (reference: (label, accuracy)).
      footnote: data, model and hardware, wrapped under the panel.
    """
    fig, ax = pyplot().subplots(figsize=(7.5, 4.5))
    for i, (name, points) in enumerate(lines.items()):
        lengths = sorted(points)
        means, errors = zip(*(_mean_error(points[n]) for n in lengths))
        ax.errorbar(lengths, means, yerr=errors, marker="o", capsize=3, color=f"C{i}", label=name)
    markers = "sDv^<>"
    for i, (name, (length, values)) in enumerate((controls or {}).items()):
        mean, error = _mean_error(values)
        ax.errorbar(
            [length],
            [mean],
            yerr=[error],
            marker=markers[i % len(markers)],
            capsize=3,
            linestyle="none",
            color=f"C{i}",
            mfc="white",
            label=name,
        )
    if chance is not None:
        ax.axhline(chance, color="black", linestyle="--", linewidth=0.8, label="chance")
    if reference is not None:
        ax.axhline(reference[1], color="gray", linestyle=":", label=reference[0])
    ax.set_xticks(sorted({n for points in lines.values() for n in points}))
    ax.set_xlabel(xlabel)
    ax.set_ylabel(
        f"test accuracy (n={max(len(p) for s in lines.values() for p in s.values())} seeds)"
    )
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    if footnote:
        fig.text(0.01, 0.01, textwrap.fill(footnote, 120), fontsize=7, va="bottom")
    return _save(fig, path, bottom=0.16 if footnote else 0.0)


def plot_attention_distance(
    weights: Mapping[str, np.ndarray],
    bound: np.ndarray,
    path: str,
    *,
    title: str,
    trained_length: int | None = None,
    footnote: str = "",
) -> str:
    """Trained attention's weight on one key against its distance r = |m − n|, log-log: one
    panel per run, one line per layer (its heads averaged), as a multiple of uniform attention
    (1 = the weight of 1/L on every key); the decay bound's shape f(r)/f(1) (RoPE's, section
    3.4.3) dashed from each panel's mean at r = 1.

    Args:
      weights: run -> [layers, heads, L] mean weight on a key at r = 0 .. L - 1, times L.
      bound: [L] the bound f(r) at r = 0 .. L - 1.
      trained_length: drawn as a vertical line (the rows the runs were trained on).
    """
    names = list(weights)
    fig, axes = pyplot().subplots(
        1, len(names), figsize=(3.2 * len(names), 3.6), squeeze=False, sharey=True
    )
    for ax, name in zip(axes[0], names):
        per_layer = np.nanmean(weights[name], axis=1)  # [layers, L]
        r = np.arange(1, per_layer.shape[-1])
        for layer, line in enumerate(per_layer):
            ax.plot(r, line[1:], color=f"C{layer}", label=f"layer {layer}")
        start = np.nanmean(per_layer[:, 1])
        ax.plot(
            r,
            start * bound[1:] / bound[1],
            color="black",
            linestyle="--",
            linewidth=0.9,
            label="bound f(r)/f(1)",
        )
        ax.axhline(1.0, color="gray", linestyle=":", linewidth=0.8)
        if trained_length is not None:
            ax.axvline(trained_length, color="gray", linewidth=0.6)
        ax.set(xscale="log", yscale="log", title=name, xlabel="distance |m − n|")
        ax.grid(alpha=0.3)
    axes[0][0].set_ylabel("weight on one key × L (1 = uniform)")
    axes[0][-1].legend(fontsize=7, loc="lower left")
    fig.suptitle(title, fontsize=10)
    if footnote:
        fig.text(0.01, 0.01, textwrap.fill(footnote, 140), fontsize=7, va="bottom")
    return _save(fig, path, bottom=0.16 if footnote else 0.0)
