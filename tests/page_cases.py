"""The results page's tests' shared fixtures (results_page_test.py, page_numbers_test.py,
page_provenance_test.py): where the page and its raw files are, the causal baseline run, a file
read as text, and a commit map that knows no commit. Kept under the names they had in
tests/results_page_test.py, underscores included."""

import os

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_PAGE = os.path.join(_ROOT, "docs", "results.md")
_RAW = os.path.join(_ROOT, "docs", "results", "raw")
_RUN = os.path.join("causal_wikitext2", "softmax_+_RoPE", "seed0")  # the causal baseline run


def _read(path):
    with open(path, encoding="utf-8") as f:
        return f.read()


def _unknown(commit):
    return None  # no git needed: differences() leaves stale marks out anyway
