"""Atomic outputs: every output is written under a temporary name and renamed when complete.

A run killed or failed at any moment therefore leaves under a final name either what was there
before or a complete new output, never a truncated one that a later step would read as finished.
The temporary sits in the final name's directory (so the rename stays within one file system) and
is named `.<name>.tmp-<host>-<pid>`: hidden, and recognisable, so that the next run writing the
same output deletes the temporaries its dead predecessors on this host left behind.

One mechanism serves single files, directories (a SavedModel, a directory of .npz files) and
checkpoint prefixes (`<prefix>.index` + `<prefix>.data-*`): when the block succeeds, the temporary
itself and every `<temporary>.<suffix>` are renamed to the final name (+ suffix), `.index` last.

`check_run_paths` refuses, before a run starts, outputs that would replace an input, another
output or a path of the other kind; the rename refuses a change of kind again, and gives what it
publishes the user's umask. A directory replacing a directory is swapped in one step.

`OutputDirLock` makes one job at a time write to an output directory (training's --output_dir).

Pure Python (TensorFlow is imported only for `gs://`-style paths, and by `OutputDirLock` and
`remove_quietly`, which go through tf.io.gfile), so pretraining data workers and the
tokenizer-only tools can use the rest.
"""

import contextlib
import errno
import fcntl
import fnmatch
import hashlib
import json
import os
import re
import shutil
import socket
import stat
import time
from typing import Any, Collection, Iterator, Mapping, Optional, Sequence, Tuple

from absl import logging

import errors
import file_patterns

_TEMPORARY_MARK = ".tmp-"
# What follows the mark: host, pid, and for a checkpoint prefix's files a suffix (".index", ...).
_TEMPORARY_TAIL = re.compile(r"^(?P<host>.+)-(?P<pid>\d+)(?P<suffix>\D.*)?$")
_DISK_FULL_ERRNOS = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
_ASIDE_SUFFIX = ".old"  # An old directory moved aside while a new one takes its name.
# `.<name>.publish-<host>-<pid>`: beside each output of a unit being renamed into place, the
# unit's list of renames (`publish_together`).
_PUBLISH_MARK = ".publish-"
LOCK_FILE_NAME = ".lock"  # An output directory's writer (`OutputDirLock`).

# What an output names (`check_run_paths`): a file or a directory written whole (replacing what
# was there), or a directory that outputs are written into.
OUTPUT_FILE, OUTPUT_DIRECTORY, OUTPUT_CONTAINER = "file", "directory", "container"
# The names the scripts give what they write into an output directory (feature caches, results,
# predictions, label lists, checkpoints, the evaluation history and best checkpoint of
# `--keep_best_checkpoint`, TensorBoard events): a data file there under such a name would be
# replaced, or read while the run writes it.
NAMES_WRITTEN_IN_OUTPUT_DIRS = ("*.tf_record", "*_results.txt", "*_results.tsv",
                                "*_predictions.txt", "*_conlleval.txt", "*predictions.json",
                                "null_odds.json", "label_list.txt", "tag_list.txt", "checkpoint",
                                "model.ckpt-*", "training_settings.json", "eval_history.json",
                                "best", "events.out.tfevents.*")

# The files a run's scripts read beside its model, where the user put none: its config and vocab.
RUN_COMPANION_NAMES = ("bert_config.json", "vocab.txt")

# Bytes read at a time when hashing a file.
_HASH_BLOCK_BYTES = 1 << 20


def _tensorflow():
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  return tf


def _gfile():
  return _tensorflow().io.gfile


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


def remove_quietly(path: str) -> None:
  """Deletes a file through tf.io.gfile, ignoring any failure (e.g. another process deleted it)."""
  tf = _tensorflow()
  try:
    tf.io.gfile.remove(path)
  except (tf.errors.OpError, OSError):
    pass


def _is_directory(path: str) -> bool:
  if file_patterns.is_remote(path):
    return _gfile().isdir(path)
  return os.path.isdir(path) and not os.path.islink(path)


def _check_same_kind(source: str, target: str) -> None:
  """Raises InputError when `source` would replace `target` of the other kind (a file over a
  directory or a directory over a file): that is never what the run was asked to write."""
  if not _exists(target):
    return
  new_is_directory, old_is_directory = _is_directory(source), _is_directory(target)
  if new_is_directory != old_is_directory:
    raise errors.InputError("%s is a %s: refusing to replace it with a %s" % (
        target, "directory" if old_is_directory else "file",
        "directory" if new_is_directory else "file"))


_RENAME_EXCHANGE = 2  # renameat2's flag (linux/fs.h): swap two existing names atomically.
_AT_FDCWD = -100


def _exchange(first: str, second: str) -> bool:
  """Swaps two existing local paths in one step (Linux renameat2); False where unsupported."""
  try:
    import ctypes  # pylint: disable=g-import-not-at-top
    libc = ctypes.CDLL(None, use_errno=True)
    renameat2 = libc.renameat2
  except (OSError, AttributeError):
    return False
  if renameat2(_AT_FDCWD, os.fsencode(first), _AT_FDCWD, os.fsencode(second),
               _RENAME_EXCHANGE) == 0:
    return True
  error = ctypes.get_errno()
  if error in (errno.ENOSYS, errno.EINVAL, errno.ENOTSUP):
    return False
  raise OSError(error, os.strerror(error), second)


