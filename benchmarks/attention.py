"""Time and memory of the attention kinds against softmax, L = 512 ... 16384.

    python benchmarks/attention.py [--quick] [--causal] [--trials=3] [--output=attention.jsonl]
        [--malloc=default,hugepages,jemalloc]

Shapes: B = 1, N = 8 (B·N = 8), H = 64, float32, L = M. Kinds: softmax with RoPE, linear
(elu + 1) without RoPE, with RoPE in the numerator (eq. 19) and in both (eq. 18), cosine with
RoPE. Modes: "fwd" (the output) and "fwd+bwd" (gradients of sum(out) w.r.t. q, k and v).
Variants (--variants) of every kind: "full" (k, v with N heads), "K=2" and "K=1" (grouped-query
and multi-query attention: k, v with K heads), "segments" (packed rows: documents of
--document tokens, `segment_ids`, RoPE at positions restarting in each), and with --causal
the decay gates (the gated forms of nn/decay.py, issue 55): "retention" (RetNet's fixed log
gates, a constant of the jitted function as nn/gates.py makes them) and "forget" (FoX's log
gates log σ(z), an input like q, k and v, with their gradient in "fwd+bwd" as a learned gate
needs). The summary gives each variant's time over the same kind's "full" in the same run
(targets: grouped heads not slower than full ones, segments at most 1.2x, a gate at most
1.3x the ungated causal form of its kind at L 512-16384, the default --lengths).

Each case runs in its own subprocess, so that its peak resident memory is its own:
  ms        median wall time of a jitted call (after a compiling call); ms_min in the JSON
  cpu ms    process CPU time (all threads, user + system) per call: steadier than wall time
            when other processes share the cores
  temp MB   XLA's temporary buffers for one call (compiled.memory_analysis())
  peak MB   resident high-water mark during the calls minus the resident size before them
  faults    minor page faults per call: fresh pages the kernel had to zero (first touch)
A case whose temporaries exceed --max_gb is compiled but not run. Now and then a process runs
every call up to 1.8x slower than another process running the same case (seen on this 2-core
VM, cause unknown); --trials=3 runs each case in three processes, interleaved, and keeps the
one with the fastest call. The summary gives the ratios the project targets, of the fastest
calls (ms_min; the least disturbed by other processes): numerator-RoPE linear / plain linear
time, softmax / linear time, and how temp memory grows per doubling of L (2x = linear,
4x = quadratic). A first line times the first touch of fresh memory pages, writing the same
pages again, and the first touch of fresh memory in transparent huge pages.

XLA allocates each call's temporaries anew, so on this machine, where the first touch of a
page is slow, large cases pay for it on every call under glibc's default settings. --malloc
runs every case under each of these settings of the C allocator (environment variables of the
case's process; the records say which):
  default    the environment as it is (glibc, unless LD_PRELOAD says otherwise)
  hugepages  glibc asks the kernel for transparent huge pages for the blocks it maps
             (glibc >= 2.35; the kernel's THP mode "madvise" or "always"): one fault per
             2 MiB instead of one per 4 KiB
  jemalloc   jemalloc preloaded (Debian: apt-get install libjemalloc2) with purging off: it
             keeps freed pages, so only the first call touches fresh ones
"""

import json
import mmap
import os
import resource
import subprocess
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from timing import report, time_call

from roformer_jax.nn import attention, decay, rope, segments

_QUICK = flags.DEFINE_bool("quick", False, "L = 512, 1024, 2048 and fewer repeats.")
_LENGTHS = flags.DEFINE_list("lengths", [str(512 << i) for i in range(6)], "Sequence lengths.")
_KINDS = flags.DEFINE_list("kinds", None, "Subset of the kinds below (default: all).")
_CAUSAL = flags.DEFINE_bool("causal", False, "Time the causal forms instead.")
_HEADS = flags.DEFINE_integer("heads", 8, "N (B = 1).")
_HEAD_DIM = flags.DEFINE_integer("head_dim", 64, "H.")
_REPEATS = flags.DEFINE_integer("repeats", 5, "Timed calls per case (at least).")
_TRIALS = flags.DEFINE_integer(
    "trials", 1, "Processes per case, interleaved; the one with the fastest call counts."
)
_MAX_GB = flags.DEFINE_float("max_gb", 18.0, "Skip running cases needing more temp memory.")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")
_REPORT = flags.DEFINE_string("report", None, "Print the tables of saved JSON lines; run nothing.")
JEMALLOC = "/usr/lib/x86_64-linux-gnu/libjemalloc.so.2"
MALLOCS = {
    "default": {},
    "hugepages": {"GLIBC_TUNABLES": "glibc.malloc.hugetlb=1"},
    "jemalloc": {"LD_PRELOAD": JEMALLOC, "MALLOC_CONF": "dirty_decay_ms:-1,muzzy_decay_ms:-1"},
}
_MALLOC = flags.DEFINE_list(
    "malloc", ["default"], f"Allocator settings to run every case under: {', '.join(MALLOCS)}."
)
_CASE = flags.DEFINE_string("case", None, "Internal: 'kind,L,mode,variant' run in this process.")
# Each variant's key/value heads (None: N), whether rows are packed documents and which decay
# gate weighs the keys (causal forms only; None: none).
VARIANTS = {
    "full": (None, False, None),
    "K=2": (2, False, None),
    "K=1": (1, False, None),
    "segments": (None, True, None),
    "retention": (None, False, "retention"),
    "forget": (None, False, "forget"),
}
_VARIANTS = flags.DEFINE_list("variants", list(VARIANTS), "Variants of each kind to time.")
_DOCUMENT = flags.DEFINE_integer(
    "document", 384, "Tokens per packed document (segments; not a multiple of the chunk)."
)

