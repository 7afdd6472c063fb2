"""A study's numbers as text: curves, summary, paired and extremes tables, and the interval and
mean ± std texts they print, from the runs' metrics records alone.

`results` throughout is {run name: [metrics records of each seed]}, as study.run_study returns
them and study_record.read_raw reads them back; runs of one seed see the same batches and masks,
so differences are taken seed by seed (paired) before they are averaged.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

import numpy as np

from roformer_jax.studies.stats import holm, paired_t_p, t_interval


def curves(results: Mapping[str, Sequence[list[dict]]], keys: Sequence[str]) -> dict:
    """{name: [{"step": [...], key: [...]} per seed]} from metrics records, for plots."""
    out = {}
    for name, seeds in results.items():
        out[name] = []
        for records in seeds:
            series = {"step": [r["step"] for r in records]}
            for key in keys:
                series[key] = [r.get(key) for r in records]
            out[name].append(series)
    return out


def paired_curves(
    results: Mapping[str, Sequence[list[dict]]], baseline: str, key: str
) -> dict[str, dict[str, list[float]]]:
    """Each run's `key` minus the baseline's, seed by seed, through training:
    {name: {"step", "mean", "low", "high": [T]}}, the 95% t-interval of the mean difference
    at each step both logged in every seed (low = high = mean for one seed)."""
    out = {}
    for name, seeds in results.items():
        if name == baseline:
            continue
        pairs = [
            (
                {r["step"]: r[key] for r in run if r.get(key) is not None},
                {r["step"]: r[key] for r in base if r.get(key) is not None},
            )
            for run, base in zip(seeds, results[baseline])
        ]
        steps = sorted(set.intersection(*(set(a) & set(b) for a, b in pairs))) if pairs else []
        rows = []
        for step in steps:
            diffs = [a[step] - b[step] for a, b in pairs]
            rows.append(t_interval(diffs) if len(diffs) > 1 else (diffs[0],) * 3)
        mean, low, high = (list(column) for column in zip(*rows)) if rows else ([], [], [])
        out[name] = {"step": steps, "mean": mean, "low": low, "high": high, "n": len(pairs)}
    return out


def final_values(records: list[dict], key: str) -> float | None:
    """The last value of `key` in a run's records (None if it was never logged)."""
    values = [r[key] for r in records if r.get(key) is not None]
    return values[-1] if values else None


