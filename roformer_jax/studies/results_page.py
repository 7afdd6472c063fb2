"""docs/results.md's generated parts, rebuilt from the studies' raw folders alone.

    text = results_page.render(page, "docs/results/raw", figures_dir="docs/results")
    print(results_page.differences(page, results_page.render(page, "docs/results/raw")))

The page is prose written by hand, with generated parts between markers:

    <!-- generated: STUDY KIND(ARGS) -->...<!-- end generated -->

STUDY names a folder of the raw root (study_record.read_raw), or is "raw" for all of them;
a STUDY that ends in "?" (`multilength_controls_wikitext2?`, `raw?` for the ViT kinds, whose
folder is their first argument) is awaited: until its folder exists the block says so
(NOT_RUN, or NOT_RUN_INLINE inside a sentence), and while its study.json says it is not
finished, that it is in progress (IN_PROGRESS, IN_PROGRESS_INLINE), so that a study's section
can be written before it runs, its raw files committed run by run as they come (a sitting cut
short loses none: the command resumes from them), and the section fill itself in when the
study has finished;
KIND is a key of KINDS, called with ARGS, Python literals by position or name
(`length_paired_table("RoPE")`, `diff("RoPE + YaRN", "RoPE", 2048)`, `diff("none", step=500)`).
A table or figure sits on lines of its own between its markers; an inline value (INLINE)
sits inside a sentence. `render` rewrites the inside of every marker pair with the same table
and figure functions the study entry points use (tables, length_report, plots), fed from the
raw files, and leaves everything else as written.

The kinds live by concept: page_numbers (a study's figure, tables and quoted values),
page_provenance (its header, staleness from git and wall times), page_long_doc (the
long-document study and fine-tuning runs), page_vit (the ViT resolution study), page_controls
(issue 56's: the split a study scores, what chose a setting), page_length_bench (the
retrieval bench); page_source is what they read. `differences` leaves out the stale marks
(page_provenance's module doc says why); writing the page refreshes them.
"""

from __future__ import annotations

import ast
import difflib
import os
import re
from collections.abc import Callable

from roformer_jax.studies import (
    page_controls,
    page_length_bench,
    page_long_doc,
    page_numbers,
    page_provenance,
    page_vit,
    study_record,
    vit_study,
)
from roformer_jax.studies.page_source import Page, read_json
from roformer_jax.training import provenance

MARKER = re.compile(r"<!-- generated: (\S+) (\w+)\((.*?)\) -->(.*?)<!-- end generated -->", re.S)
ALL = "raw"  # the STUDY of a marker whose kind reads every raw folder
AWAITED = "?"  # after a STUDY: its raw folder may not exist yet (module doc)
NOT_RUN = (
    "*Not run yet: no raw files in docs/results/raw/{folder}/ (its config gives the command).*"
)
NOT_RUN_INLINE = "(not run yet)"
IN_PROGRESS = (
    "*In progress: docs/results/raw/{folder}/ holds the runs finished so far; this is drawn "
    "when the study has finished (its config gives the command, which resumes from them).*"
)
IN_PROGRESS_INLINE = "(in progress)"


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
    page = Page(raw_root, figures_dir, changed)

    def replace(match: re.Match) -> str:
        marked, kind, args, _ = match.groups()
        if kind not in KINDS:
            raise ValueError(f"{match.group(0)[:80]}: unknown kind {kind!r}; one of {list(KINDS)}")
        name = marked.removesuffix(AWAITED)
        call = ast.parse(f"f({args})", mode="eval").body  # literals only, by position or name
        positional = [ast.literal_eval(arg) for arg in call.args]
        named = {k.arg: ast.literal_eval(k.value) for k in call.keywords}
        folder = _folder(name, positional)
        awaited = marked.endswith(AWAITED) and _awaited(raw_root, folder)
        if awaited:
            reason, waiting = awaited
            inline, block = _AWAITED_TEXT[reason]
            inner = inline if kind in INLINE else block.format(folder=waiting)
        else:
            target = page if name == ALL else page.study(name)
            extra = {"page": page} if kind in _USES_PAGE else {}
            inner = KINDS[kind](target, *positional, **named, **extra)
        if kind not in INLINE:
            inner = f"\n{inner}\n"
        return match.group(0)[: match.start(4) - match.start(0)] + inner + "<!-- end generated -->"

    return MARKER.sub(replace, text)


