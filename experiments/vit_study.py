r"""The ViT resolution study in one command (configs/study_vit.py's docstring says what it asks).

  python experiments/vit_study.py --config=configs/study_vit.py --workdir=runs/vit \
      --raw_dir=docs/results/raw/vit

Trains each encoding x seed (cached in <workdir>, resumable), scores every image size, prints
the accuracy and paired tables, and draws <workdir>/vit.png (`:select`: prints the rates it
chooses on the validation digits instead). With --raw_dir, copies each run's result.json there
as it finishes and at the end writes record.json (the command, config, code and machine; kept
where every run was there already), from which `python experiments/results_page.py` rebuilds
docs/results.md's section.
"""

import os
import sys

from absl import app

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from experiments import study_flags  # noqa: E402
from roformer_jax.studies import vit_study  # noqa: E402
from roformer_jax.training import provenance, runtime  # noqa: E402

_CONFIG, _WORKDIR, _RAW_DIR = study_flags.define(
    "study_vit.py", "runs/vit", "Study config: model, runs, pairs, seeds, sizes, optimizer."
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    config, workdir = _CONFIG.value, _WORKDIR.value
    results = study_flags.run_own_runs(vit_study, config, workdir, _RAW_DIR.value)
    png = os.path.join(workdir, "vit.png")
    print(vit_study.report(config.to_dict(), results, png, provenance.machine()))


if __name__ == "__main__":
    runtime.run_main(main)
