"""The fine-tuning tests' task files, tiny encoder and config: one place, built once a process.

write(name, text), jsonl(name, rows)  a file in this process's folder of them; its path
vocab()                        vocab.txt: the special tokens and tiny.WORDS, a token each
hf_dir()                       a random 1-layer tiny RoFormer saved as HF does, with vocab.txt
task_files()                   classification: "cat" when the text mentions a cat, else "none"
span_and_choice_files(format)  qa or multiple choice on the word after "see"
config(**task)                 configs/finetune_classification.py on task_files(), 3 epochs
records(workdir)               metrics.jsonl without the wall-clock fields
task_models_built()            a block that collects every heads.TaskModel built inside it

The folder stays until the process exits: the test files a pytest-xdist worker runs one after
another share its encoder (a test file keeps its runs in a folder of its own).
"""

import contextlib
import json
import os
import shutil
from unittest import mock

import jax
import numpy as np
import tiny

from configs import finetune_classification
from roformer_jax import hf
from roformer_jax.nn import heads
from roformer_jax.nn.model import RoFormer
from roformer_jax.training import metrics as metrics_lib
from roformer_jax.training.finetune_config import finetune_experiment_from_dict

TMP = tiny.workdir("tiny_tasks_")
WORDS = tiny.WORDS


def write(name: str, text: str) -> str:
    path = os.path.join(TMP, name)
    with open(path, "w", encoding="utf-8") as f:
        f.write(text)
    return path


def jsonl(name: str, rows) -> str:
    return write(name, "".join(json.dumps(r) + "\n" for r in rows))


def vocab() -> str:
    path = os.path.join(TMP, "vocab.txt")
    if not os.path.exists(path):
        write("vocab.txt", "\n".join(["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", *WORDS]))
    return path


def hf_dir() -> str:
    """A random 1-layer tiny RoFormer with an MLM head, saved as HF does, with vocab.txt.

    Hidden dropout on (a resumed fine-tuning must draw its masks again), attention dropout
    off: it adds about half to what each train step takes to trace and compile
    (benchmarks/compile_step.py)."""
    path = os.path.join(TMP, "hf")
    if not os.path.exists(path):
        cfg = tiny.model_config(
            num_layers=1, vocab_size=5 + len(WORDS), hidden_dropout=0.1, attention_dropout=0.0
        )
        # jitted: one compile instead of one per operation
        variables = jax.jit(RoFormer(cfg).init)(jax.random.key(1), np.zeros((1, 4), np.int32))
        hf.save_hf_roformer(cfg, variables, path)
        shutil.copy(vocab(), path)
    return path


def task_files() -> dict:
    """label "cat" when the text mentions a cat: 48 train, 16 valid, 16 test examples."""
    rng = np.random.default_rng(0)
    files = {}
    for split, n in (("train", 48), ("valid", 16), ("test", 16)):
        rows = []
        for _ in range(n):
            text = " ".join(rng.choice(WORDS, size=rng.integers(3, 12)))
            rows.append({"text": text, "label": "cat" if "cat" in text.split() else "none"})
        files[split] = jsonl(f"{split}.jsonl", rows)
    return files


def span_and_choice_files(data_format: str) -> dict:
    """8 train and 4 valid examples: answer = the word after "see"; the right choice is
    the context's last word."""
    rng = np.random.default_rng(1)
    files = {}
    for split, n in (("train", 8), ("valid", 4)):
        rows = []
        for _ in range(n):
            words = list(rng.choice(WORDS[5:], size=6))
            context = " ".join(words[:3] + ["see"] + words[3:])
            if data_format == "qa":
                start = context.index("see ") + 4
                rows.append(
                    {
                        "question": "see what",
                        "context": context,
                        "answers": {"text": [words[3]], "answer_start": [start]},
                    }
                )
            else:
                rows.append({"context": context, "choices": [words[0], words[-1]], "label": 1})
        files[split] = jsonl(f"{data_format}_{split}.jsonl", rows)
    return files


def config(**task):
    d = finetune_classification.get_config().to_dict()
    files = {f"{split}_file": path for split, path in task_files().items()}
    d["task"].update({**files, "max_length": 16, **task})
    d["finetune"].update(epochs=3, batch_size=8, log_every=2)
    d["optim"].update(learning_rate=1e-3, warmup_steps=2)
    d["init_from"] = hf_dir()
    return finetune_experiment_from_dict(d)


def records(workdir):
    return [
        {k: v for k, v in r.items() if k not in metrics_lib.TIMING_KEYS}
        for r in metrics_lib.read_metrics(workdir)
    ]


@contextlib.contextmanager
def task_models_built():
    """Yields a list that gets every heads.TaskModel built inside the block."""
    built = []

    class TaskModel(heads.TaskModel):
        def __post_init__(self):
            built.append(self)
            super().__post_init__()

    with mock.patch.object(heads, "TaskModel", TaskModel):
        yield built
