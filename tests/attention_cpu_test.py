"""Tests for roformer_jax/nn/_attention_cpu.py: its forms against the plain formulas."""

import chex
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest
from attention_cases import B, H, L, N

from roformer_jax.nn import _attention_cpu


class CpuFormsTest(absltest.TestCase):
    """_attention_cpu's forms against the plain formulas attention.py uses elsewhere."""

    def test_feature_sums_is_the_plain_product(self):
        rng = np.random.default_rng(20)
        qf = jnp.asarray(rng.random((B, L, N, H)), jnp.float32)
        key_sums = jnp.asarray(rng.random((B, N, H)), jnp.float32)
        want = jnp.einsum("BLNF,BNF->BNL", qf, key_sums)[..., None]
        chex.assert_trees_all_close(_attention_cpu.feature_sums(qf, key_sums), want, rtol=1e-6)

    def test_exclusive_cumsum_is_cumsum_minus_self(self):
        states = jnp.asarray(np.random.default_rng(21).random((5, 3, 2)), jnp.float32)
        want = jnp.cumsum(states, axis=0) - states
        got = _attention_cpu.exclusive_cumsum(states)
        np.testing.assert_array_equal(got[0], 0.0)
        chex.assert_trees_all_close(got, want, atol=1e-6)


if __name__ == "__main__":
    absltest.main()
