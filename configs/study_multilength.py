"""Study: RoFormer's multi-length pre-training (the blog's Table 4) against one length.

  python experiments/length_study.py --config=configs/study_multilength.py:wikitext2 \\
      --workdir=runs/multilength_blog_wikitext2 \\
      --raw_dir=docs/results/raw/multilength_blog_wikitext2

The blog pre-trained RoFormer in six stages (max length, batch, steps): (512, 256, 200k),
(1536, 256, 12.5k), (256, 256, 120k), (128, 512, 80k), (1536, 256, 10k), (512, 512, 30k).
Here the same six stages in the same order, with the same shares of the steps (44, 3, 27,
18, 2, 7%) and the same tokens-per-step ratios (2 : 6 : 1 : 1 : 6 : 4), scaled to this
machine by one factor each: lengths / 2, batches / 16, steps / 250, so that the shortest
stage (the fifth) gets 40 steps: 1,810 steps in all, 7,004,160 tokens. The control trains
at one length, 256 (the blog's main length 512, / 2), on the same token budget (1,710 steps
of 16 x 256). The encoder and optimizer are configs/studies.py's (warm-up 40 steps, then a
linear decay to 0 over the run), on a corpus of long documents (studies.LONG_DOCUMENTS);
both are read at 128 to 2048 tokens on the same held-out targets (configs/study_length.py's
evaluation), and the multi-length run gets the blog's per-stage table of training loss and
accuracy (the blog's claim: the stages of longer rows reach higher MLM accuracy).

`:wikitext2,controls` (issue 56, item 3): the schedule's advantage at 2048 is confounded by
row length (its stages reach 768 tokens, the control's rows 256). It trains the schedule again
beside a control of one length 768 on the same tokens (570 steps of 16 x 768, one stage, so
that both are validated at 256 as the schedule is), 3 seeds, both evaluated on the held-out
set every 10 steps: every stage ends on an evaluation, so the per-stage table reads each
stage's model on held-out text at one length (its held-out columns) instead of its training
accuracy, which mixes the stage's length with how far training has come.

  python experiments/length_study.py --config=configs/study_multilength.py:wikitext2,controls \\
      --workdir=runs/multilength_controls \\
      --raw_dir=docs/results/raw/multilength_controls_wikitext2

Budget: 2 runs x 3 seeds of 7.0 M tokens, about 20 min each on 2 quiet cores (the blog
schedule's wall time, section 3) plus 181 evaluations of 4 x 16 rows a run: about 2.5 h.

Issue 31: stage 5 was once copied as (1536, 512, 10k), a tokens-per-step ratio of 12, and
the whole schedule was 200 steps (4 steps for stage 5); docs/results.md's section on this
study says which runs had which. Budget: 2 runs x 3 seeds of 7.0 M tokens, about 2 h on 2
quiet cores by the length study's training rate (not yet measured at these lengths).
"""

from ml_collections import ConfigDict

from configs import studies, study_length

# (steps, seq_len, batch_size) in the blog's order.
STAGES = (
    (800, 256, 16),
    (50, 768, 16),
    (480, 128, 16),
    (320, 64, 32),
    (40, 768, 16),
    (120, 256, 32),
)
TOKENS = sum(steps * length * batch for steps, length, batch in STAGES)  # 7,004,160


CONTROL_768 = (round(TOKENS / (16 * 768)), 768, 16)  # 570 steps: the schedule's tokens
STAGE_EVAL_EVERY = 10  # divides every stage's end (800, 850, 1330, 1650, 1690, 1810)


def get_config(arg=None):
    data, rest = studies.long_documents(arg, also=("controls",))
    controls = "controls" in (arg or "").split(",")
    config = studies.get_config(rest)
    config.experiment.data.update(data, valid_lengths=(), seq_len=256)
    config.experiment.train.log_every = 1  # the per-stage table reads each stage's last steps
    config.runs = ConfigDict(  # in the order tables and figures show them
        {
            "multi-length": {"train": {"steps": sum(s[0] for s in STAGES), "stages": STAGES}},
            "256 only": {"train": {"steps": round(TOKENS / (16 * 256)), "batch_size": 16}},
        },
        sort_keys=False,
    )
    config.baseline = "256 only"
    config.title = "MLM: RoFormer's six-stage multi-length schedule against one length"
    config.plot_keys = ("train/loss", "valid/loss_256")
    config.table_keys = ("train/loss", "valid/loss_256", "valid/accuracy_256")
    config.eval_lengths = study_length.EVAL_LENGTHS
    config.eval_tokens = 68 * (study_length.EVAL_LENGTHS[-1] - 2)
    config.eval_baselines = ("256 only",)
    config.evaluations = ConfigDict(
        {"multi-length": {"run": "multi-length"}, "256 only": {"run": "256 only"}}, sort_keys=False
    )
    return _controls(config) if controls else config


def _controls(config: ConfigDict) -> ConfigDict:
    """`:controls` (module doc): the schedule against 768 tokens only, evaluated every 10 steps."""
    config.experiment.train.eval_every = STAGE_EVAL_EVERY
    config.runs = ConfigDict(
        {
            "multi-length": config.runs["multi-length"].to_dict(),
            "768 only": {"train": {"steps": CONTROL_768[0], "stages": (CONTROL_768,)}},
        },
        sort_keys=False,
    )
    config.baseline = "768 only"
    config.eval_baselines = ("768 only",)
    config.evaluations = ConfigDict({name: {"run": name} for name in config.runs}, sort_keys=False)
    config.title = "MLM: the six-stage schedule against one length of its longest rows, 768"
    return config
