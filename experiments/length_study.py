r"""A length study: trains its runs, reads each at every context length, draws and tabulates.

  python experiments/length_study.py --config=configs/study_length.py:wikitext2 \
      --workdir=runs/length_wikitext2 --raw_dir=docs/results/raw/length_wikitext2

Trains the config's `runs` for each seed as experiments/compare.py does (cached, resumable),
then scores every entry of `evaluations` (a run, and a RoPE scaling to read it with) on the
same held-out targets at each of `eval_lengths` (roformer_jax/length_study.py). Writes
<workdir>/lengths.png (loss against length; loss by position at the longest length) and
<workdir>/lengths.md (the tables, and each multi-stage run's per-stage table); with
--raw_dir, copies every run's metrics.jsonl, config.json and length_eval/*.json there.
"""

import os
import platform
import sys

from absl import app, flags, logging
from ml_collections import config_flags

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)  # config files import `configs.*`

import jax  # noqa: E402

from roformer_jax import length_study, plots, study  # noqa: E402
from roformer_jax.data.batches import load_corpus  # noqa: E402
from roformer_jax.training import runtime  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config", os.path.join(_ROOT, "configs", "study_length.py"),
    "Study config: experiment, runs, seeds, evaluations, eval_lengths, eval_tokens, "
    "eval_baselines.",
    lock_config=True,
)  # fmt: skip
_WORKDIR = flags.DEFINE_string("workdir", "runs/length", "Each run trains in <workdir>/<name>/.")
_RAW_DIR = flags.DEFINE_string(
    "raw_dir", None, "Also copy each run's small outputs here (e.g. docs/results/raw/...)."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config, workdir = _CONFIG.value, _WORKDIR.value
    runs = study.study_runs(config)
    results = study.run_study(runs, workdir)
    lengths = tuple(config.eval_lengths)
    scores = length_study.evaluate_runs(
        config.evaluations.to_dict(), runs, workdir, lengths=lengths, max_tokens=config.eval_tokens
    )
    exp = runs[config.evaluations[config.eval_baselines[0]].run][0]
    corpus = load_corpus(exp.data, exp.train.data_cache_dir or os.path.join(workdir, "data"))
    unigram = corpus.unigram_cross_entropy()
    targets = {n: s[n]["targets"] for seeds in scores.values() for s in seeds for n in s}
    footnote = (
        f"data: {exp.data.source} ({exp.data.doc_separator} documents"
        + (f" joined to >= {exp.data.min_doc_chars:,} characters" if exp.data.min_doc_chars else "")
        + "), "
        f"{targets[lengths[0]]:,} held-out masked targets scored at every length (eval seed "
        f"{exp.data.eval_seed}); {exp.model.num_layers} layers x {exp.model.hidden_size}, "
        f"{exp.train.steps} steps of {exp.train.batch_size} x {exp.data.seq_len}; seeds "
        f"{tuple(config.seeds)}; unigram cross-entropy {unigram:.3f}; {jax.device_count()} "
        f"{jax.default_backend()} device(s), {os.cpu_count()} cores ({platform.machine()})"
    )
    png = plots.plot_lengths(
        scores, os.path.join(workdir, "lengths.png"), title=config.title,
        trained_length=length_study.trained_length(exp), floor=unigram, footnote=footnote,
        reference=config.get("position_reference"),
    )  # fmt: skip
    sections = [
        f"# {config.title}",
        footnote,
        "## Held-out loss at each context length (mean ± std over seeds)",
        length_study.length_table(scores, lengths),
        "## Held-out accuracy at each context length",
        length_study.length_table(scores, lengths, key="accuracy"),
        *(
            part
            for baseline in config.eval_baselines
            for part in (
                f"## Loss minus {baseline}'s, seed by seed: mean [95% t-interval]",
                length_study.length_paired_table(scores, baseline, lengths),
            )
        ),  # fmt: skip
        "## Training (final values)",
        study.summary_table(results, config.table_keys),
    ]
    for name, configs in runs.items():
        if configs[0].train.stages:
            sections += [
                f"## {name}: per stage",
                length_study.stage_table(configs[0], results[name]),
            ]
    md = os.path.join(workdir, "lengths.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write("\n\n".join(sections) + "\n")
    with open(md, encoding="utf-8") as f:
        print(f.read())
    logging.info("wrote %s and %s", png, md)
    if _RAW_DIR.value:
        count = study.export_raw(runs, workdir, _RAW_DIR.value, folders=(length_study.EVAL_DIR,))
        logging.info("copied %d raw files to %s", count, _RAW_DIR.value)


if __name__ == "__main__":
    runtime.run_main(main)
