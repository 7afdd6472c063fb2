"""The results page's blocks of issue 56's controls: which split a study's numbers score, the
settings a selection study chose, and the packed study's 2 x 2 of trained and scored modes.
Each is a kind of results_page.KINDS: (RawStudy, *args) -> markdown.

A setting is chosen on the selection split (data.selection_fraction, data/corpus.py), apart
from the held-out set that reports it: `chosen` reads a study whose valid/* score that split,
and refuses one whose valid/* score the held-out set.
"""

from __future__ import annotations

import numpy as np

from roformer_jax.studies import tables
from roformer_jax.studies.study_record import RawStudy

DOCUMENT_MODES = ("open", "isolated")


def split(raw: RawStudy) -> str:
    """Which split the study's valid/* score, from its runs' data configs (inline)."""
    data = {(c.data.eval_split, c.data.selection_fraction) for s in raw.runs.values() for c in s}
    if len(data) != 1:
        raise ValueError(f"study {raw.name!r} mixes splits: {sorted(data)}")
    ((scored, fraction),) = data
    if scored == "selection":
        return f"the selection split ({fraction:.0%} of the documents, apart from the held-out set)"
    if fraction:
        return f"the held-out set, once (trained without the {fraction:.0%} selection split)"
    return "the held-out set (no selection split: settings read there chose on it)"


def chosen(raw: RawStudy, default_warmup: int = 100) -> str:
    """The `:best,selection,...` argument of configs/study_positions_lr.py that the study's
    runs "<model>, lr <rate>[, warm-up <steps>]" give: each model's setting of lowest mean
    final valid loss. Only a study scored on the selection split may choose (module doc)."""
    if any(c.data.eval_split != "selection" for s in raw.runs.values() for c in s):
        raise ValueError(
            f"study {raw.name!r} scores the held-out set: a setting chosen on it would be "
            "reported on the numbers that chose it; choose on a study with "
            "data.eval_split='selection'"
        )
    key, best = _loss_key(raw), {}
    for name, configs in raw.runs.items():
        model, marker, _ = name.partition(", lr ")
        if not marker:
            continue
        loss = float(np.mean([tables.final_values(r, key) for r in raw.results[name]]))
        optim = configs[0].optim
        setting = f"{optim.learning_rate:.0e}".replace("e-0", "e-")
        if optim.warmup_steps != default_warmup:
            setting += f"/{optim.warmup_steps}"
        if model not in best or loss < best[model][0]:
            best[model] = (loss, setting)
    words = ",".join(f"{model}={setting}" for model, (_, setting) in best.items())
    return f"`:best,selection,{words}`"


def cross_table(raw: RawStudy, model: str) -> str:
    """The packed study's 2 x 2 for `model` (configs/study_packed.py's `:cross`): the final
    held-out loss (mean ± sample std over seeds) of each trained mode scored open and
    isolated, and the other mode minus its own, paired by seed."""
    key = _loss_key(raw)
    lines = [
        f"| {model}: trained ↓, scored → | open | isolated | other mode − own: mean [95% t] |",
        "|---|---|---|---|",
    ]
    for trained in DOCUMENT_MODES:
        runs = {scored: _cross_run(model, trained, scored) for scored in DOCUMENT_MODES}
        cells = [
            tables.mean_std_text([tables.final_values(r, key) for r in raw.results[runs[s]]])
            for s in DOCUMENT_MODES
        ]
        other = runs["isolated" if trained == "open" else "open"]
        diff = tables.interval_text(tables.paired_diffs(raw.results, other, runs[trained], key))
        lines.append(f"| {trained} | {' | '.join(cells)} | {diff} |")
    return "\n".join(lines)


def _cross_run(model: str, trained: str, scored: str) -> str:
    return f"{model}, {trained}" + ("" if scored == trained else f", scored {scored}")


def _loss_key(raw: RawStudy) -> str:
    return f"valid/loss_{next(iter(raw.runs.values()))[0].data.seq_len}"
