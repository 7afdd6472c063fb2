"""Time and memory per generated token against the context length L, L = 128 ... 16384.

    python benchmarks/decode.py [--quick] [--lengths=128,...,16384] [--batches=1,8]
        [--kinds=softmax,linear,cosine] [--prompts=128,1024] [--output=decode.jsonl]

The small causal model (`model_config("small", vocab_size=8192, causal=True)`, RoPE, float32)
with softmax attention, linear attention with RoPE in the numerator (eq. 19, elu + 1) or
cosine attention, at batch B = 1 and 8. What is timed is the decoding step of the whole model,
`model.apply(variables, token [B, 1], position_ids [B, 1], decode_length=C,
mutable=["cache"])` after a cache holding L tokens, C = L + 8: the (L + 1)-th token, run
--steps_per_call times in a row inside one jitted `lax.scan` (each step's greedy token fed to
the next, as in `decoding.generate`), so that the call's dispatch from Python, a jittery
millisecond, is not counted as decoding. The cache is donated, as the generation loop updates
it in place; each step puts every KV cache's `length` back to L, so that every step is again
the (L + 1)-th token.

The cache is synthesized at length L rather than filled by a prompt of L tokens: a softmax
prefill of L = 16384 tokens forms [B, N, L, L] scores (17 GB per layer at B = 8), and a linear
one costs seconds per case. The step's work depends only on the shapes (softmax reads all C
slots of its KV cache under a mask; linear and cosine update a state whose shape has no L),
not on the values, so a cache of the right structure (`jax.eval_shape` of a prefill call) with
random keys and values, `valid` True for the first L slots and `length` = L, or random states
with the magnitudes of sums over L tokens (positive denominators, as those sums have), makes
the step do the work it does at context L. The step's logits are checked to be finite.

Columns:
  ms/token  median wall time of a call / steps per call (ms_min, of the fastest call, in the JSON)
  cache MB  bytes of the cache pytree (every layer's KV cache or state; sum of leaf nbytes)
  temp MB   XLA's temporary buffers for one step (compiled.memory_analysis())
A table of the softmax KV cache's bytes per token of context with K key/value heads
(grouped-query attention, --kv_heads, default N, N / 2 and 1 of the small model's N = 4 heads):
per layer and for the model's layers, from the shapes of `attention_step.softmax_attention_step`'s
cache (`jax.eval_shape`: nothing is computed), keys and values with the position and validity
of each slot; the cache shrinks by N / K (nearly: positions and validity do not).
A table of what a softmax prefill of P prompt tokens holds at once, batch 1: XLA's temporary
buffers of `decoding.prefill` in one pass, and in chunks of --prefill_chunk tokens (compiled,
not run: nothing is allocated); one pass forms [B, N, P, P] scores per layer, chunks
[B, N, C, P].
A second table times `decoding.generate` end to end, batch 1, after a prompt of P tokens:
(fastest call for 32 new tokens - fastest call for 1) / 31, the per-token cost of the loop
itself (its prefill and first token subtracted), a sanity check on the step's figures at L = P.
A difference of two times: noisy on shared cores (fastest calls, 5 each, to damp that).

The summary, from the fastest calls (ms_min, the least disturbed by other processes): for
linear and cosine per batch, max / min time over L and whether every time is within ±20% of
their median (the target: flat from 128 to 16384), and whether the cache's bytes are the same
at every L; for each kind, the smallest L from which it is faster than softmax at every
measured L ("<= L" when that is the first L measured).
"""

import json
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from timing import report, time_call

from roformer_jax.nn import attention_step, decoding
from roformer_jax.nn.attention_step import KernelState, KVCache
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import model_config

_QUICK = flags.DEFINE_bool("quick", False, "L = 128, 512, 2048; batch 1; fewer repeats.")
_LENGTHS = flags.DEFINE_list("lengths", [str(128 << i) for i in range(8)], "Context lengths L.")
_BATCHES = flags.DEFINE_list("batches", ["1", "8"], "Batch sizes B.")
_KINDS = flags.DEFINE_list("kinds", None, "Subset of the kinds below (default: all).")
_PROMPTS = flags.DEFINE_list("prompts", ["128", "1024"], "Prompt lengths for generate ('' none).")
_NEW_TOKENS = flags.DEFINE_integer("new_tokens", 32, "Tokens generated in the generate lines.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per case (at least).")
_STEPS = flags.DEFINE_integer("steps_per_call", 16, "Tokens decoded per timed call.")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")
_PREFILLS = flags.DEFINE_list(
    "prefills", ["1024", "4096", "16384"], "Prompts P for prefill memory."
)
_PREFILL_CHUNK = flags.DEFINE_integer("prefill_chunk", 512, "Chunk C for prefill memory.")
_KV_HEADS = flags.DEFINE_list("kv_heads", None, "K for the KV-cache bytes (default: N, N/2, 1).")

