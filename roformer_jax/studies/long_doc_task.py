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

The articles and their token counts are long_doc_articles' (read_articles, word_measure), the
windows long_doc_windows' (far_windows, window_pairs, window_budgets), and the nearest article
tfidf's (tfidf_nearest); this module builds the triplets from them and writes the task.
"""

from __future__ import annotations

import json
import os
from collections.abc import Sequence

import numpy as np

from roformer_jax.data import tasks
from roformer_jax.studies.long_doc_articles import Article, Measure, named_measure, read_articles
from roformer_jax.studies.long_doc_windows import far_windows, window_budgets, window_pairs
from roformer_jax.studies.tfidf import tfidf_nearest

SPLITS = ("train", "valid", "test")
_UNKNOWN = "<unk>"  # WikiText's out-of-vocabulary marker: frequent, and says nothing of a topic
_PAIR_STREAM = 2  # keys the extra window pairs' generators ([seed, _PAIR_STREAM, article])
POSITIVES = ("far", "copy")


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
    _check_options(window_tokens, pairs_per_article, positive)
    if min_window_tokens is None:
        min_window_tokens = window_tokens
    budgets = window_budgets(
        len(articles), min_window_tokens=min_window_tokens, window_tokens=window_tokens, seed=seed
    )
    _check_article_count(len(articles))
    vocab = sorted({w for a in articles for s in a.sections for w in s})
    costs = dict(zip(vocab, measure.cost(vocab)))
    pairs = _article_pairs(
        articles, costs, budgets, measure.separator, pairs_per_article=pairs_per_article, seed=seed
    )
    fit = list(pairs)  # the articles that hold their two windows, in article order
    splits = _split_fit(articles, fit, fractions=fractions, seed=seed)
    sizes = (min_window_tokens, window_tokens)
    _check_splits(splits, articles, costs, skipped=len(articles) - len(fit), sizes=sizes)
    stats = {
        "measure": measure.name,
        "window_tokens": window_tokens,
        "min_window_tokens": min_window_tokens,
        "pairs_per_article": pairs_per_article,
        "positive": positive,
        "seed": seed,
        "articles_read": len(articles),
        "articles_too_short": len(articles) - len(fit),
    }
    out = {}
    for s, (split, members) in enumerate(zip(SPLITS, splits)):
        out[split] = _triplets(split, s, members, articles, pairs, positive=positive, seed=seed)
        stats[split] = _split_stats(out[split], len(members), costs, measure.separator)
    return out, stats


def _check_options(window_tokens: int, pairs_per_article: int, positive: str) -> None:
    if window_tokens < 1:
        raise ValueError(f"window_tokens {window_tokens} must be at least 1")
    if pairs_per_article < 1:
        raise ValueError(f"pairs_per_article {pairs_per_article} must be at least 1")
    if positive not in POSITIVES:
        raise ValueError(f"positive {positive!r} is not one of {POSITIVES}")


def _check_article_count(n_articles: int) -> None:
    if n_articles < len(SPLITS) * 2:
        raise ValueError(
            f"{n_articles} article(s) found; 3 splits of at least 2 articles need 6 or more "
            "(check the format: WikiText titles are ' = Title = ' lines)"
        )


Pair = tuple[list[str], list[str]]  # (A, B): two windows of one article, as words


def _article_pairs(
    articles: Sequence[Article],
    costs: dict[str, int],
    budgets: np.ndarray,
    separator: int,
    *,
    pairs_per_article: int,
    seed: int,
) -> dict[int, list[Pair]]:
    """{article index: its pairs} of the articles that hold their two windows (budgets: int64
    [n_articles, 2], their A and B budgets), in article order: the far pair, then up to
    pairs_per_article - 1 other `window_pairs` drawn without replacement, seeded by
    (seed, article)."""
    windows = [
        far_windows(a, costs, window_tokens=int(na), far_window_tokens=int(nb), separator=separator)
        for a, (na, nb) in zip(articles, budgets)
    ]
    pairs = {i: [w] for i, w in enumerate(windows) if w is not None}
    if pairs_per_article > 1:
        for i in pairs:
            others = window_pairs(
                articles[i],
                costs,
                window_tokens=int(budgets[i, 0]),
                far_window_tokens=int(budgets[i, 1]),
                separator=separator,
            )[1:]
            n = min(pairs_per_article - 1, len(others))
            drawn = np.random.default_rng([seed, _PAIR_STREAM, i]).choice(
                len(others), n, replace=False
            )
            pairs[i] += [others[d] for d in sorted(drawn)]
    return pairs


def _split_fit(
    articles: Sequence[Article], fit: list[int], *, fractions: Sequence[float] | None, seed: int
) -> list[list[int]]:
    """`split_articles` of the articles that hold their two windows (`fit`, indices into
    `articles`): each split's members as indices into `articles`."""
    kept = [articles[i] for i in fit]
    return [
        [fit[j] for j in members]
        for members in split_articles(kept, fractions=fractions, seed=seed)
    ]


