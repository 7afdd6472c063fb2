"""Task kinds: everything fine-tuning knows of a kind of task, as one record each.

    kind = TASK_KINDS["token_classification"]
    examples = read_examples("train.jsonl", "token_classification")
    rows = kind.encode(examples, tok, kind.label_list(examples), task_config, "train.jsonl")

A kind is its head (a key of heads.HEADS, HF's RoFormerFor<Head>), its data format (the
columns a file must have, their check, the encoder into rows: data/tasks.py), its targets
and loss, and its metrics. Adding a kind is one TaskKind plus one entry of TASK_KINDS;
fine-tuning, its config and experiments/finetune.py read everything else from here.

Glossary of shapes: B batch, C choices, L sequence length, K labels, N examples.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import jax
import jax.numpy as jnp
import numpy as np
import optax

from roformer_jax.data import tasks
from roformer_jax.training import task_metrics as tm
from roformer_jax.training.step import target_scores


@dataclasses.dataclass(frozen=True)
class TaskKind:
    head: str  # a key of heads.HEADS
    columns: tuple[str, ...]  # the columns every example of a task file must have
    check: Callable | None  # (row, path, where) -> None: checks (normalizes) a row's columns
    encode: Callable  # (examples, tok, labels, TaskConfig, path) -> {name: array [N, ...]}
    targets: tuple[str, ...]  # the row arrays the loss reads
    sums: Callable  # (head outputs, batch) -> {"loss", "correct", "count"}: sums over B
    scores: Callable  # (outputs, rows, examples, labels, tok) -> {metric: value}
    metrics: tuple[str, ...]  # what `scores` returns; TaskConfig.metric picks the best epoch
    # (training examples) -> label names in id order, the head's K; None: no names (K unused)
    label_list: Callable | None = None
    # (outputs) -> one predicted label per example, for predictions.json (a paired test of
    # two runs on the same examples); None: the kind has no single label per example
    predictions: Callable | None = None


def apply_model(model, params, batch, **kwargs):
    """The TaskModel's head outputs on a batch's inputs [B, (C,) L]."""
    return model.apply(
        {"params": params},
        batch["input_ids"],
        attention_mask=batch["attention_mask"],
        token_type_ids=batch["token_type_ids"],
        **kwargs,
    )


def read_examples(path: str, kind: str) -> list[dict]:
    """The examples of a task file, checked for the columns of TASK_KINDS[kind]."""
    if kind not in TASK_KINDS:
        raise ValueError(f"unknown task kind {kind!r}; expected one of {sorted(TASK_KINDS)}")
    return tasks.read_examples(path, TASK_KINDS[kind].columns, TASK_KINDS[kind].check)


# ---------------------------------------------------------------- losses (sums over B)


def _label_sums(outputs, batch) -> dict[str, jax.Array]:
    """One label per example: logits [B, K] (or [B, C], one score per choice)."""
    xent, correct = target_scores(outputs.logits, batch["label"])  # [B]
    return {
        "loss": jnp.sum(xent),
        "correct": jnp.sum(correct),
        "count": jnp.asarray(xent.shape[0], jnp.float32),
    }


def _tag_sums(outputs, batch) -> dict[str, jax.Array]:
    """One label per word: logits [B, L, K] at each word's first token, the tokens
    tasks.NO_TAG marks left out; the loss is a mean over the words, as HF's."""
    tagged = batch["tags"] != tasks.NO_TAG  # [B, L]
    xent, correct = target_scores(outputs.logits, jnp.where(tagged, batch["tags"], 0))
    return {
        "loss": jnp.sum(jnp.where(tagged, xent, 0.0)),
        "correct": jnp.sum(jnp.where(tagged, correct, 0.0)),
        "count": jnp.sum(tagged).astype(jnp.float32),
    }


