"""Fine-tunes a token classifier on a builtin task (offline, no download).

What kind is each word of a docstring: a Python keyword, an identifier with an underscore,
capitalised, a number, or another word? The first 24 words of 2,000 stdlib docstrings
(roformer_jax/data/builtin_tasks.py, `word_kinds`), 80/10/10 into train/valid/test under
<workdir>/data/word_kinds; a word's tag is read at its first token.

  python experiments/finetune.py --config=configs/finetune_token_classification.py \
      --workdir=/tmp/ft_tokens --config.init_from=/tmp/tiny

Without --config.init_from the encoder (tiny, on bytes) starts from random weights. Your own
data: --config.task.train_file=train.jsonl --config.task.valid_file=valid.jsonl (columns
words, tags: lists of equal length; see data/tasks.py). `:runlocal` makes it a one-epoch
smoke test. Expected result, from random
weights (no --config.init_from): test accuracy 0.941, macro F1 0.738 (the majority tag, "word",
is about 0.6 of the words).
"""

from configs import base


def get_config(arg=None):
    # max_length 192: 24 words of ~6 bytes and their spaces, [CLS], [SEP]
    config = base.get_tiny_finetune_config(arg, epochs=5, max_length=192, runlocal_max_length=64)
    config.task.train_file = "builtin:word_kinds"
    config.task.format = "token_classification"
    config.task.metric = "macro_f1"  # the tags are unbalanced: "word" is most of them
    return config
