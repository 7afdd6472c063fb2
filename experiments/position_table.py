r"""How far the learned position tables (BERT's) of a study's runs moved in training.

  python experiments/position_table.py --workdir=runs/positions_long_wikitext2 \
      --raw_dir=docs/results/raw/positions_long_wikitext2

For every run under --workdir whose model learns a position table (BERT's "learned", or
"learned_sinusoid"), the table of its newest checkpoint is compared with the one the run
started from, redone from its seed (runs.run_rngs), by studies.position_table.table_change;
the word table likewise, for scale. Each run gets <run>/seed<k>/position_table.json in
--workdir and, with --raw_dir (then only the runs that study lists: a sweep and its best
share a workdir), in the study's raw folder, where docs/results.md's
`position_table()` marker reads it; with --every_checkpoint, also position_table_steps.json,
the same for every checkpoint the run keeps (`position_table_steps()`). Needs the
checkpoints, which are not committed: the raw file is what the page is rebuilt from.
"""

import json
import os
import sys

import jax
from absl import app, flags, logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from roformer_jax.studies import run_dirs, study_record  # noqa: E402
from roformer_jax.studies.position_table import POSITION_TABLE_FILE as FILE  # noqa: E402
from roformer_jax.studies.position_table import POSITION_TABLE_STEPS_FILE as STEPS_FILE  # noqa: E402
from roformer_jax.studies.position_table import table_change  # noqa: E402
from roformer_jax.training import runs, runtime  # noqa: E402
from roformer_jax.training.config import experiment_config_from_dict  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "A study's workdir (compare.py --workdir).")
_RAW_DIR = flags.DEFINE_string("raw_dir", None, "The study's raw folder: copy each file there.")
_EVERY = flags.DEFINE_bool(
    "every_checkpoint", False, f"Also read every checkpoint the run keeps, into {STEPS_FILE}."
)
_TABLES = {
    "position": ("embeddings", "position_embeddings", "embedding"),
    "word": ("embeddings", "word_embeddings", "embedding"),
}


def _table(params, path):
    for key in path:
        params = params[key]
    return params


def _changes(run: str, every: bool) -> list[dict] | None:
    """table_change of the run's tables at its newest checkpoint, or at every one it keeps;
    None for a model without a position table."""
    with open(os.path.join(run, "config.json"), encoding="utf-8") as f:
        cfg = experiment_config_from_dict(json.load(f))
    init, rng = runs.model_and_optimizer(cfg)[3], runs.run_rngs(cfg.seed)[0]
    section, table = _TABLES["position"][:2]
    if table not in runs.state_shapes(init).params[section]:  # shapes: nothing compiled
        return None
    initial = jax.jit(init)(rng).params
    steps = runs.checkpoint_steps(run) if every else [None]
    records = []
    for step in steps:
        params, step = runs.load_params(run, step)[1:]
        records.append(
            {"step": step}
            | {
                name: table_change(_table(initial, path), _table(params, path))
                for name, path in _TABLES.items()
            }
        )
    return records


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    found = 0
    for run in study_record.trained_runs(_WORKDIR.value, _RAW_DIR.value):
        records = _changes(run, _EVERY.value)
        if records is None:
            continue
        if not records:  # restored from a raw folder, which keeps no checkpoints
            logging.warning("%s keeps no checkpoint: its table cannot be read", run)
            continue
        run_dirs.write_beside(run, _WORKDIR.value, _RAW_DIR.value, FILE, records[-1])
        if _EVERY.value:
            run_dirs.write_beside(run, _WORKDIR.value, _RAW_DIR.value, STEPS_FILE, records)
        for r in records:
            logging.info(
                "%s at step %d: position table moved %.3f (neighbour cosine %+.3f), "
                "word table %.3f",
                run,
                r["step"],
                r["position"]["moved"],
                r["position"]["neighbor_cosine"],
                r["word"]["moved"],
            )
        found += 1
    if not found:
        raise FileNotFoundError(f"no run with a learned position table under {_WORKDIR.value}")


if __name__ == "__main__":
    flags.mark_flag_as_required("workdir")
    runtime.run_main(main)
