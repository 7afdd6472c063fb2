"""Where the text comes from: the built-in corpus, local files and HuggingFace datasets.

    docs = read_documents("builtin")                          # list[str], fixed order
    docs = read_documents("books/*.txt", doc_separator="blank", max_chars=10**7)

Sources, one entry each of SOURCES (`corpus_source` finds a source's entry by its name, else by
its prefix up to ":", else it is a path; docs/model.md adds one):
  "builtin"   The docstrings of the Python standard library's modules and the language-reference
              help topics that ship with it (pydoc_data/topics.py), read with `ast` from the .py
              files under sysconfig's "stdlib" path (site-packages and test folders skipped; no
              module is imported), in sorted file order. Real English prose written by people,
              present wherever Python is: on CPython 3.11.7, 8,683 documents, 2.25 M characters,
              0.53 M WordPiece tokens (vocab 8192). It varies slightly with the Python version.
  a path      A file, a directory (every non-hidden file below it, sorted) or a glob. UTF-8 text
              (undecodable bytes become U+FFFD, with one warning). doc_separator "line": every
              non-blank line is a document (WikiText: one paragraph per line); "blank":
              documents are runs of non-blank lines separated by blank lines (books, plays);
              "article": a WikiText title line " = Title = " opens a document that runs to the
              next title (its section headings " = = Section = = " and paragraphs included,
              one per line; text before the first title is a document of its own).
  "hf:<name>[:<config>]"  A HuggingFace dataset, e.g. "hf:wikitext:wikitext-103-raw-v1",
              streamed through the optional `datasets` package (network needed): the "train"
              split's "text" column (else its first text column), read as lines with the same
              doc_separator rule. max_chars stops the stream early.

"builtin" has one document per docstring or help topic with "line" and "blank", and one per
source file (its docstrings joined by blank lines, in source order) with "article".

min_doc_chars > 0 joins consecutive documents (with "\n") until each has at least that many
characters (`join_documents`): a book without headings becomes contiguous spans, so a split by
document holds out whole spans. max_chars is counted on the documents after joining.
"""

from __future__ import annotations

import ast
import dataclasses
import functools
import glob
import itertools
import os
import re
import sys
import sysconfig
import warnings
from collections.abc import Callable, Iterable, Iterator

_SKIPPED_DIRS = {"site-packages", "dist-packages", "test", "tests", "idle_test", "__pycache__"}
DOC_SEPARATORS = ("line", "blank", "article")
# A WikiText heading, stripped: "= Title =" (group 1 is "=": an article's title), "= = Section
# = =" (group 1 "= =") and deeper. Shared with long_doc_task, which splits articles the same way.
WIKITEXT_HEADING = re.compile(r"^(=(?: =)*) (.+?) \1$")


def _no_files(source: str) -> list[str]:
    return []


def _named(source: str, doc_separator: str) -> dict:
    """A source's cache identity by default: its name and how it is cut into documents."""
    return {"source": source, "doc_separator": doc_separator}


@dataclasses.dataclass(frozen=True)
class CorpusSource:
    """One kind of corpus source: an entry of SOURCES."""

    # (source, doc_separator, files, bad_utf8) -> its documents, stripped, in a fixed order;
    # lazy, so that max_chars stops a stream early. files: what `files` gave; a reader of
    # files appends "path (first at byte N)" to bad_utf8 for each one not valid UTF-8.
    documents: Callable[[str, str, list[str], list[str]], Iterable[str]]
    syntax: str  # how a config names it, in the error for a source that names nothing
    files: Callable[[str], list[str]] = _no_files  # what it reads, sorted
    # (source, doc_separator) -> its entries in the cache key, beside its files' digests
    identity: Callable[[str, str], dict] = _named


def read_documents(
    source: str,
    *,
    doc_separator: str = "line",
    max_chars: int | None = None,
    min_doc_chars: int = 0,
) -> list[str]:
    """All non-empty documents of `source` (stripped), the last one cut at `max_chars` in all.

    doc_separator is one of DOC_SEPARATORS (module docstring); consecutive documents are joined
    until each has at least `min_doc_chars` characters (0: as read).

    Raises FileNotFoundError for a path that does not exist, ImportError / RuntimeError when a
    HuggingFace dataset cannot be loaded, and ValueError when there is no text at all or an
    argument is out of range.
    """
    if doc_separator not in DOC_SEPARATORS:
        raise ValueError(f"doc_separator {doc_separator!r} is not one of {DOC_SEPARATORS}")
    if min_doc_chars < 0:
        raise ValueError(f"min_doc_chars {min_doc_chars} must be >= 0 (0: documents as read)")
    entry = corpus_source(source)
    files, bad_utf8 = entry.files(source), []
    docs = entry.documents(source, doc_separator, files, bad_utf8)
    # Joined before the max_chars cut, so that max_chars counts the characters the caller gets.
    docs = join_documents(docs, min_doc_chars)
    out, chars = [], 0
    for doc in docs:
        if max_chars is not None and chars + len(doc) >= max_chars:
            out.append(doc[: max_chars - chars].strip())
            break
        out.append(doc)
        chars += len(doc)
    if bad_utf8:
        warnings.warn(
            f"{len(bad_utf8)} file(s) are not valid UTF-8 and their undecodable bytes were "
            f"replaced by U+FFFD: {', '.join(bad_utf8[:3])}. Convert them to UTF-8 "
            "(e.g. iconv -f latin1 -t utf-8) to keep those characters.",
            UnicodeWarning,
            stacklevel=2,
        )
    out = [d for d in out if d]
    if not out:
        where = f"{len(files)} file(s) read" if files else "nothing read"
        raise ValueError(f"corpus {source!r} has no text ({where}); point source at text")
    return out