_AWAITED_TEXT = {
    "not run": (NOT_RUN_INLINE, NOT_RUN),
    "in progress": (IN_PROGRESS_INLINE, IN_PROGRESS),
}


def _awaited(raw_root: str, folder: str) -> tuple[str, str] | None:
    """(why, which folder) where an awaited study's blocks cannot be drawn yet ("not run",
    "in progress"; of a joined study, its first folder not run, else in progress), or None."""
    in_progress = None
    for part in folder.split(study_record.JOIN):
        if not os.path.isdir(os.path.join(raw_root, part)):
            return "not run", part
        # A trainer study's record, or the ViT study's (written once its last run is in).
        records = [os.path.join(raw_root, part, f) for f in (study_record.FILE, vit_study.RECORD)]
        record = next((r for r in records if os.path.exists(r)), None)
        if record is None or not study_record.is_finished(read_json(record)):
            in_progress = in_progress or ("in progress", part)
    return in_progress


def differences(page: str, regenerated: str, *, name: str = "docs/results.md") -> str:
    """A unified diff of the page against its regenerated text, stale marks left out (module
    doc); "" where they agree."""

    def without_marks(text):
        return MARKER.sub(lambda m: "" if m.group(2) in page_provenance.STALE else m.group(0), text)

    return "".join(
        difflib.unified_diff(
            without_marks(page).splitlines(keepends=True),
            without_marks(regenerated).splitlines(keepends=True),
            fromfile=name,
            tofile=f"{name}, regenerated",
        )
    )


def blocks(text: str) -> list[tuple[str, str]]:
    """(study, kind) of every marker of `text`; an ALL marker's study is its first argument
    where that names a folder (the ViT kinds), as page_provenance.unmarked reads them."""
    found = []
    for marked, kind, args, _ in MARKER.findall(text):
        call = ast.parse(f"f({args})", mode="eval").body
        positional = [ast.literal_eval(arg) for arg in call.args]
        found.append((_folder(marked.removesuffix(AWAITED), positional), kind))
    return found


def _folder(name: str, positional: list) -> str:
    """The raw folder a marker reads: its STUDY, or an ALL marker's first argument where that
    names one (the ViT kinds); ALL itself for the kinds that read every folder."""
    if name == ALL and positional and isinstance(positional[0], str):
        return positional[0]
    return name


