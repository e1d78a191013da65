"""Sentence (pair) classification: task processors, features, TFRecord cache, model head, metrics.

`run_classifier.py` is a thin CLI over this module. The pieces keep the original run_classifier's
names (`InputExample`, `InputFeatures`, `DataProcessor`, `convert_single_example`, ...) so its users
find their way.

Data files are read in the layouts GLUE and XNLI ship them in, by task_files.py's readers. A row
that cannot be used (wrong number of columns, empty or unknown label, unparsable score) raises
`task_files.BadInputError` naming the file and line, or, when the processor was built with
`skip_bad_rows=True`, is skipped and counted in `processor.skipped_rows` (`task_files.BadRows`).
A row of the test file is never skipped: test_results.tsv has one line per test row, in order,
so an empty text is predicted like any other and a bad test row is always an error.
"""

import collections
import dataclasses
import hashlib
import json
import math
import os
from typing import Callable, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import atomic_files
import checkpoints
import distribution
import errors
import export
import feature_cache
import fine_tuning
import in_graph_tokenization
import modeling
import progress_log
import task_files
import tfrecord_files
import tokenization
import training_loop
import windowing

# The name of the file in output_dir that fixes the label order of a run (see `GenericProcessor`).
LABEL_LIST_FILE = "label_list.txt"


@dataclasses.dataclass
class InputExample:
  """A single training/test example: one text (or a pair) and its label (None when unlabeled)."""
  guid: str
  text_a: str
  text_b: Optional[str] = None
  label: Optional[str] = None


@dataclasses.dataclass
class InputFeatures:
  """The model inputs of one example."""
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  label_id: float | list[int]  # A class index, the score (regression), or 0/1 per label.
  is_real_example: bool = True
  example_index: Optional[int] = None  # The example a window belongs to (with --doc_stride).


class DataProcessor:
  """Base class of the task processors: reads the train/dev/test splits of one task.

  Subclasses set `labels` (class names; empty for regression) and `layouts` (split name ->
  `SplitLayout`), or override `_layout`. `is_regression` tasks predict one float (STS-B).
  `extra_metrics` names what `compute_metrics` reports besides accuracy ("f1", "matthews_corrcoef").
  A multi-label task (`label_delimiter` set) has any number of labels per example, written in one
  cell separated by the delimiter (an empty cell: none).
  """
  labels: Sequence[str] = ()
  extra_metrics: tuple[str, ...] = ()
  is_regression: bool = False
  label_delimiter: Optional[str] = None
  is_pair: bool = True
  layouts: dict[str, task_files.SplitLayout] = {}

  def __init__(self, skip_bad_rows: bool = False):
    self.bad_rows = task_files.BadRows(skip_bad_rows)

  @property
  def skipped_rows(self) -> collections.Counter:
    """Bad rows skipped per file (only grows with skip_bad_rows)."""
    return self.bad_rows.skipped

  def get_train_examples(self, data_dir: str) -> list[InputExample]:
    """Returns the examples of the training split."""
    return self._read_split(data_dir, "train")

  def get_dev_examples(self, data_dir: str) -> list[InputExample]:
    """Returns the examples of the dev (evaluation) split."""
    return self._read_split(data_dir, "dev")

  def get_test_examples(self, data_dir: str) -> list[InputExample]:
    """Returns the examples of the test (prediction) split; labels may be placeholders."""
    return self._read_split(data_dir, "test")

  def get_labels(self) -> list[str]:
    """Returns the class names in the order of the model's outputs (empty for regression)."""
    return list(self.labels)

  def load_or_create_label_list(self, data_dir: Optional[str], output_dir: str) -> list[str]:
    """Returns the class names, making them known first where a task has to learn them.

    A fixed task knows them already (nothing is read or written); the generic task learns them from
    the training file or reads them from output_dir (see `GenericProcessor`).
    """
    del data_dir, output_dir  # The labels of a fixed task are part of its definition.
    return self.get_labels()

  def describe_labels(self) -> str:
    """The outputs the task expects and where their names come from, for error messages."""
    if self.is_regression:
      return "1 output (a score)"
    return "%d labels (%s)" % (len(self.get_labels()), ", ".join(self.get_labels()))

  def _unknown_label(self, name: str) -> task_files.BadInputError:
    return task_files.BadInputError("unknown label %r; expected one of %s" %
                                    (name, self.describe_labels()))

  @property
  def is_multi_label(self) -> bool:
    """Whether an example has a set of labels (one sigmoid output each) instead of one class."""
    return self.label_delimiter is not None

  def label_names(self, label: str) -> list[str]:
    """The labels of one label cell: itself, or for multi-label its non-empty parts."""
    if not self.is_multi_label:
      return [label]
    return [part.strip() for part in label.split(self.label_delimiter) if part.strip()]

  @property
  def num_outputs(self) -> int:
    """Number of model outputs: one per class, or one score for regression."""
    return 1 if self.is_regression else len(self.get_labels())

  def _layout(self, data_dir: str, split: str) -> task_files.SplitLayout:
    del data_dir  # Fixed layouts do not depend on the directory's content.
    return self.layouts[split]

  def _read_split(self, data_dir: str, split: str,
                  check_labels: bool = True) -> list[InputExample]:
    """The split's examples; `check_labels=False` takes any label (to learn the class names)."""
    task_files.check_data_dir(data_dir)
    layout = self._layout(data_dir, split)
    path = os.path.join(data_dir, layout.file_name)
    if not os.path.isfile(path):
      raise task_files.BadInputError("%s: no such file (the %s split of task %s)" %
                                     (path, split, type(self).__name__))
    examples = []
    self.bad_rows.start_file(path, predicted=split == "test")
    for line_number, row in task_files.read_rows(path, layout.file_format, layout.has_header,
                                      layout.jsonl_keys):
      try:
        example = self._create_example(layout, row, "%s-%d" % (split, len(examples)),
                                       check_labels)
      except task_files.BadInputError as e:
        self.bad_rows.reject(path, line_number, str(e))
        continue
      if example is not None:
        examples.append(example)
    return self.bad_rows.finish_file(path, examples, "%s split" % split)

  def _create_example(self, layout: task_files.SplitLayout, row: task_files.Row, guid: str,
                      check_labels: bool = True) -> Optional[InputExample]:
    """The example of one row; None when `keep_if` leaves it out; BadInputError if unusable."""
    row.check_columns(layout)
    if layout.keep_if is not None and row.get(layout.keep_if[0]) != layout.keep_if[1]:
      return None
    text_a = row.get(layout.text_a)
    text_b = None if layout.text_b is None else row.get(layout.text_b)
    return InputExample(guid, text_a, text_b, self._label_of(layout, row, check_labels))

  def _label_of(self, layout: task_files.SplitLayout, row: task_files.Row,
                check_labels: bool = True) -> str:
    if layout.label is None:
      return "0" if self.is_regression else self.get_labels()[0]
    label = row.get(layout.label).strip()
    label = dict(layout.label_aliases).get(label, label)
    if not label and not self.is_multi_label:  # A multi-label cell may list no label.
      raise task_files.BadInputError("empty label: every training and evaluation row needs one")
    if self.is_regression:
      try:
        score = float(label)
      except ValueError:
        score = math.nan
      if not math.isfinite(score):
        raise task_files.BadInputError("score %r is not a number" % label)
    elif check_labels:
      for name in self.label_names(label):
        if name not in self.get_labels():
          raise self._unknown_label(name)
    return label




