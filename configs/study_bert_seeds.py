"""Issue 56, item 1 (seeds): BERT and no positions at 20,000 steps, seeds 1 and 2.

  python experiments/compare.py --config=configs/study_bert_seeds.py \\
      --workdir=runs/bert_seeds --raw_dir=docs/results/raw/bert_seeds_wikitext2
  (":runlocal" checks the wiring in seconds)

configs/study_long_training.py's setting (WikiText-2, 20,000 steps at a constant 1e-3 after
100 warm-up steps, evaluated every 1,000, every checkpoint kept), for the two runs whose gap
the page reads at seed 0 only: with these two seeds, "does BERT catch up with no positions"
gets an interval over 3 seeds (seed 0's runs are long_training_wikitext2's).

Budget: four runs of about 80 min each on 2 quiet cores.
"""

from ml_collections import ConfigDict

from configs import base, study_long_training, study_positions_long

RUNS = ("none", "learned (BERT)")


def get_config(arg=None):
    config = study_long_training.get_config(",".join(base.config_words(arg, ("runlocal",))))
    config.runs = ConfigDict(
        {name: study_positions_long.RUNS[name] for name in RUNS}, sort_keys=False
    )
    config.seeds = (1, 2)
    config.baseline = "none"
    config.title = "MLM, softmax attention: BERT and no positions, 20,000 steps, seeds 1-2"
    config.plot_keys = ("train/loss", "valid/loss_128")
    for key in ("eval_lengths", "eval_tokens", "eval_baselines", "position_reference"):
        del config[key]
    del config["evaluations"]
    return config
