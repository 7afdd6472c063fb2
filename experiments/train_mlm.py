r"""Pre-trains an encoder by masked language modelling (or, with data.objective="clm" and a
causal model, a decoder by next-token prediction): parses flags, calls the library.

  python experiments/train_mlm.py --config=configs/roformer_small.py --workdir=/tmp/rs \
      --config.model.position=learned --config.train.steps=2000

Rerunning with the same --workdir resumes from its latest checkpoint; a config that changes
what the run computes is refused there unless --resume_with_changes (docs/training.md).
--verbosity=1 adds the libraries' logs (orbax, jax) and the traceback of a bad config value.
Several hosts: start the same command on every host with --distributed (see README,
"Multi-host").
"""

import os
import sys

from absl import app, flags, logging
from ml_collections import config_flags

# Config files import `configs.base`: make the repository root importable for a plain run.
sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))

import jax  # noqa: E402

from roformer_jax.training import metrics, runtime  # noqa: E402
from roformer_jax.training.config import experiment_config_from_dict  # noqa: E402
from roformer_jax.training.loop import train_and_evaluate  # noqa: E402

_CONFIG = config_flags.DEFINE_config_file(
    "config",
    None,
    "Experiment config file, e.g. configs/roformer_small.py[:runlocal].",
    lock_config=True,
)
_WORKDIR = flags.DEFINE_string("workdir", None, "Checkpoints, metrics and logs go here.")
_RESUME_WITH_CHANGES = flags.DEFINE_bool(
    "resume_with_changes",
    False,
    "Resume even where the config changes what the run computes (seed, data, model, "
    "optimizer, schedule); the changes are recorded in config.json and provenance.json.",
)
_DISTRIBUTED = flags.DEFINE_bool(
    "distributed",
    False,
    "Call jax.distributed.initialize() before anything else: needed on several hosts. "
    "Without the three flags below JAX reads the cluster from the environment (TPU pods, "
    "SLURM, Open MPI, Kubernetes).",
)
_COORDINATOR = flags.DEFINE_string("coordinator_address", None, "host:port of process 0.")
_NUM_PROCESSES = flags.DEFINE_integer("num_processes", None, "Number of processes (hosts).")
_PROCESS_ID = flags.DEFINE_integer("process_id", None, "This process's index, 0 ... n-1.")
flags.mark_flags_as_required(["config", "workdir"])


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    if _DISTRIBUTED.value:
        jax.distributed.initialize(
            coordinator_address=_COORDINATOR.value,
            num_processes=_NUM_PROCESSES.value,
            process_id=_PROCESS_ID.value,
        )
    cfg = experiment_config_from_dict(_CONFIG.value.to_dict())
    logging.info(
        "process %d of %d, %d local devices: %s",
        jax.process_index(),
        jax.process_count(),
        jax.local_device_count(),
        jax.local_devices(),
    )
    final = train_and_evaluate(cfg, _WORKDIR.value, resume_with_changes=_RESUME_WITH_CHANGES.value)
    logging.info("final metrics: %s", metrics.summary(final))


if __name__ == "__main__":
    runtime.run_main(main)