VOCAB, SLACK = 8192, 8  # capacity C = L + SLACK
# The attention options of each kind (ModelConfig fields); all with RoPE.
KINDS = {
    "softmax": {"attention": "softmax"},
    "linear": {
        "attention": "linear",
        "sections": {"linear": {"placement": "numerator", "feature_map": "elu"}},
    },
    "cosine": {"attention": "cosine"},
}


def make_model(kind, max_len):
    """The small causal RoPE model of `kind` and its variables."""
    config = model_config(
        "small", vocab_size=VOCAB, causal=True, position="rope", max_len=max_len, **KINDS[kind]
    )
    model = RoFormer(config)
    return model, model.init(jax.random.key(0), jnp.zeros((1, 8), jnp.int32))


def synthetic_cache(model, variables, batch, length, capacity, key):
    """The "cache" collection after `length` tokens of a sequence of `capacity`, random.

    Its structure is that of a prefill call's (`jax.eval_shape`: nothing is computed)."""
    prompt = jnp.zeros((batch, 1), jnp.int32)
    _, shapes = jax.eval_shape(
        lambda v: model.apply(v, prompt, decode_length=capacity, mutable=["cache"]), variables
    )
    memories, treedef = jax.tree.flatten(shapes, is_leaf=_is_memory)
    keys = jax.random.split(key, len(memories))
    filled = [_fill(m, length, k) for m, k in zip(memories, keys, strict=True)]
    return jax.tree.unflatten(treedef, filled)


def _is_memory(x):
    return isinstance(x, (KVCache, KernelState))


def _fill(memory, length, key):
    """One layer's memory with random values, as after `length` tokens."""
    k1, k2 = jax.random.split(key)
    if isinstance(memory, KVCache):
        b, s = memory.valid.shape
        slots = jnp.arange(s, dtype=jnp.int32)
        return KVCache(
            keys=jax.random.normal(k1, memory.keys.shape, memory.keys.dtype),
            values=jax.random.normal(k2, memory.values.shape, memory.values.dtype),
            positions=jnp.broadcast_to(slots, (b, s)),
            valid=jnp.broadcast_to(slots < length, (b, s)),
            length=jnp.asarray(length, jnp.int32),
        )
    # Sums over `length` tokens: random terms add up to ~sqrt(length); the denominators'
    # terms are positive (elu + 1 features; cosine's leading feature 1 times the appended 1).
    numerator = jnp.sqrt(length) * jax.random.normal(k1, memory.numerator.shape)
    if memory.denominator is None:  # cosine: Σ_j [1, b_j][v_j, 1]ᵀ, entry (0, H) counts tokens
        return KernelState(numerator.at[..., 0, -1].set(length))
    denominator = length * jax.random.uniform(k2, memory.denominator.shape, minval=0.5, maxval=1.5)
    return KernelState(numerator, denominator)


def cache_bytes(cache):
    return sum(x.size * x.dtype.itemsize for x in jax.tree.leaves(cache))


def kv_cache_rows(kv_heads, capacity=1024):
    """Bytes per token of context of the small model's softmax KV cache, for each K."""
    config = model_config("small", vocab_size=VOCAB, causal=True, **KINDS["softmax"])
    n, h = config.num_heads, config.head_dim

    def per_layer(heads):  # of the cache's shapes only: nothing is computed
        q = jax.ShapeDtypeStruct((1, 1, n, h), jnp.float32)
        k = jax.ShapeDtypeStruct((1, 1, heads, h), jnp.float32)
        positions = jnp.zeros((1, 1), jnp.int32)
        _, cache = jax.eval_shape(
            lambda q, k: attention_step.softmax_attention_step(
                None, q, k, k, positions=positions, capacity=capacity
            ),
            q,
            k,
        )
        return cache_bytes(cache) / capacity

    full = per_layer(n)
    return [
        {
            "kind": "softmax",
            "N": n,
            "K": heads,
            "bytes/token/layer": per_layer(heads),
            "bytes/token": per_layer(heads) * config.num_layers,
            "x full heads": per_layer(heads) / full,
        }
        for heads in kv_heads
    ]


