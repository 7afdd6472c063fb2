"""Study 2 redone (issue 17, item 4): RoPE with linear attention through 2,000 steps, 3 seeds.

  python experiments/compare.py --config=configs/study_linear_long.py:wikitext2 \\
      --workdir=runs/linear_long_wikitext2 --raw_dir=docs/results/raw/linear_long_wikitext2
  (:warpeace for War and Peace, no argument for the builtin corpus; ",runlocal" for a smoke run)

The paper's Fig. 3 (right) and its controls, in the setting of configs/study_positions_long.py
(studies.get_long_config: the encoder of configs/studies.py, 2,000 steps, warm-up 100 then a
constant rate, 20 evaluations of the same 20,565 held-out targets, 3 seeds):
  - FAVOR+ (Performer: 256 positive orthogonal random features per head, ModelConfig's
    defaults, redrawn every 1,000 training steps from the run's seed, each layer its own;
    evaluated with the last update's draw), without positions, with RoPE in the numerator
    (eq 19) and with RoPE before φ (q and k rotated before the feature map, as
    performer-pytorch does);
  - elu + 1 (the RoFormer paper's φ) without positions, with RoPE in the numerator (eq 19),
    in numerator and denominator (eq 18) and before φ;
  - the normalized-cosine attention with and without RoPE;
  - softmax + RoPE (RoFormer), the reference the linear kinds approximate or replace.
Each record of metrics.jsonl carries train/min_denominator (the smallest |denominator| of any
query, layer and step since the previous record; 20 steps) and train/grad_norm_max beside
train/grad_norm (before clipping), so that eq. (18)'s instability is measured, not assumed.
The paired table is against "elu+1, none", as in study 2: the placements of RoPE against no
positions with the same φ.

Budget: each corpus's 30 runs took their training time in docs/results.md's wall-time table
(core-hours there), on 2 cores shared at times with other work; FAVOR+'s 256 features make its
attention about twice softmax's work at 128 tokens.
Expect (WikiText-2, docs/results.md section 2): validation loss at step 2,000 of 6.19 for
elu + 1 without positions, 5.68 with eq. 19, 5.93 with eq. 18, 5.91 before φ; cosine 6.19
without and 6.01 with RoPE; FAVOR+ 6.24 without, 6.20 with eq. 19 and 5.12 with RoPE
before φ; softmax + RoPE 4.59. War and Peace: elu + 1 5.89 without positions, 5.43 with
eq. 19, 5.53 with eq. 18 (seeds 5.34-5.65), 5.81 before φ; cosine 5.88 and 5.81; FAVOR+
5.91, 5.90 and 4.93; softmax + RoPE 4.17. On both, eq. 18's smallest |denominator| falls
to about 1e-3 or below and its gradient norm spikes into the tens, hundreds or thousands.
"""

from ml_collections import ConfigDict

from configs import studies


def _linear(position, placement="numerator", feature_map="elu"):
    return {
        "model": {
            "attention": "linear",
            "position": position,
            "sections": {"linear": {"placement": placement, "feature_map": feature_map}},
        }
    }


def get_config(arg=None):
    config = studies.get_long_config(arg)
    config.runs = ConfigDict(
        {
            "FAVOR+, none": _linear("none", feature_map="favor"),
            "FAVOR+, RoPE numerator (eq 19)": _linear("rope", feature_map="favor"),
            "FAVOR+, RoPE before φ": _linear("rope", "before_feature_map", "favor"),
            "elu+1, none": _linear("none"),
            "elu+1, RoPE numerator (eq 19)": _linear("rope", "numerator"),
            "elu+1, RoPE both (eq 18)": _linear("rope", "both"),
            "elu+1, RoPE before φ": _linear("rope", "before_feature_map"),
            "cosine, none": {"model": {"attention": "cosine", "position": "none"}},
            "cosine, RoPE": {"model": {"attention": "cosine", "position": "rope"}},
            "softmax, RoPE": {"model": {"attention": "softmax", "position": "rope"}},
        },
        sort_keys=False,
    )
    config.baseline = "elu+1, none"
    config.title = "MLM, linear attention: FAVOR+, elu+1 and cosine with and without RoPE"
    config.plot_keys = ("train/loss", "valid/loss_128")
    return config
