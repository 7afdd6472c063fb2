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
        self.assertEqual(record, {"steps": 2, "metrics": 2, "identical": True, "largest": {}})
        self.assertEqual(reproduction.summary(record),
                         "bit-identical (2 logged steps, 2 metrics)")  # fmt: skip

    def test_a_last_bit_is_a_difference(self):
        rerun = _records(loss=(2.0, 1.5 + 2**-52))
        record = reproduction.compare_records(_records(), rerun)
        self.assertFalse(record["identical"])
        self.assertEqual(record["largest"], {"train/loss": 2**-52})
        self.assertEqual(reproduction.summary(record), "not bit-identical (2 logged steps, 2 "
                         "metrics; 1 differ), by at most 2.2e-16 (in train/loss)")  # fmt: skip

    def test_other_steps_or_metrics_are_an_error(self):
        with self.assertRaisesRegex(ValueError, "logged steps"):
            reproduction.compare_records(_records(), _records()[:1])
        other = _records()
        del other[1]["valid/loss_128"]
        with self.assertRaisesRegex(ValueError, "step 20: the rerun logged other metrics"):
            reproduction.compare_records(_records(), other)


if __name__ == "__main__":
    absltest.main()
