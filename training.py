# coding=utf-8
"""Shared training machinery for every run_* script: flags, strategies, the training loop.

The original BERT trained, evaluated and predicted with TPUEstimator. This module gives the same
behaviour to Keras 3 models under any `tf.distribute` strategy, with one code path:

- absl flag definitions the scripts share (TPU, runtime, common training and fine-tuning flags),
  defined when a script calls the `define_*` functions, never at import;
- `setup_from_flags()`: the mixed-precision policy and the strategy (one device, Mirrored,
  MultiWorkerMirrored from `TF_CONFIG`, or TPU);
- `train()`: a task-agnostic loop that runs up to `iterations_per_loop` steps per call into the
  graph (as TPUEstimator did; on one machine a call also ends after about a minute, so progress
  shows on a CPU), writes Google-format checkpoints (`model.ckpt-<step>` holding the model's
  variables, `<name>/adam_m`, `<name>/adam_v` and `global_step`) with a `checkpoint` state file
  that is only updated once a checkpoint is complete, resumes from the latest one, stops exactly at
  `num_train_steps`, and stops with a clear error when the loss is no longer finite;
- `evaluate()` and `predict()`: every example of a fixed-order dataset exactly once, in order,
  with the last partial batch padded for the devices and the padding removed from the results.

Loss convention under distribution: a task's loss function runs once per replica on that replica's
part of the global batch and returns *this replica's share* of the global-batch value, so that the
shares summed over replicas equal the value one device computes on the whole global batch.
`replica_weighted_mean` computes such a share for any weighted mean (the normalizer is all-reduced),
so losses and metrics do not depend on the number of replicas.
"""

import dataclasses
import fcntl
import json
import math
import os
import re
import socket
import sys
import time
from typing import Any, Callable, Mapping, Optional

from absl import app
from absl import flags
from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

import atomic_files
import modeling
import optimization

FLAGS = flags.FLAGS

# Feature key that evaluate() and predict() set to 1 for real examples and 0 for padding rows
# (the original's name: its classifier TFRecords already carry it for TPU padding).
REAL_EXAMPLE_KEY = "is_real_example"
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
PRECISIONS = ("float32", "float16", "bfloat16")
CHECKPOINT_BASENAME = "model.ckpt"
# The state file is written as `checkpoint.tmp-<pid>` and renamed when complete.
_STATE_FILE_TEMPORARY = ".tmp-"

# A task's loss function: (model, features, training) -> (loss share, {metric name: share}).
LossFn = Callable[[keras.Model, Mapping[str, tf.Tensor], bool], tuple]
# A task's evaluation metrics: (model, features) -> {name: (numerator, denominator)}, both summed
# over this replica's examples; the result is numerator / denominator over the whole dataset.
MetricFn = Callable[[keras.Model, Mapping[str, tf.Tensor]], Mapping[str, tuple]]
# A task's prediction: (model, features) -> {name: tensor with one row per example}.
PredictFn = Callable[[keras.Model, Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]


class TrainingError(RuntimeError):
  """A run cannot continue: the loss became NaN or Inf, no checkpoint is readable, the output
  directory is in use or cannot be written, `--init_checkpoint` does not fit the model. The
  message says what to do; `run_script` prints it as one line."""


# ------------------------------------------------------------------------------------------------
# Flags.
# ------------------------------------------------------------------------------------------------


def _define(flag_values: flags.FlagValues, kind: str, name: str, default, help_text: str,
            **kwargs) -> None:
  """Defines one flag with `flags.DEFINE_<kind>` in `flag_values`, unless it exists already.

  Checking each name (not each group) keeps the definitions idempotent when another program in
  the same process (e.g. extract_features in a test run) defined some of these flags first.
  """
  if name in flag_values:
    return
  getattr(flags, "DEFINE_" + kind)(name, default, help=help_text, flag_values=flag_values,
                                   **kwargs)


def define_tpu_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the original's TPU flags (`use_tpu`, `tpu_name`, `tpu_zone`, `gcp_project`,
  `master`, `num_tpu_cores`) with its defaults."""
  fv = flag_values
  _define(fv, "bool", "use_tpu", False, "Whether to run on a TPU (TPUStrategy).")
  _define(fv, "string", "tpu_name", None,
          "The Cloud TPU to use: its name or a grpc://ip:port address.")
  _define(fv, "string", "tpu_zone", None,
          "GCE zone of the Cloud TPU; looked up from metadata when not given.")
  _define(fv, "string", "gcp_project", None,
          "GCP project of the Cloud TPU; looked up from metadata when not given.")
  _define(fv, "string", "master", None, "TPU master address, used when --tpu_name is not given.")
  _define(fv, "integer", "num_tpu_cores", 8,
          "Number of TPU cores expected (checked against the TPU's topology).")


def define_runtime_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the flags this reimplementation adds: strategy, XLA, precision, checkpoints, seed."""
  fv = flag_values
  _define(fv, "enum", "distribution_strategy", "auto",
          "How to spread training over devices. auto: tpu with --use_tpu, multi_worker_mirrored "
          "when TF_CONFIG names several tasks, mirrored with several GPUs, else one_device. "
          "mirrored uses all GPUs, or all logical CPU devices when there is no GPU.",
          enum_values=STRATEGIES)
  _define(fv, "bool", "use_xla", False,
          "Compile the forward and backward pass with XLA (one replica only; TPUs always "
          "compile).")
  _define(fv, "enum", "mixed_precision", "float32",
          "Compute dtype. float16 adds dynamic loss scaling; bfloat16 suits TPUs and CPUs with "
          "AVX512-BF16. Variables and checkpoints stay float32.", enum_values=PRECISIONS)
  _define(fv, "integer", "keep_checkpoint_max", 5,
          "How many of the most recent training checkpoints to keep.")
  _define(fv, "integer", "random_seed", 12345,
          "Seed for initialization, dropout and input shuffling (the same on every worker, so "
          "workers see one consistent stream of global batches).")


