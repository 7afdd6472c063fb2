"""Tests for roformer_jax.nn.segments and the attention kinds on packed rows (`segment_ids`)."""

import chex
import jax
import jax.numpy as jnp
import numpy as np
from absl.testing import absltest, parameterized
from attention_test import KINDS, _takes_positions

from roformer_jax.nn import attention, segments
from roformer_jax.nn.rope import rope_rotation

# Two packed rows of three documents of S = 4 tokens each: run alone, the documents are a batch
# [B·3, S]. Row 1's first and last documents share an id: a segment is a run, not an id.
B, S, N, H = 2, 4, 2, 8
L = 3 * S
IDS = jnp.asarray([[0] * S + [1] * S + [2] * S, [7] * S + [3] * S + [7] * S])
# Chunk sizes: causal 1 (a document through whole chunks) and 5 (documents that start inside
# a chunk); not causal 3 (chunks crossing a boundary) and 64 (one chunk, a document wholly
# inside it).
CHUNKS = {True: (1, 5), False: (3, 64)}
# Every placement of RoPE in linear attention, and the other kinds (FAVOR+ and no rotation
# take the paths of "numerator" and "both").
PACKED_KINDS = [kind for kind in KINDS if kind[0] not in ("linear_favor", "linear_None")]


class SegmentsTest(absltest.TestCase):
    def test_positions_restart_at_every_change_of_id(self):
        ids = jnp.asarray([[4, 4, 4, 9, 9, 4, 4, 0], [1, 1, 1, 1, 1, 1, 1, 1]])
        np.testing.assert_array_equal(
            segments.segment_positions(ids), [[0, 1, 2, 0, 1, 0, 1, 0], list(range(8))]
        )
        np.testing.assert_array_equal(
            segments.segment_index(ids), [[0, 0, 0, 1, 1, 2, 2, 3], [0] * 8]
        )
        self.assertEqual(segments.segment_positions(ids).dtype, jnp.int32)

    def test_ids_that_are_not_int_rows_are_an_error(self):
        for ids in (jnp.asarray([0, 0, 1]), jnp.zeros((1, 2, 3), int), jnp.zeros((2, 3))):
            with self.assertRaisesRegex(
                ValueError, r"segment_ids has shape .*; expected integers \[B, L\]"
            ):
                segments.segment_positions(ids)


class PackedAttentionTest(parameterized.TestCase):
    @parameterized.named_parameters(*PACKED_KINDS)
    def test_each_document_as_if_alone(self, fn, kw):
        rng = np.random.default_rng(30)
        q, k, v = (jnp.asarray(rng.standard_normal((B, L, N, H)), jnp.float32) for _ in "qkv")
        mask = rng.random((B, L)) < 0.7
        mask[:, ::S] = True  # every document keeps a real first key
        mask = jnp.asarray(mask)

        def alone(x):  # [B, L, ...] -> [B·3, S, ...]: each document a row of its own
            return x.reshape(B * 3, S, *x.shape[2:])

        def rotated(kwargs, positions):
            return (
                {**kwargs, "rotation": rope_rotation(positions)} if _takes_positions(kw) else kwargs
            )

        # One program: op by op, every chunk size compiled the primitives anew.
        @jax.jit
        def forms(q, k, v, mask):
            packed, single = {}, {}
            for causal in (False, True):
                base = dict(kw, causal=causal)
                single[causal] = fn(
                    *map(alone, (q, k, v)), mask=alone(mask), **rotated(base, jnp.arange(S))
                ).reshape(B, L, N, H)
                for chunk in (None,) if fn is attention.softmax_attention else CHUNKS[causal]:
                    extra = {} if chunk is None else {"chunk_size": chunk}
                    packed[causal, chunk] = fn(
                        q,
                        k,
                        v,
                        mask=mask,
                        segment_ids=IDS,
                        **extra,
                        **rotated(base, segments.segment_positions(IDS)),
                    )
            return packed, single

        packed, single = forms(q, k, v, mask)
        for (causal, chunk), got in packed.items():
            with self.subTest(causal=causal, chunk=chunk):
                chex.assert_trees_all_close(got, single[causal], atol=2e-5)

    def test_segment_ids_are_checked(self):
        q = jnp.zeros((B, L, N, H))
        with self.assertRaisesRegex(ValueError, r"segment_ids has shape \(2, 13\)"):
            attention.linear_attention(q, q, q, segment_ids=jnp.zeros((B, L + 1), int))
        with self.assertRaisesRegex(ValueError, "expected integers"):
            attention.cosine_attention(q, q, q, segment_ids=jnp.zeros((B, L)))
        short = jnp.zeros((B, 3, N, H))
        with self.assertRaisesRegex(ValueError, "L == M; got L=12, M=3"):
            attention.softmax_attention(q, short, short, segment_ids=jnp.zeros((B, L), int))


if __name__ == "__main__":
    absltest.main()
