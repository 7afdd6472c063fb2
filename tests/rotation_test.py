"""Tests for tests/rotation.py: every heavy class has a turn, the cheap ones run always, and
the cost table names classes that exist."""

import os
import re
import tempfile

import rotation
from absl.testing import absltest

_COSTS = {"a.py::A": 9.0, "a.py::B": 7.0, "b.py::C": 6.0, "b.py::D": 5.0, "b.py::E": 1.0}
_TESTS = os.path.dirname(os.path.abspath(__file__))


class ShardsTest(absltest.TestCase):
    def test_each_heavy_class_is_in_one_shard_and_a_cheap_one_in_none(self):
        groups = rotation.shards(_COSTS, 2, 5.0)
        self.assertEqual(groups, [["a.py::A", "b.py::D"], ["a.py::B", "b.py::C"]])

    def test_k_consecutive_seeds_run_each_heavy_class_once(self):
        runs = {name: 0 for name in _COSTS}
        for seed in range(10, 13):
            for name in set(_COSTS) - rotation.skipped(_COSTS, seed, 3, 5.0):
                runs[name] += 1
        self.assertEqual(
            runs, {"a.py::A": 1, "a.py::B": 1, "b.py::C": 1, "b.py::D": 1, "b.py::E": 3}
        )

    def test_the_shards_of_the_table_cost_about_the_same(self):
        costs = rotation.costs()
        totals = [sum(costs[n] for n in g) for g in rotation.shards(costs, rotation.SHARDS, 5.0)]
        self.assertLess(max(totals) - min(totals), max(costs.values()))


class NamesTest(absltest.TestCase):
    def test_a_node_id_names_its_class_or_its_file(self):
        self.assertEqual(rotation.class_of("tests/a_test.py::Cls::test_x[1]"), "a_test.py::Cls")
        self.assertEqual(rotation.class_of("tests/a_test.py::test_x"), "a_test.py")

    def test_folders_are_the_whole_suite_and_named_files_are_not(self):
        root = os.path.dirname(_TESTS)
        self.assertTrue(rotation.whole_suite([], root))
        self.assertTrue(rotation.whole_suite(["tests"], root))
        self.assertFalse(rotation.whole_suite(["tests/rotation_test.py"], root))
        self.assertFalse(rotation.whole_suite(["tests", "tests/grid_test.py::GridTest"], root))

    def test_the_table_is_read_from_a_junit_report(self):
        report = (
            '<testsuites><testsuite><testcase classname="tests.a_test.Cls" name="t1" time="1.25"/>'
            '<testcase classname="tests.a_test.Cls" name="t2" time="2"/>'
            '<testcase classname="tests.b_test" name="t" time="0.5"/></testsuite></testsuites>'
        )
        with tempfile.NamedTemporaryFile("w", suffix=".xml", delete=False) as f:
            f.write(report)
        self.addCleanup(os.remove, f.name)
        self.assertEqual(rotation.from_junit(f.name), {"a_test.py::Cls": 3.2, "b_test.py": 0.5})

    def test_every_class_the_table_names_exists(self):
        # A renamed class would run every time, and its stale entry would skew the shards.
        for name in rotation.costs():
            path, _, cls = name.partition("::")
            with open(os.path.join(_TESTS, path), encoding="utf-8") as f:
                source = f.read()
            if cls:
                self.assertRegex(source, rf"(?m)^class {re.escape(cls)}\b", name)


if __name__ == "__main__":
    absltest.main()
