"""A long-document matching task built offline: a stand-in for CAIL2019-SCM.

CAIL2019-SCM (the RoFormer blog's long-text benchmark) gives triplets of long documents
(A, B, C) and asks whether B or C is more similar to A. We build such triplets from local text:

    articles = read_articles(paths, format="wikitext")   # " = Title = ", " = = Section = = "
    articles = read_articles(paths, format="paragraphs", span_words=3000)  # books: spans
    splits, stats = build_task(articles, measure=word_measure(tok), window_tokens=450, seed=0)
    splits, stats = build_task(..., min_window_tokens=256, window_tokens=760)  # varied lengths
    write_task(out_dir, splits, stats)                   # {train,valid,test}.jsonl, stats.json

A triplet:
  A  the first window of an article (from its first section on), of about its A budget.
  B  the last window of the same article that starts at a section boundary after A ends: so A
     and B share no section and lie as far apart as the article allows; what links them is the
     article's topic, not shared sentences (as CAIL's cases share facts, not paragraphs).
  C  the window chosen by the same rule as B from the other article of the same split that is
     nearest to A's article by TF-IDF cosine: a hard negative. B and C are both "far" windows,
     so their position in an article cannot tell them apart. C is that article's own B window,
     so it has that article's B budget.
The positive sits in B or C at random (a seeded shuffle of an exactly balanced list), and
"label" names the field that holds it, as in CAIL. Titles and headings never enter a window.

Budgets: each article has an A budget and a B budget, drawn independently and uniformly from the
integers [min_window_tokens, window_tokens] by a generator keyed by (seed, the article's index in
the list read), so a budget does not depend on which other articles fit or on the order of work
(`window_budgets`). min_window_tokens = window_tokens (the default) gives every window the same
budget, and the RNG is not used. Varied lengths are what let a study bin triplets by how much of
B a maximum length keeps; with one length every triplet keeps the same fraction.

Windows are runs of whole words whose token count is at most the budget and more than the budget
minus the next word's count. Tokens are counted word by word (`word_measure`): exact for
WordPiece, whose pre-tokenizer never joins two whitespace-separated words.
"""

from __future__ import annotations

import dataclasses
import json
import os
import re
from collections.abc import Callable, Sequence

import numpy as np
from scipy import sparse

from roformer_jax.data import corpora, tasks
from roformer_jax.data.tokenizer import named_tokenizer, train_wordpiece

SPLITS = ("train", "valid", "test")
_HEADING = corpora.WIKITEXT_HEADING  # "= Title =", "= = Section = =", ...: as "article" splits
_UNKNOWN = "<unk>"  # WikiText's out-of-vocabulary marker: frequent, and says nothing of a topic
_TERM = re.compile(r"(?u)\b\w\w+\b")  # TF-IDF terms: words of two or more characters
_BUDGET_STREAM = 1  # keys the budgets' generators apart from the labels' ([seed, split])
_PAIR_STREAM = 2  # and the extra window pairs' ([seed, _PAIR_STREAM, article])
POSITIVES = ("far", "copy")


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


def window_pairs(
    article: Article,
    costs: dict[str, int],
    *,
    window_tokens: int,
    far_window_tokens: int | None = None,
    separator: int = 0,
    first_only: bool = False,
) -> list[tuple[list[str], list[str]]]:
    """Every (A, B) of the article: A a window that starts at a section, B a window that starts
    at a section after A's last section, so the two share no section.

    Ordered by A's start, then by B's from the end of the article, so the first pair is
    `far_windows`'s when A can start the article. `costs` maps each word to its token count; A
    holds at most `window_tokens` tokens, B at most `far_window_tokens` (default:
    `window_tokens`). first_only: the first pair whose A starts the article, alone (or none).
    """
    starts, words = [], []
    for section in article.sections:
        starts.append(len(words))
        words.extend(section)
    if not words:
        return []
    c = np.array([costs[w] + separator for w in words], np.int64)
    ends = np.cumsum(c)  # tokens (each with the separator before it) up to word i included

    def window(start: int, tokens: int) -> list[str] | None:
        budget = tokens + separator  # the first word of a window pays no separator
        before = ends[start - 1] if start else 0
        stop = int(np.searchsorted(ends, before + budget, side="right"))
        full = stop < len(words) or ends[-1] - before == budget
        return words[start:stop] if full and stop > start else None

    pairs = []
    for a_start in starts[:1] if first_only else starts:
        a = window(a_start, window_tokens)
        if a is None:
            continue
        a_last_section = int(np.searchsorted(starts, a_start + len(a) - 1, side="right")) - 1
        for b_start in reversed(starts[a_last_section + 1 :]):
            b = window(b_start, window_tokens if far_window_tokens is None else far_window_tokens)
            if b is not None:
                pairs.append((a, b))
                if first_only:
                    return pairs
    return pairs


