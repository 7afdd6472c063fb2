"""Study: the blog's long-document claim (CAIL2019-SCM, 512 → 1024 tokens) on the offline
triplet task of data/long_doc_task.py (issue 16, item 4).

  python experiments/long_doc_study.py --config=configs/study_long_doc.py \\
      --workdir=runs/long_doc --raw_dir=docs/results/raw/long_doc_wikitext2

Pre-trains three encoders of configs/studies.py's size (4 layers x 128, 2 heads of 64) on
WikiText-2's train.txt for `pretrain_steps`: RoFormer in the blog's six multi-length stages
at the blog's own lengths (512, 1536, 256, 128, 1536, 512; configs/study_multilength.py's step
shares and tokens-per-step ratios), RoFormer in the same stages capped at 512 tokens (batches
grown so each stage keeps its tokens per step), and BERT (learned table of 512) in the capped
stages. Then fine-tunes each, `finetune_seeds` times, on the WikiText-2 triplets with windows of
256 to 760 tokens, drawn per article (512 reads 254-255 tokens of each side, so from a third to
all of B; 1024 two thirds of B or more; 1536 every pair whole: see `config.task`) at every
length of `lengths` it can read, plus the control at 512 with the head and the tail of each
side. BERT's longer cells are "n/a".
Also: accuracy by the fraction of B kept at 512, a bag-of-words logistic baseline, paired
differences with 95% t-intervals and exact McNemar tests (roformer_jax/long_doc_report.py).

Every number here is a setting, not a tuned value. `:runlocal` is a smoke run at a quarter
of the lengths (12 pre-training steps, 1 epoch, 1 seed; estimated 15-20 min on 2 shared
cores, not timed). Expect, as an estimate from measured step times (docs/studies.md,
"The long-document study"): about 18 h on 2 cores shared with another job (5.5 h of it
pre-training, which `--config.pretrain_steps` scales), about 7 h on 2 idle ones.
No result yet: the study has not been run. Measured before it (docs/studies.md, "The
long-document study"): the bag-of-words baseline is right on 49 of 51 test triplets from what
512 tokens read (0.961; 0.980 on whole windows), so these triplets test lexical matching, not
length; and a pilot fine-tuning with this recipe stays at chance (validation 0.509, test
0.627). And an encoder trained 10x longer learns the copy control but not the far task at 128 tokens
(configs/long_doc_pilot.py; docs/results.md section 6), and MLM with same-document pairs does
no better on it (configs/long_doc_pairs.py: test 0.583 against 0.566, a bag of words 0.753).
An encoder that learns to relate windows of one document, and a task a bag of words does not
solve, come before running this.
"""

from ml_collections import ConfigDict

from configs import base, studies, study_multilength

