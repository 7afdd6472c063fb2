r"""Regenerates every generated table, value and figure of docs/results.md from its raw files.

  python experiments/results_page.py           # rewrites the page and docs/results/*.png
  python experiments/results_page.py --check   # exit 1 with a diff where the page differs

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

_PAGE = flags.DEFINE_string("page", os.path.join(_ROOT, "docs", "results.md"), "The page.")
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
    with open(_PAGE.value, encoding="utf-8") as f:
        page = f.read()
    figures = None if _CHECK.value else os.path.join(os.path.dirname(_PAGE.value), "results")
    regenerated = results_page.render(page, _RAW.value, figures_dir=figures)
    if _CHECK.value:
        diff = results_page.differences(page, regenerated, name=_PAGE.value)
        print(diff or f"{_PAGE.value} is what {_RAW.value} gives.")
        return 1 if diff else 0
    with open(_PAGE.value, "w", encoding="utf-8") as f:
        f.write(regenerated)
    print(f"wrote {_PAGE.value} and its figures in {figures}")
    return 0


if __name__ == "__main__":
    app.run(main)