def _glue_layouts(text_a: int, text_b: Optional[int], label: int, test_text_a: int,
                  test_text_b: Optional[int]) -> dict[str, task_files.SplitLayout]:
  """Layouts of a GLUE task whose train.tsv and dev.tsv share columns and test.tsv has no label."""
  return {
      "train": task_files.SplitLayout("train.tsv", text_a, text_b, label),
      "dev": task_files.SplitLayout("dev.tsv", text_a, text_b, label),
      "test": task_files.SplitLayout("test.tsv", test_text_a, test_text_b),
  }


class XnliProcessor(DataProcessor):
  """XNLI: trains on the machine-translated MultiNLI of one language, evaluates on XNLI in it.

  data_dir holds `multinli/multinli.train.<language>.tsv`, `xnli.dev.tsv` and `xnli.test.tsv` as
  released (XNLI-MT-1.0 and XNLI-1.0 unpacked into one directory).
  """
  labels = ("contradiction", "entailment", "neutral")

  def __init__(self, language: str = "zh", skip_bad_rows: bool = False):
    super().__init__(skip_bad_rows)
    evaluation = dict(text_a=6, text_b=7, label=1, keep_if=(0, language))
    self.layouts = {
        "train": task_files.SplitLayout("multinli/multinli.train.%s.tsv" % language, 0, 1, 2,
                                        label_aliases=(("contradictory", "contradiction"),)),
        "dev": task_files.SplitLayout("xnli.dev.tsv", **evaluation),
        "test": task_files.SplitLayout("xnli.test.tsv", **evaluation),
    }


class MnliProcessor(DataProcessor):
  """MultiNLI (GLUE), matched dev and test sets, as the original."""
  labels = ("contradiction", "entailment", "neutral")
  layouts = {
      "train": task_files.SplitLayout("train.tsv", 8, 9, -1),
      "dev": task_files.SplitLayout("dev_matched.tsv", 8, 9, -1),
      "test": task_files.SplitLayout("test_matched.tsv", 8, 9),
  }


class MrpcProcessor(DataProcessor):
  """Microsoft Research Paraphrase Corpus (GLUE)."""
  labels = ("0", "1")
  extra_metrics = ("f1",)
  layouts = _glue_layouts(3, 4, 0, 3, 4)


class ColaProcessor(DataProcessor):
  """Corpus of Linguistic Acceptability (GLUE): train/dev have no header and 4 columns."""
  labels = ("0", "1")
  is_pair = False
  extra_metrics = ("matthews_corrcoef",)
  layouts = {
      "train": task_files.SplitLayout("train.tsv", 3, label=1, has_header=False, num_columns=4),
      "dev": task_files.SplitLayout("dev.tsv", 3, label=1, has_header=False, num_columns=4),
      "test": task_files.SplitLayout("test.tsv", 1),
  }


class Sst2Processor(DataProcessor):
  """Stanford Sentiment Treebank, binary (GLUE)."""
  labels = ("0", "1")
  is_pair = False
  layouts = _glue_layouts(0, None, 1, 1, None)


class QnliProcessor(DataProcessor):
  """Question NLI (GLUE)."""
  labels = ("entailment", "not_entailment")
  layouts = _glue_layouts(1, 2, 3, 1, 2)


class QqpProcessor(DataProcessor):
  """Quora Question Pairs (GLUE)."""
  labels = ("0", "1")
  extra_metrics = ("f1",)
  layouts = _glue_layouts(3, 4, 5, 1, 2)


class RteProcessor(DataProcessor):
  """Recognizing Textual Entailment (GLUE)."""
  labels = ("entailment", "not_entailment")
  layouts = _glue_layouts(1, 2, 3, 1, 2)


class WnliProcessor(DataProcessor):
  """Winograd NLI (GLUE)."""
  labels = ("0", "1")
  layouts = _glue_layouts(1, 2, 3, 1, 2)


class StsbProcessor(DataProcessor):
  """Semantic Textual Similarity Benchmark (GLUE): regression on a 0-5 score."""
  is_regression = True
  layouts = _glue_layouts(7, 8, 9, 7, 8)


