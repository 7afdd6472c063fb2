"""Study: trained at 128 tokens, read at 128 to 2048; RoPE's scaling methods and the rest.

  python experiments/length_study.py --config=configs/study_length.py:wikitext2 \\
      --workdir=runs/length_wikitext2 --raw_dir=docs/results/raw/length_wikitext2
  (:warpeace for War and Peace, no argument for the builtin corpus; ",runlocal" for a smoke run)

The encoder and training of configs/studies.py (4 layers x 128, 2 heads of 64, 200 steps of
16 x 128 tokens, 3 seeds) on a corpus split by long documents (studies.LONG_DOCUMENTS).
Trained runs: RoPE, xPos, ALiBi, no positions and BERT's learned table (128 rows) at 128;
RoPE at 512 (4 x 512 tokens a step, the same tokens) as the reference that saw long windows;
and RoPE fine-tuned for 50 steps of 4 x 512 from the RoPE run, plain, with position
interpolation and with YaRN (factor 4), as the PI and YaRN papers fine-tune.

Evaluations (`evaluations`: a name, the run it reads, and a scaling applied at read time)
score the same ~20,000 masked tokens of held-out documents at every length of
`eval_lengths` (data/length_eval.py). A scaling without a factor gets factor = length / 128 at
each length past 128 (and original_max_position_embeddings = 128): zero-shot position
interpolation, NTK and YaRN; dynamic NTK grows its own factor from the length (factor 2 in
HF's formula). BERT cannot read past its table, so its longer columns are absent.
"""

from ml_collections import ConfigDict

from configs import studies

EVAL_LENGTHS = (128, 256, 512, 1024, 2048)
FINE_TUNE = 50  # steps at 512


def _fine_tune(scaling):
    return {
        "model": {"position": "rope", "sections": {"rope": {"scaling": scaling}}},
        "data": {"seq_len": 512},
        "train": {
            "steps": FINE_TUNE,
            "batch_size": 4,
            "init_from": "run:RoPE",
            "eval_every": FINE_TUNE,
            "checkpoint_every": FINE_TUNE,
            "log_every": 5,
        },
        "optim": {"warmup_steps": 5},
    }


def get_config(arg=None):
    data, rest = studies.long_documents(arg)
    config = studies.get_config(rest)
    config.experiment.data.update(data, valid_lengths=())
    config.runs = ConfigDict(  # in the order tables and figures show them
        {
            "RoPE": {"model": {"position": "rope"}},
            "xPos": {"model": {"position": "xpos"}},
            "ALiBi": {"model": {"position": "alibi"}},
            "no positions": {"model": {"position": "none"}},
            "BERT": {"model": {"position": "learned", "max_len": 128}},
            "RoPE at 512": {
                "model": {"position": "rope"},
                "data": {"seq_len": 512},
                "train": {"batch_size": 4},
            },
            "RoPE tuned at 512": _fine_tune(None),
            "PI tuned at 512": _fine_tune('{"rope_type": "linear", "factor": 4.0}'),
            "YaRN tuned at 512": _fine_tune(
                '{"rope_type": "yarn", "factor": 4.0, "original_max_position_embeddings": 128}'
            ),
        },
        sort_keys=False,
    )
    config.baseline = "RoPE"
    config.title = "MLM trained at 128 tokens, read at longer contexts"
    config.plot_keys = ("train/loss", "valid/loss_128")
    config.table_keys = ("train/loss", "valid/loss_128", "valid/accuracy_128")
    config.eval_lengths = EVAL_LENGTHS
    config.eval_tokens = 68 * (EVAL_LENGTHS[-1] - 2)  # ~20,000 targets at 15%
    # Paired tables: every evaluation minus RoPE read as trained, and minus RoPE fine-tuned at
    # 512 without scaling (the fine-tuned methods differ from each other, not only from RoPE).
    config.eval_baselines = ("RoPE", "RoPE tuned at 512")
    config.position_reference = "no positions"  # the figure's loss by position, minus its
    config.evaluations = ConfigDict(
        {
            "RoPE": {"run": "RoPE"},
            "RoPE + PI": {"run": "RoPE", "scaling": {"rope_type": "linear"}},
            "RoPE + NTK": {"run": "RoPE", "scaling": {"rope_type": "ntk"}},
            "RoPE + dynamic NTK": {
                "run": "RoPE",
                "scaling": {"rope_type": "dynamic", "factor": 2.0},
            },
            "RoPE + YaRN": {"run": "RoPE", "scaling": {"rope_type": "yarn"}},
            "xPos": {"run": "xPos"},
            "ALiBi": {"run": "ALiBi"},
            "no positions": {"run": "no positions"},
            "BERT": {"run": "BERT"},
            "RoPE at 512": {"run": "RoPE at 512"},
            "RoPE tuned at 512": {"run": "RoPE tuned at 512"},
            "PI tuned at 512": {"run": "PI tuned at 512"},
            "YaRN tuned at 512": {"run": "YaRN tuned at 512"},
        },
        sort_keys=False,
    )
    return studies.check_wiring(config) if rest else config
