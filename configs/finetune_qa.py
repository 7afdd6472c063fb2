"""Fine-tunes extractive question answering on a builtin task (offline, no download).

"What follows <w>?" over the first 16 words of a stdlib docstring, w a word that occurs
there once; the answer is the next word, a span of the context (SQuAD's columns).
2,000 docstrings (roformer_jax/data/builtin_tasks.py, `next_word`), 80/10/10 into
train/valid/test under <workdir>/data/next_word.

  python experiments/finetune.py --config=configs/finetune_qa.py \
      --workdir=/tmp/ft_qa --config.init_from=/tmp/tiny

Without --config.init_from the encoder (tiny, on bytes) starts from random weights. Your own
data: --config.task.train_file=train.jsonl --config.task.valid_file=valid.jsonl (columns
question, context, answers; see data/tasks.py). `:runlocal` makes it a one-epoch smoke
test. Expected result, from random weights (no
--config.init_from): test exact match 0.050, F1 0.171, about chance (1/16 for a word of 16):
finding a word's successor needs an encoder that relates tokens; start from a pre-trained one.
"""

from configs import base


def get_config(arg=None):
    # max_length 160: question and 16 words of ~6 bytes: no context is cut
    config = base.get_tiny_finetune_config(arg, epochs=5, max_length=160, runlocal_max_length=96)
    config.task.train_file = "builtin:next_word"
    config.task.format = "qa"
    config.task.metric = "f1"  # SQuAD's token F1: partial credit for a partly right span
    return config
