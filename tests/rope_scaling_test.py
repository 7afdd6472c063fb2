"""Tests for roformer_jax/nn/rope_scaling.py: every kind against HF's ROPE_INIT_FUNCTIONS (when
transformers is installed) and against formulas written out here. apply_rope with a scaling is
tested in rope_test.py and rope_exact_test.py, a model with one in model_config_rope_test.py.

The comparison with HF runs on a sample of its grid (tests/grid.py), drawn per run: every kind
with every value of every axis, factor 1, partial rotary and an odd number of rotated pairs, plus
random cases. `ROFORMER_TEST_SEED=<seed> pytest ...` replays a run's draw (pytest prints the seed);
`ROFORMER_FULL_SUITE=1` runs the whole grid (1,152 cases).
"""

import json
import math
from unittest import mock

import chex
import grid
import numpy as np
import scalings
from absl.testing import absltest, parameterized

from roformer_jax.nn import rope, rope_scaling
from roformer_jax.nn.model_config import model_config

try:
    import transformers
    from transformers.modeling_rope_utils import ROPE_INIT_FUNCTIONS
except ImportError:  # the formula tests below still run
    transformers = None

HEAD_DIM = 64
# head_dim 36 at partial 0.5 rotates 9 pairs: an odd number.
AXES = dict(
    kind=["default", "linear", "proportional", "dynamic", "yarn", "longrope", "llama3"]
    + ["yarn untruncated"],
    factor=[1.0, 2.0, 8.0],
    seq_len=[None, 300, 3000],
    head_dim=[32, 36, 64, 128],
    base=[10000.0, 500000.0],
    partial=[1.0, 0.5],
)


def _hf(kind, params, *, head_dim, base, partial, seq_len):
    config = transformers.LlamaConfig(
        hidden_size=head_dim * 4,
        num_attention_heads=4,
        head_dim=head_dim,
        # HF's dynamic NTK reads the pre-training length from the model config.
        max_position_embeddings=512 if kind == "dynamic" else 4096,
        rope_parameters=dict(params, rope_theta=base, partial_rotary_factor=partial),
    )
    if kind == "default":  # v5 keeps plain RoPE in each model; linear at factor 1 is the same
        config.rope_parameters.update(rope_type="linear", factor=1.0)
        kind = "linear"
    inv_freq, attention = ROPE_INIT_FUNCTIONS[kind](config, "cpu", seq_len=seq_len)
    return inv_freq.numpy(), attention


def _odd_pairs(case):
    return int(case["head_dim"] * case["partial"]) // 2 % 2 == 1


def _sampled_grid():
    """AXES' product, sampled: each kind with each axis value and with an odd pair count."""
    required = [
        lambda c, k=kind, a=axis, v=value: c["kind"] == k and c[a] == v
        for kind in AXES["kind"]
        for axis, values in AXES.items()
        if axis != "kind"
        for value in values
    ] + [lambda c, k=kind: c["kind"] == k and _odd_pairs(c) for kind in AXES["kind"]]
    cases = grid.sample(grid.product(**AXES), required, extra=32, name="rope_scaling_vs_hf")
    for c in cases:
        c["testcase_name"] = (
            f"{c['kind'].replace(' ', '_')}_factor{c['factor']:g}_seq{c['seq_len']}"
            f"_head{c['head_dim']}_base{c['base']:g}_partial{c['partial']:g}"
        )
    return cases


