"""Reading a task's data files: rows of TSV, CSV and JSON Lines files, and what to do with bad ones.

The fine-tuning tasks that read rows (classifier.py's processors, multiple_choice.py's SWAG files)
share this: `read_rows` yields each data row of a file with its line number, as a `Row` that knows
what is wrong with it (invalid JSON, bytes that are not UTF-8); `Row.check_columns` checks it
against the `SplitLayout` of its file; `BadRows` decides what a row that cannot be used does (raise
`BadInputError` naming the file and line, or with `--skip_bad_rows` be skipped and counted). A row
of the file to predict is never skipped: its predictions have one line per row, in order.

Pure Python (no TensorFlow).
"""

import collections
import csv
import dataclasses
import json
import os
import re
from typing import Iterable, Iterator, Optional, Sequence

from absl import logging

import atomic_files
import errors
import file_patterns


class BadInputError(errors.InputError):
  """Raised for a data file, row or directory that cannot be used; the message says where."""


@dataclasses.dataclass(frozen=True)
class SplitLayout:
  """Where a split's examples are and which columns hold what.

  Attributes:
    file_name: path of the file relative to data_dir.
    text_a: column index of the first text.
    text_b: column index of the second text, None for single-sentence tasks.
    label: column index of the label, None for an unlabeled (test) split. Unlabeled examples get the
      first label as a placeholder, as in the original.
    has_header: whether the first line is a header. Every row must then have the header's number of
      columns.
    num_columns: the exact number of columns of a file without header (None: at least enough for the
      indices above).
    keep_if: optional (column, value): rows whose column differs are silently left out (XNLI's dev
      and test files hold all 15 languages).
    label_aliases: labels written differently in this file (XNLI's train file says "contradictory").
    file_format: "tsv" (tab-separated, no quoting, as GLUE), "csv" or "jsonl".
    jsonl_keys: for JSON Lines, the keys whose values make up the row's columns, in order.
  """
  file_name: str
  text_a: int
  text_b: Optional[int] = None
  label: Optional[int] = None
  has_header: bool = True
  num_columns: Optional[int] = None
  keep_if: Optional[tuple[int, str]] = None
  label_aliases: tuple[tuple[str, str], ...] = ()
  file_format: str = "tsv"
  jsonl_keys: tuple[str, ...] = ()


class Row:
  """One parsed line of a data file: its cells, and what is known to be wrong with it."""

  def __init__(self, cells: list[str], expected_width: Optional[int] = None,
               problem: Optional[str] = None):
    self.cells = cells
    self.expected_width = expected_width
    self.problem = problem

  def get(self, column: int) -> str:
    return self.cells[column]

  def check_columns(self, layout: SplitLayout) -> None:
    """Raises BadInputError unless the row parsed and has the expected number of columns."""
    if self.problem:
      raise BadInputError(self.problem)
    width = self.expected_width or layout.num_columns
    needed = 1 + max(c for c in (layout.text_a, layout.text_b, layout.label,
                                 layout.keep_if and layout.keep_if[0]) if c is not None)
    found = ("an empty line: " if self.cells == [""] else "") + "%d columns" % len(self.cells)
    if width is not None and len(self.cells) != width:
      raise BadInputError("%s, expected %d" % (found, width))
    if len(self.cells) < needed:
      raise BadInputError("%s, expected at least %d" % (found, needed))


def check_data_dir(data_dir: Optional[str]) -> None:
  """Raises BadInputError unless data_dir is an existing, non-empty directory."""
  if not data_dir:
    raise BadInputError("`data_dir` is required to read the task's files")
  if not os.path.isdir(data_dir):
    raise BadInputError("`data_dir`=%s: no such directory" % data_dir)
  if not os.listdir(data_dir):
    raise BadInputError("`data_dir`=%s: the directory is empty" % data_dir)


