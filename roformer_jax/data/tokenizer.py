"""Tokenizers: BERT-style WordPiece (trained or loaded from a vocab.txt) and raw bytes.

Both tokenizers share one interface and the same five special tokens at the same ids:
[PAD]=0, [UNK]=1, [CLS]=2, [SEP]=3, [MASK]=4 for the ones we build; a loaded BERT/RoFormer
vocab.txt keeps its own ids ([PAD] must be 0, as in every BERT vocabulary).

    tok = train_wordpiece(texts, vocab_size=8192)   # HF `tokenizers` trainer, BERT pipeline
    tok = WordPieceTokenizer.from_vocab("vocab.txt")  # e.g. a HuggingFace RoFormer checkpoint
    tok = ByteTokenizer()                            # 256 bytes + 5 specials, no training
    ids = tok.encode("Rotary embeddings.")           # no [CLS]/[SEP] added
    tok.save(directory); load_tokenizer(directory)

The WordPiece pipeline is BERT's: BertNormalizer (clean text, CJK characters split, optional
lowercasing with accent stripping), BertPreTokenizer (whitespace and punctuation), greedy
longest-match WordPiece with "##" continuations. RoFormer's Chinese checkpoints additionally
pre-segment words with jieba; we do not, so Chinese text falls back to BERT's per-character
split, which that vocabulary also covers.
"""

from __future__ import annotations

import collections
import json
import os
import unicodedata
from collections.abc import Iterable, Sequence

import numpy as np
from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, trainers

SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]")
VOCAB_FILE = "vocab.txt"
CONFIG_FILE = "tokenizer_config.json"  # the name HuggingFace uses; we read do_lower_case from it
_ALPHABET = 1000  # BERT's cap on distinct characters
_CJK_BLOCKS = (
    (0x4E00, 0x9FFF),
    (0x3400, 0x4DBF),
    (0x20000, 0x2A6DF),
    (0x2A700, 0x2B73F),
    (0x2B740, 0x2B81F),
    (0x2B820, 0x2CEAF),
    (0xF900, 0xFAFF),
    (0x2F800, 0x2FA1F),
)


class _SpecialIds:
    """The ids of the five special tokens, shared by both tokenizers."""

    pad_id: int
    unk_id: int
    cls_id: int
    sep_id: int
    mask_id: int

    @property
    def special_ids(self) -> tuple[int, ...]:
        return (self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id)


class ByteTokenizer(_SpecialIds):
    """UTF-8 bytes as tokens: id = byte + 5, after the five specials. Vocabulary size 261.

    Needs no training and never produces [UNK]; sequences are ~4x longer than WordPiece's.
    A word starts at a byte that is not a letter/digit/non-ASCII byte or whose predecessor is not.
    """

    OFFSET = len(SPECIAL_TOKENS)

    def __init__(self):
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = range(self.OFFSET)
        self.vocab_size = self.OFFSET + 256
        word_byte = np.zeros(256, bool)
        for b in range(256):
            word_byte[b] = b >= 0x80 or chr(b).isalnum()
        self._word_token = np.concatenate([np.zeros(self.OFFSET, bool), word_byte])

    def encode(self, text: str) -> list[int]:
        return (
            np.frombuffer(text.encode("utf-8"), np.uint8).astype(np.int32) + self.OFFSET
        ).tolist()

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        return [self.encode(t) for t in texts]

    def decode(self, ids: Iterable[int]) -> str:
        """Bytes back to text; specials other than [PAD] are shown by name, e.g. "[MASK]"."""
        parts, run = [], bytearray()
        for i in ids:
            i = int(i)
            if i >= self.OFFSET:
                run.append(i - self.OFFSET)
                continue
            if i != self.pad_id:
                parts.append(run.decode("utf-8", errors="replace"))
                parts.append(SPECIAL_TOKENS[i])
                run = bytearray()
        parts.append(run.decode("utf-8", errors="replace"))
        return "".join(parts)

    def word_starts(self, ids: np.ndarray) -> np.ndarray:
        """Bool array like `ids` (last axis = sequence): True where a token begins a word."""
        ids = np.asarray(ids)
        word = self._word_token[ids]
        prev = np.zeros_like(word)
        prev[..., 1:] = word[..., :-1]
        return ~(word & prev)

    def save(self, directory: str) -> None:
        os.makedirs(directory, exist_ok=True)
        _write_atomic(os.path.join(directory, CONFIG_FILE), json.dumps({"type": "bytes"}) + "\n")


