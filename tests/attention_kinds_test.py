"""Tests for roformer_jax.nn.attention_kinds: the table of kinds, and what each record names."""

import inspect

from absl.testing import absltest, parameterized
from attention_cases import _qkv

from roformer_jax.nn.attention_kinds import ATTENTION_KINDS

# A value of each option that a form takes as **options (attention_core's dataclasses).
SAMPLE_OPTIONS = dict(placement="both", feature_map="elu", projection=None, eps=1e-6, chunk_size=3)


class KindsTableTest(parameterized.TestCase):
    """attention_kinds.ATTENTION_KINDS: each record names what its forms take."""

    @parameterized.parameters(*ATTENTION_KINDS)
    def test_records_name_the_keywords_their_forms_take(self, name):
        # A form declares its options as keywords, or takes them as **options (an options
        # dataclass, which raises on a name it lacks): then each other recorded name is
        # passed, at a value of SAMPLE_OPTIONS, and must be taken.
        kind = ATTENTION_KINDS[name]
        q, k, v = _qkv(0)
        for form, names, common, memory in (
            (kind.full, kind.options, {"mask", "causal", "rotation"}, ()),
            (kind.step, kind.step_options, {"mask", "rotation"}, (None,)),
        ):
            parameters = inspect.signature(form).parameters.values()
            declared = {p.name for p in parameters if p.kind is p.KEYWORD_ONLY} - common
            if not any(p.kind is p.VAR_KEYWORD for p in parameters):
                self.assertEqual(declared, names, form.__name__)
                continue
            self.assertLessEqual(declared, names, form.__name__)
            form(*memory, q, k, v, **{n: SAMPLE_OPTIONS[n] for n in names - declared})

    @parameterized.parameters(*ATTENTION_KINDS)
    def test_an_option_no_record_names_is_refused(self, name):
        kind = ATTENTION_KINDS[name]
        with self.assertRaisesRegex(TypeError, "placment"):
            kind.full(*_qkv(0), placment="both")


class ErrorsTest(parameterized.TestCase):
    def test_table_names_every_kind(self):
        self.assertEqual(set(ATTENTION_KINDS), {"softmax", "linear", "cosine"})

    def test_kinds_in_table_reject_mismatched_shapes(self):
        q, k, _ = _qkv(0)
        for kind in ATTENTION_KINDS.values():
            with self.assertRaisesRegex(ValueError, "do not agree"):
                kind.full(q, k, k[:, :-1])


if __name__ == "__main__":
    absltest.main()
