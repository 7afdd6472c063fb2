"""Tests for roformer_jax/data/builtin_tasks.py: the offline tasks' files and labels."""

import os
import shutil
from unittest import mock

import tiny
from absl.testing import absltest

from roformer_jax.data import builtin_tasks, tasks
from roformer_jax.training import task_kinds

_TMP = tiny.workdir("builtin_tasks_test_")


def tearDownModule():
    shutil.rmtree(_TMP, ignore_errors=True)


class BuiltinTasksTest(absltest.TestCase):
    def test_builtin_source_package_task_labels_by_package(self):
        docs = [
            (os.path.join(p, f"m{i}.py"), f"doc {p} {i}")
            for p in ("email", "os.py", "xml")
            for i in range(10)
        ]
        with mock.patch.object(
            builtin_tasks.corpora, "stdlib_sourced_documents", lambda: iter(docs)
        ):
            paths = builtin_tasks.write_source_package_task(os.path.join(_TMP, "src"))
        splits = {k: task_kinds.read_examples(p, "classification") for k, p in paths.items()}
        self.assertEqual([len(x) for x in splits.values()], [16, 2, 2])
        examples = [e for x in splits.values() for e in x]
        self.assertEqual(tasks.label_list(examples), ("email", "xml"))  # not a listed package
        self.assertTrue(all(e["text"].split()[1] == e["label"] for e in examples))

    def test_word_kinds(self):
        words = ("None", "in", "__init__", "Returns", "3.11", "value")
        kinds = ["keyword", "keyword", "identifier", "capitalised", "number", "word"]
        self.assertEqual([builtin_tasks.word_kind(w) for w in words], kinds)


if __name__ == "__main__":
    absltest.main()
