"""Fine-tuning data: task files read, checked and encoded into fixed-length rows.

    examples = read_examples("train.jsonl", ("text", "label"))    # list of dicts
    labels = label_list(examples)                                 # sorted label names
    rows = encode_classification(examples, tok, labels, max_length=128, truncation="head+tail")

Which columns, checks and encoder make a task kind's format is its record in
training/task_kinds.py; this module knows no kind by name. Files are JSON lines (one object
per line) or CSV (a header row), told apart by the suffix (.jsonl / .json / .csv). The
columns of each encoder:
  encode_classification   text, label; optional text_pair (a second text, token type 1)
  encode_tags             words (a list of texts), tags (one label per word); in CSV JSON
                          strings (check_tags)
  encode_qa               question, context, answers: {"text": [...], "answer_start": [...]}
                          (SQuAD's form; in CSV a JSON string; check_answers)
  encode_multiple_choice  context, choices (a list of texts, the same count in every
                          example; in CSV a JSON string; check_choices), label (the index of
                          the right choice)

Rows are numpy arrays of shape [N, L] (input_ids, attention_mask, token_type_ids) plus the
targets: "label" [N]; "tags" [N, L] (-1 where no word starts); or "start" and "end" [N]
(token positions of the first answer). Multiple choice rows are [N, C, L], one
[CLS] context [SEP] choice [SEP] per choice.

QA's limits. One window per example: the context is cut at its tail when the question and
context do not fit, and an answer past the cut points at [CLS] (position 0), as HF marks an
answer outside the window. The project's tokenizers give no character offsets, so the answer's
token span is found from token counts: the answer starts at len(encode(context[:start]))
and spans len(encode(answer)) tokens, checked against the context's tokens; where a
WordPiece does not split at the answer's boundary (an answer starting inside a word), the
answer's tokens are searched in the context's and the occurrence nearest that position taken.
An answer whose tokens occur nowhere in the context is a ValueError naming the row.
"""

from __future__ import annotations

import csv
import json
import os
from collections.abc import Callable, Sequence

import numpy as np

TRUNCATIONS = ("head", "tail", "head+tail")
NO_TAG = -1  # "tags" of the tokens that start no word: no loss, no metric (HF's -100)


# ---------------------------------------------------------------- reading


def read_examples(
    path: str, columns: Sequence[str], check: Callable[[dict, str, str], None] | None = None
) -> list[dict]:
    """The rows of a JSON-lines or CSV file, each checked for `columns`, then by
    `check(row, path, where)` (which may normalize the row in place).

    Raises ValueError naming the file, the line (or CSV row), the missing column and the
    columns present; for an empty file; for an unknown suffix.
    """
    if not os.path.isfile(path):
        raise FileNotFoundError(f"task file {path!r} does not exist")
    suffix = os.path.splitext(path)[1].lower()
    if suffix in (".jsonl", ".json"):
        rows = _json_lines(path)
    elif suffix == ".csv":
        rows = _csv_rows(path)
    else:
        raise ValueError(f"{path}: unknown suffix {suffix!r}; use .jsonl, .json or .csv")
    if not rows:
        raise ValueError(f"{path} holds no examples")
    for where, row in rows:
        missing = [c for c in columns if row.get(c) in (None, "")]
        if missing:
            raise ValueError(
                f"{path}, {where}: no column {missing[0]!r} (the format needs {list(columns)}); "
                f"columns present: {sorted(row)}"
            )
        if check is not None:
            check(row, path, where)
    return [row for _, row in rows]


def _json_lines(path: str) -> list[tuple[str, dict]]:
    rows = []
    with open(path, encoding="utf-8") as f:
        for number, line in enumerate(f, start=1):
            if not line.strip():
                continue
            try:
                row = json.loads(line)
            except json.JSONDecodeError as e:
                raise ValueError(f"{path}, line {number}: not JSON ({e})") from None
            if not isinstance(row, dict):
                raise ValueError(f"{path}, line {number}: a JSON object was expected")
            rows.append((f"line {number}", row))
    return rows


def _csv_rows(path: str) -> list[tuple[str, dict]]:
    with open(path, encoding="utf-8", newline="") as f:
        # Row 1 is the header, so the first example is row 2, as a spreadsheet numbers it.
        return [(f"row {n}", dict(r)) for n, r in enumerate(csv.DictReader(f), start=2)]


def _json_value(value):
    """A list or dict as given, or parsed from its JSON string (a CSV cell); None if not JSON."""
    if not isinstance(value, str):
        return value
    try:
        return json.loads(value)
    except json.JSONDecodeError:
        return None


def check_answers(row: dict, path: str, where: str) -> None:
    """row["answers"]: SQuAD's {"text": [...], "answer_start": [...]}, checked."""
    value = _json_value(row["answers"])
    if (
        not isinstance(value, dict)
        or not value.get("text")
        or len(value["text"]) != len(value.get("answer_start", ()))
    ):
        raise ValueError(
            f"{path}, {where}: answers must be {{'text': [...], 'answer_start': [...]}} with "
            f"one start per text, got {value!r}"
        )
    row["answers"] = value


