"""Speed of `apply_rope` against the memory-bandwidth limit and the reference forms.

    python benchmarks/rope.py [--shape=8,4096,8,64] [--output=rope.jsonl]

RoPE reads x once and writes it once, so a jitted element-wise pass over the same array
(negation: one read, one write) bounds it from above. The references compute their cos and
sin tables on the host (exact angles in Decimal, see rope_reference.py), and their rows
include that. Each row gives GB/s as (bytes read + bytes written) / median time, and the
ratio to that bound in the same run.
"""

import jax
import jax.numpy as jnp
from absl import app, flags
from timing import report, time_call

from roformer_jax.nn import rope, rope_reference

_SHAPE = flags.DEFINE_list("shape", ["8", "4096", "8", "64"], "x shape [B, L, N, H].")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per case (at least).")

FORMS = {
    "element-wise": rope.apply_rope,
    "dense matrix": rope_reference.apply_rope_dense,
    "complex": rope_reference.apply_rope_complex,
}


def main(argv):
    del argv
    shape = tuple(int(s) for s in _SHAPE.value)
    positions = jnp.arange(shape[1])
    records = []
    for dtype in (jnp.float32, jnp.bfloat16):
        x = jax.random.normal(jax.random.key(0), shape, dtype)
        moved = 2 * x.size * x.dtype.itemsize  # bytes read + written
        copy = time_call(jax.jit(jnp.negative), x, repeats=_REPEATS.value)
        bound = moved / copy["ms"] / 1e6
        records.append({"form": "copy (bound)", "dtype": x.dtype.name, **copy, "GB/s": bound})
        for name, form in FORMS.items():
            fn = jax.jit(form)
            timing = time_call(fn, x, positions, repeats=_REPEATS.value)
            gbs = moved / timing["ms"] / 1e6
            records.append(
                {"form": name, "dtype": x.dtype.name, **timing, "GB/s": gbs, "x copy": gbs / bound}
            )
    for record in records:
        record["shape"] = list(shape)
        record["backend"] = jax.default_backend()
    report(records, ["form", "dtype", "ms", "GB/s", "x copy"], _OUTPUT.value)


if __name__ == "__main__":
    app.run(main)
