"""Checkpoints of a training run: orbax `CheckpointManager` plus the run's configuration.

Each step folder `workdir/checkpoints/<step>/` holds two items, written atomically by orbax
(a temporary folder renamed once complete; an interrupted save leaves no partial step):
  state  the TrainState (step, params, optimizer state): host numpy arrays, or global
         jax.Arrays split over a mesh, which orbax writes each host's shards of
  meta   JSON: the experiment config it was trained with, and the trainer's host-side
         progress (pending metric sums, elapsed time) so a resumed run logs the same numbers

Every step proves its bytes: `save` refuses a state that is not finite and writes into meta
a SHA-256 digest of every array (at save time, on a host copy of the whole array, gathered
from every host where it is split over them); `restore` recomputes them, so that a flipped
bit in a data file, which orbax reads without complaint, makes the step damaged like a
garbled one. Steps saved before digests existed are checked for finiteness only.

Every process calls `save` and `restore` (orbax synchronizes them and lets the primary
process write what is not split); `restore` refuses a checkpoint of a different model before
reading any array, and places each array where its `shardings` say: a step written under
one mesh restores onto another, or onto one device.
A step that cannot be read (a garbled or truncated file, written over after orbax finished
it) is moved aside to `<directory>.damaged/` with a warning, and the next older one is tried.
"""

from __future__ import annotations

import gc
import hashlib
import logging as std_logging
import os
import sys
from typing import Any

import jax
import numpy as np
import orbax.checkpoint as ocp
from absl import logging
from jax.experimental import multihost_utils

from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.training.config import config_diff
from roformer_jax.training.runtime import host_array, on_first_device


