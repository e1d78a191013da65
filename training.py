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
import json
import math
import os
import re
import time
from typing import Any, Callable, Mapping, Optional

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

# A task's loss function: (model, features, training) -> (loss share, {metric name: share}).
LossFn = Callable[[keras.Model, Mapping[str, tf.Tensor], bool], tuple]
# A task's evaluation metrics: (model, features) -> {name: (numerator, denominator)}, both summed
# over this replica's examples; the result is numerator / denominator over the whole dataset.
MetricFn = Callable[[keras.Model, Mapping[str, tf.Tensor]], Mapping[str, tuple]]
# A task's prediction: (model, features) -> {name: tensor with one row per example}.
PredictFn = Callable[[keras.Model, Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]


class TrainingError(RuntimeError):
  """Training cannot continue (e.g. the loss became NaN or Inf)."""


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


def _checkpoint_history(output_dir: str) -> list:
  """Prefixes listed in the state file, oldest first, that still exist."""
  state = tf.train.get_checkpoint_state(output_dir)
  if state is None:
    return []
  paths = [p if os.path.isabs(p) else os.path.join(output_dir, p)
           for p in state.all_model_checkpoint_paths]
  return [p for p in paths if tf.io.gfile.exists(p + ".index")]


def _write_state_file(output_dir: str, prefixes: list) -> None:
  """Atomically replaces `output_dir/checkpoint` (the last prefix is the latest)."""
  names = [os.path.relpath(p, output_dir) for p in prefixes]
  text = 'model_checkpoint_path: "%s"\n' % names[-1]
  text += "".join('all_model_checkpoint_paths: "%s"\n' % name for name in names)
  path = os.path.join(output_dir, "checkpoint")
  temporary = "%s.tmp-%d" % (path, os.getpid())
  with tf.io.gfile.GFile(temporary, "w") as f:
    f.write(text)
  tf.io.gfile.rename(temporary, path, overwrite=True)


def _delete_checkpoint_files(prefix: str) -> None:
  for path in tf.io.gfile.glob(prefix + ".*"):
    tf.io.gfile.remove(path)


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

  The state file is replaced only after the checkpoint's files are complete, so a crash at any
  moment leaves the previous checkpoint as the latest one.
  """
  prefix = checkpoint_prefix(output_dir, step)
  modeling.write_checkpoint(named_variables, prefix)
  history = [p for p in _checkpoint_history(output_dir) if p != prefix] + [prefix]
  keep = max(1, keep_checkpoint_max)
  _write_state_file(output_dir, history[-keep:])
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
                  output_dir: Optional[str], init_checkpoint: Optional[str] = None) -> tuple:
  """Builds a model and loads the latest checkpoint of `output_dir`, else `init_checkpoint`.

  For evaluation and prediction. Returns (model, global_step, checkpoint prefix or None); the
  step is the checkpoint's `global_step` (0 for a checkpoint without one, or no checkpoint).
  """
  with strategy.scope():
    model = model_fn()
  prefix = latest_checkpoint(output_dir) or init_checkpoint
  if not prefix:
    logging.warning("No checkpoint in %s and no --init_checkpoint: using a fresh model",
                    output_dir)
    return model, 0, None
  prefix = modeling.resolve_checkpoint_path(prefix)
  modeling.init_from_checkpoint(model, prefix)
  return model, checkpoint_step(prefix), prefix


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
               random_seed=FLAGS.random_seed)

  def validate(self, num_replicas: int) -> None:
    if not self.output_dir:
      raise ValueError("--output_dir is required for training")
    for name in ("num_train_steps", "train_batch_size", "save_checkpoints_steps",
                 "iterations_per_loop"):
      if getattr(self, name) <= 0:
        raise ValueError("--%s must be positive, got %r" % (name, getattr(self, name)))
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
      needs. Shuffle with `seed`: it is the same on every worker and changes when resuming.
    config: schedule, checkpointing and runtime options.
    optimizer_fn: builds the optimizer under the scope (default: `optimization.create_optimizer`
      with the config's optimizer, learning rate and schedule).

  Returns:
    A TrainResult with the trained model (usable for evaluate/predict in the same process).

  Raises:
    TrainingError: the loss became NaN or Inf; the last good checkpoint stays the latest.
  """
  config.validate(strategy.num_replicas_in_sync)
  chief = is_chief(strategy)
  if chief:
    tf.io.gfile.makedirs(config.output_dir)
  keras.utils.set_random_seed(config.random_seed)
  with strategy.scope():
    model = model_fn()
    if optimizer_fn is None:
      optimizer = optimization.create_optimizer(
          config.learning_rate, config.num_train_steps, config.num_warmup_steps,
          compute_dtype=keras.mixed_precision.global_policy().name,
          optimizer_name=config.optimizer)
    else:
      optimizer = optimizer_fn()
    named_variables = training_state_variables(model, optimizer)

  step = _restore_or_initialize(model, named_variables, config)
  if step >= config.num_train_steps:
    logging.info("Training already finished: checkpoint at step %d >= --num_train_steps=%d",
                 step, config.num_train_steps)
    return TrainResult(model, step, latest_checkpoint(config.output_dir), {}, 0.0)

  dataset = dataset_fn(config.train_batch_size, config.random_seed + step)
  iterator = iter(_distribute(strategy, dataset))
  trainer = _Trainer(strategy, model, optimizer, loss_fn, config.use_xla)
  writer = (tf.summary.create_file_writer(config.output_dir) if chief else
            tf.summary.create_noop_writer())
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
  writer.flush()
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


def _restore_or_initialize(model, named_variables, config) -> int:
  """Resumes from output_dir's latest checkpoint, else loads init_checkpoint. Returns the step."""
  prefix = latest_checkpoint(config.output_dir)
  if prefix:
    restore_variables(named_variables, prefix)
    step = int(named_variables["global_step"].numpy())
    logging.info("Resuming from %s (step %d)", prefix, step)
    return step
  if config.init_checkpoint:
    modeling.init_from_checkpoint(model, config.init_checkpoint)
  return 0


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
