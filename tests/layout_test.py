"""Tests for the package's layout: floors, the public API, and where ml_collections may go.

Each sub-package imports only from the floors below it (README's "Layout"), at the top of
its modules: an import hidden inside a function is how an import circle hides.
"""

import ast
import pathlib
import re
import subprocess
import sys

from absl.testing import absltest, parameterized

import roformer_jax as rj

PACKAGE = pathlib.Path(rj.__file__).parent
# What each floor may import from roformer_jax (itself included).
MAY_IMPORT = {
    "nn": {"nn"},
    "data": {"data"},
    "hf": {"nn", "hf"},
    "training": {"nn", "data", "hf", "training"},
    "studies": {"nn", "data", "hf", "training", "studies"},
}
# The library never receives "the config": ml_collections stays in the lab (and configs/).
MAY_IMPORT_ML_COLLECTIONS = {"studies"}


def _floor(path: pathlib.Path) -> str:
    return path.relative_to(PACKAGE).parts[0].removesuffix(".py")


def _modules():
    return sorted(p for p in PACKAGE.rglob("*.py") if p != PACKAGE / "__init__.py")


def _imports(tree: ast.Module):
    """(module name, at top level) of every import in `tree`."""
    top = {id(node) for node in tree.body}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name, id(node) in top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module == "roformer_jax":
            yield from ((f"roformer_jax.{alias.name}", id(node) in top) for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module:
            yield node.module, id(node) in top


class FloorsTest(parameterized.TestCase):
    @parameterized.parameters(*[str(p.relative_to(PACKAGE)) for p in _modules()])
    def test_imports_only_from_the_floors_below(self, relative):
        path = PACKAGE / relative
        floor = _floor(path)
        for name, at_top in _imports(ast.parse(path.read_text(encoding="utf-8"))):
            if name.startswith("roformer_jax"):
                self.assertTrue(at_top, f"{relative} imports {name} inside a function")
                self.assertIn(
                    name.split(".")[1].removesuffix(".py"),
                    MAY_IMPORT[floor],
                    f"{relative} ({floor}) imports {name}",
                )
            if name.split(".")[0] == "ml_collections":
                self.assertIn(floor, MAY_IMPORT_ML_COLLECTIONS, f"{relative} imports {name}")

    def test_every_module_belongs_to_a_floor(self):
        self.assertEqual({_floor(p) for p in _modules()}, set(MAY_IMPORT))

    def test_the_manual_names_every_module(self):
        # docs/layout.md's table, a row or more per sub-package: `module` or `prefix_*` each.
        manual = (PACKAGE.parent / "docs" / "layout.md").read_text(encoding="utf-8")
        named = {}
        for row in re.findall(r"^\| `(\w+)`[^|]*\|(.*)\|$", manual, re.M):
            named.setdefault(row[0], set()).update(re.findall(r"`(\w+\*?)`", row[1]))
        for path in _modules():
            floor, stem = _floor(path), path.stem
            if stem == "__init__" or floor == stem:  # hf.py: the sub-package is the module
                continue
            self.assertTrue(
                any(n == stem or n.endswith("*") and stem.startswith(n[:-1]) for n in named[floor]),
                f"docs/layout.md does not name {path.relative_to(PACKAGE)}",
            )


class PublicApiTest(absltest.TestCase):
    def test_all_names_resolve(self):
        tables = ("ATTENTION_KINDS", "ENCODINGS")  # name -> record, the rest are callables
        for name in rj.__all__:
            value = getattr(rj, name)
            self.assertTrue(isinstance(value, dict) if name in tables else callable(value), name)

    def test_what_users_reach_for(self):
        for name in (
            "TaskModel",
            "Rotation",
            "xpos_rotation",
            "alibi_bias",
            "ENCODINGS",
            "ATTENTION_KINDS",
            "apply_rope_nd",
            "segment_positions",
        ):
            self.assertIn(name, rj.__all__)

    def test_the_names_the_readme_tours(self):
        for name in (
            "apply_rope",
            "rope_rotation",
            "scaled_frequencies",
            "softmax_attention",
            "linear_attention",
            "cosine_attention",
            "RoFormer",
            "ModelConfig",
            "generate",
            "load_hf_roformer",
            "save_hf_roformer",
        ):
            self.assertIn(name, rj.__all__)

    def test_the_lab_is_not_imported_with_the_library(self):
        code = "import sys, roformer_jax; print(any('.studies' in m for m in sys.modules))"
        out = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        self.assertEqual(out.stdout.strip(), "False")


if __name__ == "__main__":
    absltest.main()
