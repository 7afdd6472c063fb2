"""Tests for roformer_jax/data/corpora.py: the built-in corpus, files, HF datasets, bad input, the
table of sources and their cache identities."""

import itertools
import json
import os
import shutil
import sys
import sysconfig
import types
import warnings
from unittest import mock

import tiny
from absl.testing import absltest, parameterized

from roformer_jax.data import corpora
from roformer_jax.data import corpus as corpus_lib
from roformer_jax.data.corpora import read_documents
from roformer_jax.data.data_config import DataConfig

DATA = os.path.join(os.path.dirname(__file__), "..", "..", "shared", "data")
SHAKESPEARE = os.path.join(DATA, "tinyshakespeare", "input.txt")
WIKITEXT = os.path.join(DATA, "wikitext-2", "valid.txt")
TEXT = "first doc line one\n  line two\n\n\nsecond doc\r\n  \nthird\n"


class ReadDocumentsTest(parameterized.TestCase):
    def setUp(self):
        super().setUp()
        self.dir = tiny.workdir()
        self.addCleanup(shutil.rmtree, self.dir)

    def write(self, name, content, mode="w"):
        path = os.path.join(self.dir, name)
        os.makedirs(os.path.dirname(path), exist_ok=True)
        with open(path, mode) as f:
            f.write(content)
        return path

    @parameterized.parameters(
        ("line", ["first doc line one", "line two", "second doc", "third"]),
        ("blank", ["first doc line one\nline two", "second doc", "third"]),
    )
    def test_doc_separator(self, separator, expected):
        path = self.write("docs.txt", TEXT)
        self.assertEqual(read_documents(path, doc_separator=separator), expected)

    def test_articles(self):
        path = self.write(
            "wiki.txt",
            " Before any title \n\n = Alpha = \n\n Alpha lead . \n\n = = History = = \n\n"
            " Old times . \n = = = Early = = = \n Earliest . \n\n = Beta = \n Beta text . \n"
            " = Gamma = \n\n",
        )
        expected = [
            "Before any title",
            "= Alpha =\nAlpha lead .\n= = History = =\nOld times .\n= = = Early = = =\nEarliest .",
            "= Beta =\nBeta text .",
            "= Gamma =",
        ]
        self.assertEqual(read_documents(path, doc_separator="article"), expected)
        # The same lines as "line" gives, only grouped.
        lines = read_documents(path, doc_separator="line")
        self.assertEqual("\n".join(expected), "\n".join(lines))

    def test_text_before_the_first_title_is_optional(self):
        path = self.write("wiki.txt", "\n = Alpha = \n a \n = Beta = \n b \n")
        docs = read_documents(path, doc_separator="article")
        self.assertEqual(docs, ["= Alpha =\na", "= Beta =\nb"])

    def test_builtin_articles_are_files(self):
        # The first files of the standard library (reading all of it twice took 10-20 s); the
        # last document read may be cut at max_chars.
        docs = read_documents("builtin", doc_separator="article", max_chars=400_000)[:-1]
        files, sourced = [], []
        for path, doc in corpora.stdlib_sourced_documents():
            if path not in files:
                if len(files) == len(docs):
                    break
                files.append(path)
            sourced.append((path, doc))
        self.assertLen(docs, len(files))
        # The same text as one document per docstring, joined by blank lines within a file.
        per_doc = [doc for _, doc in sourced]
        self.assertEqual("\n\n".join(docs), "\n\n".join(per_doc))
        self.assertEqual(
            sum(map(len, docs)), sum(map(len, per_doc)) + 2 * (len(sourced) - len(files))
        )
        first_file = [doc for path, doc in sourced if path == files[0]]
        self.assertEqual(docs[0], "\n\n".join(first_file))

    @parameterized.parameters("line", "blank")
    def test_builtin_line_and_blank_are_docstrings(self, separator):
        docs = read_documents("builtin", doc_separator=separator, max_chars=20_000)
        expected = list(itertools.islice(corpora.stdlib_documents(), len(docs)))
        self.assertEqual(docs[:-1], expected[:-1])

    @parameterized.parameters(0, 1, 7, 30, 1000)
    def test_join_documents(self, min_chars):
        docs = ["abc", "de", "fghij", "k", "lmnopqrstu", "vw", "x", "yz"]
        joined = list(corpora.join_documents(docs, min_chars))
        self.assertEqual("\n".join(joined), "\n".join(docs))  # text and order kept
        self.assertTrue(all(len(d) >= min_chars for d in joined[:-1]), joined)
        if min_chars <= 1:
            self.assertEqual(joined, docs)
        # Greedy: a group closes as soon as it is long enough (no doc here holds a "\n").
        prefixes = [d.rpartition("\n")[0] for d in joined if "\n" in d]
        self.assertTrue(all(len(p) < min_chars for p in prefixes), joined)

    def test_min_doc_chars(self):
        path = self.write("docs.txt", TEXT)
        docs = read_documents(path, doc_separator="blank", min_doc_chars=20)
        self.assertEqual(docs, ["first doc line one\nline two", "second doc\nthird"])
        docs = read_documents(path, min_doc_chars=30, max_chars=36)  # cut after joining
        self.assertEqual(docs, ["first doc line one\nline two\nsecond d"])

    def test_negative_min_doc_chars(self):
        with self.assertRaisesRegex(ValueError, "min_doc_chars -1"):
            read_documents("builtin", min_doc_chars=-1)
        with self.assertRaisesRegex(ValueError, "min_chars -1"):
            list(corpora.join_documents(["a"], -1))

    def test_directory_and_glob(self):
        for name in ("b.txt", "a.txt", "sub/c.txt", ".hidden", ".git/d.txt"):
            self.write(name, f"from {name}\n")
        expected = ["from a.txt", "from b.txt", "from sub/c.txt"]
        self.assertEqual(read_documents(self.dir), expected)
        self.assertEqual(read_documents(os.path.join(self.dir, "**", "*.txt")), expected)

    def test_max_chars(self):
        path = self.write("docs.txt", "abcdef\nghijkl\nmnopqr\n")
        self.assertEqual(read_documents(path, max_chars=9), ["abcdef", "ghi"])
        self.assertEqual(read_documents(path, max_chars=12), ["abcdef", "ghijkl"])

    def test_builtin(self):
        first = list(itertools.islice(corpora.stdlib_documents(), 200))
        self.assertEqual(first, list(itertools.islice(corpora.stdlib_documents(), 200)))
        self.assertTrue(all(d and d == d.strip() for d in first))
        # Prose, not code: mostly letters and spaces.
        text = " ".join(first)
        self.assertGreater(sum(c.isalpha() or c.isspace() for c in text) / len(text), 0.85)
        docs = read_documents("builtin", max_chars=5000)
        self.assertEqual(sum(map(len, docs)), 5000)

    @absltest.skipUnless(os.path.isfile(SHAKESPEARE), "shared/data is absent")
    def test_shakespeare_speeches(self):
        docs = read_documents(SHAKESPEARE, doc_separator="blank")
        self.assertLen(docs, 7222)  # speeches: "First Citizen:\nBefore we proceed ..."
        self.assertTrue(docs[0].startswith("First Citizen:\nBefore we proceed any further"))

    @absltest.skipUnless(os.path.isfile(WIKITEXT), "shared/data is absent")
    def test_wikitext_lines(self):
        docs = read_documents(WIKITEXT)
        self.assertEqual(docs[0], "= Homarus gammarus =")
        self.assertGreater(len(docs), 1000)

    @absltest.skipUnless(os.path.isfile(WIKITEXT), "shared/data is absent")
    def test_wikitext_articles(self):
        docs = read_documents(WIKITEXT, doc_separator="article")
        self.assertBetween(len(docs), 50, 70)  # WikiText-2's validation split: 60 articles
        self.assertTrue(all(d.startswith("= ") and d.split("\n")[0].count("=") == 2 for d in docs))
        self.assertEqual("\n".join(docs), "\n".join(read_documents(WIKITEXT)))

    def test_missing_path(self):
        with self.assertRaisesRegex(FileNotFoundError, "does not exist.*'builtin'"):
            read_documents(os.path.join(self.dir, "nope.txt"))
        with self.assertRaisesRegex(FileNotFoundError, "matches no files"):
            read_documents(os.path.join(self.dir, "*.nope"))

    def test_a_device_is_not_a_corpus(self):
        with self.assertRaisesRegex(ValueError, "'/dev/zero' is not a regular file"):
            read_documents("/dev/zero")

    @parameterized.parameters("", "\n \n\t\n")
    def test_empty_corpus(self, text):
        with self.assertRaisesRegex(ValueError, "has no text.*1 file"):
            read_documents(self.write("empty.txt", text))

    def test_empty_directory(self):
        os.makedirs(os.path.join(self.dir, "void"))
        with self.assertRaisesRegex(ValueError, "holds no files"):
            read_documents(os.path.join(self.dir, "void"))

    def test_invalid_utf8_replaced_with_one_warning(self):
        for i in range(2):
            self.write(f"bad{i}.txt", b"caf\xe9 au lait\nna\xefve\n", mode="wb")
        with warnings.catch_warnings(record=True) as caught:
            warnings.simplefilter("always")
            docs = read_documents(os.path.join(self.dir, "bad*.txt"))
        self.assertLen(caught, 1)
        self.assertIs(caught[0].category, UnicodeWarning)
        self.assertRegex(str(caught[0].message), "2 file.*not valid UTF-8.*bad0.txt.*byte 3")
        self.assertEqual(docs[:2], ["caf\ufffd au lait", "na\ufffdve"])

    def test_bad_separator(self):
        with self.assertRaisesRegex(ValueError, "doc_separator 'para'"):
            read_documents("builtin", doc_separator="para")


