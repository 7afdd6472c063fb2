"""Generation with a causal RoFormer: the prompt once, then one token per step.

Each attention layer keeps what its kind needs of the tokens so far (the kind's step in
`attention_kinds.ATTENTION_KINDS`): softmax a KV cache with the keys rotated at their absolute
positions, linear and cosine attention a state of constant size, so that their time and
memory per new token do not grow with the length. The model computes the same logits as its
causal forward pass on the whole sequence (tests/decoding_test.py).

Prompts of different lengths are laid out left-padded, as decoder-only generation wants them
(every row's next token then goes to the same slot): row b has pad_b padding slots first, and
its tokens sit at positions 0, 1, ... from its first real token.

What depends on the length of the whole sequence (the frequencies of the "dynamic" and
"longrope" RoPE scalings, xPos's centre) is taken at the final length, prompt + new tokens,
for every step: each token is rotated once, when its key is cached, and so as the forward
pass over the whole generated sequence rotates it.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import input_range
from roformer_jax.nn.model import RoFormer, evaluation_update
from roformer_jax.nn.sections import check_count


def generate(
    model: RoFormer,
    variables,
    input_ids,
    *,
    max_new_tokens: int,
    attention_mask=None,
    temperature: float = 0.0,
    top_k: int | None = None,
    top_p: float | None = None,
    eos_id: int | None = None,
    rng: jax.Array | None = None,
    steps_done: int | None = None,
    prefill_chunk: int | None = None,
) -> jax.Array:
    """The prompts followed by `max_new_tokens` generated tokens each: int [B, P + T].

    Args:
      model: a causal `RoFormer` (config.causal) with its LM head.
      variables: its variables ({"params": ...}).
      input_ids: int [B, P], the prompts.
      attention_mask: [B, P], 1 at real tokens; None for none padded. Padding may be on
        either side (or anywhere): each row's real tokens are moved to the right end, and
        the result is laid out that way, left-padded.
      temperature: 0 picks the most likely token (greedy); otherwise samples from
        softmax(logits / temperature), restricted to the `top_k` most likely tokens and to
        the smallest set whose probability reaches `top_p` (nucleus), when given.
      eos_id: a row that produces it is finished; later slots of that row hold eos_id.
      rng: a PRNG key, needed when temperature > 0.
      steps_done: the optimizer updates the parameters have had (a loaded run's `step`),
        which picks random attention features (model.evaluation_update); None: the first draw.
      prefill_chunk: C, the prompt's tokens per forward pass (its first pass takes P mod C):
        softmax's scores then hold [B, N, C, P + T] at a time rather than [B, N, P, P], for
        prompts too long for the latter. The same tokens, up to float rounding; None: the
        whole prompt in one pass.

    Jitted (compiled once per model, shapes and sampling settings). Ids outside the
    vocabulary are a ValueError here (nn.input_range: the jitted model would read NaN).
    """
    input_ids = jnp.asarray(input_ids)
    if input_ids.ndim != 2:
        raise ValueError(f"input_ids has shape {input_ids.shape}; expected [B, P]")
    mask = jnp.ones_like(input_ids, bool) if attention_mask is None else attention_mask
    mask = jnp.asarray(mask).astype(bool)
    _check(model, input_ids, mask, max_new_tokens, temperature, top_k, top_p, rng)
    if prefill_chunk is not None:
        check_count("prefill_chunk", prefill_chunk, " (prompt tokens per forward pass)")
    if "params" not in variables:
        raise ValueError(f"variables has keys {sorted(variables)}; expected {{'params': ...}}")
    input_range.check_in_table(input_ids, model.config.vocab_size, "input_ids", "the vocabulary")
    if eos_id is not None:
        input_range.check_in_table([eos_id], model.config.vocab_size, "eos_id", "the vocabulary")
    sampling = (float(temperature), top_k, top_p, eos_id)
    run = _compiled(model, int(max_new_tokens), *sampling, prefill_chunk)
    rng = jax.random.key(0) if rng is None else rng
    return run(variables, input_ids, mask, rng, evaluation_update(steps_done))


def _check(model, input_ids, mask, max_new_tokens, temperature, top_k, top_p, rng):
    if not isinstance(model, RoFormer):
        raise ValueError(f"generate needs a RoFormer with its LM head; got {type(model).__name__}")
    cfg = model.config
    if not cfg.causal:
        raise ValueError(
            "generate needs a causal model (ModelConfig.causal=True); this one is a "
            "bidirectional encoder, whose tokens depend on the tokens after them"
        )
    if not model.with_mlm_head:
        raise ValueError("generate needs the model's LM head (RoFormer(..., with_mlm_head=True))")
    check_count("max_new_tokens", max_new_tokens)
    if mask.shape != input_ids.shape:
        raise ValueError(f"attention_mask has shape {mask.shape}; expected {input_ids.shape}")
    empty = np.flatnonzero(~np.asarray(mask).any(axis=1))
    if empty.size:
        raise ValueError(f"prompts {empty.tolist()} have no tokens; each needs at least one")
    total = input_ids.shape[1] + max_new_tokens
    if cfg.max_length is not None and total > cfg.max_length:
        raise ValueError(
            f"prompt length {input_ids.shape[1]} + max_new_tokens {max_new_tokens} = {total} "
            f"exceeds the {cfg.max_length} positions of position={cfg.position!r} "
            f"(max_len {cfg.max_len})"
        )
    if temperature < 0:
        raise ValueError(f"temperature={temperature} must be >= 0 (0 is greedy)")
    if temperature > 0 and rng is None:
        raise ValueError(f"sampling at temperature={temperature} needs an rng key")
    if top_k is not None and not 1 <= top_k <= cfg.vocab_size:
        raise ValueError(f"top_k={top_k} is not in [1, vocab_size={cfg.vocab_size}]")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p={top_p} is not in (0, 1]")


def left_padded(input_ids, mask):
    """Each row's real tokens moved to the right end, in order: (ids, mask, positions) [B, P].

    positions count from each row's first real token (0 at padding).
    """
    order = jnp.argsort(mask, axis=1, stable=True)  # padding first, then the tokens in order
    ids, mask = (jnp.take_along_axis(x, order, axis=1) for x in (input_ids, mask))
    pad = jnp.sum(~mask, axis=1, keepdims=True)
    positions = jnp.maximum(jnp.arange(ids.shape[1])[None, :] - pad, 0)
    return ids, mask, positions


@functools.lru_cache(maxsize=32)
def _compiled(model, max_new_tokens, temperature, top_k, top_p, eos_id, prefill_chunk):
    """The jitted generation loop for one model, length, sampling rule and prefill chunk."""
    sample = functools.partial(_next_token, temperature=temperature, top_k=top_k, top_p=top_p)

    @jax.jit
    def run(variables, input_ids, mask, rng, update):
        ids, mask, positions = left_padded(input_ids, mask)
        step = decode_step(model, variables, ids.shape[1] + max_new_tokens, update)
        last, cache = prefill(step, ids, mask, positions, prefill_chunk)
        first = sample(last, jax.random.fold_in(rng, 0))  # [B]
        done = jnp.zeros_like(first, bool) if eos_id is None else first == eos_id
        next_position = positions[:, -1] + 1  # [B]

        def one_token(carry, i):
            token, done, cache = carry
            position = (next_position + i)[:, None]
            out, cache = step(cache, token[:, None], jnp.ones_like(position, bool), position)
            new = sample(out.logits[:, -1], jax.random.fold_in(rng, i + 1))
            if eos_id is not None:
                new = jnp.where(done, eos_id, new)
                done = done | (new == eos_id)
            return (new, done, cache), new

        steps = jnp.arange(max_new_tokens - 1)
        _, rest = jax.lax.scan(one_token, (first, done, cache), steps)  # [T - 1, B]
        return jnp.concatenate([ids, first[:, None], rest.T.astype(ids.dtype)], axis=1)

    return run


def decode_step(model: RoFormer, variables, total: int, update=None):
    """`step(cache, ids, mask, positions) -> (model output, cache)`: new tokens [B, T] (their
    attention mask and position ids) through the model in decode mode, after the tokens that
    `cache` (the "cache" collection; {}: none yet) holds, in a cache of `total` slots, the
    sequence's final length. update: whose random attention features (model.evaluation_update;
    None: the first draw)."""

    def step(cache, ids, mask, positions):
        return model.apply(
            {**variables, **cache},
            ids,
            attention_mask=mask,
            position_ids=positions,
            decode_length=total,
            update=update,
            mutable=["cache"],
        )

    return step


def prefill(step, ids, mask, positions, chunk: int | None):
    """The prompt [B, P] (left-padded: ids, mask, positions) through `step` (`decode_step`'s),
    `chunk` tokens at a time (None: all at once):
    returns (the logits after its last token [B, V], the cache after it).

    The first pass takes P mod C tokens (or C), then a scan takes chunks of C: one shape, one
    compiled step. A block may be all padding in a row: its queries see no key, and no later
    query sees its keys.
    """
    chunk = chunk or ids.shape[1]
    head = ids.shape[1] - (ids.shape[1] - 1) // chunk * chunk
    prompt = (ids, mask, positions)
    out, cache = step({}, *(x[:, :head] for x in prompt))
    if head == ids.shape[1]:
        return out.logits[:, -1], cache

    def one_chunk(cache, block):  # block: ([B, C], [B, C], [B, C])
        out, cache = step(cache, *block)
        return cache, out.logits[:, -1]

    chunks = tuple(jnp.moveaxis(x[:, head:].reshape(len(x), -1, chunk), 1, 0) for x in prompt)
    cache, logits = jax.lax.scan(one_chunk, cache, chunks)  # [J, B, V]
    return logits[-1], cache


def _next_token(logits, rng, *, temperature, top_k, top_p):
    """The next token of each row from its logits [B, V]: int [B]."""
    if temperature == 0.0:
        return jnp.argmax(logits, axis=-1)
    logits = logits.astype(jnp.float32) / temperature
    floor = jnp.finfo(jnp.float32).min
    if top_k is not None:
        kth = jax.lax.top_k(logits, top_k)[0][:, -1:]  # [B, 1]
        logits = jnp.where(logits < kth, floor, logits)
    if top_p is not None:
        ranked = jnp.sort(logits, axis=-1)[:, ::-1]
        mass_before = jnp.cumsum(jax.nn.softmax(ranked, axis=-1), axis=-1)
        mass_before = mass_before - jax.nn.softmax(ranked, axis=-1)
        # The smallest logit kept: the last one whose predecessors' mass is below top_p.
        cutoff = jnp.min(jnp.where(mass_before < top_p, ranked, jnp.inf), axis=-1, keepdims=True)
        logits = jnp.where(logits < cutoff, floor, logits)
    return jax.random.categorical(rng, logits, axis=-1)
