"""The long-document task's articles and how their tokens are counted.

    articles = read_articles(paths, format="wikitext")   # " = Title = ", " = = Section = = "
    articles = read_articles(paths, format="paragraphs", span_words=3000)  # books: spans
    measure = named_measure("wordpiece", [" ".join(a.words) for a in articles])

An Article is a document cut into sections, each its words, without its title or headings.
Tokens are counted word by word (`word_measure`): exact for WordPiece, whose pre-tokenizer never
joins two whitespace-separated words.
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable, Sequence

from roformer_jax.data import corpora
from roformer_jax.data.tokenizer import named_tokenizer, train_wordpiece

_HEADING = corpora.WIKITEXT_HEADING  # "= Title =", "= = Section = =", ...: as "article" splits


@dataclasses.dataclass(frozen=True)
class Article:
    """A document cut into sections; each section is its words. No title or heading inside."""

    title: str
    sections: tuple[tuple[str, ...], ...]
    source: int = 0  # index of the source file it came from (for splits by source)

    @property
    def words(self) -> list[str]:
        return [w for section in self.sections for w in section]


@dataclasses.dataclass(frozen=True)
class Measure:
    """Counts tokens: a window of words w_1..w_n has sum(cost(w_i)) + (n - 1) * separator."""

    cost: Callable[[Sequence[str]], list[int]]  # the token count of each word
    separator: int = 0  # tokens a space between two words costs (1 for bytes, 0 for WordPiece)
    name: str = ""


def word_measure(tokenizer=None, *, name: str = "") -> Measure:
    """Tokens of `tokenizer` (WordPiece or bytes), or whitespace words when it is None."""
    if tokenizer is None:
        return Measure(lambda words: [1] * len(words), 0, name or "words")
    if hasattr(tokenizer, "vocab"):  # WordPiece: per-word counts add up (see module doc)
        return Measure(lambda words: [len(ids) for ids in tokenizer.encode_batch(words)], 0, name)
    return Measure(lambda words: [len(w.encode("utf-8")) for w in words], 1, name or "bytes")


def read_articles(sources: Sequence[str], *, format: str, span_words: int = 3000) -> list[Article]:
    """The articles of each source in turn (source i gets `source=i`).

    format "wikitext": headings as in `wikitext_articles`; "paragraphs": blank-line separated
    paragraphs grouped by `paragraph_spans`. Raises FileNotFoundError for a missing source.
    """
    if format not in ("wikitext", "paragraphs"):
        raise ValueError(f"format {format!r} is not 'wikitext' or 'paragraphs'")
    if not sources:
        raise ValueError("no source given; pass one or more text files")
    articles = []
    for i, source in enumerate(sources):
        if format == "wikitext":
            lines = corpora.read_documents(source, doc_separator="line")
            articles += wikitext_articles(lines, source=i)
        else:
            paragraphs = corpora.read_documents(source, doc_separator="blank")
            name = f"{os.path.basename(source)} span"
            articles += paragraph_spans(paragraphs, span_words=span_words, source=i, name=name)
    return articles


def named_measure(name: str, texts: Sequence[str], *, vocab_size: int = 8192) -> Measure:
    """The measure a name gives: "words" (whitespace), "bytes", "wordpiece" (a WordPiece of
    `vocab_size` trained on `texts`, as the MLM pipeline trains one), or a BERT vocab.txt path.
    """
    if name == "words":
        return word_measure(None)
    tok = named_tokenizer(name)
    if tok is None:
        tok = train_wordpiece(texts, vocab_size=vocab_size)
        name = f"wordpiece (vocab {tok.vocab_size}, trained on the source)"
    return word_measure(tok, name=name)


def wikitext_articles(lines: Sequence[str], *, source: int = 0) -> list[Article]:
    """Articles of WikiText lines: " = Title = " opens one, " = = Heading = = " a section.

    The text before the first heading of an article (its lead) is its first section. Blank
    lines are ignored; text before the first title is dropped (it belongs to no article).
    """
    articles, title, sections = [], None, []

    def close():
        kept = tuple(tuple(s) for s in sections if s)
        if title is not None and kept:
            articles.append(Article(title, kept, source))

    for line in lines:
        line = line.strip()
        heading = _HEADING.match(line)
        if heading and heading.group(1) == "=":
            close()
            title, sections = heading.group(2), [[]]
        elif heading:
            sections.append([])
        elif line and title is not None:
            sections[-1].extend(line.split())
    close()
    return articles


def paragraph_spans(
    paragraphs: Sequence[str], *, span_words: int, source: int = 0, name: str = "span"
) -> list[Article]:
    """Consecutive paragraphs grouped into "articles" of at least `span_words` words.

    For text without headings (a novel): each span is a stretch of one story, and its sections
    are its paragraphs. A last span shorter than `span_words` is dropped, so every span is
    comparable in length.
    """
    if span_words < 1:
        raise ValueError(f"span_words {span_words} must be at least 1")
    articles, sections, count, first = [], [], 0, 0
    for i, paragraph in enumerate(paragraphs):
        words = tuple(paragraph.split())
        if not words:
            continue
        sections.append(words)
        count += len(words)
        if count >= span_words:
            title = f"{name} {len(articles)} (paragraphs {first}-{i})"
            articles.append(Article(title, tuple(sections), source))
            sections, count, first = [], 0, i + 1
    return articles
