# coding=utf-8
"""Everything about checkpoints that goes by name: Google's format, training state and its files.

The original's checkpoints are TF1 name-based checkpoints, and users hold many of them. Every
checkpoint this project reads or writes is one: released models, `--init_checkpoint`s, training
checkpoints and converted weights. This module owns that format in one place:

- Names. Keras 3 gives each variable a `.path` from the nesting of the layers that created it, and
  the layers are named after the original's TF1 scopes, so a path *is* a Google name once the
  task model's own name is dropped (`checkpoint_variables`; DESIGN.md states the rule).
- Reading and writing (`write_checkpoint`, `save_checkpoint`, `init_from_checkpoint`). Nothing is
  read on trust (`open_checkpoint`, `check_fits`): the files must be there and as large as the
  index says, every variable's shape and dtype must fit the model before any is assigned, and a
  `checkpoint` state file may only name checkpoints in its own directory. Missing or damaged files
  are an `UnreadableCheckpointError`, checkpoints that do not fit a `CheckpointError`, each naming
  the checkpoint (and variable) on one line.
- Training state, as the original's Estimator saved it: the model's variables, each optimizer
  slot as `<name>/adam_m` and `<name>/adam_v`, and `global_step` (`training_state_variables`).
- The files of a training run: `output_dir/model.ckpt-<step>` and the `checkpoint` state file,
  replaced only once a checkpoint is complete; retention (`keep_checkpoint_max`); the fallback
  to the newest intact checkpoint when a newer one is damaged, for resuming training; and the
  strict restore of evaluation, prediction and export (`restore_model`: the newest checkpoint, or
  an init checkpoint with the task head, or an error).

It imports no other module of the project but `atomic_files`, so modeling.py and optimization.py
can both use it.
"""

import dataclasses
import os
import re
from typing import Any, Callable, Mapping, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import atomic_files
import errors
import file_patterns

CHECKPOINT_BASENAME = "model.ckpt"
BEST_DIR = "best"  # Where a run keeps its best checkpoint (`--keep_best_checkpoint`).
# The optimizer's per-variable slots, stored as `<variable name>/<slot>`, as the original's.
SLOT_NAMES = ("adam_m", "adam_v")
GLOBAL_STEP = "global_step"


class CheckpointError(errors.InputError):
  """A checkpoint cannot be used: there is none at the path, or its variables do not fit the
  model (names, shapes, dtypes). The message names the checkpoint and the variable."""


class UnreadableCheckpointError(CheckpointError):
  """A checkpoint's files are missing, cut short or corrupt: damage, which
  `restore_newest_intact` skips for an older checkpoint."""


# ------------------------------------------------------------------------------------------------
# Names.
# ------------------------------------------------------------------------------------------------


def _is_encoder(layer: keras.layers.Layer) -> bool:
  """Whether `layer` is BERT's encoder (`modeling.BertModel` says so with a class attribute, so
  that this module need not import modeling)."""
  return bool(getattr(layer, "is_bert_encoder", False))


def path_below_model(variable) -> str:
  """A variable's Keras path without its first part, the name of the outermost model.

  For a task model this is the variable's Google name. Weight-decay exclusions are matched against
  it (optimization.py), so that a model named e.g. `bias_probe` does not exempt all its variables.
  """
  path = re.sub(r":\d+$", "", getattr(variable, "path", None) or variable.name)
  return path.split("/", 1)[1] if "/" in path else path


def checkpoint_variables(model: keras.Model) -> dict:
  """Maps Google checkpoint names to the model's variables.

  The rule (DESIGN.md): a `BertModel` keeps its own name (`bert/encoder/...`); any other model
  drops its own name, so a task model holding `bert` and `cls` layers gives `bert/...`, `cls/...`.
  Paths are taken relative to where the model sits, so a `BertModel` nested in a task model
  (`task.bert`) maps to the same names as a bare one.

  Raises:
    ValueError: if the model has no variables yet or two variables map to one name.
  """
  if not model.weights or model.path is None:
    raise ValueError("model %s has no variables yet: call model.build() or call it once first" %
                     model.name)
  scope = model.path.rsplit("/", 1)[0] if "/" in model.path else ""
  if not _is_encoder(model):
    scope = model.path
  names = {}
  for variable in model.weights:
    if scope and not variable.path.startswith(scope + "/"):
      raise ValueError("variable %s of model %s lies outside its scope %s" %
                       (variable.path, model.name, scope))
    name = variable.path[len(scope) + 1:] if scope else variable.path
    if name in names and names[name] is not variable:
      raise ValueError("two variables of model %s map to checkpoint name %s" % (model.name, name))
    names[name] = variable
  return names


