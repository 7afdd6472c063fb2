r"""Trained attention by distance |m − n|, for a study's runs: its weights, or RoPE's logit terms.

  python experiments/attention_distance.py --workdir=runs/long_training --length=512 \
      --raw_dir=docs/results/raw/long_training_wikitext2
  python experiments/attention_distance.py --workdir=runs/long_training --length=512 \
      --measure=logit_terms --raw_dir=docs/results/raw/long_training_wikitext2

For every run under --workdir (<run>/seed<k>/) whose model is a bidirectional softmax encoder
that can read --length tokens, the newest checkpoint reads the held-out documents of its
corpus cut into windows of --length tokens (data/length_eval.py: the length study's windows,
masked as its evaluation masks them) until --tokens, and writes, for each layer and head and
each distance r = 0 .. length - 1, beside the pair counts:
  weights      <run>/seed<k>/attention_distance_<length>.json: the mean weight a query puts
               on one key (studies/attention_distance.py), and 1/length (uniform attention);
  logit_terms  <run>/seed<k>/logit_decay_<length>.json, plain RoPE runs only: the mean size
               of the relative part of the logit for unit q and k, and the mean of its decay
               bound over the same pairs (studies/logit_decay.py).
With --raw_dir, only the runs of that study (its study.json) are read, and a copy goes to its
raw folder, which the results page reads.
"""

import os
import sys

import numpy as np
from absl import app, flags, logging

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from roformer_jax.data.corpus import load_corpus  # noqa: E402
from roformer_jax.data.length_eval import length_eval_set  # noqa: E402
from roformer_jax.nn import rope_reference  # noqa: E402
from roformer_jax.studies import (  # noqa: E402
    attention_distance,
    logit_decay,
    run_dirs,
    study_record,
)
from roformer_jax.training import runs, runtime  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "A study's workdir (compare.py --workdir).")
_RAW_DIR = flags.DEFINE_string("raw_dir", None, "The study's raw folder: copy each file there.")
_LENGTH = flags.DEFINE_integer("length", 512, "Window length in tokens ([CLS] and [SEP] in).")
_TOKENS = flags.DEFINE_integer("tokens", 32_768, "Held-out tokens to read (whole windows).")
_ROWS = flags.DEFINE_integer("rows", 4, "Windows a batch.")
_MEASURE = flags.DEFINE_enum(
    "measure", "weights", ["weights", "logit_terms"], "What to read by distance (module doc)."
)

# measure -> (file name stem, model check, (cfg, params, ids, mask) -> {name: [layers] of
# [B, N, L, L]}): each named quantity is averaged over the pairs at each distance.
MEASURES = {
    "weights": (
        "attention_distance",
        lambda model: None,
        lambda *a: {"weight": attention_distance.attention_weights(*a)},
    ),
    "logit_terms": (
        "logit_decay",
        logit_decay.check_model,
        logit_decay.relative_terms,
    ),
}


def _read(run: str) -> dict | None:
    cfg, params, step = runs.load_params(run)
    model = cfg.model
    _, check, measure = MEASURES[_MEASURE.value]
    if model.attention != "softmax" or model.causal:
        return None
    if model.max_length is not None and model.max_length < _LENGTH.value:
        logging.info("%s reads at most %d tokens: skipped", run, model.max_length)
        return None
    try:
        check(model)
    except ValueError as e:
        logging.info("%s: skipped (%s)", run, e)
        return None
    corpus = load_corpus(cfg.data, cfg.train.data_cache_dir or os.path.join(_WORKDIR.value, "data"))
    held_out = length_eval_set(
        corpus,
        [_LENGTH.value],
        batch_size=_ROWS.value,
        windows="documents",
        max_tokens=_TOKENS.value,
    )
    sums, counts = {}, np.zeros(_LENGTH.value)
    for batch in held_out.batches[_LENGTH.value]:
        mask = batch["attention_mask"].astype(bool)
        for name, layers in measure(model, params, batch["input_ids"], mask).items():
            for layer, values in enumerate(layers):
                layer_sums, pairs = attention_distance.distance_sums(values, mask)
                sums.setdefault(name, np.zeros((model.num_layers, *layer_sums.shape)))
                sums[name][layer] += layer_sums
        counts += pairs  # the batch's pairs at each distance: the same in every layer
    with np.errstate(invalid="ignore", divide="ignore"):
        means = {name: np.round(s / counts, 9).tolist() for name, s in sums.items()}
    record = {
        "step": step,
        "length": _LENGTH.value,
        "windows": held_out.num_pieces,
        "tokens": held_out.num_tokens,
        "pairs": counts.astype(int).tolist(),
        **means,  # [layers][heads][r]; NaN: no pair at r
    }
    if _MEASURE.value == "weights":
        return record | {"uniform": 1.0 / _LENGTH.value}
    rope = model.position_section
    f = rope_reference.long_range_decay(
        np.arange(_LENGTH.value), dim=model.head_dim, base=rope.base
    )
    return record | {"rotary_dim": model.head_dim, "base": rope.base, "decay_bound": f.tolist()}


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    stem = MEASURES[_MEASURE.value][0]
    name = f"{stem}_{_LENGTH.value}.json"
    found = 0
    for run in study_record.trained_runs(_WORKDIR.value, _RAW_DIR.value):
        record = _read(run)
        if record is None:
            continue
        run_dirs.write_beside(run, _WORKDIR.value, _RAW_DIR.value, name, record)
        key = "weight" if "weight" in record else "term"
        distances = [r for r in (1, 16, 127) if r < _LENGTH.value]
        at = np.nanmean(np.asarray(record[key])[:, :, distances], axis=1)
        logging.info("%s: mean %s at r = %s, by layer: %s", run, key, distances, np.round(at, 4))
        found += 1
    if not found:
        raise FileNotFoundError(
            f"no run under {_WORKDIR.value} has {_MEASURE.value} to read at {_LENGTH.value}"
        )


if __name__ == "__main__":
    flags.mark_flag_as_required("workdir")
    runtime.run_main(main)
