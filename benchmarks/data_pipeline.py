"""Tokens/s of the MLM batch iterator against the small model's train step, in the same run.

    python benchmarks/data_pipeline.py [--cache_dir=/tmp/roformer_jax_data] [--output=data.jsonl]
        [--step_shapes=32x128,64x512]   # the step at 64x512 needs ~12 GB on CPU: use a GPU

The iterator must never be the bottleneck: issue 4 asks for >= 10x the train step's tokens/s
for the small config. For each (global batch, seq_len) the rows are:
  iterator, prefetch 0    the host work itself: gather windows from the memory-mapped
                          stream, wrap in [CLS] ... [SEP], mask (15%, 80/10/10)
  iterator, prefetch 2    as the trainer consumes it, a background thread working ahead
  iterator, whole words   prefetch 0, whole-word masking
  train step, fixed batch the jitted update of RoFormer-small on one batch already on device
  train step, fed         the same update fed by the iterator (prefetch 2), transfers included
"x step" = tokens/s divided by the fixed-batch train step's tokens/s at that shape (the small
config trains at 32 x 128, configs/roformer_small.py; --step_shapes picks where the step runs).
"""

import os
import time

import jax
from absl import app, flags
from timing import report

from roformer_jax.data.batches import train_batches
from roformer_jax.data.corpus import load_corpus
from roformer_jax.data.data_config import DataConfig
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import model_config
from roformer_jax.training import optim
from roformer_jax.training.step import TrainState, make_train_step

_CACHE_DIR = flags.DEFINE_string("cache_dir", "/tmp/roformer_jax_data", "Token cache folder.")
_SHAPES = flags.DEFINE_list("shapes", ["32x128", "64x512"], "global batch x seq_len cases.")
_BATCHES = flags.DEFINE_integer("batches", 200, "Timed iterator batches per row.")
_STEP_SHAPES = flags.DEFINE_list("step_shapes", ["32x128"], "Cases that also time the step.")
_STEPS = flags.DEFINE_integer("steps", 20, "Timed train steps per case.")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")


def iterator_rate(corpus, batch_size, prefetch, n):
    batches = train_batches(corpus, batch_size=batch_size, seed=0, prefetch=prefetch)
    for _ in range(3):  # start the thread, fill the queue
        next(batches)
    start = time.perf_counter()
    for _ in range(n):
        next(batches)
    return n / (time.perf_counter() - start)


def step_rates(corpus, batch_size, n):
    """Steps/s of RoFormer-small's update on a fixed device batch, and fed by the iterator."""
    model = RoFormer(model_config("small", vocab_size=corpus.tokenizer.vocab_size))
    tx = optim.make_optimizer(optim.OptimConfig(warmup_steps=10), 1000)
    batches = train_batches(corpus, batch_size=batch_size, seed=0, prefetch=2)
    fixed = jax.device_put(next(batches))

    def init(rng):
        params = model.init(rng, fixed["input_ids"][:1])["params"]
        step = jax.numpy.zeros((), "int32")
        return TrainState(step=step, params=params, opt_state=tx.init(params))

    state = jax.jit(init)(jax.random.key(0))
    train_step = jax.jit(make_train_step(model, tx), donate_argnums=(0,))
    rng = jax.random.key(1)
    rates = []
    for feed in (lambda: fixed, lambda: next(batches)):
        state, metrics = train_step(state, feed(), rng)  # compile / warm up
        jax.block_until_ready(metrics)
        start = time.perf_counter()
        for _ in range(n):
            state, metrics = train_step(state, feed(), rng)
        jax.block_until_ready(metrics)
        rates.append(n / (time.perf_counter() - start))
    return rates


def main(argv):
    del argv
    records = []
    for shape in _SHAPES.value:
        batch_size, seq_len = (int(s) for s in shape.split("x"))
        corpus = load_corpus(DataConfig(seq_len=seq_len), _CACHE_DIR.value)
        words = load_corpus(DataConfig(seq_len=seq_len, whole_word=True), _CACHE_DIR.value)
        rows = {
            "iterator, prefetch 0": iterator_rate(corpus, batch_size, 0, _BATCHES.value),
            "iterator, prefetch 2": iterator_rate(corpus, batch_size, 2, _BATCHES.value),
            "iterator, whole words": iterator_rate(words, batch_size, 0, _BATCHES.value),
        }
        timed_step = shape in _STEP_SHAPES.value
        if timed_step:
            fixed, fed = step_rates(corpus, batch_size, _STEPS.value)
            rows |= {"train step, fixed batch": fixed, "train step, fed": fed}
        tokens = batch_size * seq_len
        for what, per_s in rows.items():
            record = {"what": what, "batch": batch_size, "seq_len": seq_len}
            record |= {"ms": 1e3 / per_s, "Mtokens/s": per_s * tokens / 1e6}
            if timed_step:
                record["x step"] = per_s / rows["train step, fixed batch"]
            records.append(
                record | {"backend": jax.default_backend(), "cpus": len(os.sched_getaffinity(0))}
            )
    report(records, ["what", "batch", "seq_len", "ms", "Mtokens/s", "x step"], _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
