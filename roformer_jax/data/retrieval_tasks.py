"""Retrieval tasks for length generalization, as token rows a causal LM reads: passkey, MQAR,
flip-flop.

    examples = generate("passkey", seed=0, length=256, batch=64, haystack="text")
    examples.tokens      # int32 [B, L], answers included (a causal LM predicts each from before)
    examples.positions   # int32 [B, Q, T]: where each of a row's Q answers sits, T tokens each
    examples.answers     # int32 [B, Q, T]: the tokens there; examples.mask: bool [B, L]
    examples.depth       # float [B, Q]: where each answer's evidence sits (below)

Glossary: B rows, L row length, Q answers per row, T tokens per answer, V vocab.

  task      answers (Q x T)        what is learned                          after
  passkey   1 x `digits`           the digits after the needle, asked at    Mohtashami & Jaggi
                                   the end of a haystack (filler or text)   2023; RULER's S-NIAH
  mqar      `pairs` x 1            the value of each key, asked again       Arora et al. 2023
                                   after all key-value pairs                (zoology)
  flipflop  `reads` x 1            the bit of the last write, at each read  Liu et al. 2023

depth: the evidence's position (the needle, the queried pair, the last write) over the
answer's: 0 at the row's start, near 1 just before the answer. Passkey places it
(`depths`); the others draw it.

Each generator is a pure function of a numpy Generator; `generate` seeds one from (seed,
length), so a seed gives the same rows for ever (an evaluation set is fixed by its seed) and
each length its own rows. Vocabularies are small and per task (`TASKS[task].vocab_size`).
"""

from __future__ import annotations

import dataclasses
import functools
import inspect
from collections.abc import Callable, Sequence

import numpy as np

from roformer_jax.data import corpora

# Passkey's vocabulary: markers, ten digits, then printable ASCII (the haystack's characters).
BOS, NEEDLE, QUERY = 1, 2, 3  # 0 is never used: no padding, every row is full
DIGIT0 = 4
TEXT0 = DIGIT0 + 10  # character c is token TEXT0 + ord(c) - 32
PASSKEY_VOCAB = TEXT0 + 95
# Mohtashami & Jaggi's filler (Landmark attention, appendix), repeated to the haystack's length.
FILLER = (
    "The grass is green. The sky is blue. The sun is yellow. Here we go. There and back again. "
)
TEXT_CHARS = 200_000  # of the builtin corpus, the text haystack's source
HAYSTACKS = ("filler", "text")
# Flip-flop's vocabulary: three instructions and two bits.
WRITE, IGNORE, READ, BIT0 = 1, 2, 3, 4
FLIPFLOP_VOCAB = BIT0 + 2


@dataclasses.dataclass(frozen=True)
class Examples:
    """Rows of a task (module doc): tokens int32 [B, L], positions int32 [B, Q, T], depth [B, Q]."""

    tokens: np.ndarray
    positions: np.ndarray
    depth: np.ndarray

    @property
    def answers(self) -> np.ndarray:
        """int32 [B, Q, T]: the answer tokens, read from the rows."""
        rows = np.arange(len(self.tokens))[:, None, None]
        return self.tokens[rows, self.positions]

    @property
    def mask(self) -> np.ndarray:
        """bool [B, L]: the answer tokens (where the loss and the score are taken)."""
        mask = np.zeros(self.tokens.shape, bool)
        np.put_along_axis(mask, self.positions.reshape(len(mask), -1), True, axis=1)
        return mask


def _text(chars: str) -> np.ndarray:
    """Characters as passkey tokens, anything outside printable ASCII as a space."""
    codes = np.frombuffer(chars.encode("ascii", "replace"), np.uint8).astype(np.int32)
    codes = np.where((codes >= 32) & (codes < 127), codes, 32)
    return TEXT0 + codes - 32


