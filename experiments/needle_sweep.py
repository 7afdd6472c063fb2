r"""Passkey's exact match with the needle at every token it can sit at, for trained arms of the
retrieval bench: where a model loses the needle by its place rather than its depth.

  python experiments/needle_sweep.py --config=configs/bench_length.py:passkey \
      --workdir=runs/bench_passkey --arms=iRoPE,RoPE --lengths=64,256 \
      --raw_dir=docs/results/raw/bench_passkey

Scores each arm's parameters of every seed (from the bench's --workdir; an arm whose
parameters are not there is trained again, seeded: the same model on the same kind of
machine) on --rows text-haystack rows per needle place (length_bench.needle_sweep), and
prints the accuracy by the marker's place in a --period-token block (iRoPE's chunk). With
--raw_dir, writes needle_sweep.json there (this command's record, as the bench's: its config,
code, machine and wall time; and every accuracy), from which docs/results.md's section 11
draws its table.
"""

import os
import sys
import time

from absl import app, flags, logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from experiments import study_flags  # noqa: E402
from roformer_jax.studies import length_bench, length_bench_report, own_runs  # noqa: E402
from roformer_jax.training import runtime  # noqa: E402

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define(
    "bench_length.py", "runs/bench", "Bench config (:passkey): its arms, seeds, eval_seed."
)
_ARMS = flags.DEFINE_list("arms", ["iRoPE", "RoPE"], "Arms of the config to sweep.")
_LENGTHS = flags.DEFINE_list("lengths", ["64", "256"], "Row lengths to sweep at.")
_ROWS = flags.DEFINE_integer("rows", 64, "Rows per needle place.")
_PERIOD = flags.DEFINE_integer("period", 16, "Block of tokens the printed table folds by.")


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    started, config = time.time(), _CONFIG.value.to_dict()
    settings_of, lengths = length_bench.arms(config), [int(n) for n in _LENGTHS.value]
    sweeps = {}
    for name in _ARMS.value:
        if name not in settings_of:
            raise app.UsageError(f"--arms: {name!r} is not an arm of the config")
        sweeps[name] = {str(n): [] for n in lengths}
        for seed in config["seeds"]:
            params = length_bench.arm_params(settings_of, name, seed, _WORKDIR.value)
            for n in lengths:
                logging.info("%s seed %d at %d tokens", name, seed, n)
                accuracy = length_bench.needle_sweep(settings_of[name], params, n, _ROWS.value)
                sweeps[name][str(n)].append(accuracy)
    sweep = {"rows": _ROWS.value, "digits": config["options"]["digits"], "arms": sweeps}
    print(length_bench_report.needle_table(sweep, _PERIOD.value))
    if _RAW_DIR.value:
        record = study_flags.record(_CONFIG.value, wall_s=time.time() - started, unigram=None)
        path = os.path.join(_RAW_DIR.value, length_bench.NEEDLE_SWEEP)
        own_runs.write_json(path, {**record, **sweep})
        logging.info("wrote %s", path)


if __name__ == "__main__":
    runtime.run_main(main)
