"""Issue 55, item 4: decay gates in a causal LM, read at 1x, 4x and 8x the training length.

  python experiments/length_study.py --config=configs/study_gates.py:wikitext2 \\
      --workdir=runs/gates_wikitext2 --raw_dir=docs/results/raw/gates_wikitext2
  (:warpeace for War and Peace, no argument for the builtin corpus; ",runlocal" for a smoke run)

A causal RoFormer (model.causal, data.objective "clm") in the setting of configs/studies.py
(4 layers x 128, 2 heads of 64, 16 x 128 tokens a step, 3 seeds) on a corpus of long
documents (studies.LONG_DOCUMENTS), trained at 128 tokens. The six arms of the issue:
  - softmax + RoPE, the baseline of the softmax arms (RoFormer as a decoder);
  - FoX: softmax with FoX's learned forget gate and no positions, as Lin et al. 2025 train
    it (the gate is its only sense of order beyond the causal mask);
  - FoX + RoPE: the same gate with RoPE;
  - linear eq (19): elu + 1 with RoPE in the numerator only, the baseline of the linear arms;
  - gated linear eq (19): the same with FoX's learned forget gate;
  - retention: the same with RetNet's fixed γ_n per head (GateSection's "fixed"), i.e.
    retention with the denominator kept.
No output gate in any arm: each gated arm differs from its baseline by the decay alone.

Every run is read at 128, 512 and 1024 tokens (1x, 4x, 8x) on the same 20,440 held-out
next-token targets (20 windows of 1022 at 1024; data/length_eval.py: every length predicts
the same tokens, only the context differs), as experiments/length_study.py does. Paired
tables: each arm minus softmax + RoPE and minus linear eq (19), seed by seed; the results
page (docs/results.md section 12) corrects for and gives verdicts on six chosen pairs.

Budget: STEPS steps a run (the shared setting's 40 warm-up steps, then a linear decay to 0).
A 100-step probe of every arm (WikiText-2, one seed, at 0c6b59f, pinned to one of the two
cores, which other jobs shared at a load of 6 to 16: upper bounds) used, per run, 147 CPU-s
for softmax + RoPE, about 165 for FoX and 180 for FoX + RoPE (of which compiling ~25 and
scoring the three lengths ~40), and at most 390, 210 and 150 s of wall time for linear eq
(19), gated linear and retention (the load had fallen by then). That is 0.5 to 1.1 s a
training step and ~50 s a run besides, so 18 runs of 400 steps take about 1.9 core-hours a
corpus, less on a quiet core. Sharing two cores with other work, expect 2-3 hours of wall.
"""

from ml_collections import ConfigDict

from configs import studies

EVAL_LENGTHS = (128, 512, 1024)  # 1x, 4x and 8x the training length
STEPS = 400
SOFTMAX, LINEAR = "softmax + RoPE", "linear eq (19)"


def _arm(attention: str, position: str, gate: str = "none") -> dict:
    section = {"gate": gate} | ({"placement": "numerator"} if attention == "linear" else {})
    return {
        "model": {"attention": attention, "position": position, "sections": {attention: section}}
    }


# Run names are ConfigDict keys, which take no dots: "eq (19)", not "eq. (19)".
RUNS = {
    SOFTMAX: _arm("softmax", "rope"),
    "FoX": _arm("softmax", "none", "learned"),
    "FoX + RoPE": _arm("softmax", "rope", "learned"),
    LINEAR: _arm("linear", "rope"),
    "gated linear eq (19)": _arm("linear", "rope", "learned"),
    "retention": _arm("linear", "rope", "fixed"),
}


def get_config(arg=None):
    data, rest = studies.long_documents(arg)
    config = studies.get_config(rest)
    experiment = config.experiment
    experiment.model.causal = True
    experiment.data.update(data, objective="clm", valid_lengths=())
    if rest != "runlocal":
        experiment.train.update(steps=STEPS, eval_every=100, checkpoint_every=100)
    config.runs = ConfigDict(RUNS, sort_keys=False)  # in the order tables and figures show them
    config.baseline = SOFTMAX
    config.title = "Causal LM: decay gates, trained at 128 tokens, read at 4x and 8x"
    config.plot_keys = ("train/loss", "valid/loss_128")
    config.table_keys = ("train/loss", "valid/loss_128", "valid/accuracy_128")
    config.eval_lengths = EVAL_LENGTHS
    config.eval_tokens = 20 * (EVAL_LENGTHS[-1] - 2)  # every token is a target
    config.eval_baselines = (SOFTMAX, LINEAR)
    config.evaluations = ConfigDict({name: {"run": name} for name in RUNS}, sort_keys=False)
    return studies.check_wiring(config) if rest else config