class BadRows:
  """What a reader does with a data row it cannot use (`--skip_bad_rows`).

  Without `skip`, `reject` raises BadInputError naming the file and line. With it, the first bad
  row of each file is logged, every one is skipped and counted per file in `skipped`, and
  `log_summary()` logs the counts at the end of the run. A reader calls `start_file` before a
  file's rows (a file read again, e.g. the dev file at each evaluation, is counted once) and
  `finish_file` after them. The rows of a file to predict are never skipped (`start_file`'s
  `predicted`): its predictions are written one line per row, in order, without an id to match.
  """

  def __init__(self, skip: bool = False):
    self.skip = skip
    self.skipped: collections.Counter[str] = collections.Counter()
    self.predicted: set[str] = set()

  def reject(self, path: str, line_number: int, reason: str) -> None:
    if path in self.predicted:
      raise BadInputError("%s:%d: %s (a row of the file to predict is never skipped, not even with "
                          "`skip_bad_rows`: the predictions have one line per row, in order; fix "
                          "the row)" % (path, line_number, reason))
    if not self.skip:
      raise BadInputError("%s:%d: %s (pass `skip_bad_rows` to skip such rows)" %
                          (path, line_number, reason))
    if not self.skipped[path]:
      logging.warning("%s:%d: %s; skipping this row and counting the others", path, line_number,
                      reason)
    self.skipped[path] += 1

  def start_file(self, path: str, predicted: bool = False) -> None:
    """Starts counting a file's skipped rows; `predicted`: it is the file to predict (the test
    file), whose bad rows are errors whatever `skip` says."""
    self.skipped[path] = 0
    if predicted:
      self.predicted.add(path)
    else:
      self.predicted.discard(path)

  def finish_file(self, path: str, examples: list, what: str) -> list:
    """Logs the file's skipped rows; returns its examples, or raises BadInputError naming the file
    (`what`: e.g. "train split") when it gave none."""
    skipped = self.skipped[path]
    if skipped:
      logging.warning("%s: skipped %d bad rows", path, skipped)
    if not examples:
      raise BadInputError("%s: no examples in the %s%s" % (
          path, what, " (%d bad rows skipped)" % skipped if skipped else ""))
    return examples

  def log_summary(self) -> None:
    """Logs how many rows were skipped in all and per file (nothing when none was)."""
    total = sum(self.skipped.values())
    if total:
      logging.info("Skipped %d bad rows (`skip_bad_rows`): %s", total, ", ".join(
          "%s %d" % (path, count) for path, count in self.skipped.items() if count))


# csv's default field limit (128 KB) is below a long document; a TSV field cannot span lines, and a
# CSV quote left open is still caught, at this size, as an error naming the line.
MAX_FIELD_CHARS = 16 * 1024 * 1024


def read_rows(path: str, file_format: str, has_header: bool,
              jsonl_keys: Sequence[str] = ()) -> Iterator[tuple[int, Row]]:
  """Yields (1-based line number, Row) for each data row of a TSV, CSV or JSONL file.

  TSV is read like the original (tab-separated, no quoting); CSV with standard quoting (a row may
  then span lines; its first line is reported). Every line after the header is a row: a blank one
  is a row of one empty cell (an empty text in a one-column file, too few columns in a wider one).
  Blank lines before the header, and in JSON Lines (where a row is an object), are no rows. A UTF-8
  byte order mark is ignored. A JSON Lines row is an object; its cells are the values of
  `jsonl_keys`, in order (a missing key or invalid JSON makes a row with a `problem`). So does a
  row with bytes that are not UTF-8. A field over `MAX_FIELD_CHARS` raises BadInputError naming
  the line.
  """
  errors.check_text_file(path, "the data file")
  with open(path, encoding="utf-8-sig", errors="surrogateescape", newline="") as f:
    if file_format == "jsonl":
      rows = _read_jsonl(f, jsonl_keys)
    elif file_format in ("tsv", "csv"):
      rows = _read_delimited(f, path, file_format, has_header)
    else:
      raise ValueError("unknown file format %r" % file_format)
    for line_number, row in rows:
      yield line_number, _check_utf8(row)


def _read_delimited(f: Iterable[str], path: str, file_format: str,
                    has_header: bool) -> Iterator[tuple[int, Row]]:
  csv.field_size_limit(max(csv.field_size_limit(), MAX_FIELD_CHARS))
  if file_format == "tsv":
    reader = csv.reader(f, delimiter="\t", quoting=csv.QUOTE_NONE)
  else:
    reader = csv.reader(f)
  width = None
  start_line = 1
  while True:
    try:
      cells = next(reader)
    except StopIteration:
      return
    except csv.Error as e:
      raise BadInputError("%s:%d: %s" % (path, start_line, e)) from e
    line_number, start_line = start_line, reader.line_num + 1
    if has_header and width is None:
      if cells and cells != [""]:
        width = len(cells)
      continue
    yield line_number, Row(cells or [""], width)


def _check_utf8(row: Row) -> Row:
  """The row, with a `problem` if a cell holds bytes that are not UTF-8 (read as surrogates)."""
  for column, cell in enumerate(row.cells):
    bad = re.search("[\udc80-\udcff]", cell)
    if bad and not row.problem:
      row.problem = "invalid UTF-8 byte 0x%02x in column %d" % (ord(bad.group()) - 0xdc00, column)
  return row


def read_header(path: str, file_format: str) -> list[str]:
  """Returns the cells of the first non-blank line of a TSV or CSV file."""
  for _, row in read_rows(path, file_format, has_header=False):
    if row.cells != [""]:
      return row.cells
  raise BadInputError("%s: the file is empty" % path)


