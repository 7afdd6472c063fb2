"""Tests for roformer_jax/studies/reproduction.py: a rerun's metrics against the record's."""

from absl.testing import absltest

from roformer_jax.studies import reproduction


def _records(loss=(2.0, 1.5), clock=(1.0, 2.0)):
    return [
        {"step": 10, "train/loss": loss[0], "train/tokens_per_s": 900.0, "elapsed_s": clock[0]},
        {"step": 20, "train/loss": loss[1], "valid/loss_128": 1.4, "elapsed_s": clock[1]},
    ]


class CompareRecordsTest(absltest.TestCase):
    def test_the_same_numbers_on_other_clocks_are_identical(self):
        record = reproduction.compare_records(_records(), _records(clock=(5.0, 9.0)))
        self.assertEqual(record, {"steps": 2, "metrics": 2, "identical": True, "largest": {},
                                  "final": {"valid/loss_128": [1.4, 1.4]}, "only_record": [],
                                  "only_rerun": []})  # fmt: skip
        self.assertEqual(reproduction.summary(record),
                         "bit-identical (2 logged steps, 2 metrics)")  # fmt: skip

    def test_a_last_bit_is_a_difference(self):
        rerun = _records(loss=(2.0, 1.5 + 2**-52))
        rerun[1]["valid/loss_128"] = 1.40004
        record = reproduction.compare_records(_records(), rerun)
        self.assertFalse(record["identical"])
        self.assertEqual(record["largest"]["train/loss"], 2**-52 / (1.5 + 2**-52))
        self.assertEqual(reproduction.summary(record), "not bit-identical (2 logged steps, 2 "
                         "metrics; 2 differ), the losses by at most 2.9e-05 relative (in "
                         "valid/loss_128); "
                         "final valid/loss_128 1.4000 then, 1.4000 now")  # fmt: skip

    def test_other_steps_are_an_error_and_other_metrics_are_named(self):
        with self.assertRaisesRegex(ValueError, "logged steps"):
            reproduction.compare_records(_records(), _records()[:1])
        other = _records()
        del other[1]["valid/loss_128"]
        other[0]["train/grad_norm_max"] = 1.0  # a metric the trainer logs since
        record = reproduction.compare_records(_records(), other)
        self.assertEqual((record["only_record"], record["only_rerun"], record["metrics"]),
                         (["valid/loss_128"], ["train/grad_norm_max"], 1))  # fmt: skip
        self.assertEqual(reproduction.summary(record), "bit-identical (2 logged steps, 1 "
                         "metrics); only the record logged valid/loss_128; only the rerun "
                         "logged train/grad_norm_max")  # fmt: skip


class TrainedVersionTest(absltest.TestCase):
    def _session(self, commit="abc", cpus=2):
        return {"commit": commit, "dirty": False, "start_step": 0, "started": "today",
                "machine": {"cpus": cpus, "backend": "cpu"}}  # fmt: skip

    def test_one_version_over_its_sessions_is_the_reruns_fields(self):
        resumed = {**self._session(), "start_step": 500, "started": "tomorrow"}
        version = reproduction.trained_version({"sessions": [self._session(), resumed]})
        self.assertEqual(version, {"commit": "abc", "dirty": False,
                                   "machine": {"cpus": 2, "backend": "cpu"}})  # fmt: skip

    def test_another_commit_or_machine_or_none_is_an_error(self):
        for sessions in ([self._session(), self._session(commit="def")],
                         [self._session(), self._session(cpus=8)], []):  # fmt: skip
            with self.assertRaisesRegex(ValueError, "one code version"):
                reproduction.trained_version({"sessions": sessions})
        with self.assertRaisesRegex(ValueError, "one code version"):
            reproduction.trained_version(None)


if __name__ == "__main__":
    absltest.main()
