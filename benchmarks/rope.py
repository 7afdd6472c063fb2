"""Speed of `apply_rope` against the memory-bandwidth limit and the reference forms.

    python benchmarks/rope.py [--shape=8,4096,8,64] [--output=rope.jsonl]

RoPE reads x once and writes it once, so a jitted element-wise pass over the same array
(negation: one read, one write) bounds it from above. The references compute their cos and
sin tables on the host (exact angles in Decimal, see rope_reference.py), and their rows
include that. Each row gives GB/s as (bytes read + bytes written) / median time, and the
ratio to that bound in the same run. "element-wise" is apply_rope's default, exact path;
"formula (exact=False)" its plain form, jnp.cos and jnp.sin of float32 angles.

The "nd" rows are `apply_rope_nd` on the same x: A = 1 with RoPE's frequencies (its row must
match "element-wise": the same code), M-RoPE's 3 axes (Qwen2-VL's sections), and learned
frequencies per head (RoPE-Mixed, 2 axes, a jax array: float32 angles, [L, N, H] tables).
"""

import functools

import jax
import jax.numpy as jnp
import numpy as np
from absl import app, flags
from timing import report, time_call

from roformer_jax.nn import rope, rope_nd, rope_reference

_SHAPE = flags.DEFINE_list("shape", ["8", "4096", "8", "64"], "x shape [B, L, N, H].")
_OUTPUT = flags.DEFINE_string("output", None, "Append JSON lines here.")
_REPEATS = flags.DEFINE_integer("repeats", 10, "Timed calls per case (at least).")

FORMS = {
    "element-wise": rope.apply_rope,
    "formula (exact=False)": functools.partial(rope.apply_rope, exact=False),
    "dense matrix": rope_reference.apply_rope_dense,
    "complex": rope_reference.apply_rope_complex,
}


def _nd_forms(shape):
    """apply_rope_nd's cases as (x, positions [L]) -> x, positions spread over the axes."""
    _, _, heads, head_dim = shape
    pairs = head_dim // 2
    one_axis = rope_nd.axial_frequencies(head_dim, 1)
    sections = [pairs - 2 * (pairs // 3), pairs // 3, pairs // 3]
    mrope = rope_nd.mrope_frequencies(head_dim, sections)
    mixed = jnp.asarray(np.repeat(rope_nd.axial_frequencies(head_dim, 2)[None], heads, 0))

    def on_axes(freqs, axes):
        def form(x, positions):
            spread = jnp.stack([positions // (a + 1) for a in range(axes)], axis=-1)  # [L, A]
            return rope_nd.apply_rope_nd(x, spread, freqs)

        return form

    return {
        "nd, A=1": on_axes(one_axis, 1),
        "nd, M-RoPE A=3": on_axes(mrope, 3),
        "nd, learned per head A=2": on_axes(mixed, 2),
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
        for name, form in {**FORMS, **_nd_forms(shape)}.items():
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
