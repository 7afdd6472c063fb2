"""Issue 16's pilot: does a longer-trained encoder learn to match documents at all?

The long-document study (configs/study_long_doc.py) waits on this: fine-tuned from
docs/results.md section 1's 2,000-step RoPE encoder, its cross-encoder stays at chance on the
triplets and on the copy control (docs/studies.md, "The long-document study"). This trains the
same encoder (section 1's WikiText-2 RoPE run, seed 0, the same data, held-out set and
constant rate) 10x longer, then fine-tunes it on the two pilot tasks at 128 tokens, the
length it was trained at:

  python experiments/compare.py --config=configs/long_doc_pilot.py \\
      --workdir=runs/long_doc_pilot --raw_dir=docs/results/raw/long_doc_pilot
  D=../shared/data/wikitext-2
  for p in far copy; do
    python experiments/build_long_doc_task.py --format=wikitext --splits=sources \\
        --source=$D/train.txt,$D/valid.txt,$D/test.txt --window_tokens=128 \\
        --pairs_per_article=10 --positive=$p --out=/tmp/long_doc_pilot_$p
    T=/tmp/long_doc_pilot_$p/choices
    python experiments/finetune.py --config=configs/finetune_classification.py \\
        --workdir=runs/long_doc_pilot/finetune_$p \\
        --config.init_from=runs/long_doc_pilot/RoPE_RoFormer_/seed0 \\
        --config.task.train_file=$T/train.jsonl --config.task.valid_file=$T/valid.jsonl \\
        --config.task.test_file=$T/test.jsonl --config.task.format=multiple_choice \\
        --config.task.metric=accuracy --config.task.summary_type=first \\
        --config.task.truncation=head --config.finetune.epochs=3 \\
        --raw_dir=docs/results/raw/long_doc_pilot/finetune/$p
  done
  # The far task at the study's rate: p=far with --config.optim.learning_rate=1e-4 and
  # finetune_far_lr1e-4, finetune/far_lr1e-4 in place of finetune_$p, finetune/$p.
  python experiments/results_page.py   # docs/results.md's pilot section, from the raw files

The copy control (the right choice is A itself) must be learned by any encoder that can
compare two texts; the far task is the study's at 128 tokens, with up to 10 window pairs per
article (train 5,219 triplets). If both learn, the study's triplets and recipe are next; if the
copy control does not, the fine-tuning recipe; if only the far task fails, the objective.

Budget: 20,000 steps of 16 x 128 tokens (41 M tokens), evaluated every 1,000 steps; `:runlocal`
is a smoke run. Ran at 35a1f37 (docs/results.md section 6, from docs/results/raw/long_doc_pilot):
89 min of pre-training on 2 cores shared for about half of it, and 7-8 min per fine-tuning.
Result: the copy control is learned (test 1.000), the far task is not (best epoch the first,
test 0.549 while training accuracy climbs to 0.885; 0.566 at lr 1e-4; a bag of words on the
same pairs: 0.753).
So the objective: the study needs an encoder pre-trained to relate windows of one document.
"""

from ml_collections import ConfigDict

from configs import base, study_positions_long

ENCODER = "RoPE (RoFormer)"
STEPS = 20_000
EVAL_EVERY = 1_000


def get_config(arg=None):
    runlocal = bool(base.config_words(arg, ("runlocal",)))
    config = study_positions_long.get_config("wikitext2,runlocal" if runlocal else "wikitext2")
    config.runs = ConfigDict({ENCODER: study_positions_long.RUNS[ENCODER]}, sort_keys=False)
    config.baseline = ENCODER
    config.seeds = (0,)
    if not runlocal:
        config.experiment.train.update(
            steps=STEPS, eval_every=EVAL_EVERY, checkpoint_every=EVAL_EVERY
        )
    config.title = f"Issue 16's pilot encoder: RoPE, {STEPS:,} steps"
    return config
