"""Where a run executes: devices and hosts, stop signals and preemption, and the terminal.

Devices. One device: the step is jitted. Several (on this host or others): it is pmapped
over the local devices; every host runs the same program on its own rows of the global
batch, and pmap's collectives span all devices of all hosts.

Terminal. `run_main` is every entry point's `app.run`: it keeps the log to what a user can act
on (this codebase's records, and everyone's warnings; orbax's option dumps, checkpoint
internals and jax chatter only at --verbosity=1 or more), and prints a ValueError or
FileNotFoundError, mistakes in what the user gave, as one last line instead of a traceback
(--verbosity=1 shows the traceback too). A misspelt --config.x override, which ml_collections
refuses while the flags are parsed, is one line too, with its suggestion, and so is a --config
file that cannot be read. A run stopped on request (`TrainingInterrupted`) ends with its
warning, a second Ctrl-C with one line: the command resumes from what was saved.
"""

from __future__ import annotations

import contextlib
import functools
import logging as pylogging
import os
import signal
import sys
import threading
import time

import jax
import numpy as np
from absl import app, logging
from jax._src import xla_bridge  # backends_are_initialized: not in jax.extend yet
from jax.experimental import multihost_utils

AXIS = "devices"  # the pmap axis name
# The package's own folder: installed into site-packages, its parent holds orbax and jax too.
_PACKAGE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class TrainingInterrupted(Exception):
    """SIGTERM / Ctrl-C (or a multi-host preemption notice) stopped the run after a save."""


# ---------------------------------------------------------------- devices and hosts


class Devices:
    """jit on one device, pmap over the local devices otherwise (see module doc).

    Replicated values carry a leading axis of the local device count.
    """

    def __init__(self):
        self.local = jax.local_devices()
        self.parallel = jax.device_count() > 1
        self.axis = AXIS if self.parallel else None
        self.process_index, self.process_count = jax.process_index(), jax.process_count()

    @property
    def sizes(self) -> dict[str, int]:
        """The mesh this is, in training.mesh's axes: data parallel over every device."""
        return {"data": jax.device_count(), "fsdp": 1, "tensor": 1, "context": 1}

    def check_model(self, model, lengths=()) -> None:
        """Any model fits at any length: every device holds all of it and whole rows."""

    def check_batch(self, batch_size: int, accum: int, name: str):
        if batch_size % (jax.device_count() * accum):
            raise ValueError(
                f"{name} {batch_size} is not divisible by {jax.device_count()} devices"
                + (f" x grad_accum {accum}" if accum > 1 else "")
            )

    def compile(self, train_step, eval_step, state=None):
        """(train_step, eval_step) jitted or pmapped; `state`, the TrainState's shapes, is a
        mesh's (training.mesh): jit and pmap here follow where their arguments are."""
        if not self.parallel:
            return jax.jit(train_step, donate_argnums=(0,)), jax.jit(eval_step)
        return (
            jax.pmap(train_step, AXIS, in_axes=(0, 0, None), donate_argnums=(0,)),
            jax.pmap(eval_step, AXIS),
        )

    def shard(self, batch):  # [b, L] -> [n, b / n, L]
        if not self.parallel:
            return batch
        return jax.tree.map(lambda x: x.reshape(len(self.local), -1, *x.shape[1:]), batch)

    def first(self, tree):
        """Host numpy copies of the device-0 values (np.array copies: a zero-copy view of a
        CPU buffer would change under orbax's background write once the step donates it)."""
        return jax.tree.map(lambda x: np.array(x[0] if self.parallel else x), tree)

    def saved(self, state):
        """The state as its checkpoint holds it: host copies of device 0's (`first`)."""
        return self.first(state)

    def shardings(self, state):
        """Where each leaf of a restored TrainState `state` lands before `replicate`."""
        return on_first_device(state)

    def unshard(self, tree):
        """Host numpy rows of per-device outputs: [n, b / n, ...] -> [b, ...] (`shard`'s
        inverse)."""
        if not self.parallel:
            return jax.tree.map(np.asarray, tree)
        return jax.tree.map(lambda x: np.asarray(x).reshape(-1, *x.shape[2:]), tree)

    def replicate(self, tree):
        """[...] -> [n, ...] with a separate copy on each local device.

        Separate buffers matter: the step donates its state and every device updates its copy
        in place. Given a broadcast numpy view instead, pmap lets the CPU backend alias one
        host buffer for all devices (zero-copy), and the devices then race on it.
        """
        if not self.parallel:
            return tree
        mesh = jax.sharding.Mesh(np.array(self.local), (AXIS,))
        sharding = jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(AXIS))

        def put(x):
            x = np.asarray(x)[None]
            copies = [jax.device_put(np.array(x), d) for d in self.local]
            shape = (len(self.local), *x.shape[1:])
            return jax.make_array_from_single_device_arrays(shape, sharding, copies)

        return jax.tree.map(put, tree)


