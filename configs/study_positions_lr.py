"""Issue 31, item 1: is section 1's RoFormer - BERT gap BERT's learning rate or warm-up?

  python experiments/compare.py --config=configs/study_positions_lr.py:sweep \\
      --workdir=runs/positions_lr --raw_dir=docs/results/raw/positions_lr_sweep
  python experiments/compare.py \\
      --config=configs/study_positions_lr.py:best,BERT=1e-3/500,RoPE=1e-3,sinusoidal=1e-3/500 \\
      --workdir=runs/positions_lr --raw_dir=docs/results/raw/positions_lr_best
  python experiments/position_table.py --workdir=runs/positions_lr \\
      --raw_dir=docs/results/raw/positions_lr_best
  (the second command's settings are each model's best of the sweep, seed 0, by its final
  validation loss: a rate, and "/500" where the warm-up of 500 steps did better than 100;
  ",runlocal" after either checks the wiring in seconds)

Section 1 (configs/study_positions_long.py, WikiText-2, 2,000 steps of 16 x 128, warm-up 100
steps then a constant rate) serves one rate, 1e-3, to every encoding, and post-LN BERT at
1e-3 after 100 warm-up steps may be hurried. `:sweep` trains, seed 0 only, BERT, RoPE and
the fixed sinusoid at 3e-4, 1e-3 and 2e-3; each at 1e-3 with a warm-up of 500 steps (a
quarter of the run); BERT's trainable table started at the sinusoid ("learned_sinusoid",
embeddings x √E as the sinusoid's): at step 0 the sinusoidal model, then free to move; and
ALiBi with section 1's 2 heads (slopes 1/16, 1/256) beside 8 heads of 16 (the paper's 1/2 to
1/256). `:best,<model>=<rate>[/<warm-up>],...` trains the three at their best settings,
the table started at the sinusoid and both ALiBis, 3 seeds each (seed 0 is the sweep's run,
cached: the same name and config), with BERT at its best as the paired tables' baseline.

Budget: 15 runs of 2,000 steps for the sweep and 12 more for `:best`, about 10 min each on 2
quiet cores (section 1's 15 runs took 3 h 4 min, partly on shared cores): about 4.5 h.

Selection apart from report (issue 56): the runs above chose on the held-out set they report.
",selection" after the phase trains both phases without the selection split (data.
selection_fraction: 8% of the articles, a hash band apart from the held-out 8%; the held-out
ids are unchanged), the sweep scoring that split alone and `:best` the held-out set alone:

  python experiments/compare.py --config=configs/study_positions_lr.py:sweep,selection \
      --workdir=runs/positions_lr_selection \
      --raw_dir=docs/results/raw/positions_lr_selection_sweep
  python experiments/compare.py --config=configs/study_positions_lr.py:best,selection,<chosen> \
      --workdir=runs/positions_lr_selection \
      --raw_dir=docs/results/raw/positions_lr_selection_best

where <chosen> is what the page's `chosen()` of the first raw folder gives (each model's
lowest final selection loss). `:best,selection` trains all 3 seeds (its evaluation differs
from the sweep's, so seed 0 is not shared): 15 + 18 runs, about 5.5 h on 2 quiet cores.
"""

from ml_collections import ConfigDict

from configs import studies, study_positions_long

RATES = (3e-4, 1e-3, 2e-3)
SELECTION_FRACTION = 0.08  # of WikiText-2's articles, as many as are held out
LONG_WARMUP = 500
MODELS = {  # short name: section 1's run
    "BERT": study_positions_long.RUNS["learned (BERT)"],
    "RoPE": study_positions_long.RUNS["RoPE (RoFormer)"],
    "sinusoidal": study_positions_long.RUNS["sinusoidal"],
}
FROM_SINUSOID = {"model": {"position": "learned_sinusoid", "max_len": 128}}
# ALiBi's slopes with section 1's 2 heads are 1/16 and 1/256; with 8 heads (of 16 features)
# they are the paper's 1/2 ... 1/256, a steep local bias among them.
ALIBI = {
    "ALiBi, 2 heads": study_positions_long.RUNS["ALiBi"],
    "ALiBi, 8 heads": {"model": {"position": "alibi", "num_heads": 8}},
}


def _at(model: str, rate: float, warmup: float | None = None) -> tuple[str, dict]:
    # "BERT, lr 3e-4": no dots (ConfigDict keys cannot hold them)
    warmup = int(warmup) if warmup else None
    name = f"{model}, lr {rate:.0e}".replace("e-0", "e-") + (
        f", warm-up {warmup}" if warmup else ""
    )
    optim = {"learning_rate": rate} | ({"warmup_steps": warmup} if warmup else {})
    return name, MODELS[model] | {"optim": optim}


def get_config(arg=None):
    words = (arg or "sweep").split(",")  # no argument: the sweep
    phase, rest = words[0], [w for w in words[1:] if w not in ("runlocal", "selection")]
    if phase == "runlocal":
        phase = "sweep"
    config = study_positions_long.get_config("wikitext2")
    if phase == "sweep" and not rest:
        runs = dict(_at(m, r) for m in MODELS for r in RATES)
        runs |= dict(_at(m, 1e-3, LONG_WARMUP) for m in MODELS)
        config.seeds = (0,)
        baseline = "BERT, lr 1e-3"
    elif phase == "best":
        best = dict(w.split("=") for w in rest)
        if sorted(best) != sorted(MODELS):
            raise ValueError(f"':best' needs a rate for each of {sorted(MODELS)}, got {arg!r}")
        # "1e-3/500": the rate 1e-3 with a warm-up of 500 steps
        runs = dict(_at(m, *map(float, best[m].split("/"))) for m in MODELS)
        baseline = next(iter(runs))
    else:
        raise ValueError(
            f"config argument {arg!r}: 'sweep' or 'best,BERT=..,RoPE=..,"
            "sinusoidal=..' (a rate, '/500' after it for a warm-up of 500; "
            "then ',runlocal' for a smoke run)"
        )
    runs["BERT from the sinusoid"] = FROM_SINUSOID
    runs |= ALIBI
    config.runs = ConfigDict(runs, sort_keys=False)
    config.baseline = baseline
    config.title = f"MLM, softmax attention: learning rates and warm-up ({phase}), 2,000 steps"
    if "selection" in words:
        config.experiment.data.selection_fraction = SELECTION_FRACTION
        if phase == "sweep":  # chooses on the selection split; `:best` reports the held-out
            config.experiment.data.eval_split = "selection"
        config.title += ", the selection split apart"
    return studies.check_wiring(config) if "runlocal" in words else config
