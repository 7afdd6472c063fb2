r"""Trained attention's weight on a key by its distance |m − n|, for a study's softmax runs.

  python experiments/attention_distance.py --workdir=runs/long_training --length=512 \
      --raw_dir=docs/results/raw/long_training_wikitext2

For every run under --workdir (<run>/seed<k>/) whose model is a bidirectional softmax encoder
that can read --length tokens, the newest checkpoint reads the held-out documents of its
corpus cut into windows of --length tokens (data/length_eval.py: the length study's windows,
masked as its evaluation masks them) until --tokens, and
<run>/seed<k>/attention_distance_<length>.json gets, for each layer and head, the mean
weight a query puts on one key at each distance r = 0 .. length - 1
(studies/attention_distance.py), beside the pair counts and 1/length (uniform attention).
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
from roformer_jax.studies import attention_distance, run_dirs, study_record  # noqa: E402
from roformer_jax.training import runs, runtime  # noqa: E402

_WORKDIR = flags.DEFINE_string("workdir", None, "A study's workdir (compare.py --workdir).")
_RAW_DIR = flags.DEFINE_string("raw_dir", None, "The study's raw folder: copy each file there.")
_LENGTH = flags.DEFINE_integer("length", 512, "Window length in tokens ([CLS] and [SEP] in).")
_TOKENS = flags.DEFINE_integer("tokens", 32_768, "Held-out tokens to read (whole windows).")
_ROWS = flags.DEFINE_integer("rows", 4, "Windows a batch.")


def _read(run: str) -> dict | None:
    cfg, params, step = runs.load_params(run)
    model = cfg.model
    if model.attention != "softmax" or model.causal:
        return None
    if model.max_length is not None and model.max_length < _LENGTH.value:
        logging.info("%s reads at most %d tokens: skipped", run, model.max_length)
        return None
    corpus = load_corpus(cfg.data, cfg.train.data_cache_dir or os.path.join(_WORKDIR.value, "data"))
    held_out = length_eval_set(
        corpus,
        [_LENGTH.value],
        batch_size=_ROWS.value,
        windows="documents",
        max_tokens=_TOKENS.value,
    )
    sums = np.zeros((model.num_layers, model.num_heads, _LENGTH.value))
    counts = np.zeros(_LENGTH.value)
    for batch in held_out.batches[_LENGTH.value]:
        mask = batch["attention_mask"].astype(bool)
        weights = attention_distance.attention_weights(model, params, batch["input_ids"], mask)
        for layer, w in enumerate(weights):
            layer_sums, pairs = attention_distance.distance_sums(w, mask)
            sums[layer] += layer_sums
        counts += pairs  # the batch's pairs at each distance: the same in every layer
    with np.errstate(invalid="ignore", divide="ignore"):
        per_key = sums / counts
    return {
        "step": step,
        "length": _LENGTH.value,
        "windows": held_out.num_pieces,
        "tokens": held_out.num_tokens,
        "uniform": 1.0 / _LENGTH.value,
        "pairs": counts.astype(int).tolist(),
        "weight": np.round(per_key, 9).tolist(),  # [layers][heads][r]; NaN: no pair at r
    }


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    name = f"attention_distance_{_LENGTH.value}.json"
    found = 0
    for run in study_record.trained_runs(_WORKDIR.value, _RAW_DIR.value):
        record = _read(run)
        if record is None:
            continue
        run_dirs.write_beside(run, _WORKDIR.value, _RAW_DIR.value, name, record)
        weight = np.nanmean(np.asarray(record["weight"])[:, :, [1, 16, 127]], axis=1)
        logging.info(
            "%s: weight on a key at r = 1, 16, 127 (x uniform), by layer: %s",
            run,
            np.round(weight / record["uniform"], 2).tolist(),
        )
        found += 1
    if not found:
        raise FileNotFoundError(f"no softmax encoder under {_WORKDIR.value} reads {_LENGTH.value}")


if __name__ == "__main__":
    flags.mark_flag_as_required("workdir")
    runtime.run_main(main)
