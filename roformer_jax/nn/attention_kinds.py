"""The attention kinds as one table: each kind's full form, its decode step and its options.

A new kind is its functions (attention.py, attention_step.py) plus one entry here; the model
(model.py) and its config (model_config.py) read the record and name no kind themselves.
Every full form takes q, k, v and the common keywords mask, causal, rotation; every step
takes its memory, q, k, v and mask, rotation (attention.py and attention_step.py say what
each means). Beyond those a form takes exactly the options its record names.
"""

import dataclasses
from collections.abc import Callable

import jax

from roformer_jax.nn import attention, attention_step
from roformer_jax.nn.attention_core import KernelOptions, LinearOptions, option_names


@dataclasses.dataclass(frozen=True)
class AttentionKind:
    """One attention kind.

    Attributes:
      full: (q, k, v, *, mask, causal, rotation, **options) -> out [B, L, N, H], or
        (out, smallest |denominator|) when it takes return_min_denominator=True.
      step: (memory, q, k, v, *, mask, rotation, **step_options) -> (out, memory): the
        causal form for new tokens after those in memory (None before the first).
      options: the keywords `full` takes beyond the common ones.
      step_options: the keywords `step` takes beyond the common ones.
    """

    full: Callable[..., jax.Array | tuple[jax.Array, jax.Array]]
    step: Callable[..., tuple[jax.Array, object]]
    options: frozenset[str]
    step_options: frozenset[str]


# A linear kind's full form also takes packed rows' segment ids (its step decodes one
# sequence per row) and reports how near the denominator's guard comes to binding.
_FULL_ONLY = frozenset({"segment_ids", "return_min_denominator"})

ATTENTION_KINDS: dict[str, AttentionKind] = {
    "softmax": AttentionKind(
        full=attention.softmax_attention,
        step=attention_step.softmax_attention_step,
        options=frozenset(
            {"bias", "dropout_rate", "dropout_rng", "example_ids", "segment_ids", "window"}
        ),
        # The KV cache stores each key's position (for a bias) in `capacity` slots, or in a
        # ring of `window` slots.
        step_options=frozenset({"bias", "positions", "capacity", "window"}),
    ),
    "linear": AttentionKind(
        full=attention.linear_attention,
        step=attention_step.linear_attention_step,
        options=option_names(LinearOptions) | _FULL_ONLY,
        step_options=option_names(LinearOptions),
    ),
    "cosine": AttentionKind(
        full=attention.cosine_attention,
        step=attention_step.cosine_attention_step,
        options=option_names(KernelOptions) | _FULL_ONLY,
        step_options=option_names(KernelOptions),
    ),
}