def check_choices(row: dict, path: str, where: str) -> None:
    """row["choices"]: 2 or more texts, with a label that indexes them."""
    choices = _json_value(row["choices"])
    if not isinstance(choices, list) or len(choices) < 2:
        raise ValueError(
            f"{path}, {where}: choices must be a list of 2 or more texts, got {row['choices']!r}"
        )
    if str(row["label"]) not in {str(i) for i in range(len(choices))}:
        raise ValueError(
            f"{path}, {where}: label {row['label']!r} is not a choice index 0..{len(choices) - 1}"
        )
    row["choices"] = [str(c) for c in choices]


def check_tags(row: dict, path: str, where: str) -> None:
    """row["words"], row["tags"]: lists of texts, one tag per word."""
    words, tags = _json_value(row["words"]), _json_value(row["tags"])
    if not isinstance(words, list) or not isinstance(tags, list) or len(words) != len(tags):
        raise ValueError(
            f"{path}, {where}: words and tags must be lists of equal length, got "
            f"{row['words']!r} and {row['tags']!r}"
        )
    row["words"], row["tags"] = [str(w) for w in words], [str(t) for t in tags]


def label_list(examples: list[dict]) -> tuple[str, ...]:
    """The distinct labels of the training examples, as strings, sorted."""
    return tuple(sorted({str(e["label"]) for e in examples}))


def tag_list(examples: list[dict]) -> tuple[str, ...]:
    """The distinct tags of the training examples' words, sorted."""
    return tuple(sorted({t for e in examples for t in e["tags"]}))


def label_ids(examples: list[dict], labels: tuple[str, ...], path: str) -> np.ndarray:
    """int32 [N]: each example's index in `labels`; ValueError naming unknown labels."""
    index = {label: i for i, label in enumerate(labels)}
    unknown = sorted({str(e["label"]) for e in examples} - set(index))
    if unknown:
        raise ValueError(f"{path} has labels {unknown} that are not in {list(labels)}")
    return np.array([index[str(e["label"])] for e in examples], np.int32)


# ---------------------------------------------------------------- encoding


def truncate(ids: list[int], length: int, strategy: str) -> list[int]:
    """At most `length` of `ids`: the first ("head"), the last ("tail"), or the first
    ceil(length / 2) and the last floor(length / 2) ("head+tail"; Sun et al. 2019, "How to
    Fine-Tune BERT for Text Classification?", found head+tail best on long documents)."""
    if strategy not in TRUNCATIONS:
        raise ValueError(f"truncation {strategy!r} is not one of {TRUNCATIONS}")
    if len(ids) <= length:
        return list(ids)
    if strategy == "head":
        return list(ids[:length])
    if strategy == "tail":
        return list(ids[len(ids) - length :])
    tail = length // 2
    return list(ids[: length - tail]) + list(ids[len(ids) - tail :])


def pair_budgets(first: int, second: int, room: int) -> tuple[int, int]:
    """Lengths of a pair that fit `room`: the longer text gives up tokens first (HF's
    "longest_first")."""
    while first + second > room:
        if first >= second:
            first -= 1
        else:
            second -= 1
    return first, second


def _rows(pieces: list[tuple[list[int], list[int]]], max_length: int, pad_id: int) -> dict:
    """[N, L] arrays of (ids, token types) lists, padded with pad_id to max_length."""
    n = len(pieces)
    ids = np.full((n, max_length), pad_id, np.int32)
    types = np.zeros((n, max_length), np.int32)
    mask = np.zeros((n, max_length), np.int32)
    for i, (row, row_types) in enumerate(pieces):
        ids[i, : len(row)], types[i, : len(row)], mask[i, : len(row)] = row, row_types, 1
    return {"input_ids": ids, "attention_mask": mask, "token_type_ids": types}


def encode_classification(
    examples: list[dict],
    tok,
    labels: tuple[str, ...],
    *,
    max_length: int,
    truncation: str,
    path: str = "<examples>",
) -> dict[str, np.ndarray]:
    """[CLS] text [SEP] (text_pair [SEP]), token types 0 then 1, each text truncated by
    `truncation` to its share of max_length; "label" [N] indexes `labels`."""
    texts = tok.encode_batch([str(e["text"]) for e in examples])
    pairs = tok.encode_batch([str(e.get("text_pair") or "") for e in examples])
    pieces = []
    for e, a, b in zip(examples, texts, pairs):
        has_pair = bool(e.get("text_pair"))
        room = max_length - (3 if has_pair else 2)
        if room < 2:
            raise ValueError(f"max_length {max_length} leaves no room for text")
        na, nb = pair_budgets(len(a), len(b) if has_pair else 0, room)
        row = [tok.cls_id, *truncate(a, na, truncation), tok.sep_id]
        types = [0] * len(row)
        if has_pair:
            second = [*truncate(b, nb, truncation), tok.sep_id]
            row, types = row + second, types + [1] * len(second)
        pieces.append((row, types))
    return {**_rows(pieces, max_length, tok.pad_id), "label": label_ids(examples, labels, path)}