def far_windows(
    article: Article,
    costs: dict[str, int],
    *,
    window_tokens: int,
    far_window_tokens: int | None = None,
    separator: int = 0,
) -> tuple[list[str], list[str]] | None:
    """(A, B): the article's first window and its last window that starts at a section boundary
    after A's last section; None when the article cannot hold both.

    `costs` maps each word to its token count. A holds at most `window_tokens` tokens, B at most
    `far_window_tokens` (default: `window_tokens`).
    """
    pairs = window_pairs(article, costs, window_tokens=window_tokens,
                         far_window_tokens=far_window_tokens, separator=separator,
                         first_only=True)  # fmt: skip
    return pairs[0] if pairs else None


def window_budgets(
    n_articles: int, *, min_window_tokens: int, window_tokens: int, seed: int
) -> np.ndarray:
    """int64 [n_articles, 2]: article i's (A, B) token budgets, each uniform over the integers
    [min_window_tokens, window_tokens].

    Row i comes from its own generator, keyed by (seed, i): it is the same whatever the other
    articles are or in which order they are processed. Equal bounds give that value everywhere
    (no draw), so fixed-length windows are exactly those of a single `window_tokens`.
    """
    if min_window_tokens < 1 or min_window_tokens > window_tokens:
        raise ValueError(
            f"window budgets [{min_window_tokens}, {window_tokens}]: need 1 <= "
            f"min_window_tokens ({min_window_tokens}) <= window_tokens ({window_tokens})"
        )
    if min_window_tokens == window_tokens:
        return np.full((n_articles, 2), window_tokens, np.int64)
    return np.array(
        [np.random.default_rng([seed, _BUDGET_STREAM, i]).integers(
            min_window_tokens, window_tokens, size=2, endpoint=True)
         for i in range(n_articles)],
        np.int64,
    ).reshape(n_articles, 2)  # fmt: skip


def tfidf_vectors(texts: Sequence[str]) -> sparse.csr_matrix:
    """float64 [T, V]: the L2-normalized TF-IDF rows of `texts` over their own vocabulary.

    Terms are lowercased words of 2+ characters; tf = 1 + ln(count) and idf = ln((1 + T) /
    (1 + df)) + 1, as scikit-learn's TfidfVectorizer(sublinear_tf=True) computes them.
    Sublinear tf keeps "the" (hundreds of times in every long article) from drowning the
    topical words. A text without terms is a row of zeros.
    """
    n = len(texts)
    vocab, rows, cols = {}, [], []
    for i, text in enumerate(texts):
        for term in _TERM.findall(text.lower()):
            rows.append(i)
            cols.append(vocab.setdefault(term, len(vocab)))
    counts = sparse.csr_matrix(
        (np.ones(len(cols)), (rows, cols)), shape=(n, max(len(vocab), 1)), dtype=np.float64
    )
    counts.sum_duplicates()
    counts.data = 1 + np.log(counts.data)
    df = np.bincount(counts.indices, minlength=counts.shape[1])
    x = counts.multiply(np.log((1 + n) / (1 + df)) + 1).tocsr()
    norms = np.sqrt(np.asarray(x.multiply(x).sum(axis=1)).ravel())
    return (sparse.diags(1 / np.where(norms > 0, norms, 1)) @ x).tocsr()