# (function, keywords, rotated by RoPE)
KINDS = {
    "softmax": (attention.softmax_attention, {}, True),
    "linear": (attention.linear_attention, {}, False),
    "linear numerator": (attention.linear_attention, {"placement": "numerator"}, True),
    "linear both": (attention.linear_attention, {"placement": "both"}, True),
    "cosine": (attention.cosine_attention, {}, True),
}
MODES = ("fwd", "fwd+bwd")
FIRST_TOUCH = ("fresh us/page", "again us/page", "fresh, huge pages")


def make_fn(kind, length, mode, causal, variant="full"):
    """The case's jitted function of its inputs (`inputs`): the attention output, or in
    "fwd+bwd" the gradients of sum(out) with respect to every input."""
    fn, kw, rotated = KINDS[kind]
    positions = jnp.arange(length)
    _, packed, gate = VARIANTS[variant]
    if packed:
        ids = positions[None] // _DOCUMENT.value  # [1, L]
        kw = {**kw, "segment_ids": ids}
        positions = segments.segment_positions(ids)
    if rotated:
        kw = {**kw, "rotation": rope.rope_rotation(positions)}
    if gate == "retention":
        shape = (1, length, _HEADS.value)
        kw = {**kw, "log_decay": jnp.broadcast_to(decay.retention(_HEADS.value), shape)}

    def forward(q, k, v, log_decay=None):  # log_decay: the "forget" gate's, an input
        gated = kw if log_decay is None else {**kw, "log_decay": log_decay}
        return fn(q, k, v, causal=causal, **gated)

    if mode == "fwd":
        return jax.jit(forward)
    argnums = tuple(range(4 if gate == "forget" else 3))
    return jax.jit(jax.grad(lambda *x: jnp.sum(forward(*x)), argnums=argnums))


def inputs(length, variant="full"):
    """q, k, v [1, L, N or K, H] from N(0, 1), and for the "forget" gate its log gates
    log σ(z) [1, L, N], z ~ N(2, 1) (gates near 0.9: FoX's forget gates keep most of the past)."""
    kv_heads, _, gate = VARIANTS[variant]
    kv_heads = kv_heads or _HEADS.value
    shapes = [(1, length, heads, _HEAD_DIM.value) for heads in (_HEADS.value, kv_heads, kv_heads)]
    keys = jax.random.split(jax.random.key(0), 4)
    arrays = [jax.random.normal(key, shape) for key, shape in zip(keys[:3], shapes, strict=True)]
    if gate == "forget":
        z = 2.0 + jax.random.normal(keys[3], (1, length, _HEADS.value))
        arrays.append(jax.nn.log_sigmoid(z))
    return arrays


def run_case(kind, length, mode, variant="full"):
    """Measures one case in this process; returns its record."""
    args = inputs(length, variant)
    fn = make_fn(kind, length, mode, _CAUSAL.value, variant)
    compiled = fn.lower(*args).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    record = {"kind": kind, "variant": variant, "L": length, "mode": mode}
    record |= {"causal": _CAUSAL.value}
    record |= {"temp MB": temp / 2**20, "allocator": allocator()}
    if temp > _MAX_GB.value * 2**30:
        return record | {"skipped": f"needs {temp / 2**30:.1f} GB of temporaries"}
    jax.block_until_ready(args)
    resident = _reset_peak_rss()
    start = time.perf_counter()
    jax.block_until_ready(compiled(*args))  # the first call touches every page first
    slow = time.perf_counter() - start > 2.0  # quadratic softmax at large L: time it twice
    warm = _usage()
    repeats = 2 if slow else _REPEATS.value
    timing = time_call(compiled, *args, repeats=repeats, min_seconds=0.0 if slow else 0.3)
    after = _usage()
    calls = timing["runs"] + 1  # and time_call's own warm-up call
    cpu = after.ru_utime + after.ru_stime - warm.ru_utime - warm.ru_stime
    peak = (_status_kib("VmHWM") - resident) / 2**10
    faults = (after.ru_minflt - warm.ru_minflt) / calls
    return record | timing | {"cpu ms": 1e3 * cpu / calls, "peak MB": peak, "faults": faults}