def _span_sums(outputs, batch) -> dict[str, jax.Array]:
    """The span's start and end logits [B, L]; right when both ends are."""
    xent = optax.softmax_cross_entropy_with_integer_labels
    # HF's loss: the mean of the start and end cross-entropies.
    loss = (xent(outputs.start_logits, batch["start"]) + xent(outputs.end_logits, batch["end"])) / 2
    correct = (jnp.argmax(outputs.start_logits, -1) == batch["start"]) & (
        jnp.argmax(outputs.end_logits, -1) == batch["end"]
    )
    return {
        "loss": jnp.sum(loss),
        "correct": jnp.sum(correct).astype(jnp.float32),
        "count": jnp.asarray(loss.shape[0], jnp.float32),
    }


# ---------------------------------------------------------------- metrics (on the host)


def _argmax(outputs) -> np.ndarray:
    return np.argmax(outputs.logits, -1)


def _class_scores(predictions, targets, num_labels: int) -> dict[str, float]:
    return {
        "accuracy": tm.accuracy(predictions, targets),
        "macro_f1": tm.macro_f1(predictions, targets, num_labels),
    }


def _classification_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    return _class_scores(_argmax(outputs), rows["label"], len(labels))


def _tag_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    """Over the words (their first tokens) that the rows kept."""
    tagged = rows["tags"] != tasks.NO_TAG  # [N, L]
    return _class_scores(_argmax(outputs)[tagged], rows["tags"][tagged], len(labels))


def _choice_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    return {"accuracy": tm.accuracy(_argmax(outputs), rows["label"])}


def _span_scores(outputs, rows, examples, labels, tok) -> dict[str, float]:
    """SQuAD's exact match and F1 of the best span's text inside each context."""
    texts = []
    for i in range(len(examples)):
        last = int(rows["attention_mask"][i].sum()) - 2  # the last context token
        s, e = tm.best_span(
            outputs.start_logits[i], outputs.end_logits[i], int(rows["context_start"][i]), last
        )
        texts.append(tok.decode(rows["input_ids"][i, s : e + 1]))
    references = [e["answers"]["text"] for e in examples]
    return {"exact_match": tm.exact_match(texts, references), "f1": tm.token_f1(texts, references)}


# ---------------------------------------------------------------- the kinds

TASK_KINDS: dict[str, TaskKind] = {
    # text (text_pair) -> label: one label per text or pair of texts
    "classification": TaskKind(
        head="sequence_classification",
        columns=("text", "label"),  # text_pair is optional
        check=None,
        encode=lambda ex, tok, labels, t, path: tasks.encode_classification(
            ex, tok, labels, max_length=t.max_length, truncation=t.truncation, path=path
        ),
        targets=("label",),
        sums=_label_sums,
        scores=_classification_scores,
        metrics=("accuracy", "macro_f1"),
        label_list=tasks.label_list,
        predictions=_argmax,
    ),
    # words -> tags: one label per word (named entities, parts of speech)
    "token_classification": TaskKind(
        head="token_classification",
        columns=("words", "tags"),
        check=tasks.check_tags,
        encode=lambda ex, tok, labels, t, path: tasks.encode_tags(
            ex, tok, labels, max_length=t.max_length, path=path
        ),
        targets=("tags",),
        sums=_tag_sums,
        scores=_tag_scores,
        metrics=("accuracy", "macro_f1"),
        label_list=tasks.tag_list,
    ),
    # question, context -> the answer's span in the context (SQuAD)
    "qa": TaskKind(
        head="question_answering",
        columns=("question", "context", "answers"),
        check=tasks.check_answers,
        encode=lambda ex, tok, labels, t, path: tasks.encode_qa(
            ex, tok, max_length=t.max_length, path=path
        ),
        targets=("start", "end"),
        sums=_span_sums,
        scores=_span_scores,
        metrics=("exact_match", "f1"),
    ),
    # context, choices -> the right choice: classification's loss over the logits [B, C]
    "multiple_choice": TaskKind(
        head="multiple_choice",
        columns=("context", "choices", "label"),
        check=tasks.check_choices,
        encode=lambda ex, tok, labels, t, path: tasks.encode_multiple_choice(
            ex, tok, max_length=t.max_length, truncation=t.truncation, path=path
        ),
        targets=("label",),
        sums=_label_sums,
        scores=_choice_scores,
        metrics=("accuracy",),
        predictions=_argmax,
    ),
}
