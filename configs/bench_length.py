"""Bench: which position encodings and attention settings retrieve past the training length?

  python experiments/length_bench.py --config=configs/bench_length.py:passkey \\
      --workdir=runs/bench_passkey --raw_dir=docs/results/raw/bench_passkey
  (:mqar and :flipflop likewise; ",smoke" after the task, e.g. :mqar,smoke, for seconds)

Issue 54, items 2 and 3: small causal models (2 pre-LN layers x 64, 2 heads of 32) trained on
one retrieval task (data/retrieval_tasks.py) at `train_length` tokens, scored by exact match on
fixed rows at 1x, 2x, 4x and 8x it, overall and by the evidence's depth, 3 seeds per arm.

Arms (`arms`; each a ModelConfig over the shared one, or a reading of a trained arm): RoPE; no
positions (NoPE); ALiBi; xPos; p-RoPE (Barbero et al. 2024: HF's "proportional", the lowest
quarter of the frequencies set to 0); iRoPE as Llama 4 (a chunked RoPE layer, then a global
layer without positions and with the query temperature: Llama 4's 3 : 1 at 2 layers; chunk and
floor_scale scaled from Llama 4's 8,192 to a quarter of the training length); RoPE with a
window and sinks as gpt-oss (a sliding layer, then a full one, a learned sink per head in both;
the window a quarter of the training length); FoX (Lin et al. 2025: no positions and a learned
forget gate), also with the gate's bias started at 4 (σ(4) = 0.98 kept a token, as xLSTM's
forget gates start, where FoX's σ(0) = 1/2 sees little past ten tokens at first); the
decay-gate study's other arms (FoX + RoPE, linear attention with RoPE in the numerator, eq. 19,
without a gate, with FoX's and with RetNet's fixed one: retention); and RoPE's trained
parameters read with NTK and with YaRN past the training length (factor = length /
train_length).

The published anchors are compared in shape, not scale: passkey (Mohtashami & Jaggi 2023;
RULER's S-NIAH, Hsieh et al. 2024) at 1 to 8x the training length; MQAR as zoology sets it
(Arora et al. 2023: d 64, sequences 64 to 256, keys and values from halves of the vocab);
flip-flop (Liu et al. 2023: write / ignore / read, p_write 0.1 as their FFL(0.8)).
Sized to about 3 CPU hours on 2 cores for the three tasks (docs/studies.md gives the estimate).
"""

from ml_collections import ConfigDict

TASKS = ("passkey", "mqar", "flipflop")
DEPTHS = (0.0, 0.25, 0.5, 0.75, 1.0)  # passkey's evaluation grid, one depth bin each


def _linear(gate: str) -> dict:
    """Linear attention (elu + 1) with RoPE in the numerator only (eq. 19) and decay `gate`."""
    section = {"placement": "numerator", "gate": gate}
    return {"model": {"attention": "linear", "position": "rope", "sections": {"linear": section}}}


def _arms(train_length: int) -> dict:
    """The arms, as data: {"model": ModelConfig fields} or {"reads": arm, "scaling": HF's}."""
    quarter = train_length // 4
    # 2 layers: Llama 4's 3 chunked RoPE layers to 1 global NoPE becomes 1 : 1, and gpt-oss's
    # alternation one sliding layer then one full.
    alternating = ("sliding_attention", "full_attention")
    llama4 = ("chunked_attention", "full_attention")
    return {
        "RoPE": {"model": {"position": "rope"}},
        "NoPE": {"model": {"position": "none"}},
        "ALiBi": {"model": {"position": "alibi"}},
        "xPos": {"model": {"position": "xpos"}},
        "p-RoPE": {
            "model": {
                "sections": {
                    "rope": {
                        "scaling": {"rope_type": "proportional", "partial_rotary_factor": 0.75}
                    }
                }
            }
        },
        "iRoPE": {
            "model": {
                "sections": {
                    "rope": {
                        "layer_types": llama4,
                        "scaling": {"chunked_attention": {}, "full_attention": None},
                    },
                    "softmax": {
                        "by_type": {
                            "chunked_attention": {"chunk": quarter},
                            "full_attention": {"attn_scale": 0.1, "floor_scale": quarter},
                        }
                    },
                }
            }
        },
        "RoPE + window + sinks": {
            "model": {
                "sections": {
                    "rope": {"layer_types": alternating},
                    "softmax": {
                        "sinks": True,
                        "by_type": {"sliding_attention": {"window": quarter}},
                    },
                }
            }
        },
        "FoX": {"model": {"position": "none", "sections": {"softmax": {"gate": "learned"}}}},
        "FoX, gate bias 4": {
            "model": {
                "position": "none",
                "sections": {"softmax": {"gate": "learned", "gate_bias": 4.0}},
            }
        },
        # The decay gates' study's other arms (configs/study_gates.py, issue 55 item 4).
        "FoX + RoPE": {"model": {"position": "rope", "sections": {"softmax": {"gate": "learned"}}}},
        "linear eq (19)": _linear("none"),
        "gated linear eq (19)": _linear("learned"),
        "retention": _linear("fixed"),
        "RoPE + NTK": {"reads": "RoPE", "scaling": {"rope_type": "ntk"}},
        "RoPE + YaRN": {"reads": "RoPE", "scaling": {"rope_type": "yarn"}},
    }


