"""HuggingFace RoFormer checkpoints in and out, without torch.

`load_hf_roformer(dir)` reads `config.json` and the weights (`model.safetensors`, sharded or
not; `pytorch_model.bin` when torch is installed; or HF Flax's `flax_model.msgpack`) and
returns `(RoFormer, variables)` whose outputs equal HF `RoFormerModel`'s last_hidden_state and
`RoFormerForMaskedLM`'s logits (tests/hf_test.py measures the difference against transformers).
`save_hf_roformer` writes `model.safetensors` + `config.json` that transformers loads back.
Causal checkpoints too: HF's `is_decoder=True` is our `causal=True`, and `RoFormerForCausalLM`
has the same weight names and head (`cls.predictions`) as `RoFormerForMaskedLM`, so only
config.json tells the two apart. Cross-attention (`add_cross_attention`) has no counterpart here.
Task checkpoints (RoFormerFor{SequenceClassification, TokenClassification, QuestionAnswering,
MultipleChoice}, named by config.json's `architectures`) load as, and save from, the
`heads.TaskModel` of that head, with HF's num_labels.

How HF lays out RoPE (modeling_roformer.py), and why no weight needs permuting:
  * `RoFormerSinusoidalPositionalEmbedding` stores a table [max_position_embeddings, H] as
    halves [sin(m θ_0..θ_{H/2-1}) | cos(m θ_0..θ_{H/2-1})], θ_i = 10000^(-2i/H), one table per
    model over the head dim H (not over D).
  * `apply_rotary_position_embeddings` splits it, repeats each of sin and cos twice
    ([θ0, θ0, θ1, θ1, ...]) and rotates adjacent features (2i, 2i+1): the paper's eq. (13),
    i.e. `apply_rope(..., layout="interleaved")` at positions 0..L-1. The halves are only how
    the table is stored; the rotation pairs are interleaved. (bert4keras stores [sin, cos]
    interleaved and also rotates adjacent pairs: same rotation.)
  * RoPE acts on q and k inside each self-attention, after the q/k projections of the
    D-dimensional hidden states, so `embedding_size` (the E -> D `embeddings_project` after the
    embedding LayerNorm) does not touch it. `rotary_value` also rotates v.
We compute sin/cos from positions (exact to float32 at any position) rather than reading the
stored table; `load_hf_roformer` checks that a stored table is the one HF's formula gives.

Glossary: L sequence length, H head dim, D hidden size, E embedding size, V vocab.
"""

import functools
import json
import os
import pickle
import re

import flax
import jax
import jax.numpy as jnp
import numpy as np
import safetensors.numpy
from safetensors import safe_open

from roformer_jax.nn import heads, input_range
from roformer_jax.nn.model import RoFormer

# (ModelConfig field, HF RoFormerConfig key, HF default).
from roformer_jax.nn.model_config import ModelConfig

_CONFIG_FIELDS = (
    ("vocab_size", "vocab_size", 50000),
    ("hidden_size", "hidden_size", 768),
    ("num_layers", "num_hidden_layers", 12),
    ("num_heads", "num_attention_heads", 12),
    ("intermediate_size", "intermediate_size", 3072),
    ("hidden_dropout", "hidden_dropout_prob", 0.1),
    ("attention_dropout", "attention_probs_dropout_prob", 0.1),
    ("max_len", "max_position_embeddings", 1536),
    ("type_vocab_size", "type_vocab_size", 2),
    ("layer_norm_eps", "layer_norm_eps", 1e-12),
    ("rotary_value", "rotary_value", False),
    ("initializer_range", "initializer_range", 0.02),
    ("hidden_act", "hidden_act", "gelu"),
)
# What HF RoFormer hard-codes; a ModelConfig must agree to be saved in HF's format.
# HF RoFormer has no rope scaling, no key/value heads shared by groups of query heads and no
# sliding window: a model saved there with any of them would silently lose it (or not load).
# Every section at its defaults (RoPE's base 10000, no scaling, no window).
_HF_FIXED = dict(position="rope", attention="softmax", pre_ln=False)