def define_common_flags(max_seq_length: int = 128,
                        flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the flags every training script shares, with the original's defaults.

  Also defines the TPU and runtime flags. `max_seq_length` is the script's default (128 for
  pretraining and classification, 384 for SQuAD). A script should then call
  `flags.adopt_module_key_flags(training)` so that `--help` lists these flags too.
  """
  define_tpu_flags(flag_values)
  define_runtime_flags(flag_values)
  fv = flag_values
  _define(fv, "string", "bert_config_file", None,
          "The config json file of the pre-trained BERT model (architecture).")
  _define(fv, "string", "init_checkpoint", None,
          "Initial checkpoint (usually from a pre-trained BERT model).")
  _define(fv, "bool", "allow_partial_init_checkpoint", False,
          "Accept an --init_checkpoint that lacks some of the encoder's variables (they keep "
          "their random initial values). Without it that is an error listing them.")
  _define(fv, "string", "output_dir", None,
          "Where checkpoints, summaries and results are written.")
  _define(fv, "integer", "max_seq_length", max_seq_length,
          "Maximum total input length in WordPiece tokens after tokenization; longer inputs are "
          "truncated, shorter ones padded.")
  _define(fv, "bool", "do_train", False, "Whether to run training.")
  _define(fv, "integer", "train_batch_size", 32, "Global batch size for training.")
  _define(fv, "float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
  _define(fv, "enum", "optimizer", "bert_adam",
          "bert_adam: the original's AdamW without bias correction (its results exactly; may "
          "collapse at rates above 1e-4). adamw: the same with bias correction (Keras's and "
          "Hugging Face's AdamW), for rates tuned for it. lamb: LAMB, AdamW scaled per variable "
          "by a trust ratio, for large-batch pretraining. All three decay weights except "
          "LayerNorm and bias variables and save their moments as <name>/adam_m, <name>/adam_v.",
          enum_values=optimization.OPTIMIZERS)
  _define(fv, "integer", "save_checkpoints_steps", 1000, "How often to save a checkpoint.")
  _define(fv, "integer", "iterations_per_loop", 1000,
          "How many steps to run per call into the graph (and per progress line); on one "
          "machine a call also ends after about a minute, so that progress shows.")


def define_fine_tuning_flags(max_seq_length: int = 128,
                             flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the common flags plus the fine-tuning schedule (`num_train_epochs`=3.0,
  `warmup_proportion`=0.1), as run_classifier and run_squad had."""
  define_common_flags(max_seq_length, flag_values)
  _define(flag_values, "float", "num_train_epochs", 3.0,
          "Total number of training epochs to perform.")
  _define(flag_values, "float", "warmup_proportion", 0.1,
          "Proportion of training to perform linear learning rate warmup for, e.g. 0.1 = 10% of "
          "training.")


def define_eval_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `do_eval` and `eval_batch_size` (default 8, global)."""
  _define(flag_values, "bool", "do_eval", False, "Whether to run evaluation.")
  _define(flag_values, "integer", "eval_batch_size", 8, "Global batch size for evaluation.")


def define_predict_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `do_predict` and `predict_batch_size` (default 8, global)."""
  _define(flag_values, "bool", "do_predict", False, "Whether to run prediction.")
  _define(flag_values, "integer", "predict_batch_size", 8, "Global batch size for prediction.")


def run_script(main: Callable[[list], Any], input_errors: tuple = ()) -> None:
  """`app.run(main)` for a run_* script; a TrainingError, or one of the script's `input_errors`
  (bad input files, whose messages name the file and line), ends it with one line on stderr
  (`<script>: error: <message>`, exit status 1) instead of a traceback."""

  def main_with_clear_errors(argv):
    try:
      return main(argv)
    except (TrainingError,) + tuple(input_errors) as error:
      raise SystemExit("%s: error: %s" % (os.path.basename(sys.argv[0]), error)) from None

  app.run(main_with_clear_errors)


def fine_tuning_steps(num_examples: int, train_batch_size: int, num_train_epochs: float,
                      warmup_proportion: float) -> tuple:
  """Returns (num_train_steps, num_warmup_steps) computed as the original scripts did."""
  num_train_steps = int(num_examples / train_batch_size * num_train_epochs)
  return num_train_steps, int(num_train_steps * warmup_proportion)


# ------------------------------------------------------------------------------------------------
# Strategies and precision.
# ------------------------------------------------------------------------------------------------


def _tf_config_task_count() -> int:
  """Number of tasks TF_CONFIG's cluster names (0 when TF_CONFIG is unset)."""
  config = json.loads(os.environ.get("TF_CONFIG", "{}") or "{}")
  return sum(len(addresses) for addresses in config.get("cluster", {}).values())


def make_strategy(name: str = "auto",
                  *,
                  devices: Optional[list] = None,
                  use_tpu: bool = False,
                  tpu_address: Optional[str] = None,
                  tpu_zone: Optional[str] = None,
                  gcp_project: Optional[str] = None,
                  num_tpu_cores: Optional[int] = None) -> tf.distribute.Strategy:
  """Creates a `tf.distribute` strategy. Call it before any other TensorFlow op.

  Args:
    name: one of STRATEGIES. `auto` picks tpu with use_tpu, multi_worker_mirrored when TF_CONFIG
      names several tasks, mirrored with several GPUs, else one_device (the default strategy).
    devices: the mirrored strategy's devices (default: all GPUs, else all logical CPUs).
    use_tpu, tpu_address, tpu_zone, gcp_project: where the TPU is (the original's flags).
    num_tpu_cores: cores expected on the TPU; a mismatch is logged.

  Returns:
    The strategy. Batch sizes given to `train`, `evaluate` and `predict` are global.
  """
  if name not in STRATEGIES:
    raise ValueError("--distribution_strategy must be one of %s, got %r" % (STRATEGIES, name))
  if name == "auto":
    if use_tpu:
      name = "tpu"
    elif _tf_config_task_count() > 1:
      name = "multi_worker_mirrored"
    elif len(tf.config.list_physical_devices("GPU")) > 1:
      name = "mirrored"
    else:
      name = "one_device"
  logging.info("Distribution strategy: %s", name)
  if name == "one_device":
    return tf.distribute.get_strategy()
  if name == "mirrored":
    if devices is None:
      gpus = tf.config.list_logical_devices("GPU")
      devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices=devices)
  if name == "multi_worker_mirrored":
    if not os.environ.get("TF_CONFIG"):
      raise ValueError("--distribution_strategy=multi_worker_mirrored needs the TF_CONFIG "
                       "environment variable (cluster and task of this worker)")
    return tf.distribute.MultiWorkerMirroredStrategy()
  resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
      tpu=tpu_address or "", zone=tpu_zone, project=gcp_project)
  tf.config.experimental_connect_to_cluster(resolver)
  tf.tpu.experimental.initialize_tpu_system(resolver)
  strategy = tf.distribute.TPUStrategy(resolver)
  if num_tpu_cores and strategy.num_replicas_in_sync != num_tpu_cores:
    logging.warning("--num_tpu_cores=%d but the TPU has %d cores; using %d", num_tpu_cores,
                    strategy.num_replicas_in_sync, strategy.num_replicas_in_sync)
  return strategy