def use_xla_flags(extra: str) -> None:
    """Adds `extra` to XLA_FLAGS for this process. XLA reads them once, as JAX starts its
    backend (at the first computation): a RuntimeError after that, where they would be
    silently ignored. XLA itself ends the process on a flag it does not know."""
    if not extra:
        return
    if xla_bridge.backends_are_initialized():
        raise RuntimeError(f"XLA flags {extra!r} come too late: JAX's backend has started")
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {extra}".strip()


def on_first_device(tree):
    """The SingleDeviceSharding of this host's first device, for every leaf of `tree`."""
    first = jax.sharding.SingleDeviceSharding(jax.local_devices()[0])
    return jax.tree.map(lambda _: first, tree)


def host_array(x) -> np.ndarray:
    """The whole of the array `x` on this host: gathered from every host where it is split
    over their devices (every host must call it, in the same order)."""
    if not isinstance(x, jax.Array) or x.is_fully_addressable:
        return np.asarray(x)
    return np.asarray(multihost_utils.process_allgather(x, tiled=True))


def bytes_on_device(tree, device) -> int:
    """The bytes of `tree`'s arrays that `device` holds (its shards of each)."""
    return sum(
        shard.data.nbytes
        for x in jax.tree.leaves(tree)
        for shard in x.addressable_shards
        if shard.device == device
    )


# ---------------------------------------------------------------- time


class Clock:
    """Training seconds over every session of a run: `elapsed()`, from `before` (what the
    run's checkpoint says earlier sessions took), and `session()`, this session's alone."""

    def __init__(self, before: float):
        self._before, self._start = before, time.time()

    def session(self) -> float:
        return time.time() - self._start

    def __call__(self) -> float:
        return self._before + self.session()


class Speed:
    """Tokens/s of the training steps since `restart`, and the ETA they give; `stages` are
    `(steps, seq_len, batch_size)`: a step of a stage reads seq_len x batch_size tokens.

    A step that compiles (the first of a session, the first of each stage: a new shape) is
    waited for and not timed.
    """

    def __init__(self, stages, start: int):
        stage_steps = [s[0] for s in stages]
        self._compiles = {start + 1, *np.cumsum([1, *stage_steps[:-1]]).tolist()}
        self._tokens = np.repeat([s[1] * s[2] for s in stages], stage_steps)  # [t]: of step t+1
        self.restart()

    def restart(self):
        self._from, self._steps, self._count = time.time(), 0, 0

    def stepped(self, step: int, metrics):
        if step in self._compiles:
            jax.block_until_ready(metrics)
            self.restart()
        else:
            self._steps += 1
            self._count += int(self._tokens[step - 1])

    def rate(self) -> float | None:
        return self._count / (time.time() - self._from) if self._steps else None

    def eta_s(self, step: int, tokens_per_s: float | None) -> float | None:
        return float(self._tokens[step:].sum()) / tokens_per_s if tokens_per_s else None


# ---------------------------------------------------------------- stopping


def preemption(step: int) -> bool:
    """True at the step where every host saves after a preemption notice (multi-host only).

    jax.distributed's preemption service turns a SIGTERM on any host into the same step on
    every host, so that all of them save the same checkpoint.
    """
    if jax.process_count() == 1:
        return False
    try:
        return multihost_utils.reached_preemption_sync_point(step)
    except RuntimeError:  # the service is disabled
        return False


@contextlib.contextmanager
def stop_requests():
    """Yields `stop_requested()`: True once SIGTERM or SIGINT arrived (single process only).

    The first signal asks the loop to save and stop after the current step; a second Ctrl-C
    falls through to Python's default (KeyboardInterrupt, no save), except while that last
    checkpoint is written (`interrupts_deferred`). Multi-host runs leave SIGTERM to jax's
    preemption service (see `preemption`).
    """
    received = []
    if jax.process_count() > 1 or threading.current_thread() is not threading.main_thread():
        yield lambda: False
        return

    def handler(signum, frame):
        received.append(signum)
        logging.warning("%s: saving a checkpoint after this step", signal.Signals(signum).name)
        signal.signal(signal.SIGINT, signal.default_int_handler)

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield lambda: bool(received)
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