class Checkpoints:
    """Save / restore the train state under `directory`, keeping the last `keep` steps."""

    def __init__(self, directory: str, *, keep: int):
        if keep < 1:
            raise ValueError(f"keep_checkpoints must be >= 1, got {keep}")
        self.directory = os.path.abspath(directory)
        self._manager = ocp.CheckpointManager(
            self.directory,
            options=ocp.CheckpointManagerOptions(max_to_keep=keep, create=True),
            item_names=("state", "meta"),
        )
        self._quiet = _ReadsOfDamagedSteps(self.directory)
        self._damaged = False  # a step was set aside: its abandoned reads are yet to be reported

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def all_steps(self) -> list[int]:
        return sorted(self._manager.all_steps())

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Writes `state` (a pytree of host arrays or jax.Arrays, on any devices) and `meta`
        (JSON) as step `step`.

        Asynchronous: returns once the arrays are handed to orbax; `close` waits for it.
        Raises FloatingPointError, saving nothing, when an array of `state` holds NaN or inf.
        """
        host = jax.tree.map(host_array, state)
        bad = _non_finite(host)
        if bad:
            raise FloatingPointError(
                f"the state of step {step} is not finite ({bad} holds NaN or inf); not saved "
                f"to {self.directory}"
            )
        meta = {**meta, INTEGRITY: {"finite": True, "sha256": digests(host)}}
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def restore(
        self,
        abstract_state: Any,
        model_config: Any,
        *,
        step: int | None = None,
        shardings: Any = None,
    ) -> tuple[Any, dict] | None:
        """The newest readable (state, meta), or None when there is no checkpoint yet; with
        `step`, that step's (a ValueError when it is not kept or cannot be read).

        shardings: where each array of `abstract_state` (a tree of its structure) lands,
        whatever mesh the step was written under (runtime.Devices' and mesh.MeshDevices'
        `shardings`); None: on this host's first device.

        model_config: the current ModelConfig (or its dict). Raises ValueError when the
        checkpoint was written for a different model config, naming the fields that differ,
        instead of failing later on mismatched shapes; and when no checkpoint can be read.
        """
        # Before any read: the collector may report a damaged step's abandoned reads as soon as
        # orbax raises, before _set_aside has said what happened.
        std_logging.getLogger("asyncio").addFilter(self._quiet)
        _quiet_reads_into_closed_loops()
        target = _placed(abstract_state, shardings)
        steps = sorted(self._manager.all_steps(), reverse=True)
        unfinished = [n for n in sorted(os.listdir(self.directory)) if _TMP in n]
        if unfinished:  # orbax renames a step once whole: these are saves cut off
            logging.warning(
                "%s holds saves cut off before they were whole (%s): not read; %s",
                self.directory,
                ", ".join(unfinished),
                f"the newest whole one is step {steps[0]}"
                if steps
                else "no whole step to resume from",
            )
        if step is not None:
            if step not in steps:
                raise ValueError(
                    f"no checkpoint of step {step} in {self.directory}; it keeps {sorted(steps)}"
                )
            steps = [step]
        for step in steps:
            try:
                meta = self._manager.restore(
                    step, args=ocp.args.Composite(meta=ocp.args.JsonRestore())
                ).meta
                saved = meta["config"]["model"]
            except Exception as e:  # noqa: BLE001 -- any unreadable meta is damage
                self._set_aside(step, "meta", e)
                continue
            self._check_same_model(step, saved, model_config)
            try:
                state = self._manager.restore(
                    step, args=ocp.args.Composite(state=ocp.args.StandardRestore(target))
                ).state
                _check_integrity(jax.tree.map(host_array, state), meta.pop(INTEGRITY, None))
            except Exception as e:  # noqa: BLE001 -- any unreadable or altered state is damage
                self._set_aside(step, "state", e)
                continue
            return state, meta
        if steps:
            raise ValueError(
                f"none of the checkpoints {sorted(steps)} in {self.directory} can be read "
                f"(moved to {self.directory}.damaged); delete them or use a new --workdir"
            )
        return None

    def _check_same_model(self, step: int, saved: dict, model_config: Any) -> None:
        diffs = [
            f"{key}: {old!r} in the checkpoint, {new!r} now"
            # A field added since the save counts as its default: what the run trained with.
            for key, (old, new) in config_diff(saved, model_config, defaults=ModelConfig()).items()
        ]
        if diffs:
            raise ValueError(
                f"the checkpoint at {self.directory}/{step} was trained with a different model "
                f"config ({'; '.join(diffs)}). Use a new --workdir, or the same model config "
                "to resume."
            )

    def _set_aside(self, step: int, item: str, error: Exception) -> None:
        """Moves an unreadable step out of orbax's sight, so that later saves are not refused."""
        aside = os.path.join(f"{self.directory}.damaged", str(step))
        logging.warning(
            "checkpoint %s/%d is damaged (its %s cannot be read: %s: %s); moved to %s, trying "
            "the one before it",
            self.directory,
            step,
            item,
            type(error).__name__,
            str(error)[:200],
            aside,
        )
        self._damaged = True
        if jax.process_index() == 0:
            os.makedirs(os.path.dirname(aside), exist_ok=True)
            os.replace(os.path.join(self.directory, str(step)), _unused(aside))
        if jax.process_count() > 1:
            multihost_utils.sync_global_devices(f"checkpoint {step} set aside")
        self._manager.reload()

    def wait_until_finished(self) -> None:
        """Returns once every save begun is on disk whole."""
        self._manager.wait_until_finished()

    def close(self) -> None:
        """Waits for pending saves (and deletions of old steps) to finish."""
        self._manager.wait_until_finished()
        self._manager.close()
        if self._damaged:  # only then: a collection takes seconds in a process that has jitted
            gc.collect()  # so that the abandoned reads are reported to the filter
        std_logging.getLogger("asyncio").removeFilter(self._quiet)


_TMP = ".orbax-checkpoint-tmp"  # orbax's suffix for a step being written


def _placed(abstract_state: Any, shardings: Any) -> Any:
    """`abstract_state`'s ShapeDtypeStructs with their `shardings` (orbax restores each array
    there; a step written over a mesh has no placement of its own on another)."""
    if shardings is None:
        shardings = on_first_device(abstract_state)
    return jax.tree.map(
        lambda x, s: jax.ShapeDtypeStruct(x.shape, x.dtype, sharding=s), abstract_state, shardings
    )