def tfidf_nearest(texts: Sequence[str]) -> np.ndarray:
    """For each text, the index of the most similar other text by TF-IDF cosine
    (`tfidf_vectors`). Ties go to the lowest index. Needs two or more texts."""
    n = len(texts)
    if n < 2:
        raise ValueError(f"{n} text(s): a nearest other text needs at least 2")
    x = tfidf_vectors(texts)
    similarity = (x @ x.T).toarray()
    np.fill_diagonal(similarity, -np.inf)
    return np.argmax(similarity, axis=1)  # argmax takes the first of equal maxima


def split_articles(
    articles: Sequence[Article], *, fractions: Sequence[float] | None, seed: int
) -> list[list[int]]:
    """Article indices of each split (train, valid, test), each list in article order.

    `fractions` (three, summing to 1) cut a seeded permutation; None puts each article in the
    split of its source file (source i -> split i), e.g. WikiText's train/valid/test files.
    """
    if fractions is None:
        sources = {a.source for a in articles}
        if sources - {0, 1, 2} or len(sources) < len(SPLITS):
            raise ValueError(
                f"splits by source need 3 source files (train, valid, test) with articles; "
                f"articles came from source(s) {sorted(sources)}; or give split fractions"
            )
        return [[i for i, a in enumerate(articles) if a.source == s] for s in range(len(SPLITS))]
    if len(fractions) != len(SPLITS) or min(fractions) < 0 or abs(sum(fractions) - 1) > 1e-6:
        raise ValueError(f"split fractions {list(fractions)} are not 3 non-negatives summing to 1")
    order = np.random.default_rng(seed).permutation(len(articles))
    cuts = np.round(np.cumsum(fractions)[:-1] * len(articles)).astype(int)
    return [sorted(part.tolist()) for part in np.split(order, cuts)]