def encode_multiple_choice(
    examples: list[dict], tok, *, max_length: int, truncation: str, path: str = "<examples>"
) -> dict[str, np.ndarray]:
    """[N, C, L] rows of [CLS] context [SEP] choice [SEP] (types 0 then 1); "label" [N]."""
    counts = sorted({len(e["choices"]) for e in examples})
    if len(counts) > 1:
        raise ValueError(f"{path}: examples have {counts} choices; all need the same count")
    contexts = tok.encode_batch([str(e["context"]) for e in examples])
    pieces = []
    for e, context in zip(examples, contexts):
        for choice in tok.encode_batch(e["choices"]):
            na, nb = pair_budgets(len(context), len(choice), max_length - 3)
            first = [tok.cls_id, *truncate(context, na, truncation), tok.sep_id]
            second = [*truncate(choice, nb, truncation), tok.sep_id]
            pieces.append((first + second, [0] * len(first) + [1] * len(second)))
    rows = _rows(pieces, max_length, tok.pad_id)
    rows = {k: v.reshape(len(examples), counts[0], max_length) for k, v in rows.items()}
    return {**rows, "label": np.array([int(e["label"]) for e in examples], np.int32)}


def encode_tags(
    examples: list[dict], tok, tags: tuple[str, ...], *, max_length: int, path: str = "<examples>"
) -> dict[str, np.ndarray]:
    """[CLS] words [SEP], types 0; "tags" [N, L]: the index in `tags` of each word's tag at
    the word's first token, NO_TAG elsewhere ([CLS], [SEP], later pieces of a word, padding),
    as HF tags only a word's first token. The words are joined by the tokens of one space
    (none for WordPiece, the space byte for bytes), so a row reads as the text of the words;
    the words past max_length - 2 tokens are cut, their tags with them."""
    index = {tag: i for i, tag in enumerate(tags)}
    unknown = sorted({t for e in examples for t in e["tags"]} - set(index))
    if unknown:
        raise ValueError(f"{path} has tags {unknown} that are not in {list(tags)}")
    space, room = tok.encode(" "), max_length - 2
    pieces, targets = [], np.full((len(examples), max_length), NO_TAG, np.int32)
    for n, e in enumerate(examples):
        row = [tok.cls_id]
        for word, tag in zip(tok.encode_batch(e["words"]), e["tags"]):
            if not word:
                continue  # WordPiece drops control characters: nothing to tag
            gap = space if len(row) > 1 else []
            if len(row) - 1 + len(gap) + len(word) > room:
                break  # the cut: the later words and their tags are lost
            row += gap
            targets[n, len(row)] = index[tag]
            row += word
        row.append(tok.sep_id)
        pieces.append((row, [0] * len(row)))
    return {**_rows(pieces, max_length, tok.pad_id), "tags": targets}


def answer_span(tok, context: str, context_ids: list[int], text: str, start: int, *, where):
    """(first, last) token indices of the answer inside context_ids (see module doc)."""
    answer = tok.encode(text)
    guess = len(tok.encode(context[:start]))
    if context_ids[guess : guess + len(answer)] == answer:
        return guess, guess + len(answer) - 1
    found = [
        i
        for i in range(len(context_ids) - len(answer) + 1)
        if context_ids[i : i + len(answer)] == answer
    ]
    if not answer or not found:
        raise ValueError(f"{where}: the answer {text!r} is not found among the context's tokens")
    best = min(found, key=lambda i: abs(i - guess))
    return best, best + len(answer) - 1


def encode_qa(
    examples: list[dict], tok, *, max_length: int, path: str = "<examples>"
) -> dict[str, np.ndarray]:
    """[CLS] question [SEP] context [SEP], types 0 then 1; "start", "end" [N] of the first
    answer (0 = [CLS] when the cut context lost it); "context_start" [N], the first
    context position (predictions are spans from there on)."""
    pieces, starts, ends, offsets = [], [], [], []
    for n, e in enumerate(examples):
        question = truncate(tok.encode(e["question"]), max(max_length // 2, 1), "head")
        context = tok.encode(e["context"])
        room = max_length - len(question) - 3
        first, last = answer_span(
            tok,
            e["context"],
            context,
            e["answers"]["text"][0],
            int(e["answers"]["answer_start"][0]),
            where=f"{path}, example {n + 1}",
        )
        offset = len(question) + 2
        if last < room:
            first, last = first + offset, last + offset
        else:
            first = last = 0
        row = [tok.cls_id, *question, tok.sep_id, *context[:room], tok.sep_id]
        pieces.append((row, [0] * offset + [1] * (len(row) - offset)))
        starts.append(first)
        ends.append(last)
        offsets.append(offset)
    arrays = _rows(pieces, max_length, tok.pad_id)
    return {
        **arrays,
        "start": np.array(starts, np.int32),
        "end": np.array(ends, np.int32),
        "context_start": np.array(offsets, np.int32),
    }
