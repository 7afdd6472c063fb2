"""The flags every study command takes: --config, --workdir, --raw_dir; and the record of it.

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define("compare.py", "runs/compare", "...")
record = study_flags.record(_CONFIG.value, wall_s=..., unigram=...)   # for study.json
results = study_flags.run_own_runs(length_bench, _CONFIG.value, workdir, raw_dir)
"""

import os
import sys
import time
from types import ModuleType

from absl import flags, logging
from ml_collections import ConfigDict, config_flags

from roformer_jax.studies import study_record

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def define(config_file: str, workdir: str, config_help: str):
    """Defines the three flags (config file under configs/, workdir default, what the config
    holds) and returns their holders."""
    config = config_flags.DEFINE_config_file(
        "config", os.path.join(_ROOT, "configs", config_file), config_help, lock_config=True
    )
    workdir = flags.DEFINE_string("workdir", workdir, "Each run trains under <workdir>/<name>/.")
    raw_dir = flags.DEFINE_string(
        "raw_dir",
        None,
        "Also copy each run's small outputs here (e.g. under "
        "docs/results/raw/), kilobytes per run, to commit beside the page they make, and write "
        "study.json (the command, config, commit and machine; roformer_jax/study_record.py).",
    )
    return config, workdir, raw_dir


def record(config: ConfigDict, *, wall_s: float | None, unigram, finished: bool = True) -> dict:
    """This command's study.json (study_record.make_record): its command line and --config."""
    return study_record.make_record(
        argv=sys.argv,
        config_file=config_flags.get_config_filename(flags.FLAGS["config"]),
        config=config,
        wall_s=wall_s,
        unigram=unigram,
        finished=finished,
    )


def run_own_runs(study: ModuleType, config: ConfigDict, workdir: str, raw: str | None) -> dict:
    """A study of own runs (own_runs: vit_study, length_bench; `study` is its module) as its
    command runs it: every run, cached in workdir, each result copied to raw; then the
    study's record, unless the command found every run there already (the record then keeps
    the command that trained them)."""
    started = time.time()
    before = study_record.kept_record(raw, config, study.RECORD) if raw else None
    results = study.run_study(config.to_dict(), workdir, raw_dir=raw, log=logging.info)
    if raw and not study_record.unchanged(raw, before, study.RECORD):
        study.write_record(raw, record(config, wall_s=time.time() - started, unigram=None))
        logging.info("wrote %s", os.path.join(raw, study.RECORD))
    return results
