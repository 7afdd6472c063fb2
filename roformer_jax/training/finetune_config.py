"""What a fine-tuning run is: the task, the schedule, the optimizer, where the encoder comes from
and where it runs (the device mesh).

    cfg = finetune_experiment_from_dict(config.to_dict())   # from an ml_collections config

The dataclasses hold every default (configs/base.py's `get_finetune_base_config` is generated
from them); the optimizer section is pre-training's OptimConfig with fine-tuning's defaults.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping

from roformer_jax.data.tasks import TRUNCATIONS
from roformer_jax.nn.heads import SUMMARY_POSITIONS
from roformer_jax.nn.model_config import SIZES, ModelConfig
from roformer_jax.training.config import section_from_dict
from roformer_jax.training.mesh import MeshConfig
from roformer_jax.training.optim import OptimConfig
from roformer_jax.training.task_kinds import TASK_KINDS


@dataclasses.dataclass(frozen=True)
class TaskConfig:
    """The data of a task, how it is encoded, and the metric that chooses the best epoch."""

    # A .jsonl/.json/.csv file, or "builtin:<name>" (a task of data.builtin_tasks.BUILTIN_TASKS,
    # generated into <workdir>/data with its own valid and test files).
    train_file: str = "builtin:source_package"
    valid_file: str | None = None  # None: a builtin task's, else required
    test_file: str | None = None  # evaluated once with the best checkpoint; None: a builtin's
    # The task kind, a key of task_kinds.TASK_KINDS: "classification" |
    # "token_classification" | "qa" | "multiple_choice"; its columns, head, loss and metrics
    format: str = "classification"
    metric: str = "accuracy"  # one of the kind's metrics: classification and
    # token_classification: accuracy | macro_f1; qa: exact_match | f1; multiple_choice: accuracy
    max_length: int = 128  # tokens per row, [CLS] and [SEP]s included
    # "head" | "tail" | "head+tail" (qa: the context's head; token_classification: the head)
    truncation: str = "head"
    # label (token_classification: tag) names in id order; () = the training file's, sorted
    labels: tuple[str, ...] = ()
    # multiple_choice: the token each choice is scored at (heads.MultipleChoice): "last", HF's
    # default, a padding token in a padded row; "first", [CLS]
    summary_type: str = "last"

    def __post_init__(self):
        object.__setattr__(self, "labels", tuple(str(x) for x in self.labels))
        if self.format not in TASK_KINDS:
            raise ValueError(f"format {self.format!r} is not one of {sorted(TASK_KINDS)}")
        if self.metric not in TASK_KINDS[self.format].metrics:
            raise ValueError(
                f"metric {self.metric!r} does not suit format {self.format!r}; use one of "
                f"{TASK_KINDS[self.format].metrics}"
            )
        if self.truncation not in TRUNCATIONS:
            raise ValueError(f"truncation {self.truncation!r} is not one of {TRUNCATIONS}")
        if self.summary_type not in SUMMARY_POSITIONS:
            raise ValueError(
                f"summary_type {self.summary_type!r} is not one of {sorted(SUMMARY_POSITIONS)}"
            )
        if self.summary_type != "last" and self.format != "multiple_choice":
            raise ValueError(
                f"summary_type={self.summary_type!r} is for format "
                f"'multiple_choice', not {self.format!r}"
            )
        if self.max_length < 4:
            raise ValueError(f"max_length {self.max_length} leaves no room for text")
        if not self.train_file.startswith("builtin:") and self.valid_file is None:
            raise ValueError(f"train_file {self.train_file!r} needs a valid_file")


@dataclasses.dataclass(frozen=True)
class FinetuneConfig:
    """How long and on what batches; layer-wise learning-rate decay."""

    epochs: int = 3  # passes over the training file; validation after each
    batch_size: int = 32  # global, split over the devices
    eval_batch_size: int | None = None  # None = batch_size
    # Layer-wise lr decay (Clark et al. 2020, ELECTRA): the head learns at lr, the top
    # encoder layer at lr·decay, layer i of n (0 = bottom) at lr·decay^(n - i), the
    # embeddings at lr·decay^(n + 1). 1.0 = off.
    layer_decay: float = 1.0
    log_every: int = 20  # steps between train records and progress lines
    # The encoder's dropout while fine-tuning (HF: hidden_dropout_prob and
    # attention_probs_dropout_prob given to from_pretrained); None keeps the encoder's own.
    hidden_dropout: float | None = None
    attention_dropout: float | None = None

    def __post_init__(self):
        for name in ("epochs", "batch_size", "log_every"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name}={getattr(self, name)} must be >= 1")
        if not 0.0 < self.layer_decay <= 1.0:
            raise ValueError(f"layer_decay {self.layer_decay} must be in (0, 1]")

    def encoder_config(self, model_cfg: ModelConfig) -> ModelConfig:
        """The encoder's config with this fine-tuning's dropout where it sets one."""
        rates = {"hidden_dropout": self.hidden_dropout, "attention_dropout": self.attention_dropout}
        return dataclasses.replace(model_cfg, **{k: v for k, v in rates.items() if v is not None})


@dataclasses.dataclass(frozen=True)
class FinetuneExperiment:
    task: TaskConfig = TaskConfig()
    finetune: FinetuneConfig = FinetuneConfig()
    # BERT's fine-tuning recipe (Devlin et al. 2019, appendix A.3: lr in {2, 3, 5}e-5) with
    # pre-training's AdamW, clipping and linear decay; warm-up in steps.
    optim: OptimConfig = OptimConfig(learning_rate=5e-5, warmup_steps=50)
    # A pre-training workdir (train_mlm.py's), or a local HF RoFormer directory with its
    # vocab.txt; None = a randomly initialized encoder of size `random_init_size` on bytes.
    init_from: str | None = None
    random_init_size: str = "tiny"  # a key of model_config.SIZES; used only without init_from
    seed: int = 0  # head initialization, dropout and data order
    mesh: MeshConfig = MeshConfig()  # where it runs: jit / pmap, or one jit over a mesh

    def __post_init__(self):
        if self.random_init_size not in SIZES:
            raise ValueError(
                f"random_init_size {self.random_init_size!r} is not one of {sorted(SIZES)}"
            )


SECTIONS = {
    "task": TaskConfig,
    "finetune": FinetuneConfig,
    "optim": OptimConfig,
    "mesh": MeshConfig,
}
_TOP_LEVEL = ("init_from", "random_init_size", "seed")


def finetune_experiment_from_dict(d: Mapping) -> FinetuneExperiment:
    """The frozen configs of a nested dict (e.g. `ConfigDict.to_dict()`); unknown keys are
    errors."""
    unknown = sorted(set(d) - set(SECTIONS) - set(_TOP_LEVEL))
    if unknown:
        raise ValueError(
            f"unknown config keys {unknown}; expected {sorted(SECTIONS)} and {list(_TOP_LEVEL)}"
        )
    defaults = FinetuneExperiment()  # a section's missing keys: its default there, not the
    # dataclass's own (fine-tuning's optimizer is not pre-training's)
    sections = {
        name: section_from_dict(
            cls, {**dataclasses.asdict(getattr(defaults, name)), **d.get(name, {})}, name
        )
        for name, cls in SECTIONS.items()
    }
    return FinetuneExperiment(**sections, **{k: d[k] for k in _TOP_LEVEL if k in d})
