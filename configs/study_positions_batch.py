"""Study 1's control for BERT's gradient noise (issue 17, item 3): 4x the batch, same tokens.

  python experiments/compare.py --config=configs/study_positions_batch.py:wikitext2 \\
      --workdir=runs/positions_batch_wikitext2 \\
      --raw_dir=docs/results/raw/positions_batch_wikitext2
  python experiments/position_table.py --workdir=runs/positions_batch_wikitext2 \\
      --raw_dir=docs/results/raw/positions_batch_wikitext2

In configs/study_positions_long.py (16 x 128 tokens a step) BERT's learned position table
stays random through 2,000 steps and BERT never gets below no positions (docs/results.md,
section 1). One reading: each row of the table gets the gradient of 16 unrelated tokens a
step, noise until attention uses position. This study trains BERT, RoPE and no positions on
the same 4.1 M tokens in 500 steps of 64 x 128 (studies.get_long_config's batch_scale=4:
warm-up, evaluations and checkpoints scaled alike, the same 20,565 held-out targets at the
same token counts), so each step's gradient averages 4x the tokens. If BERT's table then
learns (position_table.py's neighbor cosine well above 0) and BERT gets below "none", the
gap of section 1 is the small batch's; if not, it is not.

Ran on both corpora (docs/results.md, section 1, "The batch control"; ":warpeace" for War
and Peace): 8-9 min per run on 2 quiet cores, 9 runs, 75 min per corpus. BERT's table stays
noise and BERT stays above "none", so the gap is not the small batch's.
"""

from ml_collections import ConfigDict

from configs import studies, study_positions_long

BATCH_SCALE = 4


def get_config(arg=None):
    config = studies.get_long_config(arg, batch_scale=BATCH_SCALE)
    runs = ("learned (BERT)", "RoPE (RoFormer)", "none")  # study 1's models, unchanged
    config.runs = ConfigDict(
        {name: study_positions_long.RUNS[name] for name in runs}, sort_keys=False
    )
    config.baseline = "learned (BERT)"
    config.title = "MLM, softmax attention: positions at 4x the batch (64 x 128), 500 steps"
    config.plot_keys = ("train/loss", "valid/loss_128")
    return config