# Our module path -> HF module name (without the "roformer." prefix); {i} is the layer index.
_MODULES = {
    "embeddings/word_embeddings": "embeddings.word_embeddings",
    "embeddings/token_type_embeddings": "embeddings.token_type_embeddings",
    "embeddings/LayerNorm": "embeddings.LayerNorm",
    "embeddings_project": "embeddings_project",
    "encoder/layer_{i}/attention/query": "encoder.layer.{i}.attention.self.query",
    "encoder/layer_{i}/attention/key": "encoder.layer.{i}.attention.self.key",
    "encoder/layer_{i}/attention/value": "encoder.layer.{i}.attention.self.value",
    "encoder/layer_{i}/attention/output": "encoder.layer.{i}.attention.output.dense",
    "encoder/layer_{i}/attention_norm": "encoder.layer.{i}.attention.output.LayerNorm",
    "encoder/layer_{i}/intermediate": "encoder.layer.{i}.intermediate.dense",
    "encoder/layer_{i}/output": "encoder.layer.{i}.output.dense",
    "encoder/layer_{i}/output_norm": "encoder.layer.{i}.output.LayerNorm",
    "mlm_head": "cls.predictions",  # its bias; the decoder weight is the word embeddings
    "mlm_head/dense": "cls.predictions.transform.dense",
    "mlm_head/LayerNorm": "cls.predictions.transform.LayerNorm",
}
# Flax leaf -> (torch leaf, transposed?): torch Linear weights are [out, in], kernels [in, out].
_LEAVES = {
    "kernel": ("weight", True),
    "embedding": ("weight", False),
    "scale": ("weight", False),
    "bias": ("bias", False),
}
_PREFIX = "roformer."
# Names of the encoder's weights; a checkpoint with any head stores them under _PREFIX.
_ENCODER_MODULES = ("embeddings", "embeddings_project", "encoder")
# HF's class of each task head: "question_answering" -> "RoFormerForQuestionAnswering", so that
# a new entry of heads.HEADS named after its HF class needs nothing here.
_TASK_ARCHITECTURES = {
    "RoFormerFor" + "".join(word.title() for word in head.split("_")): head for head in heads.HEADS
}
_TABLE = "encoder.embed_positions.weight"


