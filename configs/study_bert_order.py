"""Issue 56, item 1 (WikiText-2 part): does BERT's table learn order slowly, or not at all?

  python experiments/compare.py --config=configs/study_bert_order.py \\
      --workdir=runs/bert_order --raw_dir=docs/results/raw/bert_order_wikitext2
  (":runlocal" checks the wiring in seconds)

configs/study_long_training.py's setting (WikiText-2, 20,000 steps at a constant 1e-3 after
100 warm-up steps, evaluated every 1,000, every checkpoint kept so that
experiments/position_table.py --every_checkpoint reads the table every 1,000 steps), with
BERT changed one way per run: LayerNorm before each sublayer (pre-LN), a third of the rate
(3e-4, which at 2,000 steps was still falling faster than 1e-3; docs/results.md's sweep),
and no weight decay on the position table (optim.no_decay; AdamW's decay of 0.01 at 1e-3
shrinks a table whose gradient is small by up to e^-0.2 over the 20,000 steps). Seed 0, as
the 20,000-step BERT it is read against. tests/position_order_test.py shows the table, as
the encoder builds and the optimizer decays it, learns order on a task that needs it.

Budget: three runs of about 80 min each on 2 quiet cores (the first two are done).
"""

from ml_collections import ConfigDict

from configs import base, study_long_training, study_positions_long

BERT = study_positions_long.RUNS["learned (BERT)"]["model"]
RUNS = {
    "BERT, pre-LN": {"model": BERT | {"pre_ln": True}},
    "BERT at 3e-4": {"model": BERT, "optim": {"learning_rate": 3e-4}},
    "BERT, table not decayed": {"model": BERT, "optim": {"no_decay": ("position_embeddings",)}},
}


def get_config(arg=None):
    config = study_long_training.get_config(",".join(base.config_words(arg, ("runlocal",))))
    config.runs = ConfigDict(RUNS, sort_keys=False)
    config.baseline = "BERT, pre-LN"
    config.title = "MLM, softmax attention: BERT's table, 20,000 steps, changed one way a run"
    config.plot_keys = ("train/loss", "valid/loss_128")
    for key in (
        "eval_lengths",
        "eval_tokens",
        "eval_baselines",
        "position_reference",
        "evaluations",
    ):
        del config[key]
    return config