def write_checkpoint(tensors: Mapping[str, Any], prefix: str) -> str:
  """Writes a TF V2 name-based checkpoint (`<prefix>.index`, `<prefix>.data-00000-of-00001`).

  This is the format of Google's released checkpoints: `tf.train.load_checkpoint(prefix)` reads it.
  Any names and dtypes (float32 weights, optimizer slots, int64 `global_step`) may be stored.

  Args:
    tensors: name -> array-like, tf.Tensor or variable.
    prefix: checkpoint path prefix, e.g. `out/model.ckpt-1000`; its directory is created.

  Returns:
    The prefix.
  """
  if not tensors:
    raise ValueError("write_checkpoint(%s): nothing to write" % prefix)
  directory = os.path.dirname(prefix)
  if directory:
    tf.io.gfile.makedirs(directory)
  names = sorted(tensors)
  values = []
  for name in names:
    value = tensors[name]
    if isinstance(value, keras.Variable):
      value = value.value
    values.append(tf.convert_to_tensor(value))
  try:
    with tf.device("/cpu:0"):
      tf.raw_ops.SaveV2(prefix=prefix, tensor_names=names, shape_and_slices=[""] * len(names),
                        tensors=values)
  except BaseException:
    # SaveV2 writes `<file>.tempstate<n>` and renames each file when it is complete: after a
    # failure (e.g. a full disk) the prefix may hold temporaries or a data file without its index.
    for path in tf.io.gfile.glob(prefix + ".*"):
      tf.io.gfile.remove(path)
    raise
  return prefix


def save_checkpoint(model: keras.Model, prefix: str) -> str:
  """Writes the model's variables under their Google names (see `checkpoint_variables`)."""
  return write_checkpoint(checkpoint_variables(model), prefix)


def resolve_checkpoint_path(checkpoint_path: str) -> str:
  """Returns the checkpoint prefix for a prefix, or for a directory: the run's model, which is
  the best checkpoint it kept (`best_checkpoint`) where it kept one, else its `checkpoint`
  file's latest entry, else its only `*.index` file.

  Raises:
    UnreadableCheckpointError: the prefix's `.index` file, or the one the `checkpoint` file names
      as latest, does not exist.
    CheckpointError: a directory without a `checkpoint` file holds no or several `*.index`
      files, or its `checkpoint` file names a checkpoint in another directory.
  """
  if tf.io.gfile.isdir(checkpoint_path):
    best = best_checkpoint(checkpoint_path)
    if best:
      return best
    state = tf.train.get_checkpoint_state(checkpoint_path)
    if state is not None and state.model_checkpoint_path:
      return _existing(_state_entry(checkpoint_path, state.model_checkpoint_path),
                       "%s names it as the latest checkpoint" % _state_file(checkpoint_path))
    indexes = tf.io.gfile.glob(os.path.join(checkpoint_path, "*.index"))
    if len(indexes) == 1:
      return indexes[0][:-len(".index")]
    other_format = _other_model_format(checkpoint_path)
    if other_format:
      raise CheckpointError("directory %s holds %s, not a checkpoint of Google's format: convert "
                            "it with convert_checkpoint.py %s=%s" %
                            (checkpoint_path, other_format[0], other_format[1], checkpoint_path))
    raise CheckpointError("directory %s has no `checkpoint` file and %d *.index files: pass the "
                          "checkpoint prefix (e.g. %s/bert_model.ckpt)" %
                          (checkpoint_path, len(indexes), checkpoint_path))
  return _existing(checkpoint_path, "")


# Models of other libraries a directory may hold instead of a checkpoint: (a file that marks
# one, what it is, the flag of convert_checkpoint.py that reads it).
_OTHER_MODEL_FORMATS = (("model.safetensors", "a Hugging Face model", "--hf_model_path"),
                        ("pytorch_model.bin", "a Hugging Face model", "--hf_model_path"),
                        ("model.weights.h5", "a KerasHub preset", "--keras_hub_preset"),
                        ("saved_model.pb", "a SavedModel", "--tf_hub_model_path"))


def _other_model_format(directory: str) -> Optional[tuple]:
  """(what, convert_checkpoint's flag) of the other library's model `directory` holds, or None."""
  return next(((what, flag) for name, what, flag in _OTHER_MODEL_FORMATS
               if tf.io.gfile.exists(os.path.join(directory, name))), None)


