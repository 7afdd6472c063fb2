"""What loop_test.py's tests share: the tiny experiment config on a generated corpus, its
reference runs (trained once per process) and their records."""

import contextlib
import functools
import os
import socket
from unittest import mock

import jax
import tiny
import traces

from roformer_jax.training import loop, runtime
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training import step as step_lib
from roformer_jax.training.config import ExperimentConfig

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TMP = tiny.workdir("train_test_")


def _overrides(**overrides) -> dict:
    """configs/tiny.py's overrides that make `_config(**overrides)`, as section__field=value."""
    short = dict(
        data__source=tiny.corpus(_TMP),
        data__seq_len=32,
        data__valid_lengths=(64,),
        data__max_chars=None,
        model__num_layers=1,
        model__hidden_dropout=0.0,
        model__attention_dropout=0.0,
        optim__warmup_steps=1,
        train__steps=3,
        train__batch_size=8,
        train__log_every=1,
        train__eval_every=2,
        train__checkpoint_every=2,
        train__eval_batches=2,
        train__data_cache_dir=os.path.join(_TMP, "data"),
    )
    return {**short, **overrides}


def _config(**overrides) -> ExperimentConfig:
    """configs/tiny.py, one layer, on the generated corpus (tiny.corpus), 3 short steps.

    overrides: section__field=value, e.g. train__steps=8, or a top-level field (seed=1).
    """
    return tiny.experiment_config(**_overrides(**overrides))


def _records(workdir):
    """metrics.jsonl without the wall-clock fields."""
    return [
        {k: v for k, v in r.items() if k not in metrics_lib.TIMING_KEYS}
        for r in metrics_lib.read_metrics(workdir)
    ]


@contextlib.contextmanager
def _traced_once():
    """Fails a run whose train step is traced twice (a retrace after the first step)."""
    with traces.counted() as traced:
        yield
    if traced["train_step"] > 1:
        raise AssertionError(f"the train step was traced {traced['train_step']} times")


# Overrides that make `_config()` a causal LM, or FAVOR+ with RoPE in the numerator (eq. 19)
# whose random features are redrawn after 2 of the 3 steps, dropout on and 16 training rows
# (DevicesAndHostsTest runs it again on 2 hosts of 4 devices: each device draws the masks of
# its 2 rows as one device does), evaluated in _config's 8.
_CLM = {"data__objective": "clm", "model__causal": True}
_FAVOR = {
    "model__attention": "linear",
    "model__sections__linear__feature_map": "favor",
    "model__sections__linear__random_features": 16,
    "model__sections__linear__feature_redraw": 2,
    "model__hidden_dropout": 0.1,
    "train__batch_size": 16,
    "train__eval_batch_size": 8,
    "seed": 3,
}
_VARIANTS = {"mlm": {}, "clm": _CLM, "favor": _FAVOR}


@functools.cache
def _reference_run(variant: str = "mlm") -> tuple[str, dict]:
    """The 3-step run of `_config()` with the overrides of `_VARIANTS[variant]`."""
    workdir = os.path.join(_TMP, "reference" if variant == "mlm" else f"reference_{variant}")
    with _traced_once():
        final = loop.train_and_evaluate(_config(**_VARIANTS[variant]), workdir)
    return workdir, final


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _initial_state(cfg: ExperimentConfig, workdir: str) -> step_lib.TrainState:
    """Trains `cfg` in `workdir`; returns the state its loop started from, as host arrays."""
    states = []
    real = runtime.Devices.replicate

    def replicate(self, tree):  # the loop replicates its initial (or restored) state once
        states.append(jax.device_get(tree))
        return real(self, tree)

    with mock.patch.object(runtime.Devices, "replicate", replicate):
        loop.train_and_evaluate(cfg, workdir)
    return states[0]


def _at(tree, path):
    for key in path:
        tree = tree[key]
    return tree
