"""Tests for roformer_jax/studies/long_doc_task.py, on small WikiText-style text the tests
write; what it builds from has its own tests (long_doc_articles_test.py,
long_doc_windows_test.py, tfidf_test.py)."""

import collections
import hashlib
import json
import os
import re
import shutil

import tiny
from absl.testing import absltest, parameterized

from roformer_jax.data.tokenizer import ByteTokenizer, train_wordpiece
from roformer_jax.studies import long_doc_task as ldt
from roformer_jax.studies.long_doc_articles import (
    Measure,
    named_measure,
    read_articles,
    word_measure,
)
from roformer_jax.studies.long_doc_windows import window_budgets

_TAG = re.compile(r"^a(\d+)s(\d+)$")  # body words "a{article}s{section}" say where they came from


def wikitext(n_articles: int, *, sections: int = 3, words: int = 24) -> str:
    """Articles in WikiText's layout. Articles 2m and 2m+1 share the topic words of topic m, so
    each one's TF-IDF nearest neighbour is its twin. Titles and headings hold "Marker" words."""
    lines = []
    for k in range(n_articles):
        lines += ["", f" = TitleMarker{k} = ", ""]
        for s in range(sections + 1):  # section 0 is the lead, before the first heading
            if s:
                lines += ["", f" = = HeadingMarker{k}x{s} = = ", ""]
            body = [f"a{k}s{s}" if i % 4 == 0 else f"t{k // 2}w{i % 7}" for i in range(words)]
            lines.append(" " + " ".join(body + ["the", "of"]) + " ")
    return "\n".join(lines) + "\n"


def places(text: str) -> set[tuple[int, int]]:
    """The (article, section) pairs a window's words came from (see `wikitext`)."""
    return {tuple(map(int, _TAG.match(w).groups())) for w in text.split() if _TAG.match(w)}


class LongDocTaskTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tiny.workdir()
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, text):
        path = os.path.join(self.dir, name)
        with open(path, "w", encoding="utf-8") as f:
            f.write(text)
        return path

    def build(self, sources, *, seed=0, window_tokens=30, fractions=None, measure=None, **kwargs):
        articles = read_articles(sources, format="wikitext")
        return ldt.build_task(
            articles,
            measure=measure or word_measure(None),
            window_tokens=window_tokens,
            seed=seed,
            fractions=fractions,
            **kwargs,
        )

    def sources(self, per_split=(8, 4, 4)):
        """One file per split; twins stay in one split, so their negatives are each other."""
        text, start = wikitext(sum(per_split)), 0
        blocks = re.split(r"(?=\n = TitleMarker)", text)[1:]
        paths = []
        for name, n in zip(ldt.SPLITS, per_split):
            paths.append(self.write(f"{name}.txt", "".join(blocks[start : start + n])))
            start += n
        return paths

    def test_triplets_come_from_the_right_places(self):
        splits, stats = self.build(self.sources())
        articles_of = {}
        for split, rows in splits.items():
            self.assertLen(rows, stats[split]["triplets"])
            for row in rows:
                self.assertNotIn("Marker", row["A"] + row["B"] + row["C"])  # no title/heading
                tags = {key: places(row[key]) for key in "ABC"}
                pos_key = row["label"]
                neg_key = "C" if pos_key == "B" else "B"
                k = int(row["article"].removeprefix("TitleMarker"))
                self.assertEqual({a for a, _ in tags["A"]}, {k})
                self.assertEqual({a for a, _ in tags[pos_key]}, {k})
                self.assertEmpty({s for _, s in tags["A"]} & {s for _, s in tags[pos_key]})
                (j,) = {a for a, _ in tags[neg_key]}
                self.assertNotEqual(j, k)
                self.assertEqual(row["negative_article"], f"TitleMarker{j}")
                self.assertEqual(j, k ^ 1)  # the twin: the TF-IDF nearest article
                articles_of.setdefault(split, set()).add(k)
                articles_of[split].add(j)
        self.assertEqual(sum(map(len, articles_of.values())), 16)  # splits share no article

    @parameterized.parameters(0, 1, 2)
    def test_random_splits_are_disjoint_and_negatives_stay_inside(self, seed):
        splits, stats = self.build(
            self.sources((20, 0, 0))[:1], seed=seed, fractions=[0.6, 0.2, 0.2]
        )
        members = {s: {row["article"] for row in rows} for s, rows in splits.items()}
        self.assertEqual([len(members[s]) for s in ldt.SPLITS], [12, 4, 4])
        self.assertLen(set().union(*members.values()), 20)
        for split, rows in splits.items():
            for row in rows:
                self.assertIn(row["negative_article"], members[split])
                negative = row["C"] if row["label"] == "B" else row["B"]
                j = row["negative_article"].removeprefix("TitleMarker")
                self.assertTrue(
                    all(w.startswith(f"a{j}s") for w in negative.split() if w[0] == "a")
                )

    def test_labels_are_balanced_and_seeded(self):
        per_seed = []
        for seed in range(4):
            splits, _ = self.build(self.sources((16, 6, 6)), seed=seed)
            labels = [row["label"] for row in splits["train"]]
            counts = collections.Counter(labels)
            self.assertLessEqual(abs(counts["B"] - counts["C"]), 1)
            per_seed.append(labels)
        self.assertGreater(len({tuple(x) for x in per_seed}), 1)  # the placement is random

    @parameterized.parameters(40, 15)
    def test_same_inputs_give_the_same_bytes(self, min_window_tokens):
        sources = self.sources()
        outputs = []
        for seed in (0, 0, 1):
            articles = read_articles(sources, format="wikitext")
            texts = [" ".join(a.words) for a in articles]
            measure = named_measure("wordpiece", texts, vocab_size=200)
            splits, stats = ldt.build_task(
                articles,
                measure=measure,
                window_tokens=40,
                seed=seed,
                fractions=(0.5, 0.25, 0.25),
                min_window_tokens=min_window_tokens,
            )
            out = os.path.join(self.dir, f"out{len(outputs)}")
            outputs.append(
                {
                    os.path.relpath(p, out): open(p, "rb").read()
                    for p in ldt.write_task(out, splits, stats)
                }
            )
        self.assertEqual(outputs[0], outputs[1])
        self.assertNotEqual(outputs[0], outputs[2])
        row = json.loads(outputs[0]["train.jsonl"].splitlines()[0])
        self.assertEqual(list(row), ["id", "A", "B", "C", "label", "article", "negative_article"])
        choice = json.loads(outputs[0][os.path.join("choices", "train.jsonl")].splitlines()[0])
        expected = {
            "id": row["id"],
            "context": row["A"],
            "choices": [row["B"], row["C"]],
            "label": "BC".index(row["label"]),
        }
        self.assertEqual(choice, expected)

        def a_of(output):  # each article's A, wherever the seed's split put it
            rows = [
                json.loads(line) for s in ldt.SPLITS for line in output[f"{s}.jsonl"].splitlines()
            ]
            return {row["article"]: row["A"] for row in rows}

        # Fixed windows do not depend on the seed; drawn budgets do.
        self.assertEqual(a_of(outputs[0]) == a_of(outputs[2]), min_window_tokens == 40)

    def test_window_lengths_are_the_drawn_budgets(self):
        # One word is one token, and every section holds 26 words, so every window is exactly
        # its budget long: A's and B's those of their article, C's the negative article's B.
        sources = self.sources()
        splits, stats = self.build(sources, window_tokens=30, min_window_tokens=12)
        budgets = window_budgets(16, min_window_tokens=12, window_tokens=30, seed=0)
        lengths = []
        for split, rows in splits.items():
            in_split = []
            for row in rows:
                k = int(row["article"].removeprefix("TitleMarker"))  # its index as read
                j = int(row["negative_article"].removeprefix("TitleMarker"))
                pos, neg = (row["B"], row["C"]) if row["label"] == "B" else (row["C"], row["B"])
                got = [len(row["A"].split()), len(pos.split()), len(neg.split())]
                self.assertEqual(got, [budgets[k, 0], budgets[k, 1], budgets[j, 1]])
                in_split += got
            self.assertEqual(stats[split]["window_tokens"]["min"], min(in_split))
            self.assertEqual(stats[split]["window_tokens"]["max"], max(in_split))
            lengths += in_split
        self.assertBetween(min(lengths), 12, 30)
        self.assertBetween(max(lengths), 12, 30)
        self.assertGreaterEqual(len(set(lengths)), 8)  # they vary (48 windows, 19 lengths)
        self.assertEqual((stats["min_window_tokens"], stats["window_tokens"]), (12, 30))

    @parameterized.parameters(None, 150)
    def test_equal_bounds_are_the_fixed_windows_of_before(self, min_window_tokens):
        # The bytes of the triplets that the builder wrote before budgets were drawn (commit
        # 8123ce0, window_tokens=150 only): min_window_tokens = window_tokens changes nothing.
        path = self.write("all.txt", wikitext(16))
        splits, stats = self.build(
            [path],
            window_tokens=150,
            fractions=(0.5, 0.25, 0.25),
            measure=word_measure(ByteTokenizer()),
            min_window_tokens=min_window_tokens,
        )
        text = "".join(
            json.dumps(r, ensure_ascii=False) + "\n" for s in ldt.SPLITS for r in splits[s]
        )
        self.assertEqual(
            hashlib.sha256(text.encode()).hexdigest(),
            "190a407944eb8ded039b3b82aee9420da7058c6a7b15f9ec2a58d047712a44a9",
        )
        self.assertEqual(stats["min_window_tokens"], 150)

    @parameterized.parameters("wordpiece", "bytes")
    def test_windows_hold_at_most_window_tokens(self, kind):
        sources = self.sources()
        articles = read_articles(sources, format="wikitext")
        texts = [" ".join(a.words) for a in articles]
        tok = train_wordpiece(texts, vocab_size=200) if kind == "wordpiece" else ByteTokenizer()
        window = 40 if kind == "wordpiece" else 150
        splits, stats = ldt.build_task(
            articles, measure=word_measure(tok), window_tokens=window, seed=0, fractions=None
        )
        for split, rows in splits.items():
            lengths = [len(tok.encode(row[k])) for row in rows for k in "ABC"]
            self.assertLessEqual(max(lengths), window)
            self.assertGreater(min(lengths), window - 20)  # "about" window tokens: full windows
            self.assertEqual(stats[split]["window_tokens"]["max"], max(lengths))
            self.assertEqual(stats[split]["window_tokens"]["min"], min(lengths))

    def test_pair_views_cut_each_pair_as_the_encoding_does(self):
        words = lambda prefix, n: " ".join(f"{prefix}{i}" for i in range(n))  # noqa: E731
        row = {"A": words("a", 10), "B": words("b", 4), "C": words("c", 20), "label": "C"}
        (view,) = ldt.pair_views([row], word_measure(None), 3 + 12)  # room 12, 1 token/word
        # The longer side gives up tokens first: (A, B) keeps 8 + 4; (A, C) keeps 6 + 6.
        self.assertEqual(
            view,
            {
                "label": "C",
                "A_for_B": words("a", 8),
                "B": words("b", 4),
                "A_for_C": words("a", 6),
                "C": words("c", 6),
            },
        )
        two = Measure(lambda ws: [2] * len(ws))  # 2 tokens a word: a word cut inside goes
        row = {"A": words("a", 5), "B": words("b", 5), "C": words("c", 5), "label": "B"}
        (view,) = ldt.pair_views([row], two, 3 + 15)  # 10 + 10 tokens cut to 7 + 8
        self.assertEqual((view["A_for_B"], view["B"]), (words("a", 3), words("b", 4)))
        (whole,) = ldt.pair_views([row], two, 3 + 20)
        self.assertEqual((whole["A_for_C"], whole["C"]), (row["A"], row["C"]))

    @parameterized.parameters(4, 10)
    def test_pairs_per_article_adds_other_window_pairs(self, per_article):
        # 4 sections of 26 words, windows of 20: 6 pairs per article (3 + 2 + 1).
        one, _ = self.build(self.sources(), window_tokens=20)
        many, stats = self.build(self.sources(), window_tokens=20, pairs_per_article=per_article)
        expected = min(per_article, 6)
        for split in ldt.SPLITS:
            by_article = collections.defaultdict(list)
            for row in many[split]:
                by_article[row["article"]].append(row)
            self.assertEqual({len(rows) for rows in by_article.values()}, {expected})
            self.assertEqual(stats[split]["triplets"], expected * stats[split]["articles"])
            counts = collections.Counter(row["label"] for row in many[split])
            self.assertLessEqual(abs(counts["B"] - counts["C"]), 1)
            for row in one[split]:  # the task's triplet comes first, the same windows
                first = by_article[row["article"]][0]
                self.assertEqual(
                    {first["A"], first["B"], first["C"]}, {row["A"], row["B"], row["C"]}
                )
            for title, rows in by_article.items():
                k = int(title.removeprefix("TitleMarker"))
                twin = by_article[f"TitleMarker{k ^ 1}"]
                pairs = set()
                for row, twin_row in zip(rows, twin, strict=True):
                    pos = row[row["label"]]
                    neg = row["C" if row["label"] == "B" else "B"]
                    a, b = places(row["A"]), places(pos)
                    self.assertEqual({x for x, _ in a | b}, {k})
                    self.assertLess(max(s for _, s in a), min(s for _, s in b))
                    self.assertEqual(neg, twin_row[twin_row["label"]])  # its j-th pair's B
                    pairs.add((row["A"], pos))
                self.assertLen(pairs, expected)  # drawn without replacement
        self.assertEqual(stats["pairs_per_article"], per_article)

    def test_copy_positive_is_a_itself(self):
        splits, stats = self.build(self.sources(), positive="copy")
        far, _ = self.build(self.sources())
        self.assertEqual(stats["positive"], "copy")
        for split in ldt.SPLITS:
            for row, task_row in zip(splits[split], far[split]):
                self.assertEqual(row[row["label"]], row["A"])
                neg = row["C" if row["label"] == "B" else "B"]
                self.assertEqual(neg, task_row["C" if task_row["label"] == "B" else "B"])

    def test_short_articles_are_left_out_and_counted(self):
        text = wikitext(8) + " = TitleMarker99 = \n short lead only \n"
        path = self.write("train.txt", text)
        _, stats = self.build([path], fractions=[0.5, 0.25, 0.25])
        self.assertEqual(stats["articles_too_short"], 1)
        self.assertEqual(sum(stats[s]["articles"] for s in ldt.SPLITS), 8)

    def test_errors(self):
        path = self.write("train.txt", wikitext(8))
        with self.assertRaisesRegex(ValueError, "lower window_tokens"):
            self.build([path], window_tokens=500, fractions=[0.5, 0.25, 0.25])
        with self.assertRaisesRegex(ValueError, "2 articles need 6"):
            self.build([self.write("few.txt", wikitext(3))], fractions=[0.5, 0.25, 0.25])
        with self.assertRaisesRegex(ValueError, "splits by source need 3 source files"):
            self.build([path])  # splits by source, and there is one source only
        with self.assertRaises(FileNotFoundError):
            self.build([os.path.join(self.dir, "missing.txt")])
        with self.assertRaisesRegex(ValueError, "not 3 non-negatives"):
            self.build([path], fractions=[0.5, 0.5])
        with self.assertRaisesRegex(ValueError, r"min_window_tokens \(0\) <= window_tokens \(30\)"):
            self.build([path], min_window_tokens=0, fractions=[0.5, 0.25, 0.25])
        with self.assertRaisesRegex(ValueError, r"budgets \[31, 30\]"):
            self.build([path], min_window_tokens=31, fractions=[0.5, 0.25, 0.25])
        with self.assertRaisesRegex(ValueError, "pairs_per_article 0 must be at least 1"):
            self.build([path], pairs_per_article=0, fractions=[0.5, 0.25, 0.25])
        with self.assertRaisesRegex(ValueError, "positive 'same' is not one of"):
            self.build([path], positive="same", fractions=[0.5, 0.25, 0.25])
        with self.assertRaisesRegex(ValueError, "hold two windows of 20 to 500 tokens"):
            self.build([path], window_tokens=500, min_window_tokens=20, fractions=[0.5, 0.25, 0.25])


if __name__ == "__main__":
    absltest.main()