def checkpoint_directory(checkpoint_path: str) -> str:
  """The directory whose companions (config, vocab, label list, its run's record) go with a
  checkpoint path: the run's directory for the best checkpoint a run kept
  (`<run>/best/model.ckpt-<step>`, `best_checkpoint`, or `<run>/best` itself), else the path itself
  where it is a directory, else the prefix's directory."""
  is_directory = tf.io.gfile.isdir(checkpoint_path)
  directory = checkpoint_path if is_directory else os.path.dirname(checkpoint_path) or "."
  run_dir = os.path.dirname(directory.rstrip("/"))
  if (os.path.basename(directory.rstrip("/")) == BEST_DIR and
      (is_directory or _CHECKPOINT_FILE.match(os.path.basename(checkpoint_path) + ".index")) and
      tf.io.gfile.exists(_state_file(run_dir or "."))):
    return run_dir or "."
  return directory


def best_checkpoint(output_dir: str) -> Optional[str]:
  """The `output_dir/best/model.ckpt-<step>` that `--keep_best_checkpoint` kept, or None: a run
  that kept one answers with it."""
  steps = [checkpoint_step(path[:-len(".index")]) for path in tf.io.gfile.glob(
      os.path.join(output_dir, BEST_DIR, CHECKPOINT_BASENAME + "-*.index"))]
  return checkpoint_prefix(os.path.join(output_dir, BEST_DIR), max(steps)) if steps else None


def _existing(prefix: str, named_by: str) -> str:
  """`prefix` if its `.index` file exists, else an UnreadableCheckpointError naming it."""
  if not tf.io.gfile.exists(prefix + ".index"):
    raise UnreadableCheckpointError("no checkpoint at %s (%s.index does not exist)%s" % (
        prefix, prefix, "; " + named_by if named_by else ""))
  return prefix


def _state_file(directory: str) -> str:
  return os.path.join(directory, "checkpoint")


def _same_path(first: str, second: str) -> bool:
  """Whether two spellings name one checkpoint prefix (see `_same_directory`)."""
  return (os.path.basename(first) == os.path.basename(second) and
          _same_directory(os.path.dirname(first) or ".", os.path.dirname(second) or "."))


def _same_directory(first: str, second: str) -> bool:
  """Whether two spellings name one directory (local paths resolved, remote ones normalized)."""
  if file_patterns.is_remote(first) or file_patterns.is_remote(second):
    return first.rstrip("/") == second.rstrip("/")
  return os.path.realpath(first) == os.path.realpath(second)


def _state_entry(directory: str, prefix: str) -> str:
  """A prefix the `checkpoint` file of `directory` names, which must lie in that directory: a
  state file copied with its run, or edited, must not make us read another run's files."""
  if not _same_directory(os.path.dirname(prefix) or ".", directory):
    raise CheckpointError("%s names %s, which is not in %s: checkpoints it lists must be in its "
                          "own directory (fix or remove the file)" %
                          (_state_file(directory), prefix, directory))
  return prefix


# What reading a damaged checkpoint raises: TensorFlow errors (missing or corrupt files), and the
# IndexError of TF's checkpoint reader on a truncated `.data` file ("Read less bytes than
# requested").
_CHECKPOINT_READ_ERRORS = (tf.errors.OpError, IndexError, OSError)


def open_checkpoint(prefix: str):
  """`tf.train.load_checkpoint(prefix)`, after checking the files against what the index says.

  Missing files (index, data shards), an index that cannot be read, and `.data` files smaller
  than the tensors the index describes (cut short, or an index that lies) are an
  UnreadableCheckpointError naming the checkpoint, before any value is read.
  """
  problem = _missing_files(_existing(prefix, ""))
  if problem:
    raise UnreadableCheckpointError("checkpoint %s cannot be read: %s" % (prefix, problem))
  try:
    reader = tf.train.load_checkpoint(prefix)
  except _CHECKPOINT_READ_ERRORS as error:
    raise UnreadableCheckpointError("checkpoint %s cannot be read (%s)" %
                                    (prefix, errors.first_line(error))) from error
  described = _described_bytes(reader)
  held = sum(tf.io.gfile.stat(path).length for path in tf.io.gfile.glob(prefix + ".data-*"))
  if described > held:
    raise UnreadableCheckpointError("checkpoint %s is cut short: its index describes %d bytes of "
                                    "tensors but its .data files hold %d" %
                                    (prefix, described, held))
  return reader