class HuggingFaceTest(parameterized.TestCase):
    def test_without_datasets(self):
        with mock.patch.dict(sys.modules, {"datasets": None}):
            with self.assertRaisesRegex(ImportError, "pip install datasets"):
                read_documents("hf:wikitext:wikitext-2-raw-v1")

    def _with_fake(self, rows, source, **kwargs):
        calls = []

        def load_dataset(name, config, split, streaming, trust_remote_code):
            calls.append((name, config, split, streaming, trust_remote_code))
            if isinstance(rows, Exception):
                raise rows
            return iter(rows)

        with mock.patch.dict(
            sys.modules, {"datasets": types.SimpleNamespace(load_dataset=load_dataset)}
        ):
            return read_documents(source, **kwargs), calls

    def test_rows_are_lines(self):
        rows = [
            {"id": 0, "text": " = Title = \n"},
            {"id": 1, "text": ""},
            {"id": 2, "text": "a\nb"},
        ]
        docs, calls = self._with_fake(rows, "hf:user/wikitext:raw")
        self.assertEqual(calls, [("user/wikitext", "raw", "train", True, False)])
        self.assertEqual(docs, ["= Title =", "a", "b"])
        docs, _ = self._with_fake(rows, "hf:wikitext", doc_separator="blank")
        self.assertEqual(docs, ["= Title =", "a\nb"])
        docs, _ = self._with_fake(rows, "hf:wikitext", doc_separator="article")
        self.assertEqual(docs, ["= Title =\na\nb"])

    def test_first_text_column(self):
        docs, calls = self._with_fake([{"label": 1, "sentence": "hello"}], "hf:glue")
        self.assertEqual(docs, ["hello"])
        self.assertEqual(calls[0][1], None)

    def test_stops_at_max_chars(self):
        def endless():
            for i in itertools.count():
                yield {"text": f"line {i}"}

        docs, _ = self._with_fake(endless(), "hf:big", max_chars=20)
        self.assertEqual(docs, ["line 0", "line 1", "line 2", "li"])  # 6 + 6 + 6 + 2

    @parameterized.named_parameters(
        ("offline", ConnectionError("no network"), RuntimeError, "could not load.*network"),
        ("empty", [], ValueError, "has no text"),
        ("no_text", [{"label": 1}], ValueError, "no text column.*label"),
    )
    def test_errors(self, rows, error, message):
        with self.assertRaisesRegex(error, message):
            self._with_fake(rows, "hf:some/data")