def set_precision(precision: str) -> None:
  """Sets Keras's global dtype policy: float32, or mixed float16/bfloat16 (float32 variables)."""
  if precision not in PRECISIONS:
    raise ValueError("--mixed_precision must be one of %s, got %r" % (PRECISIONS, precision))
  keras.mixed_precision.set_global_policy(
      "float32" if precision == "float32" else "mixed_" + precision)


def setup_from_flags() -> tf.distribute.Strategy:
  """Applies `--mixed_precision` and returns the strategy the flags ask for.

  Call it first in a script's main(): a multi-worker strategy must exist before other ops run.
  """
  strategy = make_strategy(
      FLAGS.distribution_strategy,
      use_tpu=FLAGS.use_tpu,
      tpu_address=FLAGS.tpu_name or FLAGS.master,
      tpu_zone=FLAGS.tpu_zone,
      gcp_project=FLAGS.gcp_project,
      num_tpu_cores=FLAGS.num_tpu_cores)
  set_precision(FLAGS.mixed_precision)
  return strategy


def is_chief(strategy: tf.distribute.Strategy) -> bool:
  """Whether this process writes checkpoints, summaries and results (one process does)."""
  return bool(strategy.extended.should_checkpoint)


# ------------------------------------------------------------------------------------------------
# Loss helpers for tasks.
# ------------------------------------------------------------------------------------------------


def replica_weighted_mean(values: tf.Tensor, weights: Optional[tf.Tensor] = None,
                          epsilon: float = 0.0) -> tf.Tensor:
  """This replica's share of the global-batch mean `sum(w * v) / (sum(w) + epsilon)`.

  The denominator is summed over all replicas, so the shares of all replicas add up to the value
  one device computes on the whole global batch (exactly, not an average of per-replica means).
  Call it inside a loss or metric function (replica context); outside any strategy it is the
  plain weighted mean.
  """
  values = tf.cast(tf.reshape(values, [-1]), tf.float32)
  weights = (tf.ones_like(values) if weights is None else
             tf.cast(tf.reshape(weights, [-1]), tf.float32))
  numerator = tf.reduce_sum(values * weights)
  denominator = tf.reduce_sum(weights)
  context = tf.distribute.get_replica_context()
  if context is not None and context.num_replicas_in_sync > 1:
    denominator = context.all_reduce(tf.distribute.ReduceOp.SUM, denominator)
  return numerator / (denominator + epsilon)


def replica_batch_share() -> float:
  """The denominator that makes a per-batch value count once per global batch in a MetricFn."""
  context = tf.distribute.get_replica_context()
  return 1.0 / (context.num_replicas_in_sync if context is not None else 1)


# ------------------------------------------------------------------------------------------------
# Checkpoints: Google's name-based format, with the Estimator's `checkpoint` state file.
# ------------------------------------------------------------------------------------------------

# Files of a training checkpoint: `model.ckpt-<step>.index` and `.data-<i>-of-<n>`.
_CHECKPOINT_FILE = re.compile(r"^(%s-(\d+))\.(index|data-\d{5}-of-(\d{5}))$" %
                              re.escape(CHECKPOINT_BASENAME))
# What reading a damaged checkpoint raises: TensorFlow errors (missing or corrupt files), and the
# IndexError of TF's checkpoint reader on a truncated `.data` file ("Read less bytes than
# requested").
_CHECKPOINT_READ_ERRORS = (tf.errors.OpError, IndexError, OSError)


def checkpoint_prefix(output_dir: str, step: int) -> str:
  return os.path.join(output_dir, "%s-%d" % (CHECKPOINT_BASENAME, step))


def checkpoint_step(prefix: str) -> int:
  """The step of a `model.ckpt-<step>` prefix (its `global_step` entry, else its name)."""
  reader = tf.train.load_checkpoint(prefix)
  if reader.has_tensor("global_step"):
    return int(reader.get_tensor("global_step"))
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
  return paths


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


def _first_line(error: BaseException) -> str:
  """`<type>: <first line of the message>`, without TensorFlow's op and function decorations."""
  message = getattr(error, "message", None) or str(error) or type(error).__name__
  message = re.sub(r"\{\{function_node [^}]*\}\}\s*|\s*\[Op:\w+\]", "",
                   message.strip().splitlines()[0])
  return "%s: %s" % (type(error).__name__, message)


