# coding=utf-8
"""Feature files written once and reused while everything they were made from is unchanged.

One rule for every features cache (the classifier's `<split>.tf_record`, SQuAD's
`train.tf_record`): next to the file is a note, `<file>.json`, holding the `settings` the file was
made with and what it `contents` (counts). The file is reused exactly when both exist and the
note's settings equal the current ones. Settings name inputs by the SHA-256 of their content (data
files streamed, the vocab's tokens), never by size or modification time: a file edited within the
same second, or copied with its times preserved, must not hit a stale cache. The note is written
after the file is complete (both through atomic_files), so an interrupted run never looks
complete.
"""

import hashlib
import json
import os
from typing import Any, Callable

from absl import logging
import tensorflow as tf

import atomic_files

# Bytes read at a time while hashing a data file.
_HASH_BLOCK_BYTES = 1 << 20


def file_sha256(path: str) -> str:
  """The SHA-256 of a file's bytes (read in blocks; local or gs:// paths)."""
  digest = hashlib.sha256()
  with tf.io.gfile.GFile(path, "rb") as reader:
    for block in iter(lambda: reader.read(_HASH_BLOCK_BYTES), b""):
      digest.update(block)
  return digest.hexdigest()


def tokenizer_settings(tokenizer: Any) -> dict:
  """What features depend on in a `tokenization.FullTokenizer`: its tokens (hashed) and casing."""
  vocab = hashlib.sha256("\n".join(tokenizer.vocab).encode("utf-8", "surrogateescape"))
  return {"vocab_sha256": vocab.hexdigest(), "do_lower_case": bool(tokenizer.do_lower_case)}


def reuse_or_write(output_file: str, settings: dict,
                   write: Callable[[str], dict]) -> tuple[dict, bool]:
  """Reuses `output_file` if made with `settings`, else writes it; returns (contents, reused).

  `write(temporary_path)` writes the features and returns what they contain (JSON-able counts);
  the file is then renamed to `output_file` and noted. `contents` is the note's when reused. A
  mismatch is logged with the settings that changed.
  """
  note_file = output_file + ".json"
  if os.path.exists(output_file) and os.path.exists(note_file):
    with open(note_file, encoding="utf-8") as reader:
      note = json.load(reader)
    previous = note.get("settings") if isinstance(note, dict) else None
    if previous == settings:
      logging.info("Reusing %s (%s; same settings)", output_file, _describe(note["contents"]))
      return note["contents"], True
    previous = previous if isinstance(previous, dict) else {}
    changed = sorted(k for k in set(settings) | set(previous) if settings.get(k) != previous.get(k))
    logging.info("Rewriting %s: %s changed since it was written", output_file, ", ".join(changed))
  try:
    os.remove(note_file)
  except FileNotFoundError:
    pass
  # Workers of a multi-worker run may all get here: each writes its own temporaries (named after
  # host and pid) and renames them over the shared names; the contents are identical.
  with atomic_files.atomic_output(output_file) as temporary:
    contents = write(temporary)
  atomic_files.write_text(note_file, json.dumps({"settings": settings, "contents": contents},
                                                indent=1, sort_keys=True))
  logging.info("Wrote %s (%s)", output_file, _describe(contents))
  return contents, False


def _describe(contents: dict) -> str:
  return ", ".join("%s %s" % (key, value) for key, value in sorted(contents.items()))