class GenericProcessor(DataProcessor):
  """The user's own data (`--task_name=generic`): `train`, `dev` and `test` files (.tsv, .csv or
  .jsonl) in data_dir.

  Columns are named by header (or JSON key), or by 0-based index in files without header (the
  `--text_a_column`, `--text_b_column`, `--label_column`, `--has_header` flags). Test files need no
  label column. The class names are not fixed: they are the distinct labels of the training file,
  sorted. `load_or_create_label_list` must be called before anything needs them (`get_labels`
  raises until then): it learns them and saves them as output_dir/label_list.txt, or reads that
  file, so that later predictions and exports (which may run without the training file) use the
  same order. A label list that does not fit (a label of the data not in it, a checkpoint of
  output_dir with another number of outputs) is an error naming it: output_dir belongs to other
  labels, and a new one is needed.
  With `label_delimiter` the task is multi-label: a label cell lists labels separated by it, and
  the label list is every label used.
  """

  def __init__(self, text_a_column: str = "text_a", text_b_column: Optional[str] = None,
               label_column: str = "label", has_header: bool = True, skip_bad_rows: bool = False,
               label_delimiter: Optional[str] = None):
    super().__init__(skip_bad_rows)
    if label_delimiter == "":
      raise errors.FlagError("--label_delimiter must not be empty")
    self.label_delimiter = label_delimiter
    self.columns = {"text_a_column": text_a_column, "text_b_column": text_b_column or None,
                    "label_column": label_column}
    self.has_header = has_header
    self.is_pair = bool(text_b_column)
    self.labels = ()
    self.label_list_path: Optional[str] = None  # Where the labels were read from or saved to.

  def get_labels(self) -> list[str]:
    if not self.labels:
      raise ValueError("the generic task's labels are unknown: call load_or_create_label_list")
    return list(self.labels)

  def load_or_create_label_list(self, data_dir: Optional[str], output_dir: str) -> list[str]:
    """Reads output_dir's label list, or makes it from the training file and saves it there."""
    path = os.path.join(output_dir, LABEL_LIST_FILE)
    if os.path.exists(path):
      self.labels = read_label_list(path)
      self.label_list_path = path
      return self.get_labels()
    self.labels = ()
    labels = sorted(set(name
                        for example in self._read_split(data_dir, "train", check_labels=False)
                        for name in self.label_names(example.label)))
    if not labels:
      raise task_files.BadInputError("%s: no labeled rows in the training file" % data_dir)
    os.makedirs(output_dir, exist_ok=True)
    if distribution.is_chief():
      task_files.write_label_list(path, labels)
    self.labels = tuple(labels)
    self.label_list_path = path
    return self.get_labels()

  def describe_labels(self) -> str:
    if self.label_list_path is None:
      return super().describe_labels()
    return "%s from %s" % (super().describe_labels(), self.label_list_path)

  def _unknown_label(self, name: str) -> task_files.BadInputError:
    error = super()._unknown_label(name)
    if self.label_list_path is None:
      return error
    return task_files.BadInputError("%s, which every run in its output_dir keeps: if the data's "
                                    "labels changed, use a new --output_dir" % error)

  def _layout(self, data_dir: str, split: str) -> task_files.SplitLayout:
    path, file_format = self._file_of(data_dir, split)
    wanted = [flag for flag, column in self.columns.items()
              if column is not None and not (flag == "label_column" and split == "test")]
    if file_format == "jsonl":
      index = {flag: i for i, flag in enumerate(wanted)}
      keys = tuple(self.columns[flag] for flag in wanted)
      has_header = False
    else:
      header = task_files.read_header(path, file_format) if self.has_header else None
      index = {flag: self._column_index(flag, header, path) for flag in wanted}
      keys = ()
      has_header = self.has_header
    return task_files.SplitLayout(os.path.basename(path), index["text_a_column"],
                                  index.get("text_b_column"), index.get("label_column"),
                                  has_header=has_header, file_format=file_format, jsonl_keys=keys)

  def _column_index(self, flag: str, header: Optional[list[str]], path: str) -> int:
    column = self.columns[flag]
    if header is not None and column in header:
      return header.index(column)
    if column.isdigit():
      return int(column)
    raise task_files.BadInputError("%s: no column %r (--%s); %s" % (
        path, column, flag, "the header has %s" % header if header is not None
        else "without header (--has_header=false) columns are 0-based indices"))

  def _file_of(self, data_dir: str, split: str) -> tuple[str, str]:
    """Returns (path, format) of the split's file, which must be unique."""
    task_files.check_data_dir(data_dir)
    found = [(os.path.join(data_dir, split + "." + fmt), fmt) for fmt in ("tsv", "csv", "jsonl")
             if os.path.isfile(os.path.join(data_dir, split + "." + fmt))]
    if len(found) != 1:
      raise task_files.BadInputError(
          "%s: expected exactly one of %s.tsv, %s.csv, %s.jsonl, found %s" % (
              data_dir, split, split, split, [os.path.basename(p) for p, _ in found] or "none"))
    return found[0]


def read_label_list(path: str) -> tuple[str, ...]:
  """The labels of a label_list.txt (`task_files.read_label_list`)."""
  return task_files.read_label_list(path)


PROCESSORS = {
    "xnli": XnliProcessor,
    "mnli": MnliProcessor,
    "mrpc": MrpcProcessor,
    "cola": ColaProcessor,
    "sst-2": Sst2Processor,
    "qnli": QnliProcessor,
    "qqp": QqpProcessor,
    "rte": RteProcessor,
    "wnli": WnliProcessor,
    "sts-b": StsbProcessor,
    "generic": GenericProcessor,
}


def get_processor(task_name: str, skip_bad_rows: bool = False, language: str = "zh",
                  text_a_column: str = "text_a", text_b_column: Optional[str] = None,
                  label_column: str = "label", has_header: bool = True,
                  label_delimiter: Optional[str] = None) -> DataProcessor:
  """Returns the processor of a task (case-insensitive; "sst2" and "stsb" are accepted too).

  `skip_bad_rows` applies to every task, `language` only to "xnli", the column options
  (run_classifier's flags of the same names) and `label_delimiter` (multi-label) only to
  "generic"; other tasks ignore them, so a script can pass its flags whatever the task.
  """
  name = task_name.lower()
  name = {"sst2": "sst-2", "stsb": "sts-b"}.get(name, name)
  if name not in PROCESSORS:
    raise errors.FlagError("--task_name=%s: unknown task (known: %s)" %
                           (task_name, ", ".join(PROCESSORS)))
  if name == "generic":
    return GenericProcessor(text_a_column, text_b_column, label_column, has_header, skip_bad_rows,
                            label_delimiter)
  if name == "xnli":
    return XnliProcessor(language, skip_bad_rows)
  return PROCESSORS[name](skip_bad_rows)


# --------------------------------------------------------------------------------------------------
# Metrics (NumPy, on the whole evaluation set).


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Fraction of predictions equal to the labels."""
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1_score(labels: np.ndarray, predictions: np.ndarray, positive: int = 1) -> float:
  """F1 of the positive class (MRPC, QQP): harmonic mean of precision and recall, or 0."""
  labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
  true_positives = np.sum(labels & predictions)
  denominator = np.sum(labels) + np.sum(predictions)
  return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_corrcoef(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Matthews correlation of binary labels (CoLA); 0 when a marginal is constant."""
  labels, predictions = np.asarray(labels) == 1, np.asarray(predictions) == 1
  tp = float(np.sum(labels & predictions))
  tn = float(np.sum(~labels & ~predictions))
  fp = float(np.sum(~labels & predictions))
  fn = float(np.sum(labels & ~predictions))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson_correlation(x: np.ndarray, y: np.ndarray) -> float:
  """Pearson's r; 0 when either side is constant."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator else 0.0


def _average_ranks(values: np.ndarray) -> np.ndarray:
  """1-based ranks; tied values share the mean of their ranks."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="stable")
  ranks = np.empty(len(values))
  ranks[order] = np.arange(1, len(values) + 1)
  unique, inverse = np.unique(values, return_inverse=True)
  sums = np.bincount(inverse, weights=ranks, minlength=len(unique))
  counts = np.bincount(inverse, minlength=len(unique))
  return (sums / counts)[inverse]


