r"""Regenerates every generated table, value and figure of docs/results.md, README.md's
generated cells (its results table) and docs/studies.md's (its findings), from the raw files.

  python experiments/results_page.py           # rewrites the pages and docs/results/*.png
  python experiments/results_page.py --check   # exit 1 with a diff where a page differs

Reads docs/results/raw/<study>/ alone (study.json and each run's metrics.jsonl, config.json,
length_eval/); no model and no corpus. The page's prose stays as written; what sits between
`<!-- generated: ... -->` markers is rewritten (roformer_jax/studies/results_page.py).
"""

import os
import sys

from absl import app, flags

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
sys.path.insert(0, _ROOT)

from roformer_jax.studies import results_page  # noqa: E402
from roformer_jax.training import runtime  # noqa: E402

_PAGE = flags.DEFINE_string("page", os.path.join(_ROOT, "docs", "results.md"), "The page.")
_README = flags.DEFINE_string(
    "readme", os.path.join(_ROOT, "README.md"), "The front page, whose cells quote the studies."
)
_FINDINGS = flags.DEFINE_string(
    "findings",
    os.path.join(_ROOT, "docs", "studies.md"),
    "The studies' manual, whose findings quote the studies.",
)
_RAW = flags.DEFINE_string(
    "raw", os.path.join(_ROOT, "docs", "results", "raw"), "One folder per study (--raw_dir)."
)
_CHECK = flags.DEFINE_bool(
    "check",
    False,
    "Write nothing, draw no figure; exit 1 and print a diff where the page "
    "differs from what it would be (stale marks aside).",
)


def main(argv):
    if len(argv) > 1:
        raise app.UsageError(f"unexpected arguments: {argv[1:]}")
    figures = None if _CHECK.value else os.path.join(os.path.dirname(_PAGE.value), "results")
    differ = False
    for path in (_PAGE.value, _README.value, _FINDINGS.value):
        with open(path, encoding="utf-8") as f:
            page = f.read()
        regenerated = results_page.render(page, _RAW.value, figures_dir=figures)
        if _CHECK.value:
            diff = results_page.differences(page, regenerated, name=path)
            print(diff or f"{path} is what {_RAW.value} gives.")
            differ = differ or bool(diff)
            continue
        with open(path, "w", encoding="utf-8") as f:
            f.write(regenerated)
        print(f"wrote {path}")
    return 1 if differ else 0


if __name__ == "__main__":
    runtime.run_main(main)