def summary_table(results: Mapping[str, Sequence[list[dict]]], keys: Sequence[str]) -> str:
    """Markdown table: one row per run, mean ± sample std (ddof 1) of each key's final value.

    With one seed the value alone: no spread can be estimated from one run.
    """
    header = "| run | seeds | " + " | ".join(keys) + " | wall time (s) |"
    lines = [header, "|" + "---|" * (len(keys) + 3)]
    for name, seeds in results.items():
        cells = []
        for key in [*keys, "elapsed_s"]:
            values = [v for v in (final_values(r, key) for r in seeds) if v is not None]
            cells.append(mean_std_text(values))
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def extremes_table(results: Mapping[str, Sequence[list[dict]]], extremes: Mapping[str, str]) -> str:
    """Markdown table: one row per run, each key's most extreme value over all of training
    ("min" or "max", as `extremes` says for that key), seed by seed.

    Not a mean over seeds: an instability (a denominator near zero, a gradient spike) is the
    one seed it happens in. "–" where a run never logged the key (e.g. softmax attention has
    no denominator to watch).
    """
    keys = list(extremes)
    lines = [
        "| run | seeds | " + " | ".join(f"{extremes[k]} {k} (per seed)" for k in keys) + " |",
        "|" + "---|" * (len(keys) + 2),
    ]
    for name, seeds in results.items():
        cells = [
            ", ".join(
                "–" if v is None else f"{v:.3g}" for v in seed_extremes(seeds, key, extremes[key])
            )
            for key in keys
        ]
        lines.append(f"| {name} | {len(seeds)} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def seed_extremes(seeds: Sequence[list[dict]], key: str, how: str) -> list[float | None]:
    """Each seed's smallest ("min") or largest ("max") `key` over all of its records; None for
    a seed that never logged it."""
    pick = {"min": min, "max": max}[how]
    per_seed = [[r[key] for r in records if r.get(key) is not None] for records in seeds]
    return [pick(v) if v else None for v in per_seed]


def paired_table(results: Mapping[str, Sequence[list[dict]]], baseline: str, key: str) -> str:
    """Markdown table: each run's final `key` minus the baseline's, seed by seed.

    Runs of one seed see the same batches and masks, so much of the spread over seeds cancels
    in these differences: a sharper comparison than two means ± std. The mean difference
    comes with its 95% t-interval (n - 1 degrees of freedom); an interval that excludes 0
    is a difference that the seeds do not explain.
    """
    if baseline not in results:
        raise ValueError(f"baseline {baseline!r} is not one of the runs {list(results)}")
    lines = [
        f"| run − {baseline} | {key}: mean [95% interval] | n | per seed |",
        "|---|---|---|---|",
    ]
    for name in results:
        if name == baseline:
            continue
        diffs = paired_diffs(results, name, baseline, key)
        per_seed = ", ".join(f"{d:+.3f}" for d in diffs) or "n/a"
        lines.append(f"| {name} | {interval_text(diffs)} | {len(diffs)} | {per_seed} |")
    return "\n".join(lines)


def paired_diffs(
    results: Mapping[str, Sequence[list[dict]]],
    name: str,
    baseline: str,
    key: str,
    step: int | None = None,
) -> list[float]:
    """Run `name`'s `key` minus the baseline's, seed by seed (seeds where both have it): the
    final values, or those logged at `step`."""

    def value(records):
        if step is None:
            return final_values(records, key)
        logged = [r[key] for r in records if r["step"] == step and r.get(key) is not None]
        return logged[-1] if logged else None

    base = [value(r) for r in results[baseline]]
    return [
        v - b
        for v, b in zip((value(r) for r in results[name]), base)
        if v is not None and b is not None
    ]


def below_from(curve: Mapping[str, list[float]]) -> int | None:
    """The first step from which a paired_curves entry's interval lies below zero at every
    later step (the run stays ahead of the baseline to the end); None if it does not end
    below zero."""
    first = None
    for step, high in zip(curve["step"], curve["high"]):
        first = (step if first is None else first) if high < 0 else None
    return first


def reaches(
    results: Mapping[str, Sequence[list[dict]]], name: str, baseline: str, key: str
) -> int | None:
    """The first step at which run `name`'s `key` (mean over seeds, at the steps every seed
    logged) is at or below run `baseline`'s final value (mean over seeds); None if never: how
    much of the baseline's training the run needed to match where the baseline ended."""
    target = float(np.mean([final_values(records, key) for records in results[baseline]]))
    by_step = [{r["step"]: r[key] for r in run if r.get(key) is not None} for run in results[name]]
    for step in sorted(set.intersection(*(set(seed) for seed in by_step))):
        if np.mean([seed[step] for seed in by_step]) <= target:
            return step
    return None


# interval_side() in the verdicts' words, in the order they list the sides.
ZERO_SIDES = {1: "above zero", -1: "below zero", 0: "holds zero"}


def interval_side(low: float, high: float) -> int:
    """Where a 95% interval [low, high] lies: -1 below 0, +1 above it, 0 where it holds 0."""
    return -1 if high < 0 else 1 if low > 0 else 0


def count_text(n: int, noun: str) -> str:
    """ "1 run", "2 runs": a count of `noun` in words."""
    return f"{n} {noun}" if n == 1 else f"{n} {noun}s"


def cores_text(cpus: int, kind: str = "") -> str:
    """ "1 core", "2 x86_64 cores" (kind "x86_64"): a record's machine["cpus"] in words."""
    return count_text(cpus, f"{kind} core".strip())


def devices_text(machine: Mapping) -> str:
    """ "1 cpu device(s), 2 cores (x86_64)": where a study's runs ran (a record's machine)."""
    return (
        f"{machine['device_count']} {machine['backend']} device(s), "
        f"{cores_text(machine['cpus'])} ({machine['architecture']})"
    )


def interval_text(diffs: list[float]) -> str:
    """ "mean [low, high]" of differences (their 95% t-interval); the value alone for one."""
    if not diffs:
        return "n/a"
    if len(diffs) == 1:
        return f"{diffs[0]:+.3f}"
    mean, low, high = t_interval(diffs)
    return f"{mean:+.3f} [{low:+.3f}, {high:+.3f}]"


def holm_claim(diffs: Mapping[int, list[float]], kept: Sequence[int], unit: str) -> str:
    """README's "STATUS | MEASURED" cells of a claim that a difference is above 0 at the
    points of `diffs` (sizes, lengths; each its differences over seeds): where Holm's
    correction keeps its interval apart from 0 (`kept`), above ("shown at") or below
    ("contradicted at"), and the difference at the first such point; none kept: "not shown"
    and the difference at the first point."""
    sides = {"shown": [], "contradicted": []}
    for point in (p for p in diffs if p in kept):
        sides["shown" if np.mean(diffs[point]) > 0 else "contradicted"].append(point)
    status = "; ".join(
        f"{side} at {', '.join(map(str, points))} {unit}"
        for side, points in sides.items()
        if points
    )
    point = (sides["shown"] or sides["contradicted"] or list(diffs))[0]
    n = len(diffs[point])
    return (
        f"{status or 'not shown'} (n = {n}, Holm) | {interval_text(diffs[point])} at {point} {unit}"
    )


def mean_std_text(values: list[float]) -> str:
    """ "mean ± sample std (ddof 1)"; the value alone for one (no spread from one run)."""
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.4g}"
    return f"{np.mean(values):.4g} ± {np.std(values, ddof=1):.2g}"


