"""Tests for roformer_jax/data/tasks.py: task files read and checked (through
training/task_kinds.py's columns of each kind), labels, truncation and each kind's rows."""

import numpy as np
import tiny_tasks
from absl.testing import absltest, parameterized

from roformer_jax.data import tasks
from roformer_jax.data.tokenizer import ByteTokenizer, WordPieceTokenizer
from roformer_jax.training import task_kinds


class ReadingTest(parameterized.TestCase):
    def test_missing_column_names_file_line_column_and_columns_present(self):
        path = tiny_tasks.jsonl(
            "missing.jsonl", [{"text": "a", "label": "x"}, {"text": "b", "lbl": "y"}]
        )
        with self.assertRaisesRegex(
            ValueError,
            r"missing.jsonl, line 2: no column 'label'.*"
            r"columns present: \['lbl', 'text'\]",
        ):
            task_kinds.read_examples(path, "classification")

    def test_missing_csv_column_names_the_row(self):
        path = tiny_tasks.write("missing.csv", "text,label\na,x\nb,\n")
        with self.assertRaisesRegex(ValueError, r"missing.csv, row 3: no column 'label'"):
            task_kinds.read_examples(path, "classification")

    def test_csv_and_jsonl_read_the_same_examples(self):
        rows = [{"text": "a cat", "text_pair": "sat", "label": "1"}, {"text": "b", "label": "0"}]
        from_jsonl = task_kinds.read_examples(
            tiny_tasks.jsonl("same.jsonl", rows), "classification"
        )
        from_csv = task_kinds.read_examples(
            tiny_tasks.write("same.csv", "text,text_pair,label\na cat,sat,1\nb,,0\n"),
            "classification",
        )
        self.assertEqual([e["text"] for e in from_jsonl], [e["text"] for e in from_csv])
        self.assertEqual(tasks.label_list(from_jsonl), tasks.label_list(from_csv))

    def test_empty_file(self):
        with self.assertRaisesRegex(ValueError, "empty.jsonl holds no examples"):
            task_kinds.read_examples(tiny_tasks.write("empty.jsonl", "\n"), "classification")

    def test_labels_sorted_and_unknown_ones_named(self):
        examples = [{"text": "t", "label": lab} for lab in ("pos", "neg", "pos", "mid")]
        labels = tasks.label_list(examples)
        self.assertEqual(labels, ("mid", "neg", "pos"))
        np.testing.assert_array_equal(tasks.label_ids(examples, labels, "f"), [2, 1, 2, 0])
        with self.assertRaisesRegex(ValueError, r"valid.jsonl has labels \['odd', 'other'\]"):
            tasks.label_ids([{"label": "odd"}, {"label": "other"}], labels, "valid.jsonl")

    def test_qa_answers_must_be_squad_form(self):
        path = tiny_tasks.jsonl("bad_qa.jsonl", [{"question": "q", "context": "c", "answers": "c"}])
        with self.assertRaisesRegex(ValueError, r"bad_qa.jsonl, line 1: answers must be"):
            task_kinds.read_examples(path, "qa")


class EncodingTest(parameterized.TestCase):
    @parameterized.parameters(
        ("head", [0, 1, 2, 3, 4]), ("tail", [5, 6, 7, 8, 9]), ("head+tail", [0, 1, 2, 8, 9])
    )
    def test_truncation(self, strategy, expected):
        self.assertEqual(tasks.truncate(list(range(10)), 5, strategy), expected)
        self.assertEqual(tasks.truncate([1, 2], 5, strategy), [1, 2])

    def test_pair_rows_have_cls_sep_types_and_head_and_tail(self):
        tok = ByteTokenizer()
        examples = [{"text": "abcdefghij", "text_pair": "xy", "label": "1"}]
        rows = tasks.encode_classification(
            examples, tok, ("0", "1"), max_length=11, truncation="head+tail"
        )
        # room 8: the pair keeps its 2 tokens, the text 6: "abc" + "hij".
        ids = rows["input_ids"][0]
        self.assertEqual(tok.decode(ids), "[CLS]abchij[SEP]xy[SEP]")
        np.testing.assert_array_equal(rows["token_type_ids"][0], [0] * 8 + [1] * 3)
        np.testing.assert_array_equal(rows["label"], [1])

    def test_qa_span_points_at_the_answer_tokens(self):
        tok = WordPieceTokenizer.from_vocab(tiny_tasks.vocab())
        context = "the cat sat on the mat and ran"
        examples = [
            {
                "question": "where sat the cat",
                "context": context,
                "answers": {"text": ["the mat"], "answer_start": [context.index("the m")]},
            }
        ]
        rows = tasks.encode_qa(examples, tok, max_length=32)
        s, e = rows["start"][0], rows["end"][0]
        self.assertEqual(tok.decode(rows["input_ids"][0, s : e + 1]), "the mat")
        # A cut context loses the answer: it points at [CLS].
        cut = tasks.encode_qa(examples, tok, max_length=11)
        self.assertEqual((cut["start"][0], cut["end"][0]), (0, 0))

    def test_tags_sit_on_each_word_s_first_token(self):
        tok = ByteTokenizer()
        examples = [{"words": ["Ab", "is", "x_y"], "tags": ["capitalised", "keyword", "id"]}]
        tags = ("capitalised", "id", "keyword")
        rows = tasks.encode_tags(examples, tok, tags, max_length=9)
        # room 7: "Ab is x_y" is 9 bytes, so x_y is cut with its tag.
        self.assertEqual(tok.decode(rows["input_ids"][0]), "[CLS]Ab is[SEP]")
        np.testing.assert_array_equal(rows["tags"][0], [-1, 0, -1, -1, 2, -1, -1, -1, -1])
        with self.assertRaisesRegex(ValueError, r"has tags \['id'\] that are not in"):
            tasks.encode_tags(examples, tok, ("capitalised", "keyword"), max_length=9)
        path = tiny_tasks.jsonl("bad_tags.jsonl", [{"words": ["a", "b"], "tags": ["x"]}])
        with self.assertRaisesRegex(ValueError, r"line 1: words and tags must be lists of equal"):
            task_kinds.read_examples(path, "token_classification")

    def test_multiple_choice_rows_per_choice(self):
        tok = ByteTokenizer()
        examples = [{"context": "abc", "choices": ["x", "yz"], "label": 1}]
        rows = tasks.encode_multiple_choice(examples, tok, max_length=8, truncation="head")
        self.assertEqual(rows["input_ids"].shape, (1, 2, 8))
        self.assertEqual(tok.decode(rows["input_ids"][0, 1]), "[CLS]abc[SEP]yz[SEP]")
        np.testing.assert_array_equal(rows["token_type_ids"][0, 1], [0] * 5 + [1] * 3)
        path = tiny_tasks.jsonl(
            "bad_choice.jsonl", [{"context": "c", "choices": ["x", "y"], "label": 2}]
        )
        with self.assertRaisesRegex(ValueError, r"line 1: label 2 is not a choice index 0..1"):
            task_kinds.read_examples(path, "multiple_choice")


if __name__ == "__main__":
    absltest.main()
