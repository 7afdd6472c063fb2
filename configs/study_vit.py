"""Study: does 2-D RoPE hold a small ViT's accuracy at resolutions past the training one?

  python experiments/vit_study.py --config=configs/study_vit.py --workdir=runs/vit \\
      --raw_dir=docs/results/raw/vit

Issue 32, item 4: the claim of Heo et al. 2024 ("Rotary Position Embedding for Vision
Transformer") at this scale. Four encodings of each patch's (row, col), 10 seeds each:
RoPE-Axial ("rope_nd", 2 axes), RoPE-Mixed ("rope_learned" per head), ViT's learned absolute
table (bilinearly resized to a larger grid, as DeiT does), and no positions.

Data: scikit-learn's `load_digits` (1,797 8x8 digits, shipped inside the package: nothing is
downloaded), 497 held out by a fixed permutation (split_seed). The 8x8 source is upsampled
bilinearly to 16x16 for training and to 16, 20, 24, 28 and 32 pixels for scoring, so every size
shows the same digits and only the grid of 4x4 patches grows: 4x4 patches at training
(16 tokens), up to 8x8 (64 tokens). 4x4 patches, not 2x2, keep the training grid small (the
test is of grids the model never saw) and each variant within about 15 min on 2 quiet cores
at 10 seeds (the 3-seed runs took 5 min each; docs/results.md section 7).
RoPE's base is 100, Heo et al.'s for 2-D (10000 leaves the slowest pairs of a grid of 8 still).

`:zoom` (--workdir=runs/vit_zoom --raw_dir=docs/results/raw/vit_zoom) trains on random zoomed
crops instead, z ~ U[1, 2] (the scale part of RandomResizedCrop, which Heo et al.'s ViTs train
with): a 4x4 patch of a 32-pixel digit then holds what a patch of a 2x-zoomed 16-pixel crop
held in training, so at test only the grid is new. Without it (the default), a larger image
also changes what each patch holds, and every encoding meets patches unlike those it trained on.

Selection apart from report (issue 56): 200 of the 1,300 training digits (the next 200 of the
split's permutation; the 497 test digits are unchanged) are the validation digits, and the
learning rate is chosen on them alone. `:select` trains each encoding at 1e-3, 2e-3 and 4e-3,
3 seeds, and scores the validation digits only (about 12 min on 2 quiet cores):

  python experiments/vit_study.py --config=configs/study_vit.py:select \
      --workdir=runs/vit_select --raw_dir=docs/results/raw/vit_select

The page's `vit_chosen("vit_select")` gives each encoding's rate of highest mean validation
accuracy at 16 px, as the argument of the reported runs, which score the test digits once:
`:RoPE-Axial=2e-3,RoPE-Mixed=2e-3,learned table=2e-3,none=2e-3` (quoted on a command line;
after `zoom,` for the zoomed variant). No rate given: 2e-3 for all, as the runs before.

The expectation, per the paper: RoPE-Axial and RoPE-Mixed lose less accuracy past 16 pixels
than the table; at 16 pixels all four are close. `:runlocal` runs 2 encodings x 2 seeds x 20
steps in seconds (a smoke test of the machinery, not a result).
"""

from ml_collections import ConfigDict


def get_config(arg=None):
    config = ConfigDict()
    config.title = "ViT on upscaled digits: accuracy past the training resolution"
    # ModelConfig fields every run shares (`roformer_jax.nn.model_config.ModelConfig`).
    config.model = ConfigDict(
        dict(
            num_layers=2,
            hidden_size=64,
            num_heads=4,  # head dim 16: 8 pairs, 4 per axis for RoPE-Axial
            intermediate_size=128,
            hidden_dropout=0.1,
            attention_dropout=0.0,
            pre_ln=True,  # ViT's
            layer_norm_eps=1e-6,
            position="none",
        )
    )
    # RoPE over (row, col) at base 100, each of its encodings in its own section.
    axial = {"base": 100.0, "axes": 2}
    # Each run's own settings over the shared ones; "table": ViT's learned absolute table.
    config.runs = ConfigDict(
        {
            "RoPE-Axial": {"model": {"position": "rope_nd", "sections": {"rope_nd": axial}}},
            "RoPE-Mixed": {
                "model": {
                    "position": "rope_learned",
                    "sections": {"rope_learned": {**axial, "per_head": True}},
                }
            },
            "learned table": {"table": True},
            "none": {},
        }
    )
    # The paired comparisons of the page: name -> (run, baseline run).
    config.pairs = ConfigDict(
        {
            "RoPE-Axial − learned table": ("RoPE-Axial", "learned table"),
            "RoPE-Mixed − learned table": ("RoPE-Mixed", "learned table"),
            "RoPE-Axial − none": ("RoPE-Axial", "none"),
            "RoPE-Mixed − none": ("RoPE-Mixed", "none"),
        }
    )
    config.seeds = tuple(range(10))  # each run's init, dropout and batch order
    config.patch = 4  # pixels per patch side
    config.train_size = 16  # pixels per image side in training
    config.eval_sizes = (16, 20, 24, 28, 32)  # pixels per side scored (multiples of patch)
    config.steps = 1500
    config.batch_size = 64
    config.learning_rate = 2e-3  # AdamW, linear warmup then cosine to 0
    config.warmup_steps = 100
    config.weight_decay = 0.05
    config.test_size = 497  # held-out digits; the other 1,300 train (less valid_size)
    config.valid_size = 200  # validation digits, cut from the training ones (module doc)
    config.split_seed = 0
    # Training crops zoom by z ~ U[1, max_zoom] (vit_study.zoomed_crops); 1: the whole digit.
    config.max_zoom = 1.0
    return _variant(config, arg)


SELECTION_RATES = (1e-3, 2e-3, 4e-3)


def _variant(config: ConfigDict, arg) -> ConfigDict:
    """`config` as the argument changes it: `zoom`, `select` or `runlocal`, then the chosen
    rates as `<encoding>=<rate>` (module doc); none: unchanged."""
    words = (arg or "").split(",")
    rates = dict(w.split("=") for w in words if "=" in w)
    arg = ",".join(w for w in words if "=" not in w) or None
    if sorted(rates) not in ([], sorted(config.runs)):
        raise ValueError(f"chosen rates {rates}: give one for each of {sorted(config.runs)}")
    for name, rate in rates.items():
        config.runs[name].learning_rate = float(rate)
    if arg == "select":
        config.runs = ConfigDict(
            {
                f"{name}, lr {rate:.0e}".replace("e-0", "e-"): {
                    **run.to_dict(),
                    "learning_rate": rate,
                }
                for name, run in config.runs.items()
                for rate in SELECTION_RATES
            }
        )
        config.pairs, config.seeds, config.select = ConfigDict(), (0, 1, 2), True
        config.title = "ViT on upscaled digits: learning rates on the validation digits"
    elif arg == "zoom":
        config.max_zoom = 2.0
        config.title = "ViT on upscaled digits, trained on zoomed crops: past the training grid"
    elif arg == "runlocal":
        config.runs = ConfigDict({k: config.runs[k] for k in ("RoPE-Axial", "learned table")})
        config.pairs = ConfigDict({"RoPE-Axial − learned table": ("RoPE-Axial", "learned table")})
        config.seeds = (0, 1)
        config.eval_sizes = (16, 24)
        config.steps, config.warmup_steps = 20, 5
    elif arg is not None:
        raise ValueError(
            f"unknown argument {arg!r}; use none, 'zoom', 'select' or 'runlocal', then "
            "'<encoding>=<rate>' for each encoding"
        )
    return config
