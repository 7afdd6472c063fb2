"""Fine-tunes a sequence classifier on the builtin next-sentence task (offline, no download).

Is sentence B the continuation of sentence A? 2,400 pairs from the Python standard library's
docstrings (roformer_jax/data/tasks.py), 80/10/10 into train/valid/test under <workdir>/data.

After a pre-training run in /tmp/tiny (the command in configs/tiny.py):
  python experiments/finetune.py --config=configs/finetune_classification.py \
      --workdir=/tmp/ft --config.init_from=/tmp/tiny

Without --config.init_from the encoder (tiny, on bytes) starts from random weights. Your own
data: --config.task.train_file=train.jsonl --config.task.valid_file=valid.jsonl (columns
text, text_pair, label; see data/tasks.py). `:runlocal` makes it a one-epoch smoke test.
"""

from configs import base


def get_config(arg=None):
    config = base.get_finetune_base_config()
    config.task.max_length = 128
    config.task.truncation = "head+tail"
    config.finetune.epochs = 3
    config.finetune.batch_size = 32
    config.optim.learning_rate = 1e-4
    config.optim.warmup_steps = 10
    if arg == "runlocal":
        config.finetune.epochs = 1
        config.task.max_length = 64
    elif arg:
        raise ValueError(f"unknown config argument {arg!r}; the only one is 'runlocal'")
    return config
