"""Isolated documents against open rows (issue 33): the small RoFormer, softmax and linear
attention (RoPE in the numerator, eq. 19), 3 seeds.

  python experiments/compare.py --config=configs/study_packed.py:wikitext2 --workdir=runs/pk_wt2
  python experiments/compare.py --config=configs/study_packed.py:warpeace --workdir=runs/pk_wp

Training rows pack the documents of the token stream, a [SEP] after each (data/corpus.py).
"open" rows are today's: every token attends across the [SEP]s and positions run on from
one document into the next. "isolated" rows carry segment_ids (data.documents): each token
attends to its own document only and counts positions from its start, and linear
attention's sums restart at every document. Both read the same windows with the same masks
(data/batches.py), and are scored on the same held-out rows and targets at 128, each
reading them as it was trained (held-out rows of an isolated run carry their segments too,
data/length_eval.py). A document is a WikiText-2 paragraph (one line) or a War and Peace
paragraph (blank-line separated): rows of 126 tokens meet several, so isolation changes
what most tokens see. The shared setting of configs/studies.py: 4 layers x 128 wide, 200
steps of 16 x 128 tokens; 12 runs of about a minute each per corpus on 2 quiet cores.

":runlocal" (after the corpus, or alone for the builtin corpus) checks the wiring in
seconds: one seed, one layer, 4 steps of 4 rows, evaluated once.

",cross" (issue 56) scores each model both ways, the 2 x 2 of trained and scored modes: each
run again with data.eval_documents the other mode (the same seed and rows, so the same model
trained again; scoring alone is not a step of compare.py), and on WikiText-2 the split by
article (data.split_by): the held-out paragraphs come from articles never trained on, where
the runs above held out paragraphs of training articles. War and Peace has no articles; its
split stays by paragraph. 24 runs of about a minute per corpus on 2 quiet cores:

  python experiments/compare.py --config=configs/study_packed.py:wikitext2,cross \
      --workdir=runs/pk_cross_wt2 --raw_dir=docs/results/raw/packed_cross_wikitext2
"""

from ml_collections import ConfigDict

from configs import base, studies

_DATA = "../shared/data"
CORPORA = {
    "builtin": {},
    "wikitext2": dict(source=f"{_DATA}/wikitext-2/train.txt", doc_separator="line"),
    "warpeace": dict(source=f"{_DATA}/war-and-peace/input.txt", doc_separator="blank"),
}
_LINEAR = {
    "attention": "linear",
    "position": "rope",
    "sections": {"linear": {"placement": "numerator"}},
}


_OTHER = {"open": "isolated", "isolated": "open"}


def _scored_other(run: dict) -> dict:
    """`run`, its held-out rows read in the other documents mode."""
    data = run["data"]
    return run | {"data": data | {"eval_documents": _OTHER[data["documents"]]}}


def get_config(arg=None):
    names = base.config_words(arg, [*CORPORA, "cross", "runlocal"])
    runlocal = "runlocal" in names
    config = studies.get_config("runlocal" if runlocal else None)
    corpus = next((n for n in names if n in CORPORA), "builtin")
    config.experiment.data.update(CORPORA[corpus])
    runs = {
        "softmax, open": {"data": {"documents": "open"}},
        "softmax, isolated": {"data": {"documents": "isolated"}},
        "linear eq (19), open": {"model": _LINEAR, "data": {"documents": "open"}},
        "linear eq (19), isolated": {"model": _LINEAR, "data": {"documents": "isolated"}},
    }
    if "cross" in names:
        runs |= {
            f"{name}, scored {_OTHER[run['data']['documents']]}": _scored_other(run)
            for name, run in runs.items()
        }
        if corpus == "wikitext2":
            config.experiment.data.split_by = "article"
    config.runs = ConfigDict(runs, sort_keys=False)
    if runlocal:
        studies.check_wiring(config)
        config.experiment.data.max_chars = 100_000
    config.baseline = "softmax, open"
    config.title = "MLM: documents isolated in packed rows, or open (issue 33)" + (
        ", each scored both ways" if "cross" in names else ""
    )
    config.plot_keys = ("train/loss", "valid/loss_128")
    config.table_keys = ("train/loss", "valid/loss_128", "valid/accuracy_128")
    return config