def join_documents(docs: Iterable[str], min_chars: int) -> Iterator[str]:
    """Consecutive `docs` joined with "\n" until each has at least `min_chars` characters.

    The last group keeps whatever is left, even if shorter. min_chars 0 (or 1) yields the
    documents unchanged. Lazy, so that a streamed source cut by max_chars stops early.
    """
    if min_chars < 0:
        raise ValueError(f"min_chars {min_chars} must be >= 0 (0: documents as read)")
    group, size = [], 0
    for doc in docs:
        group.append(doc)
        size += len(doc) + (len(group) > 1)  # the "\n" that joins it counts too
        if size >= min_chars:
            yield "\n".join(group)
            group, size = [], 0
    if group:
        yield "\n".join(group)


def resolve_files(source: str) -> list[str]:
    """The files `source` reads, sorted ([] for "builtin" and "hf:..."): their contents, not
    their paths, key its cache (data/corpus.py)."""
    return corpus_source(source).files(source)


def corpus_source(source: str) -> CorpusSource:
    """The entry of SOURCES that reads `source`: the one named `source` ("builtin"), else the
    one named by its prefix up to its first ":" ("hf:" for "hf:wikitext"), else "path"."""
    scheme, colon, _ = source.partition(":")
    return SOURCES.get(source) or SOURCES.get(scheme + colon) or SOURCES["path"]


def _path_files(source: str) -> list[str]:
    """The files a path/directory/glob source names, sorted."""
    if os.path.isfile(source):
        return [source]
    if os.path.isdir(source):
        found = []
        for directory, subdirs, files in os.walk(source):
            subdirs[:] = sorted(d for d in subdirs if d[0] != ".")
            found += [os.path.join(directory, f) for f in sorted(files) if f[0] != "."]
        if not found:
            raise ValueError(f"directory {source!r} holds no files; put the corpus text in it")
        return found
    if glob.has_magic(source):
        found = sorted(p for p in glob.glob(source, recursive=True) if os.path.isfile(p))
        if not found:
            raise FileNotFoundError(f"glob {source!r} matches no files")
        return found
    if os.path.exists(source):  # /dev/zero, a FIFO: endless, or read once and gone
        raise ValueError(f"corpus source {source!r} is not a regular file nor a directory")
    *others, last = (entry.syntax for entry in SOURCES.values())
    raise FileNotFoundError(
        f"corpus source {source!r} does not exist; give {', '.join(others)}, or {last}"
    )


def _path_documents(source, doc_separator, files, bad_utf8) -> Iterator[str]:
    return _documents(_file_lines(files, bad_utf8), doc_separator)


def _path_identity(source: str, doc_separator: str) -> dict:
    """A file source is its files' contents, wherever they lie: a moved corpus keeps its cache."""
    return {"source": None, "doc_separator": doc_separator}


def _builtin_documents(source, doc_separator, files, bad_utf8) -> Iterator[str]:
    """One document per docstring or help topic; one per stdlib file with "article"."""
    return _stdlib_file_documents() if doc_separator == "article" else stdlib_documents()


def _builtin_identity(source: str, doc_separator: str) -> dict:
    """The text is the running Python's stdlib. doc_separator enters only as "article": "line"
    and "blank" read the same docstrings, and caches built before "article" keep their key."""
    identity = {"source": source, "python": [sys.version, sysconfig.get_paths()["stdlib"]]}
    if doc_separator == "article":
        identity["doc_separator"] = doc_separator
    return identity


def stdlib_documents() -> Iterator[str]:
    """Yields the built-in corpus: stdlib docstrings and pydoc help topics, in a fixed order."""
    return (doc for _, doc in stdlib_sourced_documents())


def _stdlib_file_documents() -> Iterator[str]:
    """The built-in corpus with one document per source file: its docs joined by blank lines.

    The longest contiguous prose the stdlib has (a module's docstring, then its classes' and
    functions'), for evaluating at lengths that one docstring rarely reaches.
    """
    by_file = itertools.groupby(stdlib_sourced_documents(), key=lambda pair: pair[0])
    return ("\n\n".join(doc for _, doc in pairs) for _, pairs in by_file)


