"""Fine-tunes multiple choice on a builtin task (offline, no download).

Which of 4 texts continues a docstring? The context is a stdlib docstring's first 12
words; the choices its next 12 and those of 3 other docstrings. 2,000 docstrings
(roformer_jax/data/builtin_tasks.py, `continuation`), 80/10/10 into train/valid/test under
<workdir>/data/continuation. Chance is 0.25.

  python experiments/finetune.py --config=configs/finetune_multiple_choice.py \
      --workdir=/tmp/ft_choice --config.init_from=/tmp/tiny

Without --config.init_from the encoder (tiny, on bytes) starts from random weights. Your own
data: --config.task.train_file=train.jsonl --config.task.valid_file=valid.jsonl (columns
context, choices, label; see data/tasks.py). `:runlocal` makes it a one-epoch smoke test.
Expected result, from random weights (no
--config.init_from): test accuracy 0.220, valid 0.255, chance (1/4): a random encoder does not
learn to compare a context with its choices in 5 epochs; start from a pre-trained one.
"""

from configs import base


def get_config(arg=None):
    # max_length 192: [CLS] 12 words [SEP] 12 words [SEP], ~6 bytes a word
    config = base.get_tiny_finetune_config(arg, epochs=5, max_length=192, runlocal_max_length=96)
    config.task.train_file = "builtin:continuation"
    config.task.format = "multiple_choice"
    config.task.metric = "accuracy"
    config.task.truncation = "head"
    # [CLS]: a padded row's last position is padding, whose state varies with the row's
    # length (heads.MultipleChoice)
    config.task.summary_type = "first"
    return config
