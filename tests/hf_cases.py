"""The HF tests' shared fixtures (hf_test.py, hf_parity_test.py): transformers and torch where
installed (None otherwise), the tiny model config of those tests and random parameters of its
shapes. Kept under the names they had in tests/hf_test.py, underscores included."""

import flax
import jax
import jax.numpy as jnp
import numpy as np
import tiny

from roformer_jax.nn import model as model_lib

try:
    import torch
    import transformers
except ImportError:
    torch = transformers = None

NO_TRANSFORMERS = "needs transformers and torch: pip install torch==2.13.0 transformers"


def _tiny_config(**overrides):
    return tiny.model_config(
        **{
            **dict(vocab_size=99, hidden_size=32, num_layers=2, num_heads=4, intermediate_size=37),
            **dict(max_len=64, initializer_range=0.2),
            **overrides,
        }
    )


def _random_variables(config, with_mlm_head=True, seed=0):
    """Random parameters of the model's shapes; LayerNorms and biases non-trivial too, so that
    a swapped or transposed weight shows."""
    model = model_lib.RoFormer(config, with_mlm_head=with_mlm_head)
    shapes = jax.eval_shape(model.init, jax.random.key(0), jnp.zeros((1, 4), jnp.int32))
    rng = np.random.default_rng(seed)
    params = {
        path: np.float32((path[-1] == "scale") + rng.normal(0, 0.2, x.shape))
        for path, x in flax.traverse_util.flatten_dict(shapes).items()
    }
    return model, flax.traverse_util.unflatten_dict(params)
