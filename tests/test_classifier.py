"""Tests of classifier.py: processors on real file layouts, metrics, features, cache, model head."""

import json
import math
import os
import re

import numpy as np
import pytest

import checkpoints
import choices
import classifier
import classifier_data
import task_files
import text_pairs
from conftest import shared_path

T = "\t"


def write_files(directory, files):
  """Writes {relative path: text} under directory and returns it as a string."""
  for name, text in files.items():
    path = os.path.join(directory, name)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    with open(path, "w", encoding="utf-8") as f:
      f.write(text)
  return str(directory)


def tsv(*rows):
  return "".join(T.join(row) + "\n" for row in rows)


MNLI_COLUMNS = ["index", "promptID", "pairID", "genre", "sentence1_binary_parse",
                "sentence2_binary_parse", "sentence1_parse", "sentence2_parse", "sentence1",
                "sentence2"]
MNLI_PARSES = ["(x)", "(y)", "(ROOT x)", "(ROOT y)"]
STSB_META = ["main-captions", "MSRvid", "2012test", "0001"]
XNLI_DEV_HEADER = ["language", "gold_label", "sentence1_binary_parse", "sentence2_binary_parse",
                   "sentence1_parse", "sentence2_parse", "sentence1", "sentence2", "promptID",
                   "pairID", "genre", "label1", "label2", "label3", "label4", "label5",
                   "sentence1_tokenized", "sentence2_tokenized"]


def xnli_dev_row(language, label, premise, hypothesis):
  return ([language, label, "", "", "", "", premise, hypothesis, "1", "2", "facetoface"] +
          [label] * 5 + [premise, hypothesis])


