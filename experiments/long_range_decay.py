"""Draws RoPE's long-range-decay bound (paper section 3.4.3, the blog's figure) to a PNG.

    python experiments/long_range_decay.py --dim=128 --max_distance=256 \
        --output=docs/long_range_decay.png

Prints f(r) at a few distances; for d=128, base=10000: f(0)=32.5, f(1)=31.538, f(16)=15.775,
f(64)=10.090, f(256)=6.543.
"""

import numpy as np
from absl import flags

from roformer_jax.nn import rope_reference
from roformer_jax.studies import plots
from roformer_jax.training import runtime

_DIM = flags.DEFINE_integer("dim", 128, "Rotated dimension d.")
_BASE = flags.DEFINE_float("base", 10000.0, "θ_i = base^(-2i/d).")
_MAX_DISTANCE = flags.DEFINE_integer("max_distance", 256, "Largest relative distance r.")
_OUTPUT = flags.DEFINE_string("output", "long_range_decay.png", "Output PNG.")


def main(argv):
    del argv
    distances = np.arange(_MAX_DISTANCE.value + 1)
    values = rope_reference.long_range_decay(distances, dim=_DIM.value, base=_BASE.value)
    for r in sorted({0, 1, 16, 64, _MAX_DISTANCE.value} & set(distances.tolist())):
        print(f"f({r}) = {values[r]:.3f}")
    title = f"RoPE long-range decay, d={_DIM.value}, base={_BASE.value:g}"
    print("wrote", plots.plot_decay(distances, values, _OUTPUT.value, title=title))


if __name__ == "__main__":
    runtime.run_main(main)
