"""The fields every experiment shares; each config file starts here and changes what differs.

Every key below is a field of one of the library's frozen configs (ModelConfig, DataConfig,
OptimConfig, TrainConfig); `roformer_jax.train.experiment_config_from_dict` turns the
`config.to_dict()` of a config into them and rejects unknown keys. Any key can be overridden
on the command line, e.g. `--config.model.position=learned --config.train.steps=100`.
"""

from ml_collections import ConfigDict, config_dict

from roformer_jax.model import SIZES


def get_base_config(size: str = "small") -> ConfigDict:
    """A RoFormer of the named size ("tiny", "small", "base") on the builtin corpus."""
    config = ConfigDict()
    config.seed = 0  # parameters, dropout, data order and masks all derive from it

    config.model = ConfigDict()
    m = config.model
    m.vocab_size = config_dict.placeholder(int)  # None: the tokenizer's vocabulary size
    # The size's shape, from roformer_jax.model.SIZES (small: 4 x 256, 4 heads, 1024).
    m.hidden_size = SIZES[size]["hidden_size"]  # D
    m.num_layers = SIZES[size]["num_layers"]
    m.num_heads = SIZES[size]["num_heads"]  # N; head dim H = D / N
    m.intermediate_size = SIZES[size]["intermediate_size"]  # F, the feed-forward width
    m.hidden_dropout = 0.1  # after embeddings and each sublayer (BERT)
    m.attention_dropout = 0.1  # on softmax attention weights
    m.max_len = 512  # rows of the learned position table (position="learned" only)
    m.type_vocab_size = 2  # segment ids; MLM batches use 0 only
    m.layer_norm_eps = 1e-12  # BERT's value
    m.embedding_size = config_dict.placeholder(int)  # E; None = D (ALBERT-style factorization)
    m.dtype = "float32"  # compute dtype: "float32" | "bfloat16" (params and loss stay float32)
    m.position = "rope"  # "rope" (RoFormer) | "learned" (BERT) | "sinusoidal" | "none"
    m.attention = "softmax"  # "softmax" | "linear" | "cosine"
    m.feature_map = "elu"  # linear attention's φ (elu(x) + 1, Katharopoulos et al. 2020)
    m.linear_rope = "numerator"  # linear attention: RoPE in the numerator only (paper eq. 19)
    m.rope_base = 10000.0  # θ_i = base^(-2i/H) (paper eq. 15)
    m.rotary_value = False  # also rotate v (HF RoFormer's rotary_value)
    m.pre_ln = False  # LayerNorm before each sublayer instead of after (BERT: after)
    m.initializer_range = 0.02  # std of the normal initializer (BERT)
    m.hidden_act = "gelu"  # exact-erf GELU, as BERT and HF RoFormer

    config.data = ConfigDict()
    d = config.data
    d.source = "builtin"  # "builtin" (Python stdlib docstrings), a path/glob, "hf:<name>[:<cfg>]"
    d.seq_len = 128  # training length, [CLS] and [SEP] included
    d.tokenizer = "wordpiece"  # "wordpiece" (trained on the train split) | "bytes" | vocab.txt
    d.vocab_size = 8192  # WordPiece vocabulary to train
    d.valid_fraction = 0.05  # documents held out for validation
    d.valid_lengths = (256, 512)  # also evaluate at these lengths (extrapolation)
    d.mask_prob = 0.15  # BERT: 15% of tokens; 80% [MASK], 10% random, 10% kept
    d.whole_word = False  # mask whole words instead of WordPiece pieces
    d.doc_separator = "line"  # for files: "line" (one doc per line) | "blank" (blank lines)
    d.max_chars = config_dict.placeholder(int)  # read at most this many characters; None = all

    config.optim = ConfigDict()
    o = config.optim
    o.optimizer = "adamw"  # "adamw" | "lamb" (RoFormerV2)
    o.learning_rate = 5e-4  # peak, after warm-up
    o.end_learning_rate = 0.0  # at the last step
    o.schedule = "linear"  # decay after warm-up: "linear" | "cosine" | "constant"
    o.warmup_steps = 200  # linear warm-up from 0
    o.b1 = 0.9
    o.b2 = 0.999
    o.eps = 1e-6  # BERT's Adam epsilon
    o.weight_decay = 0.01  # on kernels and embeddings, not on biases or LayerNorm (BERT)
    o.clip_norm = 1.0  # clip gradients to this global norm; 0 = no clipping

    config.train = ConfigDict()
    t = config.train
    t.steps = 2000  # optimizer updates
    t.batch_size = 32  # global batch: sequences per update over all devices and hosts
    t.grad_accum = 1  # micro-batches per update; batch_size / devices must divide by it
    t.log_every = 50  # steps between metrics.jsonl records and progress lines
    t.eval_every = 500  # steps between validations (and at the end)
    t.eval_batches = config_dict.placeholder(int)  # validation batches per length; None = all
    t.eval_batch_size = config_dict.placeholder(int)  # None = batch_size
    t.checkpoint_every = 500  # steps between checkpoints (and at the end, and on SIGTERM)
    t.keep_checkpoints = 3  # the last K are kept
    t.data_cache_dir = config_dict.placeholder(str)  # tokenizer + ids; None = <workdir>/data
    t.stages = ()  # ((steps, seq_len, batch_size), ...) in turn; () = steps at data.seq_len
    return config


def finish(config: ConfigDict, arg: str | None) -> ConfigDict:
    """Applies the config-string argument: `--config=configs/<name>.py:runlocal`.

    "runlocal" keeps the model and shrinks the run to a smoke test of a few minutes on a
    laptop CPU (big_vision's convention): 20 steps of 8 sequences, on 200k characters.
    """
    if arg == "runlocal":
        config.train.update(
            steps=20, batch_size=8, log_every=5, eval_every=10, checkpoint_every=10,
            eval_batches=2,
        )  # fmt: skip
        config.optim.warmup_steps = 5
        config.data.max_chars = 200_000
    elif arg:
        raise ValueError(f"unknown config argument {arg!r}; the only one is 'runlocal'")
    return config
