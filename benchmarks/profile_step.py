"""Where the train step's time goes: XLA's own per-operation trace, grouped by what each does.

    python benchmarks/profile_step.py --sizes=small --attention=softmax --batch=16
        [--seq_len=128] [--steps=5] [--top=0]

(--sizes, --attention, --batch and --seq_len are benchmarks/train_step.py's flags; the first
size and kind of each list are profiled.)

Runs the jitted MLM train step of benchmarks/train_step.py (float32, dropout 0.1, AdamW, the
head at the targets) under `jax.profiler` with a Perfetto trace, reads every XLA operation's
duration from it, and names each operation by the `op_name` metadata that the compiled HLO
keeps of the jax code it came from (inside a fusion: the names of all it fused). The groups:

  matmul: feed-forward / q,k,v,o / attention scores and values / MLM head
  attention elementwise (softmax, masks, RoPE), LayerNorm, GELU, dropout, the embedding
  gradient (scatter-add into the [V, E] table), the MLM loss, the optimizer (AdamW, clipping),
  copies and transposes (layout changes XLA inserts), and the rest.

A fusion that mixes groups counts in the first that matches, in the order above (a matmul
with its epilogue is a matmul; an elementwise fusion that reads a matmul's output is not).
XLA may run two operations at once on the thread pool, so the sum of operation times can
exceed the step's wall time; the table shows both, and tracing adds to the wall time.
--top lists the slowest operations one by one.
"""

import collections
import glob
import gzip
import json
import os
import re
import tempfile
import time

import jax
from absl import app, flags
from timing import report
from train_step import MASK_PROB, VOCAB, _train_step

from roformer_jax.nn.model_config import model_config

_STEPS = flags.DEFINE_integer("steps", 5, "Traced steps (after warm-up).")
_TOP = flags.DEFINE_integer("top", 0, "Also list the slowest operations.")
FLAGS = flags.FLAGS

# (group, pattern over the op_names of an operation); the first match names it.
GROUPS = (
    ("matmul: MLM head", r"mlm_head/.*dot_general"),
    ("matmul: attention scores, values", r"(BLNH,BMNH|BNLM,BMNH|attention/.*einsum).*dot_general"),
    ("matmul: q, k, v, o", r"attention/(query|key|value|output)/dot_general"),
    ("matmul: feed-forward", r"/(intermediate|output)/dot_general"),
    ("dropout", r"Dropout|_threefry|bernoulli|threefry"),
    ("GELU", r"erf|gelu"),
    ("LayerNorm", r"LayerNorm|_norm/"),
    ("attention elementwise (softmax, masks, RoPE)", r"/attention/"),
    ("embedding gradient", r"scatter"),
    ("MLM loss", r"mlm_head|log_softmax|softmax_cross_entropy|take_along_axis|top_k"),
    ("optimizer", r"^jit\([^)]*\)/(?!while)"),
)


def _computations(hlo: str) -> tuple[dict, dict]:
    """(instruction name → (its text, its computation), computation → its instruction lines)."""
    computations, instructions, current = {}, {}, None
    for line in hlo.splitlines():
        header = re.match(r"^(?:ENTRY )?%?([\w.\-]+) .*\{$", line)
        if header:
            current = header.group(1)
            computations[current] = []
        elif current and line.startswith("  "):
            computations[current].append(line)
            body = re.match(r"\s+(?:ROOT )?%?([\w.\-]+) = (.*)", line)
            if body:
                instructions[body.group(1)] = body.group(2)
    return instructions, computations


def _lines(name, instructions, computations) -> list[str]:
    """An instruction's HLO line and those of every computation it calls, transitively."""
    lines, todo, seen = [instructions.get(name, "")], [instructions.get(name, "")], set()
    while todo:
        for callee in re.findall(r"(?:calls|to_apply)=%?([\w.\-]+)", todo.pop()):
            if callee not in seen:
                seen.add(callee)
                lines += computations.get(callee, [])
                todo += computations.get(callee, [])
    return lines


def group(name: str, lines: list[str]) -> str:
    """The group of one operation (see GROUPS), from its HLO lines (`_lines`)."""
    op_names = [n for line in lines for n in re.findall(r'op_name="([^"]*)"', line)]
    ops = " ".join(line.split("metadata")[0] for line in lines)
    if not re.search(r"\bdot\(", ops):  # an elementwise fusion that reads a matmul's output
        op_names = [n for n in op_names if not n.endswith("dot_general")]
        if re.search(r"\b(copy|transpose)\(", ops) or name.startswith("copy"):
            return "copies, transposes"
    for label, pattern in GROUPS:
        if any(re.search(pattern, n) for n in op_names):
            return label
    return "other"


def _trace_durations(trace_dir: str, steps: int) -> dict[str, float]:
    """ms per step of each XLA operation in the Perfetto trace under trace_dir."""
    path = glob.glob(os.path.join(trace_dir, "**", "perfetto_trace.json.gz"), recursive=True)[0]
    with gzip.open(path) as f:
        trace = json.load(f)
    events = trace["traceEvents"] if isinstance(trace, dict) else trace
    durations = collections.Counter()
    for event in events:
        if event.get("ph") == "X" and not event["name"].startswith(("ThunkExecutor", "$", "Pjit")):
            durations[event["name"]] += event.get("dur", 0) / 1e3 / steps
    return durations


def main(argv):
    del argv
    size, attention = FLAGS.sizes[0], FLAGS.attention[0]
    cfg = model_config(size, vocab_size=VOCAB[size], attention=attention)
    run, compiled = _train_step(cfg, FLAGS.batch, FLAGS.seq_len, MASK_PROB)
    for _ in range(2):
        jax.block_until_ready(run())
    start = time.perf_counter()
    for _ in range(_STEPS.value):
        jax.block_until_ready(run())
    wall_ms = (time.perf_counter() - start) / _STEPS.value * 1e3
    with tempfile.TemporaryDirectory() as trace_dir:
        jax.profiler.start_trace(trace_dir, create_perfetto_trace=True)
        for _ in range(_STEPS.value):
            jax.block_until_ready(run())
        jax.profiler.stop_trace()
        durations = _trace_durations(trace_dir, _STEPS.value)
    instructions, computations = _computations(compiled.as_text())
    groups, rows = collections.Counter(), []
    for name, ms in durations.items():
        label = group(name, _lines(name, instructions, computations))
        groups[label] += ms
        rows.append((ms, name, label))
    total = sum(groups.values())
    print(
        f"{size}, {FLAGS.batch} x {FLAGS.seq_len}, {attention}: "
        f"{wall_ms:.0f} ms per step (wall), {total:.0f} ms of XLA operations"
    )
    report(
        [
            {"group": label, "ms/step": round(ms, 1), "share": f"{100 * ms / total:.1f}%"}
            for label, ms in groups.most_common()
        ],
        ["group", "ms/step", "share"],
    )
    if _TOP.value:
        report(
            [
                {"ms/step": round(ms, 2), "operation": name, "group": label}
                for ms, name, label in sorted(rows, reverse=True)[: _TOP.value]
            ],
            ["ms/step", "operation", "group"],
        )


if __name__ == "__main__":
    app.run(main)