# task -> (files in the task's real layout, {split: [(text_a, text_b, label), ...]}).
SAMPLES = {
    "xnli": ({
        "multinli/multinli.train.zh.tsv": tsv(["premise", "hypo", "label"],
                                              ["他说", "他没说", "contradictory"],
                                              ["天很蓝", "天是蓝的", "entailment"]),
        "xnli.dev.tsv": tsv(XNLI_DEV_HEADER, xnli_dev_row("en", "neutral", "A man.", "A cat."),
                            xnli_dev_row("zh", "neutral", "一个人", "一只猫")),
        "xnli.test.tsv": tsv(XNLI_DEV_HEADER, xnli_dev_row("zh", "entailment", "我们", "你们")),
    }, {
        "train": [("他说", "他没说", "contradiction"), ("天很蓝", "天是蓝的", "entailment")],
        "dev": [("一个人", "一只猫", "neutral")],
        "test": [("我们", "你们", "entailment")],
    }),
    "mnli": ({
        "train.tsv": tsv(MNLI_COLUMNS + ["label1", "gold_label"],
                         ["0", "31193", "31193n", "government"] + MNLI_PARSES +
                         ["Conceptually cream skimming.", "Product and geography.", "neutral",
                          "neutral"]),
        "dev_matched.tsv": tsv(MNLI_COLUMNS + ["label1", "label2", "label3", "label4", "label5",
                                               "gold_label"],
                               ["0", "63735", "63735n", "slate"] + MNLI_PARSES +
                               ["The new rights are nice.", "Everyone loves them.", "neutral",
                                "entailment", "neutral", "neutral", "neutral", "neutral"]),
        "test_matched.tsv": tsv(MNLI_COLUMNS, ["0", "31", "31e", "fiction"] + MNLI_PARSES +
                                ["Hats.", "No hats."]),
    }, {
        "train": [("Conceptually cream skimming.", "Product and geography.", "neutral")],
        "dev": [("The new rights are nice.", "Everyone loves them.", "neutral")],
        "test": [("Hats.", "No hats.", "contradiction")],
    }),
    "mrpc": ({
        "train.tsv": "\ufeff" + tsv(["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                                    ["1", "702876", "702977", 'He said "yes".', "He agreed."]),
        "dev.tsv": tsv(["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                       ["0", "1", "2", "Shares rose.", "Shares fell."]),
        "test.tsv": tsv(["index", "#1 ID", "#2 ID", "#1 String", "#2 String"],
                        ["0", "3", "4", "It rains.", "It is raining."]),
    }, {
        "train": [('He said "yes".', "He agreed.", "1")],
        "dev": [("Shares rose.", "Shares fell.", "0")],
        "test": [("It rains.", "It is raining.", "0")],
    }),
    "cola": ({
        "train.tsv": tsv(["gj04", "1", "", "Our friends won't buy this analysis."],
                         ["gj04", "0", "*", "They drank the pub."]),
        "dev.tsv": tsv(["bc01", "1", "", "The sailors rode the breeze clear of the rocks."]),
        "test.tsv": tsv(["index", "sentence"], ["0", "Bill whistled past the house."]),
    }, {
        "train": [("Our friends won't buy this analysis.", None, "1"),
                  ("They drank the pub.", None, "0")],
        "dev": [("The sailors rode the breeze clear of the rocks.", None, "1")],
        "test": [("Bill whistled past the house.", None, "0")],
    }),
    "sst-2": ({
        "train.tsv": tsv(["sentence", "label"], ["hide new secretions ", "0"]),
        "dev.tsv": tsv(["sentence", "label"], ["it 's a charming journey . ", "1"]),
        "test.tsv": tsv(["index", "sentence"], ["0", "uneasy mishmash of styles ."]),
    }, {
        "train": [("hide new secretions ", None, "0")],
        "dev": [("it 's a charming journey . ", None, "1")],
        "test": [("uneasy mishmash of styles .", None, "0")],
    }),
    "qnli": ({
        "train.tsv": tsv(["index", "question", "sentence", "label"],
                         ["0", "When?", "In 1999.", "entailment"]),
        "dev.tsv": tsv(["index", "question", "sentence", "label"],
                       ["0", "Who?", "Nobody knows.", "not_entailment"]),
        "test.tsv": tsv(["index", "question", "sentence"], ["0", "Where?", "Here."]),
    }, {
        "train": [("When?", "In 1999.", "entailment")],
        "dev": [("Who?", "Nobody knows.", "not_entailment")],
        "test": [("Where?", "Here.", "entailment")],
    }),
    "qqp": ({
        "train.tsv": tsv(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                         ["133273", "213221", "213222", "How is life?", "How's life?", "1"]),
        "dev.tsv": tsv(["id", "qid1", "qid2", "question1", "question2", "is_duplicate"],
                       ["1", "2", "3", "Why?", "Why not?", "0"]),
        "test.tsv": tsv(["id", "question1", "question2"], ["0", "Is it?", "Is it not?"]),
    }, {
        "train": [("How is life?", "How's life?", "1")],
        "dev": [("Why?", "Why not?", "0")],
        "test": [("Is it?", "Is it not?", "0")],
    }),
    "rte": ({
        "train.tsv": tsv(["index", "sentence1", "sentence2", "label"],
                         ["0", "No weapons found.", "Weapons found.", "not_entailment"]),
        "dev.tsv": tsv(["index", "sentence1", "sentence2", "label"],
                       ["0", "Dana won.", "Dana played.", "entailment"]),
        "test.tsv": tsv(["index", "sentence1", "sentence2"], ["0", "A.", "B."]),
    }, {
        "train": [("No weapons found.", "Weapons found.", "not_entailment")],
        "dev": [("Dana won.", "Dana played.", "entailment")],
        "test": [("A.", "B.", "entailment")],
    }),
    "wnli": ({
        "train.tsv": tsv(["index", "sentence1", "sentence2", "label"],
                         ["0", "I stuck a pin.", "The pin had a hole.", "1"]),
        "dev.tsv": tsv(["index", "sentence1", "sentence2", "label"], ["0", "X.", "Y.", "0"]),
        "test.tsv": tsv(["index", "sentence1", "sentence2"], ["0", "P.", "Q."]),
    }, {
        "train": [("I stuck a pin.", "The pin had a hole.", "1")],
        "dev": [("X.", "Y.", "0")],
        "test": [("P.", "Q.", "0")],
    }),
    "sts-b": ({
        "train.tsv": tsv(["index", "genre", "filename", "year", "old_index", "source1", "source2",
                          "sentence1", "sentence2", "score"],
                         ["0"] + STSB_META +
                         ["none", "none", "A plane.", "An air plane.", "5.000"]),
        "dev.tsv": tsv(["index", "genre", "filename", "year", "old_index", "source1", "source2",
                        "sentence1", "sentence2", "score"],
                       ["0"] + STSB_META + ["none", "none", "A man.", "A dog.", "0.500"]),
        "test.tsv": tsv(["index", "genre", "filename", "year", "old_index", "source1", "source2",
                         "sentence1", "sentence2"],
                        ["0"] + STSB_META + ["none", "none", "A girl.", "A boy."]),
    }, {
        "train": [("A plane.", "An air plane.", "5.000")],
        "dev": [("A man.", "A dog.", "0.500")],
        "test": [("A girl.", "A boy.", "0")],
    }),
}


def triples(examples):
  return [(e.text_a, e.text_b, e.label) for e in examples]


@pytest.mark.parametrize("task", sorted(SAMPLES))
def test_processor_reads_its_real_layout(task, tmp_path):
  files, expected = SAMPLES[task]
  data_dir = write_files(tmp_path, files)
  processor = classifier_data.get_processor(task)
  assert triples(processor.get_train_examples(data_dir)) == expected["train"]
  assert triples(processor.get_dev_examples(data_dir)) == expected["dev"]
  assert triples(processor.get_test_examples(data_dir)) == expected["test"]
  assert processor.is_pair == (expected["train"][0][1] is not None)
  if task == "sts-b":
    assert processor.is_regression and processor.num_outputs == 1
  else:
    assert processor.num_outputs == len(processor.get_labels()) >= 2


@pytest.mark.parametrize("task,directory,rows,first,labels", [
    ("sst-2", "SST-2", 67349, ("hide new secretions from the parental units ", None, "0"),
     {"0", "1"}),
    ("mrpc", "MRPC", 3668, ("Amrozi accused his brother, whom he called \"the witness\", of "
                            "deliberately distorting his evidence.",
                            "Referring to him as only \"the witness\", Amrozi accused his brother "
                            "of deliberately distorting his evidence.", "1"), {"0", "1"}),
    ("cola", "CoLA", 8551, ("Our friends won't buy this analysis, let alone the next one we "
                            "propose.", None, "1"), {"0", "1"}),
])
def test_processor_reads_the_shared_glue_training_file(task, directory, rows, first, labels):
  data_dir = os.path.dirname(shared_path("glue", directory, "train.tsv"))
  examples = classifier_data.get_processor(task).get_train_examples(data_dir)
  assert len(examples) == rows
  assert triples(examples[:1]) == [first]
  assert {e.label for e in examples} == labels


def test_task_name_offers_every_processor():
  # run_classifier defines --task_name from `choices` (which needs no TensorFlow).
  assert tuple(classifier_data.PROCESSORS) == choices.CLASSIFIER_TASKS


def test_wrong_column_count_names_file_and_line(tmp_path):
  data_dir = write_files(tmp_path, {"train.tsv": tsv(["sentence", "label"], ["good", "1"],
                                                     ["bad", "0", "extra"], ["fine", "0"])})
  with pytest.raises(task_files.BadInputError, match=r"train\.tsv:3: 3 columns, expected 2"):
    classifier_data.get_processor("sst-2").get_train_examples(data_dir)


def test_unknown_label_names_file_and_line(tmp_path):
  data_dir = write_files(tmp_path, {"dev.tsv": tsv(["x", "0", "", "a"], ["x", "2", "", "b"])})
  with pytest.raises(task_files.BadInputError, match=r"dev\.tsv:2: unknown label '2'"):
    classifier_data.get_processor("cola").get_dev_examples(data_dir)


def test_bad_score_names_file_and_line(tmp_path):
  row = ["0"] + STSB_META + ["none", "none", "A.", "B."]
  for bad in ("high", "nan"):
    data_dir = write_files(tmp_path, {"train.tsv": tsv(["h"] * 10, row + ["4.2"], row + [bad])})
    with pytest.raises(task_files.BadInputError, match=r"train\.tsv:3: score '%s' is not a" % bad):
      classifier_data.get_processor("sts-b").get_train_examples(data_dir)


def test_bad_rows_are_skipped_and_counted_on_request(tmp_path):
  data_dir = write_files(tmp_path, {"train.tsv": tsv(["sentence", "label"], ["a", "1"], ["b"],
                                                     ["c", "7"], ["d", "0"])})
  processor = classifier_data.get_processor("sst-2", skip_bad_rows=True)
  assert triples(processor.get_train_examples(data_dir)) == [("a", None, "1"), ("d", None, "0")]
  assert processor.skipped_rows[os.path.join(data_dir, "train.tsv")] == 2


def test_missing_or_empty_data_dir_is_a_clear_error(tmp_path):
  processor = classifier_data.get_processor("mrpc")
  with pytest.raises(task_files.BadInputError, match="no such directory"):
    processor.get_train_examples(str(tmp_path / "absent"))
  with pytest.raises(task_files.BadInputError, match="the directory is empty"):
    processor.get_train_examples(str(tmp_path))
  with pytest.raises(task_files.BadInputError, match="`data_dir` is required"):
    processor.get_train_examples("")
  write_files(tmp_path, {"dev.tsv": ""})
  with pytest.raises(task_files.BadInputError, match=r"train\.tsv: no such file"):
    processor.get_train_examples(str(tmp_path))


def test_unknown_task_is_a_clear_error():
  with pytest.raises(ValueError, match="`task_name`=glue9: unknown task"):
    classifier_data.get_processor("glue9")


def test_generic_tsv_with_named_columns_saves_the_label_list(tmp_path):
  data_dir = write_files(tmp_path / "data", {
      "train.tsv": tsv(["id", "review", "stars"], ["1", "great", "pos"], ["2", "awful", "neg"],
                       ["3", "meh", "mid"]),
      "test.tsv": tsv(["id", "review"], ["9", "nice"]),
  })
  output_dir = str(tmp_path / "out")
  processor = classifier_data.get_processor("generic", text_a_column="review", label_column="stars")
  assert processor.load_or_create_label_list(data_dir, output_dir) == ["mid", "neg", "pos"]
  assert not os.path.exists(output_dir)  # Written when training starts:
  processor.save_label_list()
  with open(os.path.join(output_dir, classifier_data.LABEL_LIST_FILE)) as f:
    assert f.read() == "mid\nneg\npos\n"
  assert triples(processor.get_test_examples(data_dir)) == [("nice", None, "mid")]
  # A later run (e.g. predict or export only) reads the saved order, even without the training file.
  os.remove(os.path.join(data_dir, "train.tsv"))
  again = classifier_data.get_processor("generic", text_a_column="review", label_column="stars")
  assert again.load_or_create_label_list(data_dir, output_dir) == ["mid", "neg", "pos"]


def test_generic_csv_quoting_and_pairs(tmp_path):
  data_dir = write_files(tmp_path, {"dev.csv": 'q,a,y\n"Hi, you","multi\nline",yes\nx,"",no\n'})
  processor = classifier_data.get_processor("generic", text_a_column="q", text_b_column="a",
                                            label_column="y")
  processor.labels = ("no", "yes")
  assert triples(processor.get_dev_examples(data_dir)) == [("Hi, you", "multi\nline", "yes"),
                                                           ("x", "", "no")]
  assert processor.is_pair


def test_generic_without_header_uses_column_indices(tmp_path):
  data_dir = write_files(tmp_path, {"train.tsv": tsv(["b", "text one"], ["a", "text two"])})
  processor = classifier_data.get_processor("generic", text_a_column="1", label_column="0",
                                            has_header=False)
  assert processor.load_or_create_label_list(data_dir, str(tmp_path / "out")) == ["a", "b"]
  assert triples(processor.get_train_examples(data_dir)) == [("text one", None, "b"),
                                                             ("text two", None, "a")]


def test_generic_jsonl_and_its_errors(tmp_path):
  lines = [{"text": "good", "label": 1}, {"text": None, "label": 0}, "not json", {"label": 1}]
  data_dir = write_files(tmp_path, {"train.jsonl": "".join(
      (json.dumps(x) if isinstance(x, dict) else x) + "\n" for x in lines)})
  processor = classifier_data.get_processor("generic", text_a_column="text", skip_bad_rows=True)
  assert processor.load_or_create_label_list(data_dir, str(tmp_path / "out")) == ["0", "1"]
  assert triples(processor.get_train_examples(data_dir)) == [("good", None, "1"), ("", None, "0")]
  assert processor.skipped_rows[os.path.join(data_dir, "train.jsonl")] == 2
  strict = classifier_data.get_processor("generic", text_a_column="text")
  strict.labels = ("0", "1")
  with pytest.raises(task_files.BadInputError, match=r"train\.jsonl:3: invalid JSON"):
    strict.get_train_examples(data_dir)


def test_generic_column_and_file_errors(tmp_path):
  data_dir = write_files(tmp_path, {"train.csv": "a,b\nx,y\n", "dev.csv": "a\n", "dev.tsv": "a\n"})
  processor = classifier_data.get_processor("generic", text_a_column="text")
  with pytest.raises(task_files.BadInputError,
                     match=r"train\.csv: no column 'text' \(`text_a_column`\)"):
    processor.load_or_create_label_list(data_dir, str(tmp_path / "out"))
  with pytest.raises(task_files.BadInputError, match="exactly one of dev.tsv, dev.csv, dev.jsonl"):
    processor.get_dev_examples(data_dir)


def test_empty_label_is_a_bad_row_never_a_class(tmp_path):
  data_dir = write_files(tmp_path / "data", {"train.tsv": tsv(["t", "y"], ["a", "z"], ["b", " "],
                                                             ["c", "x"])})
  output_dir = tmp_path / "out"
  strict = classifier_data.get_processor("generic", text_a_column="t", label_column="y")
  with pytest.raises(task_files.BadInputError,
                     match=r"train\.tsv:3: empty label: .*`skip_bad_rows`"):
    strict.load_or_create_label_list(data_dir, str(output_dir))
  assert not output_dir.exists()  # No label list was written.
  skipping = classifier_data.get_processor("generic", text_a_column="t", label_column="y",
                                           skip_bad_rows=True)
  assert skipping.load_or_create_label_list(data_dir, str(output_dir)) == ["x", "z"]
  skipping.save_label_list()
  assert (output_dir / classifier_data.LABEL_LIST_FILE).read_text() == "x\nz\n"
  assert triples(skipping.get_train_examples(data_dir)) == [("a", None, "z"), ("c", None, "x")]
  assert skipping.skipped_rows[os.path.join(data_dir, "train.tsv")] == 1
  # A task with fixed labels says the same, not "unknown label ''".
  data_dir = write_files(tmp_path / "sst", {"train.tsv": tsv(["sentence", "label"], ["a", "1"],
                                                             ["b", ""])})
  with pytest.raises(task_files.BadInputError, match=r"train\.tsv:3: empty label"):
    classifier_data.get_processor("sst-2").get_train_examples(data_dir)


def test_a_label_list_that_does_not_fit_is_named_with_what_to_do(tmp_path):
  data_dir = write_files(tmp_path / "data", {
      "train.tsv": tsv(["t", "y"], ["a", "x"]), "dev.tsv": tsv(["t", "y"], ["a", "x"], ["b", "w"])})
  output_dir = tmp_path / "out"
  label_list = output_dir / classifier_data.LABEL_LIST_FILE
  write_files(output_dir, {classifier_data.LABEL_LIST_FILE: "x\nz\n"})
  processor = classifier_data.get_processor("generic", text_a_column="t", label_column="y")
  assert processor.load_or_create_label_list(data_dir, str(output_dir)) == ["x", "z"]
  with pytest.raises(task_files.BadInputError) as error:
    processor.get_dev_examples(data_dir)
  assert str(error.value).startswith("%s:3: unknown label 'w'" % os.path.join(data_dir, "dev.tsv"))
  assert str(label_list) in str(error.value) and "new `output_dir`" in str(error.value)
  # Written by a version that took an empty label cell for a class: its first line is empty.
  label_list.write_text("\nx\nz\n")
  with pytest.raises(task_files.BadInputError,
                     match=r"%s:1: empty label.*new `output_dir`" % re.escape(str(label_list))):
    processor.load_or_create_label_list(data_dir, str(output_dir))


def test_head_of_another_size_in_output_dir_names_the_label_list(tmp_path):
  import modeling  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  output_dir = tmp_path / "out"
  old = classifier.BertClassifier(config, 3)
  old.build()
  os.makedirs(output_dir)
  checkpoints.save_training_checkpoint(checkpoints.checkpoint_variables(old), str(output_dir), 5,
                                       keep_checkpoint_max=1)
  write_files(output_dir, {classifier_data.LABEL_LIST_FILE: "x\nz\n"})
  processor = classifier_data.get_processor("generic")
  processor.load_or_create_label_list(None, str(output_dir))
  (tmp_path / "vocab.txt").write_text("\n".join(VOCAB) + "\n")
  task = classifier.ClassifierTask(config, processor,
                                   tokenization.FullTokenizer(str(tmp_path / "vocab.txt")), None,
                                   str(output_dir), 16)
  with pytest.raises(task_files.BadInputError) as error:
    task.build_model()
  message = str(error.value)
  assert str(output_dir / classifier_data.LABEL_LIST_FILE) in message
  assert "model.ckpt-5" in message and "3 outputs" in message and "2 labels" in message
  assert "new `output_dir`" in message


def test_blank_line_of_a_one_column_file_is_an_empty_text(tmp_path):
  # Header "t": one column; the blank lines (line 3, and the last) are texts too.
  data_dir = write_files(tmp_path / "with_header", {"test.tsv": "t\na\n\nc\n\n"})
  processor = classifier_data.get_processor("generic", text_a_column="t")
  processor.labels = ("x",)
  assert [e.text_a for e in processor.get_test_examples(data_dir)] == ["a", "", "c", ""]
  data_dir = write_files(tmp_path / "without_header", {"test.csv": "a\n\nc\n"})
  processor = classifier_data.get_processor("generic", text_a_column="0", has_header=False)
  processor.labels = ("x",)
  assert [e.text_a for e in processor.get_test_examples(data_dir)] == ["a", "", "c"]


def test_blank_line_of_a_wider_file_is_a_bad_row(tmp_path):
  data_dir = write_files(tmp_path, {"train.tsv": tsv(["sentence", "label"], ["a", "1"]) + "\n" +
                                    tsv(["b", "0"])})
  with pytest.raises(task_files.BadInputError,
                     match=r"train\.tsv:3: an empty line: 1 columns, expected 2"):
    classifier_data.get_processor("sst-2").get_train_examples(data_dir)
  processor = classifier_data.get_processor("sst-2", skip_bad_rows=True)
  assert triples(processor.get_train_examples(data_dir)) == [("a", None, "1"), ("b", None, "0")]
  assert processor.skipped_rows[os.path.join(data_dir, "train.tsv")] == 1


@pytest.mark.parametrize("task,test_file", [
    ("sst-2", tsv(["index", "sentence"], ["0", "a"], ["1"], ["2", "c"])),
    ("cola", tsv(["index", "sentence"], ["0", "a"]) + "\n" + tsv(["2", "c"])),
    ("generic", tsv(["text_a"], ["a"], ["b", "extra"], ["c"])),
])
def test_a_test_row_is_never_skipped(task, test_file, tmp_path):
  """test_results.tsv has one line per test row: a bad one is an error even with skip_bad_rows."""
  data_dir = write_files(tmp_path, {"test.tsv": test_file})
  processor = classifier_data.get_processor(task, skip_bad_rows=True)
  processor.labels = processor.labels or ("x",)
  with pytest.raises(task_files.BadInputError,
                     match=r"test\.tsv:3: .*never skipped, not even with `skip_bad_rows`"):
    processor.get_test_examples(data_dir)

# Metrics, against values computed by hand: labels 1 1 0 0 1 0, predictions 1 0 0 1 1 0 give
# TP=2 TN=2 FP=1 FN=1.
LABELS = np.array([1, 1, 0, 0, 1, 0])
PREDICTIONS = np.array([1, 0, 0, 1, 1, 0])


def test_classification_metrics_by_hand():
  assert classifier.accuracy(LABELS, PREDICTIONS) == pytest.approx(4 / 6)
  assert classifier.f1_score(LABELS, PREDICTIONS) == pytest.approx(2 / 3)  # P = R = 2/3.
  # (TP*TN - FP*FN) / sqrt(3 * 3 * 3 * 3) = 3 / 9.
  assert classifier.matthews_corrcoef(LABELS, PREDICTIONS) == pytest.approx(1 / 3)
  assert classifier.matthews_corrcoef(LABELS, np.zeros(6)) == 0.0
  assert classifier.f1_score(np.zeros(3), np.zeros(3)) == 0.0


def test_correlations_by_hand():
  # Deviations (-1.5, -.5, .5, 1.5) and (-3, -1, 0, 4): r = 11 / sqrt(5 * 26).
  assert classifier.pearson_correlation([1, 2, 3, 4], [2, 4, 5, 9]) == pytest.approx(
      11 / math.sqrt(130))
  # Ranks with a tie: (1, 2.5, 2.5, 4) and (1, 3, 2, 4): rho = 4.5 / sqrt(4.5 * 5).
  assert classifier.spearman_correlation([1, 2, 2, 3], [1, 3, 2, 4]) == pytest.approx(
      4.5 / math.sqrt(22.5))
  assert classifier.pearson_correlation([1, 1, 1], [1, 2, 3]) == 0.0


def test_compute_metrics_per_task():
  logits = np.eye(2)[PREDICTIONS] * 3.0 - 1.0
  mrpc = classifier.compute_metrics(classifier_data.get_processor("mrpc"), LABELS, logits)
  assert mrpc == pytest.approx({"eval_accuracy": 4 / 6, "eval_f1": 2 / 3})
  cola = classifier.compute_metrics(classifier_data.get_processor("cola"), LABELS, logits)
  assert cola == pytest.approx({"eval_accuracy": 4 / 6, "eval_matthews_corrcoef": 1 / 3})
  assert set(classifier.compute_metrics(classifier_data.get_processor("rte"), LABELS, logits)) == {
      "eval_accuracy"}
  stsb = classifier.compute_metrics(classifier_data.get_processor("sts-b"),
                                    np.array([2., 4., 5., 9.]), np.array([[1.], [2.], [3.], [4.]]))
  assert stsb == pytest.approx({"eval_pearson": 11 / math.sqrt(130), "eval_spearman": 1.0})


# Features, the TFRecord cache, the model head.

VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "dog",
         "##s", "."]


@pytest.fixture
def tokenizer(tmp_path):
  import tokenization  # pylint: disable=g-import-not-at-top
  path = tmp_path / "vocab.txt"
  path.write_text("\n".join(VOCAB) + "\n")
  return tokenization.FullTokenizer(str(path), do_lower_case=True)


def ids(*tokens):
  return [VOCAB.index(t) for t in tokens]


def test_convert_single_example_pair_truncates_longest_first(tokenizer):
  example = text_pairs.InputExample("x", "The cats sat on the mat.", "Dogs sat.", "b")
  features = text_pairs.convert_single_example(0, example, ["a", "b"], 10, tokenizer)
  # Room for 7 pieces: a has 8 (the cat ##s sat on the mat .), b has 4 (dog ##s sat .). Popping
  # from the longer leaves a 4 and b 4, then the tie pops from b: (4, 3).
  assert features.input_ids == ids("[CLS]", "the", "cat", "##s", "sat", "[SEP]", "dog", "##s",
                                   "sat", "[SEP]")
  assert features.segment_ids == [0] * 6 + [1] * 4
  assert features.input_mask == [1] * 10
  assert features.label_id == 1 and features.is_real_example


def test_convert_single_example_empty_text_and_regression(tokenizer):
  example = text_pairs.InputExample("x", "", None, "3.25")
  features = text_pairs.convert_single_example(0, example, [], 5, tokenizer, is_regression=True)
  assert features.input_ids == ids("[CLS]", "[SEP]") + [0, 0, 0]
  assert features.input_mask == [1, 1, 0, 0, 0]
  assert features.label_id == 3.25


def test_features_cache_is_reused_and_rebuilt_when_settings_change(tokenizer, tmp_path):
  examples = [text_pairs.InputExample("%d" % i, "the cat", "the mat" if i % 2 else "", "ab"[i % 2])
              for i in range(5)]
  path = str(tmp_path / "train.tf_record")
  write = lambda exs, length: text_pairs.cached_features_file(exs, ["a", "b"], length, tokenizer,
                                                               path)
  assert not write(examples, 8)
  assert write(examples, 8)
  assert not write(examples, 9)  # max_seq_length changed.
  assert not write(examples[:4] + [text_pairs.InputExample("4", "dog", None, "a")], 9)
  assert write(examples[:4] + [text_pairs.InputExample("4", "dog", None, "a")], 9)
  records = list(text_pairs.features_dataset(path, 9).as_numpy_iterator())
  assert [r["label_ids"] for r in records] == [0, 1, 0, 1, 0]
  assert records[1]["input_ids"].tolist() == ids("[CLS]", "the", "cat", "[SEP]", "the", "mat",
                                                 "[SEP]") + [0, 0]
  assert records[4]["input_ids"].tolist() == ids("[CLS]", "dog", "[SEP]") + [0] * 6
  assert all(r["is_real_example"] == 1 for r in records)
  assert sorted(os.listdir(tmp_path)) == ["train.tf_record", "train.tf_record.json", "vocab.txt"]


TINY_CONFIG = dict(vocab_size=len(VOCAB), hidden_size=16, num_hidden_layers=1,
                   num_attention_heads=2, intermediate_size=32, hidden_act="gelu",
                   hidden_dropout_prob=0.1, attention_probs_dropout_prob=0.1,
                   max_position_embeddings=16, type_vocab_size=2, initializer_range=0.02)


def test_classifier_head_has_the_original_checkpoint_names(tmp_path):
  import modeling  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  config = modeling.BertConfig.from_dict(TINY_CONFIG)
  model = classifier.BertClassifier(config, 3)
  model.build()
  prefix = checkpoints.save_checkpoint(model, str(tmp_path / "model.ckpt"))
  shapes = dict(tf.train.list_variables(prefix))
  assert shapes["output_weights"] == [3, 16]
  assert shapes["output_bias"] == [3]
  assert shapes["bert/pooler/dense/kernel"] == [16, 16]
  assert all(name.startswith("bert/") for name in shapes if not name.startswith("output_"))
  # The head is dropout + dense on the pooled output: logits = pooled W^T + b.
  features = {"input_ids": tf.constant([[2, 5, 6, 3]]), "input_mask": tf.ones([1, 4], tf.int32),
              "segment_ids": tf.zeros([1, 4], tf.int32)}
  pooled = model.bert(features)["pooled_output"].numpy()
  expected = pooled @ model.output_weights.numpy().T + model.output_bias.numpy()
  np.testing.assert_allclose(model(features).numpy(), expected, rtol=1e-5, atol=1e-6)


def test_per_example_loss_matches_numpy():
  logits = np.array([[2.0, -1.0, 0.5], [0.0, 0.0, 3.0]], np.float32)
  labels = np.array([2, 0])
  log_softmax = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  np.testing.assert_allclose(classifier.per_example_loss(logits, labels, False).numpy(),
                             -log_softmax[[0, 1], labels], rtol=1e-6)
  np.testing.assert_allclose(
      classifier.per_example_loss(np.array([[1.5], [4.0]], np.float32), np.array([1.0, 5.0]),
                                  True).numpy(), [0.25, 1.0])


def test_every_task_makes_its_labels_known_the_same_way(tmp_path):
  # run_classifier calls load_or_create_label_list whatever the task: a fixed task returns its own
  # labels and writes nothing; the generic one learns them (not before: get_labels refuses), and
  # save_label_list (when training starts) writes them.
  output_dir = tmp_path / "out"
  output_dir.mkdir()
  mrpc = classifier_data.get_processor("mrpc", text_a_column="ignored", language="ignored")
  assert mrpc.load_or_create_label_list(None, str(output_dir)) == ["0", "1"]
  assert not os.listdir(output_dir)
  generic = classifier_data.get_processor("generic", text_a_column="t", label_column="y")
  with pytest.raises(ValueError, match="labels are unknown"):
    generic.get_labels()
  data_dir = write_files(tmp_path / "data", {"train.tsv": tsv(["t", "y"], ["a", "z"], ["b", "x"])})
  assert generic.load_or_create_label_list(data_dir, str(output_dir)) == ["x", "z"]
  mrpc.save_label_list()
  generic.save_label_list()
  assert os.listdir(output_dir) == [classifier_data.LABEL_LIST_FILE]


# Long texts (--doc_stride), multi-label, class weights.


def test_window_inputs_by_hand(tokenizer):
  # 7 pieces, room for 4 per window, a window every 2 pieces: [0, 4), [2, 6), [4, 7).
  windows = text_pairs.window_inputs(tokenizer, "The cat sat on the mat.", None, 6, 2)
  assert [w[0] for w in windows] == [ids("[CLS]", "the", "cat", "sat", "on", "[SEP]"),
                                     ids("[CLS]", "sat", "on", "the", "mat", "[SEP]"),
                                     ids("[CLS]", "the", "mat", ".", "[SEP]") + [0]]
  assert windows[2][1] == [1] * 5 + [0]
  # A pair: room for 5; truncate_seq_pair cuts (7, 2) to (3, 2), so text_b keeps its 2 pieces in
  # every window and text_a gets windows of 3: [0, 3), [2, 5), [4, 7). The first window is what
  # the original's truncation gives.
  windows = text_pairs.window_inputs(tokenizer, "The cat sat on the mat.", "Dogs", 8, 2)
  assert [w[0] for w in windows] == [
      ids("[CLS]", "the", "cat", "sat", "[SEP]", "dog", "##s", "[SEP]"),
      ids("[CLS]", "sat", "on", "the", "[SEP]", "dog", "##s", "[SEP]"),
      ids("[CLS]", "the", "mat", ".", "[SEP]", "dog", "##s", "[SEP]")]
  assert all(w[2] == [0] * 5 + [1] * 3 for w in windows)
  assert tuple(windows[0]) == tokenizer.encode("The cat sat on the mat.", "Dogs", 8)
  # Short and empty texts are one window, equal to the truncating encoding.
  for text_a, text_b in (("the cat", None), ("", None), ("", "the mat"), ("cat", "the mat")):
    assert [tuple(w) for w in text_pairs.window_inputs(tokenizer, text_a, text_b, 8, 2)] == [
        tokenizer.encode(text_a, text_b, 8)]


def test_window_inputs_in_graph_equal_python(tokenizer):
  import in_graph_tokenization  # pylint: disable=g-import-not-at-top
  encoder = in_graph_tokenization.BertInputEncoder(tokenizer.vocab_file, True, max_seq_length=8)
  texts_a = ["The cat sat on the mat.", "", "cat", "the cat sat on the mat . the dogs sat"]
  texts_b = ["Dogs", "the mat", "dogs sat on the mat the cat", "the"]
  for pair in (False, True):
    features, windows = classifier.window_inputs_in_graph(
        encoder, 2, texts_a, texts_b if pair else None)
    expected = [text_pairs.window_inputs(tokenizer, a, b if pair else None, 8, 2)
                for a, b in zip(texts_a, texts_b)]
    assert windows.row_lengths().numpy().tolist() == [len(e) for e in expected]
    for i, name in enumerate(("input_ids", "input_mask", "segment_ids")):
      assert features[name].numpy().tolist() == [w[i] for e in expected for w in e], name


def test_window_aggregation_by_hand_and_in_graph():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  logits = np.array([[1.0, -2.0], [3.0, 0.0], [-1.0, 4.0], [0.5, 0.5], [2.0, 2.0], [0.0, 6.0]],
                    np.float32)
  index = np.array([0, 0, 0, 1, 2, 2])
  expected = {"mean": [[1.0, 2.0 / 3], [0.5, 0.5], [1.0, 4.0]],
              "max": [[3.0, 4.0], [0.5, 0.5], [2.0, 6.0]],
              "first": [[1.0, -2.0], [0.5, 0.5], [2.0, 2.0]]}
  windows = tf.RaggedTensor.from_value_rowids(tf.range(6), index)
  for method, values in expected.items():
    np.testing.assert_allclose(classifier.aggregate_windows(logits, index, method), values,
                               rtol=1e-6)
    np.testing.assert_allclose(
        classifier.aggregate_windows_in_graph(tf.constant(logits), windows, method).numpy(),
        values, rtol=1e-6)
  with pytest.raises(ValueError, match="`window_aggregation`=median"):
    classifier.aggregate_windows(logits, index, "median")


def test_class_weights_auto_and_explicit():
  # 6 examples of class a, 2 of b, none of c: w = 8 / (2 * n) for the 2 classes present.
  weights = classifier.class_weights_from_flag("auto", ["a", "b", "c"], [0] * 6 + [1] * 2)
  np.testing.assert_allclose(weights, [8 / 12, 2.0, 1.0], rtol=1e-6)
  np.testing.assert_allclose(classifier.class_weights_from_flag("1,2.5", ["a", "b"]), [1, 2.5])
  assert classifier.class_weights_from_flag(None, ["a", "b"]) is None
  for bad in ("1", "1,x", "1,-2", "1,2,3"):
    with pytest.raises(ValueError, match=r"`class_weights`=.*2 positive numbers .*\(a, b\)"):
      classifier.class_weights_from_flag(bad, ["a", "b"])


def test_class_weighted_loss_equals_numpy(tokenizer, tmp_path):
  import modeling  # pylint: disable=g-import-not-at-top
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  processor = classifier_data.GenericProcessor()
  processor.labels = ("a", "b", "c")
  task = classifier.ClassifierTask(modeling.BertConfig.from_dict(TINY_CONFIG), processor,
                                   tokenizer, None, str(tmp_path), 8, class_weights="0.5,2,3")
  model = task.build_model()
  features = {"input_ids": tf.constant([[2, 5, 6, 3], [2, 9, 3, 0], [2, 10, 11, 3]]),
              "input_mask": tf.constant([[1, 1, 1, 1], [1, 1, 1, 0], [1, 1, 1, 1]]),
              "segment_ids": tf.zeros([3, 4], tf.int32), "label_ids": tf.constant([1, 0, 2]),
              "is_real_example": tf.constant([1, 1, 0])}
  logits = model(features).numpy().astype(np.float64)
  cross_entropy = np.log(np.exp(logits).sum(-1)) - logits[[0, 1, 2], [1, 0, 2]]
  # The padding row (is_real_example 0) counts for nothing; the mean is over the real rows.
  expected = (2 * cross_entropy[0] + 0.5 * cross_entropy[1]) / 2
  loss, metrics = task.loss(model, features, training=False)
  np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-5)
  assert "accuracy" in metrics
  with pytest.raises(ValueError, match="`class_weights`=1,2: expected"):
    classifier.ClassifierTask(modeling.BertConfig.from_dict(TINY_CONFIG), processor, tokenizer,
                              None, str(tmp_path), 8, class_weights="1,2")


def test_multi_label_processor_features_and_loss(tmp_path, tokenizer):
  data_dir = write_files(tmp_path / "data", {
      "train.tsv": tsv(["text", "tags"], ["the cat", "pets, animals"], ["the mat", ""],
                       ["dogs", "animals,pets,loud"]),
      "dev.tsv": tsv(["text", "tags"], ["cat", "pets,zebra"])})
  processor = classifier_data.GenericProcessor("text", label_column="tags", label_delimiter=",")
  assert processor.load_or_create_label_list(data_dir, str(tmp_path / "out")) == [
      "animals", "loud", "pets"]
  examples = processor.get_train_examples(data_dir)
  features = [text_pairs.convert_single_example(i, e, processor.get_labels(), 6, tokenizer,
                                                label_delimiter=",")
              for i, e in enumerate(examples)]
  assert [f.label_id for f in features] == [[1, 0, 1], [0, 0, 0], [1, 1, 1]]
  with pytest.raises(task_files.BadInputError, match=r"dev.tsv:2: unknown label 'zebra'"):
    processor.get_dev_examples(data_dir)
  # Loss: the mean over labels of each label's binary cross-entropy.
  logits = np.array([[2.0, -1.0, 0.0]], np.float32)
  p = 1 / (1 + np.exp(-logits.astype(np.float64)))
  labels = np.array([[1, 0, 1]])
  expected = -np.mean(labels * np.log(p) + (1 - labels) * np.log(1 - p))
  np.testing.assert_allclose(
      classifier.per_example_loss(logits, labels, False, is_multi_label=True).numpy(), [expected],
      rtol=1e-6)


def test_multi_label_metrics_by_hand():
  gold = np.array([[1, 0, 1], [0, 1, 0], [1, 1, 0], [0, 0, 0]])
  predicted = np.array([[1, 0, 0], [0, 1, 1], [1, 0, 0], [0, 0, 0]])
  results = classifier.multi_label_metrics(gold, predicted, ["x", "y", "z"])
  # Per label (tp, fp, fn): x (2, 0, 0), y (1, 0, 1), z (0, 1, 1). Micro: (3, 1, 2).
  assert results["eval_x_precision"] == 1 and results["eval_x_recall"] == 1
  assert results["eval_y_precision"] == 1 and results["eval_y_recall"] == 0.5
  assert results["eval_z_precision"] == 0 and results["eval_z_recall"] == 0
  assert math.isclose(results["eval_macro_f1"], (1 + 2 / 3 + 0) / 3)
  assert math.isclose(results["eval_micro_f1"], 6 / 9)
  assert math.isclose(results["eval_micro_precision"], 3 / 4)
  assert math.isclose(results["eval_micro_recall"], 3 / 5)
  assert results["eval_subset_accuracy"] == 0.25  # Only the last row is all right.


def test_features_cache_notes_window_and_label_options(tokenizer, tmp_path):
  examples = [text_pairs.InputExample("0", "the cat sat on the mat .", None, "a,b"),
              text_pairs.InputExample("1", "dogs", None, "")]
  path = str(tmp_path / "train.tf_record")
  write = lambda **options: text_pairs.cached_features_file(examples, ["a", "b"], 6, tokenizer,
                                                            path, **options)
  assert not write(label_delimiter=",")
  assert write(label_delimiter=",")
  assert not write(label_delimiter=",", doc_stride=2)  # Windows: the records change.
  records = list(text_pairs.features_dataset(path, 6, num_multi_labels=2,
                                             windowed=True).as_numpy_iterator())
  # 7 pieces in windows of 4 every 2: 3 windows of example 0, then example 1's one.
  assert [r["example_index"] for r in records] == [0, 0, 0, 1]
  assert [r["label_ids"].tolist() for r in records] == [[1, 1]] * 3 + [[0, 0]]
  with open(path + ".json") as f:
    assert {"doc_stride": 2, "label_delimiter": ","}.items() <= json.load(f)["settings"].items()
