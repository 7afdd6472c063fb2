"""Causal LM study: attention kinds and position encodings of a decoder, 3 seeds.

  python experiments/compare.py --config=configs/study_causal.py --workdir=runs/causal

Every run is a causal RoFormer (model.causal=True) trained on next tokens
(data.objective="clm") in the shared setting of configs/studies.py: 4 layers x 128 wide,
200 steps of 16 x 128. Softmax attention with RoPE, without positions (a causal model can
count its prefix, so "none" is not hopeless, unlike for MLM) and with learned absolute
positions; causal linear attention with RoPE in the numerator only (eq. 19) and in both
numerator and denominator (eq. 18); the normalized-cosine attention with RoPE. Validation
loss and perplexity (exp of the loss) are over every next token of the held-out text at 128.

Time: the studies' setting takes about a minute per run on 2 quiet CPU cores
(docs/results.md), so the 18 runs take about 20-30 min per corpus. Measured here with the 2
cores shared with other jobs: one run ("softmax + RoPE", seed 0, builtin) took 300 s (273 s
of training at ~2,000 tokens/s). Expect for it: valid loss 5.33, perplexity 206 at step 200
(from ln(8192) = 9.0; the unigram cross-entropy of these validation tokens is 6.02).
On WikiText-2: --config.experiment.data.source=../shared/data/wikitext-2/train.txt
On War and Peace: --config.experiment.data.source=../shared/data/war-and-peace/input.txt
  --config.experiment.data.doc_separator=blank
"""

from ml_collections import ConfigDict

from configs import studies


def _linear(placement):
    linear = {"placement": placement}
    return {"model": {"attention": "linear", "position": "rope", "sections": {"linear": linear}}}


def get_config(arg=None):
    config = studies.get_config(arg)
    config.experiment.model.causal = True
    config.experiment.data.objective = "clm"
    # Run names are ConfigDict keys, which take no dots: "eq (19)", not "eq. (19)".
    config.runs = ConfigDict(
        {
            "softmax + RoPE": {"model": {"position": "rope"}},
            "softmax, no positions": {"model": {"position": "none"}},
            "softmax + learned": {"model": {"position": "learned", "max_len": 128}},
            "linear eq (19)": _linear("numerator"),
            "linear eq (18)": _linear("both"),
            "cosine + RoPE": {"model": {"attention": "cosine", "position": "rope"}},
        }
    )
    config.baseline = "softmax + RoPE"
    config.title = "Causal LM: attention kinds and position encodings"
    config.plot_keys = ("train/loss", "valid/loss_128")
    config.table_keys = (
        "train/loss",
        "valid/loss_128",
        "valid/perplexity_128",
        "valid/accuracy_128",
    )
    return config