def spearman_correlation(x: np.ndarray, y: np.ndarray) -> float:
  """Spearman's rho: Pearson's r of the (tie-averaged) ranks."""
  return pearson_correlation(_average_ranks(x), _average_ranks(y))


def multi_label_metrics(label_ids: np.ndarray, predicted: np.ndarray,
                        labels: Sequence[str]) -> dict[str, float]:
  """Multi-label metrics of 0/1 matrices [examples, labels]: micro and macro F1 (macro: the mean
  of the per-label F1), micro precision and recall, subset accuracy (every label right), and per
  label precision, recall and F1 (`eval_<label>_precision`, ...). An undefined ratio is 0."""
  gold = np.asarray(label_ids).astype(bool)
  predicted = np.asarray(predicted).astype(bool)
  tp = np.sum(gold & predicted, axis=0).astype(np.float64)
  fp = np.sum(~gold & predicted, axis=0).astype(np.float64)
  fn = np.sum(gold & ~predicted, axis=0).astype(np.float64)
  ratio = lambda a, b: np.divide(a, b, out=np.zeros_like(a), where=b > 0)
  precision, recall, f1 = ratio(tp, tp + fp), ratio(tp, tp + fn), ratio(2 * tp, 2 * tp + fp + fn)
  micro = lambda a, b: float(a.sum() / b.sum()) if b.sum() else 0.0
  results = {
      "eval_micro_f1": micro(2 * tp, 2 * tp + fp + fn),
      "eval_micro_precision": micro(tp, tp + fp),
      "eval_micro_recall": micro(tp, tp + fn),
      "eval_macro_f1": float(np.mean(f1)),
      "eval_subset_accuracy": float(np.mean(np.all(gold == predicted, axis=1))),
  }
  for index, label in enumerate(labels):
    results["eval_%s_precision" % label] = float(precision[index])
    results["eval_%s_recall" % label] = float(recall[index])
    results["eval_%s_f1" % label] = float(f1[index])
  return results


def compute_metrics(processor: DataProcessor, label_ids: np.ndarray,
                    logits: np.ndarray, multi_label_threshold: float = 0.5) -> dict[str, float]:
  """Returns the task's metrics ("eval_accuracy", "eval_f1", ...) for real examples' outputs.

  Classification: accuracy, plus F1 of label "1" for MRPC/QQP and Matthews correlation for CoLA.
  Regression (STS-B): Pearson and Spearman correlation of the predicted and gold scores.
  Multi-label: `multi_label_metrics` of the labels whose sigmoid is above the threshold.
  """
  if processor.is_multi_label:
    probabilities = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    return multi_label_metrics(label_ids, probabilities > multi_label_threshold,
                               processor.get_labels())
  if processor.is_regression:
    scores = np.asarray(logits).reshape(-1)
    return {"eval_pearson": pearson_correlation(scores, label_ids),
            "eval_spearman": spearman_correlation(scores, label_ids)}
  predictions = np.argmax(logits, axis=-1)
  label_ids = np.asarray(label_ids).astype(np.int64)
  results = {"eval_accuracy": accuracy(label_ids, predictions)}
  if "f1" in processor.extra_metrics:
    positive = processor.get_labels().index("1")
    results["eval_f1"] = f1_score(label_ids, predictions, positive=positive)
  if "matthews_corrcoef" in processor.extra_metrics:
    results["eval_matthews_corrcoef"] = matthews_corrcoef(label_ids, predictions)
  return results



# --------------------------------------------------------------------------------------------------
# Features and the TFRecord cache.


def check_max_seq_length(max_seq_length: int, is_pair: bool) -> None:
  """Raises ValueError unless --max_seq_length leaves room for at least one token of each text.

  `[CLS] a [SEP]` needs 3 positions, `[CLS] a [SEP] b [SEP]` 5; below that every example would be
  truncated to its special tokens and the model would learn nothing.
  """
  minimum = 5 if is_pair else 3
  if max_seq_length < minimum:
    raise errors.FlagError("--max_seq_length=%d is too short for a %s task: at least %d, for %s"
                           % (max_seq_length, "sentence-pair" if is_pair else "single-sentence",
                              minimum, "[CLS] a [SEP] b [SEP]" if is_pair else "[CLS] a [SEP]"))


def convert_single_example(ex_index: int, example, label_list: Sequence[str], max_seq_length: int,
                           tokenizer, is_regression: bool = False,
                           label_delimiter: Optional[str] = None) -> InputFeatures:
  """Tokenizes one example into `[CLS] a [SEP] (b [SEP])` features, truncating longest-first.

  Empty texts are fine (they contribute no tokens). Batches are padded for devices by
  `training_loop.evaluate`/`training_loop.predict`, so no padding examples are written.
  With `label_delimiter` (multi-label) the label is 0/1 per entry of `label_list`.
  """
  return convert_example_windows(ex_index, example, label_list, max_seq_length, tokenizer,
                                 is_regression, label_delimiter)[0]


