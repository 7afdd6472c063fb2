"""Where training metrics go: workdir/metrics.jsonl, TensorBoard, and a progress line.

One record per logged step, e.g.
  {"step": 200, "train/loss": 5.31, "train/perplexity": 202.3, "train/accuracy": 0.21,
   "train/lr": 1e-3, "train/grad_norm": 0.9, "train/grad_norm_max": 1.4,
   "train/min_denominator": 0.031, "train/tokens_per_s": 8123.0, "elapsed_s": 61.2,
   "valid/loss_128": 5.40, "valid/perplexity_128": 221.4, "valid/accuracy_128": 0.20,
   "valid/tokens_128": 1843}
(valid/*_<length> for the training length and each of data.valid_lengths).
Gradient norms are of the global mean gradient before clipping: the mean and the largest
over the steps since the previous record. train/min_denominator, only for attention kinds
with a denominator (linear, cosine), is the smallest |denominator| of any real query, layer
and step since the previous record: how near eq. (18)'s guard comes to binding, measured.
Losses and accuracies are sums over target tokens (masked ones for MLM, next tokens for a
causal LM) divided by their count, the sums taken over every step since the previous record
and every device (never a mean of means); perplexity is exp of that mean loss.
An objective of pairs ("mlm_same_doc") adds train/pair_loss and train/pair_accuracy (per
row: is B of A's document?) and valid/pair_loss, valid/pair_accuracy, valid/pairs on the
held-out pairs; its train/loss is the whole objective's (MLM plus pair, training.step.
pair_sums), its train/accuracy and valid/*_<length> the MLM's alone.
TensorBoard goes through tensorboardX, which needs no TensorFlow.
"""

from __future__ import annotations

import json
import math
import os
import sys

from absl import logging

METRICS_FILE = "metrics.jsonl"
TENSORBOARD_DIR = "tensorboard"
# Keys that depend on the wall clock; everything else in a record is a function of the config.
TIMING_KEYS = ("train/tokens_per_s", "elapsed_s")


def _tensorboardx():
    """tensorboardX, imported without torch where torch is not loaded yet.

    tensorboardX imports torch (if installed) only to accept its tensors, and that import
    takes ~2.5 s of every run's start on CPU; the scalars written here are floats. torch stays
    importable afterwards (the block is lifted at once).
    """
    if "tensorboardX" in sys.modules or "torch" in sys.modules:
        import tensorboardX

        return tensorboardX
    sys.modules["torch"] = None  # an import of torch now raises ImportError
    try:
        import tensorboardX
    finally:
        del sys.modules["torch"]
    return tensorboardX


def read_metrics(workdir: str) -> list[dict]:
    """The records of workdir/metrics.jsonl, in order ([] if there is none).

    A last line cut off (no newline: a run killed while it wrote) is dropped with a warning;
    any other line that is not JSON is a ValueError naming the file and line.
    """
    path = os.path.join(workdir, METRICS_FILE)
    if not os.path.exists(path):
        return []
    with open(path, encoding="utf-8") as f:
        lines = f.read().split("\n")
    cut_off = lines.pop()  # "" after the newline that ends every whole record
    if cut_off.strip():
        logging.warning("%s ends in a cut-off record; dropped: %.80s", path, cut_off)
    records = []
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError as e:
            raise ValueError(
                f"{path}, line {number}, is not JSON ({e}); delete that line, or use a new "
                "--workdir"
            ) from None
    return records


class MetricsWriter:
    """Appends records to metrics.jsonl and TensorBoard; a no-op on processes other than 0.

    `resume_step`: records after this step (written by a run that was stopped before its
    next checkpoint) are dropped, so that a resumed run's file reads as one uninterrupted run.
    """

    def __init__(self, workdir: str, *, resume_step: int = 0, enabled: bool = True):
        self._enabled = enabled
        if not enabled:
            return
        os.makedirs(workdir, exist_ok=True)
        path = os.path.join(workdir, METRICS_FILE)
        kept = [r for r in read_metrics(workdir) if r["step"] <= resume_step]
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in kept)
        os.replace(path + ".tmp", path)
        self._file = open(path, "a", encoding="utf-8")  # closed in close()
        self._tb = _tensorboardx().SummaryWriter(
            os.path.join(workdir, TENSORBOARD_DIR), purge_step=resume_step + 1
        )

    def write(self, record: dict) -> None:
        if not self._enabled:
            return
        self._file.write(json.dumps(record) + "\n")
        self._file.flush()
        for key, value in record.items():
            if key != "step" and value is not None:
                self._tb.add_scalar(key, value, record["step"])
        self._tb.flush()

    def close(self) -> None:
        if self._enabled:
            self._file.close()
            self._tb.close()


def empty_window() -> dict:
    """Host-side sums (and extrema; None: no step yet) over the steps since the last record
    (JSON: it rides in checkpoints)."""
    return {
        "loss": 0.0,
        "correct": 0.0,
        "count": 0.0,
        "grad_norm": 0.0,
        "steps": 0,
        "grad_norm_max": None,
        "min_denominator": None,
        **dict.fromkeys(PAIR_SUMS, 0.0),
    }