def stdlib_sourced_documents() -> Iterator[tuple[str, str]]:
    """`stdlib_documents` with the path of the file each comes from, relative to the stdlib."""
    root = sysconfig.get_paths()["stdlib"]
    for directory, subdirs, files in os.walk(root):
        subdirs[:] = sorted(d for d in subdirs if d not in _SKIPPED_DIRS and d[0] != ".")
        for name in sorted(f for f in files if f.endswith(".py")):
            relative = os.path.relpath(os.path.join(directory, name), root)
            yield from ((relative, doc) for doc in _file_docstrings(root, relative))


@functools.cache
def _file_docstrings(root: str, relative: str) -> tuple[str, ...]:
    """The documents of one stdlib file (none if it does not parse). Kept for the process:
    parsing the whole stdlib takes ~10 s, and the builtin corpus, its tasks and their tests
    read it many times; the cache fills as far as a reader goes (max_chars stops early)."""
    with open(os.path.join(root, relative), "rb") as f:
        source = f.read()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # invalid escapes in old modules
            tree = ast.parse(source)
    except (SyntaxError, ValueError):
        return ()
    if relative == os.path.join("pydoc_data", "topics.py"):
        return tuple(_help_topics(tree))
    return tuple(_docstrings(tree))


def _docstrings(node: ast.AST) -> Iterator[str]:
    """Docstrings of a module, its classes and functions, in source order."""
    if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
        doc = ast.get_docstring(node, clean=True)
        if doc and doc.strip():
            yield doc.strip()
    for child in ast.iter_child_nodes(node):
        yield from _docstrings(child)


def _help_topics(tree: ast.Module) -> Iterator[str]:
    """The values of `topics = {...}`: the language reference sections that help() shows."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Dict):
            for value in node.values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    yield value.value.strip()


def _file_lines(paths: list[str], bad_utf8: list[str]) -> Iterator[str]:
    for path in paths:
        with open(path, "rb") as f:
            raw = f.read()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as e:
            bad_utf8.append(f"{path} (first at byte {e.start})")
            text = raw.decode("utf-8", errors="replace")
        yield from text.split("\n")


def _hf_lines(source: str) -> Iterator[str]:
    name, _, config = source[len("hf:") :].partition(":")
    try:
        import datasets  # optional dependency
    except ImportError:
        raise ImportError(
            f"source {source!r} needs the optional package `datasets` (pip install datasets) "
            "and network access; or save the text to files and pass their path"
        ) from None
    try:
        # A dataset's own loading script is code from its author: never run it.
        rows = datasets.load_dataset(
            name, config or None, split="train", streaming=True, trust_remote_code=False
        )
        rows = iter(rows)
        first = next(rows, None)
    except Exception as e:
        raise RuntimeError(
            f"could not load HuggingFace dataset {name!r} (config {config or None!r}): {e}. "
            "Check the name and config, and that the network (or HF_DATASETS_OFFLINE with a "
            "local copy) is available."
        ) from e
    if first is None:
        return
    columns = [k for k, v in first.items() if isinstance(v, str)]
    if not columns:
        raise ValueError(f"dataset {name!r} has no text column; its columns are {list(first)}")
    column = "text" if "text" in columns else columns[0]
    for row in itertools.chain([first], rows):
        yield from row[column].split("\n")


def _hf_documents(source, doc_separator, files, bad_utf8) -> Iterator[str]:
    return _documents(_hf_lines(source), doc_separator)


def _documents(lines: Iterable[str], separator: str) -> Iterator[str]:
    """Stripped lines grouped by `separator`: one per line, per blank-line run, or per article."""
    paragraph = []
    for line in lines:
        line = line.strip()
        if separator == "line":
            if line:
                yield line
        elif separator == "article":
            title = WIKITEXT_HEADING.match(line)
            if title and title.group(1) == "=" and paragraph:  # a title, not a section heading
                yield "\n".join(paragraph)
                paragraph = []
            if line:  # an article keeps the lines "line" would give, blank ones dropped
                paragraph.append(line)
        elif line:
            paragraph.append(line)
        elif paragraph:
            yield "\n".join(paragraph)
            paragraph = []
    if paragraph:
        yield "\n".join(paragraph)


# Read by corpus_source; in the order that the error for a missing path names them.
SOURCES: dict[str, CorpusSource] = {
    "path": CorpusSource(
        _path_documents,
        "an existing file, directory or glob",
        files=_path_files,
        identity=_path_identity,
    ),
    "builtin": CorpusSource(_builtin_documents, "'builtin'", identity=_builtin_identity),
    "hf:": CorpusSource(_hf_documents, "'hf:<dataset name>[:<config>]'"),
}
