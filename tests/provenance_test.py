"""Tests for roformer_jax/training/provenance.py: the code and machine of each session."""

import os
import shutil
import subprocess
import sys
import tempfile
from unittest import mock

import tiny
from absl.testing import absltest

from roformer_jax.training import provenance

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class ProvenanceTest(absltest.TestCase):
    def test_sessions_accumulate(self):
        workdir = tiny.workdir()
        self.assertIsNone(provenance.read(workdir))
        first = provenance.record_session(workdir, start_step=0)
        provenance.record_session(workdir, start_step=40)
        sessions = provenance.read(workdir)["sessions"]
        self.assertEqual([s["start_step"] for s in sessions], [0, 40])
        self.assertEqual(sessions[0], first)
        self.assertEqual(first["machine"]["cpus"], provenance.cpus())

    @absltest.skipUnless(hasattr(os, "sched_setaffinity"), "no CPU affinity here")
    def test_a_process_pinned_to_one_core_records_one(self):
        # Two studies run side by side pinned a core each; each records the core it had.
        code = (
            "import os; os.sched_setaffinity(0, {min(os.sched_getaffinity(0))}); "
            "from roformer_jax.training import provenance; print(provenance.cpus())"
        )
        pinned = subprocess.run(
            [sys.executable, "-c", code], capture_output=True, text=True, check=True
        )
        self.assertEqual(pinned.stdout.strip(), "1")
        self.assertEqual(provenance.cpus(), len(os.sched_getaffinity(0)))

    def test_the_cpu_model_says_avx512_from_the_flags_of_proc_cpuinfo(self):
        info = "processor\t: 0\nmodel name\t: AMD EPYC 9654 \nflags\t\t: fpu sse2 avx2{}\n"
        self.assertEqual(
            provenance.cpu_model(info.format(" avx512f avx512bw")), "AMD EPYC 9654, AVX-512"
        )
        self.assertEqual(provenance.cpu_model(info.format(" avx512_vnni_only")), "AMD EPYC 9654")
        self.assertEqual(provenance.cpu_model(info.format("")), "AMD EPYC 9654")
        self.assertIsInstance(provenance.machine()["cpu"], str)

    @absltest.skipUnless(os.path.isdir(os.path.join(_ROOT, ".git")), "not a git checkout")
    def test_code_changed_asks_git(self):
        head = subprocess.run(
            ["git", "-C", _ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        self.assertEqual(provenance.code_changed(head), [])
        first = subprocess.run(
            ["git", "-C", _ROOT, "rev-list", "--max-parents=0", "HEAD"],
            capture_output=True,
            text=True,
            check=True,
        ).stdout.split()[0]
        self.assertIn("roformer_jax/rope.py", provenance.code_changed(first))
        self.assertIsNone(provenance.code_changed("0" * 40))  # not a commit of this repo

    @absltest.skipUnless(os.path.isdir(os.path.join(_ROOT, ".git")), "not a git checkout")
    def test_commit_is_the_checkouts(self):
        head = subprocess.run(
            ["git", "-C", _ROOT, "rev-parse", "HEAD"], capture_output=True, text=True, check=True
        ).stdout.strip()
        self.assertEqual(provenance.code_version()["commit"], head)

    def test_dirty_means_code_not_docs(self):
        root = tempfile.mkdtemp()
        self.addCleanup(shutil.rmtree, root)
        for name in ("code.py", "docs/results.md"):
            os.makedirs(os.path.dirname(os.path.join(root, name)), exist_ok=True)
            with open(os.path.join(root, name), "w") as f:
                f.write("one\n")

        def git(*args):
            subprocess.run(
                ["git", "-C", root, "-c", "user.name=t", "-c", "user.email=t@t", *args],
                capture_output=True,
                check=True,
            )

        git("init", "-q")
        git("add", "-A")
        git("commit", "-qm", "first")
        self.assertFalse(provenance.code_version(root)["dirty"])
        with open(os.path.join(root, "docs/results.md"), "a") as f:
            f.write("a study's raw output\n")
        self.assertFalse(provenance.code_version(root)["dirty"])
        with open(os.path.join(root, "code.py"), "a") as f:
            f.write("a change\n")
        self.assertTrue(provenance.code_version(root)["dirty"])

    def test_without_git_the_commit_is_unknown(self):
        with mock.patch.object(provenance.subprocess, "run", side_effect=FileNotFoundError):
            self.assertEqual(provenance.code_version(), {"commit": None, "dirty": None})


if __name__ == "__main__":
    absltest.main()
