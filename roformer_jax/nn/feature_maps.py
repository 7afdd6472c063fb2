"""Feature maps φ of linear attention as a table; FAVOR+'s positive random features.

Linear attention (attention.py) weighs key j for query i by φ(q_i)ᵀφ(k_j). A map is one
definition and one entry of `FEATURE_MAPS`: a function of the vector, and for a random map
(FAVOR+) the draw of its random matrix. The attention functions stay pure: the matrix is an
argument (`projection`), drawn by the caller from a key (model.py draws it per layer from
the config's seed and the redraw period of the training step).

Glossary of shapes: H head dim (the vectors mapped), F features (φ's output dim).
"""

import dataclasses
import functools
from collections.abc import Callable

import jax
import jax.numpy as jnp


@dataclasses.dataclass(frozen=True)
class FeatureMap:
    """A feature map of linear attention.

    Attributes:
      apply: (x [..., H], projection, is_query) -> [..., F]. Queries may be mapped otherwise
        than keys only by a positive factor per query, which cancels between the numerator
        and the denominator of every placement; projection is None for a deterministic map.
      draw: None for a deterministic map; for a random one (key, F, H) -> projection, the
        matrix that `apply` needs (FAVOR+: [F, H]).
    """

    apply: Callable[..., jax.Array]
    draw: Callable[[jax.Array, int, int], jax.Array] | None = None


def _deterministic(phi: Callable[[jax.Array], jax.Array]) -> FeatureMap:
    """A map that draws nothing and treats queries and keys alike."""
    return FeatureMap(apply=lambda x, projection, is_query: phi(x))


