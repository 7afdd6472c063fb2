"""Where a run's numbers came from: the code, the machine and when, one entry per session.

    provenance.record_session(workdir, start_step=step)   # the trainer, at every (re)start
    provenance.read(workdir)["sessions"][-1]["commit"]

`workdir/provenance.json` lists each session that trained the run (a resumed run adds one):
the git commit of the package's checkout and whether it had uncommitted changes outside docs/
(the results a running study writes there are not what made them; None where
the package is not a git checkout, e.g. installed from a wheel), the step it started from,
the start time (UTC), and the machine: CPU count, architecture and model (with AVX-512 or
not: XLA's CPU code, and so the last bits of float32 results, differ between kinds of core),
JAX's version, backend and device kinds. A results page can then name the commit each study
ran at, and tell whether the code changed since.
"""

from __future__ import annotations

import datetime
import json
import os
import platform
import re
import subprocess

import jax

FILE = "provenance.json"
_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))


def code_version(root: str = _ROOT) -> dict:
    """{"commit": sha or None, "dirty": bool or None} of the checkout at root (by default the
    one this package runs from); dirty: a tracked file outside docs/ differs from the commit."""

    def git(*args):
        out = subprocess.run(
            ["git", "-C", root, *args], capture_output=True, text=True, timeout=10, check=True
        )
        return out.stdout.strip()

    try:
        commit = git("rev-parse", "HEAD")
        # A study rewrites its own raw files under docs/results/raw as it goes: a run begun after
        # them would otherwise count as uncommitted code.
        dirty = bool(git("status", "--porcelain", "--untracked-files=no", "--", ".", ":!docs"))
    except (OSError, subprocess.SubprocessError):  # no git, or not a checkout
        return {"commit": None, "dirty": None}
    return {"commit": commit, "dirty": dirty}


def code_changed(commit: str) -> list[str] | None:
    """The files of roformer_jax/ and configs/ that differ between `commit` and HEAD (none: an
    empty list); None where git or the commit is unavailable."""
    try:
        done = subprocess.run(
            [
                "git",
                "-C",
                _ROOT,
                "diff",
                "--name-only",
                commit,
                "HEAD",
                "--",
                "roformer_jax",
                "configs",
            ],
            capture_output=True,
            text=True,
            timeout=30,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    return done.stdout.split() if done.returncode == 0 else None  # 128: an unknown commit


def cpu_model(cpuinfo: str | None = None) -> str:
    """The processor's model name, ", AVX-512" where it has it; platform.processor() where
    there is no /proc/cpuinfo (not Linux). `cpuinfo`: that file's text, read if None."""
    if cpuinfo is None:
        try:
            with open("/proc/cpuinfo", encoding="utf-8") as f:
                cpuinfo = f.read()
        except OSError:
            return platform.processor() or "unknown"
    model = re.search(r"^model name\s*:\s*(.*\S)", cpuinfo, re.MULTILINE)
    flags = re.search(r"^flags\s*:(.*)$", cpuinfo, re.MULTILINE)
    name = model.group(1) if model else platform.processor() or "unknown"
    return name + (", AVX-512" if flags and "avx512f" in flags.group(1).split() else "")


def cpus() -> int:
    """The cores this process may run on: all of them, or those `taskset` pinned it to (XLA
    sizes its thread pool by the same count)."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()


def machine() -> dict:
    return {
        "cpus": cpus(),
        "architecture": platform.machine(),
        "cpu": cpu_model(),
        "jax": jax.__version__,
        "backend": jax.default_backend(),
        "devices": sorted({d.device_kind for d in jax.devices()}),
        "device_count": jax.device_count(),
        "process_count": jax.process_count(),
    }


def record_session(
    workdir: str,
    *,
    start_step: int,
    config_changes: dict | None = None,
    mesh: dict[str, int] | None = None,
    state_bytes_per_device: int | None = None,
) -> dict:
    """Appends this session to workdir/provenance.json (written atomically); returns it.

    config_changes: {dotted key: (before, now)} of the settings this session changed on
    resuming (training.workdir), recorded where there are any. mesh: the devices along each
    axis of training.mesh ({"data": 8, "fsdp": 1, "tensor": 1, "context": 1} for pmap over
    8), and state_bytes_per_device: the bytes of parameters and optimizer state on device 0,
    recorded where given.
    """
    session = {
        **code_version(),
        "start_step": start_step,
        "started": datetime.datetime.now(datetime.UTC).isoformat(timespec="seconds"),
        "machine": machine(),
    }
    if mesh is not None:
        session["mesh"] = mesh
    if state_bytes_per_device is not None:
        session["state_bytes_per_device"] = state_bytes_per_device
    if config_changes:
        session["config_changes"] = {k: list(v) for k, v in config_changes.items()}
    record = read(workdir) or {"sessions": []}
    record["sessions"].append(session)
    path = os.path.join(workdir, FILE)
    with open(path + ".tmp", "w", encoding="utf-8") as f:
        json.dump(record, f, indent=1)
    os.replace(path + ".tmp", path)
    return session


def read(workdir: str) -> dict | None:
    """The run's provenance record, or None where it has none (runs before this file)."""
    path = os.path.join(workdir, FILE)
    if not os.path.exists(path):
        return None
    with open(path, encoding="utf-8") as f:
        return json.load(f)