def _rename(source: str, target: str) -> None:
  """Renames a file or directory over `target` of the same kind (a directory is replaced whole,
  in one step where the system can swap two names)."""
  if file_patterns.is_remote(source):
    gfile = _gfile()
    if gfile.isdir(target):
      gfile.rmtree(target)
    gfile.rename(source, target, overwrite=True)
    return
  if not _is_directory(target):
    os.replace(source, target)
    return
  if _exchange(source, target):  # The old directory is now at `source`.
    _remove(source)
    return
  # os.replace cannot replace a non-empty directory: move the old one aside under a temporary
  # name first; a kill in between leaves it there, and the next writer of `target` moves it back.
  old = temporary_path(target) + _ASIDE_SUFFIX
  os.replace(target, old)
  os.replace(source, target)
  _remove(old)


def _current_umask() -> int:
  """The process's umask (read without changing it where /proc tells it)."""
  try:
    with open("/proc/self/status", encoding="ascii") as status:
      for line in status:
        if line.startswith("Umask:"):
          return int(line.split()[1], 8)
  except OSError:
    pass
  mask = os.umask(0o022)
  os.umask(mask)
  return mask


def _apply_umask(path: str) -> None:
  """Gives the files written under `path` the mode a plain `open` gives (0666 less the umask):
  some writers (safetensors) create theirs 0600."""
  if file_patterns.is_remote(path) or os.path.islink(path):
    return
  mode = 0o666 & ~_current_umask()
  if os.path.isfile(path):
    os.chmod(path, mode)
  for directory, _, names in os.walk(path):
    for name in names:
      child = os.path.join(directory, name)
      if os.path.isfile(child) and not os.path.islink(child):
        os.chmod(child, mode)


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
  An old directory its dead writer had moved aside, with nothing yet at `path`, is moved back.
  """
  recover_interrupted_publish(path)  # First: its temporaries are a unit's, not stale.
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
    if match["suffix"] == _ASIDE_SUFFIX and not _exists(path):
      # Killed between moving the old directory aside and moving the new one in: the old one is
      # still the complete output.
      os.replace(stale, path)
      logging.warning("Restored %s from %s (its writer was killed while replacing it)", path,
                      stale)
      continue
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


class DiskFullError(OSError):
  """A full disk (or quota) while writing an output, named in the message."""


@contextlib.contextmanager
def atomic_output(path: str, named: Optional[str] = None,
                  deferred: Optional[list] = None) -> Iterator[str]:
  """Yields the temporary path to write `path` (a file, directory or checkpoint prefix) under.

  The directory must exist. Stale temporaries of `path` are deleted first. When the block ends
  normally the temporary (and any `<temporary>.<suffix>` files) is renamed to `path` (+ suffix),
  or with `deferred` its (temporary, path) renames are added to that list, for
  `publish_together` to make with the other outputs of a unit; when it raises, everything
  written is deleted and the exception propagates. A full disk in the
  block (an OSError, or TensorFlow's error for it) is raised as an OSError naming the output
  (`named`, else `path`), which the operating system's message does not. A local `path` that is a
  symlink is written where it points, as the shell's `>` writes through one (the link stays).
  """
  path = _written_path(path)
  remove_stale_temporaries(path)
  temporary = temporary_path(path)
  try:
    yield temporary
  except BaseException as error:
    for suffix in _written_parts(temporary):
      _remove(temporary + suffix)
    number = _disk_full_errno(error)
    if number is not None and not isinstance(error, DiskFullError):  # Named once, where it was.
      raise DiskFullError(number, "%s while writing %s" % (os.strerror(number),
                                                           named or path)) from error
    raise
  parts = _written_parts(temporary)
  try:
    for suffix in parts:
      _check_same_kind(temporary + suffix, path.rstrip("/") + suffix)
      _check_not_an_input(path.rstrip("/") + suffix)
      _apply_umask(temporary + suffix)
  except BaseException:
    for suffix in parts:
      _remove(temporary + suffix)
    raise
  renames = [(temporary + suffix, path.rstrip("/") + suffix) for suffix in parts]
  if deferred is not None:
    deferred.extend(renames)
  else:
    for source, target in renames:
      _rename(source, target)


@contextlib.contextmanager
def atomic_outputs(paths: Sequence[str]) -> Iterator[list]:
  """Yields the temporary paths to write the outputs of one unit under (e.g. the TFRecord
  files of one create_pretraining_data run); when the block ends normally they are renamed into
  place together (`publish_together`), else all are deleted. A full disk is named at the output
  being written (`atomic_output`)."""
  deferred = []
  try:
    with contextlib.ExitStack() as stack:
      temporaries = [stack.enter_context(atomic_output(path, deferred=deferred))
                     for path in paths]
      yield temporaries
  except BaseException:
    for temporary, _ in deferred:
      _remove(temporary)
    raise
  publish_together(deferred)


def publish_together(renames: Sequence[Tuple[str, str]]) -> None:
  """Renames complete temporaries to their outputs (`renames`: (temporary, output) pairs) as one
  unit: local outputs that are more than one first get, each beside it, a journal of all the
  renames (written whole by a rename of its own), and lose it when all are made. A writer killed
  in between leaves the journals, from which the next writer or reader of any of the outputs
  (`recover_interrupted_publish`) finishes the renames, or undoes a unit whose journals were not
  all written (no rename had begun): never old outputs beside new ones."""
  journals = []
  if len(renames) > 1 and not any(file_patterns.is_remote(output) for _, output in renames):
    record = json.dumps([list(pair) for pair in renames])
    journals = [_journal_path(output) for _, output in renames]
    for journal in journals:
      with open(journal + ".part", "w", encoding="utf-8") as writer:
        writer.write(record)
      os.replace(journal + ".part", journal)
  for temporary, output in renames:
    _rename(temporary, output)
  for journal in journals:
    os.remove(journal)


def _journal_path(output: str, writer: Optional[str] = None) -> str:
  """`.<name>.publish-<host>-<pid>` beside `output`, of this process or of `writer`
  (`<host>-<pid>`)."""
  directory, name = os.path.split(output.rstrip("/"))
  return os.path.join(directory, ".%s%s%s" % (
      name, _PUBLISH_MARK, writer or "%s-%d" % (socket.gethostname(), os.getpid())))


def recover_interrupted_publish(path: str) -> None:
  """Finishes (or undoes) a unit of outputs holding `path` whose writer, a dead process of this
  host, was killed while `publish_together` renamed them: with every journal of the unit there,
  the renames may have begun, and the rest are made; with some missing (killed while writing
  them), none had, and the temporaries are deleted. Either way its journals go."""
  directory, name = os.path.split(path.rstrip("/"))
  start = ".%s%s" % (name, _PUBLISH_MARK)
  try:
    entries = sorted(entry for entry in _list_dir(directory) if entry.startswith(start))
  except (OSError, IOError):
    return
  for entry in entries:
    writer = entry[len(start):]
    match = _TEMPORARY_TAIL.match(writer)
    if not match or match["host"] != socket.gethostname() or (
        int(match["pid"]) == os.getpid() or _process_is_alive(int(match["pid"]))):
      continue
    journal = os.path.join(directory, entry)
    if match["suffix"]:  # A journal being written when its writer died (`.part`).
      os.remove(journal)
      continue
    with open(journal, encoding="utf-8") as reader:
      renames = json.load(reader)
    journals = [_journal_path(output, writer) for _, output in renames]
    finish = all(os.path.lexists(other) for other in journals)
    for temporary, output in renames:
      if os.path.lexists(temporary) and finish:
        _rename(temporary, output)
      elif os.path.lexists(temporary):
        _remove(temporary)
    for other in journals:
      if os.path.lexists(other):
        os.remove(other)
    logging.warning("%s the outputs %s, whose writer was killed while renaming them",
                    "Finished renaming" if finish else "Removed the unrenamed",
                    ", ".join(output for _, output in renames))

def _written_path(path: str) -> str:
  """Where an output named `path` is written: a local symlink's target (as the shell's `>`
  writes through one), else `path`. Every check of what an output would replace looks there."""
  if not file_patterns.is_remote(path) and os.path.islink(path.rstrip("/")):
    return os.path.realpath(path)
  return path


def _disk_full_errno(error: BaseException) -> Optional[int]:
  """The errno of a full disk or quota behind `error`: an OSError's, or the one TensorFlow's
  file writers (tf.io.gfile, TFRecordWriter) only name in their message
  (`ResourceExhaustedError: ...; No space left on device`); None for any other error."""
  if isinstance(error, OSError):
    return error.errno if error.errno in _DISK_FULL_ERRNOS else None
  message = str(error)
  return next((number for number in _DISK_FULL_ERRNOS if os.strerror(number) in message), None)


def write_text(path: str, text: str) -> None:
  """Writes a whole text file (UTF-8) atomically."""
  write_texts({path: text})


def write_texts(texts: Mapping[str, str]) -> None:
  """Writes whole text files (UTF-8, {path: text}) that belong together, such as SQuAD's
  predictions and their null odds, as one unit (`atomic_outputs`): a failure or a kill leaves
  every old file or every new one."""
  with atomic_outputs(list(texts)) as temporaries:
    for (path, text), temporary in zip(texts.items(), temporaries):
      if file_patterns.is_remote(path):
        with _gfile().GFile(temporary, "w") as writer:
          writer.write(text)
      else:
        with open(temporary, "w", encoding="utf-8") as writer:
          writer.write(text)


def check_writable_directory(directory: str, flag_name: str) -> None:
  """Creates `directory` if needed and checks a file can be written in it, before any work.

  Raises FlagError "`<flag_name>`: cannot write in <directory> (<reason>)" otherwise.
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
    raise errors.FlagError("`%s`: cannot write in %s (%s)" %
                           (flag_name, directory, reason)) from error


