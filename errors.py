# coding=utf-8
"""Errors a user can fix, the checks that find them before any work, and how a script says so.

Every module raises a subclass of `InputError` (`FlagError`, `TrainingError`,
`task_files.BadInputError`, `squad.SquadFormatError`, `modeling.ConfigError`, ...) with a message
that names the flag or the file (and line) at fault and says what is allowed. Errors of the
libraries we call on a user's file (json, TensorFlow's readers, safetensors, SentencePiece) are
caught where the file is known and raised again as an `InputError` that names it (`named`) or
quotes them in one line (`first_line`).

`run_script` is how every command-line script runs its `main`: it parses the flags, runs the
validation pass (every numeric flag against `FLAG_RULES`, the flags that go together, the input
files a script names) and then `main`; any `InputError`, or an `OSError` on a named file, ends
the script with one line `<script>: error: <message>` and exit status 1, before anything was
written when the validation pass finds it. Anything else is a bug and keeps its traceback;
BERT_TRACEBACK=1 shows the traceback of a one-line error too.

This module imports no TensorFlow, so that the data scripts (create_pretraining_data.py,
create_vocab.py) can use it and still fork their workers; `cli.run_script` adds the checks that
need TensorFlow (config, checkpoint, TF_CONFIG).
"""

import dataclasses
import errno
import glob
import math
import os
import re
import stat
import sys
from typing import Any, Callable, Optional, Union

from absl import app
from absl import flags

# Set to 1 to see the traceback behind a one-line error (for debugging; users need not).
TRACEBACK_VARIABLE = "BERT_TRACEBACK"


class InputError(ValueError):
  """Input the user can fix; the message names the flag, file or line and what is allowed."""


class FlagError(InputError):
  """A flag is missing, out of range or does not fit another: the message names the flag."""


class TrainingError(InputError):
  """A run cannot continue: the loss became NaN or Inf, no checkpoint is readable, the output
  directory is in use or cannot be written, `--init_checkpoint` does not fit the model. The
  message says what to do; `cli.run_script` prints it as one line."""


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
  reader. `what` says what the file is for, e.g. "--vocab_file"."""
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


# ------------------------------------------------------------------------------------------------
# The validation pass.
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class FlagRule:
  """What a numeric flag's value must be: `allowed(value)` is true; `what` describes it."""
  allowed: Callable[[Any], bool]
  what: str