def restore_newest_intact(output_dir: str, load_fn: Callable[[str], Any]) -> Optional[str]:
  """Loads the newest readable checkpoint of `output_dir` with `load_fn(prefix)`.

  A checkpoint is damaged when a file is missing or reading it fails (truncated or corrupt data):
  each damaged one is named in a warning and the next older one is tried. Errors `load_fn` raises
  for a readable but unsuitable checkpoint (ValueError: wrong names or shapes) are not damage and
  propagate.

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
      except _CHECKPOINT_READ_ERRORS as error:
        problem = "cannot be read (%s)" % _first_line(error)
    if problem is None:
      if damaged:
        logging.warning("Using %s, the newest intact checkpoint", prefix)
      return prefix
    logging.warning("Checkpoint %s is damaged: %s; trying the previous one", prefix, problem)
    damaged.append("%s (%s)" % (os.path.basename(prefix), problem))
  if damaged:
    raise TrainingError(
        "no readable checkpoint in %s: %s. Remove these files (or use another --output_dir) to "
        "start over" % (output_dir, "; ".join(damaged)))
  return None


def _write_state_file(output_dir: str, prefixes: list) -> None:
  """Atomically replaces `output_dir/checkpoint` (the last prefix is the latest)."""
  names = [os.path.relpath(p, output_dir) for p in prefixes]
  text = 'model_checkpoint_path: "%s"\n' % names[-1]
  text += "".join('all_model_checkpoint_paths: "%s"\n' % name for name in names)
  path = os.path.join(output_dir, "checkpoint")
  temporary = "%s%s%d" % (path, _STATE_FILE_TEMPORARY, os.getpid())
  try:
    with tf.io.gfile.GFile(temporary, "w") as f:
      f.write(text)
    tf.io.gfile.rename(temporary, path, overwrite=True)
  except BaseException:
    _remove_quietly(temporary)
    raise


def _remove_quietly(path: str) -> None:
  try:
    tf.io.gfile.remove(path)
  except (tf.errors.OpError, OSError):
    pass


def _delete_checkpoint_files(prefix: str) -> None:
  for path in tf.io.gfile.glob(prefix + ".*"):
    tf.io.gfile.remove(path)


def remove_leftover_temporaries(output_dir: str) -> list:
  """Deletes what a killed or failed writer left in `output_dir`: checkpoint files still under
  TensorFlow's temporary names (`*.tempstate*`) and state files being written. Call it only while
  holding the directory's lock (another writer's temporaries are not leftovers). Returns them."""
  patterns = ["*.tempstate*", "checkpoint%s*" % _STATE_FILE_TEMPORARY]
  leftovers = [path for pattern in patterns
               for path in tf.io.gfile.glob(os.path.join(output_dir, pattern))]
  for path in leftovers:
    logging.warning("Removing %s, left by a run that was killed or failed", path)
    _remove_quietly(path)
  return leftovers


def training_state_variables(model: keras.Model, optimizer: keras.optimizers.Optimizer) -> dict:
  """Google name -> variable for everything a training checkpoint holds: the model's variables,
  the optimizer's `<name>/adam_m` and `<name>/adam_v` slots and `global_step`."""
  variables = modeling.checkpoint_variables(model)
  named = dict(variables)
  named.update(optimization.named_slot_variables(optimizer, variables))
  named["global_step"] = optimizer.iterations
  return named


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
    modeling.write_checkpoint(named_variables, prefix)
    history = [p for p in _checkpoint_history(output_dir)
               if p != prefix and _name_step(p) < step] + [prefix]
    keep = max(1, keep_checkpoint_max)
    _write_state_file(output_dir, history[-keep:])
  except (tf.errors.OpError, OSError) as error:
    raise TrainingError("cannot write checkpoint %s (%s); the latest complete checkpoint is %s" %
                        (prefix, _first_line(error), latest_checkpoint(output_dir) or "(none)")
                        ) from error
  for old in history[:-keep]:
    _delete_checkpoint_files(old)
  return prefix


def restore_variables(named_variables: Mapping[str, Any], prefix: str) -> None:
  """Assigns every named variable from a checkpoint; a missing name or shape is an error."""
  reader = tf.train.load_checkpoint(prefix)
  shapes = reader.get_variable_to_shape_map()
  missing = sorted(name for name in named_variables if name not in shapes)
  if missing:
    raise ValueError("checkpoint %s lacks %d variables needed to resume, e.g. %s" %
                     (prefix, len(missing), missing[:5]))
  for name, variable in named_variables.items():
    if tuple(shapes[name]) != tuple(variable.shape):
      raise ValueError("checkpoint %s: %s has shape %s, the model needs %s" %
                       (prefix, name, list(shapes[name]), list(variable.shape)))
  for name, variable in named_variables.items():
    variable.assign(np.asarray(reader.get_tensor(name)).astype(variable.dtype))


def restore_model(strategy: tf.distribute.Strategy, model_fn: Callable[[], keras.Model],
                  output_dir: Optional[str], init_checkpoint: Optional[str] = None,
                  allow_partial_init_checkpoint: bool = False) -> tuple:
  """Builds a model and loads the newest intact checkpoint of `output_dir`, else
  `init_checkpoint` (see `load_init_checkpoint`).

  For evaluation and prediction. A checkpoint of `output_dir` must hold every model variable;
  damaged ones are skipped with a warning, and when none is readable this is a TrainingError
  (never a random model). Returns (model, global_step, checkpoint prefix or None); the step is the
  checkpoint's `global_step` (0 for a checkpoint without one, or no checkpoint).
  """
  with strategy.scope():
    model = model_fn()

  def load_complete(prefix):
    report = modeling.init_from_checkpoint(model, prefix)
    if report.missing:
      raise ValueError("checkpoint %s lacks %d of the model's variables, e.g. %s" %
                       (prefix, len(report.missing), ", ".join(report.missing[:5])))

  prefix = restore_newest_intact(output_dir, load_complete)
  if prefix is None and init_checkpoint:
    prefix = load_init_checkpoint(model, init_checkpoint, allow_partial_init_checkpoint).checkpoint
  if prefix is None:
    logging.warning("No checkpoint in %s and no --init_checkpoint: using a fresh model",
                    output_dir)
    return model, 0, None
  return model, checkpoint_step(prefix), prefix


