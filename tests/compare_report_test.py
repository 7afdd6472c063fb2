"""Tests for roformer_jax/studies/compare_report.py: the footnote of a compare study."""

from absl.testing import absltest
from study_cases import _config

from roformer_jax.studies import compare_report


class CompareReportTest(absltest.TestCase):
    def test_footnote_names_data_size_machine_and_floor(self):
        machine = {"device_count": 1, "backend": "cpu", "cpus": 2, "architecture": "x86_64"}
        note = compare_report.footnote(_config(0), (0, 1, 2), machine, 6.7743)
        self.assertIn("(bytes, vocab ", note)
        self.assertIn("4 steps", note)
        self.assertIn("seeds (0, 1, 2); 1 cpu device(s), 2 cores (x86_64)", note)
        self.assertTrue(note.endswith("unigram cross-entropy of the validation tokens 6.774"))


if __name__ == "__main__":
    absltest.main()
