# coding=utf-8
"""Input flags that name files by comma-separated paths or glob patterns, local or remote.

One rule for every `--input_file` (create_vocab.py, create_pretraining_data.py,
run_pretraining.py): the value is split at commas (blank parts ignored); each pattern expands to
its matching files, sorted; the patterns' files are concatenated in the order of the patterns (a
file named twice is read twice, as in the original, with a warning naming it: oversampling a
corpus so is deliberate, a slip in a pattern is not). Directories are skipped, and so are hidden
files (names starting with "."; e.g. the temporaries of outputs still being written, see
atomic_files.py) unless the pattern's own file name starts with ".". A pattern matching no file
is an `errors.FlagError` naming the flag and the pattern. Text corpora (`expand_text`) are
refused when a file is binary.

Local patterns are expanded with Python's `glob`; remote ones (`gs://...`, any `scheme://`) with
`tf.io.gfile.glob`, as the original did. TensorFlow is imported only for a remote pattern, so the
pure-Python data tools never load it.
"""

import collections
import concurrent.futures
import glob
import os
import posixpath
from typing import List

from absl import logging

import errors


def is_remote(path: str) -> bool:
  """Whether `path` is a URL-like path (gs://, hdfs://, ...) read through tf.io.gfile: the rule
  by which the modules tell a remote path from a local one."""
  return "://" in path


def expand(value: str, flag: str = "`input_file`") -> List[str]:
  """The files of comma-separated paths or glob patterns, by the rule in the module docstring."""
  patterns = [pattern.strip() for pattern in (value or "").split(",") if pattern.strip()]
  if not patterns:
    raise errors.FlagError("%s is required: comma-separated files or glob patterns" % flag)
  files = []
  for pattern in patterns:
    matches = _remote_files(pattern, flag) if is_remote(pattern) else _local_files(pattern)
    if not posixpath.basename(pattern).startswith("."):
      matches = [path for path in matches if not posixpath.basename(path).startswith(".")]
    if not matches:
      raise errors.FlagError("%s: %r matches no files" % (flag, pattern))
    files.extend(sorted(matches))
  spellings = collections.defaultdict(list)  # One file under two spellings is one file too.
  for path in files:
    spellings[path if is_remote(path) else os.path.realpath(path)].append(path)
  for named in spellings.values():
    if len(named) > 1:
      logging.warning("%s names %s %d times%s: it is read %d times per pass", flag, named[0],
                      len(named), "" if len(set(named)) == 1 else " (as %s)" % ", ".join(named),
                      len(named))
  return files


def expand_text(value: str, flag: str = "`input_file`") -> List[str]:
  """`expand`, for flags that name text corpora: each local file must be text
  (`errors.check_text_file`). A pattern like `dir/*` matches a TFRecord or compressed file as
  soon as one is written beside the corpus."""
  files = expand(value, flag)
  for path in files:
    try:
      errors.check_text_file(path, flag)
    except errors.InputError as error:
      raise errors.FlagError(str(error)) from None
  return files


def _local_files(pattern: str) -> List[str]:
  return [path for path in glob.glob(pattern) if not os.path.isdir(path)]


def _remote_files(pattern: str, flag: str) -> List[str]:
  """Matches of a remote pattern that are not directories (checked in parallel: one call each).
  A file system that cannot list them (unknown scheme, no permission) is a FlagError naming the
  flag and the pattern."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  try:
    matches = tf.io.gfile.glob(pattern)
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
      directories = list(pool.map(tf.io.gfile.isdir, matches))
  except tf.errors.OpError as error:
    raise errors.FlagError("%s: %r cannot be listed (%s: %s)" % (
        flag, pattern, type(error).__name__, error.message.strip().splitlines()[0])) from None
  return [path for path, directory in zip(matches, directories) if not directory]