INTEGRITY = "integrity"  # meta's key: {"finite": True, "sha256": digests(state)}


def digests(state: Any) -> dict[str, str]:
    """{tree path: SHA-256 of the array's dtype, shape and bytes} of every leaf of `state`."""
    leaves = jax.tree_util.tree_flatten_with_path(state)[0]
    return {jax.tree_util.keystr(path): _digest(np.asarray(x)) for path, x in leaves}


def _digest(x: np.ndarray) -> str:
    h = hashlib.sha256(f"{x.dtype.str}{x.shape}".encode())
    h.update(np.ascontiguousarray(x).tobytes())
    return h.hexdigest()


def _non_finite(state: Any) -> str | None:
    """The tree path of the first floating array of `state` with a NaN or inf, or None."""
    for path, x in jax.tree_util.tree_flatten_with_path(state)[0]:
        x = np.asarray(x)
        if np.issubdtype(x.dtype, np.inexact) and not np.isfinite(x).all():
            return jax.tree_util.keystr(path)
    return None


def _check_integrity(state: Any, integrity: dict | None) -> None:
    """Raises ValueError naming the first array of a restored `state` whose bytes differ from
    the digest written at its save, or that is not finite."""
    if integrity is not None:
        saved = integrity["sha256"]
        for path, digest in digests(state).items():
            if saved.get(path) != digest:
                raise ValueError(f"{path} does not match the SHA-256 written at its save")
    bad = _non_finite(state)
    if bad:
        raise ValueError(f"{bad} holds NaN or inf")


class _ReadsOfDamagedSteps(std_logging.Filter):
    """Drops asyncio's reports of orbax's abandoned reads in a step we have set aside.

    When one array of a step cannot be read, orbax raises at once and leaves the reads of the
    others as asyncio tasks and futures that nobody awaits. Whenever the garbage collector finds
    them, asyncio logs each failure with a long traceback ("Task exception was never retrieved",
    or "Future ..."), after our one-line warning has said what happened and what we did. Other
    asyncio errors pass.
    """

    def __init__(self, directory: str):
        super().__init__()
        self._directory = directory

    def filter(self, record: std_logging.LogRecord) -> bool:
        error = record.exc_info[1] if record.exc_info else None
        return not (
            record.getMessage().startswith(_NEVER_RETRIEVED) and self._directory in str(error)
        )


def _quiet_reads_into_closed_loops() -> None:
    """Drops the reports of orbax's reads that finish after a failed restore (installed once
    per process, before the first restore: the first read may finish as orbax raises).

    orbax runs a restore in an event loop that it closes as soon as one array fails; the reads
    of the other arrays finish later in tensorstore's threads and hand their results to the
    closed loop, whose RuntimeError("Event loop is closed") tensorstore reports through
    sys.unraisablehook, a traceback per array. Other reports reach the previous hook.
    """
    previous = sys.unraisablehook
    if getattr(previous, "quiets_closed_loops", False):
        return

    def hook(report):
        last = report.exc_traceback
        while last is not None and last.tb_next is not None:
            last = last.tb_next
        closed = (
            report.exc_type is RuntimeError
            and str(report.exc_value) == "Event loop is closed"
            and last is not None
            and last.tb_frame.f_code.co_name == "_check_closed"
        )
        if not closed:
            previous(report)

    hook.quiets_closed_loops = True
    sys.unraisablehook = hook


_NEVER_RETRIEVED = ("Task exception was never retrieved", "Future exception was never retrieved")


def _unused(path: str) -> str:
    """`path`, or path.1, path.2, ... when a step of that number was set aside before."""
    candidate, k = path, 0
    while os.path.exists(candidate):
        k += 1
        candidate = f"{path}.{k}"
    return candidate