def prefill_rows(prompts, chunk):
    """XLA's temporary MB of a softmax prefill of each prompt length, in one pass and in
    chunks of `chunk` tokens (compiled, not run)."""
    model, variables = make_model("softmax", max(prompts) + SLACK)
    rows = []
    for prompt in prompts:

        def prefill(variables, ids, chunk=None, total=prompt + SLACK):
            step = decoding.decode_step(model, variables, total)
            return decoding.prefill(step, *decoding.left_padded(ids, ids > 0), chunk)

        ids = jax.ShapeDtypeStruct((1, prompt), jnp.int32)
        temp = {
            size: jax.jit(prefill, static_argnums=2).lower(variables, ids, size).compile()
            for size in (None, chunk)
        }
        temp = {size: c.memory_analysis().temp_size_in_bytes / 2**20 for size, c in temp.items()}
        rows.append(
            {
                "kind": "softmax",
                "P": prompt,
                "one pass temp MB": temp[None],
                f"chunks of {chunk} temp MB": temp[chunk],
            }
        )
    return rows


def make_steps(model, capacity, steps):
    """The jitted decoding of `steps` tokens in a row (variables, cache, token [B, 1],
    position [B, 1]) -> (last logits, cache), each step's greedy token fed to the next, as in
    `decoding.generate`'s loop; the cache donated; KV caches' `length` put back after each
    step (see the docstring). One call runs many steps so that Python's dispatch of a call
    (a millisecond, and jittery) is not timed as decoding."""

    def step(variables, cache, token, position):
        out, new = model.apply(
            {**variables, **cache},
            token,
            position_ids=position,
            decode_length=capacity,
            mutable=["cache"],
        )
        new = jax.tree.map(
            lambda n, o: n._replace(length=o.length) if isinstance(n, KVCache) else n,
            new,
            cache,
            is_leaf=_is_memory,
        )
        return out.logits, new

    def run(variables, cache, token, position):
        def body(carry, _):
            cache, token, _ = carry
            logits, cache = step(variables, cache, token, position)
            return (cache, jnp.argmax(logits, axis=-1).astype(token.dtype), logits), None

        first = jnp.zeros((token.shape[0], 1, model.config.vocab_size), jnp.float32)
        (cache, _, logits), _ = jax.lax.scan(body, (cache, token, first), None, length=steps)
        return logits, cache

    return jax.jit(run, donate_argnums=1)


def run_step(kind, model, variables, batch, length):
    """Times decoding steps at context `length`; returns its record."""
    capacity, steps = length + SLACK, _STEPS.value
    cache = synthetic_cache(model, variables, batch, length, capacity, jax.random.key(length))
    token = jnp.ones((batch, 1), jnp.int32)
    position = jnp.full((batch, 1), length, jnp.int32)
    compiled = make_steps(model, capacity, steps).lower(variables, cache, token, position).compile()
    temp = compiled.memory_analysis().temp_size_in_bytes
    record = {"kind": kind, "batch": batch, "L": length, "cache MB": cache_bytes(cache) / 2**20}
    state = {"cache": cache}

    def call():
        logits, state["cache"] = compiled(variables, state["cache"], token, position)
        return logits

    if not np.isfinite(np.asarray(call())).all():
        raise RuntimeError(f"{kind} step at L={length}, B={batch}: non-finite logits")
    timing = time_call(call, repeats=_REPEATS.value, min_seconds=0.2 if _QUICK.value else 0.5)
    record |= {
        "ms/token": timing["ms"] / steps,
        "ms_min": timing["ms_min"] / steps,
        "runs": timing["runs"] * steps,
    }
    return record | {"temp MB": temp / 2**20}


def run_generate(kind, model, variables, prompt):
    """ms per token of `decoding.generate`, batch 1, after a prompt of `prompt` tokens."""
    ids = jax.random.randint(jax.random.key(prompt), (1, prompt), 1, VOCAB)
    new = _NEW_TOKENS.value
    times = {
        n: time_call(
            lambda n=n: decoding.generate(model, variables, ids, max_new_tokens=n), repeats=5
        )
        for n in (1, new)
    }
    per_token = {k: (times[new][k] - times[1][k]) / (new - 1) for k in ("ms", "ms_min")}
    return {"kind": kind, "mode": "generate", "batch": 1, "L": prompt, "new tokens": new} | {
        "ms/token": per_token["ms_min"],
        "ms median": per_token["ms"],
    }