def check_name_based(reader, prefix: str) -> None:
  """Raises CheckpointError for an object-based checkpoint (`tf.train.Checkpoint`'s, as Model
  Garden writes them): its keys are object paths, not the original's variable names, so nothing
  in it would match; convert_checkpoint.py reads Model Garden's."""
  if reader.has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"):
    raise CheckpointError(
        "checkpoint %s is object-based (tf.train.Checkpoint's, as Model Garden writes them), not "
        "a name-based one of Google's format: convert a Model Garden BertEncoder checkpoint with "
        "convert_checkpoint.py --model_garden_checkpoint" % prefix)


def _described_bytes(reader) -> int:
  """The bytes the tensors of a checkpoint's index take at least (strings not counted)."""
  shapes = reader.get_variable_to_shape_map()
  return sum(int(np.prod(shapes[name], dtype=np.int64)) * dtype.size
             for name, dtype in reader.get_variable_to_dtype_map().items() if dtype != tf.string)


def read_tensor(reader, prefix: str, name: str) -> np.ndarray:
  """The value of `name` from `open_checkpoint(prefix)`; a `.data` file that is missing, cut short
  or corrupt is an UnreadableCheckpointError naming the checkpoint and the variable."""
  try:
    return np.asarray(reader.get_tensor(name))
  except _CHECKPOINT_READ_ERRORS as error:
    raise UnreadableCheckpointError("checkpoint %s: variable %s cannot be read (%s)" %
                                    (prefix, name, errors.first_line(error))) from error


def _same_kind(stored: tf.DType, wanted: tf.DType) -> bool:
  """Whether a stored dtype may be converted to a variable's: equal, or both floating point
  (a half-precision export into float32 weights), or both integers (an int32 `global_step`)."""
  return stored == wanted or (stored.is_floating and wanted.is_floating) or (
      stored.is_integer and wanted.is_integer)


def check_fits(reader, prefix: str, named_variables: Mapping[str, Any]) -> None:
  """Checks the shape and dtype of every named variable the checkpoint holds, before any is
  assigned; a mismatch is a CheckpointError naming the checkpoint, the variable and both."""
  shapes = reader.get_variable_to_shape_map()
  dtypes = reader.get_variable_to_dtype_map()
  for name in sorted(set(named_variables) & set(shapes)):
    variable = named_variables[name]
    if tuple(shapes[name]) != tuple(variable.shape):
      raise CheckpointError("checkpoint %s: variable %s has shape %s in the checkpoint but %s in "
                            "the model" % (prefix, name, list(shapes[name]), list(variable.shape)))
    wanted = tf.as_dtype(variable.dtype)
    if not _same_kind(dtypes[name], wanted):
      raise CheckpointError("checkpoint %s: variable %s has dtype %s in the checkpoint but %s in "
                            "the model" % (prefix, name, dtypes[name].name, wanted.name))


def is_training_state_name(name: str) -> bool:
  """True for checkpoint entries that are optimizer or loop state, not model variables."""
  return name == GLOBAL_STEP or name.rsplit("/", 1)[-1] in SLOT_NAMES


def _names_summary(what: str, names: Sequence[str], shown: int = 5) -> str:
  """`what % len(names)` and the first few names, or "" when there are none."""
  if not names:
    return ""
  return (what % len(names)) + ": " + ", ".join(names[:shown]) + (
      ", ..." if len(names) > shown else "")


@dataclasses.dataclass
class CheckpointLoadReport:
  """What `init_from_checkpoint` did."""
  checkpoint: str
  loaded: list
  unused: list  # checkpoint variables no model variable took (training state excluded)
  missing: list  # model variables the checkpoint lacks (left at their initial values)


def init_from_checkpoint(model: keras.Model, checkpoint_path: str) -> CheckpointLoadReport:
  """Assigns every model variable found in a Google-format checkpoint, by name.

  Args:
    model: a built model (see `checkpoint_variables` for the naming rule).
    checkpoint_path: a prefix such as `.../bert_model.ckpt`, or a directory.

  Returns:
    A report of loaded, unused (checkpoint names no variable took; optimizer slots and
    `global_step` are not counted) and missing (variables left at their initial values) names.

  Raises:
    UnreadableCheckpointError: no checkpoint at the path, or its files cannot be read.
    CheckpointError: a shape or dtype mismatch (naming the variable and both), before any
      assignment.
  """
  prefix = resolve_checkpoint_path(checkpoint_path)
  reader = open_checkpoint(prefix)
  check_name_based(reader, prefix)
  checkpoint_shapes = reader.get_variable_to_shape_map()
  variables = checkpoint_variables(model)
  check_fits(reader, prefix, variables)
  matched = sorted(name for name in variables if name in checkpoint_shapes)
  for name in matched:
    variable = variables[name]
    variable.assign(read_tensor(reader, prefix, name).astype(variable.dtype))
  report = CheckpointLoadReport(
      checkpoint=prefix,
      loaded=matched,
      unused=sorted(name for name in checkpoint_shapes
                    if name not in variables and not is_training_state_name(name)),
      missing=sorted(name for name in variables if name not in checkpoint_shapes))
  log = logging.warning if report.unused or report.missing else logging.info
  log("Loaded %d of the model's %d variables from %s%s%s", len(report.loaded), len(variables),
      prefix, _names_summary("; %d model variables not in the checkpoint (left at their initial "
                             "values)", report.missing),
      _names_summary("; %d checkpoint variables unused", report.unused))
  for name in report.unused:
    logging.info("  unused checkpoint variable: %s", name)
  for name in report.missing:
    logging.info("  not in checkpoint, left at initial value: %s", name)
  return report