def convert_example_windows(ex_index: int, example, label_list: Sequence[str],
                            max_seq_length: int, tokenizer, is_regression: bool = False,
                            label_delimiter: Optional[str] = None,
                            doc_stride: Optional[int] = None) -> list[InputFeatures]:
  """The features of one example: one, truncated, or with `doc_stride` one per window of
  `window_inputs`, each with the example's label and `example_index=ex_index`."""
  if doc_stride is None:
    windows = [tokenizer.encode(example.text_a, example.text_b, max_seq_length)]
  else:
    windows = window_inputs(tokenizer, example.text_a, example.text_b, max_seq_length, doc_stride)
  if is_regression:
    label_id = float(example.label)
  elif label_delimiter is not None:
    names = set(part.strip() for part in example.label.split(label_delimiter))
    label_id = [int(label in names) for label in label_list]
  else:
    label_id = label_list.index(example.label)
  if ex_index < 3:
    input_ids, input_mask, _ = windows[0]
    logging.info("*** Example %s ***\ntokens: %s\ninput_ids: %s\nlabel: %s (id = %s)%s",
                 example.guid,
                 " ".join(tokenizer.convert_ids_to_tokens(input_ids[:sum(input_mask)])),
                 " ".join(map(str, input_ids)), example.label, label_id,
                 "" if doc_stride is None else "\nwindows: %d" % len(windows))
  example_index = None if doc_stride is None else ex_index
  return [InputFeatures(*window, label_id, example_index=example_index) for window in windows]


def window_inputs(tokenizer, text_a: str, text_b: Optional[str], max_seq_length: int,
                  doc_stride: int) -> list[tuple[list[int], list[int], list[int]]]:
  """`tokenizer.encode` for a text longer than one input: one (input_ids, input_mask,
  segment_ids) per window over text_a's tokens (`windowing.doc_spans_for`, a window starting
  every `doc_stride` tokens).

  text_b (for pairs) is in every window, cut as `truncate_seq_pair` cuts the pair, and text_a's
  windows take the rest of the room. So the first window is exactly what the original's
  truncation gives, and a pair that fits is one window equal to it.
  """
  if doc_stride <= 0:
    raise errors.FlagError("--doc_stride must be positive, got %d" % doc_stride)
  ids_a = tokenizer.tokenize_to_ids(text_a)
  ids_b = None if text_b is None else tokenizer.tokenize_to_ids(text_b)
  budget = max_seq_length - 2
  if ids_b is not None:
    budget -= 1
    ids_b = list(ids_b)
    tokenization.truncate_seq_pair(list(ids_a), ids_b, budget)
  window_length = budget - len(ids_b or ())
  spans = (windowing.doc_spans_for(len(ids_a), window_length, doc_stride) or
           [windowing.DocSpan(0, 0)])
  cls_id = tokenizer.special_token_id(tokenization.CLS_TOKEN)
  sep_id = tokenizer.special_token_id(tokenization.SEP_TOKEN)
  return [tokenization.build_inputs(list(ids_a[span.start:span.start + span.length]), ids_b,
                                    max_seq_length, cls_id, sep_id) for span in spans]


def features_to_tf_example(features: InputFeatures, is_regression: bool) -> tf.train.Example:
  """The original's record: input_ids, input_mask, segment_ids, label_ids, is_real_example
  (label_ids holds one 0/1 per label for multi-label; a window also has `example_index`)."""
  if is_regression:
    label = tfrecord_files.float_feature([features.label_id])
  elif isinstance(features.label_id, list):
    label = tfrecord_files.int64_feature(features.label_id)
  else:
    label = tfrecord_files.int64_feature([int(features.label_id)])
  feature = {
      "input_ids": tfrecord_files.int64_feature(features.input_ids),
      "input_mask": tfrecord_files.int64_feature(features.input_mask),
      "segment_ids": tfrecord_files.int64_feature(features.segment_ids),
      "label_ids": label,
      "is_real_example": tfrecord_files.int64_feature([int(features.is_real_example)]),
  }
  if features.example_index is not None:
    feature["example_index"] = tfrecord_files.int64_feature([features.example_index])
  return tf.train.Example(features=tf.train.Features(feature=feature))


def file_based_convert_examples_to_features(examples: Sequence, label_list: Sequence[str],
                                            max_seq_length: int, tokenizer, output_file: str,
                                            is_regression: bool = False,
                                            label_delimiter: Optional[str] = None,
                                            doc_stride: Optional[int] = None) -> None:
  """Tokenizes `examples` into a TFRecord file (one record per example, or per window with
  `doc_stride`), logging progress (rate and ETA)."""
  progress = progress_log.Progress("Writing %s" % output_file, len(examples), "examples")
  with tf.io.TFRecordWriter(output_file) as writer:
    for index, example in enumerate(examples):
      for features in convert_example_windows(index, example, label_list, max_seq_length,
                                              tokenizer, is_regression, label_delimiter,
                                              doc_stride):
        writer.write(features_to_tf_example(features, is_regression).SerializeToString())
      progress.update(index + 1)
  progress.finish()


def feature_settings(examples: Sequence, label_list: Sequence[str], max_seq_length: int,
                     tokenizer, is_regression: bool, label_delimiter: Optional[str] = None,
                     doc_stride: Optional[int] = None) -> dict:
  """Everything the content of a features file depends on, to detect a stale cache.

  The examples and the vocab enter as digests, so a changed data file, column flag, vocab or casing
  invalidates the cache as surely as a changed max_seq_length.
  """
  examples_digest = hashlib.sha256()
  for example in examples:
    fields = (example.text_a, example.text_b, example.label)
    examples_digest.update(json.dumps(fields).encode("utf-8"))
  settings = dict(feature_cache.tokenizer_settings(tokenizer), **{
      "max_seq_length": max_seq_length,
      "label_list": list(label_list),
      "is_regression": is_regression,
      "num_examples": len(examples),
      "examples_sha256": examples_digest.hexdigest(),
  })
  # Only when set, so that the caches of runs without these options stay valid.
  for name, value in (("label_delimiter", label_delimiter), ("doc_stride", doc_stride)):
    if value is not None:
      settings[name] = value
  return settings


def cached_features_file(examples: Sequence, label_list: Sequence[str], max_seq_length: int,
                         tokenizer, output_file: str, is_regression: bool = False,
                         label_delimiter: Optional[str] = None,
                         doc_stride: Optional[int] = None) -> bool:
  """Writes the examples' TFRecord file unless `output_file` already holds exactly these features.

  `feature_cache`'s rule, with `feature_settings` (examples and vocab by content); the note is
  `<output_file>.json`. Returns True when the cache was reused.
  """

  def write(path: str) -> dict:
    file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer, path,
                                            is_regression, label_delimiter, doc_stride)
    return {"num_examples": len(examples)}

  settings = feature_settings(examples, label_list, max_seq_length, tokenizer, is_regression,
                              label_delimiter, doc_stride)
  return feature_cache.reuse_or_write(output_file, settings, write)[1]


