"""The results page's blocks of the ViT resolution study (experiments/vit_study.py): its header,
figure, tables and verdicts, read from the study's raw folder by vit_study.read_results.

Its raw folder holds vit_study's files, not a trainer's runs, so study_record.read_raw cannot read
it: these kinds take the page and the folder's name, as `<!-- generated: raw vit_table("vit") -->`.
"""

from __future__ import annotations

import os

from roformer_jax.studies import page_provenance, tables, vit_study
from roformer_jax.studies.page_numbers import FIGURES
from roformer_jax.studies.page_source import Page


def _read(page: Page, name: str) -> tuple[dict, dict]:
    directory = os.path.join(page.raw_root, name)
    if not os.path.isdir(directory):
        raise ValueError(
            f"no study {name!r} in {page.raw_root}: {sorted(os.listdir(page.raw_root))}"
        )
    return vit_study.read_results(directory)


def vit_header(page: Page, name: str) -> str:
    """The commit, machine and wall time of the command, and the command."""
    return page_provenance.own_runs_header(*_read(page, name), "encodings")


def vit_figure(page: Page, name: str) -> str:
    """vit_study.figure, drawn into page.figures_dir when given, with its n."""
    record, results = _read(page, name)
    config = record["config"]
    if page.figures_dir is not None:
        path = os.path.join(page.figures_dir, f"{name}.png")
        footnote = vit_study.footnote(config, record["machine"])
        vit_study.figure(config, results, path, footnote=footnote)
    n = len(config["seeds"])
    spread = "95% t-interval of the mean"
    return f"![{name}]({FIGURES}/{name}.png)\n\n*n = {n} seeds per point; bars: {spread}.*"


def vit_table(page: Page, name: str) -> str:
    return vit_study.accuracy_table(*_read_config_results(page, name))


def vit_paired_table(page: Page, name: str) -> str:
    return vit_study.paired_table(*_read_config_results(page, name))


def vit_multiplicity(page: Page, name: str) -> str:
    """tables.holm_text over the study's paired intervals: each pair at every size."""
    return tables.holm_text(_family(*_read_config_results(page, name)), "each pair at every size")


def vit_verdict(page: Page, name: str, pair: str) -> str:
    """Where the pair's 95% interval lies, size by size (vit_study.verdict), then the sizes
    where it stays apart from 0 under Holm's correction for the study's whole family
    (vit_multiplicity's); inline."""
    config, results = _read_config_results(page, name)
    kept = tables.holm_kept(_family(config, results))
    sizes = [str(size) for size in config["eval_sizes"] if _label(pair, size) in kept]
    holm = f"apart from 0 at {', '.join(sizes)} px" if sizes else "none apart from 0"
    return f"{vit_study.verdict(config, results, pair)} (under Holm: {holm})"


def vit_claim(page: Page, name: str, pair: str) -> str:
    """README's status and measured cells of the claim that the pair's first encoding is the
    more accurate past the training size (inline, "STATUS | MEASURED"): the sizes past the
    training one where its interval stays apart from 0 under Holm for the study's family
    (vit_multiplicity's), above 0 ("shown at") or below ("contradicted at"), and its
    difference at the first of them; none surviving: "not shown" and the difference at the
    first size past training."""
    config, results = _read_config_results(page, name)
    kept = tables.holm_kept(_family(config, results))
    past = [size for size in config["eval_sizes"] if size != config["train_size"]]
    diffs = {s: vit_study.paired_differences(config, results, pair, s) for s in past}
    return tables.holm_claim(diffs, [s for s in past if _label(pair, s) in kept], "px")


def vit_diff(page: Page, name: str, pair: str, size: int) -> str:
    """Inline: the pair's accuracy difference at `size` px, paired by seed: mean [95%
    t-interval]."""
    config, results = _read_config_results(page, name)
    return tables.interval_text(vit_study.paired_differences(config, results, pair, size))


def vit_chosen(page: Page, name: str) -> str:
    """The argument of the reported runs that a selection study's validation digits give
    (vit_study.chosen_rates; inline): `:RoPE-Axial=2e-3,...`."""
    rates = vit_study.chosen_rates(*_read_config_results(page, name))
    return "`:" + ",".join(f"{k}={v:.0e}".replace("e-0", "e-") for k, v in rates.items()) + "`"


def _family(config: dict, results: dict) -> dict[str, list[float]]:
    """{"PAIR at SIZE px": accuracy differences over seeds}: every pair at every size."""
    return {
        _label(pair, size): vit_study.paired_differences(config, results, pair, size)
        for pair in config["pairs"]
        for size in config["eval_sizes"]
    }


def _label(pair: str, size: int) -> str:
    return f"{pair} at {size} px"


def _read_config_results(page: Page, name: str) -> tuple[dict, dict]:
    record, results = _read(page, name)
    return record["config"], results
