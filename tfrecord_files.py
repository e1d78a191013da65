"""TFRecord files with TensorFlow: the features of their `tf.train.Example`s, and corrupt records.

The fine-tuning tasks build their records' features with `int64_feature` and `float_feature` and
parse their model inputs with `id_features_spec`. (Records written without TensorFlow, as by the
pretraining data's workers, are tfrecord_encoding.py's.)

tf.data stops at a corrupt record with `DataLossError: corrupted record at <offset>`, naming
neither the file nor the record, and a record that fails its checksum also ends its file for
tf.data (it cannot find the next record boundary it can trust). So:
- `naming_corrupt_records(files, hint)` turns such an error into a `CorruptRecordError` naming the
  file, the record index and its byte offset (found by scanning the files, on the failure path only);
- `readable_record_counts(files)` scans every file once (checksums verified in C++, no parsing) and
  returns how many records of each can be read, so an input pipeline can read each file only up to
  its first corrupt record (`--skip_corrupt_records`), deterministically and with a report.
"""

import contextlib
import dataclasses
from typing import Iterable, Iterator, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

import errors

# Bytes of framing around each record: length (8), its checksum (4), the data's checksum (4).
_FRAMING_BYTES = 16


# The hint for a features file a run wrote itself (classifier and SQuAD caches).
REBUILD_CACHE_HINT = "delete it and its .json note to rebuild it from the data"


# The model inputs of every fine-tuning record, [seq_length] int64 each.
ID_FEATURES = ("input_ids", "input_mask", "segment_ids")


def int64_feature(values: Iterable[int]) -> tf.train.Feature:
  """A `tf.train.Feature` of int64 values."""
  return tf.train.Feature(int64_list=tf.train.Int64List(value=list(values)))


def float_feature(values: Iterable[float]) -> tf.train.Feature:
  """A `tf.train.Feature` of float values."""
  return tf.train.Feature(float_list=tf.train.FloatList(value=list(values)))


def id_features_spec(seq_length: int) -> dict[str, tf.io.FixedLenFeature]:
  """The parsing spec of a record's `ID_FEATURES` (the task adds its labels' and ids')."""
  return {name: tf.io.FixedLenFeature([seq_length], tf.int64) for name in ID_FEATURES}


class CorruptRecordError(errors.InputError):
  """A TFRecord file holds a record that fails its checksum or is cut short."""


class UnreadableRecordFileError(errors.InputError):
  """A TFRecord file cannot be opened or read at all (missing, a directory, no permission)."""


@dataclasses.dataclass(frozen=True)
class RecordScan:
  """How far a TFRecord file can be read."""
  path: str
  readable_records: int  # Records before the first corrupt one (all of them when intact).
  corrupt_offset: Optional[int]  # Byte offset of the first corrupt record; None when intact.
  file_size: int

  def describe(self) -> str:
    return ("%s: record %d (at byte offset %d of %d) is corrupt: it fails its checksum or is cut "
            "short" % (self.path, self.readable_records, self.corrupt_offset, self.file_size))


def scan_file(path: str) -> RecordScan:
  """Reads every record of `path` once and reports where the first corrupt one starts.

  Raises:
    UnreadableRecordFileError: naming the file, when it cannot be opened at all.
  """

  def add(totals, record):
    return (totals[0] + 1,
            totals[1] + tf.cast(tf.strings.length(record), tf.int64) + _FRAMING_BYTES)

  if tf.io.gfile.isdir(path):
    raise UnreadableRecordFileError("%s is a directory, not a TFRecord file" % path)
  try:
    file_size = tf.io.gfile.stat(path).length
    with tf.io.gfile.GFile(path, "rb") as reader:  # ignore_errors() below would hide this.
      reader.read(1)
  except tf.errors.OpError as error:
    raise UnreadableRecordFileError(errors.named(path, error)) from None
  records = tf.data.TFRecordDataset(path).ignore_errors()
  count, end = records.reduce((np.int64(0), np.int64(0)), add)
  end = int(end)
  return RecordScan(path, int(count), None if end == file_size else end, file_size)


def find_corrupt_record(paths: Sequence[str]) -> Optional[RecordScan]:
  """The scan of the first file (in order) with a corrupt record, or None."""
  for path in paths:
    scan = scan_file(path)
    if scan.corrupt_offset is not None:
      return scan
  return None


@contextlib.contextmanager
def naming_corrupt_records(paths: Sequence[str], hint: str) -> Iterator[None]:
  """Re-raises a DataLossError from the block as a CorruptRecordError naming file and record.

  `hint` (what the user can do) ends the message. A DataLossError that none of `paths` explains
  (e.g. from a checkpoint) propagates unchanged.
  """
  try:
    yield
  except tf.errors.DataLossError as error:
    logging.error("%s; looking for the corrupt record in %d input file(s)", error.message,
                  len(paths))
    scan = find_corrupt_record(paths)
    if scan is None:
      raise
    raise CorruptRecordError("%s; %s" % (scan.describe(), hint)) from None


def readable_record_counts(paths: Sequence[str]) -> tuple[list, list]:
  """Scans the files; returns (records to read per file, -1 = all; the scans of corrupt files).

  Each corrupt file is logged with what is skipped: its records from the first corrupt one on.
  """
  counts, corrupt = [], []
  for path in paths:
    scan = scan_file(path)
    if scan.corrupt_offset is None:
      counts.append(-1)
      continue
    corrupt.append(scan)
    counts.append(scan.readable_records)
    logging.warning("%s; reading only the %d records before it (%d bytes skipped)",
                    scan.describe(), scan.readable_records, scan.file_size - scan.corrupt_offset)
  return counts, corrupt


def skipped_summary(corrupt: Sequence[RecordScan]) -> str:
  """One line for the end of a run about what `--skip_corrupt_records` left out."""
  if not corrupt:
    return "no corrupt records"
  return "%d file(s) read only up to a corrupt record (%d bytes skipped): %s" % (
      len(corrupt), sum(scan.file_size - scan.corrupt_offset for scan in corrupt),
      ", ".join("%s from record %d" % (scan.path, scan.readable_records) for scan in corrupt[:3]))