def features_dataset(input_file: str, seq_length: int, is_regression: bool = False,
                     num_multi_labels: int = 0, windowed: bool = False) -> tf.data.Dataset:
  """The unbatched feature dicts of a TFRecord file, in file order (int32 ids).

  `num_multi_labels`: label_ids is that many 0/1 values (multi-label); `windowed`: the records are
  windows with their `example_index`.
  """
  name_to_features = dict(
      tfrecord_files.id_features_spec(seq_length),
      label_ids=tf.io.FixedLenFeature([num_multi_labels] if num_multi_labels else [],
                                      tf.float32 if is_regression else tf.int64),
      is_real_example=tf.io.FixedLenFeature([], tf.int64))
  if windowed:
    name_to_features["example_index"] = tf.io.FixedLenFeature([], tf.int64)

  @tf.autograph.experimental.do_not_convert
  def decode(record):
    example = tf.io.parse_single_example(record, name_to_features)
    return {name: tf.cast(t, tf.int32) if t.dtype == tf.int64 else t for name, t in example.items()}

  return tf.data.TFRecordDataset(input_file).map(decode, num_parallel_calls=tf.data.AUTOTUNE)


# --------------------------------------------------------------------------------------------------
# Model, loss, predictions.


class BertClassifier(modeling.BertTaskModel):
  """BERT with the original's classification head: dropout + dense on the pooled output.

  Its checkpoints hold `bert/...`, `output_weights` and `output_bias` exactly as the original's.
  Called on a feature dict, it returns float32 logits [batch, num_outputs].
  """

  def __init__(self, config: modeling.BertConfig, num_outputs: int,
               name: str = "bert_classifier", **kwargs):
    # The original hard-codes keep_prob=0.9 here, whatever the config's dropout.
    super().__init__(config, num_outputs, "pooled_output", 0.1, name=name, **kwargs)


def per_example_loss(logits: tf.Tensor, label_ids: tf.Tensor, is_regression: bool,
                     is_multi_label: bool = False) -> tf.Tensor:
  """Softmax cross-entropy per example, squared error of the single output for regression, or
  for multi-label the mean over labels of each label's sigmoid binary cross-entropy."""
  if is_regression:
    return tf.square(logits[:, 0] - tf.cast(label_ids, tf.float32))
  if is_multi_label:
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(label_ids, tf.float32), logits=logits), axis=-1)
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  one_hot = tf.one_hot(label_ids, depth=tf.shape(logits)[-1], dtype=tf.float32)
  return -tf.reduce_sum(one_hot * log_probs, axis=-1)


def class_weights_from_flag(value: Optional[str], labels: Sequence[str],
                            train_label_ids: Optional[Sequence[int]] = None
                            ) -> Optional[np.ndarray]:
  """The per-class loss weights `--class_weights` asks for (float32 [num_classes]), or None.

  "w1,w2,...": one positive number per label, in label-list order. "auto": the inverse frequency
  of each class among the training labels, scaled so that the mean weight over the training
  examples is 1: w_c = N / (K * n_c) for the K classes that occur (a class absent from training
  never weighs a training loss; it gets 1). "auto" needs `train_label_ids`; before they are known
  (None) it returns None.
  """
  if not value:
    return None
  if value == "auto":
    if train_label_ids is None:
      return None
    counts = np.bincount(np.asarray(train_label_ids, np.int64), minlength=len(labels))
    present = counts > 0
    weights = np.ones(len(labels))
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return weights.astype(np.float32)
  try:
    weights = np.array([float(w) for w in value.split(",")])
  except ValueError:
    weights = np.array([])
  if len(weights) != len(labels) or not np.all(np.isfinite(weights) & (weights > 0)):
    raise errors.FlagError("--class_weights=%s: expected 'auto' or %d positive numbers separated "
                           "by commas, one per label (%s)" % (value, len(labels),
                                                               ", ".join(labels)))
  return weights.astype(np.float32)


WINDOW_AGGREGATIONS = ("mean", "max", "first")


def aggregate_windows(window_values: np.ndarray, example_index: np.ndarray,
                      method: str) -> np.ndarray:
  """One row per example from the rows of its windows (`--window_aggregation`): their mean,
  element-wise max, or the first window's row. The windows of an example are consecutive and
  examples come in order (`example_index` non-decreasing, every example has one)."""
  window_values = np.asarray(window_values)
  example_index = np.asarray(example_index)
  starts = np.flatnonzero(np.r_[True, example_index[1:] != example_index[:-1]])
  if method == "first":
    return window_values[starts]
  if method == "max":
    return np.maximum.reduceat(window_values, starts, axis=0)
  if method == "mean":
    counts = np.diff(np.r_[starts, len(example_index)]).astype(window_values.dtype)
    sums = np.add.reduceat(window_values, starts, axis=0)
    return sums / counts.reshape([-1] + [1] * (window_values.ndim - 1))
  raise errors.FlagError("--window_aggregation=%s: expected one of %s" %
                         (method, ", ".join(WINDOW_AGGREGATIONS)))


def aggregate_windows_in_graph(window_values: tf.Tensor, windows: tf.RaggedTensor,
                               method: str) -> tf.Tensor:
  """`aggregate_windows` in TF ops, `windows` ragged [examples, (windows)] (any values)."""
  row_ids = windows.value_rowids()
  if method == "first":
    return tf.gather(window_values, windows.row_starts())
  if method == "max":
    return tf.math.segment_max(window_values, row_ids)
  return tf.math.segment_mean(window_values, row_ids)


def _ragged_slices(ragged: tf.RaggedTensor, rows: tf.Tensor, starts: tf.Tensor,
                   lengths: tf.Tensor) -> tf.RaggedTensor:
  """Row k of the result is `ragged[rows[k]][starts[k]:starts[k] + lengths[k]]`."""
  begin = tf.gather(ragged.row_starts(), rows) + tf.cast(starts, tf.int64)
  return tf.gather(ragged.flat_values,
                   tf.ragged.range(begin, begin + tf.cast(lengths, tf.int64)))