class AgainstHuggingFaceTest(parameterized.TestCase):
    @parameterized.named_parameters(*_sampled_grid())
    def test_matches_rope_init_functions(self, kind, factor, seq_len, head_dim, base, partial):
        if transformers is None:
            self.skipTest("transformers is not installed; the formula tests cover the kinds")
        kind, _, untruncated = kind.partition(" ")
        # "proportional" returns frequencies for the whole head, the others for the rotated part.
        dim = head_dim if kind == "proportional" else int(head_dim * partial)
        params = scalings.params(kind, factor, dim // 2)
        if kind == "yarn":
            params["truncate"] = not untruncated
        if kind == "proportional":
            params["partial_rotary_factor"] = partial
        want, want_attention = _hf(
            kind, params, head_dim=head_dim, base=base, partial=partial, seq_len=seq_len
        )
        got, attention = rope_scaling.scaled_frequencies(
            dim, base=base, scaling=params, seq_len=seq_len
        )
        self.assertEqual(got.dtype, np.float32)
        chex.assert_trees_all_close(got, want, rtol=1e-6, atol=0)
        self.assertAlmostEqual(attention, want_attention, delta=1e-6 * want_attention)

    @parameterized.parameters(
        "default", "linear", "proportional", "dynamic", "yarn", "longrope", "llama3"
    )
    def test_takes_every_key_hf_validates(self, kind):
        """Every key HF's validator for `kind` requires or allows (so does not warn of) is one
        this module takes: refusing unknown keys must not refuse a checkpoint HF reads."""
        if transformers is None:
            self.skipTest("transformers is not installed")
        seen = []

        def record(rope_type, received_keys, required_keys, optional_keys=None, ignore_keys=None):
            seen.append(set(required_keys) | set(optional_keys or ()) | {"partial_rotary_factor"})

        config = transformers.LlamaConfig(
            hidden_size=256, num_attention_heads=4, head_dim=64, max_position_embeddings=4096
        )
        params = dict(scalings.params(kind, 2.0, 32), rope_theta=1e4)
        mixin = transformers.modeling_rope_utils.RotaryEmbeddingConfigMixin
        with mock.patch.object(mixin, "_check_received_keys", staticmethod(record)):
            getattr(config, f"_validate_{kind}_rope_parameters")(params)
        (hf_keys,) = seen
        ours = rope_scaling.COMMON_KEYS | getattr(rope_scaling.SCALINGS[kind], "keys", set())
        self.assertLessEqual(hf_keys, ours)
        rope_scaling.scaled_frequencies(64, base=1e4, scaling=params)  # HF's own dictionary

    def test_v4_and_v5_dictionaries_agree(self):
        v4 = {"type": "yarn", "factor": 4.0, "original_max_position_embeddings": 512}
        v5 = {"rope_type": "yarn", "rope_theta": 10000.0, "factor": 4.0}
        v5["original_max_position_embeddings"] = 512
        chex.assert_trees_all_equal(
            rope_scaling.scaled_frequencies(64, base=10000.0, scaling=v4),
            rope_scaling.scaled_frequencies(64, base=10000.0, scaling=v5),
        )


# Gemma-style pairs of layer types, each with its own base, scaling and rotated fraction; head
# dim 36: fraction 0.5 rotates 9 pairs (odd), 0 none, 0.25 four of proportional's eighteen.
PER_LAYER = [
    dict(
        full_attention=dict(
            rope_type="yarn",
            factor=4.0,
            rope_theta=1e6,
            partial_rotary_factor=0.5,
            original_max_position_embeddings=128,
        ),
        sliding_attention=dict(rope_type="default", rope_theta=1e4),
    ),
    dict(
        full_attention=dict(
            rope_type="proportional", factor=1.0, rope_theta=1e6, partial_rotary_factor=0.25
        ),
        sliding_attention=dict(
            rope_type="linear", factor=2.0, rope_theta=1e4, partial_rotary_factor=0.0
        ),
    ),
    dict(
        full_attention=dict(
            rope_type="llama3",
            factor=8.0,
            low_freq_factor=1.0,
            high_freq_factor=4.0,
            original_max_position_embeddings=64,
            rope_theta=5e5,
            partial_rotary_factor=1.0,
        ),
        sliding_attention=dict(
            rope_type="dynamic",
            factor=2.0,
            rope_theta=1e4,
            original_max_position_embeddings=512,
            partial_rotary_factor=0.5,
        ),
    ),
    dict(
        full_attention=dict(
            rope_type="longrope",
            factor=4.0,
            rope_theta=1e4,
            partial_rotary_factor=0.5,
            original_max_position_embeddings=128,
            short_factor=list(np.linspace(1.0, 1.5, 9)),
            long_factor=list(np.linspace(1.0, 8.0, 9)),
        ),
        sliding_attention=dict(rope_type="proportional", factor=2.0, rope_theta=1e4),
    ),
    # Plain RoPE in both spellings, with and without a fraction.
    dict(
        full_attention=dict(rope_type="default", rope_theta=1e6, partial_rotary_factor=0.5),
        sliding_attention=dict(rope_type="proportional", rope_theta=1e4),
    ),
]


class PerLayerTest(parameterized.TestCase):
    @parameterized.product(case=list(range(len(PER_LAYER))), seq_len=[None, 1000])
    def test_each_layer_type_matches_rope_init_functions(self, case, seq_len):
        if transformers is None:
            self.skipTest("transformers is not installed")
        layer_types = ["sliding_attention", "full_attention", "sliding_attention"]
        config = transformers.Gemma3TextConfig(
            hidden_size=72,
            num_attention_heads=2,
            head_dim=36,
            num_hidden_layers=3,
            layer_types=layer_types,
            max_position_embeddings=512,
            rope_parameters=json.loads(json.dumps(PER_LAYER[case])),
        )
        ours = rope_scaling.layer_parameters(PER_LAYER[case], layer_types, 3)
        for layer, name in enumerate(layer_types):
            kind = config.rope_parameters[name]["rope_type"]
            if kind == "default":  # v5 dropped it; linear at factor 1 is plain RoPE
                config.rope_parameters[name].update(rope_type="linear", factor=1.0)
                kind = "linear"
            want, want_attention = ROPE_INIT_FUNCTIONS[kind](
                config, "cpu", seq_len=seq_len, layer_type=name
            )
            layer_rope = rope_scaling.layer_rope(36, ours[layer], base=10000.0)
            if layer_rope is None:  # fraction 0: nothing rotated
                self.assertEqual(want.numel(), 0)
                continue
            got, attention = rope_scaling.scaled_frequencies(
                layer_rope.rotary_dim or 36,
                base=layer_rope.base,
                scaling=layer_rope.scaling,
                seq_len=seq_len,
            )
            chex.assert_trees_all_close(got, want.numpy(), rtol=1e-6, atol=0)
            self.assertAlmostEqual(attention, want_attention, delta=1e-6 * want_attention)

    def test_flat_parameters_serve_every_layer_and_none_is_no_positions(self):
        flat = {"rope_type": "linear", "factor": 2.0}
        self.assertEqual(rope_scaling.layer_parameters(flat, ["a", "b"], 2), [flat, flat])
        self.assertEqual(rope_scaling.layer_parameters(None, None, 2), [{}, {}])
        nested = {"a": {"rope_theta": 1e6}, "b": None}
        self.assertEqual(
            rope_scaling.layer_parameters(nested, ["a", "b", "a"], 3),
            [{"rope_theta": 1e6}, None, {"rope_theta": 1e6}],
        )
        self.assertIsNone(rope_scaling.layer_rope(64, None, base=1e4))
        self.assertEqual(
            rope_scaling.layer_rope(64, {"rope_theta": 1e6}, base=1e4),
            rope_scaling.LayerRope(1e6, None, {"rope_theta": 1e6}),
        )

    @parameterized.parameters(
        (dict(a={}), ["a", "b"], 2, r"layer types \['b'\] are missing from rope_parameters"),
        (dict(a={}), ["a"], 2, "layer_types has 1 entries for 2 layers"),
        (dict(a=dict(partial_rotary_factor=0.25)), ["a"], 1, "rotates 9 features, an odd"),
        (dict(a=dict(partial_rotary_factor=1.5)), ["a"], 1, r"a fraction in \[0, 1\], got 1.5"),
        (dict(a=dict(rope_type="yarn")), ["a"], 1, "'factor'"),
    )
    def test_bad_layer_parameters(self, params, layer_types, layers, message):
        with self.assertRaisesRegex(ValueError, message):
            for p in rope_scaling.layer_parameters(params, layer_types, layers):
                rope_scaling.layer_rope(36, p, base=1e4)


def _theta(dim, base):
    return np.array([base ** (-2.0 * i / dim) for i in range(dim // 2)])


class FormulaTest(parameterized.TestCase):
    """The kinds against formulas written out independently, transformers or not."""

    def freq(self, scaling, seq_len=None, dim=HEAD_DIM, base=10000.0):
        return rope_scaling.scaled_frequencies(dim, base=base, scaling=scaling, seq_len=seq_len)

    @parameterized.parameters((None,), ({},), ({"rope_type": "default"},), ({"type": "default"},))
    def test_default_is_plain_rope(self, scaling):
        inv_freq, attention = self.freq(scaling)
        chex.assert_trees_all_close(inv_freq, _theta(HEAD_DIM, 10000.0), rtol=1e-7)
        self.assertEqual(attention, 1.0)

    def test_linear_divides_by_factor(self):
        inv_freq, _ = self.freq({"rope_type": "linear", "factor": 4.0})
        chex.assert_trees_all_close(inv_freq, _theta(HEAD_DIM, 10000.0) / 4, rtol=1e-7)

    @parameterized.parameters(2.0, 8.0)
    def test_ntk_interpolates_the_lowest_frequency_by_factor(self, factor):
        inv_freq, _ = self.freq({"rope_type": "ntk", "factor": factor})
        theta = _theta(HEAD_DIM, 10000.0 * factor ** (HEAD_DIM / (HEAD_DIM - 2)))
        chex.assert_trees_all_close(inv_freq, theta, rtol=1e-7)
        plain = _theta(HEAD_DIM, 10000.0)
        self.assertAlmostEqual(inv_freq[0], plain[0])  # highest frequency kept
        # base' = base·s^(R/(R-2)) makes θ'_{R/2-1} = θ_{R/2-1}/s exactly.
        self.assertAlmostEqual(plain[-1] / inv_freq[-1], factor, places=5)

    def test_dynamic_is_plain_until_the_original_length_then_ntk(self):
        params = {"rope_type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 512}
        chex.assert_trees_all_close(self.freq(params, 300)[0], _theta(HEAD_DIM, 1e4), rtol=1e-7)
        # At s = 2·L₀ the NTK factor is 4·2 - 3 = 5.
        ntk = self.freq({"rope_type": "ntk", "factor": 5.0})[0]
        chex.assert_trees_all_close(self.freq(params, 1024)[0], ntk, rtol=1e-7)

    def test_yarn_keeps_fast_pairs_and_interpolates_slow_ones(self):
        params = {"rope_type": "yarn", "factor": 16.0, "original_max_position_embeddings": 4096}
        inv_freq, attention = self.freq(params, base=10000.0, dim=128)
        theta = _theta(128, 10000.0)
        turns = 4096 * theta / (2 * math.pi)  # rotations of each pair over L₀
        fast, slow = turns > 32 + 1, turns < 1 - 0.1
        chex.assert_trees_all_close(inv_freq[fast], theta[fast], rtol=1e-7)
        chex.assert_trees_all_close(inv_freq[slow], theta[slow] / 16, rtol=1e-7)
        self.assertTrue(fast.any() and slow.any())
        self.assertAlmostEqual(attention, 0.1 * math.log(16) + 1)
        with_mscale = dict(params, mscale=0.707, mscale_all_dim=0.707)
        self.assertEqual(self.freq(with_mscale)[1], 1.0)  # DeepSeek-V3's choice cancels
        self.assertEqual(self.freq(dict(params, attention_factor=0.5))[1], 0.5)

    def test_longrope_chooses_factors_by_length(self):
        pairs = HEAD_DIM // 2
        short, long = np.full(pairs, 1.5), np.linspace(1, 20, pairs)
        params = dict(
            rope_type="longrope",
            short_factor=list(short),
            long_factor=list(long),
            factor=8.0,
            original_max_position_embeddings=4096,
        )
        theta = _theta(HEAD_DIM, 10000.0)
        chex.assert_trees_all_close(self.freq(params, 4096)[0], theta / short, rtol=1e-7)
        chex.assert_trees_all_close(self.freq(params, 4097)[0], theta / long, rtol=1e-7)
        self.assertAlmostEqual(self.freq(params)[1], math.sqrt(1 + math.log(8) / math.log(4096)))

    def test_llama3_bands(self):
        inv_freq, _ = self.freq(scalings.LLAMA3, dim=128, base=500000.0)
        theta = _theta(128, 500000.0)
        wavelength = 2 * math.pi / theta
        high, low = wavelength < 8192 / 4, wavelength > 8192
        chex.assert_trees_all_close(inv_freq[high], theta[high], rtol=1e-7)
        chex.assert_trees_all_close(inv_freq[low], theta[low] / 8, rtol=1e-7)
        mid = ~high & ~low
        s = (8192 / wavelength[mid] - 1) / 3
        chex.assert_trees_all_close(inv_freq[mid], theta[mid] * ((1 - s) / 8 + s), rtol=1e-6)

    def test_proportional_leaves_the_rest_unrotated(self):
        params = {"rope_type": "proportional", "partial_rotary_factor": 0.25, "factor": 2.0}
        inv_freq, _ = self.freq(params)
        chex.assert_trees_all_close(inv_freq[:8], _theta(HEAD_DIM, 1e4)[:8] / 2, rtol=1e-7)
        chex.assert_trees_all_equal(inv_freq[8:], np.zeros(24, np.float32))


class BadInputTest(parameterized.TestCase):
    @parameterized.parameters(
        ({"rope_type": "su"}, "'rope_type' 'su'"),
        ({"rope_type": "yarn", "original_max_position_embeddings": 512}, "'factor'"),
        ({"rope_type": "yarn", "factor": 4.0}, "'original_max_position_embeddings'"),
        ({"rope_type": "linear", "factor": 0.5}, "'factor' must be a float >= 1, got 0.5"),
        ({"type": "ntk", "factor": 0.9}, "'factor' must be a float >= 1"),
        ({"rope_type": "llama3", "factor": 8.0, "original_max_position_embeddings": 8}, "'low"),
        ({"rope_type": "longrope", "original_max_position_embeddings": 8}, "'short_factor'"),
        (
            dict(
                rope_type="longrope",
                short_factor=[1.0] * 31,
                long_factor=[1.0] * 32,
                factor=2.0,
                original_max_position_embeddings=8,
            ),
            "'short_factor' has 31 numbers; expected 32",
        ),
        (
            {
                "rope_type": "yarn",
                "factor": 2.0,
                "original_max_position_embeddings": 8,
                "beta_fast": 1,
                "beta_slow": 2,
            },
            "'beta_fast' must be greater",
        ),
        ({"rope_theta": 500000.0}, "'rope_theta' 500000.0 disagrees with base 10000.0"),
        # A misspelt kind or key would leave plain RoPE or a default in force.
        ({"rope_typ": "linear", "factor": 4.0}, "given, so 'default'.*\\['factor', 'rope_typ'\\]"),
        ({"Type": "linear", "factor": 4.0}, "takes no key \\['Type', 'factor'\\]"),
        (dict(scalings.YARN, attn_factor=2.0), "'yarn' takes no key \\['attn_factor'\\]: its"),
        (dict(scalings.YARN, betafast=8), "\\['betafast'\\]: its keys are \\['attention_factor'"),
        ({"rope_type": "linear", "factor": 2.0, "alpha": 1.0}, "'linear' takes no key"),
        # Values HF's formulas would divide by, overflow on or broadcast wrongly.
        (dict(scalings.YARN, beta_fast=0), "'beta_fast' must be a number of turns > 0, got 0"),
        (dict(scalings.YARN, beta_slow=0.0), "'beta_slow' must be a number of turns > 0"),
        (dict(scalings.LLAMA3, low_freq_factor=0), "'low_freq_factor' must be a float > 0"),
        ({"rope_type": "proportional", "factor": 0}, "'factor' must be a float > 0, got 0"),
        (
            {"rope_type": "proportional", "partial_rotary_factor": 2},
            "'partial_rotary_factor' must be a fraction in \\[0, 1\\], got 2",
        ),
        (dict(scalings.YARN, original_max_position_embeddings=512.0), "a positive integer"),
        (dict(scalings.YARN, factor="4"), "'factor' must be a float >= 1, got '4'"),
        (dict(scalings.YARN, factor=True), "'factor' must be a float >= 1, got True"),
        ({"rope_type": ["linear"]}, "'rope_type' \\['linear'\\] is not one of"),
        ("linear", "rope scaling 'linear' is not a dictionary; expected None or HF's"),
        (4.0, "rope scaling 4.0 is not a dictionary"),
    )
    def test_value_error_names_the_key(self, scaling, message):
        with self.assertRaisesRegex(ValueError, message.replace("(", r"\(")):
            rope_scaling.scaled_frequencies(64, base=10000.0, scaling=scaling)

    @parameterized.parameters(0.0, -1.0, float("inf"), float("nan"), "1e4", True)
    def test_base_must_be_positive_and_finite(self, base):
        with self.assertRaisesRegex(ValueError, "must be positive and finite"):
            rope_scaling.scaled_frequencies(64, base=base, scaling=scalings.YARN)

    def test_the_valid_neighbours_still_work(self):
        def freq(**changes):
            return rope_scaling.scaled_frequencies(
                64, base=np.float32(1e4), scaling=dict(scalings.YARN, **changes)
            )

        # numpy scalars are numbers, as JSON's and YAML's readers may give them.
        chex.assert_trees_all_equal(
            freq(factor=np.float32(8), original_max_position_embeddings=np.int64(4096)), freq()
        )
        chex.assert_trees_all_equal(freq(beta_fast=32, beta_slow=None), freq())  # None: default
        self.assertFalse(np.array_equal(freq(beta_fast=16)[0], freq()[0]))
        # HF's other keys of any kind (v5's base and fraction, M-RoPE's sections), and a kind
        # named only by v4's "type".
        extra = dict(
            type="yarn", rope_theta=1e4, partial_rotary_factor=1.0, mrope_section=[8, 12, 12]
        )
        chex.assert_trees_all_equal(freq(**extra), freq())
        linear = {"rope_type": "linear", "factor": 2.0, "original_max_position_embeddings": 64}
        chex.assert_trees_all_equal(
            rope_scaling.scaled_frequencies(64, base=1e4, scaling=linear),
            rope_scaling.scaled_frequencies(64, base=1e4, scaling={"type": "linear", "factor": 2}),
        )


def _halved(dim, base, params, seq_len):
    """Every θ_i / 2: positions read at half their distance (docs/model.md's toy scaling)."""
    return base ** -(np.arange(0, dim, 2) / dim) / 2, 1.0


class AddAScalingTest(absltest.TestCase):
    """docs/model.md's recipe: one function (_halved) and one entry of SCALINGS."""

    def test_a_new_scaling_is_one_function_and_one_entry(self):
        x = np.random.default_rng(0).normal(size=(1, 8, 2, 16)).astype(np.float32)
        positions = np.arange(8)
        with mock.patch.dict(rope_scaling.SCALINGS, halved=_halved):
            halved = rope.apply_rope(x, 2 * positions, scaling={"rope_type": "halved"})
            config = model_config("tiny", sections={"rope": {"scaling": {"rope_type": "halved"}}})
            self.assertEqual(config.layer_rope(0).scaling, {"rope_type": "halved"})
        chex.assert_trees_all_close(halved, rope.apply_rope(x, positions), atol=1e-5)
        self.assertNotIn("halved", rope_scaling.SCALINGS)

    def test_a_kind_without_declared_keys_takes_only_the_common_ones(self):
        with mock.patch.dict(rope_scaling.SCALINGS, halved=_halved):
            with self.assertRaisesRegex(ValueError, "'halved' takes no key \\['factor'\\]"):
                rope_scaling.scaled_frequencies(
                    8, base=1e4, scaling={"rope_type": "halved", "factor": 2}
                )


class ModelConfigTest(absltest.TestCase):
    def test_a_misspelt_scaling_fails_in_the_config(self):
        with self.assertRaisesRegex(ValueError, "given, so 'default'"):
            model_config(
                "tiny", sections={"rope": {"scaling": {"rope_typ": "linear", "factor": 4.0}}}
            )
        with self.assertRaisesRegex(ValueError, "'beta_fast' must be a number of turns > 0"):
            model_config("tiny", sections={"rope": {"scaling": dict(scalings.YARN, beta_fast=0)}})
        model_config("tiny", sections={"rope": {"scaling": {"rope_type": "linear", "factor": 4.0}}})


if __name__ == "__main__":
    absltest.main()
