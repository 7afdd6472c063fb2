"""What a pre-training run is: the frozen configs, their construction from a dict, their diff.

    cfg = experiment_config_from_dict(config.to_dict())   # from an ml_collections config

The dataclasses hold every default (configs/base.py is generated from them). A saved config
(config.json, a checkpoint's meta) is compared to the current one by `config_diff`, the one
rule for "is this the same run".
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping
from typing import Any

import numpy as np

from roformer_jax.data.data_config import DataConfig
from roformer_jax.data.tokenizer import tokenizer_vocab_size
from roformer_jax.nn.model_config import ModelConfig, model_config_from_dict, nested_model_dict
from roformer_jax.training.mesh import MeshConfig
from roformer_jax.training.optim import OptimConfig


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """How long to train, on what batch, and how often to log, evaluate and checkpoint."""

    steps: int = 2000  # optimizer updates
    batch_size: int = 32  # global: sequences per update, summed over every device and host
    grad_accum: int = 1  # micro-batches per update (a scan inside the step)
    log_every: int = 50  # steps between metrics.jsonl records and progress lines
    eval_every: int = 500  # steps between validations (and always at the end)
    # The held-out text of this many validation batches at the training length, scored at
    # every length (data/length_eval.py); None = all of it.
    eval_batches: int | None = None
    eval_batch_size: int | None = None  # None = batch_size
    checkpoint_every: int = 500  # steps between checkpoints (and at the end, and on SIGTERM)
    keep_checkpoints: int = 3  # the last K are kept
    data_cache_dir: str | None = None  # tokenizer + token ids; None = <workdir>/data
    # (steps, seq_len, batch_size) of each stage in turn, e.g. the alternating lengths and
    # batch sizes of RoFormer's Table 4; the steps sum to `steps`. () = one stage of `steps`
    # at data.seq_len and batch_size.
    stages: tuple[tuple[int, int, int], ...] = ()
    # The workdir of another pre-training run whose newest checkpoint's parameters this run
    # starts from (fresh optimizer, step 0), e.g. a short fine-tune at a new length with
    # model.sections.rope.scaling; the model config may differ only where parameters do not. A run
    # resumed from its own checkpoint ignores it. In a study, "run:<name>" is that run's
    # workdir for the same seed (study.run_study). None = random initialization.
    init_from: str | None = None

    def __post_init__(self):
        object.__setattr__(self, "stages", tuple(tuple(s) for s in self.stages))  # JSON lists
        if any(len(s) != 3 or min(s) < 1 for s in self.stages):
            raise ValueError(f"stages {self.stages} must be (steps, seq_len, batch_size) >= 1")
        if self.stages and sum(s[0] for s in self.stages) != self.steps:
            raise ValueError(
                f"the stages' steps {[s[0] for s in self.stages]} sum to "
                f"{sum(s[0] for s in self.stages)}, not steps={self.steps}"
            )
        for name in ("steps", "batch_size", "grad_accum", "log_every", "eval_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if self.checkpoint_every < 1 or self.keep_checkpoints < 1:
            raise ValueError(
                f"checkpoint_every={self.checkpoint_every} and "
                f"keep_checkpoints={self.keep_checkpoints} must be >= 1"
            )


@dataclasses.dataclass(frozen=True)
class ExperimentConfig:
    model: ModelConfig
    data: DataConfig
    optim: OptimConfig
    train: TrainConfig
    seed: int = 0  # parameters, dropout, data order and masks all derive from it
    mesh: MeshConfig = MeshConfig()  # where it runs: jit / pmap, or one jit over a mesh

    def __post_init__(self):
        # A next-token loss on a bidirectional encoder is trivial (position i sees token
        # i + 1), so it is an error. An MLM objective on a causal encoder would be legal, but
        # it sees only left context around each [MASK]: almost surely a forgotten
        # data.objective="clm", so it is an error too.
        if self.model.causal != self.data.causal:
            raise ValueError(
                f"data.objective={self.data.objective!r} needs model.causal="
                f"{self.data.causal}, got model.causal={self.model.causal}; set both "
                "(causal LM: data.objective='clm' with model.causal=True)"
            )


SECTIONS = {
    "model": ModelConfig,
    "data": DataConfig,
    "optim": OptimConfig,
    "train": TrainConfig,
    "mesh": MeshConfig,
}
# config.json's record of the changes a resume made on purpose (training.workdir): not a
# setting, so building a config and comparing two leave it out.
HISTORY = "history"


def experiment_config_from_dict(d: Mapping) -> ExperimentConfig:
    """Builds the frozen configs from a nested dict (e.g. `ConfigDict.to_dict()`).

    Unknown keys are errors. `model.vocab_size` None means "as the tokenizer": data.vocab_size
    for a trained WordPiece, 261 for bytes, the line count of a given vocab.txt.
    `model.sections.linear.feature_seed` None means "the experiment's seed" for a model that
    draws random features (FAVOR+), so that each seed of a study draws its own; others keep
    None, so the configs of runs saved before the field existed still compare equal. The
    model's dict may be in the flat layout of runs saved before the sections
    (`model_config_from_dict`).
    """
    unknown = sorted(set(d) - set(SECTIONS) - {"seed", HISTORY})
    if unknown:
        raise ValueError(f"unknown config keys {unknown}; expected {sorted(SECTIONS)} and seed")
    data = section_from_dict(DataConfig, d.get("data", {}), "data")
    model = dict(d.get("model", {}))
    if model.get("vocab_size") is None:
        model["vocab_size"] = tokenizer_vocab_size(
            data.tokenizer, wordpiece_vocab_size=data.vocab_size
        )
    seed = int(d.get("seed", 0))
    model = model_config_from_dict(model)
    if model.draws_features and model.attention_section.feature_seed is None:
        model = model.with_section(model.attention, feature_seed=seed)
    return ExperimentConfig(
        model=model,
        data=data,
        optim=section_from_dict(OptimConfig, d.get("optim", {}), "optim"),
        train=section_from_dict(TrainConfig, d.get("train", {}), "train"),
        seed=seed,
        mesh=section_from_dict(MeshConfig, d.get("mesh", {}), "mesh"),
    )


def section_from_dict(cls, values: Mapping, section: str):
    """cls(**values), refusing unknown keys and float values that are not finite."""
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(values) - fields)
    if unknown:
        raise ValueError(f"unknown keys in config.{section}: {unknown}; known: {sorted(fields)}")
    check_finite(values, f"config.{section}")
    # JSON and ConfigDict overrides may turn tuples into lists; frozen configs want tuples.
    return cls(**{k: tuple(v) if isinstance(v, list) else v for k, v in values.items()})


# Every setting is used in float32 on the devices: 1e39 is inf there.
_FLOAT32_MAX = float(np.finfo(np.float32).max)


def check_finite(value: Any, name: str) -> None:
    """Raises ValueError naming the first float in `value` (nested dicts, lists, tuples) that
    is NaN or past float32's range; a NaN passes every `x <= 0` check of a field after it."""
    if isinstance(value, Mapping):
        for key, item in value.items():
            check_finite(item, f"{name}.{key}")
    elif isinstance(value, list | tuple):
        for i, item in enumerate(value):
            check_finite(item, f"{name}[{i}]")
    elif isinstance(value, float) and not abs(value) <= _FLOAT32_MAX:
        raise ValueError(f"{name}={value} is not a finite float32 number")