def _identity(path: str) -> Tuple[str, Optional[Tuple[int, int]]]:
  """(resolved path, (st_dev, st_ino) or None): two paths with either equal name the same file
  (a symlink resolves to its target, a hard link shares the inode). Remote paths: the string."""
  if file_patterns.is_remote(path):
    return path.rstrip("/"), None
  try:
    status = os.stat(path)
  except OSError:
    return os.path.realpath(path), None
  return os.path.realpath(path), (status.st_dev, status.st_ino)


def _same(first: tuple, second: tuple) -> bool:
  return first[0] == second[0] or (first[1] is not None and first[1] == second[1])


def same_place(path: str, other: str) -> bool:
  """Whether two paths, existing or not, name one file or directory (`_identity`)."""
  return _same(_identity(path), _identity(other))


def _inside(inner: tuple, outer: tuple) -> bool:
  return inner[0].startswith(outer[0].rstrip("/") + "/")


def _check_output_kind(what: str, kind: str, path: str) -> None:
  """An existing local `path` is of the kind the output is (a regular file for a file); a
  symlink to nothing (or a loop) may name a file whose directory exists, as the shell's `>`
  writes through it, but no directory."""
  if file_patterns.is_remote(path):
    return
  if os.path.islink(path.rstrip("/")) and not os.path.exists(path):
    target = os.path.realpath(path)
    if _is_symlink_loop(path):
      raise errors.FlagError("%s=%s is a loop of symlinks: name a %s" % (
          what, path, "file" if kind == OUTPUT_FILE else "directory"))
    if kind != OUTPUT_FILE or not os.path.isdir(os.path.dirname(target)):
      raise errors.FlagError("%s=%s is a symlink to %s, which does not exist: create it or name "
                             "another %s" % (what, path, target,
                                             "file" if kind == OUTPUT_FILE else "directory"))
    return
  if not os.path.exists(path):
    return
  if kind == OUTPUT_FILE:
    if os.path.isdir(path):
      raise errors.FlagError("%s=%s is a directory: it must name a file" % (what, path))
    if not stat.S_ISREG(os.stat(path).st_mode):
      raise errors.FlagError("%s=%s is not a regular file (a FIFO, socket or device)" %
                             (what, path))
  elif not os.path.isdir(path):
    raise errors.FlagError("%s=%s is a file: it must name a directory" % (what, path))