# ------------------------------------------------------------------------------------------------
# Training state: model variables, optimizer slots, global_step.
# ------------------------------------------------------------------------------------------------


def named_slot_variables(optimizer: keras.optimizers.Optimizer,
                         named_variables: Mapping[str, keras.Variable]) -> dict:
  """Maps `<google name>/adam_m` and `<google name>/adam_v` to the optimizer's slot variables.

  Args:
    optimizer: from `optimization.create_optimizer` (a LossScaleOptimizer is unwrapped): any
      optimizer with a `slot_variables(variable) -> {slot name: variable}` method.
    named_variables: Google name -> model variable, e.g. `checkpoint_variables(model)`. Only
      trainable variables have slots. An optimizer that is not built yet is built on them, so
      slots exist (zero) before a checkpoint is restored into them.
  """
  inner = getattr(optimizer, "inner_optimizer", optimizer)
  if not hasattr(inner, "slot_variables"):
    raise TypeError("expected an optimizer of optimization.py (optionally loss-scaled), got %s" %
                    type(inner).__name__)
  trainable = {name: v for name, v in named_variables.items() if v.trainable}
  if not inner.built:
    inner.build(list(trainable.values()))
  return {"%s/%s" % (name, slot): slot_variable
          for name, variable in trainable.items()
          for slot, slot_variable in inner.slot_variables(variable).items()}


