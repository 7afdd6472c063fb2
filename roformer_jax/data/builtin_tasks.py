"""Built-in fine-tuning tasks, made from CPython's stdlib docstrings (no download).

    paths = BUILTIN_TASKS["word_kinds"](directory)   # {"train", "valid", "test"}: .jsonl files

Each writer draws its examples from `corpora.stdlib_sourced_documents` (a fixed order),
shuffles them with `seed` and writes 80 / 10 / 10 to {train,valid,test}.jsonl in the columns
of one task kind (training/task_kinds.py); deterministic given the seed and the Python
version. `examples` takes the first that many documents that qualify, so a small task walks
only the first few stdlib files.

  task             kind                  what is learned
  next_sentence    classification        BERT's next-sentence prediction
  source_package   classification        a docstring's stdlib package, from its words
  word_kinds       token_classification  each word's kind, from its characters
  next_word        qa                    the span that follows a word the question names
  continuation     multiple_choice       a docstring's true continuation among others'
"""

from __future__ import annotations

import collections
import itertools
import json
import keyword
import os
import re

import numpy as np

from roformer_jax.data import corpora

SPLITS = ("train", "valid", "test")


def _sentences(doc: str) -> list[str]:
    """A docstring's sentences of more than 20 characters, whitespace collapsed."""
    return [s for s in re.split(r"(?<=[.!?])\s+", " ".join(doc.split())) if len(s) > 20]


def _at_least(n: int, items: list) -> list | None:
    return items if len(items) >= n else None


def _documents(qualifies, examples: int) -> list:
    """What `qualifies(doc)` makes of the first `examples` stdlib docstrings it does not
    turn down (returns None for)."""
    kept = (qualifies(doc) for doc in corpora.stdlib_documents())
    return list(itertools.islice((d for d in kept if d is not None), examples))


def write_next_sentence_task(directory: str, *, examples: int = 2400, seed: int = 0) -> dict:
    """Writes {train,valid,test}.jsonl of a task made from the builtin corpus; returns paths.

    Is sentence B the continuation of sentence A? Half the pairs are two consecutive
    sentences of one stdlib docstring (label "next"), half take B from another docstring
    (label "random"): BERT's next-sentence prediction, on data every machine has. Split
    80 / 10 / 10; deterministic given `seed`.
    """
    docs = _documents(lambda doc: _at_least(2, _sentences(doc)), examples)
    rng = np.random.default_rng(seed)
    rows = []
    for i, doc in enumerate(docs):
        k = int(rng.integers(len(doc) - 1))
        if rng.random() < 0.5:
            rows.append({"text": doc[k], "text_pair": doc[k + 1], "label": "next"})
        else:
            other = docs[(i + 1 + int(rng.integers(len(docs) - 1))) % len(docs)]
            rows.append(
                {
                    "text": doc[k],
                    "text_pair": other[int(rng.integers(len(other)))],
                    "label": "random",
                }
            )
    return _write_splits(directory, rows, rng)


def write_source_package_task(
    directory: str, *, packages=("asyncio", "email", "logging", "xml"), seed: int = 0
) -> dict:
    """Writes {train,valid,test}.jsonl: which stdlib package a docstring comes from.

    Single texts, one label per package (each has 200-400 docstrings on CPython 3.11): a
    topic task, learnable from the words alone. Split 80 / 10 / 10; deterministic given
    `seed` and the Python version.
    """
    rows = [
        {"text": " ".join(doc.split()), "label": path.split(os.sep)[0]}
        for path, doc in corpora.stdlib_sourced_documents()
        if path.split(os.sep)[0] in packages
    ]
    return _write_splits(directory, rows, np.random.default_rng(seed))


def word_kind(word: str) -> str:
    """The tag of a whitespace-separated word in `word_kinds`, the first that applies:
    "keyword" (Python's, e.g. None, for, in), "identifier" (a Python name with an
    underscore: snake_case, _private, __dunder__), "capitalised", "number" (holds a digit),
    else "word"."""
    if keyword.iskeyword(word):
        return "keyword"
    if word.isidentifier() and "_" in word:
        return "identifier"
    if word[:1].isupper():
        return "capitalised"
    if any(c.isdigit() for c in word):
        return "number"
    return "word"


