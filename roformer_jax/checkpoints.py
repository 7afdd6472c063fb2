"""Checkpoints of a training run: orbax `CheckpointManager` plus the run's configuration.

Each step folder `workdir/checkpoints/<step>/` holds two items, written atomically by orbax
(a temporary folder renamed once complete; an interrupted save leaves no partial step):
  state  the TrainState (step, params, optimizer state) as host numpy arrays
  meta   JSON: the experiment config it was trained with, and the trainer's host-side
         progress (pending metric sums, elapsed time) so a resumed run logs the same numbers

Every process calls `save` and `restore` (orbax synchronizes them and lets the primary
process write); `restore` refuses a checkpoint of a different model before reading any array.
"""

from __future__ import annotations

import json
import os
from typing import Any

import orbax.checkpoint as ocp


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

    def latest_step(self) -> int | None:
        return self._manager.latest_step()

    def save(self, step: int, state: Any, meta: dict) -> None:
        """Writes `state` (a pytree of host arrays) and `meta` (JSON) as step `step`.

        Asynchronous: returns once the arrays are handed to orbax; `close` waits for it.
        """
        self._manager.save(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardSave(state), meta=ocp.args.JsonSave(meta)
            ),
            force=True,
        )

    def restore(self, abstract_state: Any, model_config: dict) -> tuple[Any, dict] | None:
        """The latest (state, meta), or None when there is no checkpoint yet.

        Raises ValueError when the checkpoint was written for a different model config,
        naming the fields that differ, instead of failing later on mismatched shapes.
        """
        step = self._manager.latest_step()
        if step is None:
            return None
        meta = self._manager.restore(step, args=ocp.args.Composite(meta=ocp.args.JsonRestore()))
        saved = meta.meta["config"]["model"]
        model_config = json.loads(json.dumps(model_config))  # tuples -> lists, as saved
        absent = "<absent>"
        diffs = [
            f"{key}: {saved.get(key, absent)!r} in the checkpoint, "
            f"{model_config.get(key, absent)!r} now"
            for key in sorted(set(saved) | set(model_config))
            if saved.get(key, absent) != model_config.get(key, absent)
        ]
        if diffs:
            raise ValueError(
                f"the checkpoint at {self.directory}/{step} was trained with a different model "
                f"config ({'; '.join(diffs)}). Use a new --workdir, or the same model config "
                "to resume."
            )
        restored = self._manager.restore(
            step,
            args=ocp.args.Composite(
                state=ocp.args.StandardRestore(abstract_state), meta=ocp.args.JsonRestore()
            ),
        )
        return restored.state, restored.meta

    def close(self) -> None:
        """Waits for pending saves (and deletions of old steps) to finish."""
        self._manager.wait_until_finished()
        self._manager.close()