# The cache keys main computed before SOURCES was a table (653e8f5), for a Python whose
# version and stdlib are pinned: a corpus cached then is found by the same key now.
PINNED_PYTHON = ("3.11.7 (pinned)", "/pinned/lib/python3.11")


class CacheKeyTest(parameterized.TestCase):
    @parameterized.named_parameters(
        ("builtin", "builtin", {}, "1d20dd7061168267"),
        ("builtin_blank", "builtin", dict(doc_separator="blank"), "1d20dd7061168267"),
        ("builtin_article", "builtin", dict(doc_separator="article"), "13af440a2b9599e6"),
        ("file", None, {}, "7d488320c14b56d0"),
        (
            "file_article",
            None,
            dict(doc_separator="article", min_doc_chars=100),
            "6eeb482949346fab",
        ),
        ("file_bytes", None, dict(tokenizer="bytes", max_chars=10), "c3e2fc82a2ab3ee4"),
        ("hf", "hf:wikitext:wikitext-2-raw-v1", {}, "1afce04d17f9af4f"),
    )
    def test_key_is_unchanged(self, source, fields, key):
        directory = tiny.workdir()  # a file source's key holds its contents, not its path
        self.addCleanup(shutil.rmtree, directory)
        source = source or os.path.join(directory, "docs.txt")
        with open(os.path.join(directory, "docs.txt"), "w") as f:
            f.write(TEXT)
        version, stdlib = PINNED_PYTHON
        cfg = DataConfig(source=source, **fields)
        with (
            mock.patch.object(sys, "version", version),
            mock.patch.object(sysconfig, "get_paths", return_value={"stdlib": stdlib}),
        ):
            self.assertEqual(corpus_lib._cache_key(cfg, corpora.resolve_files(source))[0], key)