def _is_symlink_loop(path: str) -> bool:
  try:
    os.stat(path)
  except OSError as error:
    return error.errno == errno.ELOOP
  return False


def _check_can_write(what: str, kind: str, path: str) -> None:
  """A local output can be made without creating anything now: a file's name does not end in a
  separator, and the nearest existing directory it would be written in (a directory written into
  is itself that place) is a directory this process can write in (not read-only)."""
  if file_patterns.is_remote(path):
    return
  if kind == OUTPUT_FILE and path.endswith(os.sep):
    raise errors.FlagError("%s=%s ends in %s, naming a directory: it must name a file" %
                           (what, path, os.sep))
  _check_parent_steps(what, path)
  place = os.path.abspath(path)
  if kind != OUTPUT_CONTAINER or not os.path.exists(place):
    place = os.path.dirname(place)
  while not os.path.exists(place):
    place = os.path.dirname(place)
  if not os.path.isdir(place):
    raise errors.FlagError("%s=%s: %s is a file, not a directory" % (what, path, place))
  if not os.access(place, os.W_OK | os.X_OK):
    raise errors.FlagError("%s=%s: cannot write in %s (%s)" % (
        what, path, place, "read-only file system" if _read_only(place) else "permission denied"))


def _check_parent_steps(what: str, path: str) -> None:
  """A `..` in a path steps out of the directory before it, which must exist: the system does not
  resolve `missing/..` (as os.path.abspath does on the string), so such an output would fail
  once written."""
  parts = path.split(os.sep)
  for index, part in enumerate(parts):
    before = os.sep.join(parts[:index]) or (os.sep if path.startswith(os.sep) else ".")
    if part == ".." and not os.path.isdir(before):
      raise errors.FlagError("%s=%s: %s does not exist, so %s%s.. leads nowhere: name the "
                             "directory without it" % (what, path, before, before, os.sep))


def _read_only(directory: str) -> bool:
  return bool(os.statvfs(directory).f_flag & os.ST_RDONLY)


# The inputs of this process's run (what names them, path, identity), as the validation pass
# found them: `atomic_output` never publishes over one.
_RUN_INPUTS = []


def _exported_versions(directory: str) -> list:
  """The numbered versions (`<n>/saved_model.pb`) an export directory holds, sorted by number."""
  if not os.path.isdir(directory):
    return []
  return sorted((name for name in os.listdir(directory) if name.isdigit() and
                 os.path.isfile(os.path.join(directory, name, "saved_model.pb"))), key=int)


