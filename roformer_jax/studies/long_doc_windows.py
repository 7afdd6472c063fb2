"""The long-document task's windows: runs of whole words cut from an article at section starts.

Windows are runs of whole words whose token count is at most the budget and more than the budget
minus the next word's count. A pair (A, B) shares no section: B starts at a section after A's
last one (`window_pairs`); the task's pair is the first window and the farthest such B
(`far_windows`). Each article's two budgets are drawn by a generator keyed by (seed, the
article's index), so they do not depend on the other articles or the order of work
(`window_budgets`).
"""

from __future__ import annotations

import numpy as np

from roformer_jax.studies.long_doc_articles import Article

# Keys the budgets' generators ([seed, _BUDGET_STREAM, article]) apart from those of the task's
# labels ([seed, split]) and extra window pairs (long_doc_task: [seed, 2, article]).
_BUDGET_STREAM = 1


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
    pairs = window_pairs(
        article,
        costs,
        window_tokens=window_tokens,
        far_window_tokens=far_window_tokens,
        separator=separator,
        first_only=True,
    )
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
        [
            np.random.default_rng([seed, _BUDGET_STREAM, i]).integers(
                min_window_tokens, window_tokens, size=2, endpoint=True
            )
            for i in range(n_articles)
        ],
        np.int64,
    ).reshape(n_articles, 2)