def build_task(
    articles: Sequence[Article],
    *,
    measure: Measure,
    window_tokens: int,
    seed: int,
    fractions: Sequence[float] | None = (0.8, 0.1, 0.1),
    min_window_tokens: int | None = None,
    pairs_per_article: int = 1,
    positive: str = "far",
) -> tuple[dict[str, list[dict]], dict]:
    """Triplets of each split (one per article that holds two windows) and their statistics.

    Each article's A and B windows get budgets from `window_budgets` (seeded by `seed`, between
    `min_window_tokens`, default `window_tokens`, and `window_tokens`); C is the negative
    article's B, with its budget. Articles too short for their two windows are left out
    (counted in the stats) before splitting. Raises ValueError for a bad budget range, and when
    a split ends up with fewer than 2 such articles (C needs another article of the same
    split), naming the longest article so the window size can be chosen.

    Two options make pilots, not the task (the defaults leave it as above):
    pairs_per_article k > 1: up to k triplets per article, more training pairs from the same
      articles: the far pair, then k - 1 other `window_pairs` of the article drawn without
      replacement (seeded by (seed, article)); the negative of an article's j-th triplet is
      the B of its nearest article's j-th pair (cycling through fewer).
    positive "copy": the positive choice is A itself, a control any encoder that can compare
      two texts must learn.
    """
    if window_tokens < 1:
        raise ValueError(f"window_tokens {window_tokens} must be at least 1")
    if pairs_per_article < 1:
        raise ValueError(f"pairs_per_article {pairs_per_article} must be at least 1")
    if positive not in POSITIVES:
        raise ValueError(f"positive {positive!r} is not one of {POSITIVES}")
    if min_window_tokens is None:
        min_window_tokens = window_tokens
    budgets = window_budgets(
        len(articles), min_window_tokens=min_window_tokens, window_tokens=window_tokens, seed=seed
    )
    sizes = (f"{window_tokens}" if min_window_tokens == window_tokens
             else f"{min_window_tokens} to {window_tokens}")  # fmt: skip
    if len(articles) < len(SPLITS) * 2:
        raise ValueError(
            f"{len(articles)} article(s) found; 3 splits of at least 2 articles need 6 or more "
            "(check the format: WikiText titles are ' = Title = ' lines)"
        )
    vocab = sorted({w for a in articles for s in a.sections for w in s})
    costs = dict(zip(vocab, measure.cost(vocab)))
    windows = [
        far_windows(a, costs, window_tokens=int(na), far_window_tokens=int(nb),
                    separator=measure.separator)
        for a, (na, nb) in zip(articles, budgets)
    ]  # fmt: skip
    fit = [i for i, w in enumerate(windows) if w is not None]
    pairs = {i: [windows[i]] for i in fit}
    if pairs_per_article > 1:
        for i in fit:
            others = window_pairs(articles[i], costs, window_tokens=int(budgets[i, 0]),
                                  far_window_tokens=int(budgets[i, 1]),
                                  separator=measure.separator)[1:]  # fmt: skip
            n = min(pairs_per_article - 1, len(others))
            drawn = np.random.default_rng([seed, _PAIR_STREAM, i]).choice(
                len(others), n, replace=False
            )
            pairs[i] += [others[d] for d in sorted(drawn)]
    skipped = len(articles) - len(fit)
    splits_of_fit = split_articles([articles[i] for i in fit], fractions=fractions, seed=seed)
    stats = {
        "measure": measure.name,
        "window_tokens": window_tokens,
        "min_window_tokens": min_window_tokens,
        "pairs_per_article": pairs_per_article,
        "positive": positive,
        "seed": seed,
        "articles_read": len(articles),
        "articles_too_short": skipped,
    }
    out = {}
    for s, (split, members) in enumerate(zip(SPLITS, splits_of_fit)):
        members = [fit[j] for j in members]
        if len(members) < 2:
            longest = max(sum(costs[w] for w in a.words) for a in articles)
            raise ValueError(
                f"split {split!r} has {len(members)} article(s) that hold two windows of "
                f"{sizes} tokens ({skipped} of {len(articles)} articles are too short; "
                f"the longest has {longest} tokens); lower window_tokens or give more text"
            )
        nearest = tfidf_nearest([_topic_text(articles[i]) for i in members])
        chosen = []  # (article, A, positive, negative, negative's article)
        for i, j in zip(members, nearest):
            negatives = pairs[members[j]]
            for k, (a, b) in enumerate(pairs[i]):
                c = negatives[k % len(negatives)][1]
                chosen.append((i, a, a if positive == "copy" else b, c, members[j]))
        labels = np.resize(np.array(["B", "C"]), len(chosen))
        labels = np.random.default_rng([seed, s]).permutation(labels)
        rows = []
        for k, ((i, a, b, c, j), label) in enumerate(zip(chosen, labels)):
            pos, neg = " ".join(b), " ".join(c)
            rows.append(
                {
                    "id": f"{split}-{k:05d}",
                    "A": " ".join(a),
                    "B": pos if label == "B" else neg,
                    "C": neg if label == "B" else pos,
                    "label": str(label),
                    "article": articles[i].title,
                    "negative_article": articles[j].title,
                }
            )
        lengths = [_window_cost(w, costs, measure.separator) for t in rows for w in _windows(t)]
        stats[split] = {
            "articles": len(members),
            "triplets": len(rows),
            "window_tokens": {
                "mean": round(float(np.mean(lengths)), 1),
                "min": int(min(lengths)),
                "max": int(max(lengths)),
            },
        }
        out[split] = rows
    return out, stats


def build_from_sources(
    sources: Sequence[str],
    *,
    format: str,
    tokenizer: str = "wordpiece",
    window_tokens: int = 450,
    seed: int = 0,
    fractions: Sequence[float] | None = (0.8, 0.1, 0.1),
    span_words: int = 3000,
    vocab_size: int = 8192,
    **options,
) -> tuple[dict[str, list[dict]], dict, Measure]:
    """`build_task` on the articles of `sources` (`read_articles`), tokens counted by the
    `named_measure` of `tokenizer`: (splits, stats that also name the sources, that measure).
    `options` go to `build_task` (min_window_tokens, pairs_per_article, positive).
    What experiments/build_long_doc_task.py and the long-document study build."""
    articles = read_articles(sources, format=format, span_words=span_words)
    measure = named_measure(tokenizer, [" ".join(a.words) for a in articles],
                            vocab_size=vocab_size)  # fmt: skip
    splits, stats = build_task(
        articles, measure=measure, window_tokens=window_tokens, seed=seed, fractions=fractions,
        **options,
    )  # fmt: skip
    return splits, {**stats, "sources": list(sources)}, measure