@contextlib.contextmanager
def interrupts_deferred():
    """Ctrl-C and SIGTERM are logged and ignored for the block (single process): the save a
    stop request asked for, which a second Ctrl-C would cut short, leaving no checkpoint at
    all of a run that has not saved before. `kill -9` still ends the process."""
    if jax.process_count() > 1 or threading.current_thread() is not threading.main_thread():
        yield
        return

    def handler(signum, frame):
        logging.warning(
            "%s while the checkpoint is written: it stops once the save is done",
            signal.Signals(signum).name,
        )

    previous = {s: signal.signal(s, handler) for s in (signal.SIGTERM, signal.SIGINT)}
    try:
        yield
    finally:
        for s, h in previous.items():
            signal.signal(s, h)


# ---------------------------------------------------------------- the terminal


class _ActionableRecords(pylogging.Filter):
    """Passes warnings and errors, and below them only the records of this package and of
    the entry point's folder (experiments/).

    At --verbosity=1 (DEBUG) or more everything passes: the libraries' INFO is for
    debugging them (orbax alone writes ~20 lines per checkpoint).
    """

    def __init__(self):
        super().__init__()
        entry_point = os.path.dirname(os.path.abspath(sys.argv[0])) if sys.argv[0] else None
        self._ours = tuple(d + os.sep for d in (_PACKAGE, entry_point) if d)

    def filter(self, record: pylogging.LogRecord) -> bool:
        return (
            record.levelno >= pylogging.WARNING
            or logging.get_verbosity() >= logging.DEBUG
            or os.path.abspath(record.pathname).startswith(self._ours)
        )


def quiet_library_logs() -> None:
    """Installs the filter of `_ActionableRecords` on absl's handler (once per process)."""
    handler = logging.get_absl_handler()
    if not any(isinstance(f, _ActionableRecords) for f in handler.filters):
        handler.addFilter(_ActionableRecords())


def run_main(main) -> None:
    """`app.run(main)` with a quiet log and user errors as a last line (see module doc)."""
    started = []

    @functools.wraps(main)
    def wrapped(argv):
        started.append(True)
        quiet_library_logs()
        try:
            return main(argv)
        except TrainingInterrupted as e:  # on request: the command resumes from its save
            logging.warning("%s", e)
            sys.exit(1)
        except KeyboardInterrupt:
            if logging.get_verbosity() >= logging.DEBUG:
                raise
            logging.flush()
            print(
                "KeyboardInterrupt: rerun the command to resume from what it saved", file=sys.stderr
            )
            sys.exit(130)
        except (ValueError, OSError) as e:
            # ml_collections keeps a --config file it could not load for the first read of
            # the flag's value, as an OSError whose last line says why.
            unreadable = isinstance(e, OSError) and _CONFIG_FAILURE in str(e)
            if not isinstance(e, ValueError | FileNotFoundError) and not unreadable:
                raise
            if logging.get_verbosity() >= logging.DEBUG:
                raise
            logging.flush()
            message = f"--config: {str(e).splitlines()[-1].strip()}" if unreadable else e
            print(f"{type(e).__name__}: {message}", file=sys.stderr, flush=True)
            sys.exit(1)

    try:
        app.run(wrapped)
    except (AttributeError, KeyError) as e:
        if started:  # raised by main: a bug, whose traceback is what its reader needs
            raise
        # ml_collections' lock_config refuses a misspelt --config.x override while absl
        # parses the flags, before main, as a chain of KeyError and AttributeError.
        print(f"ValueError: {_unknown_override(e)}", file=sys.stderr, flush=True)
        sys.exit(1)


_CONFIG_FAILURE = "Failed loading config file"


def _unknown_override(error: Exception) -> str:
    """One line naming the override ml_collections refused, and its suggestion if any."""
    while error.args and isinstance(error.args[0], Exception):  # AttributeError(KeyError(...))
        error = error.args[0]
    key, _, suggestion = str(error.args[0] if error.args else error).partition("\n")
    key = key.strip("'\"")
    flag = next(
        (a.split("=")[0] for a in sys.argv[1:] if a.startswith("--config.") and key in a),
        "--config",
    )
    return f"{flag}: the config has no key {key!r}. {suggestion}".strip()