PAIR_SUMS = ("pair_loss", "pair_correct", "pair_count")  # training.step.pair_sums


def _extremum(pick, old, new: float) -> float:
    return new if old is None else pick(old, new)


def accumulate(window: dict, fetched: list[dict], first_step: int) -> None:
    """Adds the per-step metrics of steps first_step, first_step + 1, ... to `window`.

    Raises FloatingPointError naming the first step whose loss or gradient norm is not
    finite. The sums are float64 additions of float32 values in step order, so a run
    resumed from a checkpointed window adds up bitwise the same.
    """
    for step, m in enumerate(fetched, start=first_step):
        if not (math.isfinite(m["loss"]) and math.isfinite(m["grad_norm"])):
            raise FloatingPointError(
                f"non-finite loss ({float(m['loss'])}) or gradient norm "
                f"({float(m['grad_norm'])}) at step {step}"
            )
        for key in ("loss", "correct", "count", "grad_norm"):
            window[key] += float(m[key])
        for key in PAIR_SUMS:
            if key in m:
                window[key] = window.get(key, 0.0) + float(m[key])
        window["steps"] += 1
        # .get: a window restored from a checkpoint written before these keys existed
        window["grad_norm_max"] = _extremum(max, window.get("grad_norm_max"), float(m["grad_norm"]))
        if "min_denominator" in m:
            window["min_denominator"] = _extremum(
                min, window.get("min_denominator"), float(m["min_denominator"])
            )


def perplexity(mean_loss: float) -> float:
    """exp(mean loss in nats per target token); inf past what a float64 holds."""
    return math.exp(mean_loss) if mean_loss < 709.0 else math.inf


def window_record(window: dict, *, lr: float, tokens_per_s: float | None) -> dict:
    """The train/* entries of a record: target-token loss, perplexity and accuracy, mean
    and largest grad norm, and the smallest denominator where the attention kind has one."""
    count = max(window["count"], 1.0)
    record = {
        "train/loss": window["loss"] / count,
        "train/perplexity": perplexity(window["loss"] / count),
        "train/accuracy": window["correct"] / count,
        "train/lr": lr,
        "train/grad_norm": window["grad_norm"] / max(window["steps"], 1),
        "train/grad_norm_max": window.get("grad_norm_max"),
        "train/tokens_per_s": tokens_per_s,
    }
    if window.get("min_denominator") is not None:
        record["train/min_denominator"] = window["min_denominator"]
    record.update(pair_record(window, "train"))
    return record


def pair_record(sums: dict, prefix: str) -> dict:
    """{prefix}/pair_loss and {prefix}/pair_accuracy: means over the pairs of `sums`
    (PAIR_SUMS); {} where it has none."""
    if not sums.get("pair_count"):
        return {}
    return {
        f"{prefix}/pair_loss": sums["pair_loss"] / sums["pair_count"],
        f"{prefix}/pair_accuracy": sums["pair_correct"] / sums["pair_count"],
    }


def log_progress(record: dict, *, total_steps: int, eta_s: float | None = None) -> None:
    """One absl INFO line: step, loss, accuracy, lr, grad norm, tokens/s and ETA."""
    step = record["step"]
    parts = [f"step {step}/{total_steps}"]
    for key, fmt in (
        ("train/loss", "loss {:.4f}"),
        ("train/accuracy", "acc {:.3f}"),
        ("train/lr", "lr {:.2e}"),
        ("train/grad_norm", "|g| {:.3f}"),
        ("train/min_denominator", "min|den| {:.2e}"),
        ("train/pair_accuracy", "pair acc {:.3f}"),
    ):
        if record.get(key) is not None:
            parts.append(fmt.format(record[key]))
    speed = record.get("train/tokens_per_s")
    if speed:
        parts.append(f"{speed:,.0f} tok/s")
    if eta_s is not None:
        parts.append(f"ETA {_hms(eta_s)}")
    for key, value in record.items():
        if key.startswith("valid/loss_"):
            length = key.rsplit("_", 1)[1]
            acc = record.get(f"valid/accuracy_{length}", math.nan)
            parts.append(f"valid@{length} {value:.4f} / {acc:.3f}")
    if "valid/pair_accuracy" in record:
        parts.append(f"valid pairs {record['valid/pair_accuracy']:.3f}")
    logging.info("  ".join(parts))


def summary(record: dict) -> str:
    """ "key value, ..." of a run's final record; a value the run could not measure (None:
    train/tokens_per_s of a session whose one step compiled) reads "n/a"."""
    return ", ".join(f"{k} {'n/a' if v is None else format(v, '.6g')}" for k, v in record.items())


def _hms(seconds: float) -> str:
    seconds = int(seconds)
    return f"{seconds // 3600}:{seconds // 60 % 60:02d}:{seconds % 60:02d}"