def training_state_variables(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> dict:
  """Google name -> variable for everything a training checkpoint holds: the model's variables,
  the optimizer's `<name>/adam_m` and `<name>/adam_v` slots and `global_step`."""
  variables = checkpoint_variables(model)
  named = dict(variables)
  named.update(named_slot_variables(optimizer, variables))
  named[GLOBAL_STEP] = optimizer.iterations
  return named


# ------------------------------------------------------------------------------------------------
# The files of a training run: Google's format, with the Estimator's `checkpoint` state file.
# ------------------------------------------------------------------------------------------------

# Files of a training checkpoint: `model.ckpt-<step>.index` and `.data-<i>-of-<n>`.
_CHECKPOINT_FILE = re.compile(r"^(%s-(\d+))\.(index|data-\d{5}-of-(\d{5}))$" %
                              re.escape(CHECKPOINT_BASENAME))


def checkpoint_prefix(output_dir: str, step: int) -> str:
  return os.path.join(output_dir, "%s-%d" % (CHECKPOINT_BASENAME, step))


def checkpoint_step(prefix: str) -> int:
  """The step of a `model.ckpt-<step>` prefix (its `global_step` entry, else its name); a
  `global_step` that is not one non-negative integer is a CheckpointError."""
  reader = open_checkpoint(prefix)
  if reader.has_tensor(GLOBAL_STEP):
    step = read_tensor(reader, prefix, GLOBAL_STEP)
    if step.shape != () or not np.issubdtype(step.dtype, np.integer) or step < 0:
      raise CheckpointError("checkpoint %s: %s is %s of shape %s, not a step (one non-negative "
                            "integer)" % (prefix, GLOBAL_STEP, step.dtype, list(step.shape)))
    return int(step)
  match = re.search(r"-(\d+)$", prefix)
  return int(match.group(1)) if match else 0


def latest_checkpoint(output_dir: str) -> Optional[str]:
  """The prefix the `checkpoint` state file names as latest, or None."""
  if not output_dir or not tf.io.gfile.isdir(output_dir):
    return None
  return tf.train.latest_checkpoint(output_dir)


def _state_file_prefixes(output_dir: str) -> list:
  """Prefixes the state file lists, oldest first (whether or not their files exist)."""
  state = tf.train.get_checkpoint_state(output_dir)
  if state is None:
    return []
  # get_checkpoint_state already joins relative entries with output_dir.
  paths = list(state.all_model_checkpoint_paths)
  if state.model_checkpoint_path and state.model_checkpoint_path not in paths:
    paths.append(state.model_checkpoint_path)
  return [_state_entry(output_dir, path) for path in paths]


def _checkpoint_history(output_dir: str) -> list:
  """Prefixes listed in the state file, oldest first, that still exist."""
  return [p for p in _state_file_prefixes(output_dir) if tf.io.gfile.exists(p + ".index")]


def list_checkpoints(output_dir: str) -> list:
  """Every checkpoint of `output_dir`, newest first, complete or not: those the state file names
  and every `model.ckpt-<step>` whose files are present (ordered by step)."""
  if not output_dir or not tf.io.gfile.isdir(output_dir):
    return []
  prefixes = {p: i for i, p in enumerate(_state_file_prefixes(output_dir))}
  for path in tf.io.gfile.glob(os.path.join(output_dir, CHECKPOINT_BASENAME + "-*")):
    match = _CHECKPOINT_FILE.match(os.path.basename(path))
    if match:
      prefixes.setdefault(os.path.join(output_dir, match.group(1)), len(prefixes))

  def newest_first(prefix):
    return (_name_step(prefix), prefixes[prefix])

  return sorted(prefixes, key=newest_first, reverse=True)


def checkpoint_of_run_passed_over(init_checkpoint: str, output_dir: str) -> Optional[str]:
  """The checkpoint `output_dir`'s run answers with (the best it kept, else its newest) when
  `init_checkpoint` names another checkpoint of that same run (an older step, say), else None.
  A run evaluates, predicts and exports with its own model, so the one named would be passed
  over without a word."""
  if not output_dir or not tf.io.gfile.isdir(output_dir):
    return None
  if not _same_directory(checkpoint_directory(init_checkpoint), output_dir):
    return None
  newest = best_checkpoint(output_dir) or next(iter(list_checkpoints(output_dir)), None)
  try:
    named = resolve_checkpoint_path(init_checkpoint)
  except CheckpointError:
    return None  # Missing or ambiguous: the checks of the checkpoint itself say so.
  if newest is None or _same_path(named, newest):
    return None
  return newest


def _name_step(prefix: str) -> int:
  """The step in a `model.ckpt-<step>` name (-1 for other names)."""
  match = re.search(r"-(\d+)$", prefix)
  return int(match.group(1)) if match else -1


def _missing_files(prefix: str) -> Optional[str]:
  """Why a checkpoint's files are incomplete (index, or any data shard missing), or None."""
  shards = tf.io.gfile.glob(prefix + ".data-*")
  if not tf.io.gfile.exists(prefix + ".index"):
    return "its .index file is missing" if shards else "its files are missing"
  if not shards:
    return "its .data file is missing"
  expected = re.search(r"-of-(\d+)$", shards[0])
  if expected and len(shards) != int(expected.group(1)):
    return "it has %d of its %d .data shards" % (len(shards), int(expected.group(1)))
  return None


def restore_newest_intact(output_dir: str, load_fn: Callable[[str], Any]) -> Optional[str]:
  """Loads the newest readable checkpoint of `output_dir` with `load_fn(prefix)`.

  A checkpoint is damaged when a file is missing or reading it fails (truncated or corrupt data):
  each damaged one is named in a warning and the next older one is tried. Errors `load_fn` raises
  for a readable but unsuitable checkpoint (CheckpointError: wrong names, shapes or dtypes) are
  not damage and propagate.

  Returns:
    The prefix loaded, or None when `output_dir` holds no checkpoint at all.

  Raises:
    TrainingError: checkpoints exist but none is readable (never silently start from scratch).
  """
  damaged = []
  for prefix in list_checkpoints(output_dir):
    problem = _missing_files(prefix)
    if problem is None:
      try:
        load_fn(prefix)
      except (UnreadableCheckpointError,) + _CHECKPOINT_READ_ERRORS as error:
        problem = "cannot be read (%s)" % errors.first_line(error.__cause__ or error)
    if problem is None:
      if damaged:
        logging.warning("Using %s, the newest intact checkpoint", prefix)
      return prefix
    logging.warning("Checkpoint %s is damaged: %s; trying the previous one", prefix, problem)
    damaged.append("%s (%s)" % (os.path.basename(prefix), problem))
  if damaged:
    raise errors.TrainingError(
        "no readable checkpoint in %s: %s. Remove these files (or use another `output_dir`) to "
        "start over" % (output_dir, "; ".join(damaged)))
  return None


def _write_state_file(output_dir: str, prefixes: list) -> None:
  """Atomically replaces `output_dir/checkpoint` (the last prefix is the latest)."""
  names = [os.path.relpath(p, output_dir) for p in prefixes]
  text = 'model_checkpoint_path: "%s"\n' % names[-1]
  text += "".join('all_model_checkpoint_paths: "%s"\n' % name for name in names)
  atomic_files.write_text(os.path.join(output_dir, "checkpoint"), text)


def _delete_checkpoint_files(prefix: str) -> None:
  for path in tf.io.gfile.glob(prefix + ".*"):
    tf.io.gfile.remove(path)


def remove_leftover_temporaries(output_dir: str) -> list:
  """Deletes what a killed or failed writer left in `output_dir`: checkpoint files still under
  TensorFlow's temporary names (`*.tempstate*`) and state files being written. Call it only while
  holding the directory's lock (another writer's temporaries are not leftovers). Returns them."""
  leftovers = tf.io.gfile.glob(os.path.join(output_dir, "*.tempstate*"))
  for path in leftovers:
    tf.io.gfile.remove(path)
  leftovers += atomic_files.remove_stale_temporaries(os.path.join(output_dir, "checkpoint"))
  for path in leftovers:
    logging.warning("Removing %s, left by a run that was killed or failed", path)
  return leftovers


def save_training_checkpoint(named_variables: Mapping[str, Any], output_dir: str, step: int,
                             keep_checkpoint_max: int) -> str:
  """Writes `output_dir/model.ckpt-<step>`, then points the state file at it, then prunes.

  The files are written under temporary names and renamed when complete, and the state file is
  replaced only after that, so a crash at any moment leaves the previous checkpoint as the latest
  one; a failure (e.g. a full disk) removes what was written and raises TrainingError. Checkpoints
  of later steps the state file still lists (left behind when training fell back to an older
  checkpoint) are dropped from it.
  """
  prefix = checkpoint_prefix(output_dir, step)
  try:
    write_checkpoint(named_variables, prefix)
    history = [p for p in _checkpoint_history(output_dir)
               if p != prefix and _name_step(p) < step] + [prefix]
    keep = max(1, keep_checkpoint_max)
    _write_state_file(output_dir, history[-keep:])
  except (tf.errors.OpError, OSError) as error:
    raise errors.TrainingError(
        "cannot write checkpoint %s (%s); the latest complete checkpoint is %s" %
        (prefix, errors.first_line(error), latest_checkpoint(output_dir) or "(none)")) from error
  for old in history[:-keep]:
    _delete_checkpoint_files(old)
  return prefix


def restore_variables(named_variables: Mapping[str, Any], prefix: str) -> None:
  """Assigns every named variable from a checkpoint; a missing name, shape or dtype is a
  CheckpointError (unreadable files an UnreadableCheckpointError), before any assignment."""
  reader = open_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  missing = sorted(name for name in named_variables if name not in shapes)
  if missing:
    raise CheckpointError("checkpoint %s lacks %d variables needed to resume, e.g. %s" %
                          (prefix, len(missing), missing[:5]))
  check_fits(reader, prefix, named_variables)
  for name, variable in named_variables.items():
    variable.assign(read_tensor(reader, prefix, name).astype(variable.dtype))


def restore_model(strategy: tf.distribute.Strategy, model_fn: Callable[[], keras.Model],
                  output_dir: Optional[str], init_checkpoint: Optional[str] = None,
                  allow_partial_init_checkpoint: bool = False,
                  head_required: bool = True) -> tuple:
  """Builds a model and loads the newest checkpoint of `output_dir`, else `init_checkpoint`
  (see `load_init_checkpoint`), for evaluation, prediction and export without training.

  What these answer must come from a trained model, so every doubt is a TrainingError naming the
  checkpoint, never a warning: no checkpoint at all; the newest checkpoint of `output_dir`
  damaged (an older one would answer for another model than the user's last); a checkpoint of
  `output_dir` lacking any model variable; with `head_required`, an `init_checkpoint` without
  the task head (a random head answers at chance). Returns (model, global_step, checkpoint
  prefix); the step is the checkpoint's `global_step` (0 for a checkpoint without one).
  """
  with strategy.scope():
    model = model_fn()
  newest = next(iter(list_checkpoints(output_dir)), None)
  if newest is not None:
    _load_every_variable(model, newest)
    if init_checkpoint and not _same_directory(checkpoint_directory(init_checkpoint),
                                               output_dir):
      logging.warning("`init_checkpoint`=%s is not read: `output_dir`=%s holds a trained model, "
                      "%s, which is used (as the original did); to use `init_checkpoint`, pass "
                      "an `output_dir` without checkpoints", init_checkpoint, output_dir, newest)
    return model, checkpoint_step(newest), newest
  if not init_checkpoint:
    raise errors.TrainingError(
        "no checkpoint in %s and no `init_checkpoint`: evaluation, prediction and export need a "
        "trained model (train with `do_train`, or pass its checkpoint)" % output_dir)
  report = load_init_checkpoint(model, init_checkpoint, allow_partial_init_checkpoint)
  head = [name for name in report.missing if name not in _encoder_variable_names(model)]
  if head and head_required:
    raise errors.TrainingError(
        "`init_checkpoint`=%s has no task head (%s): evaluation, prediction and export without "
        "`do_train` need a fine-tuned checkpoint of this task, not a pretrained or converted "
        "encoder (a random head answers at chance)" % (report.checkpoint, ", ".join(head[:5])))
  return model, checkpoint_step(report.checkpoint), report.checkpoint


def _load_every_variable(model: keras.Model, prefix: str) -> None:
  """Loads a run's newest checkpoint into `model`; it must be intact and hold every variable."""
  problem = _missing_files(prefix)
  if problem is None:
    try:
      report = init_from_checkpoint(model, prefix)
    except (UnreadableCheckpointError,) + _CHECKPOINT_READ_ERRORS as error:
      problem = "cannot be read (%s)" % errors.first_line(error.__cause__ or error)
  if problem is not None:
    raise errors.TrainingError(
        "checkpoint %s, the newest of its directory, is damaged: %s. Evaluation, prediction and "
        "export use the newest checkpoint: rerun training (it resumes from the newest intact one) "
        "or remove its files" % (prefix, problem))
  if report.missing:
    raise CheckpointError("checkpoint %s lacks %d of the model's variables, e.g. %s" %
                          (prefix, len(report.missing), ", ".join(report.missing[:5])))
  check_no_unused_encoder_variables(model, report)


def check_no_unused_encoder_variables(model: keras.Model, report: CheckpointLoadReport) -> None:
  """Raises CheckpointError when the checkpoint holds encoder variables the model has no place
  for (names under the encoder's scope, e.g. `bert/encoder/layer_11/...` for a config of fewer
  layers): the model would answer as a cut-down network of the checkpoint's. Heads and training
  state a model does not use (pretraining's `cls/`, another task's output layer) may stay
  unused."""
  scopes = {name.split("/", 1)[0] for name in _encoder_variable_names(model)}
  unused = [name for name in report.unused if name.split("/", 1)[0] in scopes]
  if unused:
    raise CheckpointError(
        "checkpoint %s holds %d encoder variables the model of the BERT config has no place for, "
        "e.g. %s: the config is not the checkpoint's (check num_hidden_layers and the other "
        "sizes)" % (report.checkpoint, len(unused), ", ".join(unused[:3])))


def _encoder_variable_names(model: keras.Model) -> set:
  """The checkpoint names of the variables of the model's encoder (its `BertModel`)."""
  names = set()
  # Keras has no public walk over nested layers; _flatten_layers is what Model.summary uses.
  for layer in model._flatten_layers(include_self=True):  # pylint: disable=protected-access
    if _is_encoder(layer):
      names.update(checkpoint_variables(layer))
  return names


def load_init_checkpoint(model: keras.Model, init_checkpoint: str,
                         allow_partial: bool = False) -> CheckpointLoadReport:
  """Loads `--init_checkpoint` into a task model (`init_from_checkpoint`).

  Every variable of the model's encoder (its `BertModel`) must come from the checkpoint: a
  checkpoint that fills fewer (other names, e.g. a `model/` prefix, or a smaller model) would
  leave random weights behind a run that looks fine. Task heads may be missing (they are new).

  Raises:
    TrainingError: encoder variables are missing and `allow_partial` is False.
  """
  report = init_from_checkpoint(model, init_checkpoint)
  encoder_names = _encoder_variable_names(model)
  check_no_unused_encoder_variables(model, report)
  missing = [name for name in report.missing if name in encoder_names]
  if missing and not allow_partial:
    raise errors.TrainingError(
        "`init_checkpoint`=%s fills only %d of the encoder's %d variables: %d missing, e.g. %s%s. "
        "Pass a checkpoint with these names, or `allow_partial_init_checkpoint` to train with the "
        "missing ones at random initial values" % (
            init_checkpoint, len(encoder_names) - len(missing), len(encoder_names), len(missing),
            ", ".join(missing[:5]),
            "; its unused names are e.g. %s" % ", ".join(report.unused[:3]) if report.unused
            else ""))
  return report