def _check_not_in_an_export(what: str, kind: str, path: str) -> None:
  """An output other than an export is not written into a SavedModel's directory (a TF Serving
  version, a TF Hub module), nor under a version's name in an export directory (`<n>` beside
  `<m>/saved_model.pb`), nor, for a directory, into an export directory itself: TF Serving serves
  the highest number it finds, so a training run, a conversion or a file there would become the
  served "model", and files put in a model's directory are not the model's."""
  if file_patterns.is_remote(path):
    return
  place = os.path.realpath(path)
  versions = _exported_versions(place) if kind != OUTPUT_FILE else []
  if versions:
    raise errors.FlagError("%s=%s holds exported versions (%s/saved_model.pb): it is an export "
                           "directory, not one to write into; choose another" %
                           (what, path, versions[0]))
  while True:
    if os.path.isfile(os.path.join(place, "saved_model.pb")):
      raise errors.FlagError("%s=%s is in the SavedModel in %s (saved_model.pb): it is a model's "
                             "directory, not one to write into; choose another" %
                             (what, path, place))
    parent = os.path.dirname(place)
    beside = _exported_versions(parent) if os.path.basename(place).isdigit() else []
    if beside:
      raise errors.FlagError(
          "%s=%s would be version %s of the export directory %s (beside %s/saved_model.pb), "
          "which TF Serving would serve: choose another" % (
              what, path, os.path.basename(place), parent, beside[-1]))
    if parent == place:
      return
    place = parent


def _check_data_is_no_companion(read: list, data_files: Collection[str]) -> None:
  """No data file (an input named in `data_files`) is also a companion input of the run (its
  vocab, config or checkpoint): a pattern like `dir/*` beside `--vocab_file=dir/vocab.txt` would
  make the vocab part of the corpus."""
  for what, path, identity in read:
    if what not in data_files or _is_directory(path):  # --data_dir itself holds, not is, data.
      continue
    for other_what, other_path, other_identity in read:
      if other_what not in data_files and _same(identity, other_identity):
        raise errors.FlagError("%s names %s, which is %s=%s: the run would read it as data too; "
                               "name the data more narrowly" % (what, path, other_what,
                                                                other_path))


def _check_inputs_in_container(what: str, path: str, identity: tuple, read: list,
                               data_files: Collection[str]) -> None:
  """No data file (an input named in `data_files`) lies in the output directory `path` under a
  name the scripts write there (a checkpoint there is read, by design, to continue or
  predict): neither by its own name nor as a hard link the directory holds under such a name."""
  written_there = [] if file_patterns.is_remote(path) or not os.path.isdir(path) else [
      (name, _identity(os.path.join(path, name))) for name in sorted(_list_dir(path))
      if any(fnmatch.fnmatchcase(name, pattern) for pattern in NAMES_WRITTEN_IN_OUTPUT_DIRS)]
  for input_what, input_path, input_identity in read:
    if input_what not in data_files:
      continue
    name = os.path.basename(input_identity[0])
    if (os.path.dirname(input_identity[0]) == identity[0] and
        any(fnmatch.fnmatchcase(name, pattern) for pattern in NAMES_WRITTEN_IN_OUTPUT_DIRS)):
      raise errors.FlagError("%s=%s is in %s=%s under a name the run writes there (%s): move it "
                             "or choose another %s" % (input_what, input_path, what, path, name,
                                                       what))
    for name, there in written_there:
      if input_identity[1] is not None and input_identity[1] == there[1]:
        raise errors.FlagError("%s=%s is the file %s=%s holds as %s (a hard link), a name the "
                               "run writes there: remove that link or choose another %s" % (
                                   input_what, input_path, what, path, name, what))


def _check_not_an_input(path: str) -> None:
  """Raises InputError if `path` is an input of this run (the last line of defence behind
  `check_run_paths`, for outputs whose names a script chooses)."""
  identity = _identity(path)
  for what, input_path, input_identity in _RUN_INPUTS:
    if _same(identity, input_identity):
      raise errors.InputError("%s would overwrite input %s=%s: nothing was replaced" %
                              (path, what, input_path))


def check_run_paths(inputs: Mapping[str, Sequence[str]],
                    outputs: Mapping[str, Tuple[str, Sequence[str]]],
                    data_files: Collection[str] = (), exports: Collection[str] = ()) -> None:
  """Raises FlagError unless a run's outputs can be written without destroying anything else.

  `inputs` maps what names them (e.g. "--input_file") to the paths read; `outputs` maps what
  names them to (kind, paths), the kind OUTPUT_FILE, OUTPUT_DIRECTORY or OUTPUT_CONTAINER.
  Refused: an output of the other kind than an existing path (a file over a directory, a
  directory over a file, a FIFO or device); an output that cannot be written where it would be
  (below a file, on a read-only file system, without permission; checked without creating
  anything); a file or directory output that is an input (by resolved path or by inode, so
  symlinks and hard links count) or, for a directory replaced whole, holds one; two outputs
  that are the same path, or one inside a directory another replaces whole. Directories that
  outputs are written into (OUTPUT_CONTAINER) may be shared and may hold inputs, but not a data
  file (an input whose name is in `data_files`) under a name written there
  (NAMES_WRITTEN_IN_OUTPUT_DIRS). No output but the export directories (those named in
  `exports`) is in a SavedModel or takes a version's place beside one (`_check_not_in_an_export`).
  """
  read = [(what, path, _identity(path)) for what, paths in inputs.items() for path in paths]
  _RUN_INPUTS[:] = read
  _check_data_is_no_companion(read, data_files)
  written = [(what, kind, path, _identity(path))
             for what, (kind, paths) in outputs.items() for path in paths]
  for what, kind, path, identity in written:
    _check_output_kind(what, kind, path)
    _check_can_write(what, kind, path)
    if what not in exports:
      _check_not_in_an_export(what, kind, path)
    if kind == OUTPUT_FILE:
      _check_not_a_model_file(what, path)
    if kind == OUTPUT_CONTAINER:
      _check_inputs_in_container(what, path, identity, read, data_files)
      continue
    for input_what, input_path, input_identity in read:
      if _same(identity, input_identity) or (
          kind == OUTPUT_DIRECTORY and _inside(input_identity, identity)):
        raise errors.FlagError("%s=%s would overwrite input %s=%s" %
                               (what, path, input_what, input_path))
  for index, (what, kind, path, identity) in enumerate(written):
    for other_what, other_kind, other_path, other_identity in written[index + 1:]:
      if kind == other_kind == OUTPUT_CONTAINER:
        continue
      if _same(identity, other_identity) or (
          kind == OUTPUT_DIRECTORY and _inside(other_identity, identity)) or (
          other_kind == OUTPUT_DIRECTORY and _inside(identity, other_identity)):
        raise errors.FlagError("%s=%s and %s=%s are the same output or one holds the other" %
                               (what, path, other_what, other_path))