@functools.cache
def corpus_text() -> np.ndarray:
    """The first TEXT_CHARS characters of the builtin corpus (its docstrings, whitespace
    collapsed, joined by spaces) as passkey tokens: the text haystack."""
    pieces, total = [], 0
    for doc in corpora.stdlib_documents():
        pieces.append(" ".join(doc.split()))
        total += len(pieces[-1]) + 1
        if total >= TEXT_CHARS:
            break
    chars = " ".join(pieces)[:TEXT_CHARS]
    return _text(chars)


def _haystack(rng: np.random.Generator, kind: str, batch: int, size: int) -> np.ndarray:
    """[B, size] haystack tokens: the filler from its start, or a random span of the corpus."""
    if kind == "filler":
        filler = _text(FILLER)
        return np.tile(np.resize(filler, size), (batch, 1))
    text = corpus_text()
    if size > len(text):
        raise ValueError(f"a text haystack of {size} tokens is longer than the corpus text")
    starts = rng.integers(0, len(text) - size + 1, size=batch)
    return text[starts[:, None] + np.arange(size)]


def haystack_size(length: int, digits: int) -> int:
    """A passkey row's haystack tokens: the rest of the row after 3 markers and 2 x `digits`.
    At depth k / haystack_size the needle's marker is token k + 1 (after [BOS] and k tokens)."""
    return length - 3 - 2 * digits


def passkey(
    rng: np.random.Generator,
    length: int,
    batch: int,
    *,
    digits: int = 5,
    haystack: str = "filler",
    depths: Sequence[float] | None = None,
) -> Examples:
    """[BOS] haystack with [NEEDLE] d_1..d_T inside, then [QUERY] d_1..d_T (T = digits).

    depths: None draws each row's depth from U[0, 1]; a sequence gives row b depths[b % len]
      (an evaluation grid). The needle follows round(depth · S) haystack tokens of S.
    """
    if haystack not in HAYSTACKS:
        raise ValueError(f"haystack={haystack!r} is not one of {HAYSTACKS}")
    if digits < 1:
        raise ValueError(f"digits={digits} must be at least 1")
    size = haystack_size(length, digits)
    if size < 1:
        raise ValueError(
            f"length={length} leaves no haystack: a row holds 3 markers and 2 x {digits} digits"
        )
    if depths is None:
        depth = rng.uniform(size=batch)
    else:
        depth = np.resize(np.asarray(depths, np.float64), batch)
        if depth.size == 0 or np.any((depth < 0) | (depth > 1)):
            raise ValueError(f"depths={list(depths)} must be a non-empty list of values in [0, 1]")
    key = DIGIT0 + rng.integers(0, 10, size=(batch, digits))
    hay = _haystack(rng, haystack, batch, size)
    before = np.rint(depth * size).astype(int)  # haystack tokens before the needle
    tokens = np.empty((batch, length), np.int32)
    for b in range(batch):
        needle = [NEEDLE, *key[b]]
        tokens[b] = [BOS, *hay[b, : before[b]], *needle, *hay[b, before[b] :], QUERY, *key[b]]
    positions = np.broadcast_to(np.arange(length - digits, length), (batch, 1, digits))
    return Examples(tokens, positions.astype(np.int32), (before / size)[:, None])


