"""Tolerances derived from floating point's error bounds, not from one machine's last run.

Every float comparison in the suite states its tolerance as one of these, with the bound's
inputs (depth, magnitude) beside the assertion, so that any x86 machine (any BLAS, any XLA
fusion or summation order) passes it:

    atol = tolerance.dot(n=H, magnitude=np.abs(q).max() * np.abs(k).max() * H)
    chex.assert_trees_all_close(got, want, atol=atol, rtol=tolerance.relative(depth=3))

The model: u = eps / 2 is the unit roundoff, and a sum of n terms computed in any order is
off by at most γ_n · Σ|terms|, γ_n = n·u / (1 − n·u) (Higham 2002, eq. 3.5 and lemma 3.1).
A chain of `depth` roundings of a value is off by at most γ_depth relative to it. These are
worst cases; typical errors are ~sqrt(n)·u, so a bound is loose and never flaky.
"""

import numpy as np


def unit_roundoff(dtype=np.float32) -> float:
    """u = eps / 2: the largest relative error of one rounding (2^-24 for float32)."""
    return float(np.finfo(dtype).eps) / 2


def gamma(n: int, dtype=np.float32) -> float:
    """γ_n = n·u / (1 − n·u): the relative error bound of n successive roundings."""
    nu = n * unit_roundoff(dtype)
    if nu >= 1:
        raise ValueError(f"n·u = {nu} >= 1: no bound for {n} roundings in {np.dtype(dtype)}")
    return nu / (1 - nu)


def dot(n: int, magnitude: float, dtype=np.float32) -> float:
    """Absolute bound on a sum (or dot product) of n terms whose absolute values add up to at
    most `magnitude`: γ_n · magnitude, whatever the order of summation."""
    return gamma(n, dtype) * float(magnitude)


def relative(depth: int, dtype=np.float32) -> float:
    """Relative bound on a value computed through `depth` roundings (elementwise ops, each
    exp, sin or division counted once, plus the terms of any sum it goes through)."""
    return gamma(depth, dtype)
