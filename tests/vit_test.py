"""Tests for roformer_jax/nn/vit.py (patches, grid positions, the resized table, the model's
shift invariance under RoPE) and roformer_jax/studies/vit_study.py (its config, cache, tables,
verdict and raw files; the training itself is left to the study's runlocal, ~40 s of CPU)."""

import json
import os
import tempfile

import chex
import jax
import jax.numpy as jnp
import numpy as np
import tiny
import tolerance
from absl.testing import absltest, parameterized

from configs import study_vit
from roformer_jax.nn import vit
from roformer_jax.nn.model_config import ModelConfig
from roformer_jax.studies import own_runs, results_page, vit_study

B, Y, X, C, P = 2, 8, 12, 3, 4  # images of a 2 x 3 grid of 4 x 4 patches
GRID = (Y // P, X // P)


def _images(seed=0):
    return np.random.default_rng(seed).normal(size=(B, Y, X, C)).astype(np.float32)


class PatchTest(absltest.TestCase):
    def test_patchify_orders_the_grid_row_major(self):
        images = _images()
        patches = vit.patchify(images, P)
        chex.assert_shape(patches, (B, GRID[0] * GRID[1], P * P * C))
        row, col = 1, 2  # the last patch: index row * S + col
        want = images[:, row * P : (row + 1) * P, col * P : (col + 1) * P].reshape(B, -1)
        np.testing.assert_array_equal(patches[:, row * GRID[1] + col], want)
        np.testing.assert_array_equal(vit.unpatchify(patches, P, GRID), images)

    def test_bad_shapes(self):
        with self.assertRaisesRegex(ValueError, r"8 x 12 pixels .* 5 x 5"):
            vit.patchify(_images(), 5)
        with self.assertRaisesRegex(ValueError, r"not a 3 x 3 grid"):
            vit.unpatchify(vit.patchify(_images(), P), P, (3, 3))

    def test_grid_positions(self):
        np.testing.assert_array_equal(
            vit.grid_positions(GRID), [[0, 0], [0, 1], [0, 2], [1, 0], [1, 1], [1, 2]]
        )

    def test_resized_table(self):
        table = np.random.default_rng(1).normal(size=(*GRID, 5)).astype(np.float32)
        np.testing.assert_array_equal(vit.resize_table(table, GRID), table)  # its own grid
        bigger = vit.resize_table(table, (4, 6))
        chex.assert_shape(bigger, (4, 6, 5))
        # Bilinear weights are convex: every value lies within the table's range per feature.
        self.assertTrue(np.all(bigger <= table.max((0, 1)) + 1e-6))
        self.assertTrue(np.all(bigger >= table.min((0, 1)) - 1e-6))


def _config(**overrides):
    # initializer_range 0.3, not BERT's 0.02: logits far from 0 and from each other, so that
    # what positions change shows above the rounding bound.
    fields = dict(
        num_layers=1,
        hidden_size=16,
        num_heads=2,
        intermediate_size=32,
        hidden_dropout=0.0,
        attention_dropout=0.0,
        pre_ln=True,
        position="none",
        initializer_range=0.3,
    )
    config = {**fields, **overrides}
    if config["position"] in ("rope_nd", "rope_learned"):  # over (row, col), at base 100
        axial = {"axes": 2, "base": 100.0, **config.pop("section", {})}
        config["sections"] = {config["position"]: axial}
    return ModelConfig(**config)


# Each encoding's logits at the image's grid positions, shifted, and transposed.
ENCODINGS = {
    "rope_axial": dict(config=dict(position="rope_nd")),
    "rope_mixed": dict(config=dict(position="rope_learned", section={"per_head": True})),
    "table": dict(config={}, table_grid=GRID),
}
SHIFT = np.array([3, 7])  # rows and columns added to every patch's position


def _logits(config, table_grid=None):
    model = vit.ViT(_config(**config), P, 10, table_grid=table_grid)
    images = jnp.asarray(_images())
    positions = jnp.broadcast_to(vit.grid_positions(GRID), (B, GRID[0] * GRID[1], 2))

    @jax.jit  # one program per encoding: init and the three position sets
    def run(images, positions):
        variables = model.init(jax.random.key(0), images)
        # Heo et al.'s frequencies are learned: move them off RoPE-Axial's, whose pairs each
        # turn with one axis, so that RoPE-Mixed's angles mix rows and columns.
        variables = jax.tree_util.tree_map_with_path(
            lambda path, v: v + 0.3 if "rope_frequencies" in jax.tree_util.keystr(path) else v,
            variables,
        )
        apply = lambda p: model.apply(variables, images, p)  # noqa: E731
        return apply(positions), apply(positions + SHIFT), apply(positions[..., ::-1])

    return run(images, positions)


class ViTTest(parameterized.TestCase):
    @parameterized.parameters("rope_axial", "rope_mixed")
    def test_rope_logits_ignore_a_shift_of_every_patch(self, encoding):
        base, shifted, transposed = _logits(**ENCODINGS[encoding])
        chex.assert_shape(base, (B, 10))
        # Angles p·f are rounded at |p| <= max position: u·|p|·f rad of error each, with f <= 1
        # (base^0); scores and logits carry it relatively, through ~30 roundings per layer.
        max_position = int(SHIFT.max()) + max(GRID)
        atol = tolerance.relative(depth=30 * max_position) * float(jnp.abs(base).max())
        chex.assert_trees_all_close(shifted, base, atol=atol, rtol=0)
        # ... while where each patch lies does matter.
        self.assertGreater(float(jnp.abs(transposed - base).max()), 100 * atol)

    def test_learned_table_logits_change_with_a_shift(self):
        base, shifted, _ = _logits(**ENCODINGS["table"])
        self.assertGreater(float(jnp.abs(shifted - base).max()), 1e-3)

    def test_encodings_of_one_integer_per_token_are_refused(self):
        images = jnp.asarray(_images())
        with self.assertRaisesRegex(ValueError, r"position='rope' reads one integer"):
            vit.ViT(_config(position="rope"), P, 10).init(jax.random.key(0), images)
        with self.assertRaisesRegex(ValueError, r"sections.rope_nd.axes=4"):
            vit.ViT(_config(position="rope_nd", section={"axes": 4}), P, 10).init(
                jax.random.key(0), images
            )


def _fake_results(config):
    """Accuracies that make RoPE-Axial beat the table by 0.1 ± 0.01 at sizes past 16."""
    rng = np.random.default_rng(0)
    results = {}
    for name in config["runs"]:
        results[name] = []
        for seed in config["seeds"]:
            accuracy = {}
            for size in config["eval_sizes"]:
                gain = 0.1 if name == "RoPE-Axial" and size > config["train_size"] else 0.0
                accuracy[str(size)] = 0.8 + gain + 0.01 * rng.normal()
            results[name].append({"seed": seed, "accuracy": accuracy})
    return results


class StudyTest(absltest.TestCase):
    def test_configs_build(self):
        for arg in (None, "zoom", "runlocal", "select"):
            config = study_vit.get_config(arg).to_dict()
            for settings in vit_study.runs(config).values():
                vit_study.model(settings)  # ModelConfig checks every field
            for a, b in config["pairs"].values():
                self.assertIn(a, config["runs"])
                self.assertIn(b, config["runs"])
            self.assertTrue(all(s % config["patch"] == 0 for s in config["eval_sizes"]))
        with self.assertRaisesRegex(ValueError, "unknown argument"):
            study_vit.get_config("big")
        with self.assertRaisesRegex(ValueError, "one for each of"):
            study_vit.get_config("zoom,none=1e-3")

    def test_validation_digits_leave_the_test_digits_as_they_were(self):
        before, after = (vit_study.load_digits(497, 0, valid_size=v) for v in (0, 200))
        np.testing.assert_array_equal(after.test_images, before.test_images)
        self.assertEqual((len(after.valid_labels), len(after.train_labels)), (200, 1100))
        np.testing.assert_array_equal(  # cut from the training digits
            np.concatenate([after.valid_images, after.train_images]), before.train_images
        )

    def test_rates_are_chosen_on_the_validation_digits_alone(self):
        config = study_vit.get_config("select").to_dict()
        results = {}  # accuracy rises with the rate for RoPE-Axial, falls for the rest
        for name, settings in vit_study.runs(config).items():
            rate = settings["learning_rate"] * (1 if name.startswith("RoPE-Axial") else -1)
            valid = {str(s): 0.5 + rate for s in config["eval_sizes"]}
            results[name] = [{"valid_accuracy": valid}] * len(config["seeds"])
        self.assertEqual(
            vit_study.chosen_rates(config, results),
            {"RoPE-Axial": 4e-3, "RoPE-Mixed": 1e-3, "learned table": 1e-3, "none": 1e-3},
        )
        chosen = study_vit.get_config(
            "RoPE-Axial=4e-3,RoPE-Mixed=1e-3,learned table=1e-3,none=1e-3"
        ).to_dict()
        self.assertEqual(vit_study.runs(chosen)["RoPE-Axial"]["learning_rate"], 4e-3)
        self.assertNotIn("select", vit_study.runs(chosen)["none"])  # it scores the test digits
        with self.assertRaisesRegex(ValueError, "scored its test digits"):
            vit_study.chosen_rates(chosen, results)
        # The command prints the chosen rates of a selection study, and draws nothing.
        png = os.path.join(tiny.workdir(), "vit.png")
        printed = vit_study.report(config, results, png, machine={})
        self.assertEqual(printed, str(vit_study.chosen_rates(config, results)))
        self.assertFalse(os.path.exists(png))

    def test_report_of_a_study_on_the_test_digits_is_its_tables_and_figure(self):
        config = study_vit.get_config().to_dict()
        results = _fake_results(config)
        png = os.path.join(tiny.workdir(), "vit.png")
        printed = vit_study.report(config, results, png, machine={})
        self.assertIn(vit_study.accuracy_table(config, results), printed)
        self.assertIn(vit_study.paired_table(config, results), printed)
        self.assertTrue(os.path.exists(png))

    def test_zoomed_crops(self):
        images = np.random.default_rng(2).random((B, 8, 8, 1)).astype(np.float32)
        whole = vit_study.zoomed_crops(images, jax.random.key(0), 16, max_zoom=1.0)
        # Two weights of a bilinear sample per axis: 4 products summed, in [0, 1].
        atol = tolerance.dot(n=4, magnitude=1.0)
        chex.assert_trees_all_close(whole, vit_study.upsample(images, 16), atol=atol, rtol=0)
        zoomed = vit_study.zoomed_crops(images, jax.random.key(0), 16, max_zoom=2.0)
        chex.assert_shape(zoomed, (B, 16, 16, 1))
        self.assertGreater(float(jnp.abs(zoomed - whole).max()), 0.1)

    def test_tables_and_verdict(self):
        config = study_vit.get_config().to_dict()
        results = _fake_results(config)
        pair = "RoPE-Axial − learned table"
        self.assertEqual(
            vit_study.verdict(config, results, pair),
            "above zero at 20, 24, 28, 32 px; holds zero at 16 px",
        )
        paired = vit_study.paired_table(config, results).splitlines()
        self.assertLen(paired, 2 + len(config["pairs"]))
        self.assertIn("| 16 px |", paired[0])
        accuracy = vit_study.accuracy_table(config, results).splitlines()
        self.assertIn("16 px (trained)", accuracy[0])
        self.assertLen(accuracy, 2 + len(config["runs"]))

    def test_cached_runs_raw_files_and_page(self):
        config = study_vit.get_config("runlocal").to_dict()
        settings = vit_study.runs(config)["RoPE-Axial"]
        with tempfile.TemporaryDirectory() as root:
            raw = os.path.join(root, "vit")
            for name, seeds in _fake_results(config).items():
                for result in seeds:
                    path = os.path.join(raw, name.replace(" ", "_"), f"seed{result['seed']}")
                    os.makedirs(path)
                    with open(os.path.join(path, vit_study.RESULT), "w") as f:
                        json.dump({"settings": vit_study.runs(config)[name], **result}, f)
            vit_study.write_record(raw, {"config": config})
            record, results = vit_study.read_results(raw)
            self.assertEqual(list(results), list(config["runs"]))
            directory = os.path.join(raw, "RoPE-Axial", "seed0")
            self.assertEqual(own_runs.cached_result(directory, settings)["seed"], 0)
            with self.assertRaisesRegex(ValueError, "other settings"):
                own_runs.cached_result(directory, {**settings, "steps": 21})
            pair = next(iter(config["pairs"]))
            text = (
                f'<!-- generated: raw vit_paired_table("vit") -->\n<!-- end generated -->\n'
                f'<!-- generated: raw vit_verdict("vit", "{pair}") --><!-- end generated -->'
            )
            page = results_page.render(text, root, changed=lambda commit: None)
            self.assertIn(vit_study.paired_table(config, results), page)
            self.assertIn(vit_study.verdict(config, results, pair), page)


if __name__ == "__main__":
    absltest.main()
