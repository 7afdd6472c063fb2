"""Issue 56, item 1's sanity task: can BERT's learned position table learn order at all?

Rows of L = 2h random tokens whose second half mirrors the first (t_0 .. t_{h-1}, t_{h-1} ..
t_0), the whole second half masked: the target at position L - 1 - m is the token at m, and
only position tells which one that is. Without a position encoding every masked position of a
row has the same input and sees the same keys, so the model gives all h of them one answer
and scores at most the count of the row's most frequent target over h (about 1/h).

The encoder is BERT as the studies build it (configs/study_positions_long.py's "learned
(BERT)": ModelConfig's defaults, i.e. post-LN, the table initialized with std 0.02, dropout
0.1), trained by the library's step with BERT's optimizer (AdamW, weight decay 0.01 on the
table too, clipping to norm 1) on the studies' constant schedule; only the sizes are tiny and
the rate is 5e-3, so that a few hundred steps suffice. Each position's run is one jitted
call, cached for the module.
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
import tiny
from absl.testing import absltest

from roformer_jax.nn.model import RoFormer
from roformer_jax.training import optim, step

HALF = 6
LENGTH = 2 * HALF
VOCAB = 64  # ids 0 (unused) and MASK, then the tokens of the rows
MASK = 1
ROWS = 32
STEPS = 200
OPTIM = optim.OptimConfig(learning_rate=5e-3, warmup_steps=10, schedule="constant")


def _mirrored_rows(key, rows: int) -> dict:
    """A batch of `rows` rows of the task (module doc), every second-half token a target."""
    first = jax.random.randint(key, (rows, HALF), MASK + 1, VOCAB)  # [B, h]
    tokens = jnp.concatenate([first, first[:, ::-1]], axis=1)  # [B, L]
    second = jnp.broadcast_to(jnp.arange(LENGTH) >= HALF, tokens.shape)
    return {
        "input_ids": jnp.where(second, MASK, tokens),
        "attention_mask": jnp.ones_like(tokens, bool),
        "token_type_ids": jnp.zeros_like(tokens),
        "targets": tokens,
        "weights": second.astype(jnp.float32),
        "index": jnp.arange(rows),
    }


@functools.cache
def _trained(position: str) -> tuple[dict, dict]:
    """(eval sums of `step.mlm_sums` on held-out rows after STEPS updates, those rows)."""
    sizes = dict(hidden_size=32, num_heads=2, intermediate_size=64, vocab_size=VOCAB)
    cfg = tiny.model_config(position=position, max_len=LENGTH, **sizes)
    model = RoFormer(cfg)
    tx = optim.make_optimizer(OPTIM, STEPS)
    train_step = step.make_train_step(model, tx)
    held_out = _mirrored_rows(jax.random.key(1), 4 * ROWS)

    @jax.jit
    def run(key):
        init_key, data_key, dropout_key = jax.random.split(key, 3)
        params = model.init(init_key, held_out["input_ids"][:1])["params"]
        state = step.TrainState(step=jnp.int32(0), params=params, opt_state=tx.init(params))

        def update(i, state):
            batch = _mirrored_rows(jax.random.fold_in(data_key, i), ROWS)
            return train_step(state, batch, dropout_key)[0]

        state = jax.lax.fori_loop(0, STEPS, update, state)
        return step.make_eval_step(model)(state.params, held_out)

    return jax.device_get(run(jax.random.key(0))), jax.device_get(held_out)


def _most_frequent_targets(batch) -> int:
    """Σ over rows of the count of the row's most frequent target: the most a model that
    gives every masked position of a row one answer can get right."""
    targets = batch["targets"][:, HALF:]
    return sum(np.unique(row, return_counts=True)[1].max() for row in targets)


class PositionOrderTest(absltest.TestCase):
    def test_bert_table_learns_the_mirror(self):
        sums, _ = _trained("learned")
        self.assertGreaterEqual(sums["correct"] / sums["count"], 0.95)

    def test_without_positions_it_cannot(self):
        sums, held_out = _trained("none")
        self.assertLessEqual(sums["correct"], _most_frequent_targets(held_out))


if __name__ == "__main__":
    absltest.main()