def first_touch_us(mib=256, rounds=2):
    """µs per 4 KiB page to write fresh private anonymous memory (as malloc maps it), to write
    the same memory again, and to write fresh memory in transparent huge pages (where the
    kernel grants them). The fastest of `rounds` fresh mappings each: the first huge pages
    may wait for the kernel to compact memory."""
    size, pages = mib << 20, (mib << 20) // 4096

    def write_us(buffer, value):
        array = np.frombuffer(buffer, np.uint8)
        start = time.perf_counter()
        array.fill(value)
        return 1e6 * (time.perf_counter() - start) / pages

    times = {name: [] for name in FIRST_TOUCH}
    for _ in range(rounds):
        fresh, huge = (
            mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS) for _ in range(2)
        )
        huge.madvise(mmap.MADV_HUGEPAGE)
        for name, buffer, value in zip(FIRST_TOUCH, (fresh, fresh, huge), (1, 2, 1), strict=True):
            times[name].append(write_us(buffer, value))
        fresh.close()
        huge.close()
    return {"kind": "first touch"} | {name: min(t) for name, t in times.items()}


def allocator():
    """The malloc in use: glibc, or what LD_PRELOAD names, with its settings in the environment."""
    name = os.path.basename(os.environ.get("LD_PRELOAD", "")) or "glibc"
    settings = [
        f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith(("MALLOC_", "GLIBC_TUN"))
    ]
    return " ".join([name, *settings])


def _usage():
    return resource.getrusage(resource.RUSAGE_SELF)


def _status_kib(field):
    with open("/proc/self/status", encoding="ascii") as f:
        return next(int(line.split()[1]) for line in f if line.startswith(field + ":"))


def _reset_peak_rss():
    """Resets the resident high-water mark (Linux >= 4.0; compiling left it high); returns RSS."""
    with open("/proc/self/clear_refs", "w", encoding="ascii") as f:
        f.write("5")
    return _status_kib("VmRSS")


def run_isolated(kind, length, mode, malloc, variant="full"):
    """Runs one case in a fresh interpreter, under MALLOCS[malloc], and returns its record."""
    flags_ = [f"--case={kind},{length},{mode},{variant}", f"--causal={_CAUSAL.value}"]
    flags_ += [f"--heads={_HEADS.value}", f"--head_dim={_HEAD_DIM.value}"]
    flags_ += [f"--document={_DOCUMENT.value}"]
    flags_ += [f"--repeats={_REPEATS.value}", f"--max_gb={_MAX_GB.value}"]
    env = os.environ | MALLOCS[malloc]
    done = subprocess.run(
        [sys.executable, __file__, *flags_], capture_output=True, text=True, check=False, env=env
    )
    lines = [line for line in done.stdout.splitlines() if line.startswith("{")]
    case = {"kind": kind, "variant": variant, "L": length, "mode": mode, "malloc": malloc}
    if done.returncode or not lines:
        why = f"exit code {done.returncode}"
        if done.returncode == -9:
            why += " (killed: out of memory?)"
        return case | {"skipped": why}
    return case | json.loads(lines[-1])


def _malloc(record):
    return record.get("malloc", "default")  # records saved before --malloc existed


def _full(records):
    """The records of the "full" variant (all records saved before variants existed)."""
    return [r for r in records if r.get("variant", "full") == "full"]


def variant_ratios(records):
    """Each variant's fastest call over its kind's "full" one: a row per (malloc, kind, L, mode)."""
    ms = {
        (_malloc(r), r["kind"], r["L"], r["mode"], r.get("variant", "full")): r.get("ms_min")
        for r in records
    }
    rows = []
    for (malloc, kind, length, mode, variant), full in ms.items():
        if variant != "full" or not full:
            continue
        row = {"malloc": malloc, "kind": kind, "L": length, "mode": mode}
        for other in VARIANTS:
            mine = ms.get((malloc, kind, length, mode, other))
            if other != "full" and mine:
                row[f"{other} / full"] = mine / full
        rows.append(row)
    return rows