def pair_views(triplets: Sequence[dict], measure: Measure, max_length: int) -> list[dict]:
    """What a pair encoder of `max_length` tokens reads of each triplet, as whole words.

    It reads [CLS] A [SEP] X [SEP] for X = B and X = C, each pair cut to max_length - 3 tokens
    by tasks.pair_budgets (the longer side gives up its tail first), as the fine-tuning
    encoding cuts it; a word cut inside is dropped. Rows keep "label" and hold the cut "B"
    and "C", and A as each pair reads it, "A_for_B" and "A_for_C" (a short partner leaves A
    more room). `measure` counts tokens, as the task was built (exact for WordPiece).
    """
    vocab = sorted({w for t in triplets for k in ("A", "B", "C") for w in t[k].split()})
    costs = dict(zip(vocab, measure.cost(vocab)))

    def tokens_so_far(text: str) -> tuple[list[str], np.ndarray]:
        """The words, and the tokens up to each word included (first word: no separator)."""
        words = text.split()
        ends = np.cumsum([costs[w] + measure.separator for w in words], dtype=np.int64)
        return words, ends - measure.separator

    def head(words: list[str], ends: np.ndarray, tokens: int) -> str:
        return " ".join(words[: int(np.searchsorted(ends, tokens, side="right"))])

    rows = []
    for t in triplets:
        (a, a_ends), row = tokens_so_far(t["A"]), {"label": t["label"]}
        for side in ("B", "C"):
            x, x_ends = tokens_so_far(t[side])
            total_a, total_x = (int(e[-1]) if len(e) else 0 for e in (a_ends, x_ends))
            keep_a, keep_x = tasks.pair_budgets(total_a, total_x, max_length - 3)
            row[f"A_for_{side}"], row[side] = head(a, a_ends, keep_a), head(x, x_ends, keep_x)
        rows.append(row)
    return rows


def multiple_choice_examples(triplets: Sequence[dict]) -> list[dict]:
    """The triplets as data/tasks.py's multiple choice: context A, choices [B, C], label 0 for
    B and 1 for C. The model then scores [CLS] A [SEP] B [SEP] and [CLS] A [SEP] C [SEP], and
    is right when the true pair scores higher, as the blog's CAIL script scores them."""
    return [
        {"id": t["id"], "context": t["A"], "choices": [t["B"], t["C"]],
         "label": ("B", "C").index(t["label"])}
        for t in triplets
    ]  # fmt: skip


def choices_path(directory: str, split: str) -> str:
    """Where `write_task` puts a split's triplets as multiple choice."""
    return os.path.join(directory, "choices", f"{split}.jsonl")


def _topic_text(article: Article) -> str:
    return " ".join(w for w in article.words if w != _UNKNOWN)


def _windows(row: dict) -> list[list[str]]:
    return [row[k].split(" ") for k in ("A", "B", "C")]


def _window_cost(words: Sequence[str], costs: dict[str, int], separator: int) -> int:
    return sum(costs[w] for w in words) + separator * (len(words) - 1)


def write_task(directory: str, splits: dict[str, list[dict]], stats: dict) -> list[str]:
    """Writes {split}.jsonl (one triplet per line, keys in a fixed order), the same triplets
    as multiple choice in choices/{split}.jsonl (`multiple_choice_examples`: what
    experiments/finetune.py reads with --config.task.format=multiple_choice), and stats.json
    last, so a directory with stats.json is whole.

    Returns the paths written. The bytes depend only on the arguments.
    """
    os.makedirs(os.path.join(directory, "choices"), exist_ok=True)
    paths = []
    for split, rows in splits.items():
        choices = multiple_choice_examples(rows)
        for path, lines in ((os.path.join(directory, f"{split}.jsonl"), rows),
                            (choices_path(directory, split), choices)):  # fmt: skip
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
            paths.append(path)
    path = os.path.join(directory, "stats.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    return paths + [path]