def holm_text(family: Mapping[str, list[float]], what: str, *, alpha: float = 0.05) -> str:
    """A paragraph on a family of paired intervals {label: differences over seeds}: how many
    the page could read, how many exclude 0 at 95%, and which of those stay apart from 0
    under Holm's correction for all of them (family-wise error `alpha`); the labels are
    listed where there are a few. `what` says what the family is ("each run minus BERT,
    final")."""
    tested = _tested(family)
    if not tested:
        return f"*Multiplicity:* no interval of {what} has two seeds or more."
    m = len(tested)
    p, adjusted = _holm(tested)
    apart = [label for label in tested if p[label] < alpha]
    kept = [label for label in apart if adjusted[label] < alpha]
    lost = [label for label in apart if adjusted[label] >= alpha]

    def listed(labels):
        if not labels or len(labels) > 8:
            return ""
        return ": " + "; ".join(
            f"{label} (p = {p[label]:.2g}, Holm {adjusted[label]:.2g})" for label in labels
        )

    text = (
        f"*Multiplicity:* {m} paired intervals ({what}); {len(apart)} "
        f"{_verb(apart, 'exclude')} 0 at 95%. "
        f"Under Holm's correction for all {m} (family-wise {alpha:.0%}), "
    )
    seeds = {len(d) for d in tested.values()}
    if len(seeds) == 1:  # what the smallest p must reach: the strictest step of Holm's
        n = seeds.pop()
        from scipy import stats as scipy_stats  # ~0.8 s to import: only where used

        t = float(scipy_stats.t.isf(alpha / (2 * m), n - 1))
        text += f"where with {n} seeds the first must reach |t| ≥ {t:.3g} ({n - 1} d.f.), "
    if not apart:
        return text + "none is apart from 0 either."
    text += f"{len(kept)} of those {len(apart)} {_verb(kept, 'stay')} apart from 0{listed(kept)}"
    return text + (
        f"; {len(lost)} {_verb(lost, 'do')} not{listed(lost)}." if lost else "; none is lost."
    )


def holm_kept(family: Mapping[str, list[float]], *, alpha: float = 0.05) -> list[str]:
    """The labels of `family` (as holm_text's) whose interval stays apart from 0 under Holm's
    correction for all its intervals of two seeds or more, in the family's order."""
    p, adjusted = _holm(_tested(family))
    return [label for label in p if p[label] < alpha and adjusted[label] < alpha]


def _tested(family: Mapping[str, list[float]]) -> dict[str, list[float]]:
    return {label: d for label, d in family.items() if len(d) >= 2}


def _holm(tested: Mapping[str, list[float]]) -> tuple[dict[str, float], dict[str, float]]:
    """({label: p}, {label: Holm-adjusted p}) of paired t-tests over the family."""
    p = {label: paired_t_p(d) for label, d in tested.items()}
    return p, dict(zip(p, holm(list(p.values()))))


def _verb(things: list, plural: str) -> str:
    return plural if len(things) != 1 else {"do": "does"}.get(plural, plural + "s")
