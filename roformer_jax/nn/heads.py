"""Task heads over the encoder: HF's RoFormerFor{SequenceClassification, TokenClassification,
QuestionAnswering, MultipleChoice}, parameter for parameter (hf.py loads and saves them).

A head is one Flax module over the encoder's hidden states plus one entry in `HEADS`;
`TaskModel` runs the encoder and the named head. The encoder (model.py) knows no task.

Glossary of shapes:
  B batch, C choices (multiple choice), L sequence length, D hidden size, K num_labels.

Parameter tree of a TaskModel; inside `head` the names are HF's, "." for "/":
  roformer/...                        the encoder, as RoFormer(with_mlm_head=False)
  head/classifier/{dense, out_proj}   sequence_classification
  head/classifier                     token_classification, multiple_choice
  head/qa_outputs                     question_answering
"""

import functools
from typing import NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn.model import Dropout, RoFormer, _dense

# NamedTuples, as the encoder's EncoderOutput: fields are HF's output names, read as HF's
from roformer_jax.nn.model_config import ACTIVATIONS, ModelConfig
from roformer_jax.nn.sections import check_count


# `out.logits`; a misspelt field fails instead of returning None; jit returns them as pytrees.
class ClassifierOutput(NamedTuple):
    logits: jax.Array  # [B, K] sequence, [B, L, K] token, [B, C] multiple choice; float32


class SpanOutput(NamedTuple):
    start_logits: jax.Array  # [B, L] float32
    end_logits: jax.Array  # [B, L] float32


class ClassificationHead(nn.Module):
    """HF's RoFormerClassificationHead: first token [..., D] → dropout, dense D → D, activation,
    dropout, out_proj D → K. HF names it `classifier`; regression is K = 1."""

    config: ModelConfig
    num_labels: int

    @nn.compact
    def __call__(self, x, deterministic, example_ids=None):  # x [B, L, D]
        cfg = self.config
        dropout = functools.partial(
            Dropout(cfg.hidden_dropout, deterministic=deterministic), example_ids=example_ids
        )
        x = dropout(x[..., 0, :])  # [..., D]: the first token ([CLS])
        x = ACTIVATIONS[cfg.hidden_act](_dense(cfg, cfg.hidden_size, "dense")(x))
        return _dense(cfg, self.num_labels, "out_proj")(dropout(x))  # [..., K]


class SequenceClassification(nn.Module):
    """Logits [B, K] of the whole sequence (or of a pair, told apart by token_type_ids 0/1)."""

    config: ModelConfig
    num_labels: int

    @nn.compact
    def __call__(self, hidden, deterministic, example_ids=None) -> ClassifierOutput:
        logits = ClassificationHead(self.config, self.num_labels, name="classifier")(
            hidden, deterministic, example_ids
        )  # hidden [B, L, D]
        return ClassifierOutput(logits.astype(jnp.float32))


class TokenClassification(nn.Module):
    """Logits [B, L, K] of every token: dropout, then classifier D → K."""

    config: ModelConfig
    num_labels: int

    @nn.compact
    def __call__(self, hidden, deterministic, example_ids=None) -> ClassifierOutput:
        x = Dropout(self.config.hidden_dropout)(hidden, deterministic, example_ids)  # [B, L, D]
        logits = _dense(self.config, self.num_labels, "classifier")(x)  # [B, L, K]
        return ClassifierOutput(logits.astype(jnp.float32))


class QuestionAnswering(nn.Module):
    """Extractive QA: qa_outputs D → 2 gives the span's start and end logits [B, L].

    No dropout, as HF's. Always two outputs (HF sets num_labels = 2); num_labels is unused.
    """

    config: ModelConfig
    num_labels: int

    @nn.compact
    def __call__(self, hidden, deterministic, example_ids=None) -> SpanOutput:  # [B, L, D]
        logits = _dense(self.config, 2, "qa_outputs")(hidden).astype(jnp.float32)  # [B, L, 2]
        return SpanOutput(start_logits=logits[..., 0], end_logits=logits[..., 1])


# HF's SequenceSummary `summary_type`s without projection: the position each choice is read at.
SUMMARY_POSITIONS = {"last": -1, "first": 0}