class WordPieceTokenizer(_SpecialIds):
    """BERT WordPiece over a fixed vocabulary (a list of tokens; the id is the list index).

    Args:
      vocab: the tokens in id order, as the lines of a BERT vocab.txt.
      lowercase: lowercase and strip accents before splitting (BERT "uncased").
    """

    def __init__(self, vocab: Sequence[str], *, lowercase: bool):
        vocab = list(vocab)
        index = {tok: i for i, tok in enumerate(vocab)}
        missing = [t for t in SPECIAL_TOKENS if t not in index]
        if missing:
            raise ValueError(
                f"vocabulary of {len(vocab)} tokens lacks the special tokens {missing}; a BERT "
                f"vocab.txt has one token per line and includes {list(SPECIAL_TOKENS)}"
            )
        if index["[PAD]"] != 0:
            raise ValueError(f"[PAD] has id {index['[PAD]']}; BERT vocabularies put it at id 0")
        self.pad_id, self.unk_id, self.cls_id, self.sep_id, self.mask_id = (
            index[t] for t in SPECIAL_TOKENS
        )
        self.vocab = vocab
        self.vocab_size = len(vocab)
        self.lowercase = lowercase
        self._tok = _bert_pipeline(models.WordPiece(index, unk_token="[UNK]"), lowercase)
        self._word_token = np.array([not t.startswith("##") for t in vocab], bool)

    @classmethod
    def from_vocab(cls, path: str, *, lowercase: bool | None = None) -> WordPieceTokenizer:
        """Loads a BERT/RoFormer vocab.txt (a file, or a directory that holds one).

        `lowercase=None` reads `do_lower_case` from a tokenizer_config.json next to the vocab,
        and otherwise lowercases exactly when no ordinary token contains an uppercase letter
        (true of bert-base-uncased and the RoFormer checkpoints, false of bert-base-cased).
        """
        if os.path.isdir(path):
            path = os.path.join(path, VOCAB_FILE)
        if not os.path.isfile(path):
            raise FileNotFoundError(f"vocab file {path!r} does not exist")
        vocab = _read_vocab(path)
        if lowercase is None:
            config = os.path.join(os.path.dirname(path), CONFIG_FILE)
            if os.path.isfile(config):
                with open(config, encoding="utf-8") as f:
                    lowercase = json.load(f).get("do_lower_case")
        if lowercase is None:
            lowercase = not any(
                c.isupper() for t in vocab if not (t.startswith("[") and t.endswith("]")) for c in t
            )
        try:
            return cls(vocab, lowercase=lowercase)
        except ValueError as e:
            raise ValueError(f"{path!r} is not a BERT vocab.txt: {e}") from None

    def encode(self, text: str) -> list[int]:
        return self._tok.encode(text, add_special_tokens=False).ids

    def encode_batch(self, texts: Sequence[str]) -> list[list[int]]:
        """Encodes many texts at once (in parallel, in Rust)."""
        return [e.ids for e in self._tok.encode_batch_fast(list(texts), add_special_tokens=False)]

    def decode(self, ids: Iterable[int]) -> str:
        """Joins "##" pieces; specials other than [PAD] are shown by name, e.g. "[MASK]"."""
        return self._tok.decode(
            [int(i) for i in ids if i != self.pad_id], skip_special_tokens=False
        )

    def word_starts(self, ids: np.ndarray) -> np.ndarray:
        """Bool array like `ids`: True where a token begins a word (is not a "##" piece)."""
        return self._word_token[np.asarray(ids)]

    def save(self, directory: str) -> None:
        """Writes vocab.txt and tokenizer_config.json, readable by HF BertTokenizer too."""
        os.makedirs(directory, exist_ok=True)
        _write_atomic(os.path.join(directory, VOCAB_FILE), "".join(t + "\n" for t in self.vocab))
        config = {"type": "wordpiece", "do_lower_case": self.lowercase}
        _write_atomic(os.path.join(directory, CONFIG_FILE), json.dumps(config) + "\n")