# ------------------------------------------------------------------------------------------------
# Directories replaced whole: only an earlier output of the same writer, never a training run.
# ------------------------------------------------------------------------------------------------

# The names that only a training run's output_dir holds (fnmatch patterns): no directory output
# ever replaces such a directory, whose checkpoints, settings and label list belong together.
TRAINING_RUN_NAMES = ("checkpoint", "training_settings.json", LOCK_FILE_NAME, "model.ckpt-*")


def _names_matching(directory: str, patterns: Sequence[str]) -> list:
  """The names in `directory` that match one of the fnmatch `patterns`, sorted."""
  return sorted(name.rstrip("/") for name in _list_dir(directory)
                if any(fnmatch.fnmatchcase(name.rstrip("/"), pattern) for pattern in patterns))


def holds_training_run(directory: str) -> bool:
  """Whether `directory` holds a training run's checkpoints or record (TRAINING_RUN_NAMES but
  the lock, which a starting run takes before it trains)."""
  return _is_directory(directory) and any(
      name != LOCK_FILE_NAME for name in _training_run_names(directory))


def _training_run_names(directory: str) -> list:
  """The names in `directory` that only a training run's output_dir holds (TRAINING_RUN_NAMES),
  sorted; none where it holds no training run."""
  return _names_matching(directory, TRAINING_RUN_NAMES)


def _training_run_under(directory: str) -> Optional[str]:
  """A file that marks a training run in `directory` or in any directory below it (its path
  relative to `directory`), or None."""
  walk = _gfile().walk if file_patterns.is_remote(directory) else os.walk
  for parent, _, _ in walk(directory):
    marks = _training_run_names(parent)
    if marks:
      return os.path.relpath(os.path.join(parent, marks[0]), directory)
  return None


# What marks a directory as a model's beside a training run's names (fnmatch patterns): the data
# files of a TensorFlow checkpoint or SavedModel, a SavedModel or TF1 Hub module, safetensors,
# Keras weights and Hugging Face's PyTorch and TF weights, a conversion's mark. A file output never
# replaces a file of such a directory (its config, vocab, label list and weights belong together).
MODEL_NAMES = ("*.data-[0-9][0-9][0-9][0-9][0-9]-of-[0-9][0-9][0-9][0-9][0-9]", "saved_model.pb",
               "tfhub_module.pb", "*.safetensors", "*.weights.h5", "pytorch_model*.bin",
               "tf_model.h5", ".convert_checkpoint.json")


def model_files(directory: str) -> list:
  """The names in `directory` that mark it as a model's (MODEL_NAMES), sorted."""
  return _names_matching(directory, MODEL_NAMES)


# How many directories above a file's own a model's directory is looked for: a model's files lie
# up to this deep below it (a SavedModel's assets/ and assets.extra/, a KerasHub preset's
# assets/tokenizer/).
MODEL_FILE_DEPTH = 2


def _check_not_a_model_file(what: str, path: str) -> None:
  """A file output in a directory that holds a training run, or below one that holds a model
  (MODEL_NAMES: in it or up to MODEL_FILE_DEPTH directories further down), may not replace a
  file there: its checkpoint, config, vocab, assets and label list belong together (a Google
  release, a conversion, a TF Serving version and its vocab asset, a KerasHub preset, a Hugging
  Face model, a training run's checkpoints). In a training run's directory it may not take a name
  of the run's files either (TRAINING_RUN_NAMES, NAMES_WRITTEN_IN_OUTPUT_DIRS, and the config and
  vocab read beside a model, RUN_COMPANION_NAMES), though the run has none yet: the run would read
  such a file as its own (a label list of JSON lines, say, naming its outputs)."""
  target = _written_path(path)
  directory = os.path.dirname(os.path.abspath(target))
  if file_patterns.is_remote(path) or not os.path.isdir(directory):
    return
  name = os.path.basename(target)
  if _training_run_names(directory) and (os.path.lexists(target) or any(
      fnmatch.fnmatchcase(name, pattern) for pattern in
      TRAINING_RUN_NAMES + NAMES_WRITTEN_IN_OUTPUT_DIRS + RUN_COMPANION_NAMES)):
    raise errors.FlagError("%s=%s is a file of the training run in %s: write it elsewhere" %
                           (what, path, directory))
  if not os.path.lexists(target):
    return
  holder = directory
  for _ in range(MODEL_FILE_DEPTH + 1):
    model = model_files(holder)
    if model:
      raise errors.FlagError("%s=%s is a file of the model in %s (with %s): write it elsewhere" %
                             (what, path, holder, model[0]))
    holder = os.path.dirname(holder)


