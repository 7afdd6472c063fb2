"""The numbers tests/context_parallel_test.py compares, computed once on 8 fake CPU devices.

    python tests/context_parallel_cases.py OUT.pkl   # XLA_FLAGS with 8 host devices

Each case of CASES is an attention kind called with its options on one device and under a
data x context mesh of 4 x 2 (the kinds hand over to nn/context_parallel.py there): per
case the outputs and the gradients of a weighted sum of them through q, k and v, both ways.
BOUNDARIES perturb the keys and values past a device's block (causal) or of another segment,
and record the outputs before and after, under the mesh. One process for every case.
"""

import pickle
import sys

import jax
import jax.numpy as jnp
import numpy as np

from roformer_jax.nn import attention, rope

B, L, N, K, H = 2, 16, 4, 2, 8  # grouped-query heads; L = 2 chunks x 2 devices x 4
MESH = {"data": 4, "context": 2}  # one hop of the ring: its compile is most of the time
_ROTATION = rope.rope_rotation(jnp.arange(L))
_SEGMENTS = np.repeat([[0] * 5 + [1] * 7 + [2] * 4], B, axis=0)  # starts inside blocks
_MASK = np.ones((B, L), bool)
_MASK[1, 13:] = False
_LOG_DECAY = -np.random.default_rng(3).uniform(0.0, 0.5, size=(B, L, N)).astype(np.float32)
_KINDS = {
    "softmax": attention.softmax_attention,
    "linear": attention.linear_attention,
    "cosine": attention.cosine_attention,
}
# name -> (kind, options); linear's rotation is eq. (19)'s, in the numerator.
CASES = {
    "softmax_causal": ("softmax", dict(causal=True, mask=_MASK, segment_ids=_SEGMENTS, window=5)),
    "softmax_sinks_dropout": (
        "softmax",
        dict(causal=True, chunk=6, sinks=np.ones(N, np.float32), dropout_rate=0.3),
    ),
    "softmax_both_ways": ("softmax", dict(segment_ids=_SEGMENTS, mask=_MASK)),
    "linear_causal": ("linear", dict(causal=True, segment_ids=_SEGMENTS, log_decay=_LOG_DECAY)),
    "linear_both_ways": ("linear", dict(segment_ids=_SEGMENTS, mask=_MASK, chunk_size=4)),
    "cosine_causal": ("cosine", dict(causal=True, log_decay=_LOG_DECAY, chunk_size=2)),
    "cosine_both_ways": ("cosine", dict(mask=_MASK)),
}
# A segment starting inside the second device's block, for rows as they are and as changed.
_TWO = np.repeat([[0] * 12 + [1] * 4], 2 * B, 0)
# name -> (kind, options, first changed position): keys and values from there on are changed.
BOUNDARIES = {
    "softmax_causal": ("softmax", dict(causal=True), L // 2),
    "linear_causal": ("linear", dict(causal=True), L // 2),
    "softmax_segment": ("softmax", dict(segment_ids=_TWO), 12),
    "linear_segment": ("linear", dict(segment_ids=_TWO), 12),
}


def inputs(seed: int = 0):
    rng = np.random.default_rng(seed)
    q = rng.normal(size=(B, L, N, H)).astype(np.float32)
    k, v = (rng.normal(size=(B, L, K, H)).astype(np.float32) for _ in range(2))
    return q, k, v


def _attend(kind: str, options: dict):
    options = {name: x if np.isscalar(x) else jnp.asarray(x) for name, x in options.items()}
    if options.get("dropout_rate"):
        options["dropout_rng"] = jax.random.key(7)

    def attend(q, k, v):
        return _KINDS[kind](q, k, v, rotation=_ROTATION, **options)

    return attend


def _everything(q, k, v):
    """Every case's output and gradients: one function, so one compile a mesh."""
    weights = jnp.cos(jnp.arange(q.size, dtype=jnp.float32)).reshape(q.shape)
    results = {}
    for name, (kind, options) in CASES.items():
        attend = _attend(kind, options)

        def loss(q, k, v, attend=attend):
            out = attend(q, k, v)
            return jnp.sum(out * weights), out

        (_, out), grads = jax.value_and_grad(loss, (0, 1, 2), has_aux=True)(q, k, v)
        results[name] = (out, grads)
    return results


def _boundaries(q, k, v):
    """Each boundary's outputs with the keys and values as they are and as changed, rows
    apart in one attention call (in `_everything` XLA's fusion rounded the two apart); every
    boundary in one function, so one compile."""
    changed_k, changed_v = (x + 5.0 for x in inputs(1)[1:])
    results = {}
    for name, (kind, options, start) in BOUNDARIES.items():
        k2, v2 = (
            jnp.concatenate([x[:, :start], y[:, start:]], 1)
            for x, y in ((k, changed_k), (v, changed_v))
        )
        both = _attend(kind, options)(*map(jnp.concatenate, ((q, q), (k, k2), (v, v2))))
        results["boundary_" + name] = (both[:B], both[B:])
    return results


def main(out: str) -> None:
    auto = (jax.sharding.AxisType.Auto,) * len(MESH)  # as training.mesh makes its mesh
    mesh = jax.make_mesh(tuple(MESH.values()), tuple(MESH), axis_types=auto)
    arrays = inputs()
    everything = jax.jit(_everything)
    one = jax.device_get(everything(*arrays))
    with jax.set_mesh(mesh):
        split = jax.device_get(everything(*arrays))
        split.update(jax.device_get(jax.jit(_boundaries)(*arrays)))
        try:
            jax.jit(_attend("softmax", dict(bias=np.zeros((1, N, L, L), np.float32))))(*arrays[:3])
        except ValueError as error:
            split["bias_refused"] = str(error)
    with open(out, "wb") as f:
        pickle.dump({"one": one, "split": split}, f)


if __name__ == "__main__":
    main(sys.argv[1])