def load_init_checkpoint(model: keras.Model, init_checkpoint: str,
                         allow_partial: bool = False) -> modeling.CheckpointLoadReport:
  """Loads `--init_checkpoint` into a task model (`modeling.init_from_checkpoint`).

  Every variable of the model's encoder (its `BertModel`) must come from the checkpoint: a
  checkpoint that fills fewer (other names, e.g. a `model/` prefix, or a smaller model) would
  leave random weights behind a run that looks fine. Task heads may be missing (they are new).

  Raises:
    TrainingError: encoder variables are missing and `allow_partial` is False.
  """
  report = modeling.init_from_checkpoint(model, init_checkpoint)
  encoder_names = set()
  # Keras has no public walk over nested layers; _flatten_layers is what Model.summary uses.
  for layer in model._flatten_layers(include_self=True):  # pylint: disable=protected-access
    if isinstance(layer, modeling.BertModel):
      encoder_names.update(modeling.checkpoint_variables(layer))
  missing = [name for name in report.missing if name in encoder_names]
  if missing and not allow_partial:
    raise TrainingError(
        "--init_checkpoint=%s fills only %d of the encoder's %d variables: %d missing, e.g. %s%s. "
        "Pass a checkpoint with these names, or --allow_partial_init_checkpoint to train with the "
        "missing ones at random initial values" % (
            init_checkpoint, len(encoder_names) - len(missing), len(encoder_names), len(missing),
            ", ".join(missing[:5]),
            "; its unused names are e.g. %s" % ", ".join(report.unused[:3]) if report.unused
            else ""))
  return report


# ------------------------------------------------------------------------------------------------
# One writer per output_dir.
# ------------------------------------------------------------------------------------------------

LOCK_FILE_NAME = ".lock"


