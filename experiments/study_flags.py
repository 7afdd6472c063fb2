"""The flags every study command takes: --config, --workdir, --raw_dir.

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define("compare.py", "runs/compare", "...")
"""

import os

from absl import flags
from ml_collections import config_flags

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def define(config_file: str, workdir: str, config_help: str):
    """Defines the three flags (config file under configs/, workdir default, what the config
    holds) and returns their holders."""
    config = config_flags.DEFINE_config_file(
        "config", os.path.join(_ROOT, "configs", config_file), config_help, lock_config=True
    )
    workdir = flags.DEFINE_string("workdir", workdir, "Each run trains under <workdir>/<name>/.")
    raw_dir = flags.DEFINE_string(
        "raw_dir", None, "Also copy each run's small outputs here (e.g. under "
        "docs/results/raw/), kilobytes per run, to commit beside the page they make, and write "
        "study.json (the command, config, commit and machine; roformer_jax/study_record.py).",
    )  # fmt: skip
    return config, workdir, raw_dir
