r"""Fine-tunes a pre-trained encoder with a fresh task head: parses flags, calls the library.

  python experiments/finetune.py --config=configs/finetune_classification.py \
      --workdir=/tmp/ft --config.init_from=/tmp/tiny

One config per task kind: configs/finetune_{classification, token_classification, qa,
multiple_choice}.py, each on a builtin task (training/task_kinds.py, data/builtin_tasks.py).
--config.init_from is a pre-training workdir (experiments/train_mlm.py's) or a local HF
RoFormer directory with its vocab.txt; without it the encoder starts from random weights.
Rerunning with the same --workdir resumes from its latest checkpoint; a config that changes
what the run computes (task, encoder, epochs, rates) is refused there unless
--resume_with_changes. Writes
<workdir>/final_metrics.json: the best epoch's validation metrics and, with a test file, its
test metrics. With --raw_dir, copies the finished run's small files there (metrics.jsonl,
config.json, final_metrics.json, predictions.json: what a results page reads).
"""

import json
import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

# Config files import `configs.base`: make the repository root importable for a plain run.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

from roformer_jax.training import runtime  # noqa: E402
from roformer_jax.training.finetune import copy_raw_files, finetune  # noqa: E402
from roformer_jax.training.finetune_config import finetune_experiment_from_dict  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Fine-tuning config file, e.g. configs/finetune_classification.py.",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and logs go here.")
_RAW_DIR = flags.DEFINE_string(
    "raw_dir", None, "Optional: the finished run's small files are copied here."
)
_RESUME_WITH_CHANGES = flags.DEFINE_bool(
    "resume_with_changes",
    False,
    "Resume even where the config changes what the run computes (task, encoder, epochs, "
    "optimizer); the changes are recorded in config.json.",
)
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    cfg = finetune_experiment_from_dict(_CONFIG.value.to_dict())
    final = finetune(cfg, _WORKDIR.value, resume_with_changes=_RESUME_WITH_CHANGES.value)
    logging.info("final metrics: %s", json.dumps(final))
    if _RAW_DIR.value:
        count = copy_raw_files(_WORKDIR.value, _RAW_DIR.value)
        logging.info("copied %d raw files to %s", count, _RAW_DIR.value)


if __name__ == "__main__":
    runtime.run_main(main)
