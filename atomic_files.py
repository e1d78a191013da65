"""Atomic outputs: every output is written under a temporary name and renamed when complete.

A run killed or failed at any moment therefore leaves under a final name either what was there
before or a complete new output, never a truncated one that a later step would read as finished.
The temporary sits in the final name's directory (so the rename stays within one file system) and
is named `.<name>.tmp-<host>-<pid>`: hidden, and recognisable, so that the next run writing the
same output deletes the temporaries its dead predecessors on this host left behind.

One mechanism serves single files, directories (a SavedModel, a directory of .npz files) and
checkpoint prefixes (`<prefix>.index` + `<prefix>.data-*`): when the block succeeds, the temporary
itself and every `<temporary>.<suffix>` are renamed to the final name (+ suffix), `.index` last.

Pure Python (TensorFlow is imported only for `gs://`-style paths), so pretraining data workers and
the tokenizer-only tools can use it.
"""

import contextlib
import errno
import os
import re
import shutil
import socket
from typing import Iterator

from absl import logging

import errors
import file_patterns

_TEMPORARY_MARK = ".tmp-"
# What follows the mark: host, pid, and for a checkpoint prefix's files a suffix (".index", ...).
_TEMPORARY_TAIL = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)(?P<suffix>\D.*)?$")
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def _gfile():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf.io.gfile


def _list_dir(directory: str) -> list:
  if file_patterns.is_remote(directory):
    return [name.rstrip("/") for name in _gfile().listdir(directory)]
  return os.listdir(directory or ".")


def _exists(path: str) -> bool:
  return _gfile().exists(path) if file_patterns.is_remote(path) else os.path.lexists(path)


def _remove(path: str) -> None:
  """Deletes a file or a directory tree; a missing path is not an error."""
  if file_patterns.is_remote(path):
    gfile = _gfile()
    if gfile.isdir(path):
      gfile.rmtree(path)
    elif gfile.exists(path):
      gfile.remove(path)
  elif os.path.isdir(path) and not os.path.islink(path):
    shutil.rmtree(path, ignore_errors=True)
  else:
    with contextlib.suppress(FileNotFoundError):
      os.remove(path)


def _rename(source: str, target: str) -> None:
  """Renames a file or directory over `target` (a directory target is replaced whole)."""
  if file_patterns.is_remote(source):
    gfile = _gfile()
    if gfile.isdir(target):
      gfile.rmtree(target)
    gfile.rename(source, target, overwrite=True)
    return
  if os.path.isdir(target) and not os.path.islink(target):
    # os.replace cannot replace a non-empty directory: move the old one aside under a temporary
    # name first (a kill in between leaves no final name, and the next run deletes the old one).
    old = temporary_path(target) + ".old"
    os.replace(target, old)
    os.replace(source, target)
    _remove(old)
  else:
    os.replace(source, target)


def temporary_path(path: str) -> str:
  """The name `path` is written under until it is complete: `.<name>.tmp-<host>-<pid>`."""
  directory, name = os.path.split(path.rstrip("/"))
  return os.path.join(directory, ".%s%s%s-%d" % (name, _TEMPORARY_MARK, socket.gethostname(),
                                                os.getpid()))


def _process_is_alive(pid: int) -> bool:
  try:
    os.kill(pid, 0)
  except ProcessLookupError:
    return False
  except PermissionError:
    return True
  return True


def remove_stale_temporaries(path: str) -> list:
  """Deletes the temporaries of `path` left by dead processes of this host; returns their paths.

  Temporaries of live processes (another job writing the same output) and of other hosts are kept.
  """
  directory, name = os.path.split(path.rstrip("/"))
  start = ".%s%s" % (name, _TEMPORARY_MARK)
  try:
    entries = _list_dir(directory)
  except (OSError, IOError):
    return []
  host, removed = socket.gethostname(), []
  for entry in sorted(entries):
    match = entry.startswith(start) and _TEMPORARY_TAIL.match(entry[len(start):])
    if not match or match["host"] != host:
      continue
    pid = int(match["pid"])
    if pid != os.getpid() and _process_is_alive(pid):
      continue
    stale = os.path.join(directory, entry)
    _remove(stale)
    removed.append(stale)
  if removed:
    logging.info("Removed %d stale temporary output(s) of %s", len(removed), path)
  return removed


def _written_parts(temporary: str) -> list:
  """The temporary itself (if written) and its `<temporary>.<suffix>` files, `.index` last."""
  directory, name = os.path.split(temporary)
  try:
    entries = _list_dir(directory)
  except (OSError, IOError):  # The directory is missing: nothing was written.
    return []
  parts = [entry[len(name):] for entry in entries if entry == name or entry.startswith(name + ".")]
  return sorted(parts, key=lambda suffix: (suffix.endswith(".index"), suffix))


@contextlib.contextmanager
def atomic_output(path: str) -> Iterator[str]:
  """Yields the temporary path to write `path` (a file, directory or checkpoint prefix) under.

  The directory must exist. Stale temporaries of `path` are deleted first. When the block ends
  normally the temporary (and any `<temporary>.<suffix>` files) is renamed to `path` (+ suffix);
  when it raises, everything written is deleted and the exception propagates. A disk-full OSError
  from the block is re-raised naming `path`, which the operating system's message does not.
  """
  remove_stale_temporaries(path)
  temporary = temporary_path(path)
  try:
    yield temporary
  except BaseException as error:
    for suffix in _written_parts(temporary):
      _remove(temporary + suffix)
    if isinstance(error, OSError) and error.errno in _DISK_FULL_ERRNOS:
      raise OSError(error.errno, "%s while writing %s" % (error.strerror, path)) from error
    raise
  for suffix in _written_parts(temporary):
    _rename(temporary + suffix, path.rstrip("/") + suffix)


def write_text(path: str, text: str) -> None:
  """Writes a whole text file (UTF-8) atomically."""
  with atomic_output(path) as temporary:
    if file_patterns.is_remote(path):
      with _gfile().GFile(temporary, "w") as writer:
        writer.write(text)
    else:
      with open(temporary, "w", encoding="utf-8") as writer:
        writer.write(text)


def check_writable_directory(directory: str, flag_name: str) -> None:
  """Creates `directory` if needed and checks a file can be written in it, before any work.

  Raises FlagError "--<flag_name>: cannot write in <directory> (<reason>)" otherwise.
  """
  directory = directory or "."
  probe = temporary_path(os.path.join(directory, "write-check"))
  try:
    if file_patterns.is_remote(directory):
      _gfile().makedirs(directory)
      with _gfile().GFile(probe, "w") as writer:
        writer.write("")
    else:
      os.makedirs(directory, exist_ok=True)
      with open(probe, "w", encoding="utf-8"):
        pass
    _remove(probe)
  except Exception as error:  # pylint: disable=broad-except  # OSError or a tf.errors.OpError.
    reason = getattr(error, "message", None) or getattr(error, "strerror", None) or str(error)
    raise errors.FlagError("--%s: cannot write in %s (%s)" %
                           (flag_name, directory, reason)) from error