def _word_documents(source, doc_separator, files, bad_utf8):
    """One document per word of "words:a,b,c". The toy of docs/model.md, "Add a corpus source"."""
    return source.removeprefix("words:").split(",")


WORDS = corpora.CorpusSource(_word_documents, "'words:<word>,<word>,...'")


class AddASourceTest(absltest.TestCase):
    """docs/model.md's recipe: one definition (_word_documents) and one entry of SOURCES."""

    def test_toy_source(self):
        directory = tiny.workdir()
        self.addCleanup(shutil.rmtree, directory)
        source = "words:" + ",".join(tiny.WORDS)
        with mock.patch.dict(corpora.SOURCES, {"words:": WORDS}):
            self.assertEqual(read_documents(source), tiny.WORDS)
            self.assertEqual(read_documents(source, max_chars=9), ["the", "a", "cat", "do"])
            self.assertEqual(corpora.resolve_files(source), [])
            cfg = DataConfig(source=source, tokenizer="bytes", seq_len=8, doc_separator="blank")
            corpus = corpus_lib.load_corpus(cfg, directory)
            self.assertEqual(corpus.stats["documents"], len(tiny.WORDS))
            with open(os.path.join(corpus.path, "meta.json")) as f:
                identity = json.load(f)["identity"]
            self.assertEqual(identity["source"], source)  # the default identity: its name
            self.assertEqual(identity["doc_separator"], "blank")
            self.assertEqual(identity["files"], [])
            with self.assertRaisesRegex(FileNotFoundError, r"glob, .*, or 'words:<word>,"):
                read_documents(os.path.join(directory, "nope.txt"))
        self.assertNotIn("words:", corpora.SOURCES)
        with self.assertRaisesRegex(FileNotFoundError, "does not exist"):
            read_documents(source)  # without the entry, a path


if __name__ == "__main__":
    absltest.main()