# Kinds: (RawStudy, *args) -> markdown; (Page) for ALL; _USES_PAGE also get page=.
KINDS = {
    "header": page_provenance.header,
    "stale": page_provenance.stale,
    "figure": page_numbers.figure,
    "length_table": page_numbers.length_table,
    "length_paired_table": page_numbers.length_paired_table,
    "summary_table": page_numbers.summary_table,
    "paired_table": page_numbers.paired_table,
    "multiplicity": page_numbers.multiplicity,
    "length_verdicts": page_numbers.length_verdicts,
    "extremes_table": page_numbers.extremes_table,
    "extremes": page_numbers.extremes,
    "stage_table": page_numbers.stage_table,
    "stage_change": page_numbers.stage_change,
    "stage_held_out_table": page_numbers.stage_held_out_table,
    "mean": page_numbers.mean,
    "diff": page_numbers.diff,
    "verdict": page_numbers.verdict,
    "claim": page_numbers.claim,  # README's status cell
    "length_change": page_numbers.length_change,
    "below_from": page_numbers.below_from,
    "reaches": page_numbers.reaches,
    "position_table": page_numbers.position_table,
    "position_table_steps": page_numbers.position_table_steps,
    "unigram": page_numbers.unigram,
    "reproduced": page_numbers.reproduced,
    "attention_distance_figure": page_numbers.attention_distance_figure,
    "attention_distance_table": page_numbers.attention_distance_table,
    "logit_decay_table": page_numbers.logit_decay_table,
    "logit_decay_claim": page_numbers.logit_decay_claim,  # README's cells
    "targets": lambda raw: f"{page_numbers.targets(raw):,}",  # targets, as the footnote prints it
    "wall_time_table": page_provenance.wall_time_table,
    # The long-document study (experiments/long_doc_study.py): its tables read the fine-tuning
    # runs, survival.json and bow.json of the raw folder.
    "long_doc_figure": page_long_doc.long_doc_figure,
    "long_doc_table": page_long_doc.long_doc_table,
    "long_doc_paired_table": page_long_doc.long_doc_paired_table,
    "long_doc_survival_table": page_long_doc.long_doc_survival_table,
    "long_doc_bow": page_long_doc.long_doc_bow,
    # Fine-tuning runs beside a study's pre-training (issue 16's pilot).
    "finetuning_table": page_long_doc.finetuning_table,
    "finetuning_paired_table": page_long_doc.finetuning_paired_table,
    # The ViT resolution study (experiments/vit_study.py): STUDY is "raw", the folder an argument.
    "vit_header": page_vit.vit_header,
    "vit_stale": page_provenance.vit_stale,
    "vit_figure": page_vit.vit_figure,
    "vit_table": page_vit.vit_table,
    "vit_paired_table": page_vit.vit_paired_table,
    "vit_verdict": page_vit.vit_verdict,
    "vit_multiplicity": page_vit.vit_multiplicity,
    "vit_claim": page_vit.vit_claim,  # README's row
    "vit_diff": page_vit.vit_diff,
    "vit_chosen": page_vit.vit_chosen,
    # Issue 56's controls: the split a study scores, what chose a setting, the packed 2 x 2.
    "split": page_controls.split,
    "chosen": page_controls.chosen,
    "cross_table": page_controls.cross_table,
    # The retrieval bench (experiments/length_bench.py): as the ViT kinds, a "not run yet" line
    # until the folder is in the raw root.
    "bench_header": page_length_bench.bench_header,
    "bench_stale": page_length_bench.bench_stale,
    "bench_heat_map": page_length_bench.bench_heat_map,
    "bench_table": page_length_bench.bench_table,
    "bench_paired_table": page_length_bench.bench_paired_table,
    "bench_verdicts": page_length_bench.bench_verdicts,
    "bench_mean": page_length_bench.bench_mean,
    "bench_seeds": page_length_bench.bench_seeds,
    "bench_diff": page_length_bench.bench_diff,
    "bench_verdict": page_length_bench.bench_verdict,
    "bench_claim": page_length_bench.bench_claim,  # README's row
    "bench_needle_table": page_length_bench.bench_needle_table,
}
INLINE = {
    "stale",
    "vit_stale",
    "bench_stale",
    "bench_mean",
    "bench_seeds",
    "bench_diff",
    "bench_verdict",
    "bench_claim",
    "mean",
    "diff",
    "verdict",
    "claim",
    "logit_decay_claim",
    "length_change",
    "below_from",
    "reaches",
    "unigram",
    "targets",
    "stage_change",
    "multiplicity",
    "reproduced",
    "long_doc_bow",
    "extremes",
    "vit_verdict",
    "vit_multiplicity",
    "vit_claim",
    "vit_diff",
    "vit_chosen",
    "split",
    "chosen",
}
_USES_PAGE = {
    "stale",
    "figure",
    "position_table",
    "position_table_steps",
    "reproduced",
    "attention_distance_figure",
    "attention_distance_table",
    "logit_decay_table",
    "logit_decay_claim",
    "long_doc_figure",
    "long_doc_table",
    "long_doc_paired_table",
    "long_doc_survival_table",
    "long_doc_bow",
    "finetuning_table",
    "finetuning_paired_table",
}
