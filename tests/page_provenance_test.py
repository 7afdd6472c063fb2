"""Tests for roformer_jax/studies/page_provenance.py, through the page's markers: the header of a
study (commits, uncommitted changes, the kind of core), its stale mark (a ViT study's too), that
every study on the page has a stale or a reproduced line, and the table of wall times."""

import glob
import json
import os
import shutil

import tiny
from absl.testing import absltest, parameterized
from page_cases import _PAGE, _RAW, _read

from roformer_jax.studies import (
    length_bench,
    own_runs,
    page_provenance,
    results_page,
    study_record,
)
from roformer_jax.training import provenance


class PageProvenanceTest(parameterized.TestCase):
    @parameterized.named_parameters(
        (
            "changed",
            ["configs/studies.py", "roformer_jax/rope.py"],
            "**Stale:** 2 files of roformer_jax/ and configs/ changed since 9acdbbe "
            "(`git diff --stat 9acdbbe HEAD -- roformer_jax configs`).",
        ),
        (
            "unchanged",
            [],
            "**Current:** trained at 9acdbbe; no file of roformer_jax/ or configs/ changed since.",
        ),
        (
            "not_in_the_repository",
            None,
            "(trained at 9acdbbe, a commit this repository does not hold: cannot tell whether "
            "the code changed since)",
        ),
    )
    def test_stale_mark_follows_the_commit_map(self, changed, expected):
        commits = {"9acdbbe55002bbf1f7e15a94d72a35e7ec0b90fc": changed}
        text = "<!-- generated: causal_wikitext2 stale() -->old<!-- end generated -->"
        page = results_page.render(text, _RAW, changed=commits.get)
        self.assertEqual(page, text.replace("old", expected))
        self.assertEqual(results_page.differences(text, page), "")  # HEAD moving is no failure

    def test_a_vit_study_is_stale_from_its_record_commit(self):
        text = '<!-- generated: raw vit_stale("vit") -->old<!-- end generated -->'
        commits = {"cb2fd1b": ["roformer_jax/nn/vit.py"]}
        page = results_page.render(text, _RAW, changed=lambda commit: commits.get(commit[:7]))
        self.assertIn("**Stale:** 1 file of roformer_jax/ and configs/ changed since cb2fd1b", page)
        self.assertEqual(results_page.differences(text, page), "")  # a stale mark, left out

    def test_every_study_on_the_page_says_stale_current_or_reproduced(self):
        page = _read(_PAGE)
        self.assertEqual(page_provenance.unmarked(results_page.blocks(page)), [])
        # Take the lines away from two studies, a trainer's and a ViT's: both are named.
        for marker in (
            '<!-- generated: raw vit_stale("vit_zoom") -->',
            "<!-- generated: causal_wikitext2 stale() -->",
            "<!-- generated: causal_wikitext2 reproduced() -->",
        ):
            page = page.replace(marker, "<!-- generated: raw wall_time_table() -->")
        self.assertEqual(
            page_provenance.unmarked(results_page.blocks(page)), ["causal_wikitext2", "vit_zoom"]
        )

    def test_a_study_trained_at_two_commits_names_both_and_is_stale_from_the_older(self):
        # One multi-length run trained at 724d487, the other five at 39eb4e9, which study.json
        # names: the header names both, and the stale mark counts from the older.
        commits = study_record.read_raw(os.path.join(_RAW, "multilength_wikitext2")).commits
        self.assertEqual([c[:7] for c in commits], ["724d487", "39eb4e9"])
        text = (
            "<!-- generated: multilength_wikitext2 header() --><!-- end generated -->|"
            "<!-- generated: multilength_wikitext2 stale() --><!-- end generated -->"
        )
        header, stale = results_page.render(
            text, _RAW, changed={commits[0]: ["roformer_jax/rope.py"], commits[1]: []}.get
        ).split("|")
        self.assertIn("Ran at commits 724d487, 39eb4e9 (oldest first;", header)
        self.assertIn(
            "**Stale:** 1 file of roformer_jax/ and configs/ changed since 724d487", stale
        )

    def test_a_run_trained_with_uncommitted_changes_marks_the_header(self):
        # positions_lr_best's study.json names a clean commit; its seed-0 runs trained dirty.
        text = "<!-- generated: {} header() --><!-- end generated -->"
        for study, dirty in (("positions_lr_best", True), ("causal_wikitext2", False)):
            self.assertEqual(study_record.read_raw(os.path.join(_RAW, study)).dirty, dirty)
            page = results_page.render(text.format(study), _RAW)
            self.assertEqual(" with uncommitted changes," in page, dirty, study)

    @parameterized.named_parameters(
        ("whole", 3000.0, "| 50 min 0 s |", "the command took 50 min 0 s."),
        ("in_pieces", 600.0, "| n/a |", "it ran in pieces, so no single wall time."),
    )
    def test_a_command_shorter_than_its_runs_ran_in_pieces(self, wall_s, cell, sentence):
        # A resumed command records only its own part: 10 min against 44 min of training.
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        path = f"{raw}/causal_wikitext2/study.json"
        record = json.loads(_read(path))
        record["wall_s"] = wall_s
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        text = (
            "<!-- generated: raw wall_time_table() --><!-- end generated -->\n"
            "<!-- generated: causal_wikitext2 header() --><!-- end generated -->"
        )
        page = results_page.render(text, raw)
        # 2 cores x 44 min 9 s of training = 1.5 core-hours.
        self.assertIn(f"| causal_wikitext2 | 18 | 44 min 9 s | n/a | 1.5 {cell}", page)
        self.assertIn(sentence, page)

    def test_the_header_names_the_kind_of_core_where_the_record_has_it(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        text = "<!-- generated: causal_wikitext2 header() --><!-- end generated -->"
        self.assertIn(" 2 x86_64 cores, JAX", results_page.render(text, raw))  # before it did
        path = f"{raw}/causal_wikitext2/study.json"
        record = json.loads(_read(path))
        record["machine"]["cpu"] = "AMD EPYC, AVX-512"
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        self.assertIn(" 2 x86_64 cores (AMD EPYC, AVX-512), JAX", results_page.render(text, raw))

    def test_core_hours_count_each_run_at_the_cores_it_had(self):
        # Two studies side by side run pinned to a core each: the last command had 1 core, one
        # run recorded 1 and the others recorded none (2, the machine's, as their record said).
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        pinned = f"{raw}/causal_wikitext2/cosine_+_RoPE/seed0"
        sessions = json.loads(
            _read(f"{_RAW}/linear_long_wikitext2/elu+1_none/seed0/{provenance.FILE}")
        )
        sessions["sessions"][-1]["machine"]["cpus"] = 1
        with open(f"{pinned}/{provenance.FILE}", "w", encoding="utf-8") as f:
            json.dump(sessions, f)
        elapsed = {
            os.path.dirname(path): json.loads(_read(path).splitlines()[-1])["elapsed_s"]
            for path in glob.glob(f"{raw}/causal_wikitext2/*/*/metrics.jsonl")
        }
        text = "<!-- generated: raw wall_time_table() --><!-- end generated -->"
        core_hours = (2 * sum(elapsed.values()) - elapsed[pinned]) / 3600
        self.assertIn(f"| 44 min 9 s | n/a | {core_hours:.1f} |", results_page.render(text, raw))
        path = f"{raw}/causal_wikitext2/study.json"
        record = json.loads(_read(path))
        record["machine"]["cpus"] = 1
        with open(path, "w", encoding="utf-8") as f:
            json.dump(record, f)
        core_hours = sum(elapsed.values()) / 3600
        self.assertIn(f"| 44 min 9 s | n/a | {core_hours:.1f} |", results_page.render(text, raw))
        header = "<!-- generated: causal_wikitext2 header() --><!-- end generated -->"
        self.assertIn(" 1 x86_64 core, JAX", results_page.render(header, raw))

    def test_the_bench_has_its_row_running_and_finished_and_its_header(self):
        # The bench trains its own runs (own_runs): result.json with run_s, then bench.json.
        raw = tiny.workdir()
        folder = os.path.join(raw, "bench_x")
        for arm, seed, run_s in (("RoPE", 0, 100.0), ("RoPE", 1, 140.0), ("NoPE", 0, 60.0)):
            path = os.path.join(folder, arm, f"seed{seed}", "result.json")
            own_runs.write_json(path, {"run_s": run_s})
        text = "<!-- generated: raw wall_time_table() --><!-- end generated -->"
        row = results_page.render(text, raw).splitlines()[3]
        self.assertEqual(row, "| bench_x (in progress) | 3 so far | 5 min 0 s | n/a | n/a | n/a |")
        os.remove(os.path.join(folder, "NoPE", "seed0", "result.json"))
        os.rmdir(os.path.join(folder, "NoPE", "seed0"))
        record = {
            "config": {"arms": ["RoPE"], "seeds": [0, 1]},
            "code": {"commit": "abcdef0", "dirty": False},
            "machine": {"cpus": 2, "architecture": "x86_64", "jax": "0.10", "backend": "cpu"},
            "argv": ["experiments/length_bench.py"],
        }
        header = '<!-- generated: raw bench_header("bench_x") --><!-- end generated -->'
        for wall, cell, clause in (
            (300.0, "5 min 0 s", "the command took 5 min 0 s"),
            (30.0, "n/a", "it ran in pieces, so no single wall time"),
        ):
            length_bench.write_record(folder, {**record, "wall_s": wall})
            row = results_page.render(text, raw).splitlines()[3]
            self.assertEqual(row, f"| bench_x | 2 | 4 min 0 s | n/a | 0.1 | {cell} |")
            self.assertIn(f"2 seeds; {clause}.", results_page.render(header, raw))

    def test_a_bench_names_each_runs_commit_and_is_stale_from_the_oldest(self):
        # A bench run in pieces: each run names its commit (results before 2026-12-07 none),
        # the record only its last command's.
        raw = tiny.workdir()
        folder = os.path.join(raw, "bench_x")
        runs = (
            ("RoPE", 0, "a" * 40),
            ("RoPE", 1, "b" * 40),
            ("NoPE", 0, None),
            ("NoPE", 1, "b" * 40),
        )
        for arm, seed, commit in runs:
            code = {"code": {"commit": commit, "dirty": False}} if commit else {}
            own_runs.write_json(
                os.path.join(folder, arm, f"seed{seed}", "result.json"), {"run_s": 60.0, **code}
            )
        machine = {
            "cpus": 2,
            "architecture": "x86_64",
            "jax": "0.10",
            "backend": "cpu",
            "cpu": "EPYC",
        }
        record = {
            "config": {"arms": ["RoPE", "NoPE"], "seeds": [0, 1]},
            "code": {"commit": "c" * 40, "dirty": False},
            "machine": machine,
            "argv": ["experiments/length_bench.py"],
            "wall_s": 30.0,  # in pieces: the last command trained one run of four
        }
        length_bench.write_record(folder, record)
        text = (
            '<!-- generated: raw bench_header("bench_x") --><!-- end generated -->|'
            '<!-- generated: raw bench_stale("bench_x") --><!-- end generated -->'
        )
        changed = {"a" * 40: ["x.py", "y.py"], "b" * 40: [], "c" * 40: ["x.py"]}.get
        header, stale = results_page.render(text, raw, changed=changed).split("|")
        self.assertIn(
            "Ran at commits aaaaaaa (1 run), bbbbbbb (2 runs), and 1 run that names none (the last "
            "command ran at ccccccc), 2 x86_64 cores (EPYC), JAX",
            header,
        )
        self.assertIn(
            "**Stale:** 2 files of roformer_jax/ and configs/ changed since aaaaaaa", stale
        )
        self.assertIn("(1 of its 4 runs name no commit: older code may have trained them.)", stale)
        # One commit for every run, and a stale line without the caveat.
        for arm, seed, _ in runs:
            own_runs.write_json(
                os.path.join(folder, arm, f"seed{seed}", "result.json"),
                {"run_s": 60.0, "code": {"commit": "b" * 40, "dirty": seed == 1}},
            )
        header, stale = results_page.render(text, raw, changed=changed).split("|")
        self.assertIn("Ran at commit bbbbbbb with uncommitted changes, 2 x86_64", header)
        self.assertIn("**Current:** trained at bbbbbbb;", stale)
        self.assertNotIn("name no commit", stale)

    def test_a_study_still_running_has_a_row_of_the_runs_it_has_exported(self):
        raw = tiny.workdir()
        shutil.copytree(os.path.join(_RAW, "causal_wikitext2"), f"{raw}/causal_wikitext2")
        for run in ("elu+1_none/seed0", "elu+1_none/seed1"):  # no study.json yet
            shutil.copytree(
                os.path.join(_RAW, "linear_long_wikitext2", run), f"{raw}/running/{run}"
            )
        elapsed = [
            json.loads(_read(f"{raw}/running/{run}/metrics.jsonl").splitlines()[-1])["elapsed_s"]
            for run in ("elu+1_none/seed0", "elu+1_none/seed1")
        ]
        text = "<!-- generated: raw wall_time_table() --><!-- end generated -->"
        rows = results_page.render(text, raw).splitlines()
        self.assertRegex(rows[3], r"^\| causal_wikitext2 \| 18 \|")
        minutes, seconds = divmod(round(sum(elapsed)), 60)
        core_hours = 2 * sum(elapsed) / 3600  # the runs' provenance: 2 cores
        self.assertEqual(
            rows[4],
            f"| running (in progress) | 2 so far | {minutes} min {seconds} s "
            f"| n/a | {core_hours:.1f} | n/a |",
        )
        os.remove(f"{raw}/running/elu+1_none/seed1/provenance.json")  # cores unknown
        rows = results_page.render(text, raw).splitlines()
        self.assertTrue(rows[4].endswith("| n/a | n/a | n/a |"), rows[4])


if __name__ == "__main__":
    absltest.main()
