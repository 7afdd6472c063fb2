"""_threefry: the Threefry-2x32 hash, and dropout masks that depend on each row's example id."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized

from roformer_jax.nn import _threefry
from roformer_jax.nn.model import Dropout

draw = jax.jit(_threefry.bernoulli_rows, static_argnums=(2, 3))


class ThreefryTest(absltest.TestCase):
    def test_known_answers(self):
        # Random123's known-answer vectors for threefry2x32 with 20 rounds (kat_vectors).
        cases = [
            ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
            ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
            ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
        ]
        for (k1, k2), (x1, x2), expected in cases:
            out = _threefry.threefry2x32(*(np.array([v], np.uint32) for v in (k1, k2, x1, x2)))
            self.assertEqual(tuple(int(o[0]) for o in out), expected)

    def test_the_hash_of_jax_random(self):
        # jax.random.bits with partitionable threefry: element i is x1 ^ x2 of the counter
        # (0, i) under the key's two words.
        key = jax.random.key(42)
        k1, k2 = jax.random.key_data(key)
        x1, x2 = _threefry.threefry2x32(
            k1, k2, jnp.zeros(10, jnp.uint32), jnp.arange(10, dtype=jnp.uint32)
        )
        np.testing.assert_array_equal(x1 ^ x2, jax.random.bits(key, (10,), jnp.uint32))


class BernoulliRowsTest(parameterized.TestCase):
    def test_a_row_depends_on_its_id_only(self):
        key = jax.random.key(3)
        shape = (4, 2, 8, 8)
        ids = jnp.array([7, 0, 123456, 2**31 - 5])
        whole = draw(key, ids, 0.9, shape)
        for b in range(4):  # alone, or in another batch at another place
            alone = draw(key, ids[b : b + 1], 0.9, (1,) + shape[1:])
            np.testing.assert_array_equal(alone[0], whole[b])
        np.testing.assert_array_equal(draw(key, ids[::-1], 0.9, shape), whole[::-1])

    def test_rows_and_keys_differ(self):
        key = jax.random.key(0)
        a = draw(key, jnp.array([0, 1]), 0.5, (2, 4096))
        self.assertGreater(float(jnp.mean(a[0] != a[1])), 0.4)
        b = draw(jax.random.key(1), jnp.array([0, 1]), 0.5, (2, 4096))
        self.assertGreater(float(jnp.mean(a != b)), 0.4)

    @parameterized.parameters(0.9, 0.5, 0.1)
    def test_the_rate(self, p):
        keep = draw(jax.random.PRNGKey(5), jnp.arange(64), p, (64, 4096))
        # 262,144 draws: the standard error of the mean is below 0.001.
        self.assertAlmostEqual(float(jnp.mean(keep)), p, delta=0.004)

    def test_the_uniform_of_jax_random(self):
        # Row 0's bits are jax.random's for the same key, read as jax.random.uniform reads them.
        key = jax.random.key(9)
        expected = jax.random.uniform(key, (3, 50)) < 0.7
        np.testing.assert_array_equal(
            draw(key, jnp.array([0]), 0.7, (1, 150))[0], expected.reshape(-1)
        )

    def test_other_key_implementations_are_refused(self):
        with self.assertRaisesRegex(ValueError, "threefry2x32"):
            _threefry.bernoulli_rows(jax.random.key(0, impl="rbg"), jnp.arange(2), 0.5, (2, 3))


class DropoutTest(absltest.TestCase):
    def test_scaled_mask_from_the_dropout_stream(self):
        x = jax.random.normal(jax.random.key(0), (3, 8, 32))
        rngs = {"dropout": jax.random.key(11)}
        ids = jnp.array([5, 6, 7])
        out = Dropout(0.25).apply({}, x, False, ids, rngs=rngs)
        kept = out != 0
        self.assertAlmostEqual(float(jnp.mean(kept)), 0.75, delta=0.05)
        np.testing.assert_allclose(out[kept], (x / 0.75)[kept], rtol=1e-6)
        # the same rows elsewhere in a batch keep the same masks
        again = Dropout(0.25).apply({}, x[1:], False, ids[1:], rngs=rngs)
        chex.assert_trees_all_equal(again, out[1:])

    def test_deterministic_and_rate_zero_pass_through(self):
        x = jnp.arange(6.0).reshape(2, 3)
        chex.assert_trees_all_equal(Dropout(0.5).apply({}, x, deterministic=True), x)
        rngs = {"dropout": jax.random.key(0)}
        chex.assert_trees_all_equal(Dropout(0.0).apply({}, x, deterministic=False, rngs=rngs), x)


if __name__ == "__main__":
    absltest.main()
