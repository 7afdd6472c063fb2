"""What a run reads and how it becomes training batches: `DataConfig`.

Sources (`DataConfig.source`, read by data/corpora.py): "builtin" (the Python standard
library's docstrings and help topics: real prose present wherever Python is, no download), a
file, directory or glob of UTF-8 text, or "hf:<name>[:<config>]" (HuggingFace `datasets`).
data/corpus.py reads, splits and tokenizes them once; data/batches.py cuts the token streams
into rows and gives them the targets of `DataConfig.objective` (data/objectives.py).
"""

from __future__ import annotations

import dataclasses

from roformer_jax.data import corpora
from roformer_jax.data.objectives import OBJECTIVES, mlm_targets

EVAL_WINDOWS = ("stream", "documents")  # how data/length_eval.py cuts the held-out text
DOCUMENTS = ("open", "isolated")  # whether training rows' documents see each other
EVAL_SPLITS = ("held_out", "selection")  # which split a run's valid/* metrics score
SPLIT_UNITS = ("document", "article")  # what the split holds out whole


@dataclasses.dataclass(frozen=True)
class DataConfig:
    """What to read and how to turn it into training batches."""

    source: str = "builtin"  # "builtin", a file/directory/glob, "hf:<name>[:<cfg>]" (module doc)
    seq_len: int = 128  # training sequence length, [CLS] and [SEP] included
    tokenizer: str = "wordpiece"  # "wordpiece" (trained on the train split), "bytes", a vocab.txt
    vocab_size: int = 8192  # WordPiece vocabulary to train (a small corpus may fill fewer)
    valid_fraction: float = 0.05  # share of documents held out for validation
    valid_lengths: tuple[int, ...] = (256, 512)  # also evaluated at these lengths (extrapolation)
    mask_prob: float = (
        0.15  # BERT: 15% of real tokens are targets; 80% [MASK], 10% random, 10% kept
    )
    whole_word: bool = False  # choose whole words rather than WordPiece pieces
    # The held-out masks' seed: fixed, not the run's, so runs of any seed score one target set.
    eval_seed: int = 0
    # How the held-out text is cut for evaluation (data/length_eval.py): "stream" (documents
    # packed, as in training) or "documents" (windows never cross one; needs long documents).
    eval_windows: str = "stream"
    # What the batches ask for, a key of OBJECTIVES: "mlm" (BERT's masked tokens), "clm"
    # (every next token, nothing masked; mask_prob and whole_word are then unused) or
    # "mlm_same_doc" (MLM on rows [CLS] A [SEP] B [SEP], plus whether A and B are windows of
    # one document: data/doc_pairs.py). It lives here because it decides how rows are drawn
    # and get their targets; the model's `causal` must agree.
    objective: str = "mlm"
    # Held-out pairs scored at each evaluation by an objective of pairs (rounded up to whole
    # evaluation batches), drawn from the validation documents with eval_seed.
    eval_pairs: int = 1024
    # What a document is (corpora.DOC_SEPARATORS; the split holds out whole documents): for
    # files "line" (one per line) | "blank" (blank-line separated) | "article" (one per WikiText
    # article, " = Title = " to the next title); "builtin" gives one per docstring, or one per
    # stdlib file with "article".
    doc_separator: str = "line"
    max_chars: int | None = None  # read at most this many characters; None = all
    # Join consecutive documents (with "\n") until each has at least this many characters, the
    # last keeping what is left; 0 = as read. A book without headings ("blank") then becomes
    # contiguous spans, so the held-out split holds long documents for length evaluation.
    min_doc_chars: int = 0
    # The documents packed in a training row: "open" (every token attends across the [SEP]
    # between them and positions run on, as BERT's packing) or "isolated" (each row carries
    # segment_ids: tokens attend within their document only, positions restart at 0 in each,
    # and "clm" predicts no document's first token from the one before; data/objectives.py).
    # The tokens, masks and held-out sets are the same either way.
    documents: str = "open"
    # How evaluation reads the held-out rows: None as trained (`documents`), or "open" /
    # "isolated" to score a model in the other mode (the packed study's 2 x 2, issue 56).
    eval_documents: str | None = None
    # A second hash band after the held-out one (data/corpus.py): this share of documents,
    # taken from training, is the selection split on which a study chooses its settings,
    # apart from the held-out set it reports (issue 56). 0: none, every earlier run's split.
    selection_fraction: float = 0.0
    # The split valid/* metrics score: "held_out" (valid_fraction's) or "selection".
    eval_split: str = "held_out"
    # What the split hashes and holds out whole: "document", or "article" (a WikiText
    # article with all its "line" paragraphs, so that held-out paragraphs come from
    # articles never trained on).
    split_by: str = "document"

    def __post_init__(self):
        if not self.source:
            raise ValueError("source is empty; use 'builtin', a path, or 'hf:<name>'")
        for length in (self.seq_len, *self.valid_lengths):
            if length < 3:
                raise ValueError(f"sequence length {length} < 3 leaves no room for [CLS] x [SEP]")
        if not self.tokenizer:
            raise ValueError("tokenizer is empty; use 'wordpiece', 'bytes' or a vocab.txt path")
        if self.vocab_size <= 5:
            raise ValueError(f"vocab_size {self.vocab_size} leaves no room beside 5 specials")
        if not 0.0 <= self.valid_fraction < 1.0:
            raise ValueError(f"valid_fraction {self.valid_fraction} is outside [0, 1)")
        if not 0.0 < self.mask_prob <= 1.0:
            raise ValueError(f"mask_prob {self.mask_prob} is outside (0, 1]")
        if self.objective not in OBJECTIVES:
            raise ValueError(f"objective {self.objective!r} is not one of {tuple(OBJECTIVES)}")
        if self.eval_pairs < 1:
            raise ValueError(f"eval_pairs {self.eval_pairs} must be >= 1")
        if self.eval_windows not in EVAL_WINDOWS:
            raise ValueError(f"eval_windows {self.eval_windows!r} is not one of {EVAL_WINDOWS}")
        if self.doc_separator not in corpora.DOC_SEPARATORS:
            raise ValueError(
                f"doc_separator {self.doc_separator!r} is not one of {corpora.DOC_SEPARATORS}"
            )
        if self.max_chars is not None and self.max_chars <= 0:
            raise ValueError(f"max_chars {self.max_chars} must be positive (or None for all)")
        if self.documents not in DOCUMENTS:
            raise ValueError(f"documents {self.documents!r} is not one of {DOCUMENTS}")
        if self.documents == "isolated" and self.pairs:
            raise ValueError(
                f"documents='isolated' with objective {self.objective!r}: a pair row joins "
                "two windows to be read together; use documents='open'"
            )
        self._check_splits()
        if self.min_doc_chars < 0:
            raise ValueError(
                f"min_doc_chars {self.min_doc_chars} must be >= 0 (0: documents as read)"
            )

    def _check_splits(self):
        if self.eval_documents is not None and self.eval_documents not in DOCUMENTS:
            raise ValueError(
                f"eval_documents {self.eval_documents!r} is not one of {DOCUMENTS} (or None: "
                "as trained)"
            )
        if self.eval_documents == "isolated" and self.pairs:
            raise ValueError(
                f"eval_documents='isolated' with objective {self.objective!r}: a pair row "
                "joins two windows to be read together"
            )
        if not 0.0 <= self.selection_fraction < 1.0 - self.valid_fraction:
            raise ValueError(
                f"selection_fraction {self.selection_fraction} is outside [0, 1 - "
                f"valid_fraction {self.valid_fraction}): the two bands leave nothing to train on"
            )
        if self.eval_split not in EVAL_SPLITS:
            raise ValueError(f"eval_split {self.eval_split!r} is not one of {EVAL_SPLITS}")
        if self.eval_split == "selection" and not self.selection_fraction:
            raise ValueError(
                "eval_split='selection' with selection_fraction 0: there is no selection split "
                "to score; set selection_fraction"
            )
        if self.split_by not in SPLIT_UNITS:
            raise ValueError(f"split_by {self.split_by!r} is not one of {SPLIT_UNITS}")
        if self.split_by == "article" and (self.doc_separator, self.min_doc_chars) != ("line", 0):
            raise ValueError(
                f"split_by='article' holds out WikiText articles cut into their lines; it needs "
                f"doc_separator='line' and min_doc_chars=0, not {self.doc_separator!r} and "
                f"{self.min_doc_chars}"
            )

    @property
    def evaluated_documents(self) -> str:
        """How evaluation reads the held-out rows' documents: eval_documents, else documents."""
        return self.eval_documents or self.documents

    @property
    def causal(self) -> bool:
        """Whether the objective needs a causal model: "clm" predicts token i + 1 from i."""
        return OBJECTIVES[self.objective].causal

    @property
    def pairs(self) -> bool:
        """Whether rows are same-document pairs with a pair_label (data/doc_pairs.py), which
        the model predicts with its pair head."""
        return OBJECTIVES[self.objective].pairs

    @property
    def target_rate(self) -> float | None:
        """The rate `masking.max_targets` bounds each row's targets by; None where nothing
        bounds them below the row length (whole words can run over it; "clm" targets nearly
        every position). The train step gathers the head at that many positions per row."""
        masked = OBJECTIVES[self.objective].targets is mlm_targets
        return self.mask_prob if masked and not self.whole_word else None
