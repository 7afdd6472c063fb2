"""Tests for the long-document study: roformer_jax/long_doc_study.py, long_doc_report.py, the
triplets as multiple choice (data/long_doc_task.py, data/tasks.py), and the command
experiments/long_doc_study.py end to end on a tiny WikiText-style corpus the test writes."""

import json
import os
import shutil
import subprocess
import sys

import numpy as np
import tiny
from absl.testing import absltest, parameterized

from configs import study_long_doc
from roformer_jax.data import tasks
from roformer_jax.data.tokenizer import ByteTokenizer
from roformer_jax.studies import long_doc_report, long_doc_study, long_doc_task, results_page, stats

_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class StagesAndCellsTest(parameterized.TestCase):
    @parameterized.parameters(200, 2000, 6, 37)
    def test_scaled_stages_keep_order_lengths_and_sum(self, steps):
        stages = long_doc_study.scale_stages(study_long_doc.MULTI_LENGTH, steps)
        self.assertEqual(sum(s[0] for s in stages), steps)
        self.assertEqual([s[1:] for s in stages], [s[1:] for s in study_long_doc.MULTI_LENGTH])
        self.assertGreaterEqual(min(s[0] for s in stages), 1)

    def test_scaled_to_the_reference_steps_is_the_reference(self):
        steps = sum(s[0] for s in study_long_doc.MULTI_LENGTH)
        self.assertEqual(
            long_doc_study.scale_stages(study_long_doc.MULTI_LENGTH, steps),
            study_long_doc.MULTI_LENGTH,
        )
        with self.assertRaisesRegex(ValueError, "cannot hold 6 stages"):
            long_doc_study.scale_stages(study_long_doc.MULTI_LENGTH, 5)

    def test_capped_schedule_keeps_tokens_per_step(self):
        for (s, n, b), (s2, n2, b2) in zip(study_long_doc.MULTI_LENGTH, study_long_doc.UP_TO_512):
            self.assertEqual((s, n * b), (s2, n2 * b2))
            self.assertLessEqual(n2, 512)

    def test_bert_past_its_table_is_na_not_dropped(self):
        config = study_long_doc.get_config()
        cells = long_doc_study.cells(config)
        self.assertLen(cells, 3 * 4)  # 3 encoders x (3 lengths + the control)
        self.assertEqual(
            cells[-4:-1],
            [
                long_doc_study.Cell("BERT", 512, "head"),
                "n/a (learned table of 512)",
                "n/a (learned table of 512)",
            ],
        )
        self.assertEqual(cells[3].name, "RoFormer multi-length @ 512 head+tail")
        self.assertLen(long_doc_study.cell_names(config.to_dict()), 10)

    @parameterized.parameters(None, "runlocal")
    def test_config_builds_every_run_and_cell(self, arg):
        self.assertIn(
            "python experiments/long_doc_study.py --config=configs/study_long_doc.py",
            study_long_doc.__doc__,
        )
        config = study_long_doc.get_config(arg)
        task, lengths = config.task, config.lengths
        # The window range of the config's comment: lengths vary (or the survival bins are
        # one bin), the longest length reads every pair [CLS] A [SEP] B [SEP] whole, and the
        # shortest cuts both sides to half its room whatever A's length.
        self.assertLess(task.min_window_tokens, task.window_tokens)
        self.assertLessEqual(2 * task.window_tokens + 3, max(lengths))
        self.assertGreater(2 * task.min_window_tokens, min(lengths) - 3)
        runs = long_doc_study.pretraining_runs(config)
        self.assertEqual(list(runs), list(config.runs))
        for seeds in runs.values():
            self.assertEqual(seeds[0].train.steps, config.pretrain_steps)
            longest = max(s[1] for s in seeds[0].train.stages)
            self.assertLessEqual(longest, seeds[0].model.max_length or longest)
        for cell in long_doc_study.cells(config):
            if isinstance(cell, long_doc_study.Cell):
                cfg = long_doc_study.finetune_config(config, cell, 0, "/encoder", "/task")
                self.assertEqual(
                    (cfg.task.max_length, cfg.task.format), (cell.max_length, "multiple_choice")
                )