def _task(config: ConfigDict, task: str) -> None:
    """The task's generator options, evaluation sets and length."""
    config.task = task
    if task == "passkey":
        config.options = ConfigDict({"haystack": "text", "digits": 5})
        config.eval_sets = ConfigDict(
            {"text": {"depths": DEPTHS}, "filler": {"haystack": "filler", "depths": DEPTHS}}
        )
    elif task == "mqar":
        # 4 pairs and 4,000 steps: RoPE (seed 0) learned it so, its loss falling from 3.4 to
        # 0.29 between steps 600 and 1,400 and exact match 1.00 at 64 tokens, where 8 pairs
        # in 1,500 steps stayed at 0.14 (at 1e-3) and 0.12 in 3,000 (at 3e-3), and 4 pairs in
        # 1,500 at 3e-3 at 0.33 (docs/studies.md, "The length-generalization retrieval bench").
        config.options = ConfigDict({"pairs": 4, "vocab": 256})
        config.steps = 4000
        config.eval_sets = ConfigDict({"mqar": {}})
    else:
        config.options = ConfigDict({"reads": 8, "p_write": 0.1})
        config.eval_sets = ConfigDict({"flipflop": {}})


def get_config(arg=None):
    task, _, variant = (arg or "passkey").partition(",")
    if task not in TASKS or variant not in ("", "smoke"):
        raise ValueError(f"unknown argument {arg!r}; use TASK or TASK,smoke, TASK one of {TASKS}")
    config = ConfigDict()
    config.title = f"{task}: trained at one length, read at up to 8x it"
    # ModelConfig fields every arm shares (vocab_size is the task's, causal is set).
    config.model = ConfigDict(
        dict(
            num_layers=2,
            hidden_size=64,
            num_heads=2,
            intermediate_size=256,
            hidden_dropout=0.0,
            attention_dropout=0.0,
            pre_ln=True,
            layer_norm_eps=1e-6,
            max_len=64,  # unused: no arm has a learned table
        )
    )
    config.steps = 1500  # AdamW steps a run; MQAR takes its own (_task)
    _task(config, task)
    config.train_length = 64  # tokens per training row
    config.arms = ConfigDict(_arms(config.train_length))
    config.baseline = "RoPE"  # the paired tables' and verdicts' reference arm
    config.seeds = (0, 1, 2)  # each trained run's init and training rows
    config.eval_factors = (1, 2, 4, 8)  # scored at these multiples of train_length
    config.eval_rows = 200  # rows per evaluation set and length, the same for every run
    config.eval_seed = 54  # the evaluation rows' seed (training rows use (seed, 0, step))
    config.depth_edges = (0.0, 0.125, 0.375, 0.625, 0.875, 1.0)  # bins of the answers' depth
    config.batch_size = 32
    config.learning_rate = 1e-3  # AdamW, linear warm-up then cosine to 0, gradients clipped at 1
    config.warmup_steps = 100
    config.weight_decay = 0.01
    # XLA's YNNPACK fusions off: this small step takes 0.64x the time on 2 CPU cores, where the
    # MLM studies' larger one takes 1.12x (benchmarks/xla_flags.py, docs/speed.md). Not a
    # run's setting: it changes float32 results in their last bits only, as a kind of core
    # does; each result records the XLA_FLAGS it ran under.
    config.xla_flags = "--xla_cpu_experimental_ynn_fusion_type="
    if variant == "smoke":
        config.model.num_layers = 1
        config.model.hidden_size = config.model.intermediate_size = 16
        config.arms = ConfigDict({k: config.arms[k] for k in ("RoPE", "RoPE + YaRN")})
        config.seeds = (0, 1)
        config.train_length, config.eval_factors, config.eval_rows = 32, (1, 2), 8
        config.steps, config.warmup_steps, config.batch_size = 3, 1, 4
    return config
