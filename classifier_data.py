# coding=utf-8
"""The classifier's data: the original's task processors (GLUE, XNLI) and the user's own files.

A processor reads a task's train, dev and test splits into `text_pairs.InputExample`s and knows
its labels. Data files are read in the layouts GLUE and XNLI ship them in, by task_files.py's
readers. A row that cannot be used (wrong number of columns, empty or unknown label, unparsable
score) raises `task_files.BadInputError` naming the file and line, or, when the processor was
built with `skip_bad_rows=True`, is skipped and counted in `processor.skipped_rows`
(`task_files.BadRows`). A row of the test file is never skipped: test_results.tsv has one line per
test row, in order, so an empty text is predicted like any other and a bad test row is always an
error. `--task_name=generic` reads the user's own .tsv, .csv or .jsonl files (`GenericProcessor`),
whose label list output_dir keeps (`LABEL_LIST_FILE`).
"""

import collections
import math
import os
from typing import Optional, Sequence

import choices
import distribution
import errors
import task_files
import text_pairs

# The name of the file in output_dir that fixes the label order of a run (see `GenericProcessor`).
LABEL_LIST_FILE = "label_list.txt"


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
  # Whether a file's header is the dataset's (GLUE, XNLI), so a lost one can be recognized.
  headers_are_known: bool = True

  def __init__(self, skip_bad_rows: bool = False):
    self.bad_rows = task_files.BadRows(skip_bad_rows)

  @property
  def skipped_rows(self) -> collections.Counter:
    """Bad rows skipped per file (only grows with skip_bad_rows)."""
    return self.bad_rows.skipped

  def get_train_examples(self, data_dir: str) -> list[text_pairs.InputExample]:
    """Returns the examples of the training split."""
    return self._read_split(data_dir, "train")

  def get_dev_examples(self, data_dir: str) -> list[text_pairs.InputExample]:
    """Returns the examples of the dev (evaluation) split."""
    return self._read_split(data_dir, "dev")

  def get_test_examples(self, data_dir: str) -> list[text_pairs.InputExample]:
    """Returns the examples of the test (prediction) split; labels may be placeholders."""
    return self._read_split(data_dir, "test")

  def get_labels(self) -> list[str]:
    """Returns the class names in the order of the model's outputs (empty for regression)."""
    return list(self.labels)

  def load_or_create_label_list(self, data_dir: Optional[str], output_dir: str,
                                list_directory: Optional[str] = None,
                                training_anew: bool = False) -> list[str]:
    """Returns the class names, making them known first where a task has to learn them.

    A fixed task knows them already (nothing is read or written); the generic task reads them
    from the label list in `list_directory` (default output_dir; without training, the model's
    directory: `fine_tuning.output_names_directory`) or learns them from the training file (see
    `GenericProcessor`).
    """
    del data_dir, output_dir, list_directory, training_anew  # Part of a fixed task's definition.
    return self.get_labels()

  def save_label_list(self) -> None:
    """Writes the label list `load_or_create_label_list` learned, where it has not been written
    yet: called when training starts, so that a run refused before then leaves no label list to
    hold the next run in output_dir to its labels. A fixed task has none to write."""

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
                  check_labels: bool = True) -> list[text_pairs.InputExample]:
    """The split's examples; `check_labels=False` takes any label (to learn the class names)."""
    task_files.check_data_dir(data_dir)
    layout = self._layout(data_dir, split)
    path = os.path.join(data_dir, layout.file_name)
    if not os.path.lexists(path):
      raise task_files.BadInputError("%s: no such file (the %s split of task %s)" %
                                     (path, split, type(self).__name__))
    if layout.has_header and self.headers_are_known:
      self._check_header(layout, path)
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

  def _check_header(self, layout: task_files.SplitLayout, path: str) -> None:
    """Raises BadInputError when the first line of a file with a known header is a data row
    (the header was lost, e.g. cut off with a preview tool): it would be skipped as the header,
    and test_results.tsv, one line per row without ids, would pair every result with the wrong
    row. A data row of a labeled file has a valid label there; one of GLUE's unlabeled test
    files starts with its integer index (the header with `index` or `id`)."""
    row = task_files.Row(task_files.read_header(path, layout.file_format))
    if layout.label is None:
      is_data = row.cells[0].strip().isdigit()
    else:
      try:
        is_data = self._create_example(layout, row, "header") is not None
      except task_files.BadInputError:
        is_data = False
    if is_data:
      raise task_files.BadInputError(
          "%s:1: the first line is a data row, not the header this task's files start with: "
          "restore the header line (it is skipped, as the original does)" % path)

  def _create_example(self, layout: task_files.SplitLayout, row: task_files.Row, guid: str,
                      check_labels: bool = True) -> Optional[text_pairs.InputExample]:
    """The example of one row; None when `keep_if` leaves it out; BadInputError if unusable."""
    row.check_columns(layout)
    if layout.keep_if is not None and row.get(layout.keep_if[0]) != layout.keep_if[1]:
      return None
    text_a = row.get(layout.text_a)
    text_b = None if layout.text_b is None else row.get(layout.text_b)
    return text_pairs.InputExample(guid, text_a, text_b, self._label_of(layout, row, check_labels))

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
  raises until then): it reads output_dir/label_list.txt (without training, the one beside the
  model used when output_dir has none), or learns them, and `save_label_list` writes them to
  output_dir when training starts, so that later predictions and exports (which may run without
  the training file) use the same order. A label list that does not fit (a label of the data not
  in it, a checkpoint of output_dir with another number of outputs) is an error naming it:
  output_dir belongs to other labels, and a new one is needed.
  With `label_delimiter` the task is multi-label: a label cell lists labels separated by it, and
  the label list is every label used.
  """
  headers_are_known = False  # The user's files: --has_header says whether one is there.

  def __init__(self, text_a_column: str = "text_a", text_b_column: Optional[str] = None,
               label_column: str = "label", has_header: bool = True, skip_bad_rows: bool = False,
               label_delimiter: Optional[str] = None):
    super().__init__(skip_bad_rows)
    if label_delimiter == "":
      raise errors.FlagError("`label_delimiter` must not be empty")
    self.label_delimiter = label_delimiter
    self.columns = {"text_a_column": text_a_column, "text_b_column": text_b_column or None,
                    "label_column": label_column}
    self.has_header = has_header
    self.is_pair = bool(text_b_column)
    self.labels = ()
    self.label_list_path: Optional[str] = None  # Where the labels were read from or saved to.
    self.label_list_saved = False  # Whether label_list_path holds self.labels.
    self.label_list_of_model = False  # Whether it is another directory's, beside the model used.

  def get_labels(self) -> list[str]:
    if not self.labels:
      raise ValueError("the generic task's labels are unknown: call load_or_create_label_list")
    return list(self.labels)

  def load_or_create_label_list(self, data_dir: Optional[str], output_dir: str,
                                list_directory: Optional[str] = None,
                                training_anew: bool = False) -> list[str]:
    """Reads the label list of `list_directory` (default output_dir), or learns the labels from
    the training file (`save_label_list` writes them to output_dir when training starts).

    `training_anew` (training into an output_dir that holds no training run): a list there names
    no trained model's outputs (a run that stopped before training left it, or the user wrote
    it), so it must name exactly the training file's labels, in any order: a label none of its
    rows has would become a class of the new model."""
    path = os.path.join(output_dir, LABEL_LIST_FILE)
    listed = os.path.join(list_directory or output_dir, LABEL_LIST_FILE)
    if os.path.exists(listed):
      self.labels = read_label_list(listed)
      if training_anew and listed == path:
        self._check_list_names_the_training_labels(data_dir, listed)
      self.label_list_path, self.label_list_saved = listed, True
      self.label_list_of_model = os.path.dirname(listed) != os.path.dirname(path)
      return self.get_labels()
    self.labels = tuple(self._training_labels(data_dir))
    self.label_list_path, self.label_list_saved = path, False
    return self.get_labels()

  def _training_labels(self, data_dir: Optional[str]) -> list[str]:
    """The distinct labels of the training file's rows, sorted."""
    labels = sorted(set(name
                        for example in self._read_split(data_dir, "train", check_labels=False)
                        for name in self.label_names(example.label)))
    if not labels:
      raise task_files.BadInputError("%s: no labeled rows in the training file" % data_dir)
    return labels

  def _check_list_names_the_training_labels(self, data_dir: Optional[str], listed: str) -> None:
    unused = sorted(set(self.labels) - set(self._training_labels(data_dir)))
    if unused:
      raise task_files.BadInputError(
          "%s names %s, which no row of the training file has, and output_dir holds no trained "
          "model that this list could be the labels of (a run that stopped before training left "
          "it?): remove it, or pass another --output_dir" % (listed, ", ".join(unused)))

  def save_label_list(self) -> None:
    """Writes the labels learned from the training file to output_dir's label list (the chief)."""
    if self.label_list_saved or self.label_list_path is None:
      return
    os.makedirs(os.path.dirname(self.label_list_path) or ".", exist_ok=True)
    if distribution.is_chief():
      task_files.write_label_list(self.label_list_path, self.labels)
    self.label_list_saved = True

  def describe_labels(self) -> str:
    if not self.label_list_saved:
      return super().describe_labels()
    return "%s from %s" % (super().describe_labels(), self.label_list_path)

  def _unknown_label(self, name: str) -> task_files.BadInputError:
    error = super()._unknown_label(name)
    if not self.label_list_saved:
      return error
    if self.label_list_of_model:
      return task_files.BadInputError("%s, the labels of the model used: its head has no output "
                                      "for this label" % error)
    return task_files.BadInputError("%s, which every run in its output_dir keeps: if the data's "
                                    "labels changed, use a new `output_dir`" % error)

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
    raise task_files.BadInputError("%s: no column %r (`%s`); %s" % (
        path, column, flag, "the header has %s" % header if header is not None
        else "without header (`has_header`=false) columns are 0-based indices"))

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


# The processor of each of choices.CLASSIFIER_TASKS (the names --task_name offers).
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
  name = choices.classifier_task(task_name)
  if name == "generic":
    return GenericProcessor(text_a_column, text_b_column, label_column, has_header, skip_bad_rows,
                            label_delimiter)
  if name == "xnli":
    return XnliProcessor(language, skip_bad_rows)
  return PROCESSORS[name](skip_bad_rows)
