# coding=utf-8
"""Feature files written once and reused while everything they were made from is unchanged.

One rule for every features cache (the classifier's `<split>.tf_record`, SQuAD's
`train.tf_record`; TFRecord files): next to the file is a note, `<file>.json`, holding the
`settings` the file was made with, what it `contents` (counts) and the `file`'s own size in
`bytes` and number of `records`. The file is reused exactly when both exist, the note's settings
equal the current ones, and the file still is what the note says: its size and its records,
counted and checksummed by reading it once. A note that is not JSON, lacks a part or holds other
types, or that disagrees with the file, is not believed: the file is rebuilt, with a warning
naming the note and what is wrong with it. Settings name inputs by the SHA-256 of their content
(data files streamed, the vocab's tokens), never by size or modification time: a file edited
within the same second, or copied with its times preserved, must not hit a stale cache. The note
is written after the file is complete (both through atomic_files), so an interrupted run never
looks complete.
"""

import hashlib
import json
import os
from typing import Any, Callable, Optional

from absl import logging
import tensorflow as tf

import atomic_files
import errors
import tfrecord_files


class UnreadableInputError(errors.InputError):
  """An input file a cache's settings depend on cannot be read (missing, a directory, ...)."""


def file_sha256(path: str) -> str:
  """The SHA-256 of a file's bytes (read in blocks; local or gs:// paths); a file that cannot be
  read is an UnreadableInputError naming it."""
  try:
    return atomic_files.file_sha256(path)
  except (OSError, tf.errors.OpError) as error:
    raise UnreadableInputError(errors.named(path, error)) from None


def tokenizer_settings(tokenizer: Any) -> dict:
  """What features depend on in a `tokenization.FullTokenizer`: its tokens (hashed) and casing."""
  vocab = hashlib.sha256("\n".join(tokenizer.vocab).encode("utf-8", "surrogateescape"))
  return {"vocab_sha256": vocab.hexdigest(), "do_lower_case": bool(tokenizer.do_lower_case)}


def reuse_or_write(output_file: str, settings: dict,
                   write: Callable[[str], dict]) -> tuple[dict, bool]:
  """Reuses `output_file` if made with `settings`, else writes it; returns (contents, reused).

  `write(temporary_path)` writes the features and returns what they contain (JSON-able counts);
  the file is then renamed to `output_file` and noted. `contents` is the note's when reused. A
  rebuild is logged with why: the settings that changed, or what is wrong with the note.
  """
  note_file = output_file + ".json"
  if os.path.exists(output_file) and os.path.exists(note_file):
    note, problem = _read_note(note_file)
    if note is not None:
      problem = (_changed_settings(note["settings"], settings) or
                 _disagreement(note, note_file, output_file))
    if problem is None:
      logging.info("Reusing %s (%s; same settings)", output_file, _describe(note["contents"]))
      return note["contents"], True
    logging.warning("Rewriting %s: %s", output_file, problem)
  try:
    os.remove(note_file)
  except FileNotFoundError:
    pass
  # Workers of a multi-worker run may all get here: each writes its own temporaries (named after
  # host and pid) and renames them over the shared names; the contents are identical.
  with atomic_files.atomic_output(output_file) as temporary:
    contents = write(temporary)
    file_counts = {"bytes": os.path.getsize(temporary),
                   "records": tfrecord_files.scan_file(temporary).readable_records}
  atomic_files.write_text(note_file, json.dumps(
      {"settings": settings, "contents": contents, "file": file_counts}, indent=1, sort_keys=True))
  logging.info("Wrote %s (%s)", output_file, _describe(contents))
  return contents, False


def noted_records(output_file: str) -> int:
  """The number of records in a features file, as its note (checked or just written by
  `reuse_or_write`) counts them."""
  with open(output_file + ".json", encoding="utf-8") as reader:
    return json.load(reader)["file"]["records"]


def _is_counts(value: Any) -> bool:
  """Whether a note's value is an object of non-negative integer counts."""
  return isinstance(value, dict) and all(
      isinstance(count, int) and not isinstance(count, bool) and count >= 0
      for count in value.values())


def _read_note(note_file: str) -> tuple[Optional[dict], Optional[str]]:
  """(the note, None) when it is an object of settings, counted contents and file counts, else
  (None, what is wrong with it)."""
  try:
    with open(note_file, encoding="utf-8") as reader:
      note = json.load(reader)
  except ValueError as error:  # Not UTF-8, not JSON.
    return None, "its note %s is not JSON (%s)" % (note_file, error)
  if not (isinstance(note, dict) and isinstance(note.get("settings"), dict) and
          _is_counts(note.get("contents")) and _is_counts(note.get("file")) and
          set(note["file"]) == {"bytes", "records"}):
    return None, ("its note %s is not an object of settings, contents counts and file counts "
                  "(bytes, records)" % note_file)
  return note, None


def _changed_settings(previous: dict, settings: dict) -> Optional[str]:
  """Which settings differ from the note's, or None."""
  changed = sorted(k for k in set(settings) | set(previous) if settings.get(k) != previous.get(k))
  return "%s changed since it was written" % ", ".join(changed) if changed else None


def _disagreement(note: dict, note_file: str, output_file: str) -> Optional[str]:
  """How the file differs from what its note says (size, then records read intact), or None."""
  noted = note["file"]
  size = os.path.getsize(output_file)
  if size != noted["bytes"]:
    return "its note %s says %d bytes but the file has %d" % (note_file, noted["bytes"], size)
  scan = tfrecord_files.scan_file(output_file)
  if scan.corrupt_offset is not None:
    return scan.describe()
  if scan.readable_records != noted["records"]:
    return "its note %s says %d records but the file holds %d" % (
        note_file, noted["records"], scan.readable_records)
  return None


def _describe(contents: dict) -> str:
  return ", ".join("%s %s" % (key, value) for key, value in sorted(contents.items()))