def window_inputs_in_graph(encoder: "in_graph_tokenization.BertInputEncoder", doc_stride: int,
                           text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None
                           ) -> tuple[dict, tf.RaggedTensor]:
  """`window_inputs` for a batch of strings in TF ops: the windows' features [W, T] and the
  windows' starts, ragged [B, (windows)] (row i holds example i's windows, in order)."""
  ids_a = encoder.tokenize(text_a)
  length_a = ids_a.row_lengths()
  budget = encoder.max_seq_length - 2
  ids_b = None
  if text_b is not None:
    budget -= 1
    ids_b = encoder.tokenize(text_b)
    _, length_b = in_graph_tokenization.truncated_lengths(length_a, ids_b.row_lengths(), budget)
    window_length = budget - length_b
  else:
    window_length = tf.fill(tf.shape(length_a), tf.constant(budget, tf.int64))
  starts = windowing.window_starts(length_a, window_length, doc_stride)
  rows = starts.value_rowids()
  lengths = tf.minimum(tf.gather(window_length, rows),
                       tf.gather(length_a, rows) - starts.flat_values)
  windows_a = _ragged_slices(ids_a, rows, starts.flat_values, lengths)
  windows_b = None
  if ids_b is not None:
    windows_b = _ragged_slices(ids_b, rows, tf.zeros_like(rows), tf.gather(length_b, rows))
  return encoder.pack(windows_a, windows_b), starts


def write_test_results(path: str, probabilities: np.ndarray) -> None:
  """Writes test_results.tsv as the original: a tab-separated line of probabilities per example.
  Only the chief writes."""
  if not distribution.is_chief():
    return
  atomic_files.write_text(path, "".join("\t".join(repr(float(p)) for p in row) + "\n"
                                   for row in probabilities))
  logging.info("Wrote %d predictions to %s", len(probabilities), path)


