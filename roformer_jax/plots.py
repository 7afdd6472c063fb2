"""Figures: RoPE's long-range decay and MLM loss curves, written as PNG files.

matplotlib runs with the Agg backend so that plots work on machines without a display.
"""

import os
from collections.abc import Mapping, Sequence

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402
import numpy as np  # noqa: E402


def _save(fig, path: str, *, bottom: float = 0.0) -> str:
    os.makedirs(os.path.dirname(os.path.abspath(path)), exist_ok=True)
    fig.tight_layout(rect=(0, bottom, 1, 1))
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return path


def plot_decay(distances, values, path: str, *, title: str) -> str:
    """Draws the long-range-decay bound f(r) against relative distance r (the blog's figure).

    Args:
      distances: [K] relative distances.
      values: [K] f(r).
      path: output PNG.
    """
    fig, ax = plt.subplots(figsize=(6, 4))
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
) -> str:
    """Draws one panel per metric, one line per run name, the spread of seeds as a band.

    Args:
      curves: run name -> list (one per seed) of {"step": [T], metric: [T], ...}. Seeds of one
        run are averaged at the steps they share.
      path: output PNG.
      metrics: keys to draw, one panel each.
      footnote: corpus, model, steps and hardware, printed under the panels.
    """
    fig, axes = plt.subplots(1, len(metrics), figsize=(5.5 * len(metrics), 4), squeeze=False)
    colors = {name: f"C{i % 10}" for i, name in enumerate(curves)}  # a run's color in every panel
    for ax, metric in zip(axes[0], metrics):
        missing = []
        for name, seeds in curves.items():
            steps, values = _aligned(seeds, metric)
            if steps.size == 0:
                missing.append(name)
                continue
            mean, color = values.mean(axis=0), colors[name]
            ax.plot(steps, mean, color=color, label=f"{name} (n={len(values)})")
            if len(values) > 1:
                std = values.std(axis=0)
                ax.fill_between(steps, mean - std, mean + std, color=color, alpha=0.2)
        if missing:  # e.g. learned positions evaluated past their table
            ax.set_title(f"no values: {', '.join(missing)}", fontsize=8)
        ax.set_xlabel("step")
        ax.set_ylabel(metric.replace("_", " "))
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle(title)
    if footnote:
        fig.text(0.01, 0.01, footnote, fontsize=7, va="bottom")
    return _save(fig, path, bottom=0.05 if footnote else 0.0)


def _aligned(seeds, metric):
    """Steps that every seed logged `metric` at, and the values there: ([T], [S, T])."""
    series = []
    for run in seeds:
        pairs = {s: v for s, v in zip(run["step"], run[metric]) if v is not None}
        series.append(pairs)
    common = sorted(set.intersection(*(set(s) for s in series))) if series else []
    return np.array(common), np.array([[s[t] for t in common] for s in series])
