# coding=utf-8
"""Errors a user can fix, and how a library names the setting or file at fault.

Every module raises a subclass of `InputError` (`FlagError`, `TrainingError`,
`task_files.BadInputError`, `squad_data.SquadFormatError`, `modeling.ConfigError`, ...) with a
message that names the setting or the file (and line) at fault and says what is allowed. Errors of
the libraries we call on a user's file (json, TensorFlow's readers, safetensors, SentencePiece) are
caught where the file is known and raised again as an `InputError` that names it (`named`) or
quotes them in one line (`first_line`).

A library module names a setting in backquotes, as a Python caller knows it ("`learning_rate`
must be > 0, got -1", "`num_train_epochs`=0.5 ..."), never as a command-line flag: the same call
serves scripts and Python code. The command line is the scripts' concern: `cli.run_script` ends a
script on any `InputError` with one line (`<script>: error: <message>`) instead of a traceback,
and there, as in the script's log, `worded` turns each backquoted setting that is one of the
script's flags into `--learning_rate`.

This module imports neither TensorFlow nor absl's flags: every module can import it.
"""

import os
import re
import stat
from typing import Callable


class InputError(ValueError):
  """Input the user can fix; the message names the setting, file or line and what is allowed."""


class FlagError(InputError):
  """A setting (a flag, on the command line) is missing, out of range or does not fit another:
  the message names it."""


class TrainingError(InputError):
  """A run cannot continue: the loss became NaN or Inf, no checkpoint is readable, the output
  directory is in use or cannot be written, `init_checkpoint` does not fit the model. The
  message says what to do; `cli.run_script` prints it as one line."""


# A setting's name as a library message quotes it; a `=value` right after it is no part of it.
_SETTING_NAME = re.compile(r"`([a-z][a-z0-9_]*)`")


def worded(text: str, setting: Callable[[str], str]) -> str:
  """`text` with each backquoted setting name replaced by `setting(name)` (a `=value` after it
  stays): how the command line words "`learning_rate` must be > 0" as "--learning_rate must be
  > 0" (`cli.as_flags`). Text without backquoted names is returned unchanged."""
  return _SETTING_NAME.sub(lambda match: setting(match.group(1)), text)


def named(path: str, error: BaseException) -> str:
  """`path: <what went wrong>` for a library's error on a user's file, on one line."""
  what = str(error).strip().splitlines()
  return "%s: %s%s" % (path, type(error).__name__ + ": " if what else type(error).__name__,
                       what[0] if what else "")


def first_line(error: BaseException) -> str:
  """`<type>: <first line of the message>`, without TensorFlow's op and function decorations."""
  message = getattr(error, "message", None) or str(error) or type(error).__name__
  message = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "",
                   message.strip().splitlines()[0])
  return "%s: %s" % (type(error).__name__, message)


def check_regular_file(path: str, what: str) -> None:
  """Raises InputError unless the local `path` is a readable regular file (remote `scheme://`
  paths are left to their reader): a directory, FIFO or device would hang or fail deep inside a
  reader. `what` says what the file is for, e.g. "`vocab_file`"."""
  if "://" in path:  # file_patterns.is_remote (file_patterns imports this module).
    return
  if not os.path.exists(path):
    raise InputError("%s: %s does not exist" % (what, path))
  if os.path.isdir(path):
    raise InputError("%s: %s is a directory, not a file" % (what, path))
  if not stat.S_ISREG(os.stat(path).st_mode):
    raise InputError("%s: %s is not a regular file (a FIFO, socket or device)" % (what, path))
  if not os.access(path, os.R_OK):
    raise InputError("%s: %s cannot be read (permission denied)" % (what, path))


# How much of a file `check_text_file` reads to tell text from a binary file.
TEXT_CHECK_BYTES = 4096


def check_text_file(path: str, what: str) -> None:
  """`check_regular_file`, and a local file with a NUL byte in its first TEXT_CHECK_BYTES is an
  InputError naming it: text has none, while a TFRecord (the length of its first record), UTF-16
  text or a compressed file has some at once, and read as lines it would become rows of its
  bytes (or "unknown label '\\x000\\x00'")."""
  check_regular_file(path, what)
  if "://" in path:
    return
  with open(path, "rb") as reader:
    start = reader.read(TEXT_CHECK_BYTES)
  if b"\0" in start:
    raise InputError("%s: %s is not UTF-8 text (it holds NUL bytes: a TFRecord, UTF-16 or "
                     "compressed file?): name only text files" % (what, path))


# A TF1 Hub module (`hub.Module`'s format) holds this file beside its saved_model.pb.
_TF1_HUB_MODULE_FILE = "tfhub_module.pb"


def check_tf_hub_encoder_directory(path: str, what: str) -> None:
  """Raises InputError unless `path` is a local directory holding a TF2 SavedModel (`what` names
  it, e.g. "--bert_hub_module_handle"). A URL (nothing is downloaded) and a TF1 Hub module are
  refused with what to do instead: TF2's tensorflow_hub has no `hub.Module`, and `hub.load` gives
  such a module's signatures, not a model to fine-tune."""
  if "://" in path:
    raise InputError(
        "%s=%s: nothing is downloaded at run time: download the model (tfhub.dev and Kaggle "
        "serve it as a .tar.gz), unpack it and pass its directory" % (what, path))
  if not os.path.isdir(path):
    raise InputError("%s=%s is not a directory (a TF Hub SavedModel's)" % (what, path))
  if os.path.exists(os.path.join(path, _TF1_HUB_MODULE_FILE)):
    raise InputError(
        "%s=%s is a TF1 Hub module (%s): TF2 has no hub.Module to fine-tune it (hub.load gives "
        "only its signatures): use the TF2 SavedModel of the same BERT (tfhub.dev's version 3 "
        "and later, or Kaggle's \"tensorflow2\" variation)" % (what, path, _TF1_HUB_MODULE_FILE))
  if not os.path.exists(os.path.join(path, "saved_model.pb")):
    raise InputError("%s=%s holds no saved_model.pb: not a TF Hub SavedModel" % (what, path))
