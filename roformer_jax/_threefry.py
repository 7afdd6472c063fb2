"""`jax.random.bernoulli`, bit for bit, as one elementwise expression that XLA fuses.

Why: on the CPU, jax lowers its Threefry-2x32 hash with the 20 rounds rolled into a loop of 5
steps (jax/_src/random/threefry2x32.py, `use_rolled_loops=True` for 'cpu'), and XLA runs each
step as its own pass over the whole array of counters. Dropout draws one 32-bit word per
element of every activation it masks (attention weights [B, N, L, L] included), so the train
step spent ~11% of its time in those passes and in the copies around them
(`benchmarks/profile_step.py`). Written out here unrolled, as plain jnp ops, the hash fuses
into the select that applies the mask: no array of random bits is ever stored.

The words are those of jax's partitionable Threefry (`jax_threefry_partitionable`, the
default): element i (row-major) of a [*shape] draw is the XOR of the two outputs of
threefry2x32(key, (hi32(i), lo32(i))), and `uniform` keeps its top 23 bits as the mantissa of
a float in [1, 2). tests/threefry_test.py checks equality with `jax.random.bernoulli` and
falls back to it for any other key implementation.
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


def _is_threefry(key) -> bool:
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        return str(jax.random.key_impl(key)) == "threefry2x32"
    return key.dtype == jnp.uint32 and key.shape[-1:] == (2,)  # a raw (legacy) key


def bernoulli(key, p: float, shape: tuple[int, ...]) -> jax.Array:
    """`jax.random.bernoulli(key, p, shape)` (mode "low"), the same booleans.

    key: one key (typed or raw uint32 [2]); p: a Python float; shape: fewer than 2^32
    elements.
    """
    if not _is_threefry(key) or int(np.prod(shape)) >= 2**32:
        return jax.random.bernoulli(key, p, shape)
    if jnp.issubdtype(key.dtype, jax.dtypes.prng_key):
        key = jax.random.key_data(key)
    index = jnp.zeros(shape, jnp.uint32)  # row-major flat index; below 2^32, so hi32 = 0
    stride = 1
    for axis in reversed(range(len(shape))):
        index = index + jax.lax.broadcasted_iota(jnp.uint32, shape, axis) * np.uint32(stride)
        stride *= shape[axis]
    bits = jnp.bitwise_xor(*threefry2x32(key[0], key[1], jnp.zeros_like(index), index))
    mantissa = (bits >> np.uint32(9)) | np.uint32(0x3F800000)  # a float in [1, 2)
    uniform = jax.lax.bitcast_convert_type(mantissa, jnp.float32) - np.float32(1.0)
    return uniform < np.float32(p)
