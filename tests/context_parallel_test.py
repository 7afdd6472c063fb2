"""Tests for roformer_jax/nn/context_parallel.py: ring attention and LASP on 8 fake CPU
devices equal one device, outputs and gradients; nothing crosses a device boundary that
the mask forbids; the configurations it cannot run are refused by name."""

import dataclasses
import functools
import os
import pickle
import subprocess
import sys
import types

import chex
import context_parallel_cases as cases
import numpy as np
import tiny
import tolerance
from absl.testing import absltest, parameterized

from roformer_jax.nn import context_parallel
from roformer_jax.nn.attention_kinds import ATTENTION_KINDS

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_TMP = tiny.workdir("context_parallel_test_")


@functools.cache
def _results() -> dict:
    """context_parallel_cases.py's numbers on 8 fake devices: one process, one compile each."""
    out = os.path.join(_TMP, "cases.pkl")
    flags = f"{os.environ.get('XLA_FLAGS', '')} --xla_force_host_platform_device_count=8"
    path = os.pathsep.join([_ROOT, os.path.join(_ROOT, "tests")])
    env = dict(os.environ, XLA_FLAGS=flags, PYTHONPATH=path)
    command = [sys.executable, os.path.join(_ROOT, "tests", "context_parallel_cases.py"), out]
    done = subprocess.run(command, env=env, capture_output=True, text=True, timeout=900)
    if done.returncode:
        raise AssertionError(f"context_parallel_cases.py failed:\n{done.stderr[-3000:]}")
    with open(out, "rb") as f:
        return pickle.load(f)


def _bound(kind: str) -> float:
    """Twice the float32 error bound of one form's output (each form is within it of the
    exact value): softmax's as attention_cases derives it; a linear kind's output is a ratio
    of two sums of at most L terms of F-feature products (F <= H + 1, the largest feature
    map here), each term at most max|v| times its weight: γ_{L + H + 4} relative, over the
    sign-mixed numerator of eq. (19) counted twice."""
    q, k, v = cases.inputs()
    if kind == "softmax":
        import attention_cases  # noqa: PLC0415 (heavy: only for softmax's bound)

        return 2 * attention_cases.softmax_float32_bound(q, k, v)
    return 2 * 2 * np.abs(v).max() * tolerance.gamma(cases.L + cases.H + 4)


class RingEqualsOneDeviceTest(parameterized.TestCase):
    @parameterized.parameters(*cases.CASES)
    def test_outputs_and_gradients_equal_one_device(self, name):
        kind = cases.CASES[name][0]
        one, split = _results()["one"][name], _results()["split"][name]
        atol = _bound(kind)
        chex.assert_trees_all_close(split[0], one[0], atol=atol, rtol=0)
        # A gradient sums each input's part in at most L outputs of weight <= 1 each.
        for got, want in zip(split[1], one[1], strict=True):
            chex.assert_trees_all_close(got, want, atol=cases.L * atol, rtol=0)

    @parameterized.parameters(*cases.BOUNDARIES)
    def test_nothing_crosses_a_device_boundary_the_mask_forbids(self, name):
        before, after = _results()["split"]["boundary_" + name]
        start = cases.BOUNDARIES[name][2]
        np.testing.assert_array_equal(after[:, :start], before[:, :start])
        self.assertGreater(np.abs(after[:, start:] - before[:, start:]).max(), 0.01)

    def test_a_bias_is_refused_under_a_context_mesh(self):
        self.assertRegex(
            _results()["split"]["bias_refused"], "softmax attention .* cannot take bias"
        )


def _model(**fields):
    cfg = tiny.model_config(**fields)
    return types.SimpleNamespace(
        kind=cfg.kind,
        attention=cfg.attention,
        position=cfg.position,
        encoding=cfg.encoding,
        attention_section=cfg.attention_section,
    )


class CheckModelTest(parameterized.TestCase):
    def test_lengths_not_divisible_by_twice_context_are_refused(self):
        context_parallel.check_model(_model(), 4, lengths=(32, 64))
        with self.assertRaisesRegex(
            ValueError, "length 36 is not divisible by 2 x mesh.context = 8"
        ):
            context_parallel.check_model(_model(), 4, lengths=(32, 36))

    @parameterized.parameters(
        (dict(position="alibi", causal=True), "position='alibi'.s bias"),
        (dict(causal=True, sections={"softmax": {"gate": "fixed"}}), "gate.s decay"),
    )
    def test_softmax_options_without_a_ring_form_are_refused(self, fields, why):
        with self.assertRaisesRegex(ValueError, f"mesh.context=2: .*{why}"):
            context_parallel.check_model(_model(**fields), 2)

    def test_linear_kinds_take_their_gates(self):
        gate = {"gate": "learned"}
        for kind in ("linear", "cosine"):
            context_parallel.check_model(
                _model(attention=kind, causal=True, sections={kind: gate}), 2
            )

    def test_a_kind_without_a_ring_form_is_refused(self):
        model = _model()
        model.kind = dataclasses.replace(ATTENTION_KINDS["softmax"], no_ring=None)
        with self.assertRaisesRegex(ValueError, "attention='softmax' has no context-parallel"):
            context_parallel.check_model(model, 2)

    def test_no_mesh_is_one_device(self):
        self.assertEqual(context_parallel.context_size(), 1)


if __name__ == "__main__":
    absltest.main()
