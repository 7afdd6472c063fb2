"""Issue 31, items 1-2: section 1's encodings trained 10x longer, then read at longer lengths.

  python experiments/length_study.py --config=configs/study_long_training.py \\
      --workdir=runs/long_training --raw_dir=docs/results/raw/long_training_wikitext2
  python experiments/position_table.py --workdir=runs/long_training --every_checkpoint \\
      --raw_dir=docs/results/raw/long_training_wikitext2
  (":runlocal" checks the wiring in seconds)

Does BERT's gap to RoFormer close with training, and does RoPE extrapolate once a model uses
its context? At 2,000 steps (docs/results.md section 1) BERT has not come to encode position
and RoPE sits at 6.6 against a unigram 6.8 after the 200 steps the length study trains for.
Here: section 1's WikiText-2 setting (configs/study_positions_long.py, seed 0: the same
encoder, data, held-out set and constant rate after 100 warm-up steps) for 20,000 steps
(41 M tokens), evaluated every 1,000, with every checkpoint kept so that BERT's table can be
read every 2,000 steps (experiments/position_table.py --every_checkpoint). The RoPE run is
configs/long_doc_pilot.py's encoder retrained (its checkpoints were not kept).

The length evaluation then reads RoPE (plain, PI, NTK, dynamic NTK, YaRN), ALiBi, no
positions and BERT (at 128 only) at 128 to 2,048 tokens on the same held-out targets as
configs/study_length.py, and the trained attention's mass by |m - n| per layer
(experiments/attention_distance.py) against the long-term decay bound of section 4.

`:alibi8` (issue 56, item 3): the extrapolation's ALiBi above has section 1's 2 heads, whose
slopes (1/16, 1/256) are not the paper's; this trains one ALiBi at 8 heads of 16 (the paper's
slopes 1/2 to 1/256) the same 20,000 steps, seed 0, and reads it at the same lengths:

  python experiments/length_study.py --config=configs/study_long_training.py:alibi8 \\
      --workdir=runs/long_training --raw_dir=docs/results/raw/long_training_alibi8

Budget: one run of about 80 min on 2 quiet cores, then a few minutes of length evaluation.

Budget: four runs of about 80 min each on 2 quiet cores (the pilot's 20,000 steps took 89 min
on cores shared for about half of it), then a few minutes of length evaluation.
"""

from ml_collections import ConfigDict

from configs import base, studies, study_length, study_positions_long

STEPS = 20_000
EVAL_EVERY = 1_000
# BERT's and no positions' 20,000 steps are in (their raw metrics): what their scores and
# BERT's table need of them, their checkpoints, is trained again last.
RUNS = ("RoPE (RoFormer)", "ALiBi", "none", "learned (BERT)")


ALIBI_8 = {"ALiBi, 8 heads": {"model": {"position": "alibi", "num_heads": 8}}}


def get_config(arg=None):
    words = base.config_words(arg, ("alibi8", "runlocal"))
    config = study_positions_long.get_config("wikitext2")
    runs = {name: study_positions_long.RUNS[name] for name in RUNS}
    config.runs = ConfigDict(ALIBI_8 if "alibi8" in words else runs, sort_keys=False)
    config.seeds = (0,)
    config.experiment.train.update(
        steps=STEPS,
        eval_every=EVAL_EVERY,
        checkpoint_every=EVAL_EVERY,
        keep_checkpoints=STEPS // EVAL_EVERY + 1,
        log_every=100,
    )
    config.title = f"MLM, softmax attention: position encodings, {STEPS:,} steps"
    config.eval_lengths = study_length.EVAL_LENGTHS
    config.eval_tokens = 68 * (study_length.EVAL_LENGTHS[-1] - 2)
    config.eval_baselines = ("RoPE",)
    config.position_reference = "no positions"
    reads = {
        "RoPE": ("RoPE (RoFormer)", None),
        "RoPE + PI": ("RoPE (RoFormer)", {"rope_type": "linear"}),
        "RoPE + NTK": ("RoPE (RoFormer)", {"rope_type": "ntk"}),
        "RoPE + dynamic NTK": ("RoPE (RoFormer)", {"rope_type": "dynamic", "factor": 2.0}),
        "RoPE + YaRN": ("RoPE (RoFormer)", {"rope_type": "yarn"}),
        "ALiBi": ("ALiBi", None),
        "no positions": ("none", None),
        "BERT": ("learned (BERT)", None),
    }
    config.evaluations = ConfigDict(
        {
            name: {"run": run} | ({"scaling": scaling} if scaling else {})
            for name, (run, scaling) in reads.items()
        },
        sort_keys=False,
    )
    if "alibi8" in words:  # one run, read as it was trained
        config.baseline = "ALiBi, 8 heads"
        config.evaluations = ConfigDict({"ALiBi, 8 heads": {"run": "ALiBi, 8 heads"}})
        config.eval_baselines = ("ALiBi, 8 heads",)  # the figure's trained length
        del config["position_reference"]  # no run without positions here
        config.title = f"MLM: ALiBi at 8 heads of 16, {STEPS:,} steps"
    return studies.check_wiring(config) if "runlocal" in words else config