def parse_jsonl_line(line: str) -> dict:
  """The JSON object on one line of a JSON Lines file: the one parser of the tasks' .jsonl rows
  (generic classification and tagging, multiple choice). Raises BadInputError, for the caller to
  place at its file and line."""
  try:
    record = json.loads(line)
  except json.JSONDecodeError as e:
    raise BadInputError("invalid JSON (%s)" % e) from None
  if not isinstance(record, dict):
    raise BadInputError("a JSON object is expected, got %s" % type(record).__name__)
  return record


def _read_jsonl(lines: Iterable[str], keys: Sequence[str]) -> Iterator[tuple[int, Row]]:
  for line_number, line in enumerate(lines, start=1):
    if not line.strip():
      continue
    try:
      record = parse_jsonl_line(line)
    except BadInputError as e:
      yield line_number, Row([], problem=str(e))
      continue
    missing = [k for k in keys if k not in record]
    cells = ["" if record.get(k) is None else str(record.get(k)) for k in keys]
    yield line_number, Row(cells, problem=missing and "no key %s" % ", ".join(map(repr, missing)))


def check_distinct_names(names: Sequence[str], source: str, place: str = "line",
                         first: int = 1) -> None:
  """Raises BadInputError unless every output name (label, tag) is distinct: the one check of
  label and tag lists and of Hugging Face's `id2label`. Two outputs of one name cannot be told
  apart in predictions, and a name -> id map (`label2id`) keeps only one of them. `place` and
  `first` say how a name's position is counted in `source` ("line" from 1, "id" from 0)."""
  seen = {}
  for position, name in enumerate(names, start=first):
    if not name.strip():  # A blank line of a list file is not a name.
      continue
    if name in seen:
      raise BadInputError("%s: the name %r at %s %d repeats %s %d: each output needs its own name"
                          % (source, name, place, position, place, seen[name]))
    seen[name] = position


def read_label_list(path: str) -> tuple:
  """The output names of a list written by `write_label_list` (label_list.txt, tag_list.txt): one
  a line, id = line number. Read as the data's label cells are, a byte-order mark, line ends and
  spaces around a name are not part of it; blank lines may only end the file. BadInputError
  naming the file (and line) for a list with no names, a blank line among them (ids would
  shift) or a name twice."""
  with open(path, encoding="utf-8-sig") as reader:
    names = [line.strip() for line in reader]
  while names and not names[-1]:
    names.pop()
  if not names:
    raise BadInputError("%s: the list is empty; delete it to learn the names from the training "
                        "file" % path)
  for line_number, name in enumerate(names, start=1):
    if not name:
      raise BadInputError("%s:%d: empty label: a blank line among the names (each line's "
                          "number is its id), from a training file with an empty label cell or "
                          "an edit; train again in a new `output_dir`" % (path, line_number))
  check_distinct_names(names, path)
  return tuple(names)


def check_label_list_names(path: str, names: Sequence[str]) -> None:
  """Raises BadInputError when the label list at `path` (beside a model: it names the model's
  outputs in order) is not `names` in that order, the outputs a task reads the model with: each
  output would be read as another label. A missing file names nothing and passes."""
  if not os.path.exists(path):
    return
  listed = list(read_label_list(path))
  if listed != list(names):
    raise BadInputError(
        "%s names the model's outputs [%s], but the task's are [%s]: each output would be read "
        "as another label; use a task whose labels are the model's, in that order" %
        (path, ", ".join(listed), ", ".join(names)))


def _describe_list(labels: Sequence[str], limit: int = 5) -> str:
  shown = ", ".join(labels[:limit])
  return shown + (", ... (%d in all)" % len(labels) if len(labels) > limit else "")


def check_label_list_can_be_written(path: str, labels: Sequence[str]) -> bool:
  """Raises BadInputError when `path` holds another list than `labels`, which `write_label_list`
  never replaces; whether it holds this one. A run calls it where it learns its labels, so such a
  list stops it before any work, though the list is written only when training starts."""
  check_distinct_names(labels, path)
  if file_patterns.is_remote(path) or not os.path.exists(path):
    return False
  with open(path, encoding="utf-8") as reader:
    old = reader.read()
  if old == "".join(label + "\n" for label in labels):
    return True
  raise BadInputError(
      "%s holds other labels (%s) than this run's (%s), written by an earlier run there (any "
      "checkpoints beside it use them). Use a new `output_dir`, or delete the file to start "
      "over" % (path, _describe_list(old.splitlines()), _describe_list(list(labels))))


def write_label_list(path: str, labels: Sequence[str]) -> None:
  """Writes a list of distinct output names (`check_distinct_names`), one a line (id = line
  number), atomically: the classifier's label_list.txt and the tagger's tag_list.txt.

  A list already at `path` names the outputs of the checkpoints beside it: one that differs is
  never replaced (`check_label_list_can_be_written`), since those checkpoints would then read
  every id as another label; an equal one is left as it is.
  """
  if not check_label_list_can_be_written(path, labels):
    atomic_files.write_text(path, "".join(label + "\n" for label in labels))