class FootnoteTest(absltest.TestCase):
    def test_footnote_says_the_window_range(self):
        machine = {"device_count": 1, "backend": "cpu", "cpus": 2, "architecture": "x86_64"}
        config = study_long_doc.get_config().to_dict()
        self.assertIn(
            "triplets of windows of 256 to 760 tokens (budgets drawn per article);",
            long_doc_report.footnote(config, machine),
        )
        config["task"]["min_window_tokens"] = 760
        self.assertIn("triplets of 760-token windows;", long_doc_report.footnote(config, machine))
        del config["task"]["min_window_tokens"]  # a study.json from before the range
        self.assertIn("triplets of 760-token windows;", long_doc_report.footnote(config, machine))


class FinetuningTableTest(absltest.TestCase):
    def test_a_row_per_run_with_its_epochs_best_epoch_and_test_against_chance(self):
        def run(valid, train, best_step, right, n=20):
            records = [{"step": 5, "epoch": 0.5, "train/accuracy": 0.1}]  # a logged step
            records += [
                {
                    "step": 10 * (i + 1),
                    "epoch": float(i + 1),
                    "valid/accuracy": v,
                    "train/accuracy": t,
                }
                for i, (v, t) in enumerate(zip(valid, train))
            ]
            labels = [i % 2 for i in range(n)]
            predictions = [y if i < right else 1 - y for i, y in enumerate(labels)]
            final = {"best_step": best_step, "valid/accuracy": max(valid)}
            return long_doc_study.Finetuning(
                records, final, {"test": {"prediction": predictions, "label": labels}}
            )

        table = long_doc_report.finetuning_table(
            {
                "copy control": run([0.6, 0.9, 0.85], [0.7, 0.95, 0.99], 20, 17),
                "far": run([0.5, 0.55], [0.6, 0.9], 20, 10),
            }
        )
        rows = table.splitlines()
        self.assertLen(rows, 4)
        self.assertEqual(
            rows[2],
            "| copy control | 0.600, 0.900, 0.850 | 0.700, 0.950, 0.990 | 2 | 0.900 | "
            f"0.850 (17 of 20) | p = {stats.sign_test(17, 20):.2g} |",
        )
        self.assertEqual(
            rows[3], "| far | 0.500, 0.550 | 0.600, 0.900 | 2 | 0.550 | 0.500 (10 of 20) | p = 1 |"
        )

    def test_paired_rows_count_the_examples_each_run_alone_gets_right(self):
        labels = [0, 1] * 10  # 20 examples

        def run(wrong_valid, wrong_test):
            def split(wrong):
                return {
                    "prediction": [1 - y if i in wrong else y for i, y in enumerate(labels)],
                    "label": labels,
                }

            predictions = {"valid": split(wrong_valid), "test": split(wrong_test)}
            return long_doc_study.Finetuning([], {}, predictions)

        # test: the first misses 0-4, the second 3-9: only the first gets 5-9 right, only the
        # second 0-2; both miss 3 and 4. valid: only the second misses 1.
        first, second = run({0}, {0, 1, 2, 3, 4}), run({0, 1}, set(range(3, 10)))
        table = long_doc_report.finetuning_paired_table({"pairs − MLM": (first, second)})
        rows = table.splitlines()
        self.assertLen(rows, 3)
        self.assertEqual(
            rows[2],
            f"| pairs − MLM | +0.050 | 1 : 0, p = 1 | +0.100 | 5 : 3, p = "
            f"{stats.sign_test(5, 8):.2g} |",
        )
        with self.assertRaisesRegex(ValueError, "different examples"):
            other = long_doc_study.Finetuning(
                [], {}, {s: {"prediction": [0], "label": [1]} for s in ("valid", "test")}
            )
            long_doc_report.finetuning_paired_table({"x": (first, other)})


