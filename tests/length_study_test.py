"""Tests for roformer_jax/studies/length_study.py: scalings by length, cached scores."""

import dataclasses
import os
from unittest import mock

import tiny
from absl.testing import absltest
from length_cases import _config

from roformer_jax.data.length_eval import LengthEvalSet
from roformer_jax.studies import length_study, run_dirs


def _scaling(config):
    """The RoPE scaling a model is read with; None for a model that rotates nothing."""
    return getattr(config.position_section, "scaling", None)


class ScalingAtTest(absltest.TestCase):
    def test_factor_from_the_length_past_the_trained_one(self):
        self.assertIsNone(length_study.scaling_at({"rope_type": "linear"}, 128, 128))
        self.assertIsNone(length_study.scaling_at(None, 1024, 128))
        self.assertEqual(
            length_study.scaling_at({"rope_type": "yarn"}, 1024, 128),
            {"rope_type": "yarn", "factor": 8.0, "original_max_position_embeddings": 128},
        )
        given = {"rope_type": "dynamic", "factor": 2.0}
        self.assertEqual(length_study.scaling_at(given, 512, 128)["factor"], 2.0)

    def test_trained_length_counts_the_stages(self):
        cfg = _config()
        self.assertEqual(length_study.trained_length(cfg), cfg.data.seq_len)
        staged = dataclasses.replace(
            cfg, train=dataclasses.replace(cfg.train, steps=3, stages=((1, 64, 8), (2, 768, 4)))
        )
        self.assertEqual(length_study.trained_length(staged), 768)


_EVALUATIONS = {
    "rope": {"run": "rope"},
    "rope + PI": {"run": "rope", "scaling": {"rope_type": "linear"}},
    "bert": {"run": "bert"},
}


class EvaluateRunsTest(absltest.TestCase):
    def setUp(self):
        super().setUp()
        self.runs = {
            "rope": [_config(0), _config(1)],
            "bert": [_config(0, position="learned", max_len=256)],
        }
        self.seen = []  # per model scored: [(length, its rope_scaling)]

        def score(models, params, held_out, steps_done):
            self.assertEqual(steps_done, 10)  # the checkpoint's: it picks random features
            lengths = sorted(held_out.batches)
            self.seen.append([(n, _scaling(models(n).config)) for n in lengths])
            return {n: {"loss": float(n)} for n in lengths}

        def load_params(directory):
            name = "bert" if "bert" in directory else "rope"
            return self.runs[name][0], {}, 10

        for patch in (
            mock.patch.object(length_study, "load_params", side_effect=load_params),
            mock.patch.object(length_study, "load_corpus"),
            mock.patch.object(
                length_study,
                "length_eval_set",
                side_effect=lambda corpus, lengths, **_: LengthEvalSet(
                    {n: [] for n in lengths}, 0, 0, 1, 0
                ),
            ),
            mock.patch.object(length_study.evaluation, "score_lengths", side_effect=score),
        ):
            patch.start()
            self.addCleanup(patch.stop)

    def test_models_per_length_cached_scores_and_tables_past_the_table(self):
        workdir, runs, seen = tiny.workdir(), self.runs, self.seen
        kwargs = dict(lengths=(128, 512), max_tokens=100)
        scores = length_study.evaluate_runs(_EVALUATIONS, runs, workdir, **kwargs)
        self.assertLen(seen, 5)  # 2 seeds x 2 evaluations of rope, 1 of bert
        self.assertEqual(seen[0], [(128, None), (512, None)])
        # At 128, PI is the identity: the plain model's score is reused, not recomputed.
        ((length, pi),) = seen[2]
        self.assertEqual((length, pi["factor"]), (512, 4.0))
        self.assertEqual(scores["rope + PI"][0][128], scores["rope"][0][128])
        self.assertEqual(list(scores["rope + PI"][0]), [128, 512])
        self.assertEqual(seen[4], [(128, None)])  # BERT's table ends at 256
        self.assertEqual(list(scores["bert"][0]), [128])
        again = length_study.evaluate_runs(_EVALUATIONS, runs, workdir, **kwargs)
        self.assertLen(seen, 5)  # read back from the cache
        self.assertEqual(again, scores)
        length_study.evaluate_runs(_EVALUATIONS, runs, workdir, lengths=(128,), max_tokens=100)
        self.assertLen(seen, 8)  # another evaluation set: scored again, PI's 128 reused
        with self.assertRaisesRegex(ValueError, "reads run 'gone'"):
            length_study.evaluate_runs({"x": {"run": "gone"}}, runs, workdir, **kwargs)

    def test_a_fresh_workdir_takes_the_scores_back_from_the_raw_folder(self):
        first, raw = tiny.workdir(), tiny.workdir()
        kwargs = dict(lengths=(128, 512), max_tokens=100)
        scores = length_study.evaluate_runs(_EVALUATIONS, self.runs, first, raw_dir=raw, **kwargs)
        self.assertLen(self.seen, 5)
        fresh = tiny.workdir()  # a machine that kept nothing but the raw folder
        self.assertEqual(
            length_study.runs_to_score(_EVALUATIONS, self.runs, (fresh, None), **kwargs),
            {"rope", "bert"},
        )
        self.assertEqual(
            length_study.runs_to_score(_EVALUATIONS, self.runs, (fresh, raw), **kwargs), set()
        )
        again = length_study.evaluate_runs(_EVALUATIONS, self.runs, fresh, raw_dir=raw, **kwargs)
        self.assertEqual((again, len(self.seen)), (scores, 5))
        self.assertTrue(
            os.path.exists(
                length_study._cache_path(run_dirs.run_dir(fresh, "rope", 1), "rope + PI")
            )
        )
        # A score missing from the raw folder (the sitting ended before it): only its run's
        # checkpoints are needed, and only it is scored.
        os.remove(length_study._cache_path(run_dirs.run_dir(raw, "rope", 1), "rope + PI"))
        fresh = tiny.workdir()
        self.assertEqual(
            length_study.runs_to_score(_EVALUATIONS, self.runs, (fresh, raw), **kwargs), {"rope"}
        )
        again = length_study.evaluate_runs(_EVALUATIONS, self.runs, fresh, raw_dir=raw, **kwargs)
        self.assertEqual((again, len(self.seen)), (scores, 6))
        self.assertEqual([n for n, _ in self.seen[-1]], [128, 512])  # rope + PI's seed 1
        self.assertEqual(
            length_study.runs_to_score(_EVALUATIONS, self.runs, (None, raw), **kwargs), set()
        )


if __name__ == "__main__":
    absltest.main()