def train_wordpiece(
    texts: Sequence[str], *, vocab_size: int, lowercase: bool = True
) -> WordPieceTokenizer:
    """Trains a BERT WordPiece vocabulary of at most `vocab_size` tokens with HF `tokenizers`.

    The five specials get ids 0..4. A small corpus may yield fewer tokens than asked for:
    `tokenizer.vocab_size` is the size to give the model. The alphabet is capped at 1000
    characters as in BERT; words with rarer characters become [UNK].

    The result is the same on every run and machine. HF's trainer alone is not: it creates the
    "##c" piece of each character in hash-map order and breaks ties between equally frequent
    merges by id (huggingface/tokenizers#1794), so two hosts could train different
    vocabularies. Declaring every "##c" up front, in a fixed order, removes that.
    """
    if vocab_size <= len(SPECIAL_TOKENS):
        raise ValueError(f"vocab_size {vocab_size} leaves no room beside the 5 special tokens")
    tok = _bert_pipeline(models.WordPiece(unk_token="[UNK]"), lowercase)
    counts = collections.Counter()
    for text in texts:
        counts.update(tok.normalizer.normalize_str(text))
    alphabet = sorted(counts, key=lambda c: (-counts[c], c))
    room = (vocab_size - len(SPECIAL_TOKENS)) // 2  # keep space for the characters themselves
    pieces = [f"##{c}" for c in alphabet if not _always_alone(c)][: min(_ALPHABET, room)]
    trainer = trainers.WordPieceTrainer(
        vocab_size=vocab_size,
        special_tokens=[*SPECIAL_TOKENS, *pieces],
        limit_alphabet=_ALPHABET,
        show_progress=False,
    )
    tok.train_from_iterator(texts, trainer, length=len(texts))
    by_id = sorted(tok.get_vocab().items(), key=lambda kv: kv[1])
    if len(by_id) <= len(SPECIAL_TOKENS) + len(pieces):
        raise ValueError("WordPiece training saw no text; the training split is empty")
    return WordPieceTokenizer([t for t, _ in by_id], lowercase=lowercase)


def _always_alone(c: str) -> bool:
    """Characters BERT's pre-tokenizer always splits off (space, punctuation, CJK)."""
    return (
        c.isspace()
        or unicodedata.category(c).startswith("P")
        or (c.isascii() and not c.isalnum())
        or _is_cjk(ord(c))
    )


def _is_cjk(cp: int) -> bool:
    """The CJK ideograph blocks that BertNormalizer surrounds by spaces."""
    return any(lo <= cp <= hi for lo, hi in _CJK_BLOCKS)


def load_tokenizer(directory: str) -> ByteTokenizer | WordPieceTokenizer:
    """Loads what `save` wrote (or a plain directory holding a BERT vocab.txt)."""
    config = os.path.join(directory, CONFIG_FILE)
    if os.path.isfile(config):
        with open(config, encoding="utf-8") as f:
            if json.load(f).get("type") == "bytes":
                return ByteTokenizer()
    return WordPieceTokenizer.from_vocab(directory)


def named_tokenizer(name: str) -> ByteTokenizer | WordPieceTokenizer | None:
    """The tokenizer a config's `tokenizer` names: "bytes", or the path of a BERT vocab.txt.

    None for "wordpiece": that one is trained on the corpus, so it exists only once the data
    pipeline has built it. Raises FileNotFoundError for anything else that is not a file.
    """
    if name == "bytes":
        return ByteTokenizer()
    if name == "wordpiece":
        return None
    if not os.path.exists(name):
        raise FileNotFoundError(
            f"tokenizer {name!r} is neither 'wordpiece', 'bytes' nor an existing vocab.txt"
        )
    return WordPieceTokenizer.from_vocab(name)


def tokenizer_vocab_size(name: str, *, wordpiece_vocab_size: int) -> int:
    """The vocabulary size of the tokenizer `name` (see `named_tokenizer`) will have.

    A trained WordPiece gets `wordpiece_vocab_size` ids (a small corpus may fill fewer; the
    ids above stay unused rows of the embedding table).
    """
    tok = named_tokenizer(name)
    return wordpiece_vocab_size if tok is None else tok.vocab_size


def _bert_pipeline(model: models.WordPiece, lowercase: bool) -> Tokenizer:
    tok = Tokenizer(model)
    tok.normalizer = normalizers.BertNormalizer(lowercase=lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tok.decoder = decoders.WordPiece(prefix="##")
    return tok


def _read_vocab(path: str) -> list[str]:
    with open(path, "rb") as f:
        raw = f.read()
    what = f"{path!r} is not a BERT vocab.txt (UTF-8 text, one token per line)"
    if b"\0" in raw:
        raise ValueError(f"{what}: it contains NUL bytes, so it looks binary")
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError as e:
        raise ValueError(f"{what}: invalid UTF-8 at byte {e.start}") from None
    if text.lstrip().startswith("{"):
        raise ValueError(f"{what}: it looks like JSON (a tokenizer.json?); pass the vocab.txt")
    vocab = [line.rstrip("\r") for line in text.split("\n")]
    if vocab and vocab[-1] == "":
        vocab.pop()
    return vocab


def _write_atomic(path: str, text: str) -> None:
    """Writes a temporary file and renames it, so a reader never sees half a file."""
    tmp = f"{path}.tmp{os.getpid()}"
    with open(tmp, "w", encoding="utf-8") as f:
        f.write(text)
    os.replace(tmp, path)
