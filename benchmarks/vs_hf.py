"""Our jitted MLM train step against HuggingFace's PyTorch RoFormerForMaskedLM, side by side.

    python benchmarks/vs_hf.py [--sizes=small,base] [--shapes=small:16x128,base:8x512]
        [--vocab=8192] [--rounds=5] [--steps=5] [--threads=2] [--output=vs_hf.jsonl]

Three train steps on the same shapes, vocabulary, dropout (0.1), masking (15% of the tokens,
`masking.mask_tokens` on random ids with a fixed seed: the same batch for all three) and
optimizer (AdamW, β = (0.9, 0.999), ε = 1e-6, weight decay 0.01 off biases and LayerNorm,
gradients clipped to global norm 1; HF's learning rate is constant, ours warms up, which
costs nothing):

  ours       `make_train_step` jitted, the MLM head at the targets only (mask_prob=0.15), as
             training runs it.
  HF         `RoFormerForMaskedLM` in train mode, labels -100 off the targets, loss.backward(),
             torch.optim.AdamW step, zero_grad: the stock way, the head at every position.
  HF masked  the same model, but `model.roformer` gives the hidden states, the masked positions
             are gathered (hidden[mask]) and `model.cls` runs there only, as BERT's original
             `gather_indexes` does: the same loss (tests/vs_hf_test.py), less head work.

Each framework runs in its own worker process (this file with --worker), kept alive over the
rounds, so that compilation and warm-up happen once and the thread pools never compete; only
one worker runs at a time. Rounds alternate: ours, HF, HF masked, ours, ... Each round runs one
untimed step (caches warm again after the other process ran), then --steps timed steps; a
round's time is their median, and the table gives the median over rounds. "vs HF" is HF's
time over ours: above 1 we are faster.

Threads: each worker is pinned (sched_setaffinity) to the same first --threads cores of this
process's; XLA sizes its CPU thread pool from the cores it may run on, and torch gets
torch.set_num_threads(--threads). Without torch and transformers it says so and times ours.
"""

import importlib.util
import json
import os
import statistics
import subprocess
import sys
import time

import numpy as np
from absl import app, flags
from timing import report

from roformer_jax import hf
from roformer_jax.data import masking
from roformer_jax.nn.model_config import ModelConfig, model_config

_SIZES = flags.DEFINE_list("sizes", ["small", "base"], "Model sizes (model_config.SIZES).")
_SHAPES = flags.DEFINE_list(
    "shapes", [], "size:BATCHxSEQ_LEN overrides, e.g. small:16x128,base:8x512."
)
_VOCAB = flags.DEFINE_integer("vocab", None, "Vocabulary size; default 8192 small, 30522 base.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Alternating rounds (ours, HF, HF masked).")
_STEPS = flags.DEFINE_integer("steps", 5, "Timed steps per round, after one untimed step.")
_THREADS = flags.DEFINE_integer("threads", 2, "Cores (and torch threads) of each framework.")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")
_WORKER = flags.DEFINE_string("worker", None, "Internal: run as a worker with this JSON spec.")

SHAPES = {"small": (16, 128), "base": (8, 512)}  # (batch, seq_len)
VOCAB = {"small": 8192, "base": 30522}  # our studies' WordPiece vocabulary; bert-base-uncased's
MASK_PROB = 0.15
MASK_ID, SPECIAL_IDS = 4, range(5)  # [PAD] [UNK] [CLS] [SEP] [MASK] (data/tokenizer.py)
VARIANTS = ("ours", "hf", "hf_masked")


def mlm_batch(batch: int, seq_len: int, vocab: int, seed: int = 0) -> dict[str, np.ndarray]:
    """Random ids masked at 15% as training masks them: input_ids, targets, weights [B, L]."""
    rng = np.random.default_rng(seed)
    ids = rng.integers(len(SPECIAL_IDS), vocab, size=(batch, seq_len)).astype(np.int32)
    data = masking.mask_tokens(
        ids, rng, vocab_size=vocab, mask_id=MASK_ID, special_ids=SPECIAL_IDS, mask_prob=MASK_PROB
    )
    data.update(attention_mask=np.ones_like(ids), token_type_ids=np.zeros_like(ids))
    return data


# --- HF (PyTorch) --------------------------------------------------------------------------