# study_multilength's stages are the blog's at half its lengths: twice them is the blog's.
MULTI_LENGTH = tuple((s, 2 * n, b) for s, n, b in study_multilength.STAGES)
# The same stages with no length past 512: a longer stage reads 512 with a batch grown by the
# same factor, so every stage keeps its tokens per step and the run its token budget.
UP_TO_512 = tuple((s, min(n, 512), b * n // min(n, 512)) for s, n, b in MULTI_LENGTH)
WIKITEXT2 = "../shared/data/wikitext-2"


def get_config(arg=None):
    config = studies.get_config()
    experiment = config.experiment
    experiment.data.update(
        source=f"{WIKITEXT2}/train.txt", doc_separator="article", seq_len=512, valid_lengths=()
    )  # validation at 512, which every encoder reads
    experiment.train.update(log_every=10, eval_every=500, checkpoint_every=500)
    config.runs = ConfigDict(  # in the order the tables show them
        {
            "RoFormer multi-length": {"model": {"position": "rope"}},
            "RoFormer 512 only": {"model": {"position": "rope"}},
            "BERT": {"model": {"position": "learned", "max_len": 512}},
        },
        sort_keys=False,
    )
    del config["baseline"]  # compare.py's run; these encoders are paired by encoder_pairs
    config.schedules = {"multi-length": MULTI_LENGTH, "512 only": UP_TO_512}  # (steps, len, batch)
    config.schedule_of = {  # each run's schedule, rescaled to pretrain_steps
        "RoFormer multi-length": "multi-length",
        "RoFormer 512 only": "512 only",
        "BERT": "512 only",
    }
    config.pretrain_steps = studies.LONG_STEPS  # every encoder's optimizer updates
    config.seeds = (0,)  # pre-training seeds; fine-tuning seed i starts from seeds[i % len]
    config.finetune_seeds = (0, 1, 2)
    config.lengths = (512, 1024, 1536)  # fine-tuning max lengths, [CLS] and [SEP]s included
    config.control_truncation = "head+tail"  # the control at the shortest length
    # Paired across encoders at every length both read (first minus second).
    config.encoder_pairs = (
        ("RoFormer multi-length", "RoFormer 512 only"),
        ("RoFormer 512 only", "BERT"),
    )
    config.survival_edges = (0.0, 0.25, 0.5, 0.75, 1.0)  # bins of the fraction of B kept
    config.task = _task()
    # Fine-tuning (training/finetune_config.py); the task's files, format, max length and
    # truncation are set per cell by the study.
    config.finetune = base.get_finetune_base_config()
    config.finetune.finetune.update(epochs=3, batch_size=8, log_every=10)
    # Each pair scored at [CLS], as the blog's script does. HF's default for multiple choice
    # reads the last position, which at 1024 and 1536 is a padding token in most rows (the
    # windows are shorter), its state set by how much text the row holds: a confound of length.
    config.finetune.task.summary_type = "first"
    config.finetune.optim.update(learning_rate=1e-4, warmup_steps=30)
    config.title = "Long-document triplets: accuracy by maximum length and pre-training"
    if base.config_words(arg, ("runlocal",)):
        _runlocal(config)
    return config


def _task() -> ConfigDict:
    """The triplets: long_doc_task.build_from_sources's arguments (splits: "sources" puts
    source file i in split i, so the valid and test articles were never pre-trained on)."""
    # Window budgets: each article's A and B drawn uniformly from [256, 760] tokens, so that
    # the fraction of B kept at 512 varies across triplets and the survival bins hold more than
    # one triplet each (fixed 760-token windows kept 0.336 of every B: one bin held all).
    # Why this range, by tasks.pair_budgets (the longer side gives up tokens first; room =
    # length - 3 for [CLS], [SEP], [SEP]):
    # - 1536: room 1533 >= 2 x 760, so every pair is read whole (max must stay <= 766; 760
    #   leaves a few tokens for the encoder's tokenizer, trained on train.txt only).
    # - 512: room 509. Both sides hold >= 256 > 509 / 2 tokens, so each is cut to 254 or 255
    #   whatever the other's length: A is read equally far in every triplet, and the fraction
    #   of B kept is ~254.5 / len(B), from 0.33 (B of 760) to ~1 (B of 256), a function of B's
    #   length alone. With lengths uniform in [256, 760]: about 1/2 of triplets in [.25, .5)
    #   (B > 509), 1/3 in [.5, .75), 1/6 in [.75, 1]; [0, .25) stays empty, as it must while
    #   1536 reads all (it needs B > 1018). Built: test 21 / 20 / 10 of 51 triplets.
    # - 1024: room 1021; B keeps min(1, max(1021 - len(A), 510.5) / len(B)), 0.67 to 1, and
    #   about 2/3 of the pairs are read whole (3/4 of test).
    # A shorter B is also less text: the 1536 cells, which read every B whole, binned the same
    # way, show what B's length alone does, so a bin's 512 - 1536 gap is truncation's.
    # A minimum below 255 would let a short A hand its room to B and mix A's cut into the bins.
    return ConfigDict(
        dict(
            sources=tuple(f"{WIKITEXT2}/{s}.txt" for s in ("train", "valid", "test")),
            format="wikitext",
            splits="sources",
            min_window_tokens=256,
            window_tokens=760,
            tokenizer="wordpiece",
            seed=0,
        )
    )


def _runlocal(config: ConfigDict) -> None:
    """The smoke run: a quarter of the lengths, 12 pre-training steps, 1 epoch, 1 seed."""
    experiment = config.experiment
    config.pretrain_steps = 12
    config.schedules = {
        k: tuple((s, n // 4, b) for s, n, b in v) for k, v in config.schedules.items()
    }
    experiment.data.update(seq_len=128, max_chars=400_000)
    experiment.train.eval_batches = 2
    config.runs.BERT.model.max_len = 128
    config.lengths = (128, 256, 384)
    config.task.update(min_window_tokens=64, window_tokens=190)  # the same reasoning at 1/4
    config.finetune_seeds = (0,)
    config.finetune.finetune.epochs = 1
