r"""Retrains one run of a committed study at the current commit and compares it with the record.

  python experiments/reproduce.py --raw_dir=docs/results/raw/causal_wikitext2 \
      --run="softmax + RoPE" --seed=0 --workdir=runs/reproduce/causal_wikitext2
  python experiments/reproduce.py --raw_dir=docs/results/raw/positions_long_wikitext2 \
      --run="learned (BERT)" --trained=docs/results/raw/positions_lr_sweep/BERT_lr_1e-3/seed0
  python experiments/reproduce.py --raw_dir=docs/results/raw/long_doc_pairs --run=MLM \
      --init_from=runs/reproduce/long_doc_pilot/RoPE_RoFormer_/seed0 \
      --workdir=runs/reproduce/long_doc_pairs
  python experiments/reproduce.py --raw_dir=docs/results/raw/long_training_wikitext2 \
      --run="RoPE (RoFormer)" --steps=2000 --workdir=runs/reproduce/long_training_wikitext2

Reads the run's config.json from the study's raw folder, trains it afresh in --workdir (its
data cached there too), or takes --trained, a run of the same config trained already
(another study's: the rate sweep's run at the rate the study used; its provenance.json names
its commit and machine), and compares every metric of every logged step with the committed
metrics.jsonl, the clocks (elapsed_s, tokens/s) aside. Writes reproduced.json beside the
run's raw files: the commit and machine of the rerun, whether every value is bit-identical,
and otherwise the largest difference of each metric. docs/results.md's `reproduced()`
marker reads it into the study's header, so that a page whose header names an older commit
says whether the current one gives the same numbers (issue 31, item 6).

--steps=N retrains a long run's first N steps only, on its whole schedule, and compares the
records to step N: a cheaper check, which shows that the current code still makes the run's
start, not its later steps (reproduced.json and the page say "over its first N of M steps").
Rerun without --steps, the same workdir finishes the run.

A run that starts from another run's parameters (train.init_from) starts, retrained, from
--init_from: that run retrained by this command at the same commit (its folder under that
--workdir); a start trained in another version is refused, since the two would be no one
version's numbers, and so is one that has not finished (retrained with --steps).

The rerun trains in --workdir/<run>/seed<k>/, a study's layout, so that the study's readers
of checkpoints (experiments/position_table.py, attention_distance.py) take --workdir as they
take a study's, and write into its raw folder with --raw_dir.
"""

import json
import os
import sys

from absl import app, flags, logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from roformer_jax.studies import reproduction, run_dirs  # noqa: E402
from roformer_jax.training import loop, metrics, provenance, runtime  # noqa: E402
from roformer_jax.training.config import experiment_config_from_dict  # noqa: E402

_RAW_DIR = flags.DEFINE_string("raw_dir", None, "A study's raw folder (docs/results/raw/...).")
_RUN = flags.DEFINE_string("run", None, "The run's name, as the study's tables print it.")
_SEED = flags.DEFINE_integer("seed", 0, "Which seed of the run.")
_WORKDIR = flags.DEFINE_string("workdir", None, "Where to train it again (a new folder).")
_INIT_FROM = flags.DEFINE_string(
    "init_from", None, "For a run that starts from another: that run retrained (its folder)."
)
_STEPS = flags.DEFINE_integer(
    "steps", None, "Retrain only the run's first N steps (its schedule unchanged); compare to N."
)
_TRAINED = flags.DEFINE_string(
    "trained", None, "A run of the same config already trained (its folder): compare it instead."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    raw = run_dirs.run_dir(_RAW_DIR.value, _RUN.value, _SEED.value)
    if not os.path.exists(os.path.join(raw, "config.json")):
        held = [os.path.relpath(d, _RAW_DIR.value) for d in run_dirs.trained_runs(_RAW_DIR.value)]
        raise app.UsageError(
            f"--run={_RUN.value!r} --seed={_SEED.value}: no such run in {_RAW_DIR.value}, "
            f"which holds {', '.join(held) or 'none'}"
        )
    with open(os.path.join(raw, "config.json"), encoding="utf-8") as f:
        config = json.load(f)
    start = None
    if config["train"].get("init_from"):
        if not _INIT_FROM.value:
            raise app.UsageError(
                f"{raw} starts from another run (train.init_from): reproduce "
                "that one, then give its folder as --init_from"
            )
        config["train"]["init_from"] = _INIT_FROM.value
        start = reproduction.trained_version(provenance.read(_INIT_FROM.value))
        _check_finished(_INIT_FROM.value)
    elif _INIT_FROM.value:
        raise app.UsageError(f"{raw} starts from scratch: --init_from has nothing to replace")
    if _TRAINED.value:
        workdir = _TRAINED.value
        run_dirs.check_same_config(workdir, experiment_config_from_dict(config))
    elif _WORKDIR.value:
        config["train"]["data_cache_dir"] = os.path.join(_WORKDIR.value, "data")
        workdir = run_dirs.run_dir(_WORKDIR.value, _RUN.value, _SEED.value)
        loop.train_and_evaluate(experiment_config_from_dict(config), workdir, until=_STEPS.value)
    else:
        raise app.UsageError("give --workdir (train it again) or --trained (a run trained)")
    # Either way the rerun's own provenance names its version: a retrain resumed from an
    # earlier sitting at another commit is no one commit's numbers, and is refused.
    version = reproduction.trained_version(provenance.read(workdir))
    if start is not None and start != version:
        raise ValueError(
            f"the rerun ({version}) started from a run of another version "
            f"({start}): not one version's numbers"
        )
    record = (
        reproduction.compare_records(
            metrics.read_metrics(raw), metrics.read_metrics(workdir), until=_STEPS.value
        )
        | version
    )
    with open(os.path.join(raw, reproduction.FILE), "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    logging.info(
        "%s seed %d at %s: %s",
        _RUN.value,
        _SEED.value,
        record["commit"],
        reproduction.summary(record),
    )


def _check_finished(workdir: str) -> None:
    """A start is a run's final parameters: one retrained only to an early step (--steps) is
    not the start the record had."""
    with open(os.path.join(workdir, "config.json"), encoding="utf-8") as f:
        steps = json.load(f)["train"]["steps"]
    if not run_dirs.is_finished(workdir, steps):
        raise app.UsageError(f"--init_from {workdir} has not finished its {steps} steps")


if __name__ == "__main__":
    for name in ("raw_dir", "run"):
        flags.mark_flag_as_required(name)
    runtime.run_main(main)