def file_sha256(path: str) -> str:
  """The SHA-256 of a file's bytes, read in blocks (local or remote paths); OSError (or
  TensorFlow's OpError, remotely) when it cannot be read."""
  digest = hashlib.sha256()
  opener = _gfile().GFile if file_patterns.is_remote(path) else open
  with opener(path, "rb") as reader:
    for block in iter(lambda: reader.read(_HASH_BLOCK_BYTES), b""):
      digest.update(block)
  return digest.hexdigest()


def _files_under(directory: str) -> list:
  """The paths of every file below `directory`, relative to it, sorted."""
  walk = _gfile().walk if file_patterns.is_remote(directory) else os.walk
  return sorted(os.path.relpath(os.path.join(parent, name), directory)
                for parent, _, names in walk(directory) for name in names)


def write_files_mark(directory: str, mark_name: str, fields: Mapping[str, Any]) -> None:
  """Writes `mark_name` into `directory` (an output about to be published whole): a JSON object
  of `fields`, `files` (every file below the directory) and `sha256` (each file's digest).
  `check_replaceable_directory` reads it to tell an earlier output of this writer, as written,
  from a directory holding anything else or files edited since."""
  files = _files_under(directory)
  marked = dict(fields, files=files,
                sha256={name: file_sha256(os.path.join(directory, name)) for name in files})
  write_text(os.path.join(directory, mark_name),
             json.dumps(marked, indent=2, sort_keys=True) + "\n")


def read_files_mark(directory: str, mark_name: str) -> dict:
  """The fields of the mark `mark_name` an earlier output wrote into `directory`
  (`write_files_mark`); {} when there is none, or it is unreadable or not a JSON object."""
  path = os.path.join(directory, mark_name)
  if not _exists(path):
    return {}
  try:
    if file_patterns.is_remote(path):
      with _gfile().GFile(path) as reader:
        text = reader.read()
    else:
      with open(path, encoding="utf-8") as reader:
        text = reader.read()
    fields = json.loads(text)
  except (OSError, ValueError):  # Unreadable, not JSON.
    return {}
  return fields if isinstance(fields, dict) else {}


def files_changed_since_marked(directory: str, mark_name: str) -> list:
  """The files that the earlier output marked by `mark_name` wrote into `directory` and that are
  still there but changed since (their digest differs from the mark's), sorted: e.g. a
  converted model's config or vocab edited in place."""
  mark = read_files_mark(directory, mark_name)
  digests = mark.get("sha256") if isinstance(mark.get("sha256"), dict) else {}
  present = set(_files_under(directory)) if digests else set()
  return sorted(name for name, digest in digests.items()
                if name in present and digest != file_sha256(os.path.join(directory, name)))


def _files_not_as_written(directory: str, mark_name: str) -> list:
  """The files below `directory` that the earlier output marked by `mark_name` did not write, or
  that changed since (`files_changed_since_marked`), sorted; every file when the mark is
  unreadable."""
  mark = read_files_mark(directory, mark_name)
  written = mark.get("files") if isinstance(mark.get("files"), list) else []
  changed = files_changed_since_marked(directory, mark_name)
  return [name for name in _files_under(directory) if name != mark_name and (
      name not in written or name in changed)]


def check_replaceable_directory(path: str, what: str, writer: str,
                                mark_name: Optional[str] = None,
                                written_names: Sequence[str] = (),
                                overwrite_flag: Optional[str] = None,
                                overwrite: bool = False) -> None:
  """Raises FlagError unless the directory output `path` may be replaced whole: it is missing,
  empty, or an earlier output of `writer`: holding only the files its mark (`mark_name`, written
  by `write_files_mark`) lists, as they were written, or, for a writer whose files' names say
  what they are, only files named as `written_names` (fnmatch patterns); or `overwrite` is set
  (`overwrite_flag` names the flag that sets it), which is logged with what it replaces. A file
  someone added (notes, predictions) or edited is never lost unasked, and a directory holding a
  training run (TRAINING_RUN_NAMES), at any depth, never replaced. A symlink is judged by
  what it points to (`_written_path`), which is what would be replaced."""
  path = _written_path(path)
  if not _is_directory(path):
    return
  names = {name.rstrip("/") for name in _list_dir(path)}
  training = _training_run_under(path)
  if training:
    raise errors.FlagError("%s=%s holds a training run (%s): write to another directory" %
                           (what, path, training))
  if not names:
    return
  if overwrite:
    files = _files_under(path)
    logging.warning("Replacing %s=%s and the %d files in it (%s%s): %s was given", what, path,
                    len(files), ", ".join(files[:3]), ", ..." if len(files) > 3 else "",
                    overwrite_flag or "overwrite")
    return
  replace = ("pass %s to replace it, or choose another directory" % overwrite_flag
             if overwrite_flag else "choose another directory, or remove it first")
  if mark_name is None:
    unwritten, how = [name for name in _files_under(path) if not any(
        fnmatch.fnmatchcase(name, pattern) for pattern in written_names)], "did not write"
  elif mark_name not in names:
    raise errors.FlagError("%s=%s is not empty and is not an earlier output of %s (it holds %s): "
                           "%s" % (what, path, writer, ", ".join(sorted(names)[:3]), replace))
  else:
    unwritten, how = (_files_not_as_written(path, mark_name),
                      "did not write or that changed since")
  if unwritten:
    raise errors.FlagError("%s=%s holds files %s %s (%s): %s" %
                           (what, path, writer, how, ", ".join(unwritten[:3]), replace))