class OutputDirLock:
  """An exclusive lock on an output directory: `output_dir/.lock`, holding `pid host since`.

  On a local file system the file is also `flock`ed, so the lock is exclusive even between
  processes starting at the same moment and dies with its process (SIGKILL included); a lock file
  left by a process that is gone is taken over with a warning. Elsewhere (e.g. gs://) the file is
  the lock: a holder on this host that is no longer running is taken over, any other holder must
  be removed by hand. Use as a context manager; `TrainingError` names the holder.
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
    try:
      os.kill(int(fields[0]), 0)
    except ProcessLookupError:
      return True
    except PermissionError:  # Running, as another user.
      pass
    return False

  def _in_use(self, holder: str) -> TrainingError:
    return TrainingError(
        "--output_dir=%s is in use by %s (lock file %s): only one job may write to a directory. "
        "If that job is gone, remove the lock file" % (self.output_dir, self._describe(holder),
                                                        self.path))

  def _record(self) -> str:
    return "%d %s %.0f\n" % (os.getpid(), socket.gethostname(), time.time())

  def acquire(self) -> None:
    try:
      tf.io.gfile.makedirs(self.output_dir)
      if "://" in self.output_dir:
        self._acquire_remote()
      else:
        self._acquire_local()
    except (tf.errors.OpError, OSError) as error:
      raise TrainingError("--output_dir=%s cannot be written (%s)" %
                          (self.output_dir, _first_line(error))) from error

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
      logging.warning("Taking over the lock of %s on --output_dir=%s: that process is no longer "
                      "running", self._describe(previous), self.output_dir)
    self._fd = fd

  def _acquire_remote(self) -> None:
    if tf.io.gfile.exists(self.path):
      with tf.io.gfile.GFile(self.path) as f:
        holder = f.read().strip()
      if not self._is_gone(holder):
        raise self._in_use(holder)
      logging.warning("Taking over the lock of %s on --output_dir=%s: that process is no longer "
                      "running", self._describe(holder), self.output_dir)
    with tf.io.gfile.GFile(self.path, "w") as f:
      f.write(self._record())

  def release(self) -> None:
    """Removes the lock file (only this holder's) and unlocks."""
    if self._fd is not None:
      _remove_quietly(self.path)
      os.close(self._fd)
      self._fd = None
    elif "://" in self.output_dir and tf.io.gfile.exists(self.path):
      with tf.io.gfile.GFile(self.path) as f:
        holder = f.read().split()
      if holder[:2] == [str(os.getpid()), socket.gethostname()]:
        _remove_quietly(self.path)


# ------------------------------------------------------------------------------------------------
# Training.
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class TrainConfig:
  """What `train` needs besides the task's functions. Batch sizes are global."""
  output_dir: str
  num_train_steps: int
  num_warmup_steps: int
  learning_rate: float = 5e-5
  optimizer: str = "bert_adam"  # one of optimization.OPTIMIZERS
  train_batch_size: int = 32
  init_checkpoint: Optional[str] = None
  save_checkpoints_steps: int = 1000
  iterations_per_loop: int = 1000
  # On one machine a call into the graph is also cut to about this long, so that a progress line
  # comes at least this often on a CPU (where 1,000 steps of BERT take hours); see _loop_steps.
  progress_seconds: float = 60.0
  keep_checkpoint_max: int = 5
  use_xla: bool = False
  random_seed: int = 12345
  allow_partial_init_checkpoint: bool = False
  # The step a later phase of the job starts at (pretraining's phase 2 resumes phase 1's
  # output_dir): its learning rate schedule and its dataset count from here.
  phase_start_step: int = 0

  @classmethod
  def from_flags(cls, num_train_steps: int, num_warmup_steps: int) -> "TrainConfig":
    """The config the shared flags describe, for a schedule the script computed."""
    return cls(output_dir=FLAGS.output_dir,
               num_train_steps=num_train_steps,
               num_warmup_steps=num_warmup_steps,
               learning_rate=FLAGS.learning_rate,
               optimizer=FLAGS.optimizer,
               train_batch_size=FLAGS.train_batch_size,
               init_checkpoint=FLAGS.init_checkpoint,
               save_checkpoints_steps=FLAGS.save_checkpoints_steps,
               iterations_per_loop=FLAGS.iterations_per_loop,
               keep_checkpoint_max=FLAGS.keep_checkpoint_max,
               use_xla=FLAGS.use_xla,
               random_seed=FLAGS.random_seed,
               allow_partial_init_checkpoint=FLAGS.allow_partial_init_checkpoint)

  def validate(self, num_replicas: int) -> None:
    if not self.output_dir:
      raise ValueError("--output_dir is required for training")
    for name in ("num_train_steps", "train_batch_size", "save_checkpoints_steps",
                 "iterations_per_loop"):
      if getattr(self, name) <= 0:
        raise ValueError("--%s must be positive, got %r" % (name, getattr(self, name)))
    if not 0 <= self.phase_start_step < self.num_train_steps:
      raise ValueError("phase_start_step=%d must be in [0, num_train_steps=%d)" %
                       (self.phase_start_step, self.num_train_steps))
    if self.num_warmup_steps < 0:
      raise ValueError("--num_warmup_steps must not be negative, got %r" % self.num_warmup_steps)
    if self.train_batch_size % num_replicas:
      raise ValueError("--train_batch_size=%d is not divisible by the %d replicas" %
                       (self.train_batch_size, num_replicas))


@dataclasses.dataclass
class TrainResult:
  """What `train` leaves behind."""
  model: keras.Model
  global_step: int
  checkpoint: Optional[str]  # the final model.ckpt-<step> (None on non-chief workers)
  metrics: dict  # mean loss and metrics over the last loop
  examples_per_second: float  # over the steps this run trained (0 when it trained none)
  loop_examples_per_second: list = dataclasses.field(default_factory=list)  # per graph call


def _distribute(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset):
  """Distributes a dataset of global batches so that each global batch is split over replicas.

  Unless the dataset chose a sharding policy itself, every worker reads the same stream and keeps
  its part of each batch (DATA sharding): the global batches are the ones one device would see.
  """
  options = tf.data.Options()
  if dataset.options().experimental_distribute.auto_shard_policy == (
      tf.data.experimental.AutoShardPolicy.AUTO):
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
  return strategy.experimental_distribute_dataset(dataset.with_options(options))


def _format_duration(seconds: float) -> str:
  if not math.isfinite(seconds):
    return "?"
  seconds = int(seconds)
  return "%d:%02d:%02d" % (seconds // 3600, seconds // 60 % 60, seconds % 60)


# Room in a seed generator's counter for the draws of one step (one per call of a dropout layer).
_RANDOM_DRAWS_PER_STEP = 1 << 16


class _Trainer:
  """Owns the compiled multi-step training function for one model and optimizer."""

  def __init__(self, strategy, model, optimizer, loss_fn, use_xla):
    self.strategy = strategy
    self.model = model
    self.optimizer = optimizer
    self.loss_fn = loss_fn
    self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    compiled = use_xla and strategy.num_replicas_in_sync == 1
    if use_xla and not compiled and not isinstance(strategy, tf.distribute.TPUStrategy):
      logging.warning("--use_xla is ignored with %d replicas (the loss all-reduces across "
                      "replicas, which XLA cannot compile on CPU/GPU)",
                      strategy.num_replicas_in_sync)
    # A nested tf.function may not all-reduce, so only the one-replica XLA case gets one.
    self._gradients = (tf.function(self._compute_gradients, jit_compile=True) if compiled else
                       self._compute_gradients)
    # Dropout draws from Keras seed generators (variables outside the checkpoint); each step
    # sets their counters from the step, so a step replayed after a resume draws the same masks.
    self._seed_states = [v for v in model.variables if v.name == "seed_generator_state"]
    # Traced once and called twice by _train_steps (before and inside its loop).
    self._step = tf.function(self._one_step)
    self.train_steps = tf.function(self._train_steps)

  def _compute_gradients(self, features):
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      loss, metrics = self.loss_fn(self.model, features, True)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
    return loss, dict(metrics), tape.gradient(scaled, variables)

  def _replica_step(self, features):
    counter = tf.cast(self.optimizer.iterations, tf.int64) * _RANDOM_DRAWS_PER_STEP
    for state in self._seed_states:
      state.assign(tf.stack([state[0], tf.cast(counter, state.dtype)]))
    loss, metrics, grads = self._gradients(features)
    # Variables the loss does not reach (the pooler under SQuAD and NER heads) have no gradient;
    # like the original's optimizer, leave them alone (no update, no weight decay, no warning).
    used = [(grad, variable) for grad, variable in zip(grads, self.model.trainable_variables)
            if grad is not None]
    self.optimizer.apply([grad for grad, _ in used], [variable for _, variable in used])
    return dict(metrics, loss=loss)

  def _one_step(self, iterator):
    shares = self.strategy.run(self._replica_step, args=(next(iterator),))
    return {name: self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
            for name, value in shares.items()}

  def _train_steps(self, iterator, num_steps):
    """Runs `num_steps` (>= 1) steps; returns the sums over steps of loss and metrics."""
    totals = self._step(iterator)
    for _ in tf.range(num_steps - 1):
      step = self._step(iterator)
      totals = {name: totals[name] + step[name] for name in totals}
    return totals


def _learning_rate(optimizer) -> float:
  """The rate the next update will use (the schedule at the current step)."""
  return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def train(strategy: tf.distribute.Strategy,
          model_fn: Callable[[], keras.Model],
          loss_fn: LossFn,
          dataset_fn: Callable[[int, int], tf.data.Dataset],
          config: TrainConfig,
          optimizer_fn: Optional[Callable[[], keras.optimizers.Optimizer]] = None) -> TrainResult:
  """Trains (or resumes training) until `config.num_train_steps`, checkpointing as it goes.

  Args:
    strategy: from `setup_from_flags` or `make_strategy`.
    model_fn: builds the task model with all its variables created (e.g. `model.build()`); it is
      called under the strategy's scope. Variable paths follow DESIGN.md's naming rule.
    loss_fn: `(model, features, training) -> (loss, {name: metric})`, every value this replica's
      share of the global-batch value (see `replica_weighted_mean`).
    dataset_fn: `(global_batch_size, seed) -> tf.data.Dataset` of feature dicts, batched to
      exactly `global_batch_size` (drop_remainder=True) and repeating for as long as training
      needs. Shuffle with `seed`: it is `config.random_seed` on every worker and in every run,
      and the dataset must give the same batches for the same seed, because a resumed run skips
      the batches trained before it (so its weights equal an uninterrupted run's).
    config: schedule, checkpointing and runtime options.
    optimizer_fn: builds the optimizer under the scope (default: `optimization.create_optimizer`
      with the config's optimizer, learning rate and schedule).

  Returns:
    A TrainResult with the trained model (usable for evaluate/predict in the same process).

  Raises:
    TrainingError: the loss became NaN or Inf (the last good checkpoint stays the latest); a
      checkpoint cannot be written; `output_dir` is in use by another job or cannot be written;
      it holds checkpoints but none is readable; `init_checkpoint` lacks encoder variables.
  """
  config.validate(strategy.num_replicas_in_sync)
  if not is_chief(strategy):
    return _train(strategy, model_fn, loss_fn, dataset_fn, config, optimizer_fn)
  with OutputDirLock(config.output_dir):
    remove_leftover_temporaries(config.output_dir)
    return _train(strategy, model_fn, loss_fn, dataset_fn, config, optimizer_fn)


def _train(strategy, model_fn, loss_fn, dataset_fn, config, optimizer_fn) -> TrainResult:
  """`train` once the chief holds the output directory's lock."""
  chief = is_chief(strategy)
  keras.utils.set_random_seed(config.random_seed)
  with strategy.scope():
    model = model_fn()
    if optimizer_fn is None:
      optimizer = optimization.create_optimizer(
          config.learning_rate, config.num_train_steps - config.phase_start_step,
          config.num_warmup_steps, compute_dtype=keras.mixed_precision.global_policy().name,
          optimizer_name=config.optimizer, schedule_start_step=config.phase_start_step)
    else:
      optimizer = optimizer_fn()
    named_variables = training_state_variables(model, optimizer)

  step, restored = _restore_or_initialize(model, named_variables, config)
  if step >= config.num_train_steps:
    logging.info("Training already finished: checkpoint at step %d >= --num_train_steps=%d",
                 step, config.num_train_steps)
    return TrainResult(model, step, restored, {}, 0.0)

  if step < config.phase_start_step:
    raise TrainingError("%s is at step %d, before this phase's first step %d: finish the "
                        "previous phase first" % (restored or config.output_dir, step,
                                                  config.phase_start_step))
  # One stream for every run: a resumed run skips (reads, does not train on) the batches before.
  dataset = dataset_fn(config.train_batch_size, config.random_seed).skip(
      step - config.phase_start_step)
  iterator = iter(_distribute(strategy, dataset))
  trainer = _Trainer(strategy, model, optimizer, loss_fn, config.use_xla)
  try:
    writer = (tf.summary.create_file_writer(config.output_dir) if chief else
              tf.summary.create_noop_writer())
  except tf.errors.OpError as error:
    raise TrainingError("cannot write summaries to --output_dir=%s (%s)" %
                        (config.output_dir, _first_line(error))) from error
  try:
    first_step, start_time, metrics, prefix, loop_rates = step, time.time(), {}, None, []
    seconds_per_step = None
    logging.info("Training from step %d to %d, global batch %d, %d replicas", step,
                 config.num_train_steps, config.train_batch_size, strategy.num_replicas_in_sync)
    while step < config.num_train_steps:
      num_steps = _loop_steps(strategy, config, step, seconds_per_step)
      loop_start = time.time()
      totals = trainer.train_steps(iterator, tf.constant(num_steps, tf.int32))
      metrics = {name: float(value) / num_steps for name, value in totals.items()}
      loop_seconds = time.time() - loop_start
      seconds_per_step = loop_seconds / num_steps
      step += num_steps
      if not all(math.isfinite(value) for value in metrics.values()):
        last = latest_checkpoint(config.output_dir)
        raise TrainingError(
            "loss is %s in steps %d-%d (metrics %s); stopped. The last good checkpoint is %s" %
            (metrics.get("loss"), step - num_steps + 1, step, metrics, last or "(none)"))
      examples_per_second = num_steps * config.train_batch_size / max(loop_seconds, 1e-9)
      loop_rates.append(examples_per_second)
      _write_summaries(writer, step, metrics, _learning_rate(optimizer), examples_per_second)
      overall_rate = (step - first_step) / max(time.time() - start_time, 1e-9)
      logging.info("step %d/%d loss %.4f %s| %.1f examples/s | ETA %s", step,
                   config.num_train_steps, metrics["loss"],
                   "".join("%s %.4f " % (k, v) for k, v in sorted(metrics.items()) if k != "loss"),
                   examples_per_second,
                   _format_duration((config.num_train_steps - step) / max(overall_rate, 1e-9)))
      if chief and (step % config.save_checkpoints_steps == 0 or step == config.num_train_steps):
        prefix = save_training_checkpoint(named_variables, config.output_dir, step,
                                          config.keep_checkpoint_max)
    elapsed = time.time() - start_time
    rate = (step - first_step) * config.train_batch_size / max(elapsed, 1e-9)
    logging.info("Trained steps %d-%d in %s (%.1f examples/s); final loss %.4f; checkpoint %s",
                 first_step + 1, step, _format_duration(elapsed), rate, metrics["loss"], prefix)
  finally:
    writer.close()
  return TrainResult(model, step, prefix, metrics, rate, loop_rates)


def _loop_steps(strategy, config: TrainConfig, step: int,
                seconds_per_step: Optional[float]) -> int:
  """Steps of the next call into the graph: up to the next multiple of `iterations_per_loop`,
  never past a checkpoint step or `num_train_steps`.

  On one machine the call is also kept to about `config.progress_seconds` at the speed of the
  previous call, and the first call to 10 steps while the speed is unknown, as the original's
  Estimator logged every 100 steps off TPU. With several workers every worker must run the same
  number of steps, so there the calls are always whole loops.
  """
  next_save = (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps
  next_loop_end = (step // config.iterations_per_loop + 1) * config.iterations_per_loop
  num_steps = min(next_loop_end, next_save, config.num_train_steps) - step
  if strategy.extended._in_multi_worker_mode():  # pylint: disable=protected-access
    return num_steps
  if seconds_per_step is None:
    return min(num_steps, 10)
  return max(1, min(num_steps, int(config.progress_seconds / max(seconds_per_step, 1e-9))))


def _restore_or_initialize(model, named_variables, config) -> tuple:
  """Resumes from output_dir's newest intact checkpoint, else loads init_checkpoint. Returns
  (step, the checkpoint resumed from or None)."""
  prefix = restore_newest_intact(config.output_dir,
                                 lambda p: restore_variables(named_variables, p))
  if prefix:
    step = int(named_variables["global_step"].numpy())
    logging.info("Resuming from %s (step %d)", prefix, step)
    return step, prefix
  if config.init_checkpoint:
    load_init_checkpoint(model, config.init_checkpoint, config.allow_partial_init_checkpoint)
  return 0, None


# TensorBoard's scalar plugin metadata, so scalars are written without importing tensorboard
# (tf.summary.scalar needs it; the runtime requirements do not include it).
_SCALAR_METADATA = summary_pb2.SummaryMetadata(
    plugin_data=summary_pb2.SummaryMetadata.PluginData(plugin_name="scalars"),
    data_class=summary_pb2.DATA_CLASS_SCALAR)


def _write_summaries(writer, step, metrics, learning_rate, examples_per_second) -> None:
  scalars = dict(metrics, learning_rate=learning_rate, examples_per_second=examples_per_second)
  with writer.as_default(step=step):
    for name, value in scalars.items():
      tf.summary.write(name, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)


# ------------------------------------------------------------------------------------------------
# Evaluation and prediction over fixed-order data.
# ------------------------------------------------------------------------------------------------


def _padded_batches(dataset: tf.data.Dataset, batch_size: int, drop_remainder: bool):
  """Batches (features, index) pairs; a last partial batch is padded with zero rows, index -1.

  Every batch has exactly `batch_size` rows (static shapes for TPUs, equal splits over replicas),
  and `features[REAL_EXAMPLE_KEY]` is 0 on padding rows (and multiplies an existing value).
  """

  def pad(features, index):
    real = tf.shape(index)[0]

    def pad_rows(tensor, value=0):
      paddings = [[0, batch_size - real]] + [[0, 0]] * (len(tensor.shape) - 1)
      padded = tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))
      return tf.ensure_shape(padded, [batch_size] + tensor.shape[1:])

    features = {name: pad_rows(value) for name, value in features.items()}
    index = pad_rows(index, -1)
    is_real = tf.cast(index >= 0, tf.float32)
    existing = features.get(REAL_EXAMPLE_KEY)
    if existing is not None:
      is_real = tf.cast(is_real, existing.dtype) * tf.reshape(existing, [batch_size])
    features[REAL_EXAMPLE_KEY] = is_real
    return features, index

  indexed = dataset.enumerate().map(lambda index, features: (features, tf.cast(index, tf.int32)))
  return indexed.batch(batch_size, drop_remainder=drop_remainder).map(pad)


def evaluate(strategy: tf.distribute.Strategy,
             model: keras.Model,
             metric_fn: MetricFn,
             dataset: tf.data.Dataset,
             batch_size: int,
             max_steps: Optional[int] = None,
             drop_remainder: bool = False) -> dict:
  """Evaluates a model over an unbatched, finite dataset of feature dicts.

  Args:
    strategy: the strategy the model was built under.
    model: a built model.
    metric_fn: `(model, features) -> {name: (numerator, denominator)}` summed over the replica's
      examples; weight by `features[REAL_EXAMPLE_KEY]` so padding rows count for nothing.
    dataset: unbatched examples in a fixed order (it is batched here to `batch_size`, global).
    batch_size: global batch size.
    max_steps: evaluate at most this many batches (all when None).
    drop_remainder: drop a last partial batch instead of padding it (the original pretraining
      eval did this).

  Returns:
    {name: numerator / denominator over all evaluated examples} as floats.
  """
  batches = _padded_batches(dataset, batch_size, drop_remainder)
  if max_steps:
    batches = batches.take(max_steps)

  @tf.function
  def step(inputs):
    features, _ = inputs
    shares = strategy.run(lambda f: dict(metric_fn(model, f)), args=(features,))
    return {name: (strategy.reduce(tf.distribute.ReduceOp.SUM, numerator, axis=None),
                   strategy.reduce(tf.distribute.ReduceOp.SUM, denominator, axis=None))
            for name, (numerator, denominator) in shares.items()}

  totals, num_batches = {}, 0
  for inputs in _distribute(strategy, batches):
    for name, (numerator, denominator) in step(inputs).items():
      previous = totals.get(name, (0.0, 0.0))
      totals[name] = (previous[0] + float(numerator), previous[1] + float(denominator))
    num_batches += 1
  if not num_batches:
    raise ValueError("evaluation dataset is empty (batch size %d%s)" %
                     (batch_size, ", partial batch dropped" if drop_remainder else ""))
  logging.info("Evaluated %d batches of %d", num_batches, batch_size)
  return {name: numerator / denominator if denominator else float("nan")
          for name, (numerator, denominator) in totals.items()}


def predict(strategy: tf.distribute.Strategy,
            model: keras.Model,
            predict_fn: PredictFn,
            dataset: tf.data.Dataset,
            batch_size: int) -> dict:
  """Runs a model over an unbatched, finite dataset; one output row per example, in input order.

  Returns:
    {name: np.ndarray with one row per input example}, without padding rows, on every worker.
  """
  batches = _padded_batches(dataset, batch_size, drop_remainder=False)

  @tf.function
  def step(inputs):
    features, index = inputs
    outputs = strategy.run(lambda f, i: dict(predict_fn(model, f), __index__=i),
                           args=(features, index))
    return {name: strategy.gather(value, axis=0) for name, value in outputs.items()}

  collected = {}
  for inputs in _distribute(strategy, batches):
    for name, value in step(inputs).items():
      collected.setdefault(name, []).append(value.numpy())
  if not collected:
    return {}
  outputs = {name: np.concatenate(values) for name, values in collected.items()}
  index = outputs.pop("__index__")
  order = np.argsort(index[index >= 0], kind="stable")
  return {name: value[index >= 0][order] for name, value in outputs.items()}


def write_eval_results(path: str, results: Mapping[str, Any]) -> None:
  """Writes `key = value` lines in sorted key order, as the original's eval_results.txt."""
  tf.io.gfile.makedirs(os.path.dirname(path) or ".")
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  atomic_files.write_text(path, "".join("%s = %s\n" % (key, results[key])
                                        for key in sorted(results)))