_POSITIVE = FlagRule(lambda v: v >= 1, "an integer >= 1")
_NON_NEGATIVE = FlagRule(lambda v: v >= 0, "an integer >= 0")
_POSITIVE_NUMBER = FlagRule(lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
_FRACTION = FlagRule(lambda v: 0 <= v <= 1, "a number in [0, 1]")  # NaN fails every comparison.
_OPEN_PROBABILITY = FlagRule(lambda v: 0 < v < 1, "a number strictly between 0 and 1")
_FINITE = FlagRule(math.isfinite, "a finite number")
_SEED = FlagRule(lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)")
_SEQ_LENGTH = FlagRule(lambda v: v >= 3, "an integer >= 3 (room for [CLS], a token and [SEP])")

# The rule of every numeric flag of every script, by name: one name means one thing in all of them
# (tests/test_validation.py fails for a numeric flag missing here: it would accept -1). A flag whose
# value is None (not given, no default) is not checked.
FLAG_RULES = {
    "batch_size": _POSITIVE, "train_batch_size": _POSITIVE, "eval_batch_size": _POSITIVE,
    "predict_batch_size": _POSITIVE, "phase2_train_batch_size": _POSITIVE,
    "gradient_accumulation_steps": _POSITIVE, "save_checkpoints_steps": _POSITIVE,
    "iterations_per_loop": _POSITIVE, "keep_checkpoint_max": _POSITIVE,
    "num_tpu_cores": _POSITIVE, "max_eval_steps": _POSITIVE, "num_train_steps": _POSITIVE,
    "num_warmup_steps": _NON_NEGATIVE, "phase2_steps": _NON_NEGATIVE,
    "phase2_num_warmup_steps": _NON_NEGATIVE, "eval_every_steps": _NON_NEGATIVE,
    "early_stopping_patience": _NON_NEGATIVE,
    "max_seq_length": _SEQ_LENGTH, "phase2_max_seq_length": _SEQ_LENGTH,
    "max_predictions_per_seq": _POSITIVE, "phase2_max_predictions_per_seq": _POSITIVE,
    "doc_stride": _POSITIVE, "max_query_length": _POSITIVE, "max_answer_length": _POSITIVE,
    "n_best_size": _POSITIVE, "fill_mask_top_k": _POSITIVE, "random_seed": _SEED,
    "learning_rate": _POSITIVE_NUMBER, "phase2_learning_rate": _POSITIVE_NUMBER,
    "num_train_epochs": _POSITIVE_NUMBER, "warmup_proportion": _FRACTION,
    "multi_label_threshold": _OPEN_PROBABILITY, "null_score_diff_threshold": _FINITE,
    "masked_lm_prob": _FRACTION, "short_seq_prob": _FRACTION,
    "dupe_factor": _POSITIVE, "num_workers": _POSITIVE, "num_shards": _POSITIVE,
    "shard_index": _NON_NEGATIVE, "chunk_size_kb": _POSITIVE, "shuffle_buffer_size": _POSITIVE,
    "vocab_size": _POSITIVE, "max_unique_chars": _POSITIVE, "max_token_length": _POSITIVE,
    "max_input_words": _POSITIVE, "num_iterations": _POSITIVE,
    "slack_ratio": FlagRule(lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "max_request_rows": _POSITIVE, "max_request_tokens": _POSITIVE,
}


def flag_value(name: str) -> Any:
  """The value of the flag `name`, or None where the running script does not define it."""
  return flags.FLAGS[name].value if name in flags.FLAGS else None


def _check_flag_values() -> None:
  """Each flag of FLAG_RULES that has a value obeys its rule."""
  for name, rule in FLAG_RULES.items():
    value = flag_value(name)
    if value is not None and not rule.allowed(value):
      raise FlagError("--%s=%s: must be %s" % (name, value, rule.what))


def _check_flag_combinations() -> None:
  """The rules that tie two flags together."""
  steps = flag_value("gradient_accumulation_steps")
  for batch_flag in ("train_batch_size", "phase2_train_batch_size"):
    batch = flag_value(batch_flag)
    if steps and batch and batch % steps:
      raise FlagError("--gradient_accumulation_steps=%d must divide --%s=%d (each update is that "
                      "many equal micro-batches)" % (steps, batch_flag, batch))
  shard_index, num_shards = flag_value("shard_index"), flag_value("num_shards")
  if shard_index is not None and shard_index >= num_shards:
    raise FlagError("--shard_index=%d must be below --num_shards=%d" % (shard_index, num_shards))
  for prefix in ("", "phase2_"):
    predictions = flag_value(prefix + "max_predictions_per_seq")
    length = flag_value(prefix + "max_seq_length")
    if predictions and length and predictions > length:
      raise FlagError("--%smax_predictions_per_seq=%d must not exceed --%smax_seq_length=%d" %
                      (prefix, predictions, prefix, length))
  _check_request_tokens()


def _check_request_tokens() -> None:
  """An export (--export_dir) serves at least one row of --max_seq_length tokens."""
  tokens, length = flag_value("max_request_tokens"), flag_value("max_seq_length")
  if flag_value("export_dir") and tokens and length and tokens < length:
    raise FlagError("--max_request_tokens=%d must be at least --max_seq_length=%d (one row of "
                    "the longest length) for --export_dir" % (tokens, length))


def _check_vocab_paths() -> None:
  """`--vocab_file` and `--spm_model_file`, where a script has them, are readable files."""
  for name in ("vocab_file", "spm_model_file"):
    path = flag_value(name)
    if path:
      check_regular_file(path, "--" + name)


def check_flags(check_input_paths: Optional[Callable[[], None]] = None) -> None:
  """The validation pass `run_script` runs before `main`: every numeric flag in range, the flags
  that go together consistent, the vocab readable, then `check_input_paths` (the script's other
  files). Raises FlagError (or a reader's InputError) naming the first flag or file at fault."""
  _check_flag_values()
  _check_flag_combinations()
  _check_vocab_paths()
  if check_input_paths:
    check_input_paths()


# What an output flag names (atomic_files.check_run_paths): a file or a directory written whole
# (replacing what was there), or a directory that outputs are written into.
OUTPUT_FILE, OUTPUT_DIRECTORY, OUTPUT_CONTAINER = "file", "directory", "container"

# The flags that name what a run reads, in every script (a flag a script lacks is skipped).
INPUT_FLAGS = ("input_file", "phase2_input_file", "vocab_file", "spm_model_file",
               "bert_config_file", "init_checkpoint", "hf_model_path", "keras_hub_preset",
               "data_dir", "stdlib_dir", "train_file", "dev_file", "test_file", "predict_file")
# Input flags whose value is a file name in --data_dir where the script has that flag.
DATA_DIR_FILE_FLAGS = ("train_file", "dev_file", "test_file")
# Input flags naming data files (not models): none may lie in an output directory under a name
# the run writes there (NAMES_WRITTEN_IN_OUTPUT_DIRS).
DATA_FILE_FLAGS = ("input_file", "phase2_input_file", "train_file", "dev_file", "test_file",
                   "predict_file")
# The flags that name what a run writes, and their kind; a script whose flag means another kind
# says so to `run_script`.
OUTPUT_FLAGS = {"output_file": OUTPUT_FILE, "output_dir": OUTPUT_CONTAINER,
                "export_dir": OUTPUT_CONTAINER}
# The names the scripts give what they write into an output directory (feature caches, results,
# predictions, label lists, checkpoints, TensorBoard events): an input there under such a name
# would be replaced, or read while the run writes it.
NAMES_WRITTEN_IN_OUTPUT_DIRS = ("*.tf_record", "*_results.txt", "*_results.tsv",
                                "*_predictions.txt", "*_conlleval.txt", "*predictions.json",
                                "null_odds.json", "label_list.txt", "tag_list.txt", "checkpoint",
                                "model.ckpt-*", "training_settings.json",
                                "events.out.tfevents.*")

# An output flag's kind, or a function of the flags giving (kind, paths) where the paths are not
# the flag's value as it stands (shard suffixes).
OutputFlag = Union[str, Callable[[], tuple]]


def _input_paths(name: str, value: str) -> list:
  """The paths an input flag names: its comma-separated parts, glob patterns expanded; a
  checkpoint prefix's files."""
  if name == "init_checkpoint":
    return [value] + glob.glob(glob.escape(value) + ".*")
  if name in DATA_DIR_FILE_FLAGS and flag_value("data_dir"):
    value = os.path.join(flag_value("data_dir"), value)
  paths = []
  for part in (part.strip() for part in value.split(",")):
    if part:
      paths.extend(([] if "://" in part else glob.glob(part)) or [part])
  return paths


def _output_paths(value: str, declared: OutputFlag) -> tuple:
  """(kind, paths) of an output flag's value."""
  if callable(declared):
    return declared()
  if declared == OUTPUT_FILE:
    return declared, [part.strip() for part in value.split(",") if part.strip()]
  return declared, [value]


def check_run_paths(outputs: Optional[dict[str, OutputFlag]] = None) -> None:
  """Checks the running script's outputs against its inputs and each other
  (`atomic_files.check_run_paths`): `outputs` overrides OUTPUT_FLAGS by flag name."""
  import atomic_files  # pylint: disable=g-import-not-at-top  # It imports this module.
  inputs = {"--" + name: _input_paths(name, flag_value(name))
            for name in INPUT_FLAGS if flag_value(name)}
  declared = dict(OUTPUT_FLAGS, **(outputs or {}))
  written = {"--" + name: _output_paths(flag_value(name), kind)
             for name, kind in declared.items() if flag_value(name)}
  atomic_files.check_run_paths(inputs, written)


# ------------------------------------------------------------------------------------------------
# Running a script.
# ------------------------------------------------------------------------------------------------


def _exit_with_error(message: str) -> None:
  """Ends the script with `<script>: error: <message>` on one line and exit status 1."""
  raise SystemExit("%s: error: %s" % (os.path.basename(sys.argv[0]),
                                      " ".join(str(message).split("\n"))))


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parse of argv, with a value of the wrong type (or an unknown flag) ended as one line
  naming the flag, like every other bad input."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    _exit_with_error(str(error).replace("flag --", "--", 1))


def _is_disk_full(error: OSError) -> bool:
  """A full disk or quota: the user's to fix (`atomic_files` names the output in the message)."""
  return error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def run_script(main: Callable[[list], Any],
               check_input_paths: Optional[Callable[[], None]] = None,
               outputs: Optional[dict[str, OutputFlag]] = None) -> None:
  """`app.run(main)` after the validation pass (`check_flags(check_input_paths)`). An
  `InputError` from anywhere, or an `OSError` on a named file or of a full disk, ends
  the script with one line on stderr (`<script>: error: <message>`, exit status 1) instead of a
  traceback, unless BERT_TRACEBACK=1. Anything else is a bug and keeps its traceback. The pass
  ends with `check_run_paths(outputs)`: no output may replace an input, another output or a path
  of the other kind."""

  def main_with_clear_errors(argv):
    try:
      check_flags(check_input_paths)
      check_run_paths(outputs)
      return main(argv)
    except (InputError, OSError) as error:
      if (isinstance(error, OSError) and not (error.filename or _is_disk_full(error)) or
          os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")):
        raise
      _exit_with_error(str(error))

  app.run(main_with_clear_errors, flags_parser=_parse_flags)
