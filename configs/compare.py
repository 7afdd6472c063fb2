"""BERT vs RoFormer, small size, on the builtin corpus: the README's main command.

  python experiments/compare.py --config=configs/compare.py --workdir=runs/compare

The same 4-layer, 256-wide encoder trained twice on the same batches and masks: once with
BERT's learned absolute positions, once with RoPE (RoFormer). Expect (seed 0, measured; the
README's table): BERT valid loss 5.78, accuracy 0.13; RoFormer valid loss 4.99, accuracy
0.26, RoFormer lower from step 50 on; about 6.5 min in all on 2 CPU cores, 170-190 s of
training per run.
More seeds: --config.seeds=0,1,2. Another corpus: --config.experiment.data.source=PATH.
A run's overrides may set {"train": {"init_from": "run:<name>"}}: it then starts from the final
parameters of run <name> (listed before it) of the same seed, e.g. a short fine-tune at a new
length with model.sections.rope.scaling.
"""

from ml_collections import ConfigDict

from configs import base


def get_config(arg=None):
    config = ConfigDict()
    experiment = base.get_base_config("small")
    experiment.train.update(
        steps=300,
        batch_size=16,
        log_every=10,
        eval_every=50,
        checkpoint_every=50,
        eval_batches=8,
    )
    experiment.optim.update(learning_rate=1e-3, warmup_steps=60)
    experiment.data.valid_lengths = ()  # longer contexts: configs/study_length.py
    config.experiment = base.finish(experiment, arg)  # every run starts from this
    config.runs = ConfigDict(
        {
            "BERT (learned absolute)": {"model": {"position": "learned"}},
            "RoFormer (RoPE)": {"model": {"position": "rope"}},
        }
    )  # run name -> overrides of `experiment`
    config.seeds = (0,)  # every run is trained once per seed
    config.baseline = "BERT (learned absolute)"  # results.md: every run minus it, seed by seed
    config.title = "MLM: BERT vs RoFormer (small)"
    config.plot_keys = ("train/loss", "valid/loss_128")  # one panel each
    config.table_keys = ("train/loss", "valid/loss_128", "valid/accuracy_128")
    return config
