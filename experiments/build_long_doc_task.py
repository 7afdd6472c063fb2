"""Builds the offline long-document matching task (a CAIL2019-SCM stand-in) from local text.

    python experiments/build_long_doc_task.py --format=wikitext --splits=sources \
        --source=DATA/wikitext-2/train.txt,DATA/wikitext-2/valid.txt,DATA/wikitext-2/test.txt \
        --out=/tmp/long_doc_task_wikitext2 --bow_lengths=512,1024,1536
    python experiments/build_long_doc_task.py --format=paragraphs --span_words=3000 \
        --source=DATA/war-and-peace/input.txt --out=/tmp/long_doc_task_war_and_peace

Writes train/valid/test.jsonl ({"id", "A", "B", "C", "label", "article", "negative_article"}),
the same as multiple choice in choices/ (for experiments/finetune.py) and stats.json into
--out, and prints the stats (with --bow_lengths, also the bag-of-words baseline's accuracies:
how lexical the task is). The same files and flags give the same bytes. See
roformer_jax/data/long_doc_task.py for how triplets are chosen.
"""

import json

from absl import flags

from roformer_jax.studies import long_doc_study, long_doc_task
from roformer_jax.training import runtime

_SOURCE = flags.DEFINE_list("source", None, "Text files (or globs/directories), in order.")
_FORMAT = flags.DEFINE_enum(
    "format",
    "wikitext",
    ["wikitext", "paragraphs"],
    "wikitext: ' = Title = ' articles, ' = = Heading = = ' sections. paragraphs: blank-line "
    "separated paragraphs grouped into spans of --span_words words (books).",
)
_SPAN_WORDS = flags.DEFINE_integer("span_words", 3000, "Words per span for --format=paragraphs.")
_OUT = flags.DEFINE_string("out", None, "Output directory.")
_SEED = flags.DEFINE_integer(
    "seed", 0, "Seeds the article split, the B/C placement and the window budgets."
)
_WINDOW_TOKENS = flags.DEFINE_integer("window_tokens", 450, "Tokens per window, at most.")
_MIN_WINDOW_TOKENS = flags.DEFINE_integer(
    "min_window_tokens",
    None,
    "If set, each article's A and B budgets are drawn (seeded) from the integers "
    "[--min_window_tokens, --window_tokens], so window lengths vary; default: --window_tokens "
    "(every window the same budget).",
)
_TOKENIZER = flags.DEFINE_string(
    "tokenizer",
    "wordpiece",
    "What a window's tokens are: 'wordpiece' (trained on the source), 'bytes', 'words' "
    "(whitespace), or the path of a BERT vocab.txt.",
)
_VOCAB_SIZE = flags.DEFINE_integer("vocab_size", 8192, "Vocabulary of --tokenizer=wordpiece.")
_SPLITS = flags.DEFINE_list(
    "splits",
    ["0.8", "0.1", "0.1"],
    "train,valid,test fractions of the articles, or 'sources': source file i is split i.",
)
_PAIRS_PER_ARTICLE = flags.DEFINE_integer(
    "pairs_per_article",
    1,
    "A pilot, not the task: up to this many triplets per article (the far pair, then other "
    "window pairs drawn): more training pairs from the same articles.",
)
_POSITIVE = flags.DEFINE_enum(
    "positive",
    "far",
    list(long_doc_task.POSITIVES),
    "far: the positive is a far window of A's article (the task). copy: A itself, a control "
    "that any encoder able to compare two texts learns.",
)
_BOW_LENGTHS = flags.DEFINE_list(
    "bow_lengths",
    [],
    "Also fit and print the bag-of-words baseline (roformer_jax/bow_baseline.py) on the whole "
    "windows and on what a pair encoder of each of these max lengths reads: how lexical the "
    "task is, and whether a short input already holds the evidence.",
)


def main(argv):
    del argv
    fractions = None if _SPLITS.value == ["sources"] else [float(f) for f in _SPLITS.value]
    splits, stats, measure = long_doc_task.build_from_sources(
        _SOURCE.value,
        format=_FORMAT.value,
        tokenizer=_TOKENIZER.value,
        window_tokens=_WINDOW_TOKENS.value,
        seed=_SEED.value,
        fractions=fractions,
        span_words=_SPAN_WORDS.value,
        vocab_size=_VOCAB_SIZE.value,
        min_window_tokens=_MIN_WINDOW_TOKENS.value,
        pairs_per_article=_PAIRS_PER_ARTICLE.value,
        positive=_POSITIVE.value,
    )
    print(json.dumps(stats, indent=1, sort_keys=True))
    print("wrote", *long_doc_task.write_task(_OUT.value, splits, stats))
    if _BOW_LENGTHS.value:
        views = {"whole windows": splits} | {
            f"what {n} tokens read": {
                k: long_doc_task.pair_views(v, measure, int(n)) for k, v in splits.items()
            }
            for n in _BOW_LENGTHS.value
        }
        for name, view in views.items():
            scores = long_doc_study.bow_scores(view)
            print(
                f"bag of words, {name}: valid {scores['valid/accuracy']:.3f}, "
                f"test {scores['test/accuracy']:.3f}"
            )


if __name__ == "__main__":
    flags.mark_flags_as_required(["source", "out"])
    runtime.run_main(main)