@dataclasses.dataclass
class ClassifierTask(fine_tuning.Task):
  """Sentence (pair) classification, multi-label classification or regression on a processor's
  data (run_classifier).

  Options beyond the original's: `doc_stride` cuts a text longer than max_seq_length into windows
  (`window_inputs`); each window trains as an example with its document's label, and evaluation,
  prediction and the export aggregate the windows' logits per document (`window_aggregation`).
  A multi-label processor gets a sigmoid per label; a label is predicted when its probability is
  above `multi_label_threshold`. `class_weights` (the flag's value; `class_weights_from_flag`)
  weighs each single-label training example's loss by its class's weight.
  """
  bert_config: modeling.BertConfig
  processor: DataProcessor
  tokenizer: tokenization.FullTokenizer
  data_dir: Optional[str]
  output_dir: str
  max_seq_length: int
  bucket_by_length: bool = True  # length_buckets for train, eval and predict
  group_by_length: bool = False  # training batches of one length bucket (length_buckets.batch)
  doc_stride: Optional[int] = None
  window_aggregation: str = "mean"
  multi_label_threshold: float = 0.5
  class_weights: Optional[str] = None

  def __post_init__(self):
    if self.doc_stride is not None and self.doc_stride <= 0:
      raise errors.FlagError("--doc_stride must be positive, got %d" % self.doc_stride)
    if self.window_aggregation not in WINDOW_AGGREGATIONS:
      raise errors.FlagError("--window_aggregation=%s: expected one of %s" %
                             (self.window_aggregation, ", ".join(WINDOW_AGGREGATIONS)))
    processor = self.processor
    if self.class_weights and (processor.is_regression or processor.is_multi_label):
      raise errors.FlagError("--class_weights is for single-label classification tasks")
    self.class_weight_values = (None if processor.is_regression else
                                class_weights_from_flag(self.class_weights,
                                                        processor.get_labels()))

  @property
  def num_multi_labels(self) -> int:
    return self.processor.num_outputs if self.processor.is_multi_label else 0

  def build_model(self) -> BertClassifier:
    """The classifier; BadInputError when output_dir's checkpoint has a head of another size."""
    self._check_checkpoint_head()
    model = BertClassifier(self.bert_config, self.processor.num_outputs)
    model.build()
    return model

  def _check_checkpoint_head(self) -> None:
    """Raises BadInputError, naming where the labels come from, when the latest checkpoint of
    output_dir (which a resume, evaluation, prediction or export restores) has another number of
    outputs than the task: restoring it would fail on a shape without saying why."""
    prefix = checkpoints.latest_checkpoint(self.output_dir)
    if prefix is None:
      return
    try:
      shape = tf.train.load_checkpoint(prefix).get_variable_to_shape_map().get("output_bias")
    except (tf.errors.OpError, ValueError):
      return  # A damaged checkpoint: the restore skips it and says so.
    if shape and shape[0] != self.processor.num_outputs:
      raise task_files.BadInputError("checkpoint %s has a head of %d outputs, but the task has %s: "
                                     "that output_dir was trained for other labels; use a new "
                                     "--output_dir" %
                                     (prefix, shape[0], self.processor.describe_labels()))

  def loss(self, model, features, training):
    """Mean (class-weighted) loss over real examples, plus accuracy when single-label."""
    processor = self.processor
    logits = model(features, training=training)
    weights = features[training_loop.REAL_EXAMPLE_KEY]
    losses = per_example_loss(logits, features["label_ids"], processor.is_regression,
                              processor.is_multi_label)
    if self.class_weight_values is not None:
      losses *= tf.gather(tf.constant(self.class_weight_values), features["label_ids"])
    loss = distribution.replica_weighted_mean(losses, weights)
    metrics = {}
    if not (processor.is_regression or processor.is_multi_label):
      correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), features["label_ids"])
      metrics["accuracy"] = distribution.replica_weighted_mean(correct, weights)
    return loss, metrics

  def _outputs_of_logits(self, logits: tf.Tensor, label_ids: tf.Tensor) -> dict:
    processor = self.processor
    if processor.is_regression:
      probabilities = logits
    elif processor.is_multi_label:
      probabilities = tf.sigmoid(logits)
    else:
      probabilities = tf.nn.softmax(logits, axis=-1)
    return {"logits": logits, "probabilities": probabilities,
            "per_example_loss": per_example_loss(logits, label_ids, processor.is_regression,
                                                 processor.is_multi_label),
            "label_ids": label_ids}

  def predict_outputs(self, model, features):
    """Logits, probabilities (the score for regression), per-example (unweighted) loss and
    labels; with windows also each window's `example_index`."""
    outputs = self._outputs_of_logits(model(features, training=False), features["label_ids"])
    if "example_index" in features:
      outputs["example_index"] = features["example_index"]
    return outputs

  def _features_file(self, split: str, examples: Sequence) -> str:
    path = os.path.join(self.output_dir, split + ".tf_record")
    cached_features_file(examples, self.processor.get_labels(), self.max_seq_length,
                         self.tokenizer, path, self.processor.is_regression,
                         self.processor.label_delimiter, self.doc_stride)
    return path

  def train_data(self) -> fine_tuning.TrainData:
    """The training features: one record per example, or per window (the schedule still counts
    examples, as run_squad's)."""
    examples = self.processor.get_train_examples(self.data_dir)
    if self.class_weights == "auto":
      labels = self.processor.get_labels()
      self.class_weight_values = class_weights_from_flag(
          "auto", labels, [labels.index(example.label) for example in examples])
      logging.info("Class weights (--class_weights=auto): %s", ", ".join(
          "%s %.4g" % item for item in zip(labels, self.class_weight_values)))
    path = self._features_file("train", examples)
    rows = features_dataset(path, self.max_seq_length, self.processor.is_regression,
                            self.num_multi_labels)
    return fine_tuning.TrainData(
        fine_tuning.training_dataset_fn(rows, feature_cache.noted_records(path),
                                        self.bucket_by_length, self.group_by_length),
        len(examples), [path],
        unit="examples (their windows not counted)" if self.doc_stride else "examples")

  def _predict_split(self, strategy, model, split: str, examples: Sequence,
                     batch_size: int) -> dict:
    """Outputs per example (windows aggregated), in input order."""
    path = self._features_file(split, examples)
    windowed = self.doc_stride is not None
    dataset = features_dataset(path, self.max_seq_length, self.processor.is_regression,
                               self.num_multi_labels, windowed)
    outputs = self.predict_dataset(strategy, model, dataset, batch_size, [path])
    if not windowed:
      return outputs
    index = outputs["example_index"]
    logits = aggregate_windows(outputs["logits"], index, self.window_aggregation)
    label_ids = aggregate_windows(outputs["label_ids"], index, "first")
    return {name: np.asarray(value) for name, value in
            self._outputs_of_logits(tf.constant(logits, tf.float32), label_ids).items()}

  def check_inputs(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """The dev and test files as evaluation and prediction read them (labels in the label set)."""
    del do_train  # The label list is known before training (load_or_create_label_list).
    if do_eval:
      self.processor.get_dev_examples(self.data_dir)
    if do_predict:
      self.processor.get_test_examples(self.data_dir)

  def evaluate(self, strategy, model, batch_size: int) -> dict:
    """Loss and the task's metrics on the dev set, as eval_results.txt holds them."""
    outputs = self._predict_split(strategy, model, "eval",
                                  self.processor.get_dev_examples(self.data_dir), batch_size)
    loss = float(np.mean(outputs["per_example_loss"]))
    results = compute_metrics(self.processor, outputs["label_ids"], outputs["logits"],
                              self.multi_label_threshold)
    results.update(eval_loss=loss, loss=loss)
    return results

  def predict(self, strategy, model, batch_size: int) -> str:
    """Writes test_results.tsv: class (or per-label) probabilities, or the score, per test
    example, in order."""
    outputs = self._predict_split(strategy, model, "predict",
                                  self.processor.get_test_examples(self.data_dir), batch_size)
    write_test_results(os.path.join(self.output_dir, "test_results.tsv"),
                       outputs["probabilities"])
    return "predicted %d examples" % len(outputs["probabilities"])

  def _head_outputs(self, logits: tf.Tensor) -> dict:
    """The export's outputs for [B, C] logits (see `export`)."""
    processor = self.processor
    if processor.is_regression:
      return {"logits": logits, "score": logits[:, 0]}
    class_names = tf.constant(processor.get_labels())
    if processor.is_multi_label:
      probabilities = tf.sigmoid(logits)
      chosen = probabilities > self.multi_label_threshold
      # Chosen labels first (in label-list order), "" after them: sort by (not chosen, index).
      order = tf.argsort(tf.cast(~chosen, tf.int32) * len(processor.get_labels()) +
                         tf.range(len(processor.get_labels())), axis=-1)
      names = tf.where(tf.gather(chosen, order, batch_dims=1), tf.gather(class_names, order), "")
      return {"logits": logits, "probabilities": probabilities, "labels": names}
    return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(class_names, tf.argmax(logits, axis=-1))}

  def serving_module(self, model, dynamic_padding: bool = True) -> export.ServingModule:
    """The export (see export.py): `serving_default` takes raw strings `text_a` (and `text_b` for
    pair tasks), tokenized in the graph exactly as FullTokenizer does; `token_ids` takes the ids.
    Both return `logits` and, for classification, `probabilities` and `label` (class names); for
    regression `score`; for multi-label `probabilities` per label and `labels` [B, num_labels]:
    the names of the labels above the threshold, first, then "". With `doc_stride` the text
    signature windows each text as do_predict does and aggregates the windows' logits
    (`token_ids` reads one window per row). With `dynamic_padding` (the default) the text
    signature pads each request only to a length bucket (`BertInputEncoder`); without it, to
    max_seq_length (fixed shapes, several times slower for short texts).
    """
    encoder = in_graph_tokenization.BertInputEncoder.for_tokenizer(
        self.tokenizer, self.max_seq_length, dynamic_padding=dynamic_padding)
    return ClassifierServing(encoder, model, self._head_outputs,
                             ("text_a", "text_b") if self.processor.is_pair else ("text_a",),
                             self.doc_stride, self.window_aggregation)


class ClassifierServing(export.EncodedTextServing):
  """The classifier's export: `head_outputs` of the model's logits. With `doc_stride` the text
  signature windows every text as do_predict does and aggregates its windows' logits."""

  def __init__(self, encoder: tf.Module, model: keras.Model,
               head_outputs: Callable[[tf.Tensor], dict], text_inputs: Sequence[str],
               doc_stride: Optional[int], window_aggregation: str):
    super().__init__(encoder, model.config,
                     lambda features: head_outputs(model(features, training=False)), text_inputs)
    self.model = model
    self.head_outputs = head_outputs
    self.doc_stride = doc_stride
    self.window_aggregation = window_aggregation

  def text_outputs(self, texts):
    if self.doc_stride is None:
      return super().text_outputs(texts)
    features, windows = window_inputs_in_graph(self.encoder, self.doc_stride,
                                               *[texts[name] for name in self.text_inputs])
    return self.head_outputs(aggregate_windows_in_graph(self.model(features, training=False),
                                                        windows, self.window_aggregation))