ABSENT = "<absent>"  # how `config_diff` shows a key one side lacks


def config_diff(
    saved: Mapping, current: Any, *, defaults: Any = None, ignore: tuple[str, ...] = ()
) -> dict[str, tuple[Any, Any]]:
    """{dotted key: (saved value, current value)} for every leaf where the two differ.

    saved: a config as read back from JSON. current, defaults: a dataclass config or a dict
    of one. A model config in the flat layout of before the sections, on either side, is read
    in the sections layout (`nested_model_dict`). Both sides are compared in their JSON form
    (tuples as lists). A key that only `current` has counts as its value in `defaults` on the
    saved side (a field added since the save), or as ABSENT without defaults. Keys in
    `ignore` are left out.
    """
    model = isinstance(current, ModelConfig) or isinstance(defaults, ModelConfig)
    saved = {k: v for k, v in _as_json(_nested(saved, model)).items() if k != HISTORY}
    saved, now = _flat(saved), _flat(_as_json(_nested(current, model)))
    default = _flat(_as_json(defaults)) if defaults is not None else {}
    return {
        key: (saved.get(key, default.get(key, ABSENT)), now.get(key, ABSENT))
        for key in sorted(saved.keys() | now.keys())
        if key not in ignore and saved.get(key, default.get(key, ABSENT)) != now.get(key, ABSENT)
    }


def _nested(config: Any, model: bool) -> Any:
    """A config dict with its model config (the whole dict, for `model`) in the sections
    layout; a dataclass as it is."""
    if not isinstance(config, Mapping):
        return config
    if model:
        return nested_model_dict(config)
    if isinstance(config.get("model"), Mapping):
        return {**config, "model": nested_model_dict(config["model"])}
    return config


def default_experiment_config() -> ExperimentConfig:
    """Every section at its dataclass defaults: what a field added since a save stood for."""
    return ExperimentConfig(ModelConfig(), DataConfig(), OptimConfig(), TrainConfig())


def _as_json(config: Any) -> dict:
    if dataclasses.is_dataclass(config):
        config = dataclasses.asdict(config)
    return json.loads(json.dumps(config))


def _flat(d: Mapping, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, Mapping):
            out.update(_flat(value, f"{prefix}{key}."))
        else:
            out[prefix + key] = value
    return out
