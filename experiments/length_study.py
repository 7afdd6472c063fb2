r"""A length study: trains its runs, reads each at every context length, draws and tabulates.

  python experiments/length_study.py --config=configs/study_length.py:wikitext2 \
      --workdir=runs/length_wikitext2 --raw_dir=docs/results/raw/length_wikitext2

Trains the config's `runs` for each seed as experiments/compare.py does (cached, resumable),
and scores every entry of `evaluations` (a run, and a RoPE scaling to read it with) on the
same held-out targets at each of `eval_lengths` (roformer_jax/length_study.py), each run's as
soon as it is trained. Writes
<workdir>/lengths.png (loss against length; loss by position at the longest length) and
<workdir>/lengths.md (the tables, and each multi-stage run's per-stage table); with
--raw_dir, copies every run's metrics.jsonl, config.json and length_eval/*.json there as
each is written, and at the end study.json (the command, config, commit and machine;
roformer_jax/study_record.py). Rerun on a fresh machine (an empty --workdir), it takes back
what is finished there and trains again only the runs that a missing score reads.
"""

import os
import sys
import time

from absl import app, logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)  # config files import `configs.*`

from experiments import study_flags  # noqa: E402
from roformer_jax.data.corpus import load_corpus  # noqa: E402
from roformer_jax.studies import length_report, length_study, plots, study, study_record  # noqa: E402
from roformer_jax.training import provenance, runtime  # noqa: E402

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define(
    "study_length.py",
    "runs/length",
    "Study config: experiment, runs, seeds, evaluations, eval_lengths, eval_tokens, "
    "eval_baselines.",
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    started, config, workdir, raw = time.time(), _CONFIG.value, _WORKDIR.value, _RAW_DIR.value
    runs = study.study_runs(config)
    evaluations, lengths = config.evaluations.to_dict(), tuple(config.eval_lengths)
    settings = dict(lengths=lengths, max_tokens=config.eval_tokens)
    needed = length_study.runs_to_score(evaluations, runs, (workdir, raw), **settings)
    exp = runs[config.evaluations[config.eval_baselines[0]].run][0]
    corpus = load_corpus(exp.data, exp.train.data_cache_dir or os.path.join(workdir, "data"))
    unigram = corpus.unigram_cross_entropy()
    before = study_record.kept_record(raw, config) if raw else None
    # First, so that the runs and scores exported so far can be read while it runs.
    if raw and before is None:
        record = study_flags.record(config, wall_s=None, unigram=unigram, finished=False)
        study_record.write(raw, record)

    def score(run):  # as soon as the run is trained: its scores outlive a sitting cut short
        reading = {name: spec for name, spec in evaluations.items() if spec["run"] == run}
        length_study.evaluate_runs(reading, runs, workdir, raw_dir=raw, **settings)

    results = study.run_study(
        runs, workdir, raw_dir=raw, checkpoints_needed=needed, after_run=score
    )
    scores = length_study.evaluate_runs(evaluations, runs, workdir, raw_dir=raw, **settings)
    targets = next(iter(scores.values()))[0][lengths[0]]["targets"]  # the same for every run
    footnote = length_report.footnote(exp, config.seeds, targets, provenance.machine(), unigram)
    png = plots.plot_lengths(
        scores,
        os.path.join(workdir, "lengths.png"),
        title=config.title,
        trained_length=length_study.trained_length(exp),
        floor=unigram,
        footnote=footnote,
        reference=config.get("position_reference"),
    )
    md = os.path.join(workdir, "lengths.md")
    with open(md, "w", encoding="utf-8") as f:
        f.write(length_report.report(config.to_dict(), runs, results, scores, footnote))
    with open(md, encoding="utf-8") as f:
        print(f.read())
    logging.info("wrote %s and %s", png, md)
    if raw:
        record = study_flags.record(config, wall_s=time.time() - started, unigram=unigram)
        count = study_record.export(
            raw, runs, workdir, record, folders=(length_study.EVAL_DIR,), before=before
        )
        logging.info("copied %d raw files to %s", count, raw)


if __name__ == "__main__":
    runtime.run_main(main)