class TripletsAsChoicesTest(absltest.TestCase):
    def test_label_indexes_the_positive(self):
        rows = long_doc_task.multiple_choice_examples(
            [{"id": "x", "A": "a", "B": "b", "C": "c", "label": "C"}]
        )
        self.assertEqual(rows, [{"id": "x", "context": "a", "choices": ["b", "c"], "label": 1}])

    def test_head_tail_keeps_the_head_and_tail_of_each_side_within_the_budget(self):
        tok = ByteTokenizer()
        a, b, c = ("A" * 150 + "x" * 300 + "Z" * 150), ("b" * 100 + "y" * 400 + "e" * 100), "c"
        examples = long_doc_task.multiple_choice_examples(
            [{"id": "t", "A": a, "B": b, "C": c, "label": "B"}]
        )
        rows = tasks.encode_multiple_choice(examples, tok, max_length=64, truncation="head+tail")
        ids = rows["input_ids"][0, 0].tolist()  # the (A, B) row
        self.assertEqual(sum(rows["attention_mask"][0, 0]), 64)
        na, nb = tasks.pair_budgets(len(a), len(b), 64 - 3)
        ta, tb = tok.encode(a), tok.encode(b)
        self.assertEqual(ids[1 : 1 + na], ta[: na - na // 2] + ta[len(ta) - na // 2 :])
        self.assertEqual(ids[2 + na : 2 + na + nb], tb[: nb - nb // 2] + tb[len(tb) - nb // 2 :])
        self.assertEqual([ids[0], ids[1 + na], ids[63]], [tok.cls_id, tok.sep_id, tok.sep_id])
        text = tok.decode(ids)
        self.assertIn("AZ", text)  # A's head meets its tail: the middle is what was cut
        self.assertIn("be", text)


def _wikitext(articles: int, first: int) -> str:
    """WikiText-style articles of 4 sections of 40 words; article k's words name its topic
    (k // 2), so two articles share a topic and the hard negative is the twin."""
    lines = []
    for k in range(first, first + articles):
        lines += ["", f" = Title {k} = ", ""]
        for s in range(4):
            if s:
                lines += ["", f" = = Part {s} = = ", ""]
            words = [f"topic{k // 2}w{i % 9}" if i % 3 else f"the{i % 5}" for i in range(40)]
            lines.append(" " + " ".join(words) + " . ")
    return "\n".join(lines) + "\n"


_TEST_CONFIG = """
from configs import study_long_doc

def get_config(arg=None):
    config = study_long_doc.get_config("runlocal")
    # No dropout: what the command does with its cells is tested, not the model, and
    # dropout adds about half to what each of the 7 train steps takes to trace and compile
    # (benchmarks/compile_step.py).
    config.experiment.model.update(num_layers=1, hidden_size=32, num_heads=2,
                                   intermediate_size=64, hidden_dropout=0.0,
                                   attention_dropout=0.0)
    config.experiment.data.update(source={train!r}, seq_len=32, vocab_size=400,
                                  max_chars=None, valid_fraction=0.1)
    config.experiment.train.update(batch_size=2, eval_batches=1, log_every=1)
    config.experiment.optim.warmup_steps = 1
    # "512 only" caps the 64-token stage at 32 and keeps its batch (the study's grows it to
    # keep tokens per step): both its stages are the first stage's shape, one compiled step.
    config.schedules = {{"multi-length": ((1, 32, 2), (1, 64, 2)),
                         "512 only": ((1, 32, 2), (1, 32, 2))}}
    config.pretrain_steps = 2
    # Two encoders of the three: a RoFormer that reads every length, and BERT that cannot.
    del config.runs["RoFormer 512 only"], config.schedule_of["RoFormer 512 only"]
    config.encoder_pairs = (("RoFormer multi-length", "BERT"),)
    config.runs.BERT.model.max_len = 32
    config.lengths = (32, 64)
    config.task.update(sources={sources!r}, min_window_tokens=6, window_tokens=12,
                       tokenizer="words")
    config.finetune.finetune.update(epochs=1, batch_size=4, log_every=1)
    config.finetune.optim.warmup_steps = 1
    return config
"""


class CommandTest(absltest.TestCase):
    """The command, once, then its outputs checked, then again (all cached): 2 pre-trainings
    of 2 steps and 5 fine-tunings of 3 steps of a 1-layer encoder, mostly compiling."""

    @classmethod
    def setUpClass(cls):
        super().setUpClass()
        cls.dir = tiny.workdir("long_doc_study_test_")
        sources = []
        for split, (n, first) in {"train": (12, 0), "valid": (4, 100), "test": (4, 200)}.items():
            sources.append(os.path.join(cls.dir, f"{split}.txt"))
            with open(sources[-1], "w", encoding="utf-8") as f:
                f.write(_wikitext(n, first))
        config = os.path.join(cls.dir, "tiny_long_doc.py")
        with open(config, "w", encoding="utf-8") as f:
            f.write(_TEST_CONFIG.format(train=sources[0], sources=tuple(sources)))
        cls.workdir, cls.raw = os.path.join(cls.dir, "work"), os.path.join(cls.dir, "raw", "ld")
        script = os.path.join(_ROOT, "experiments", "long_doc_study.py")
        command = [
            sys.executable,
            script,
            f"--config={config}",
            f"--workdir={cls.workdir}",
            f"--raw_dir={cls.raw}",
        ]
        # conftest.py's compilation cache: cells of one shape (every RoFormer at 32 tokens)
        # compile once. The repository root (configs/) goes before the user's PYTHONPATH, which
        # may be where the dependencies are.
        path = os.pathsep.join(p for p in (_ROOT, os.environ.get("PYTHONPATH")) if p)
        env = {**os.environ, "PYTHONPATH": path, "JAX_PLATFORMS": "cpu"}
        cls.command, cls.env = command, env
        cls.first = cls.run_command()
        if cls.first.returncode:
            raise AssertionError(cls.first.stderr[-3000:])

    @classmethod
    def run_command(
        cls, workdir: str | None = None, raw_dir: str | None = None
    ) -> subprocess.CompletedProcess:
        command = cls.command + [f"--workdir={workdir}"] * (workdir is not None)  # the last wins
        command += [f"--raw_dir={raw_dir}"] * (raw_dir is not None)
        return subprocess.run(
            command, env=cls.env, capture_output=True, text=True, cwd=cls.dir, timeout=600
        )

    @classmethod
    def tearDownClass(cls):
        shutil.rmtree(cls.dir, ignore_errors=True)
        super().tearDownClass()

    def test_report_has_every_table_and_na_cells(self):
        with open(os.path.join(self.workdir, "long_doc.md"), encoding="utf-8") as f:
            report = f.read()
        for heading in (
            "## Accuracy",
            "## Paired by fine-tuning seed",
            "## Bag-of-words",
            "survives truncation at 32",
        ):
            self.assertIn(heading, report)
        self.assertIn("| BERT | ", report)
        self.assertIn("n/a (learned table of 32)", report)
        self.assertIn("RoFormer multi-length − BERT @ 32", report)
        self.assertRegex(report, r"on what each length reads, 32: valid [\d.]+, test [\d.]+; 64: ")
        self.assertTrue(os.path.exists(os.path.join(self.workdir, "long_doc.png")))

    def test_raw_folder_rebuilds_the_tables_and_renders_on_a_page(self):
        record = json.load(open(os.path.join(self.raw, "study.json"), encoding="utf-8"))
        results = long_doc_study.read_results(self.raw, record["config"])
        self.assertLen(results.final, 5)
        workdir = long_doc_study.read_results(self.workdir, record["config"])
        self.assertEqual(
            long_doc_report.paired_table(results), long_doc_report.paired_table(workdir)
        )
        page = (
            "<!-- generated: ld long_doc_table() --><!-- end generated -->\n"
            "BoW: <!-- generated: ld long_doc_bow() --><!-- end generated -->\n"
            "<!-- generated: ld long_doc_paired_table() --><!-- end generated -->\n"
            "<!-- generated: ld long_doc_survival_table() --><!-- end generated -->\n"
            "<!-- generated: ld long_doc_figure() --><!-- end generated -->\n"
        )
        text = results_page.render(page, os.path.dirname(self.raw))
        self.assertIn(long_doc_report.accuracy_table(results), text)
        self.assertIn("BoW: <!-- generated: ld long_doc_bow() -->valid ", text)
        self.assertIn("![ld](results/ld.png)", text)

    def test_survival_fractions_and_predictions_per_example(self):
        survival = json.load(open(os.path.join(self.workdir, "survival.json"), encoding="utf-8"))
        short, long = np.array(survival["32"]["test"]), np.array(survival["64"]["test"])
        self.assertTrue(np.all((0 < short) & (short <= long) & (long <= 1)))
        self.assertLess(short.max(), 1.0)  # 32 tokens cannot hold two 12-word windows
        # Windows of 6 to 12 words: B's kept fraction varies over the survival bins (with one
        # window length, every triplet kept the same fraction and one bin held them all).
        bins = np.digitize(short, study_long_doc.get_config().survival_edges[1:-1])
        self.assertGreater(len(set(bins.tolist())), 1, short)
        path = os.path.join(self.raw, "finetune", "BERT_32", "seed0", "predictions.json")
        predictions = json.load(open(path, encoding="utf-8"))["test"]
        self.assertLen(predictions["prediction"], len(short))
        self.assertLessEqual(set(predictions["label"]), {0, 1})

    def test_binning_the_survival_counts_every_example(self):
        survival = json.load(open(os.path.join(self.workdir, "survival.json"), encoding="utf-8"))
        kept = survival["32"]["test"]
        bins = stats.binned_accuracy(kept, np.ones(len(kept), bool), edges=(0, 0.5, 1))
        self.assertEqual(sum(b.count for b in bins), len(kept))

    def test_rerun_is_cached_even_from_a_moved_workdir(self):
        moved = os.path.join(self.dir, "moved")  # every path a run's config holds moves too
        shutil.copytree(self.workdir, moved)
        again = self.run_command(moved)
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        self.assertIn("finished earlier, cached", again.stderr)
        self.assertNotIn("fine-tuning in", again.stderr)

    def test_a_fresh_machine_resumes_from_the_raw_folder(self):
        # An empty workdir and a raw folder that lacks one fine-tuning (the study stopped
        # there): only that fine-tuning runs, and only its encoder is pre-trained again.
        # BERT's: its pre-training is one stage of one shape, the multi-length RoFormer's two.
        raw, fresh = os.path.join(self.dir, "raw_copy"), os.path.join(self.dir, "fresh")
        shutil.copytree(self.raw, raw)
        os.remove(os.path.join(raw, "study.json"))
        missing = long_doc_study.finetune_dir(raw, "BERT @ 32", 0)
        shutil.rmtree(missing)
        again = self.run_command(fresh, raw)
        self.assertEqual(again.returncode, 0, again.stderr[-3000:])
        self.assertEqual(again.stderr.count("fine-tuning in"), 1)
        self.assertIn("BERT @ 32 seed 0: fine-tuning in", again.stderr)
        self.assertEqual(again.stderr.count("training in"), 1)
        self.assertIn("BERT seed 0: training in", again.stderr)
        self.assertEqual(again.stderr.count(f"finished in {raw}, restored"), 1 + 4)
        self.assertTrue(os.path.exists(os.path.join(missing, "final_metrics.json")))
        self.assertTrue(os.path.exists(os.path.join(raw, "study.json")))
        with open(os.path.join(fresh, "long_doc.md"), encoding="utf-8") as f:
            self.assertIn("n/a (learned table of 32)", f.read())


if __name__ == "__main__":
    absltest.main()