def summary(records):
    """Flatness and constant memory of linear and cosine, per batch."""
    rows = []
    for kind in KINDS:
        for batch in dict.fromkeys(r["batch"] for r in records):
            mine = [r for r in records if r["kind"] == kind and r["batch"] == batch]
            if kind == "softmax" or not mine:
                continue
            ms = np.array([r["ms_min"] for r in mine])
            flat = np.all(np.abs(ms / np.median(ms) - 1) <= 0.2)
            constant = len({r["cache MB"] for r in mine}) == 1
            lengths = [r["L"] for r in mine]
            rows.append(
                {
                    "kind": kind,
                    "batch": batch,
                    "L": f"{min(lengths)}-{max(lengths)}",
                    "max / min ms": ms.max() / ms.min(),
                    "within ±20% of median": "yes" if flat else "no",
                    "cache constant": "yes" if constant else "no",
                }
            )
    return rows


def crossover(records):
    """Per kind and batch, the smallest L from which it beats softmax at every measured L."""
    ms = {(r["kind"], r["batch"], r["L"]): r["ms_min"] for r in records}
    lengths = sorted({r["L"] for r in records})
    rows = []
    for batch in dict.fromkeys(r["batch"] for r in records):
        for kind in KINDS:
            pairs = [(n, ms.get((kind, batch, n)), ms.get(("softmax", batch, n))) for n in lengths]
            pairs = [(n, a, b) for n, a, b in pairs if a is not None and b is not None]
            if kind == "softmax" or not pairs:
                continue
            first = None
            for n, a, b in reversed(pairs):
                if a >= b:
                    break
                first = n
            where = "-" if first is None else f"<= {first}" if first == pairs[0][0] else first
            rows.append({"kind": kind, "batch": batch, "faster than softmax from L": where})
    return rows


def main(argv):
    del argv
    kinds = _KINDS.value or list(KINDS)
    unknown = [k for k in kinds if k not in KINDS]
    if unknown:
        raise app.UsageError(f"--kinds={','.join(unknown)}; expected some of {list(KINDS)}")
    if _QUICK.value:
        lengths, batches, prompts, repeats = [128, 512, 2048], [1], [128], 3
        flags.FLAGS.repeats = repeats
    else:
        lengths = [int(n) for n in _LENGTHS.value]
        batches = [int(b) for b in _BATCHES.value]
        prompts = [int(p) for p in _PROMPTS.value if p]
    start, records, generated = time.time(), [], []
    for kind in kinds:
        model, variables = make_model(kind, max(lengths + prompts) + max(SLACK, _NEW_TOKENS.value))
        for batch in batches:
            for length in lengths:
                records.append(run_step(kind, model, variables, batch, length))
                print(json.dumps(records[-1]), file=sys.stderr, flush=True)
        generated += [run_generate(kind, model, variables, p) for p in prompts]
    print()
    columns = ["kind", "batch", "L", "ms/token", "cache MB", "temp MB"]
    report(records, columns, _OUTPUT.value)
    if generated:
        print()
        report(generated, ["kind", "mode", "batch", "L", "new tokens", "ms/token"], _OUTPUT.value)
    print()
    n = model_config("small", vocab_size=VOCAB).num_heads
    kv_heads = [int(k) for k in _KV_HEADS.value] if _KV_HEADS.value else [n, n // 2, 1]
    columns = ["kind", "N", "K", "bytes/token/layer", "bytes/token", "x full heads"]
    report(kv_cache_rows(kv_heads), columns, _OUTPUT.value)
    print()
    chunk = _PREFILL_CHUNK.value
    rows = prefill_rows([int(p) for p in _PREFILLS.value if p], chunk)
    columns = ["kind", "P", "one pass temp MB", f"chunks of {chunk} temp MB"]
    report(rows, columns, _OUTPUT.value)
    print()
    report(
        summary(records),
        ["kind", "batch", "L", "max / min ms", "within ±20% of median", "cache constant"],
    )
    print()
    report(crossover(records), ["kind", "batch", "faster than softmax from L"])
    print(f"\n{time.time() - start:.0f} s; jax {jax.__version__}, {jax.devices()[0].platform}")


if __name__ == "__main__":
    app.run(main)
