"""How the linear kinds (attention.py, attention_core.py) are made fast on XLA's CPU backend,
and why.

Each function here computes a formula of those modules in a form chosen for the CPU.
`feature_sums` and `exclusive_cumsum` have plain forms, which attention_core.py uses on other
backends (tests/attention_test.py checks that both agree); `after` is right everywhere and
used everywhere (elu + 1's CPU-minded form is feature_maps.elu_plus_one). Every choice was
measured with benchmarks/attention.py (2-core CPU, B·N = 8, H = 64); the numbers are in each
docstring.

Shapes as in attention.py: B batch, L query length, M key length, N heads, F feature dim,
E value columns, J chunks.
"""

import jax
import jax.numpy as jnp


def feature_sums(qf, key_sums):
    """qf_i·key_sums per query and head: [B, L, N, F], [B, N, F] -> [B, N, L, 1].

    The plain form is einsum('BLNF,BNF->BNL'). Here: one GEMM of qf as [L, N·F] against the
    key sums laid out block-diagonally, [N·F, N]: N times the needed products, yet far faster
    on CPU than XLA's batched matrix-vector products (one per head), which it runs as an
    unvectorized loop.
    """
    b, length, n, f = qf.shape
    blocks = key_sums[..., None] * jnp.eye(n, dtype=key_sums.dtype)[:, None, :]
    den = jnp.einsum("BLK,BKN->BLN", qf.reshape(b, length, n * f), blocks.reshape(b, n * f, n))
    return jnp.swapaxes(den[..., None], 1, 2)  # [B, N, L, 1]


def after(x, dependency):
    """x, computed only once `dependency` is.

    Eq. (19) needs φ(q) in a buffer of its own for the denominator's GEMM. XLA's CPU scheduler
    computed φ(q) first and kept it beside the keys' buffers: 32 MiB more temporaries at
    L = 16384 (105 against 72 MiB), fresh pages on every call, and eq. (19) / linear at
    1.70x instead of 1.13x at L = 8192. XLA orders work by data, and a barrier
    (optimization_barrier) did not reorder the buffers, so the queries are made to depend on
    the keys' state: the term added is 0 · isnan(an element of `dependency`), zero even where
    that element is inf or NaN, so x changes at most in the sign of a zero.
    """
    return x + 0 * jnp.isnan(dependency.ravel()[0]).astype(x.dtype)


def _exclusive_sum_step(total, state):
    # Module-level, not a lambda: op-by-op (eager) calls then reuse the compiled scan.
    return total + state, total


def exclusive_cumsum(states):
    """Σ_{j' < j} states[j'] for each chunk j: [J, ...] -> [J, ...].

    Elsewhere it is a shifted cumsum (attention_core). A sequential scan instead: on CPU jnp.cumsum
    (a reduce-window) was 4x slower here, and the running sum in a fixed order is exactly
    reproducible and exact at j = 0.
    """
    _, prefix = jax.lax.scan(_exclusive_sum_step, jnp.zeros_like(states[0]), states)
    return prefix