def write_word_kinds_task(
    directory: str, *, examples: int = 2000, words: int = 24, seed: int = 0
) -> dict:
    """Writes {train,valid,test}.jsonl for token classification: the first `words` words of
    a docstring (8 or more), each tagged by `word_kind`.

    Learnable: a tag is a function of the word's own characters (case, digits, underscores;
    a keyword is one of 35 words, most of them frequent in docstrings), so a model that reads
    each word's tokens can tag it; the context is no help and no hindrance.
    """
    docs = _documents(lambda doc: _at_least(8, doc.split()[:words]), examples)
    rows = [{"words": ws, "tags": [word_kind(w) for w in ws]} for ws in docs]
    return _write_splits(directory, rows, np.random.default_rng(seed))


def write_next_word_task(
    directory: str, *, examples: int = 2000, words: int = 16, seed: int = 0
) -> dict:
    """Writes {train,valid,test}.jsonl for extractive QA: "What follows <w>?" over the first
    `words` words of a docstring, for a word w that occurs there once (not the last);
    the answer is the word after it, a span of the context (SQuAD's columns).

    Learnable: find the question's word in the context and point one word later, a
    copy-and-shift that attention learns (an induction head), and that relative positions
    (RoPE) make the same wherever the word is.
    """
    rng = np.random.default_rng(seed)

    def question(doc: str):
        ws = doc.split()[:words]
        counts = collections.Counter(ws)
        once = [k for k in range(len(ws) - 1) if counts[ws[k]] == 1]
        if len(ws) < 4 or not once:
            return None
        k = once[int(rng.integers(len(once)))]
        start = len(" ".join(ws[: k + 1])) + 1  # the character after w and its space
        return {
            "question": f"What follows {ws[k]}?",
            "context": " ".join(ws),
            "answers": {"text": [ws[k + 1]], "answer_start": [start]},
        }

    return _write_splits(directory, _documents(question, examples), rng)


def write_continuation_task(
    directory: str, *, examples: int = 2000, choices: int = 4, words: int = 12, seed: int = 0
) -> dict:
    """Writes {train,valid,test}.jsonl for multiple choice: the context is the first `words`
    words of a docstring of 2·words or more; the choices are its next `words` words and
    those of `choices - 1` other docstrings, in random order; the label indexes the true one.

    Learnable from what a docstring repeats (its names and its topic) and from the grammar
    that runs across the cut; a distractor shares neither but by chance.
    """
    docs = _documents(lambda doc: _at_least(2 * words, doc.split()[: 2 * words]), examples)
    rng = np.random.default_rng(seed)
    rows = []
    for i, ws in enumerate(docs):
        others = (i + 1 + rng.choice(len(docs) - 1, choices - 1, replace=False)) % len(docs)
        texts = [" ".join(ws[words:])] + [" ".join(docs[j][words:]) for j in others]
        order = rng.permutation(choices)  # texts[order[c]] is choice c
        rows.append(
            {
                "context": " ".join(ws[:words]),
                "choices": [texts[j] for j in order],
                "label": int(np.argmin(order)),
            }
        )
    return _write_splits(directory, rows, rng)


def _write_splits(directory: str, rows: list[dict], rng) -> dict:
    """Shuffles `rows` and writes 80 / 10 / 10 of them to {train,valid,test}.jsonl."""
    paths = split_paths(directory)
    rows = [rows[i] for i in rng.permutation(len(rows))]
    cut = [int(len(rows) * 0.8), int(len(rows) * 0.9)]
    os.makedirs(directory, exist_ok=True)
    for path, part in zip(paths.values(), np.split(np.array(rows, object), cut)):
        with open(path + ".tmp", "w", encoding="utf-8") as f:
            f.writelines(json.dumps(r) + "\n" for r in part)
        os.replace(path + ".tmp", path)
    return paths


def split_paths(directory: str) -> dict[str, str]:
    """{split: directory/<split>.jsonl}: where a builtin task's files go."""
    return {split: os.path.join(directory, f"{split}.jsonl") for split in SPLITS}


BUILTIN_TASKS = {
    "next_sentence": write_next_sentence_task,
    "source_package": write_source_package_task,
    "word_kinds": write_word_kinds_task,
    "next_word": write_next_word_task,
    "continuation": write_continuation_task,
}
