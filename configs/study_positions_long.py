"""Study 1 redone (issue 17, item 3): position encodings through 2,000 steps, 3 seeds.

  python experiments/compare.py --config=configs/study_positions_long.py:wikitext2 \\
      --workdir=runs/positions_long_wikitext2 \\
      --raw_dir=docs/results/raw/positions_long_wikitext2
  (:warpeace for War and Peace, no argument for the builtin corpus; ",runlocal" for a smoke run)

The paper's Fig. 3 (left), softmax attention: learned absolute positions (BERT), RoPE
(RoFormer), no positions, the sinusoid of Vaswani et al. with the token embeddings scaled by
√D before it is added, as they do (positions.ENCODINGS["sinusoidal"].scale_embeddings; it
was a broken competitor without), and ALiBi. The setting is studies.get_long_config's: the
encoder of configs/studies.py (4 layers x 128, 2 heads of 64, feed-forward 512, vocabulary
8192, 16 x 128 tokens a step) on a corpus split by documents (studies.LONG_DOCUMENTS), for
2,000 steps (4.1 M tokens), warm-up 100 steps then a constant rate (why: that function's
docstring), evaluated every 100 steps (20 points per curve) on the held-out set fixed by
data.eval_seed for every run and seed: 68 batches of 16 x 126 tokens, 20,565 masked targets
on WikiText-2 and on War and Peace (valid/tokens_128 in metrics.jsonl).

Budget, WikiText-2 as run: 15 runs, 3 h 4 min of training by the runs' own clocks (6.1
core-hours; docs/results.md, Wall time), on cores shared with other jobs part of the time.
Expect (final valid loss over 3 seeds; docs/results.md section 1): WikiText-2, RoPE 4.59,
ALiBi 5.91, sinusoidal 5.88 (seeds 5.71-6.12), none 6.21, BERT 6.25; War and Peace, RoPE
4.17, ALiBi 5.65, sinusoidal 5.74, none 5.88, BERT 5.91. On both, RoFormer below BERT from
the first evaluation on, and BERT never below "none".
"""

from ml_collections import ConfigDict

from configs import studies

RUNS = {  # in the order of the tables; configs/study_positions_batch.py reruns some of them
    "learned (BERT)": {"model": {"position": "learned", "max_len": 128}},
    "RoPE (RoFormer)": {"model": {"position": "rope"}},
    "none": {"model": {"position": "none"}},
    "sinusoidal": {"model": {"position": "sinusoidal"}},
    "ALiBi": {"model": {"position": "alibi"}},
}


def get_config(arg=None):
    config = studies.get_long_config(arg)
    config.runs = ConfigDict(RUNS, sort_keys=False)
    config.baseline = "learned (BERT)"
    config.title = "MLM, softmax attention: position encodings, 2,000 steps"
    config.plot_keys = ("train/loss", "valid/loss_128")
    return config
