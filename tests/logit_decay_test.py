"""Tests for roformer_jax/studies/logit_decay.py: RoPE's relative logit term and its bound."""

import functools

import chex
import jax
import jax.numpy as jnp
import numpy as np
import tiny
import tolerance
from absl.testing import absltest

from roformer_jax.nn import rope_reference
from roformer_jax.nn.model import RoFormer
from roformer_jax.studies import attention_distance, logit_decay

LENGTH = 24
BASE = 100.0  # a small base, so that the tiny head's angles turn within 24 positions


@functools.cache
def _model():
    """A tiny RoPE encoder, two query heads a kv head, its rows with padding, and its terms."""
    cfg = tiny.model_config(
        position="rope", vocab_size=50, num_kv_heads=2, sections={"rope": {"base": BASE}}
    )
    ids = jax.random.randint(jax.random.key(1), (2, LENGTH), 5, 50)
    mask = jnp.arange(LENGTH)[None, :] < jnp.array([[LENGTH], [LENGTH - 5]])
    params = jax.jit(RoFormer(cfg).init)(jax.random.key(0), ids, attention_mask=mask)["params"]
    return cfg, params, ids, mask, logit_decay.relative_terms(cfg, params, ids, mask)


def _explicit(cfg, q, k):
    """|Z| and its bound (module doc) in float64 complex numbers, interleaved pairs, from
    rope_reference's angles and an explicit Abel sum: [B, N, L, L] each."""
    q, k = (np.asarray(x, np.float64) for x in (q, k))
    k = np.repeat(k, cfg.num_heads // cfg.kv_heads, axis=2)
    q, k = (x / np.linalg.norm(x, axis=-1, keepdims=True) for x in (q, k))
    qc, kc = (x[..., 0::2] + 1j * x[..., 1::2] for x in (q, k))  # [B, L, N, H/2]
    turn = np.exp(1j * rope_reference.angles(np.arange(LENGTH), cfg.head_dim, base=BASE))
    h = qc[:, :, None] * np.conj(kc[:, None, :])  # [B, L, L, N, H/2]
    phase = turn[:, None] * np.conj(turn[None, :])  # [L, L, H/2]: e^{i(m−n)θ_i}
    term = np.abs((h * phase[:, :, None]).sum(-1))
    partial = np.abs(np.cumsum(phase, axis=-1)).sum(-1)  # Σ_j |S_j| at each (m, n)
    steps = np.abs(np.diff(h, axis=-1, append=0.0)).max(-1)
    return term.transpose(0, 3, 1, 2), (steps * partial[:, :, None]).transpose(0, 3, 1, 2)


class RelativeTermsTest(absltest.TestCase):
    def test_terms_are_the_complex_sums_and_their_abel_bounds(self):
        cfg, params, ids, mask, terms = _model()
        self.assertLen(terms["term"], cfg.num_layers)
        q_and_k = jax.jit(attention_distance.queries_and_keys, static_argnums=0)(
            cfg, params, ids, mask
        )
        for term, bound, (q, k) in zip(terms["term"], terms["bound"], q_and_k, strict=True):
            chex.assert_shape([term, bound], (2, cfg.num_heads, LENGTH, LENGTH))
            want_term, want_bound = _explicit(cfg, q, k)
            # Re Z and Im Z are dots of H float32 terms of unit vectors rotated by the model
            # (each feature a cos/sin product and a sum: 3 roundings more); |Z| adds √2.
            atol = 2 * tolerance.dot(n=cfg.head_dim + 3, magnitude=1.0)
            np.testing.assert_allclose(term, want_term, atol=atol, rtol=0)
            # The bound: the unit vectors' norms and products, a difference, f's sum of H/2.
            rtol = tolerance.relative(depth=cfg.head_dim // 2 + 8)
            np.testing.assert_allclose(bound, want_bound, rtol=rtol, atol=0)

    def test_the_bound_holds_for_every_pair(self):
        cfg, _, _, _, terms = _model()
        atol = 2 * tolerance.dot(n=cfg.head_dim + 3, magnitude=1.0)
        for term, bound in zip(terms["term"], terms["bound"], strict=True):
            self.assertTrue(np.all(term <= bound * (1 + 1e-4) + atol))
            self.assertTrue(np.all(term <= 1.0 + atol))  # unit q, k: |Z| ≤ Σ|h_i| ≤ 1

    def test_a_model_without_plain_rope_is_an_error(self):
        _, params, ids, mask, _ = _model()
        for fields, message in (
            ({"position": "alibi"}, "only position='rope'"),
            ({"sections": {"rope": {"scaling": {"rope_type": "linear", "factor": 2.0}}}}, "plain"),
        ):
            cfg = tiny.model_config(vocab_size=50, num_kv_heads=2, **fields)
            with self.assertRaisesRegex(ValueError, message):
                logit_decay.relative_terms(cfg, params, ids, mask)


if __name__ == "__main__":
    absltest.main()