def mqar(
    rng: np.random.Generator, length: int, batch: int, *, pairs: int = 8, vocab: int = 256
) -> Examples:
    """Zoology's multi-query associative recall: k_1 v_1 .. k_P v_P (P = pairs, distinct keys
    from [1, V/2), distinct values from [V/2, V)), then the rest of the row 0s but for the P
    keys again, in a random order at random places, each followed by its value (the answer).
    """
    if vocab < 2 * pairs + 2 or vocab % 2:
        raise ValueError(f"vocab={vocab} must be even and hold {pairs} keys and values each")
    slots = (length - 2 * pairs) // 2  # two-token places for the queries
    if pairs < 1 or slots < pairs:
        raise ValueError(f"length={length} cannot hold {pairs} pairs and their {pairs} queries")
    half = vocab // 2
    tokens = np.zeros((batch, length), np.int32)
    positions = np.empty((batch, pairs, 1), np.int32)
    depth = np.empty((batch, pairs))
    for b in range(batch):
        keys = rng.choice(np.arange(1, half), pairs, replace=False)
        values = rng.choice(np.arange(half, vocab), pairs, replace=False)
        tokens[b, 0 : 2 * pairs : 2], tokens[b, 1 : 2 * pairs : 2] = keys, values
        asked = rng.permutation(pairs)  # the pair each query asks, in row order
        where = 2 * pairs + 2 * np.sort(rng.choice(slots, pairs, replace=False))
        tokens[b, where], tokens[b, where + 1] = keys[asked], values[asked]
        positions[b, :, 0] = where + 1
        depth[b] = 2 * asked / (where + 1)
    return Examples(tokens, positions, depth)


def flipflop(
    rng: np.random.Generator, length: int, batch: int, *, reads: int = 8, p_write: float = 0.1
) -> Examples:
    """Liu et al.'s flip-flop language: L / 2 (instruction, bit) pairs, the first a write; of
    the others `reads` are reads at random places and each other is a write with probability
    p_write, else an ignore. Bits after writes and ignores are random; after a read, the bit
    of the last write (the answer).
    """
    if length % 2:
        raise ValueError(f"length={length} is odd: flip-flop rows are (instruction, bit) pairs")
    steps = length // 2
    if not 1 <= reads < steps:
        raise ValueError(f"reads={reads} must be in [1, {steps - 1}] for length={length}")
    if not 0.0 < p_write <= 1.0:
        raise ValueError(f"p_write={p_write} is not in (0, 1]")
    tokens = np.empty((batch, length), np.int32)
    positions = np.empty((batch, reads, 1), np.int32)
    depth = np.empty((batch, reads))
    for b in range(batch):
        ops = np.where(rng.uniform(size=steps) < p_write, WRITE, IGNORE)
        ops[0] = WRITE
        read_at = 1 + np.sort(rng.choice(steps - 1, reads, replace=False))
        ops[read_at] = READ
        bits = rng.integers(0, 2, size=steps)
        writes = np.where(ops == WRITE, np.arange(steps), 0)
        last = np.maximum.accumulate(writes)  # the step of the last write at or before each
        bits[read_at] = bits[last[read_at]]
        tokens[b, 0::2], tokens[b, 1::2] = ops, BIT0 + bits
        positions[b, :, 0] = 2 * read_at + 1
        depth[b] = last[read_at] / read_at
    return Examples(tokens, positions, depth)


@dataclasses.dataclass(frozen=True)
class Task:
    """A task's generator (rng, length, batch, **options) -> Examples, and its vocab size
    from the same options."""

    generate: Callable[..., Examples]
    vocab_size: Callable[..., int]


TASKS = {
    "passkey": Task(passkey, lambda **options: PASSKEY_VOCAB),
    "mqar": Task(mqar, lambda vocab=256, **options: vocab),
    "flipflop": Task(flipflop, lambda **options: FLIPFLOP_VOCAB),
}


def generate(
    task: str, *, seed: int | Sequence[int], length: int, batch: int, **options
) -> Examples:
    """`batch` rows of `task` at `length`, drawn from (seed, length) alone (module doc); seed
    may be several integers (a training run's (seed, step))."""
    if task not in TASKS:
        raise ValueError(f"task={task!r} is not one of {sorted(TASKS)}")
    known = set(inspect.signature(TASKS[task].generate).parameters) - {"rng", "length", "batch"}
    unknown = sorted(set(options) - known)
    if unknown:
        raise ValueError(f"{task} takes no options {unknown}; it takes {sorted(known)}")
    if batch < 1:
        raise ValueError(f"batch={batch} must be at least 1")
    rng = np.random.default_rng([*np.atleast_1d(seed).tolist(), length])
    return TASKS[task].generate(rng, length, batch, **options)
