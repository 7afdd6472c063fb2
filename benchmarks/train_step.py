"""Tokens/s and model FLOP utilization (MFU) of the jitted train step.

    python benchmarks/train_step.py [--sizes=small,base] [--attention=softmax,linear]
        [--dtypes=float32,bfloat16] [--mlm_head=targets,all] [--documents=open,isolated]
        [--doc_len=100] [--batch=8] [--seq_len=128] [--rounds=5] [--output=train_step.jsonl]

MFU = model FLOPs per step / step time / matmul peak. The peak is the best rate of a jitted
4096 x 4096 x 4096 matmul of the same dtype in this run, timed in turns with the steps; step
times are the best of --rounds runs (the least disturbed ones, on a shared machine).

Model FLOPs count the matmuls of forward and backward (3 x forward): per token and layer
8 D^2 (q, k, v, o) + 4 D F (feed-forward) + attention (softmax: 4 L D for q k^T and a v;
linear/cosine: 4 D H for phi(k)^T v and phi(q) (k^T v)), plus the MLM head 2 D E + 2 E V at
each position it runs at: every position ("all") or the masking.max_targets(L) positions per
row that can hold a target ("targets", what training does).
Element-wise work (softmax, LayerNorm, GELU, Adam) is not counted, as in the PaLM paper's
MFU. The XLA column is XLA's own FLOP count of the compiled step, a check on ours.

--documents: "open" rows as today's, "isolated" rows with segment_ids (data.documents), their
documents ending at random with a mean length of --doc_len tokens; "vs open" is an isolated
step's time over the open step's of the same case (issue 33 asks at most 1.1).
"""

import itertools
import time

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from mlm_batch import mlm_batch
from timing import report

from roformer_jax.data import masking
from roformer_jax.data.data_config import DataConfig
from roformer_jax.nn.model import RoFormer
from roformer_jax.nn.model_config import ModelConfig, model_config
from roformer_jax.training import optim
from roformer_jax.training.step import TrainState, make_train_step

_SIZES = flags.DEFINE_list("sizes", ["small", "base"], "Model sizes (model_config.SIZES).")
_ATTENTION = flags.DEFINE_list("attention", ["softmax", "linear"], "Attention kinds.")
_DTYPES = flags.DEFINE_list("dtypes", ["float32", "bfloat16"], "Compute dtypes.")
_HEADS = flags.DEFINE_list("mlm_head", ["targets", "all"], "Where the MLM head runs.")
_DOCUMENTS = flags.DEFINE_list("documents", ["open", "isolated"], "data.documents of the rows.")
_DOC_LEN = flags.DEFINE_integer("doc_len", 100, "Mean tokens per document of isolated rows.")
_BATCH = flags.DEFINE_integer("batch", 8, "Sequences per step.")
_SEQ_LEN = flags.DEFINE_integer("seq_len", 128, "Tokens per sequence.")
_ROUNDS = flags.DEFINE_integer("rounds", 5, "Timed (matmul, step) pairs per case.")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")

VOCAB = {"tiny": 8192, "small": 8192, "base": 30522}  # our WordPiece default; bert-base-uncased's
MASK_PROB = DataConfig().mask_prob  # the rate training masks at


def model_flops_per_token(cfg: ModelConfig, seq_len: int, head_share: float = 1.0) -> float:
    """Matmul FLOPs of one training token (forward + backward = 3 x forward).

    head_share: the share of positions the MLM head runs at.
    """
    d, f, e, h = cfg.hidden_size, cfg.intermediate_size, cfg.embed_dim, cfg.head_dim
    attention = 4 * seq_len * d if cfg.attention == "softmax" else 4 * d * h
    layer = 8 * d * d + 4 * d * f + attention
    forward = cfg.num_layers * layer + head_share * (2 * d * e + 2 * e * cfg.vocab_size)
    if e != d:
        forward += 2 * e * d  # embeddings_project
    return 3.0 * forward


def _seconds(fn) -> float:
    t0 = time.perf_counter()
    jax.block_until_ready(fn())
    return time.perf_counter() - t0


def _matmul(dtype, n: int = 4096):
    """A jitted [n, n] x [n, n] matmul (compiled) and its FLOPs."""
    a = jax.random.normal(jax.random.key(0), (n, n), dtype)
    matmul = jax.jit(lambda x, y: x @ y)
    jax.block_until_ready(matmul(a, a))
    return lambda: matmul(a, a), 2 * n**3


