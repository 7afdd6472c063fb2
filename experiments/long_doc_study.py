r"""The long-document study in one command: pre-train, fine-tune at each length, controls.

  python experiments/long_doc_study.py --config=configs/study_long_doc.py \
      --workdir=runs/long_doc --raw_dir=docs/results/raw/long_doc_wikitext2

Pre-trains the config's encoders as experiments/compare.py trains a study's runs (cached,
resumable), builds the triplet task into <workdir>/task, fine-tunes every (encoder, length,
truncation) cell for each fine-tuning seed (cached, resumable), fits the bag-of-words baseline
(on the whole windows and on what each length reads), and writes <workdir>/long_doc.md
(tables) and <workdir>/long_doc.png (accuracy against length). With --raw_dir, copies each
run's small outputs there as it finishes, and at the end the rest and study.json
(roformer_jax/study_record.py), from which docs/results.md's section is regenerated; rerun
on a fresh machine (an empty --workdir), it takes back the fine-tunings finished there and
pre-trains only the encoders that unfinished ones start from.
"""

import os
import sys
import time

from absl import app, logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)  # config files import `configs.*`

from experiments import study_flags  # noqa: E402
from roformer_jax.data.corpus import load_corpus  # noqa: E402
from roformer_jax.studies import (  # noqa: E402
    long_doc_articles,
    long_doc_report,
    long_doc_study,
    study,
    study_record,
)
from roformer_jax.training import provenance, runtime  # noqa: E402

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define(
    "study_long_doc.py",
    "runs/long_doc",
    "Study config: experiment, runs, schedules, pretrain_steps, lengths, task, finetune, ...",
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    started, config, workdir, raw = time.time(), _CONFIG.value, _WORKDIR.value, _RAW_DIR.value
    runs = long_doc_study.pretraining_runs(config)
    before = study_record.kept_record(raw, config) if raw else None
    needed = long_doc_study.encoders_needed(config, workdir, raw)
    study.run_study(runs, workdir, raw_dir=raw, checkpoints_needed=needed)
    task_dir = long_doc_study.build_task(config.task, workdir)
    long_doc_study.finetune_cells(config, workdir, task_dir, raw_dir=raw, log=logging.info)
    long_doc_study.write_survival(config, runs, workdir, task_dir)
    measure = long_doc_articles.word_measure(long_doc_study.encoder_tokenizer(runs, workdir))
    long_doc_study.write_bow(workdir, task_dir, measure=measure, lengths=config.lengths)

    results = long_doc_study.read_results(workdir, config.to_dict())
    exp = next(iter(runs.values()))[0]
    unigram = load_corpus(exp.data, os.path.join(workdir, "data")).unigram_cross_entropy()
    footnote = long_doc_report.footnote(config.to_dict(), provenance.machine())
    png, md = long_doc_report.write(results, workdir, title=config.title, footnote=footnote)
    with open(md, encoding="utf-8") as f:
        print(f.read())
    logging.info("wrote %s and %s", png, md)
    if raw:
        record = study_flags.record(config, wall_s=time.time() - started, unigram=unigram)
        count = long_doc_study.export_raw(workdir, raw)
        count += study_record.export(raw, runs, workdir, record, before=before)
        logging.info("copied %d raw files to %s", count, raw)


if __name__ == "__main__":
    runtime.run_main(main)
