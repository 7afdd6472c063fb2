"""What model_test.py's tests share: a tiny config, random parameters of its shapes made once
per process, and inputs."""

import dataclasses
import functools

import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny

from roformer_jax.nn import model as model_lib

B, L, V = 2, 8, 64


def _config(**overrides):
    return tiny.model_config(**{"vocab_size": V, "max_len": 16, **overrides})


def _init(config, length=L, seed=0, **kwargs):
    """The model and random parameters of its shapes (no compiled init: fast tests).

    Weights are N(0, 0.2²), ten times the init scale, so that attention is far from uniform
    and positions matter; LayerNorm scales are 1 + N(0, 0.1²).
    """
    # The dropout rates change what the model computes, not its parameters (causal is kept:
    # a decay gate needs it).
    shaped_alike = dataclasses.replace(config, hidden_dropout=0.0, attention_dropout=0.0)
    variables = _variables(shaped_alike, length, seed, tuple(sorted(kwargs.items())))
    # Fresh dicts around the shared (immutable) arrays: a test may edit its tree.
    return model_lib.RoFormer(config, **kwargs), jax.tree.map(lambda x: x, variables)


@functools.cache
def _variables(config, length, seed, module_kwargs):
    """`_init`'s variables, made once per process: tracing the model's init takes ~0.2 s, and
    most configurations here are built by several tests."""
    model = model_lib.RoFormer(config, **dict(module_kwargs))
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, length), jnp.int32))
    rng = np.random.default_rng(seed)
    params = {
        path: (path[-1] == "scale") + rng.normal(0, 0.1 if path[-1] == "scale" else 0.2, x.shape)
        for path, x in flax.traverse_util.flatten_dict(shapes).items()
    }
    params = {k: jnp.asarray(v, jnp.float32) for k, v in params.items()}
    return flax.traverse_util.unflatten_dict(params)


def _inputs(length=L, seed=1):
    rng = np.random.default_rng(seed)
    ids = jnp.asarray(rng.integers(1, V, (B, length)), jnp.int32)
    types = jnp.asarray(rng.integers(0, 2, (B, length)), jnp.int32)
    return ids, types


def _count(variables):
    return sum(x.size for x in jax.tree.leaves(variables))