def torch_batch(data: dict[str, np.ndarray]) -> dict:
    """`mlm_batch` for HF: int64 tensors, labels -100 where nothing is predicted."""
    import torch

    labels = np.where(data["weights"] > 0, data["targets"], -100)
    return {
        "input_ids": torch.from_numpy(data["input_ids"].astype(np.int64)),
        "attention_mask": torch.from_numpy(data["attention_mask"].astype(np.int64)),
        "token_type_ids": torch.from_numpy(data["token_type_ids"].astype(np.int64)),
        "labels": torch.from_numpy(labels.astype(np.int64)),
    }


def hf_stock_loss(model, batch: dict):
    """HF's own MLM loss: the head at every position, cross-entropy where labels != -100."""
    return model(**batch).loss


def hf_masked_head_loss(model, batch: dict):
    """The same loss with `model.cls` at the masked positions only (BERT's gather_indexes)."""
    import torch.nn.functional as F

    inputs = {k: v for k, v in batch.items() if k != "labels"}
    hidden = model.roformer(**inputs)[0]  # [B, L, D]
    mask = batch["labels"] != -100  # [B, L]
    logits = model.cls(hidden[mask])  # [T, V], T masked tokens
    return F.cross_entropy(logits, batch["labels"][mask])


def _hf_step(cfg: ModelConfig, data: dict[str, np.ndarray], threads: int):
    """{variant: thunk running one HF train step}, both on one model and optimizer."""
    import torch
    import transformers

    torch.set_num_threads(threads)
    torch.manual_seed(0)
    config = transformers.RoFormerConfig(**hf.config_to_hf(cfg, with_mlm_head=True))
    model = transformers.RoFormerForMaskedLM(config).train()
    params = [p for p in model.parameters() if p.requires_grad]
    groups = [  # decay kernels and tables, not biases and LayerNorm (optim.weight_decay_mask)
        {"params": [p for p in params if p.ndim >= 2], "weight_decay": 0.01},
        {"params": [p for p in params if p.ndim < 2], "weight_decay": 0.0},
    ]
    opt = torch.optim.AdamW(groups, lr=5e-4, betas=(0.9, 0.999), eps=1e-6)
    batch = torch_batch(data)

    def step(loss_fn):
        loss = loss_fn(model, batch)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(params, 1.0)
        opt.step()
        opt.zero_grad()
        return loss.item()  # waits for nothing on CPU, but keeps the loss honest

    return {
        "hf": lambda: step(hf_stock_loss),
        "hf_masked": lambda: step(hf_masked_head_loss),
    }


# --- ours (JAX) ----------------------------------------------------------------------------


def _our_step(cfg: ModelConfig, data: dict[str, np.ndarray]):
    """{"ours": thunk running one jitted train step} (compiled by its first call)."""
    import jax
    import jax.numpy as jnp

    from roformer_jax.nn.model import RoFormer
    from roformer_jax.training import optim
    from roformer_jax.training.step import TrainState, make_train_step

    model = RoFormer(cfg)
    tx = optim.make_optimizer(optim.OptimConfig(), total_steps=10_000)
    batch = {**data, "index": np.arange(data["input_ids"].shape[0], dtype=np.int32)}

    @jax.jit
    def init(key):
        params = model.init(key, data["input_ids"][:1])["params"]
        return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

    step = jax.jit(make_train_step(model, tx, mask_prob=MASK_PROB), donate_argnums=(0,))
    box = [init(jax.random.key(0))]  # the state, donated and replaced by every call
    key = jax.random.key(1)

    def run():
        box[0], metrics = step(box[0], batch, key)
        return float(metrics["loss"] / metrics["count"])  # blocks; the mean, as HF's

    return {"ours": run}


# --- the worker process ---------------------------------------------------------------------


def worker(spec: dict) -> None:
    """Builds one framework's steps, then answers each variant name on stdin with one round.

    The protocol is JSON lines on the real stdout; everything else printed goes to stderr.
    """
    os.sched_setaffinity(0, spec["cores"])  # before any thread pool exists
    out, sys.stdout = sys.stdout, sys.stderr
    cfg = model_config(spec["size"], **spec["config"])
    data = mlm_batch(spec["batch"], spec["seq_len"], cfg.vocab_size)
    build = _our_step if spec["framework"] == "jax" else _hf_step
    steps = build(cfg, data) if spec["framework"] == "jax" else build(cfg, data, spec["threads"])
    for run in steps.values():  # compile and warm up
        run()
        run()
    print(json.dumps({"ready": sorted(steps)}), file=out, flush=True)
    while line := sys.stdin.readline():
        run = steps[line.strip()]
        run()  # untimed: the other worker just had the caches
        times = []
        for _ in range(spec["steps"]):
            t0 = time.perf_counter()
            loss = run()
            times.append(time.perf_counter() - t0)
        print(json.dumps({"seconds": times, "loss": loss}), file=out, flush=True)