# Jitted: called outside a jitted step (a model applied eagerly, a draw for inspection), it
# is one compiled program per shape instead of its scan traced again and each operation
# compiled on its own.
@functools.partial(jax.jit, static_argnums=(1, 2))
def orthogonal_gaussian(key, num_features: int, dim: int) -> jax.Array:
    """W [F, H]: FAVOR+'s orthogonal random features (Choromanski et al. 2021, sec. 2.4).

    Rows come in blocks of H mutually orthogonal directions (the last block cut to F), each
    block the Q of the QR decomposition of an H x H Gaussian matrix with R's diagonal
    positive, so that Q is Haar-distributed (Mezzadri 2007) and each row's direction uniform;
    then each row gets the norm of an independent H-dim Gaussian vector (chi with H degrees
    of freedom). Every row is thus marginally N(0, I_H), which keeps the kernel estimate
    unbiased, while orthogonality within a block lowers its variance.
    """
    blocks = -(-num_features // dim)
    block_key, norm_key = jax.random.split(key)
    q = _orthonormalize(jax.random.normal(block_key, (blocks, dim, dim)))  # [K, H, H]
    directions = jnp.swapaxes(q, -1, -2).reshape(blocks * dim, dim)[:num_features]  # [F, H]
    norms = jnp.linalg.norm(jax.random.normal(norm_key, (num_features, dim)), axis=-1)
    return directions * norms[:, None]


def _orthonormalize(g):
    """Q of g = QR with R's diagonal positive: [K, H, H] -> [K, H, H], orthonormal columns.

    Gram-Schmidt, each column projected out twice ("twice is enough": orthogonal to float
    rounding; Giraud et al. 2005), in plain XLA operations. Not jnp.linalg.qr: its LAPACK
    call hung the jitted train step with donated state on XLA's CPU backend (jax 0.10.2,
    FAVOR+ with RoPE at F = 256, H = 64: every time; fine undonated, or without the QR).
    """

    def column(q, j):  # q [K, H, H]: columns < j done, the rest zero
        v = jax.lax.dynamic_index_in_dim(g, j, axis=-1, keepdims=False)  # [K, H]
        for _ in range(2):
            v = v - jnp.einsum("KHJ,KJ->KH", q, jnp.einsum("KHJ,KH->KJ", q, v))
        v = v / jnp.linalg.norm(v, axis=-1, keepdims=True)
        return jax.lax.dynamic_update_index_in_dim(q, v, j, axis=-1), None

    q, _ = jax.lax.scan(column, jnp.zeros_like(g), jnp.arange(g.shape[-1]))
    return q


def favor_features(x, projection, is_query: bool) -> jax.Array:
    """FAVOR+'s positive random features (Choromanski et al. 2021, Lemma 1): [..., H] -> [..., F].

    φ(x) = exp(W x' - |x'|²/2) / √F with x' = x / H^(1/4) and W [F, H] from
    `orthogonal_gaussian`, so that E_W[φ(q)ᵀφ(k)] = exp(qᵀk / √H): softmax attention's
    kernel at its temperature (unbiased; positive, so denominators are too).

    Stabilizer, as in the Performer code: a query's exponents lose their largest, so its
    features are at most 1; that divides all of one query's features by one number, which
    cancels between numerator and denominator. It is not applied to keys: a shift of the
    keys must be one constant for every key a query ever sees, in the causal and recurrent
    (decoding) forms too, so it could come from W only, and none is needed: W_r·x - |x|²/2
    <= |W_r|²/2 for any x (about 50 for H = 64: e^50 is far inside float32's range).
    The largest exponent is held constant under differentiation: it cancels, so this is
    exact and saves its backward pass.
    """
    x = x * x.shape[-1] ** -0.25
    logits = jnp.einsum("...H,FH->...F", x, projection.astype(x.dtype))
    logits = logits - 0.5 * jnp.sum(x * x, axis=-1, keepdims=True)
    if is_query:
        logits = logits - jax.lax.stop_gradient(jnp.max(logits, axis=-1, keepdims=True))
    return jnp.exp(logits) * projection.shape[0] ** -0.5


def elu_plus_one(x):
    """elu(x) + 1, written as exp(x) for x <= 0.

    Exact where expm1(x) + 1 loses every digit (x << 0), and XLA's CPU backend vectorizes exp
    but not expm1 once fused into RoPE's element-wise pass.
    """
    positive = x > 0
    return jnp.where(positive, x + 1.0, jnp.exp(jnp.where(positive, 0.0, x)))


FEATURE_MAPS: dict[str, FeatureMap] = {
    # elu(x) + 1 > 0: the map of Katharopoulos et al. 2020 and of the RoFormer paper, sec. 3.3.
    "elu": _deterministic(elu_plus_one),
    "relu": _deterministic(jax.nn.relu),
    "softplus": _deterministic(jax.nn.softplus),
    # Performer (Choromanski et al. 2021): positive orthogonal random features, the paper's
    # Fig. 3 (right) with and without RoPE.
    "favor": FeatureMap(apply=favor_features, draw=orthogonal_gaussian),
}


def check(feature_map: str, projection, head_dim: int) -> None:
    """Raises ValueError unless `projection` is what FEATURE_MAPS[feature_map] needs."""
    if feature_map not in FEATURE_MAPS:
        raise ValueError(f"feature_map={feature_map!r}; expected one of {sorted(FEATURE_MAPS)}")
    drawn = FEATURE_MAPS[feature_map].draw is not None
    if drawn and projection is None:
        raise ValueError(
            f"feature_map={feature_map!r} is random: pass projection=FEATURE_MAPS"
            f"[{feature_map!r}].draw(key, num_features, {head_dim})"
        )
    if not drawn and projection is not None:
        raise ValueError(f"feature_map={feature_map!r} draws nothing; got a projection")
    if drawn and (projection.ndim != 2 or projection.shape[1] != head_dim):
        raise ValueError(f"projection has shape {projection.shape}; expected [F, {head_dim}]")


def query_and_key_maps(feature_map: str, projection) -> tuple[Callable, Callable]:
    """(φ of queries, φ of keys), each x [..., H] -> [..., F]."""
    apply = FEATURE_MAPS[feature_map].apply
    return (
        lambda x: apply(x, projection, is_query=True),
        lambda x: apply(x, projection, is_query=False),
    )
