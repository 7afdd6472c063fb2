"""Which keys a softmax query sees by index: causal, a sliding window, chunks.

Glossary of shapes: L query length, M key length (or S cache slots), C chunk length.

Counted in the tokens' indices along the row (not their positions, not their segments), in
the full form (attention.py) and the decode step (attention_step.py) alike, so that the step
on a prompt and then token by token sees what the full form sees.
"""

import jax.numpy as jnp

from roformer_jax.nn.sections import check_count


def check_span(value, name: str) -> None:
    """Raises ValueError unless value (a `window` or `chunk`) is None or a positive integer
    (`sections.as_int`: a NumPy or concrete JAX one too; not a bool, not a float)."""
    if value is not None:
        check_count(name, value, " or None (keys per query)")


def sees(query_index, key_index, *, causal: bool, window: int | None, chunk: int | None):
    """bool [L, M]: whether query i (index query_index [L]) sees key j (key_index [M]).

    causal: j <= i. window: |i - j| < window (with causal: i - window < j <= i), Mistral's
    and Gemma's local layers. chunk: i // C == j // C, Llama 4's chunked layers (causal
    inside a chunk when causal): the row cut into blocks of C tokens, each seeing itself.
    """
    i, j = query_index[:, None], key_index[None, :]
    visible = jnp.ones(jnp.broadcast_shapes(i.shape, j.shape), bool)
    if causal:
        visible = visible & (j <= i)
    if window is not None:
        visible = visible & (jnp.abs(i - j) < window)
    if chunk is not None:
        visible = visible & (i // chunk == j // chunk)
    return visible


def ring_span(window: int | None, chunk: int | None) -> int | None:
    """How many of the latest keys a causal query can see at most (a decode cache's ring),
    or None: every key. A causal chunk of C sees at most its own C keys."""
    spans = [s for s in (window, chunk) if s is not None]
    return min(spans) if spans else None