class Worker:
    """A worker process of this file and the one-line requests it answers."""

    def __init__(self, spec: dict):
        cmd = [sys.executable, os.path.abspath(__file__), "--worker=" + json.dumps(spec)]
        self.proc = subprocess.Popen(cmd, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
        self.variants = self._read()["ready"]

    def _read(self) -> dict:
        line = self.proc.stdout.readline()
        if not line:
            raise RuntimeError(f"worker {self.proc.args[-1]} died (exit {self.proc.wait()})")
        return json.loads(line)

    def round(self, variant: str) -> dict:
        self.proc.stdin.write(variant + "\n")
        self.proc.stdin.flush()
        return self._read()

    def close(self) -> None:
        self.proc.stdin.close()
        self.proc.wait()


# --- the parent ------------------------------------------------------------------------------


def _shapes() -> dict[str, tuple[int, int]]:
    shapes = dict(SHAPES)
    for item in _SHAPES.value:
        try:
            size, shape = item.split(":")
            batch, seq_len = (int(n) for n in shape.split("x"))
        except ValueError:
            raise ValueError(f"--shapes item {item!r} is not size:BATCHxSEQ_LEN") from None
        shapes[size] = (batch, seq_len)
    return shapes


def have_hf() -> bool:
    return all(importlib.util.find_spec(m) for m in ("torch", "transformers"))


def bench(size: str, batch: int, seq_len: int, *, rounds: int, steps: int, cores, with_hf):
    """One record: per variant the median over rounds of each round's median step time."""
    vocab = _VOCAB.value or VOCAB.get(size, VOCAB["small"])
    config = dict(vocab_size=vocab, max_len=max(512, seq_len))  # dropout 0.1: the default
    spec = dict(
        size=size,
        config=config,
        batch=batch,
        seq_len=seq_len,
        steps=steps,
        cores=cores,
        threads=len(cores),
    )
    workers = {"ours": Worker({**spec, "framework": "jax"})}
    if with_hf:
        workers["hf"] = workers["hf_masked"] = Worker({**spec, "framework": "torch"})
    rounds_s = {v: [] for v in workers}
    losses = {}
    try:
        for _ in range(rounds):
            for variant, w in workers.items():
                answer = w.round(variant)
                rounds_s[variant].append(statistics.median(answer["seconds"]))
                losses[variant] = answer["loss"]
    finally:
        for w in set(workers.values()):
            w.close()
    record = dict(size=size, batch=batch, seq_len=seq_len, vocab=vocab, threads=len(cores))
    for variant, times in rounds_s.items():
        seconds = statistics.median(times)
        record[f"{variant} ms"] = 1e3 * seconds
        record[f"{variant} tokens/s"] = batch * seq_len / seconds
        record[f"{variant} rounds ms"] = [1e3 * t for t in times]
        record[f"{variant} loss"] = losses[variant]
    for variant in ("hf", "hf_masked"):
        if variant in rounds_s:
            record[f"vs {variant}"] = record[f"{variant} ms"] / record["ours ms"]
    return record


def main(argv):
    del argv
    if _WORKER.value:
        return worker(json.loads(_WORKER.value))
    available = sorted(os.sched_getaffinity(0))
    if not 1 <= _THREADS.value <= len(available):
        raise ValueError(f"--threads={_THREADS.value}, but this process may use cores {available}")
    cores = available[: _THREADS.value]
    with_hf = have_hf()
    if not with_hf:
        print(
            "torch and transformers are not installed: timing ours only "
            "(pip install torch transformers for the HF columns)",
            flush=True,
        )
    shapes = _shapes()
    records = []
    for size in _SIZES.value:
        if size not in shapes:
            raise ValueError(f"no shape for size {size!r}: add --shapes={size}:BATCHxSEQ_LEN")
        batch, seq_len = shapes[size]
        records.append(
            bench(
                size,
                batch,
                seq_len,
                rounds=_ROUNDS.value,
                steps=_STEPS.value,
                cores=cores,
                with_hf=with_hf,
            )
        )
        print(records[-1], flush=True)
    columns = ["size", "batch", "seq_len", "vocab", "threads", "ours ms", "ours tokens/s"]
    if with_hf:
        columns += [
            "hf ms",
            "hf tokens/s",
            "hf_masked ms",
            "hf_masked tokens/s",
            "vs hf",
            "vs hf_masked",
        ]
    report(records, columns, _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
