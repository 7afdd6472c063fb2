"""Issue 56, item 3: ALiBi's 8 heads changed heads and head width together; this parts them.

  python experiments/compare.py --config=configs/study_positions_heads.py \\
      --workdir=runs/positions_lr --raw_dir=docs/results/raw/positions_heads
  (",runlocal" as the argument checks the wiring in seconds)

configs/study_positions_lr.py's `:best` set ALiBi at 8 heads of 16 (the paper's slopes 1/2 to
1/256) beside section 1's 2 heads of 64 (slopes 1/16, 1/256), so its gain may be the heads,
their width or the slopes. Here, section 1's WikiText-2 setting (2,000 steps of 16 x 128, lr
1e-3 after 100 warm-up steps, 3 seeds): RoPE at 2 x 64 and at 8 x 16, and ALiBi at 2 heads,
at 8 heads with their own slopes, and at 8 heads with the 2-head slopes (each of 1/16 and
1/256 over 4 heads: sections.alibi.slope_heads). The page pairs RoPE 8 x 16 with 2 x 64 (head
layout, RoPE), ALiBi 8 heads with the 2-head slopes against 2 heads (head layout, ALiBi) and
against 8 heads with their own (slopes).

Budget: 5 runs x 3 seeds of 2,000 steps, about 10 min each on 2 quiet cores (2.5 h); in
`:best`'s workdir, its runs of the same names and configs (RoPE at 1e-3 and both ALiBis) are
taken as they are, leaving 2 x 3 runs (1 h). Without that workdir, its raw folder serves
(the runs' metrics are what this study reads, and a finished run is not trained again):

  mkdir -p runs/positions_lr && for run in RoPE_lr_1e-3 ALiBi_2_heads ALiBi_8_heads; do
      cp -r docs/results/raw/positions_lr_best/$run runs/positions_lr/; done
"""

from ml_collections import ConfigDict

from configs import base, studies, study_positions_lr

RUNS = {
    # the names of `:best`'s runs, so that its workdir serves them
    "RoPE, lr 1e-3": study_positions_lr.MODELS["RoPE"] | {"optim": {"learning_rate": 1e-3}},
    "RoPE, 8 heads": {"model": {"position": "rope", "num_heads": 8}},
    **study_positions_lr.ALIBI,
    "ALiBi, 8 heads, 2-head slopes": {
        "model": {"position": "alibi", "num_heads": 8, "sections": {"alibi": {"slope_heads": 2}}}
    },
}
# (run, baseline) of each comparison the page draws, one family for Holm's correction.
PAIRS = (
    ("RoPE, 8 heads", "RoPE, lr 1e-3"),
    ("ALiBi, 8 heads, 2-head slopes", "ALiBi, 2 heads"),
    ("ALiBi, 8 heads", "ALiBi, 8 heads, 2-head slopes"),
)


def get_config(arg=None):
    runlocal = bool(base.config_words(arg, ("runlocal",)))
    config = study_positions_lr.get_config("sweep")
    config.runs = ConfigDict(RUNS, sort_keys=False)
    config.seeds = (0, 1, 2)
    config.baseline = "ALiBi, 2 heads"
    config.title = "MLM, softmax attention: heads and head width apart from ALiBi's slopes"
    return studies.check_wiring(config) if runlocal else config
