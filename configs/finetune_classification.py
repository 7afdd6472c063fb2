"""Fine-tunes a sequence classifier on a builtin task (offline, no download).

Which standard-library package (asyncio, email, logging or xml) does a docstring come from?
1,147 docstrings on CPython 3.11 (roformer_jax/data/tasks.py), 80/10/10 into train/valid/test
under <workdir>/data/source_package. `--config.task.train_file=builtin:next_sentence` is
BERT's next-sentence task on the same corpus (sentence pairs; a tiny model barely learns it).

After a pre-training run in /tmp/tiny (the command in configs/tiny.py):
  python experiments/finetune.py --config=configs/finetune_classification.py \
      --workdir=/tmp/ft --config.init_from=/tmp/tiny

Without --config.init_from the encoder (tiny, on bytes) starts from random weights. Your own
data: --config.task.train_file=train.jsonl --config.task.valid_file=valid.jsonl (columns
text, text_pair, label; see data/tasks.py). `:runlocal` makes it a one-epoch smoke test.

Expect (2 busy cores, ~100 s): from a 600-step tiny run, best valid accuracy 0.54 (macro F1
0.43) at epoch 9, test 0.57 (0.47); from random weights 0.56 (0.34), test 0.47 (0.31). The
majority class is 0.34.
"""

from configs import base


def get_config(arg=None):
    config = base.get_tiny_finetune_config(arg, epochs=10, max_length=128, runlocal_max_length=64)
    config.task.truncation = "head+tail"
    return config
