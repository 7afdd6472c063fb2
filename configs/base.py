"""The fields every experiment shares, generated from the library's dataclass defaults.

Every key is a field of one of the library's frozen configs (ModelConfig, DataConfig,
OptimConfig, TrainConfig), with its default and its comment there: this file adds no values
of its own but the model size and `model.vocab_size` (below). Config files start here and set
only what differs; `roformer_jax.training.config.experiment_config_from_dict` turns
`config.to_dict()` into the frozen configs. Any key can be overridden on the command line,
e.g. `--config.model.position=learned --config.train.steps=100`.
"""

import dataclasses
import types
import typing
from collections.abc import Mapping, Sequence

from ml_collections import ConfigDict, config_dict

from roformer_jax.nn.model_config import SIZES
from roformer_jax.training import finetune_config
from roformer_jax.training.config import SECTIONS, default_experiment_config


def get_base_config(size: str = "small") -> ConfigDict:
    """A RoFormer of the named size (a key of model_config.SIZES) on the builtin corpus."""
    if size not in SIZES:
        raise ValueError(f"unknown model size {size!r}; expected one of {sorted(SIZES)}")
    defaults = default_experiment_config()
    config = ConfigDict()
    config.seed = defaults.seed
    for section, cls in SECTIONS.items():
        config[section] = _section(cls, getattr(defaults, section))
    config.model.update(SIZES[size])
    # The experiment-level default: the model's vocabulary follows the tokenizer (None is
    # resolved by experiment_config_from_dict), where ModelConfig alone defaults to BERT's.
    config.model.vocab_size = config_dict.placeholder(int)
    return config


def get_finetune_base_config() -> ConfigDict:
    """Fine-tuning's fields (training.finetune_config), at their dataclass defaults: the
    builtin source_package task on a randomly initialized tiny encoder."""
    defaults = finetune_config.FinetuneExperiment()
    config = ConfigDict()
    for section, cls in finetune_config.SECTIONS.items():
        config[section] = _section(cls, getattr(defaults, section))
    # The top-level fields: all but the sections.
    config.update(_section(type(defaults), defaults, skip=tuple(finetune_config.SECTIONS)))
    return config


def get_tiny_finetune_config(
    arg: str | None, *, epochs: int, max_length: int, runlocal_max_length: int
) -> ConfigDict:
    """Fine-tuning's fields with what the tiny encoder of these configs wants (batch 32, lr 1e-3
    and 20 warm-up steps; BERT-size encoders want 2e-5 to 5e-5); `arg="runlocal"`: one epoch
    at runlocal_max_length, a smoke test."""
    config = get_finetune_base_config()
    config.task.max_length = max_length
    config.finetune.epochs = epochs
    config.finetune.batch_size = 32
    config.optim.learning_rate = 1e-3
    config.optim.warmup_steps = 20
    if config_words(arg, ("runlocal",)):
        config.finetune.epochs = 1
        config.task.max_length = runlocal_max_length
    return config


def _section(cls, values, skip: tuple[str, ...] = ()) -> ConfigDict:
    """The fields of dataclass `values`, a mapping of dataclasses (the model's sections) as
    one ConfigDict each; a None default becomes a placeholder of its type, so that
    `--config.x.y=3` parses as the annotated type and not as None's, and JSON text for a
    dict or tuple (`--config.model.sections.rope.scaling='{"rope_type": "linear", ...}'`)."""
    hints = typing.get_type_hints(cls)
    section = ConfigDict()
    for field in (f for f in dataclasses.fields(cls) if f.name not in skip):
        value = getattr(values, field.name)
        if isinstance(value, Mapping):
            value = ConfigDict({k: _section(type(v), v) for k, v in value.items()})
        section[field.name] = (
            config_dict.placeholder(_not_none(hints[field.name])) if value is None else value
        )
    return section


def _not_none(hint):
    """int for `int | None`; str (JSON text) for a dict or tuple."""
    if isinstance(hint, types.UnionType) or typing.get_origin(hint) is typing.Union:
        (hint,) = (a for a in typing.get_args(hint) if a is not type(None))
    structured = hint is tuple or typing.get_origin(hint) is tuple
    return str if structured or (isinstance(hint, type) and issubclass(hint, Mapping)) else hint


def finish(config: ConfigDict, arg: str | None) -> ConfigDict:
    """Applies the config-string argument: `--config=configs/<name>.py:runlocal`.

    "runlocal" keeps the model and shrinks the run to a smoke test of a few minutes on a
    laptop CPU (big_vision's convention): 20 steps of 8 sequences, on 200k characters.
    """
    if config_words(arg, ("runlocal",)):
        config.train.update(
            steps=20,
            batch_size=8,
            log_every=5,
            eval_every=10,
            checkpoint_every=10,
            eval_batches=2,
        )
        config.optim.warmup_steps = 5
        config.data.max_chars = 200_000
    return config


def config_words(arg: str | None, accepted: Sequence[str]) -> list[str]:
    """The comma-separated words of a config argument (`--config=<file>.py:wikitext2,runlocal`),
    each one of `accepted`, the words this config file takes: ValueError naming them all."""
    words = [w for w in (arg or "").split(",") if w]
    unknown = [w for w in words if w not in accepted]
    if unknown:
        raise ValueError(
            f"unknown config argument {', '.join(map(repr, unknown))} (in {arg!r}); this config "
            f"takes {', '.join(map(repr, accepted))}, comma-separated"
        )
    return words