def summary(records):
    """The target ratios, one row per (malloc, L, mode)."""
    by = {(_malloc(r), r["kind"], r["L"], r["mode"]): r for r in _full(records)}
    rows = []
    for (malloc, kind, length, mode), r in by.items():
        if kind != "linear":
            continue
        row = {"malloc": malloc, "L": length, "mode": mode}
        for other, column in (
            ("linear numerator", "numerator / linear"),
            ("softmax", "softmax / linear"),
        ):
            o = by.get((malloc, other, length, mode), {})
            if "ms_min" in o and "ms_min" in r:
                row[column] = o["ms_min"] / r["ms_min"]
        for name in KINDS:
            previous = by.get((malloc, name, length // 2, mode))
            current = by.get((malloc, name, length, mode))
            if previous and current and "temp MB" in previous and "temp MB" in current:
                row[f"{name} temp x"] = current["temp MB"] / previous["temp MB"]
        rows.append(row)
    return rows


def crossover(records):
    """Per allocator setting, kind and mode, the smallest measured L at which it beats softmax
    ("<= L" when that is the first L measured: the crossover lies at or below it)."""
    ms = {(_malloc(r), r["kind"], r["L"], r["mode"]): r.get("ms_min") for r in _full(records)}
    lengths = sorted({r["L"] for r in records})
    rows = []
    for malloc in dict.fromkeys(_malloc(r) for r in records):
        for mode in MODES:
            for kind in KINDS:
                softmax = [ms.get((malloc, "softmax", n, mode)) for n in lengths]
                mine = [ms.get((malloc, kind, n, mode)) for n in lengths]
                if kind == "softmax" or not any(mine) or not any(softmax):
                    continue
                wins = [n for n, a, b in zip(lengths, mine, softmax) if a and b and a < b]
                first = wins[0] if wins else None
                where = "-" if first is None else f"<= {first}" if first == lengths[0] else first
                rows.append(
                    {
                        "malloc": malloc,
                        "kind": kind,
                        "mode": mode,
                        "faster than softmax from L": where,
                    }
                )
    return rows


def print_tables(records, output=None):
    """The per-case table (records appended to `output` as JSON lines), ratios, crossovers."""
    kinds = [kind for kind in KINDS if any(r["kind"] == kind for r in records)]
    columns = ["malloc", "kind", "variant", "L", "mode", "ms", "cpu ms", "temp MB", "peak MB"]
    report(records, columns + ["faults", "skipped"], output)
    print()
    variants = [f"{v} / full" for v in VARIANTS if v != "full"]
    report(variant_ratios(records), ["malloc", "kind", "L", "mode", *variants])
    print()
    ratios = ["malloc", "L", "mode", "numerator / linear", "softmax / linear"]
    report(summary(records), ratios + [f"{k} temp x" for k in kinds])
    print()
    report(crossover(records), ["malloc", "kind", "mode", "faster than softmax from L"])


def main(argv):
    del argv
    if _CASE.value:
        kind, length, mode, variant = _CASE.value.split(",")
        print(json.dumps(run_case(kind, int(length), mode, variant)))
        return
    if _REPORT.value:
        with open(_REPORT.value, encoding="utf-8") as f:
            records = [json.loads(line) for line in f]
        report([r for r in records if r["kind"] == "first touch"], ["kind", *FIRST_TOUCH])
        print_tables([r for r in records if r["kind"] != "first touch"])
        return
    unknown = [m for m in _MALLOC.value if m not in MALLOCS]
    if unknown:
        raise app.UsageError(f"--malloc={','.join(unknown)}; expected some of {list(MALLOCS)}")
    if "jemalloc" in _MALLOC.value and not os.path.exists(JEMALLOC):
        raise app.UsageError(f"--malloc=jemalloc needs {JEMALLOC}: apt-get install libjemalloc2")
    lengths = [512, 1024, 2048] if _QUICK.value else [int(n) for n in _LENGTHS.value]
    if _QUICK.value:
        flags.FLAGS.repeats = 3
    start, records = time.time(), []
    touch = first_touch_us()
    report([touch], ["kind", *FIRST_TOUCH], _OUTPUT.value)
    unknown = [v for v in _VARIANTS.value if v not in VARIANTS]
    if unknown:
        raise app.UsageError(f"--variants={','.join(unknown)}; expected some of {list(VARIANTS)}")
    cases = [
        (kind, mode, malloc, variant)
        for malloc in _MALLOC.value
        for kind in _KINDS.value or KINDS
        for mode in MODES
        for variant in _VARIANTS.value
        if _CAUSAL.value or not VARIANTS[variant][2]  # a gate decays what came before
    ]
    for length in lengths:
        trials = [
            [run_isolated(k, length, *rest) for k, *rest in cases] for _ in range(_TRIALS.value)
        ]
        for runs in zip(*trials, strict=True):
            best = min(runs, key=lambda r: r.get("ms_min", float("inf")))
            records.append(best | {"trials": len(runs)})
            print(json.dumps(records[-1]), file=sys.stderr, flush=True)
    print_tables(records, _OUTPUT.value)
    print(f"\n{time.time() - start:.0f} s; default malloc: {allocator()}; causal={_CAUSAL.value}")


if __name__ == "__main__":
    app.run(main)
