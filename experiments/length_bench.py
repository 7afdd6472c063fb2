r"""The length-generalization retrieval bench in one command (configs/bench_length.py's
docstring says what it asks).

  python experiments/length_bench.py --config=configs/bench_length.py:passkey \
      --workdir=runs/bench_passkey --raw_dir=docs/results/raw/bench_passkey

Trains each arm x seed on the task (cached in <workdir>, resumable: a rerun runs only what is
missing), scores it at every length, logs a line per run with the time left, and prints the
accuracy and paired tables. With --raw_dir, copies each run's result.json there as it finishes
and at the end writes bench.json (the command, config, code and machine; kept where every run
was there already, so that it names the command that trained them), from which
`python experiments/results_page.py` rebuilds docs/results.md's section. Rerun on a fresh
machine (an empty --workdir), it takes back the runs finished in --raw_dir, so a bench longer
than a sitting goes on from its committed raw files.
"""

import os
import sys

from absl import app

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from experiments import study_flags  # noqa: E402
from roformer_jax.studies import length_bench, length_bench_report  # noqa: E402
from roformer_jax.training import runtime  # noqa: E402

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define(
    "bench_length.py", "runs/bench", "Bench config: task, arms, seeds, lengths, optimizer."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config = _CONFIG.value
    runtime.use_xla_flags(config.get("xla_flags", ""))
    results = study_flags.run_own_runs(length_bench, config, _WORKDIR.value, _RAW_DIR.value)
    settings = config.to_dict()
    for eval_set in settings["eval_sets"]:
        print(
            f"{eval_set}:",
            length_bench_report.accuracy_table(settings, results, eval_set),
            length_bench_report.paired_table(settings, results, eval_set),
            sep="\n\n",
            end="\n\n",
        )


if __name__ == "__main__":
    runtime.run_main(main)
