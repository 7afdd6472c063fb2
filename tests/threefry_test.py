"""_threefry.bernoulli and model.Dropout draw what jax.random and flax's nn.Dropout draw."""

import chex
import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from roformer_jax import _threefry
from roformer_jax.model import Dropout

KEYS = {
    "typed": lambda: jax.random.key(3),
    "raw": lambda: jax.random.PRNGKey(7),
    "folded": lambda: jax.random.fold_in(jax.random.key(1), 2**31 + 5),
}


class BernoulliTest(parameterized.TestCase):
    @parameterized.product(
        key=sorted(KEYS), shape=[(1,), (5,), (3, 7), (2, 4, 33, 17)], p=[0.9, 0.5, 0.01]
    )
    def test_the_same_booleans_as_jax_random(self, key, shape, p):
        key = KEYS[key]()
        ours = jax.jit(_threefry.bernoulli, static_argnums=(1, 2))(key, p, shape)
        np.testing.assert_array_equal(ours, jax.random.bernoulli(key, p, shape))

    def test_the_hash_is_threefry_2x32(self):
        # Known-answer vectors of Salmon et al.'s Random123 (threefry2x32_20 test vectors).
        cases = [
            ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
            ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
            ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
        ]
        for (k1, k2), (x1, x2), expected in cases:
            out = _threefry.threefry2x32(*(np.array([v], np.uint32) for v in (k1, k2, x1, x2)))
            self.assertEqual(tuple(int(o[0]) for o in out), expected)

    def test_vmapped_over_keys_as_per_row_dropout_is(self):
        keys = jax.vmap(jax.random.fold_in, in_axes=(None, 0))(jax.random.key(0), jnp.arange(4))
        draw = jax.jit(jax.vmap(lambda k: _threefry.bernoulli(k, 0.9, (3, 16, 16))))
        expected = jax.vmap(lambda k: jax.random.bernoulli(k, 0.9, (3, 16, 16)))(keys)
        np.testing.assert_array_equal(draw(keys), expected)

    def test_other_key_implementations_go_to_jax_random(self):
        key = jax.random.key(0, impl="rbg")
        np.testing.assert_array_equal(
            _threefry.bernoulli(key, 0.9, (64,)), jax.random.bernoulli(key, 0.9, (64,))
        )


class DropoutTest(parameterized.TestCase):
    @parameterized.parameters(0.1, 0.5)
    def test_the_output_of_flax_dropout_for_the_same_rng_stream(self, rate):
        x = jax.random.normal(jax.random.key(0), (2, 8, 32))
        rngs = {"dropout": jax.random.key(11)}
        ours = Dropout(rate).apply({}, x, deterministic=False, rngs=rngs)
        chex.assert_trees_all_equal(ours, nn.Dropout(rate).apply({}, x, False, rngs=rngs))

    def test_deterministic_and_rate_zero_pass_through(self):
        x = jnp.arange(6.0)
        chex.assert_trees_all_equal(Dropout(0.5).apply({}, x, deterministic=True), x)
        rngs = {"dropout": jax.random.key(0)}
        chex.assert_trees_all_equal(Dropout(0.0).apply({}, x, deterministic=False, rngs=rngs), x)


if __name__ == "__main__":
    absltest.main()
