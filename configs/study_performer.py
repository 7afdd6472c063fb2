"""Performer in the paper's regime (issue 31): a causal byte-level LM on War and Peace with
FAVOR+ linear attention, without positions, with RoPE in the numerator (eq. 19), with RoPE
before the feature map, and eq. 19 on one fixed draw of the random features; 3 seeds.

  python experiments/compare.py --config=configs/study_performer.py \
      --workdir=runs/performer --raw_dir=docs/results/raw/performer_warpeace

The paper's Fig. 3 (right) trained a Performer language model on enwik8 (bytes of
Wikipedia), which is not available offline; War and Peace read byte by byte is the nearest
corpus here. The shared setting of configs/studies.py otherwise (4 layers x 128, 2 heads of
64, 200 steps of 16 x 128 tokens), with 256 random features per head (the model's default)
redrawn every 50 steps, four draws a run, where the fixed arm keeps its first.

Under eq. 19 FAVOR+ rotates pairs of its random features: averaged over draws, the numerator
tends to exp(qᵀk/√H) · mean_i cos((m − n)θ_i), a factor of the distance blind to content
(tests/feature_maps_test.py checks it over 1,000 draws). One fixed draw keeps whatever
content-position coupling that draw has; redraws average it away.

":runlocal" checks the wiring in seconds: one seed, one layer, 4 steps of 4 rows.
"""

from ml_collections import ConfigDict

from configs import base, studies

_WARPEACE = "../shared/data/war-and-peace/input.txt"
REDRAW = 50


def _favor(position, placement="numerator", redraw=REDRAW):
    return {
        "model": {
            "attention": "linear",
            "position": position,
            "sections": {
                "linear": {"feature_map": "favor", "placement": placement, "feature_redraw": redraw}
            },
        },
    }


def get_config(arg=None):
    runlocal = bool(base.config_words(arg, ("runlocal",)))
    config = studies.get_config("runlocal" if runlocal else None)
    experiment = config.experiment
    experiment.model.update(causal=True, vocab_size=None)  # None: the byte tokenizer's
    experiment.data.update(
        objective="clm", tokenizer="bytes", source=_WARPEACE, doc_separator="blank"
    )
    config.runs = ConfigDict(
        {
            "FAVOR+, no positions": _favor("none"),
            "FAVOR+, eq (19)": _favor("rope"),
            "FAVOR+, RoPE before φ": _favor("rope", "before_feature_map"),
            "FAVOR+, eq (19), one draw": _favor("rope", redraw=0),
        }
    )
    if runlocal:
        studies.check_wiring(config)
    config.baseline = "FAVOR+, no positions"
    config.title = "Causal byte LM on War and Peace: FAVOR+ and where RoPE goes (issue 31)"
    config.plot_keys = ("train/loss", "valid/loss_128")
    config.table_keys = ("train/loss", "valid/loss_128", "valid/accuracy_128")
    return config