class OutputDirLock:
  """An exclusive lock on an output directory: `output_dir/.lock`, holding `pid host since`.

  On a local file system the file is also `flock`ed, so the lock is exclusive even between
  processes starting at the same moment and dies with its process (SIGKILL included); a lock file
  left by a process that is gone is taken over with a warning. Elsewhere (e.g. gs://) the file is
  the lock: a holder on this host that is no longer running is taken over, any other holder must
  be removed by hand. Use as a context manager; `errors.TrainingError` names the holder.
  """

  def __init__(self, output_dir: str):
    self.output_dir = output_dir
    self.path = os.path.join(output_dir, LOCK_FILE_NAME)
    self._fd = None

  def __enter__(self) -> "OutputDirLock":
    self.acquire()
    return self

  def __exit__(self, *unused_exc_info) -> None:
    self.release()

  def _describe(self, holder: str) -> str:
    """`pid P on host H since <local time>` from a lock file's `pid host since` line."""
    fields = holder.split()
    try:
      since = time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(float(fields[2])))
    except (IndexError, ValueError):
      return "an unknown process (the lock file holds %r)" % holder
    return "pid %s on host %s since %s" % (fields[0], fields[1], since)

  def _is_gone(self, holder: str) -> bool:
    """Whether the holder is a process of this host that is no longer running."""
    fields = holder.split()
    if len(fields) < 2 or fields[1] != socket.gethostname() or not fields[0].isdigit():
      return False
    return not _process_is_alive(int(fields[0]))

  def _in_use(self, holder: str) -> errors.TrainingError:
    return errors.TrainingError(
        "`output_dir`=%s is in use by %s (lock file %s): only one job may write to a directory. "
        "If that job is gone, remove the lock file" % (self.output_dir, self._describe(holder),
                                                        self.path))

  def _record(self) -> str:
    return "%d %s %.0f\n" % (os.getpid(), socket.gethostname(), time.time())

  def acquire(self) -> None:
    """Takes the lock, or raises TrainingError naming its holder (or why the directory cannot
    be written)."""
    try:
      _gfile().makedirs(self.output_dir)
      if file_patterns.is_remote(self.output_dir):
        self._acquire_remote()
      else:
        self._acquire_local()
    except (_tensorflow().errors.OpError, OSError) as error:
      raise errors.TrainingError("`output_dir`=%s cannot be written (%s)" %
                                 (self.output_dir, errors.first_line(error))) from error

  def _acquire_local(self) -> None:
    while True:
      fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
      try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
      except BlockingIOError:
        holder = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
        os.close(fd)
        raise self._in_use(holder) from None
      # A releasing holder unlinks the file before unlocking it: make sure the locked file is
      # still the one at the path, else lock the new one.
      try:
        same_file = os.stat(self.path).st_ino == os.fstat(fd).st_ino
      except FileNotFoundError:
        same_file = False
      if same_file:
        break
      os.close(fd)
    try:
      previous = os.pread(fd, 4096, 0).decode("utf-8", "replace").strip()
      os.ftruncate(fd, 0)
      os.pwrite(fd, self._record().encode("utf-8"), 0)
    except OSError:
      os.close(fd)
      raise
    if previous:
      logging.warning("Taking over the lock of %s on `output_dir`=%s: that process is no longer "
                      "running", self._describe(previous), self.output_dir)
    self._fd = fd

  def _acquire_remote(self) -> None:
    gfile = _gfile()
    if gfile.exists(self.path):
      with gfile.GFile(self.path) as f:
        holder = f.read().strip()
      if not self._is_gone(holder):
        raise self._in_use(holder)
      logging.warning("Taking over the lock of %s on `output_dir`=%s: that process is no longer "
                      "running", self._describe(holder), self.output_dir)
    with gfile.GFile(self.path, "w") as f:
      f.write(self._record())

  def release(self) -> None:
    """Removes the lock file (only this holder's) and unlocks."""
    if self._fd is not None:
      remove_quietly(self.path)
      os.close(self._fd)
      self._fd = None
    elif file_patterns.is_remote(self.output_dir) and _gfile().exists(self.path):
      with _gfile().GFile(self.path) as f:
        holder = f.read().split()
      if holder[:2] == [str(os.getpid()), socket.gethostname()]:
        remove_quietly(self.path)