def _train_step(
    cfg: ModelConfig, batch: int, seq_len: int, mask_prob: float | None, doc_len: int | None = None
):
    """The jitted train step (compiled, run once) as a thunk, and its compiled executable;
    with doc_len, rows of isolated documents of that mean length."""
    model = RoFormer(cfg)
    tx = optim.make_optimizer(optim.OptimConfig(warmup_steps=0), total_steps=10_000)
    rng = np.random.default_rng(0)
    data = mlm_batch(cfg.vocab_size, batch, seq_len, rng)
    if doc_len is not None:
        starts = rng.random((batch, seq_len)) < 1.0 / doc_len  # [B, L]
        starts[:, 0] = False
        data["segment_ids"] = np.cumsum(starts, axis=1).astype(np.int32)

    @jax.jit
    def init(key):
        params = model.init(key, data["input_ids"][:1])["params"]
        return TrainState(jnp.zeros((), jnp.int32), params, tx.init(params))

    step = jax.jit(make_train_step(model, tx, mask_prob=mask_prob), donate_argnums=(0,))
    box = [init(jax.random.key(0))]  # the state, donated and replaced by every call
    key = jax.random.key(1)
    compiled = step.lower(box[0], data, key).compile()

    def run():
        box[0], metrics = step(box[0], data, key)
        return metrics

    jax.block_until_ready(run())  # compile
    return run, compiled


def bench(size, attention, dtype, head, documents, *, batch, seq_len, rounds):
    """Best-of-`rounds` step time and matmul peak, interleaved: [matmul, step] x rounds.

    On a machine shared with other jobs the fastest run of each is the least disturbed one;
    interleaving exposes both to the same conditions.
    """
    cfg = model_config(size, vocab_size=VOCAB[size], attention=attention, dtype=dtype)
    doc_len = _DOC_LEN.value if documents == "isolated" else None
    mask_prob = MASK_PROB if head == "targets" else None
    step, compiled = _train_step(cfg, batch, seq_len, mask_prob, doc_len)
    xla_flops = compiled.cost_analysis().get("flops")
    matmul, matmul_flops = _matmul(jnp.dtype(dtype))
    step_s, matmul_s = [], []
    for _ in range(rounds):
        matmul_s.append(_seconds(matmul))
        step_s.append(_seconds(step))
    seconds, peak = min(step_s), matmul_flops / min(matmul_s)
    share = masking.max_targets(seq_len, MASK_PROB) / seq_len if head == "targets" else 1.0
    flops = model_flops_per_token(cfg, seq_len, share) * batch * seq_len
    return {
        "size": size,
        "attention": attention,
        "dtype": dtype,
        "mlm_head": head,
        "documents": documents,
        "ms": 1e3 * seconds,
        "ms_median": 1e3 * float(np.median(step_s)),
        "tokens/s": batch * seq_len / seconds,
        "GFLOP/step": flops / 1e9,
        "XLA GFLOP": None if xla_flops is None else xla_flops / 1e9,
        "TFLOP/s": flops / seconds / 1e12,
        "matmul TFLOP/s": peak / 1e12,  # best of this case's rounds
        "batch": batch,
        "seq_len": seq_len,
        "backend": jax.default_backend(),
    }


def main(argv):
    del argv
    records = []
    cases = itertools.product(
        _SIZES.value, _ATTENTION.value, _DTYPES.value, _HEADS.value, _DOCUMENTS.value
    )
    for case in cases:
        records.append(
            bench(*case, batch=_BATCH.value, seq_len=_SEQ_LEN.value, rounds=_ROUNDS.value)
        )
        print(records[-1], flush=True)
    # The peak of a dtype is the best matmul rate seen in the whole run: MFU is never
    # flattered by a matmul that happened to be slowed down next to a lucky step.
    for r in records:
        r["peak TFLOP/s"] = max(q["matmul TFLOP/s"] for q in records if q["dtype"] == r["dtype"])
        r["MFU"] = r["TFLOP/s"] / r["peak TFLOP/s"]
        case = ("size", "attention", "dtype", "mlm_head")
        open_ = [q for q in records if q["documents"] == "open" and all(q[k] == r[k] for k in case)]
        r["vs open"] = r["ms"] / open_[0]["ms"] if open_ else None
    columns = [
        "size",
        "attention",
        "dtype",
        "mlm_head",
        "documents",
        "ms",
        "vs open",
        "tokens/s",
        "GFLOP/step",
        "XLA GFLOP",
        "TFLOP/s",
        "peak TFLOP/s",
        "MFU",
    ]
    report(records, columns, _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