def hf_sinusoidal_table(num_positions: int, dim: int) -> np.ndarray:
    """HF's `RoFormerSinusoidalPositionalEmbedding` weight: [num_positions, dim] float32.

    Row m is [sin(m θ_0), ..., sin(m θ_{k-1}) | cos(m θ_0), ...] with θ_j = 10000^(-2j/dim)
    and k = ceil(dim/2): halves, computed in float64 as HF does, then cast.
    """
    j = np.arange(dim)
    angles = np.arange(num_positions)[:, None] / np.power(10000.0, 2 * (j // 2) / dim)[None, :]
    table = np.concatenate([np.sin(angles[:, 0::2]), np.cos(angles[:, 1::2])], axis=1)
    return table.astype(np.float32)


def config_from_hf(hf_config: dict, **overrides) -> ModelConfig:
    """ModelConfig of an HF RoFormer config.json dict; `overrides` (e.g. dtype) replace fields."""
    if hf_config.get("model_type", "roformer") != "roformer":
        raise ValueError(f"model_type {hf_config['model_type']!r} is not 'roformer'")
    if hf_config.get("add_cross_attention", False):
        raise ValueError(
            "add_cross_attention=True: cross-attention to an encoder's outputs is not supported; "
            "only RoFormer's self-attention (bidirectional, or causal with is_decoder=True) is"
        )
    fields = {ours: hf_config.get(key, default) for ours, key, default in _CONFIG_FIELDS}
    fields["causal"] = bool(hf_config.get("is_decoder", False))
    embedding_size = hf_config.get("embedding_size")
    if embedding_size != fields["hidden_size"]:
        fields["embedding_size"] = embedding_size
    return ModelConfig(**{**fields, **_HF_FIXED, **overrides})


def config_to_hf(
    config: ModelConfig,
    *,
    with_mlm_head: bool,
    head: str | None = None,
    num_labels: int = 2,
    summary_type: str = "last",
) -> dict:
    """The HF config.json dict of `config`; ValueError if HF RoFormer cannot express it.

    head: a key of heads.HEADS, for a TaskModel with `num_labels`; its HF class is written as
    the architecture, with HF's label names (and problem_type "regression" for one label),
    and a multiple-choice summary other than HF's default as `summary_type`.
    """
    mismatched = {k: getattr(config, k) for k, v in _HF_FIXED.items() if getattr(config, k) != v}
    for name, section in config.sections.items():
        mismatched.update({f"sections.{name}.{k}": v for k, v in section.changed().items()})
    if config.kv_heads != config.num_heads:  # None and num_heads both mean "one per head"
        mismatched["num_kv_heads"] = config.num_kv_heads
    if mismatched:
        raise ValueError(
            f"HF RoFormer needs {_HF_FIXED}, every section at its defaults and num_kv_heads = "
            f"num_heads (it has no field for shared key/value heads); this config has "
            f"{mismatched}"
        )
    # RoFormerForCausalLM and RoFormerForMaskedLM share weight names; `architectures` is what
    # AutoModel and pipelines read to pick one.
    labels = {}
    if head is not None:
        architecture = {h: a for a, h in _TASK_ARCHITECTURES.items()}[head]
        labels = {
            "id2label": {str(i): f"LABEL_{i}" for i in range(num_labels)},
            "label2id": {f"LABEL_{i}": i for i in range(num_labels)},
        }
        if head == "sequence_classification" and num_labels == 1:
            labels["problem_type"] = "regression"  # what HF infers at its loss for one label
        if summary_type != "last":  # TaskModel has refused it for heads other than this one
            labels["summary_type"] = summary_type
    elif not with_mlm_head:
        architecture = "RoFormerModel"
    else:
        architecture = "RoFormerForCausalLM" if config.causal else "RoFormerForMaskedLM"
    return {
        "architectures": [architecture],
        "model_type": "roformer",
        **{key: getattr(config, ours) for ours, key, _ in _CONFIG_FIELDS},
        "embedding_size": config.embed_dim,
        "tie_word_embeddings": True,
        "is_decoder": config.causal,
        **labels,
    }


def _task_of(hf_config: dict) -> tuple[str | None, int, str]:
    """(key of heads.HEADS or None, num_labels, summary_type) of an HF config.json dict."""
    head = _TASK_ARCHITECTURES.get((hf_config.get("architectures") or [None])[0])
    summary = {k: v for k, v in hf_config.items() if k.startswith("summary_")}
    summary_type = summary.get("summary_type") or "last"
    others = [v for k, v in summary.items() if k != "summary_type"]
    if head == "multiple_choice" and (summary_type not in heads.SUMMARY_POSITIONS or any(others)):
        raise ValueError(
            f"{summary}: RoFormerForMultipleChoice with a sequence summary "
            f"other than a token's ({sorted(heads.SUMMARY_POSITIONS)}; no projection, "
            "activation or dropout) is not supported"
        )
    labels = hf_config.get("id2label")
    num_labels = len(labels) if labels else hf_config.get("num_labels", 2)
    return head, num_labels, summary_type if head == "multiple_choice" else "last"


def _hf_name(path: tuple[str, ...]) -> tuple[str, bool]:
    """Our parameter path -> (HF name without prefix, transposed?)."""
    module = "/".join(path[:-1])
    layer = re.search(r"layer_(\d+)", module)
    template = re.sub(r"layer_\d+", "layer_{i}", module)
    if template not in _MODULES or path[-1] not in _LEAVES:
        raise ValueError(f"parameter {'/'.join(path)} has no counterpart in HF RoFormer")
    leaf, transposed = _LEAVES[path[-1]]
    name = _MODULES[template].format(i=layer.group(1) if layer else "")
    return f"{name}.{leaf}", transposed


def _task_hf_name(path: tuple[str, ...]) -> tuple[str, bool]:
    """A TaskModel's parameter path -> (HF name without the encoder's prefix, transposed?)."""
    if path[0] == "roformer":
        return _hf_name(path[1:])
    leaf, transposed = _LEAVES[path[-1]]  # the head's modules carry HF's names
    return ".".join((*path[1:-1], leaf)), transposed


def _weight_files(path: str) -> tuple[str, list[str]]:
    """The first weight format present in `path`, and its files (shards listed by an index)."""
    for name in ("model.safetensors", "pytorch_model.bin", "flax_model.msgpack"):
        if os.path.exists(os.path.join(path, name)):
            return name, [os.path.join(path, name)]
        index = os.path.join(path, name + ".index.json")
        if os.path.exists(index) and name != "flax_model.msgpack":
            with open(index) as f:
                shards = sorted(set(json.load(f)["weight_map"].values()))
            return name, [_inside(path, shard, index) for shard in shards]
    raise ValueError(
        f"no model.safetensors, pytorch_model.bin or flax_model.msgpack in {path} "
        f"(found {sorted(os.listdir(path))})"
    )


def _inside(folder: str, shard: str, index: str) -> str:
    """folder/shard; a ValueError where the index points outside the checkpoint's folder."""
    file = os.path.realpath(os.path.join(folder, shard))
    if os.path.commonpath([file, os.path.realpath(folder)]) != os.path.realpath(folder):
        raise ValueError(f"{index} names a shard outside {folder}: {shard!r}; refused")
    return file


def _read_safetensors(file: str) -> dict[str, np.ndarray]:
    # The "flax" reader, not safetensors.numpy: numpy has no bfloat16, a common checkpoint dtype.
    with safe_open(file, framework="flax") as f:
        return {k: np.asarray(f.get_tensor(k).astype(jnp.float32)) for k in f.keys()}


def _read_torch(file: str) -> dict[str, np.ndarray]:
    try:
        import torch
    except ImportError:
        raise ImportError(
            f"{file} is a torch pickle and reading it needs torch; install torch, or convert the "
            "checkpoint to model.safetensors"
        ) from None
    # Before 2.6, weights_only=True could still run code (CVE-2025-32434).
    if tuple(int(n) for n in re.findall(r"\d+", torch.__version__)[:2]) < (2, 6):
        raise ValueError(
            f"{file} is a torch pickle, and torch {torch.__version__}'s weights_only load can "
            "run code in it; install torch >= 2.6, or convert it to model.safetensors"
        )
    try:
        state = torch.load(file, map_location="cpu", weights_only=True)
    except pickle.UnpicklingError as e:  # torch's text advises weights_only=False: not ours
        reason = re.search(r"WeightsUnpickler error:\s*(\S.*)", str(e))
        raise ValueError(
            f"{file} holds objects other than tensors, which could run code; refused"
            + (f" ({reason.group(1)})" if reason else "")
        ) from None
    return {k: v.float().numpy() for k, v in state.items()}


def _read_flax(file: str) -> dict[str, np.ndarray]:
    """HF Flax params (nested, Flax leaf names, "layer/0") renamed to torch state-dict names."""
    with open(file, "rb") as f:
        tree = flax.serialization.msgpack_restore(f.read())
    state = {}
    for path, value in flax.traverse_util.flatten_dict(tree).items():
        leaf, transposed = _LEAVES.get(path[-1], (path[-1], False))
        value = np.asarray(value, np.float32)
        state[".".join((*path[:-1], leaf))] = value.T if transposed else value
    return state


def read_hf_state_dict(path: str) -> dict[str, np.ndarray]:
    """All weights of an HF checkpoint directory as float32 numpy, torch names and layouts."""
    name, files = _weight_files(path)
    reader = {
        "model.safetensors": _read_safetensors,
        "pytorch_model.bin": _read_torch,
        "flax_model.msgpack": _read_flax,
    }[name]
    state = {}
    for file in files:
        state.update(reader(file))
    return state


def _check_tied(state: dict, params: dict, config: ModelConfig) -> None:
    """Weights we do not load must be what our model computes instead."""
    word_embeddings = params.get(("embeddings", "word_embeddings", "embedding"))
    expected = {  # name: (value, atol); the table may have been stored in float16
        _TABLE: (hf_sinusoidal_table(config.max_len, config.head_dim), 1e-3),
        "cls.predictions.decoder.weight": (word_embeddings, 0.0),
        "cls.predictions.decoder.bias": (params.get(("mlm_head", "bias")), 0.0),
    }
    for name, (value, atol) in expected.items():
        if name not in state:
            continue
        if value is None or np.shape(state[name]) != np.shape(value):
            raise ValueError(
                f"checkpoint weight {name} has shape {np.shape(state[name])}; the config "
                f"implies {np.shape(value)} (is max_position_embeddings the table's length?)"
            )
        if not np.allclose(state[name], value, atol=atol):
            raise ValueError(
                f"checkpoint weight {name} is not what HF RoFormer ties or computes it to "
                "(untied decoder or a different position table); it cannot be loaded faithfully"
            )


@functools.lru_cache(maxsize=32)
def _param_shapes(model, ids: tuple[int, ...]):
    """The shapes of the model's params, traced once per model: jax.eval_shape keeps no cache
    of its own, and tracing init is most of what reading a small checkpoint takes."""
    return jax.eval_shape(model.init, jax.random.key(0), jnp.zeros(ids, jnp.int32))["params"]


def _check_shapes(params: dict, model: ModelConfig | heads.TaskModel, with_head: bool) -> None:
    """Raises ValueError naming the first of `params` (flattened) that `model` would not make,
    or make in another shape: a config.json must describe the weights written beside it."""
    if isinstance(model, heads.TaskModel):
        expected = _param_shapes(model, (1, 1, 1))
    else:
        expected = _param_shapes(RoFormer(model, with_mlm_head=with_head), (1, 1))
    expected = {k: v.shape for k, v in flax.traverse_util.flatten_dict(expected).items()}
    for path_ in sorted(set(expected) | set(params)):
        shape = np.shape(params[path_]) if path_ in params else None
        if shape != expected.get(path_):
            raise ValueError(
                f"params {'/'.join(path_)} has shape {shape}; the model's config makes "
                f"{expected.get(path_)} (None: no such parameter)"
            )


def load_hf_roformer(path: str, **overrides) -> tuple[RoFormer | heads.TaskModel, dict]:
    """Reads a local HF RoFormer directory; returns (model, {"params": ...}) in float32.

    A checkpoint whose config.json names a task architecture (RoFormerForSequenceClassification,
    ...TokenClassification, ...QuestionAnswering, ...MultipleChoice) gives a heads.TaskModel
    with HF's num_labels. Otherwise a RoFormer, with the MLM head when the checkpoint has
    `cls.predictions.*` (RoFormerForMaskedLM, or RoFormerForCausalLM, whose `is_decoder=True`
    makes the model causal); weights of task heads are then ignored. `overrides` replace
    ModelConfig fields, e.g. dtype="bfloat16" or hidden_dropout=0.0 for fine-tuning.
    """
    with open(os.path.join(path, "config.json")) as f:
        hf_config = json.load(f)
    config = config_from_hf(hf_config, **overrides)
    input_range.check_vocab_file(os.path.join(path, "vocab.txt"), config.vocab_size)
    head, num_labels, summary_type = _task_of(hf_config)
    state = {k.removeprefix(_PREFIX): v for k, v in read_hf_state_dict(path).items()}
    if head is None:
        with_head = any(k.startswith("cls.predictions.transform.") for k in state)
        model, name_of, ids = RoFormer(config, with_mlm_head=with_head), _hf_name, (1, 1)
    else:  # ids [1, 1, 1] suit every head, multiple choice's [B, C, L] too
        model = heads.TaskModel(config, head, num_labels, summary_type)
        name_of, ids = _task_hf_name, (1, 1, 1)
    params, missing = {}, []
    for path_, shape in flax.traverse_util.flatten_dict(_param_shapes(model, ids)).items():
        name, transposed = name_of(path_)
        if name not in state:
            missing.append(name)
            continue
        value = state.pop(name)
        value = value.T if transposed else value
        if value.shape != shape.shape:
            raise ValueError(f"{name} has shape {value.shape}; the config implies {shape.shape}")
        params[path_] = value
    if missing:
        raise ValueError(f"checkpoint {path} lacks {missing}")
    _check_tied(state, params, config)
    # A task checkpoint holds nothing but its model; others may hold heads we do not load.
    unexpected = [
        k
        for k in state
        if k != _TABLE and (head is not None or k.split(".")[0] in _ENCODER_MODULES)
    ]
    if unexpected:
        raise ValueError(f"checkpoint {path} has weights this config does not use: {unexpected}")
    params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    return model, {"params": flax.traverse_util.unflatten_dict(params)}


def save_hf_roformer(
    model: ModelConfig | RoFormer | heads.TaskModel, variables: dict, path: str
) -> None:
    """Writes `path/model.safetensors` and `path/config.json` in HF RoFormer's format.

    model: a RoFormer or its ModelConfig, or a heads.TaskModel (as load_hf_roformer returns);
    variables: {"params": ...} of that model, whose shapes are checked against it first.
    With an MLM head the names are RoFormerForMaskedLM's ("roformer." prefix, "cls.*"), which
    are also RoFormerForCausalLM's (a causal config), without one RoFormerModel's; a TaskModel's
    are its HF class's ("roformer." prefix, "classifier.*" or "qa_outputs.*"). Parameters are
    written in float32. A pair head ("mlm_same_doc" pre-training) is left out: HF RoFormer
    has none.
    """
    if "params" not in variables:
        raise ValueError(f"variables has keys {sorted(variables)}; expected {{'params': ...}}")
    params = flax.traverse_util.flatten_dict(flax.core.unfreeze(variables)["params"])
    params = {path: value for path, value in params.items() if path[0] != "pair_head"}
    if isinstance(model, RoFormer):
        model = model.config
    if isinstance(model, heads.TaskModel):
        model_config, name_of, with_head = model.config, _task_hf_name, True
        hf_config = config_to_hf(
            model_config,
            with_mlm_head=False,
            head=model.head,
            num_labels=model.num_labels,
            summary_type=model.summary_type,
        )
    else:
        model_config, name_of = model, _hf_name
        with_head = any(p[0] == "mlm_head" for p in params)
        hf_config = config_to_hf(model_config, with_mlm_head=with_head)
    _check_shapes(params, model, with_head)
    state = {}
    for path_, value in params.items():
        name, transposed = name_of(path_)
        value = np.asarray(value, np.float32)
        prefix = _PREFIX if with_head and name.split(".")[0] in _ENCODER_MODULES else ""
        state[prefix + name] = np.ascontiguousarray(value.T if transposed else value)
    # Part of HF's state dict (a frozen parameter); written so that transformers finds it.
    table = hf_sinusoidal_table(model_config.max_len, model_config.head_dim)
    state[(_PREFIX if with_head else "") + _TABLE] = table
    os.makedirs(path, exist_ok=True)
    safetensors.numpy.save_file(
        state, os.path.join(path, "model.safetensors"), metadata={"format": "pt"}
    )
    with open(os.path.join(path, "config.json"), "w") as f:
        json.dump(hf_config, f, indent=2, sort_keys=True)