class MultipleChoice(nn.Module):
    """Logits [B, C]: one score per choice, classifier D → 1 on each choice's summary token.

    HF's `sequence_summary` reads `summary_type` from the config, which RoFormerConfig does not
    define, so it falls back to "last": the hidden state at position L - 1, a padding token
    when the choice is padded, with no projection, activation or dropout. That is the default
    here too, so that HF checkpoints give HF's logits. "first" reads [CLS] instead, as BERT's
    heads do; a padded row's last position is a padding token, whose state differs with how
    much text the row holds, so compare lengths with "first". HF honors either when
    config.json sets `summary_type` (hf.py writes it). num_labels is unused.
    """

    config: ModelConfig
    num_labels: int
    summary_type: str = "last"  # a key of SUMMARY_POSITIONS

    @nn.compact
    def __call__(self, hidden, deterministic, example_ids=None) -> ClassifierOutput:
        # hidden [B, C, L, D]; no dropout, so example_ids are unused
        if hidden.ndim != 4:
            raise ValueError(
                f"multiple choice takes input_ids [B, C, L]; got hidden states {hidden.shape}"
            )
        summary = hidden[..., SUMMARY_POSITIONS[self.summary_type], :]  # [B, C, D]
        scores = _dense(self.config, 1, "classifier")(summary)  # [B, C, 1]
        return ClassifierOutput(scores[..., 0].astype(jnp.float32))  # [B, C]


HEADS: dict[str, type[nn.Module]] = {
    "sequence_classification": SequenceClassification,
    "token_classification": TokenClassification,
    "question_answering": QuestionAnswering,
    "multiple_choice": MultipleChoice,
}


class TaskModel(nn.Module):
    """The encoder (no MLM head) named "roformer", then the head `HEADS[head]` named "head".

    Call with input_ids int [..., L] (multiple choice: [B, C, L]) and, of the same shape,
    attention_mask and token_type_ids (1 = the second text of a pair); the leading dims are
    flattened for the encoder, as HF's RoFormerForMultipleChoice flattens [B, C, L] to
    [B·C, L], and restored for the head. Dropout draws from the "dropout" rng stream when
    deterministic=False, each example's masks from that key and its example_ids int [B] (its
    index in the global batch; default arange(B)). `update` (the optimizer updates done, in
    training) redraws random attention features as RoFormer's does. Returns the head's output
    (ClassifierOutput or SpanOutput).
    """

    config: ModelConfig
    head: str = "sequence_classification"
    num_labels: int = 2  # HF's default; question answering and multiple choice ignore it
    summary_type: str = "last"  # multiple choice's summary token: MultipleChoice

    @nn.compact
    def __call__(
        self,
        input_ids,
        *,
        attention_mask=None,
        token_type_ids=None,
        deterministic=True,
        example_ids=None,
        update=None,
    ):
        if self.head not in HEADS:
            raise ValueError(f"unknown head {self.head!r}; expected one of {sorted(HEADS)}")
        if self.summary_type not in SUMMARY_POSITIONS:
            raise ValueError(
                f"unknown summary_type {self.summary_type!r}; expected one of "
                f"{sorted(SUMMARY_POSITIONS)}"
            )
        check_count("num_labels", self.num_labels)
        options = {}  # what only some heads take: given to those that declare it
        if "summary_type" in HEADS[self.head].__dataclass_fields__:
            options["summary_type"] = self.summary_type
        elif self.summary_type != "last":
            raise ValueError(
                f"summary_type={self.summary_type!r} is for multiple_choice; the "
                f"{self.head} head has no summary token to choose"
            )
        input_ids = jnp.asarray(input_ids)
        if input_ids.ndim < 2:
            raise ValueError(f"input_ids has shape {input_ids.shape}; expected [B, L] or [B, C, L]")
        leading, length = input_ids.shape[:-1], input_ids.shape[-1]

        def flat(x, name):  # [..., L] -> [B', L]
            if x is None:
                return None
            if jnp.shape(x) != input_ids.shape:
                raise ValueError(f"{name} has shape {jnp.shape(x)}; expected {input_ids.shape}")
            return jnp.reshape(jnp.asarray(x), (-1, length))

        encoder_ids = None  # each flattened row its own id: example b's choice c is b·C + c
        if example_ids is not None:
            choices = int(np.prod(leading[1:], dtype=int))
            encoder_ids = jnp.asarray(example_ids)[:, None] * choices + jnp.arange(choices)
        out = RoFormer(self.config, with_mlm_head=False, name="roformer")(
            flat(input_ids, "input_ids"),
            attention_mask=flat(attention_mask, "attention_mask"),
            token_type_ids=flat(token_type_ids, "token_type_ids"),
            deterministic=deterministic,
            example_ids=None if encoder_ids is None else encoder_ids.reshape(-1),
            update=update,
        )
        hidden = out.hidden_states.reshape(*leading, length, -1)  # [..., L, D]
        head = HEADS[self.head](self.config, self.num_labels, name="head", **options)
        return head(hidden, deterministic, example_ids)
