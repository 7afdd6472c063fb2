"""The results page's blocks of the long-document study (experiments/long_doc_study.py) and of
fine-tuning runs kept beside a study's pre-training: figure, tables and the bag-of-words text,
read from the fine-tuning runs, survival.json and bow.json of a raw folder.
"""

from __future__ import annotations

import os

from roformer_jax.studies import long_doc_report, long_doc_study
from roformer_jax.studies.page_numbers import FIGURES
from roformer_jax.studies.page_source import Page
from roformer_jax.studies.study_record import RawStudy


def _long_doc(raw: RawStudy, page: Page) -> long_doc_study.Results:
    """The long-document study's results, from its raw folder (long_doc_study.read_results)."""
    return long_doc_study.read_results(os.path.join(page.raw_root, raw.name), raw.config)


def long_doc_figure(raw: RawStudy, *, page: Page) -> str:
    """long_doc_report.figure, drawn into page.figures_dir when given, with its n."""
    if page.figures_dir is not None:
        long_doc_report.figure(
            _long_doc(raw, page),
            os.path.join(page.figures_dir, f"{raw.name}.png"),
            title=raw.config["title"],
            footnote=long_doc_report.footnote(raw.config, raw.record["machine"]),
        )
    n = len(raw.config["finetune_seeds"])
    return f"![{raw.name}]({FIGURES}/{raw.name}.png)\n\n*n = {n} fine-tuning seeds per point" + (
        "; bars: 95% t-interval of the mean.*" if n > 1 else ".*"
    )


def long_doc_table(raw: RawStudy, key: str = "test/accuracy", *, page: Page) -> str:
    return long_doc_report.accuracy_table(_long_doc(raw, page), key)


def long_doc_paired_table(raw: RawStudy, split: str = "test", *, page: Page) -> str:
    return long_doc_report.paired_table(_long_doc(raw, page), split)


def long_doc_survival_table(raw: RawStudy, split: str = "test", *, page: Page) -> str:
    return long_doc_report.survival_table(_long_doc(raw, page), split)


def long_doc_bow(raw: RawStudy, *, page: Page) -> str:
    return long_doc_report.bow_text(_long_doc(raw, page))


def _finetuning(raw: RawStudy, folder: str, page: Page) -> long_doc_study.Finetuning:
    """A fine-tuning run kept under the study's raw folder (experiments/finetune.py
    --raw_dir=<raw folder>/<folder>); "../<study>/<folder>" reads another study's."""
    return long_doc_study.read_finetuning(os.path.join(page.raw_root, raw.name, folder))


def finetuning_table(raw: RawStudy, runs: dict, split: str = "test", *, page: Page) -> str:
    """long_doc_report.finetuning_table of fine-tuning runs, {row name: folder}."""
    return long_doc_report.finetuning_table(
        {name: _finetuning(raw, f, page) for name, f in runs.items()}, split
    )


def finetuning_paired_table(raw: RawStudy, pairs: dict, *, page: Page) -> str:
    """long_doc_report.finetuning_paired_table, {row name: [folder, baseline folder]}."""
    return long_doc_report.finetuning_paired_table(
        {
            name: (_finetuning(raw, a, page), _finetuning(raw, b, page))
            for name, (a, b) in pairs.items()
        }
    )
