r"""Trains several configurations on the same data, seeds and steps; draws their MLM curves.

  python experiments/compare.py                       # BERT vs RoFormer small, builtin corpus
  python experiments/compare.py --config=configs/study_positions.py --workdir=runs/positions
  python experiments/compare.py --config.experiment.data.source=../shared/data/wikitext-2/train.txt

Writes <workdir>/curves.png (train and valid loss of every run, seeds as a band) and
<workdir>/results.md (final losses and accuracies, mean ± std over seeds). Rerunning the same
command skips finished runs, resumes interrupted ones and redraws the figures. With --raw_dir,
each run's small outputs land there as it finishes (commit them as they come), and a fresh
--workdir takes the runs finished there instead of training them again.

--only trains a share of the study (with --config.seeds, one run at one seed) beside another
process on the same workdir, whose runs it must not take (each run holds a lock): it exports
its runs to --raw_dir as they finish, and draws and records nothing, which the command of the
whole study does (it then finds those runs trained).
"""

import os
import sys
import time

from absl import app, flags, logging

# Config files import `configs.base`: make the repository root importable for a plain run.
_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from experiments import study_flags  # noqa: E402
from roformer_jax.data.corpus import load_corpus  # noqa: E402
from roformer_jax.studies import compare_report, study, study_record  # noqa: E402
from roformer_jax.training import provenance, runtime  # noqa: E402

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define(
    "compare.py",
    "runs/compare",
    "Study config: an `experiment` every run shares, `runs` (name -> overrides) and `seeds`.",
)


_ONLY = flags.DEFINE_list(
    "only", [], "Train only these runs of the study (a share beside another process)."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    started, config = time.time(), _CONFIG.value
    runs = study.select_runs(study.study_runs(config), _ONLY.value)
    if _ONLY.value:  # a share: its runs, exported as each finishes; the study is another's
        study.run_study(runs, _WORKDIR.value, raw_dir=_RAW_DIR.value)
        logging.info("trained %s; the whole study's command draws and records it", _ONLY.value)
        return
    exp = next(iter(runs.values()))[0]
    cache = exp.train.data_cache_dir or os.path.join(_WORKDIR.value, "data")
    unigram = load_corpus(exp.data, cache).unigram_cross_entropy()
    before = study_record.kept_record(_RAW_DIR.value, config) if _RAW_DIR.value else None
    # First, so that the runs exported so far can be read while it runs.
    if _RAW_DIR.value and before is None:
        record = study_flags.record(config, wall_s=None, unigram=unigram, finished=False)
        study_record.write(_RAW_DIR.value, record)
    results = study.run_study(runs, _WORKDIR.value, raw_dir=_RAW_DIR.value)
    footnote = compare_report.footnote(exp, config.seeds, provenance.machine(), unigram)
    png, md = compare_report.write_report(
        results,
        _WORKDIR.value,
        title=config.title,
        plot_keys=config.plot_keys,
        table_keys=config.table_keys,
        footnote=footnote,
        baseline=config.get("baseline"),
        paired_key=f"valid/loss_{exp.data.seq_len}",
        floor=unigram,
    )
    with open(md, encoding="utf-8") as f:
        print(f.read())
    logging.info("wrote %s and %s", png, md)
    if _RAW_DIR.value:
        record = study_flags.record(config, wall_s=time.time() - started, unigram=unigram)
        count = study_record.export(_RAW_DIR.value, runs, _WORKDIR.value, record, before=before)
        logging.info("copied %d raw files to %s", count, _RAW_DIR.value)


if __name__ == "__main__":
    runtime.run_main(main)
