"""Dropout's random bits: Threefry-2x32 of (example, element) counters, one fused expression.

Dropout must not depend on how a batch is split across devices, hosts or micro-batches (the
house rule: 1 device = 8). Drawing with `jax.random` from a key per example needs the model
applied to each row on its own (jax.vmap over rows), and that batch of one costs twice: every
array carries a dimension of size 1, on which XLA's CPU emitter runs a row reduction feeding a
broadcast ~15x slower than without it (LayerNorm's backward, for one), and jax lowers its
Threefry hash on the CPU with the 20 rounds rolled into 5 passes over the array of counters
(jax/_src/random/threefry2x32.py, `use_rolled_loops=True` for 'cpu').

So the hash is written out here, unrolled, as plain jnp ops: XLA fuses it into the select that
applies the mask, no array of random bits is stored, and the counter carries the example's
index in the global batch, so the model runs on the whole batch at once. The small train step
went from 522-528 to 463-466 ms (docs/speed.md, "The train step": `benchmarks/train_step.py`, two
alternating runs of the code before and after).
tests/threefry_test.py checks the hash against Random123's known-answer vectors and the masks'
rate and independence of the batch they are drawn in.
"""

import jax
import jax.numpy as jnp
import numpy as np

_ROTATIONS = ((13, 15, 26, 6), (17, 29, 16, 24))


def _rotate_left(x, d: int):
    return (x << np.uint32(d)) | (x >> np.uint32(32 - d))


def threefry2x32(k1, k2, x1, x2):
    """Threefry-2x32 (Salmon et al. 2011, 20 rounds) of counters (x1, x2) under key (k1, k2).

    All uint32, broadcast together. Returns the two output words.
    """
    ks = (k1, k2, k1 ^ k2 ^ np.uint32(0x1BD11BDA))
    x1, x2 = x1 + ks[0], x2 + ks[1]
    for block in range(5):
        for rotation in _ROTATIONS[block % 2]:
            x1 = x1 + x2
            x2 = _rotate_left(x2, rotation) ^ x1
        x1 = x1 + ks[(block + 1) % 3]
        x2 = x2 + ks[(block + 2) % 3] + np.uint32(block + 1)
    return x1, x2


def _key_words(key):
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        if str(jax.random.key_impl(key)) != "threefry2x32":
            raise ValueError(f"dropout needs a threefry2x32 key; got {jax.random.key_impl(key)}")
        key = jax.random.key_data(key)
    return key[..., 0], key[..., 1]


def bernoulli_rows(key, example_ids, p: float, shape: tuple[int, ...]) -> jax.Array:
    """bool [B, *row]: True with probability p, row b drawn from (key, example_ids[b]) only.

    key: one threefry2x32 key (typed, or raw uint32 [2]); example_ids: int [B], each row's
    index in the global batch; shape: [B, *row], fewer than 2^32 elements per row. Element j
    of row r (row-major) is True when the top 23 bits of x1 ^ x2, (x1, x2) =
    threefry2x32(key, (r, j)), read as a uniform in [0, 1) (as `jax.random.uniform` reads
    them), fall below p. So a row's mask does not depend on which other rows share its batch,
    device or host.
    """
    row_shape = shape[1:]
    if int(np.prod(row_shape)) >= 2**32:
        raise ValueError(f"rows of {row_shape} have 2^32 or more elements")
    element = jnp.zeros(row_shape, jnp.uint32)  # row-major index within the row
    stride = 1
    for axis in reversed(range(len(row_shape))):
        iota = jax.lax.broadcasted_iota(jnp.uint32, row_shape, axis)
        element = element + iota * np.uint32(stride)
        stride *= row_shape[axis]
    return bernoulli_at(key, example_ids, p, element)


def bernoulli_at(key, example_ids, p: float, element) -> jax.Array:
    """`bernoulli_rows`' draws at the given elements: bool [B, *E], element uint32 [*E] the
    row-major indices within a row. A block of a row's mask (context parallelism's, of the
    keys a device holds) is thus the same bits as the whole row's."""
    k1, k2 = _key_words(key)
    rows = jnp.asarray(example_ids).astype(jnp.uint32).reshape((-1,) + (1,) * element.ndim)
    bits = jnp.bitwise_xor(*threefry2x32(k1, k2, rows, element[None]))
    mantissa = (bits >> np.uint32(9)) | np.uint32(0x3F800000)  # a float in [1, 2)
    uniform = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1.0)
    return uniform < np.float32(p)


def dropped(x, keep, rate: float):
    """Inverted dropout: x / (1 - rate) where `keep` (a mask of the functions above, which
    broadcasts against x), 0 elsewhere, so that the expectation is x."""
    return jnp.where(keep, x / (1.0 - rate), 0.0)