def _check_splits(
    splits: Sequence[list[int]],
    articles: Sequence[Article],
    costs: dict[str, int],
    *,
    skipped: int,
    sizes: tuple[int, int],
) -> None:
    """ValueError for the first split with fewer than 2 articles (C needs another article of
    the same split), naming the longest article so that the window size can be chosen.
    sizes: (min_window_tokens, window_tokens)."""
    for split, members in zip(SPLITS, splits):
        if len(members) < 2:
            longest = max(sum(costs[w] for w in a.words) for a in articles)
            low, high = sizes
            windows = f"{high}" if low == high else f"{low} to {high}"
            raise ValueError(
                f"split {split!r} has {len(members)} article(s) that hold two windows of "
                f"{windows} tokens ({skipped} of {len(articles)} articles are too short; "
                f"the longest has {longest} tokens); lower window_tokens or give more text"
            )


def _triplets(
    split: str,
    index: int,
    members: Sequence[int],
    articles: Sequence[Article],
    pairs: dict[int, list[Pair]],
    *,
    positive: str,
    seed: int,
) -> list[dict]:
    """The rows of split number `index`: each member's pairs, the negative of its j-th the B of
    its TF-IDF-nearest member's j-th pair (cycling through fewer), the positive in B or C by
    a seeded shuffle of an exactly balanced list."""
    nearest = tfidf_nearest([_topic_text(articles[i]) for i in members])
    chosen = []  # (article, A, positive, negative, negative's article)
    for i, j in zip(members, nearest):
        negatives = pairs[members[j]]
        for k, (a, b) in enumerate(pairs[i]):
            c = negatives[k % len(negatives)][1]
            chosen.append((i, a, a if positive == "copy" else b, c, members[j]))
    labels = np.resize(np.array(["B", "C"]), len(chosen))
    labels = np.random.default_rng([seed, index]).permutation(labels)
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
    return rows


def _split_stats(rows: list[dict], articles: int, costs: dict[str, int], separator: int) -> dict:
    lengths = [_window_cost(w, costs, separator) for t in rows for w in _windows(t)]
    return {
        "articles": articles,
        "triplets": len(rows),
        "window_tokens": {
            "mean": round(float(np.mean(lengths)), 1),
            "min": int(min(lengths)),
            "max": int(max(lengths)),
        },
    }


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
    measure = named_measure(tokenizer, [" ".join(a.words) for a in articles], vocab_size=vocab_size)
    splits, stats = build_task(
        articles,
        measure=measure,
        window_tokens=window_tokens,
        seed=seed,
        fractions=fractions,
        **options,
    )
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
        {
            "id": t["id"],
            "context": t["A"],
            "choices": [t["B"], t["C"]],
            "label": ("B", "C").index(t["label"]),
        }
        for t in triplets
    ]


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
        for path, lines in (
            (os.path.join(directory, f"{split}.jsonl"), rows),
            (choices_path(directory, split), choices),
        ):
            with open(path, "w", encoding="utf-8", newline="\n") as f:
                f.writelines(json.dumps(line, ensure_ascii=False) + "\n" for line in lines)
            paths.append(path)
    path = os.path.join(directory, "stats.json")
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.write(json.dumps(stats, indent=1, sort_keys=True) + "\n")
    return paths + [path]
