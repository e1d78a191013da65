"""TFRecord files with TensorFlow: the fine-tuning tasks' feature files, and corrupt records.

Each fine-tuning task describes its records' features once, as a list of `RecordFeature`s (name,
number of values, dtype); `write_records` writes rows as `tf.train.Example`s of exactly those
features and `records_dataset` reads them back by the parsing spec built from the same list
(`parse_spec`), so a task's writer and reader cannot disagree. (Records written without
TensorFlow, as by the pretraining data's workers, are tfrecord_encoding.py's.)

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
from typing import Any, Iterable, Iterator, Mapping, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

import atomic_files
import errors

# Bytes of framing around each record: length (8), its checksum (4), the data's checksum (4).
_FRAMING_BYTES = 16


# The hint for a features file a run wrote itself (classifier and SQuAD caches).
REBUILD_CACHE_HINT = "delete it and its .json note to rebuild it from the data"


# The model inputs of every fine-tuning record, [seq_length] int64 each.
ID_FEATURES = ("input_ids", "input_mask", "segment_ids")


@dataclasses.dataclass(frozen=True)
class RecordFeature:
  """One feature of a task's records: its name, its number of values (None: a single value, read
  as a scalar) and its dtype (tf.int64 or tf.float32)."""
  name: str
  length: Optional[int] = None
  dtype: tf.DType = tf.int64


def id_features(seq_length: int) -> list[RecordFeature]:
  """The `ID_FEATURES` of records of `seq_length` tokens (a task adds its labels and ids)."""
  return [RecordFeature(name, seq_length) for name in ID_FEATURES]


def _example_bytes(features: Sequence[RecordFeature], row: Mapping[str, Any]) -> bytes:
  """The serialized `tf.train.Example` of one row (feature name -> its value or its values), its
  features in name order: the same rows are the same bytes in every process (protobuf's default
  map order is not), which the digest of a run's training features relies on."""
  entries = {}
  for feature in features:
    values = [row[feature.name]] if feature.length is None else list(row[feature.name])
    if feature.dtype == tf.float32:
      entries[feature.name] = tf.train.Feature(float_list=tf.train.FloatList(value=values))
    else:
      entries[feature.name] = tf.train.Feature(
          int64_list=tf.train.Int64List(value=[int(value) for value in values]))
  return tf.train.Example(features=tf.train.Features(feature=entries)).SerializeToString(
      deterministic=True)


def write_records(path: str, features: Sequence[RecordFeature],
                  rows: Iterable[Mapping[str, Any]]) -> int:
  """Writes each row as a `tf.train.Example` of `features` to the TFRecord file `path` (which
  appears only when complete, `atomic_files`); returns the number of records."""
  count = 0
  with atomic_files.atomic_output(path) as temporary, tf.io.TFRecordWriter(temporary) as writer:
    for row in rows:
      writer.write(_example_bytes(features, row))
      count += 1
  return count


def parse_spec(features: Sequence[RecordFeature]) -> dict[str, tf.io.FixedLenFeature]:
  """The parsing spec of records of `features`."""
  return {feature.name: tf.io.FixedLenFeature([] if feature.length is None else [feature.length],
                                              feature.dtype)
          for feature in features}


def records_dataset(path: str, features: Sequence[RecordFeature],
                    int64_names: Sequence[str] = ()) -> tf.data.Dataset:
  """One pass over a file of `write_records`, in file order: unbatched dicts of `features`, int64
  values as int32 (the models' id dtype) except the features named in `int64_names`."""
  spec = parse_spec(features)

  @tf.autograph.experimental.do_not_convert
  def parse(record):
    return {name: tf.cast(value, tf.int32) if value.dtype == tf.int64 and name not in int64_names
            else value for name, value in tf.io.parse_single_example(record, spec).items()}

  return tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


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
