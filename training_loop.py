# coding=utf-8
"""The one training loop, and evaluation and prediction over fixed-order data, for every script.

The original BERT trained, evaluated and predicted with TPUEstimator. This module gives the same
behaviour to Keras 3 models under any `tf.distribute` strategy (distribution.py), with one path:

- `train()`: a task-agnostic loop that runs up to `iterations_per_loop` steps per call into the
  graph (as TPUEstimator did; on one machine a call also ends after about a minute, so progress
  shows on a CPU), writes Google-format training checkpoints (checkpoints.py) as it goes, resumes
  from the newest intact one (refusing a resume with other settings than those recorded when the
  run started), stops exactly at the last step of the schedule (given in steps, or in epochs of a
  number of examples), and stops with a clear error when the loss is no longer finite;
- `evaluate()` and `predict()`: every example of a fixed-order dataset exactly once, in order,
  with the last partial batch padded for the devices and the padding removed from the results.

A task gives the loop functions of the shapes `LossFn`, `MetricFn` and `PredictFn`; the loss
convention under distribution is distribution.py's (`replica_weighted_mean`).
"""

import dataclasses
import json
import math
import os
import time
from typing import Any, Callable, Mapping, Optional

from absl import logging
import keras
import tensorflow as tf
from tensorflow.core.framework import summary_pb2

import atomic_files
import checkpoints
import distribution
import errors
import optimization
import packing
import progress_log

# Feature key that evaluate() and predict() set to 1 for real examples and 0 for padding rows
# (the original's name: its classifier TFRecords already carry it for TPU padding).
REAL_EXAMPLE_KEY = "is_real_example"

# A task's loss function: (model, features, training) -> (loss share, {metric name: share}).
LossFn = Callable[[keras.Model, Mapping[str, tf.Tensor], bool], tuple]
# A task's evaluation metrics: (model, features) -> {name: (numerator, denominator)}, both summed
# over this replica's examples; the result is numerator / denominator over the whole dataset.
MetricFn = Callable[[keras.Model, Mapping[str, tf.Tensor]], Mapping[str, tuple]]
# A task's prediction: (model, features) -> {name: tensor with one row per example}.
PredictFn = Callable[[keras.Model, Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]


# ------------------------------------------------------------------------------------------------
# Training.
# ------------------------------------------------------------------------------------------------


# What a schedule in epochs counts unless the task names its unit (e.g. SQuAD's questions).
EXAMPLES_UNIT = "training examples"


@dataclasses.dataclass
class TrainConfig:
  """What `train` needs besides the task's functions. Batch sizes are global.

  The schedule is given in steps (`num_train_steps`, `num_warmup_steps`: pretraining), or in
  epochs (`num_train_epochs`, `warmup_proportion`: fine-tuning), which `with_schedule` turns into
  steps from the number of training examples as the original scripts did.
  """
  output_dir: str
  num_train_steps: Optional[int] = None
  num_warmup_steps: Optional[int] = None
  learning_rate: float = 5e-5
  optimizer: str = "bert_adam"  # one of choices.OPTIMIZERS
  lr_schedule: str = "original"  # one of choices.SCHEDULES
  train_batch_size: int = 32  # examples per optimizer update (the effective batch)
  # Micro-batches per update: each update sums the gradients of this many micro-batches of
  # train_batch_size / gradient_accumulation_steps examples (same result, less memory).
  gradient_accumulation_steps: int = 1
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
  # Resume although the run's recorded settings differ from these (a WARNING lists them).
  allow_changed_settings: bool = False
  # Settings outside this config that shape what is trained (the model config, max_seq_length):
  # recorded in output_dir with the training settings and checked on resume like them.
  model_settings: Mapping[str, Any] = dataclasses.field(default_factory=dict)
  num_train_epochs: Optional[float] = None
  warmup_proportion: Optional[float] = None
  # The step a later phase of the job starts at (pretraining's phase 2 resumes phase 1's
  # output_dir): its learning rate schedule and its dataset count from here.
  phase_start_step: int = 0
  # Evaluation during training (with an `evaluate_fn`; see `_Evaluations`): every this many steps
  # (0: not by steps), and at each epoch end and the last step when any of these three is set.
  eval_every_steps: int = 0
  early_stopping_patience: int = 0  # stop after this many evaluations without improvement
  early_stopping_metric: Optional[str] = None  # higher is better unless its name has "loss"
  keep_best_checkpoint: bool = False  # keep output_dir/best/model.ckpt-<step> + its metrics
  steps_per_epoch: Optional[float] = None  # set by with_schedule from the number of examples
  # Pack each global batch's sequences into shared rows (packing.py): the same examples, steps and
  # math, fewer positions computed. Not recorded with the settings (the same updates).
  pack_sequences: bool = False

  @property
  def evaluates_during_training(self) -> bool:
    return bool(self.eval_every_steps or self.early_stopping_patience or
                self.keep_best_checkpoint)

  def with_schedule(self, num_examples: Optional[int],
                    examples_unit: str = EXAMPLES_UNIT) -> "TrainConfig":
    """This config with its steps: from the epochs over `num_examples` when epochs are given
    (`int(num_examples / train_batch_size * num_train_epochs)`, warmup that share of it).

    Logs the count with what was counted (`examples_unit`: SQuAD's original counts questions
    where Hugging Face counts their windows, so the same epochs can give other step counts).
    """
    if self.num_train_epochs is None:
      return self
    if num_examples is None:
      raise ValueError("a schedule in epochs needs the number of training examples")
    num_train_steps = int(num_examples / self.train_batch_size * self.num_train_epochs)
    if num_train_steps <= 0:
      raise errors.FlagError("`num_train_epochs`=%g of %d training examples at "
                             "`train_batch_size`=%d is less than one step" %
                             (self.num_train_epochs, num_examples, self.train_batch_size))
    num_warmup_steps = int(num_train_steps * self.warmup_proportion)
    logging.info("num_train_steps = int(%d %s / batch %d * %g epochs) = %d; warmup %d steps "
                 "(%g of them); schedule: %s", num_examples, examples_unit, self.train_batch_size,
                 self.num_train_epochs, num_train_steps, num_warmup_steps, self.warmup_proportion,
                 optimization.describe_schedule(self.lr_schedule))
    return dataclasses.replace(self, num_train_steps=num_train_steps,
                               num_warmup_steps=num_warmup_steps,
                               steps_per_epoch=num_examples / self.train_batch_size)

  def validate(self, num_replicas: int) -> None:
    if not self.output_dir:
      raise errors.FlagError("`output_dir` is required for training")
    for name in ("num_train_steps", "train_batch_size", "save_checkpoints_steps",
                 "iterations_per_loop", "gradient_accumulation_steps"):
      if getattr(self, name) <= 0:
        raise errors.FlagError("`%s` must be positive, got %r" % (name, getattr(self, name)))
    if not 0 <= self.phase_start_step < self.num_train_steps:
      raise errors.FlagError("phase_start_step=%d must be in [0, num_train_steps=%d)" %
                             (self.phase_start_step, self.num_train_steps))
    for name in ("eval_every_steps", "early_stopping_patience"):
      if getattr(self, name) < 0:
        raise errors.FlagError("`%s` must not be negative, got %r" % (name, getattr(self, name)))
    if self.num_warmup_steps < 0:
      raise errors.FlagError("`num_warmup_steps` must not be negative, got %r" %
                             self.num_warmup_steps)
    if self.train_batch_size % (num_replicas * self.gradient_accumulation_steps):
      raise errors.FlagError(
          "`train_batch_size`=%d is not divisible by the %d replicas times "
          "`gradient_accumulation_steps`=%d" % (self.train_batch_size, num_replicas,
                                                self.gradient_accumulation_steps))


@dataclasses.dataclass
class TrainResult:
  """What `train` leaves behind."""
  model: keras.Model
  global_step: int
  checkpoint: Optional[str]  # the final model.ckpt-<step> (None on non-chief workers)
  metrics: dict  # mean loss and metrics over the last loop
  examples_per_second: float  # over the steps this run trained (0 when it trained none)
  loop_examples_per_second: list = dataclasses.field(default_factory=list)  # per graph call
  # Evaluations during training, this run's and the resumed ones': [{"step", "metrics"}].
  evaluations: list = dataclasses.field(default_factory=list)
  best_checkpoint: Optional[str] = None  # output_dir/best/model.ckpt-<step> when kept


# Room in a seed generator's counter for the draws of one step (one per call of a dropout layer).
_RANDOM_DRAWS_PER_STEP = 1 << 16


def _split_micro_batches(features: Mapping[str, tf.Tensor], num_micro_batches: int) -> dict:
  """[B, ...] global batches -> [B / K, K, ...]: element [j, k] is row j of micro-batch k (rows
  k * B / K to (k + 1) * B / K - 1). Splitting the first axis over replicas then gives each
  replica its part of every micro-batch."""

  def split(tensor):
    micro = tf.reshape(tensor, tf.concat([[num_micro_batches, -1], tf.shape(tensor)[1:]], 0))
    return tf.transpose(micro, [1, 0] + list(range(2, len(tensor.shape) + 1)))

  return {name: split(tensor) for name, tensor in features.items()}


def _packed(dataset: tf.data.Dataset, num_groups: int) -> tf.data.Dataset:
  """Global batches packed into rows (packing.pack_batch), one group per replica and
  micro-batch: the split into micro-batches and replicas then hands each the examples it gets
  unpacked."""
  logging.info("Training on packed rows (%d packing groups per global batch)", num_groups)
  return dataset.map(lambda features: packing.pack_batch(features, num_groups),
                     num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def _on_merged_groups(loss_fn: LossFn) -> LossFn:
  """`loss_fn` on a replica's packed groups merged into one batch (packing.merge_groups)."""

  def merged_loss(model, features, training):
    return loss_fn(model, packing.merge_groups(features), training)

  return merged_loss


def _zeros_like(output: tf.Tensor) -> tf.Tensor:
  """Zeros of a traced function's output's shape and dtype: where the training loops' sums start."""
  return tf.zeros(output.shape, output.dtype)


class _Trainer:
  """Owns the compiled multi-step training function for one model and optimizer.

  With gradient accumulation (K > 1 micro-batches per update) each replica's step first records
  the loss's normalizers over its part of the whole effective batch (the model's forward pass
  there is dead code, which TensorFlow prunes), sums them over replicas, then runs the K
  micro-batches one after the other in a loop, each normalized by those totals, adds their
  gradients and applies the sum once (clipped once by the optimizer, as a K times larger batch).
  """

  def __init__(self, strategy, model, optimizer, loss_fn, use_xla, accumulation_steps=1):
    self.strategy = strategy
    self.model = model
    self.optimizer = optimizer
    self.loss_fn = loss_fn
    self.accumulation_steps = accumulation_steps
    self.loss_scaled = isinstance(optimizer, keras.optimizers.LossScaleOptimizer)
    compiled = use_xla and strategy.num_replicas_in_sync == 1
    if use_xla and not compiled and not isinstance(strategy, tf.distribute.TPUStrategy):
      logging.warning("`use_xla` is ignored with %d replicas (the loss all-reduces across "
                      "replicas, which XLA cannot compile on CPU/GPU)",
                      strategy.num_replicas_in_sync)
    # A nested tf.function may not all-reduce, so only the one-replica XLA case gets one.
    self._gradients = (tf.function(self._compute_gradients, jit_compile=True) if compiled else
                       self._compute_gradients)
    # Dropout draws from Keras seed generators (variables outside the checkpoint); each step
    # sets their counters from the step, so a step replayed after a resume draws the same masks.
    self._seed_states = [v for v in model.variables if v.name == "seed_generator_state"]
    self._micro_step = tf.function(self._micro_batch_gradients)
    # Traced as plain Python (nothing in a step branches on a tensor; the accumulation loop is an
    # explicit tf.while_loop): AutoGraph's conversion of the model, loss and optimizer code would
    # only add tracing time.
    self._step = tf.function(self._one_step, autograph=False)
    self.train_steps = tf.function(self._train_steps)

  def _compute_gradients(self, features):
    variables = self.model.trainable_variables
    with tf.GradientTape() as tape:
      loss, metrics = self.loss_fn(self.model, features, True)
      scaled = self.optimizer.scale_loss(loss) if self.loss_scaled else loss
    return loss, dict(metrics), tape.gradient(scaled, variables)

  def _seed_dropout(self, micro_batch=0):
    """Sets the dropout seed counters from the micro-batch's index since the start of training."""
    micro_step = (tf.cast(self.optimizer.iterations, tf.int64) * self.accumulation_steps +
                  tf.cast(micro_batch, tf.int64))
    for state in self._seed_states:
      state.assign(tf.stack([state[0], tf.cast(micro_step * _RANDOM_DRAWS_PER_STEP,
                                               state.dtype)]))

  def _apply(self, grads):
    # Variables the loss does not reach (the pooler under SQuAD and NER heads) have no gradient;
    # like the original's optimizer, leave them alone (no update, no weight decay, no warning).
    used = [(grad, variable) for grad, variable in zip(grads, self.model.trainable_variables)
            if grad is not None]
    self.optimizer.apply([grad for grad, _ in used], [variable for _, variable in used])

  def _replica_step(self, features):
    self._seed_dropout()
    loss, metrics, grads = self._gradients(features)
    self._apply(grads)
    return dict(metrics, loss=loss)

  def _micro_batch_gradients(self, features, micro_batch, denominators):
    """Loss and metric shares and dense gradients of micro-batch `micro_batch` of a replica's
    [b, K, ...] features, normalized over the effective batch (None: no gradient)."""
    self._seed_dropout(micro_batch)
    micro_features = {name: tf.gather(value, micro_batch, axis=1)
                      for name, value in features.items()}
    with distribution.effective_batch_denominators(denominators):
      loss, metrics, grads = self._gradients(micro_features)
    return loss, metrics, [None if g is None else tf.convert_to_tensor(g) for g in grads]

  def _replica_accumulated_step(self, features):
    everything = {name: tf.reshape(value, tf.concat([[-1], tf.shape(value)[2:]], 0))
                  for name, value in features.items()}
    with distribution.recording_denominators() as denominators:
      self.loss_fn(self.model, everything, True)  # Only its denominators are computed.
    if not denominators:
      raise ValueError("gradient accumulation needs a loss normalized with "
                       "distribution.replica_weighted_mean (the loss convention)")
    denominators = tf.distribute.get_replica_context().all_reduce(
        tf.distribute.ReduceOp.SUM, denominators)
    # The sums start from zeros shaped like a micro-batch's outputs, so that the micro-step is
    # called once, inside the loop (as _train_steps does with the step).
    loss, metrics, grads = self._micro_step.get_concrete_function(
        features, tf.constant(0), denominators).structured_outputs
    has_grad = [g is not None for g in grads]

    def add_micro_batch(micro_batch, loss, metrics, grads):
      more_loss, more_metrics, more_grads = self._micro_step(features, micro_batch, denominators)
      more_grads = [g for g in more_grads if g is not None]
      return (micro_batch + 1, loss + more_loss,
              {name: value + more_metrics[name] for name, value in metrics.items()},
              [total + g for total, g in zip(grads, more_grads)])

    # One micro-batch at a time: parallel iterations would hold several in memory.
    _, loss, metrics, grads = tf.while_loop(
        lambda micro_batch, *_: micro_batch < self.accumulation_steps, add_micro_batch,
        (tf.constant(0), _zeros_like(loss),
         {name: _zeros_like(value) for name, value in metrics.items()},
         [_zeros_like(g) for g in grads if g is not None]),
        parallel_iterations=1)
    grads = iter(grads)
    self._apply([next(grads) if used else None for used in has_grad])
    return dict(metrics, loss=loss)

  def _one_step(self, iterator):
    replica_step = (self._replica_step if self.accumulation_steps == 1 else
                    self._replica_accumulated_step)
    shares = self.strategy.run(replica_step, args=(next(iterator),))
    return {name: self.strategy.reduce(tf.distribute.ReduceOp.SUM, value, axis=None)
            for name, value in shares.items()}

  def _train_steps(self, iterator, num_steps):
    """Runs `num_steps` (>= 1) steps; returns the sums over steps of loss and metrics.

    The step is called once, inside the loop: a second call site (to start the sums from the
    first step's values) made Grappler inline and optimize the whole step twice."""
    outputs = self._step.get_concrete_function(iterator).structured_outputs
    totals = {name: _zeros_like(value) for name, value in outputs.items()}
    for _ in tf.range(num_steps):
      step = self._step(iterator)
      totals = {name: totals[name] + step[name] for name in totals}
    return totals


EVAL_HISTORY_FILE = "eval_history.json"


def higher_is_better(metric: str) -> bool:
  """Whether a larger value of the metric is an improvement (all but losses)."""
  return "loss" not in metric


class _Evaluations:
  """Evaluation during training: when it is due, its TensorBoard scalars (`output_dir/eval`, as
  the Estimator wrote them), early stopping and the best checkpoint.

  The history of evaluations (`output_dir/eval_history.json`, rewritten atomically after each)
  is the early-stopping state: a resumed run keeps the evaluations up to the step it resumes
  from, so the best metric and the evaluations since it survive a kill. Every worker evaluates
  (evaluation is collective) and decides alike; the chief writes.
  """

  def __init__(self, config: TrainConfig, evaluate_fn, step: int):
    self.config = config
    self.evaluate_fn = evaluate_fn
    self.path = os.path.join(config.output_dir, EVAL_HISTORY_FILE)
    self.history = [entry for entry in self._read() if entry["step"] <= step]
    self.writer = (tf.summary.create_file_writer(os.path.join(config.output_dir, "eval"))
                   if distribution.is_chief() else tf.summary.create_noop_writer())

  def _read(self) -> list:
    if not tf.io.gfile.exists(self.path):
      return []
    with tf.io.gfile.GFile(self.path) as f:
      try:
        return json.load(f)["evaluations"]
      except (ValueError, KeyError, TypeError) as error:
        raise errors.TrainingError(
            "%s is not an evaluation history (%s); remove it to start early stopping anew" %
            (self.path, error)) from None

  def next_step(self, step: int) -> int:
    """The first evaluation step after `step`: a multiple of eval_every_steps, an epoch end or
    the last step."""
    config = self.config
    candidates = [config.num_train_steps]
    if config.eval_every_steps:
      candidates.append((step // config.eval_every_steps + 1) * config.eval_every_steps)
    if config.steps_per_epoch:
      epoch = int(step / config.steps_per_epoch)
      while int(epoch * config.steps_per_epoch) <= step:
        epoch += 1
      candidates.append(int(epoch * config.steps_per_epoch))
    return min(candidates)

  def _metric(self, entry: dict) -> float:
    value = entry["metrics"][self.config.early_stopping_metric]
    return value if higher_is_better(self.config.early_stopping_metric) else -value

  def best(self) -> Optional[dict]:
    """The first evaluation with the best metric (None before any, or without a metric)."""
    best = None
    for entry in self.history:
      if math.isfinite(self._metric(entry)) and (best is None or
                                                 self._metric(entry) > self._metric(best)):
        best = entry
    return best

  def should_stop(self) -> bool:
    """Whether the last `early_stopping_patience` evaluations did not improve on the best."""
    patience = self.config.early_stopping_patience
    best = self.best()
    if not patience or not self.history:
      return False
    since = len(self.history) - 1 - (self.history.index(best) if best else -1)
    return since >= patience

  def stops_early_at(self, step: int) -> bool:
    """`should_stop` after the evaluation at `step`, saying so in the log when it does."""
    if not self.should_stop():
      return False
    best = self.best() or {"step": None, "metrics": {}}
    metric = self.config.early_stopping_metric
    logging.info("Stopping early at step %d: %s did not improve in %d evaluations (best %s at "
                 "step %s)", step, metric, self.config.early_stopping_patience,
                 best["metrics"].get(metric), best["step"])
    return True

  def run(self, model: keras.Model, step: int) -> None:
    """Evaluates, logs and writes the scalars, records the evaluation, keeps the best."""
    metrics = {name: float(value) for name, value in self.evaluate_fn(model).items()}
    logging.info("Evaluation at step %d: %s", step,
                 ", ".join("%s %.4f" % item for item in sorted(metrics.items())))
    with self.writer.as_default(step=step):
      for name, value in metrics.items():
        tf.summary.write(name, tf.constant(value, tf.float32), metadata=_SCALAR_METADATA)
    self.writer.flush()
    metric = self.config.early_stopping_metric
    if (self.config.early_stopping_patience or self.config.keep_best_checkpoint) and (
        metric not in metrics):
      raise errors.TrainingError(
          "`early_stopping_metric`=%s is not one of the evaluation's metrics: %s" %
          (metric, ", ".join(sorted(metrics))))
    self.history.append({"step": step, "metrics": metrics})
    if not distribution.is_chief():
      return
    if self.config.keep_best_checkpoint and self.best() is self.history[-1]:
      self._keep_best(model, step, metrics)
    atomic_files.write_text(self.path, json.dumps(
        {"early_stopping_metric": metric, "evaluations": self.history}, indent=1) + "\n")

  def _keep_best(self, model, step, metrics) -> None:
    """Writes best/model.ckpt-<step> (model variables) and best/eval_results.txt, then deletes
    the previous best."""
    directory = os.path.join(self.config.output_dir, checkpoints.BEST_DIR)
    tf.io.gfile.makedirs(directory)
    prefix = checkpoints.checkpoint_prefix(directory, step)
    with atomic_files.atomic_output(prefix) as temporary:
      checkpoints.save_checkpoint(model, temporary)
    write_eval_results(os.path.join(directory, "eval_results.txt"),
                       dict(metrics, global_step=step))
    for path in tf.io.gfile.glob(os.path.join(directory, checkpoints.CHECKPOINT_BASENAME + "-*")):
      if not path.startswith(prefix + "."):
        atomic_files.remove_quietly(path)
    logging.info("Best %s so far: %s at step %d, kept in %s", self.config.early_stopping_metric,
                 metrics[self.config.early_stopping_metric], step, prefix)


def _learning_rate(optimizer) -> float:
  """The rate the next update will use (the schedule at the current step)."""
  return float(keras.ops.convert_to_numpy(optimizer.learning_rate))


def train(strategy: tf.distribute.Strategy,
          model_fn: Callable[[], keras.Model],
          loss_fn: LossFn,
          dataset_fn: Callable[[int, int], tf.data.Dataset],
          config: TrainConfig,
          optimizer_fn: Optional[Callable[[], keras.optimizers.Optimizer]] = None,
          num_examples: Optional[int] = None,
          evaluate_fn: Optional[Callable[[keras.Model], Mapping[str, float]]] = None,
          examples_unit: str = EXAMPLES_UNIT,
          write_run_files: Optional[Callable[[], None]] = None) -> TrainResult:
  """Trains (or resumes training) to the last step of the schedule, checkpointing as it goes.

  Args:
    strategy: from `cli_setup.setup_strategy` or `distribution.make_strategy`.
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
    num_examples: the number of training examples, for a schedule given in epochs.
    evaluate_fn: `model -> {metric: value}` on the dev set; with `config.eval_every_steps`,
      `early_stopping_patience` or `keep_best_checkpoint` it runs during training (see
      `_Evaluations`), and training may stop before `num_train_steps`.
    examples_unit: what `num_examples` counts, for the log line of the schedule in epochs.
    write_run_files: writes the task's files that go with the run's checkpoints (a label or tag
      list) on the chief, once every check passed and the run's settings are recorded: a run
      refused before (a schedule of no step, another run's settings, an init checkpoint that does
      not fit) leaves none to hold the next run in `output_dir` to its labels.

  Returns:
    A TrainResult with the trained model (usable for evaluate/predict in the same process).

  Raises:
    errors.TrainingError: the loss became NaN or Inf (the last good checkpoint stays the
      latest); a checkpoint cannot be written; `output_dir` is in use by another job or cannot be
      written; it holds checkpoints but none is readable; `init_checkpoint` lacks encoder
      variables; a resume has other settings than those recorded in `output_dir` (see
      `_check_and_record_settings`).
  """
  config = config.with_schedule(num_examples, examples_unit)
  config.validate(strategy.num_replicas_in_sync)
  if not distribution.is_chief():
    return _train(strategy, model_fn, loss_fn, dataset_fn, config, optimizer_fn, evaluate_fn,
                  write_run_files)
  with atomic_files.OutputDirLock(config.output_dir):
    checkpoints.remove_leftover_temporaries(config.output_dir)
    return _train(strategy, model_fn, loss_fn, dataset_fn, config, optimizer_fn, evaluate_fn,
                  write_run_files)


def _train(strategy, model_fn, loss_fn, dataset_fn, config, optimizer_fn,
           evaluate_fn, write_run_files) -> TrainResult:
  """`train` once the chief holds the output directory's lock."""
  chief = distribution.is_chief()
  keras.utils.set_random_seed(config.random_seed)
  with strategy.scope():
    model = model_fn()
    optimizer = optimizer_fn() if optimizer_fn is not None else _optimizer(config)
    named_variables = checkpoints.training_state_variables(model, optimizer)

  step, restored = _restore_or_initialize(model, named_variables, config)
  if step < config.phase_start_step:
    raise errors.TrainingError(
        "%s is at step %d, before this phase's first step %d: finish the previous phase first" %
        (restored or config.output_dir, step, config.phase_start_step))
  if chief:
    _check_and_record_settings(config, step)
    if write_run_files is not None:
      write_run_files()
  evaluations = (_Evaluations(config, evaluate_fn, step) if evaluate_fn is not None and
                 config.evaluates_during_training else None)

  def evaluation_results() -> dict:
    return dict(evaluations=evaluations.history if evaluations else [],
                best_checkpoint=checkpoints.best_checkpoint(config.output_dir) if (
                    evaluations and config.keep_best_checkpoint) else None)

  if step >= config.num_train_steps or (evaluations and evaluations.should_stop()):
    logging.info("Training already finished: checkpoint at step %d (`num_train_steps`=%d%s)",
                 step, config.num_train_steps,
                 ", stopped early" if step < config.num_train_steps else "")
    return TrainResult(model, step, restored, {}, 0.0, **evaluation_results())

  iterator = _training_iterator(strategy, dataset_fn, config, step)
  trainer = _Trainer(strategy, model, optimizer,
                     _on_merged_groups(loss_fn) if config.pack_sequences else loss_fn,
                     config.use_xla, config.gradient_accumulation_steps)
  writer = _summary_writer(config.output_dir, chief)
  try:
    first_step, metrics, prefix, loop_rates = step, {}, None, []
    seconds_per_step = None
    progress = progress_log.Progress("Training", config.num_train_steps, "steps",
                                     interval_seconds=0, initial=step)
    logging.info("Training from step %d to %d, global batch %d (%d micro-batches), %d replicas",
                 step, config.num_train_steps, config.train_batch_size,
                 config.gradient_accumulation_steps, strategy.num_replicas_in_sync)
    stop = False
    while step < config.num_train_steps and not stop:
      next_eval = evaluations.next_step(step) if evaluations else None
      num_steps = _loop_steps(strategy, config, step, seconds_per_step, next_eval)
      loop_start = time.time()
      totals = trainer.train_steps(iterator, tf.constant(num_steps, tf.int32))
      metrics = {name: float(value) / num_steps for name, value in totals.items()}
      loop_seconds = time.time() - loop_start
      seconds_per_step = loop_seconds / num_steps
      step += num_steps
      _check_finite(metrics, step - num_steps + 1, step, config.output_dir)
      examples_per_second = num_steps * config.train_batch_size / max(loop_seconds, 1e-9)
      loop_rates.append(examples_per_second)
      _write_summaries(writer, step, metrics, _learning_rate(optimizer), examples_per_second)
      progress.update(step, _progress_line(metrics, examples_per_second))
      if step == next_eval:
        evaluations.run(model, step)
        stop = evaluations.stops_early_at(step)
      if chief and (step % config.save_checkpoints_steps == 0 or step == config.num_train_steps
                    or stop):
        prefix = checkpoints.save_training_checkpoint(named_variables, config.output_dir, step,
                                                      config.keep_checkpoint_max)
    rate = progress.rate() * config.train_batch_size
    progress.finish("steps %d-%d, %.1f examples/s; final loss %.4f; checkpoint %s" % (
        first_step + 1, step, rate, metrics["loss"], prefix))
  finally:
    writer.close()
    if evaluations:
      evaluations.writer.close()
  return TrainResult(model, step, prefix, metrics, rate, loop_rates, **evaluation_results())


def _optimizer(config: TrainConfig) -> keras.optimizers.Optimizer:
  """The optimizer and learning rate schedule the config names, for this phase's steps."""
  return optimization.create_optimizer(
      config.learning_rate, config.num_train_steps - config.phase_start_step,
      config.num_warmup_steps, compute_dtype=keras.mixed_precision.global_policy().name,
      optimizer_name=config.optimizer, schedule_start_step=config.phase_start_step,
      schedule=config.lr_schedule)


def _training_iterator(strategy, dataset_fn, config: TrainConfig, step: int):
  """The distributed iterator over the global batches from `step` on (packed, split into
  micro-batches as the config says). One stream for every run: a resumed run skips (reads, does
  not train on) the batches before its step."""
  dataset = dataset_fn(config.train_batch_size, config.random_seed).skip(
      step - config.phase_start_step)
  if config.pack_sequences:
    dataset = _packed(dataset, strategy.num_replicas_in_sync * config.gradient_accumulation_steps)
  if config.gradient_accumulation_steps > 1:
    dataset = dataset.map(lambda features: _split_micro_batches(
        features, config.gradient_accumulation_steps))
  return iter(distribution.distribute_dataset(strategy, dataset))


def _summary_writer(output_dir: str, chief: bool):
  """TensorBoard's writer into output_dir on the chief (a no-op writer on the other workers)."""
  try:
    return (tf.summary.create_file_writer(output_dir) if chief else
            tf.summary.create_noop_writer())
  except tf.errors.OpError as error:
    raise errors.TrainingError("cannot write summaries to `output_dir`=%s (%s)" %
                               (output_dir, errors.first_line(error))) from error


def _progress_line(metrics: dict, examples_per_second: float) -> str:
  """The loss, the other metrics (by name) and the speed of the last call into the graph."""
  return "loss %.4f%s, %.1f examples/s" % (
      metrics["loss"],
      "".join(", %s %.4f" % (k, v) for k, v in sorted(metrics.items()) if k != "loss"),
      examples_per_second)


def _check_finite(metrics: dict, first_step: int, last_step: int, output_dir: str) -> None:
  """Stops training when the loss or a metric of steps first_step..last_step is NaN or Inf,
  naming the last good checkpoint."""
  if not all(math.isfinite(value) for value in metrics.values()):
    last = checkpoints.latest_checkpoint(output_dir)
    raise errors.TrainingError(
        "loss is %s in steps %d-%d (metrics %s); stopped. The last good checkpoint is %s" %
        (metrics.get("loss"), first_step, last_step, metrics, last or "(none)"))


def _loop_steps(strategy, config: TrainConfig, step: int,
                seconds_per_step: Optional[float], next_eval: Optional[int] = None) -> int:
  """Steps of the next call into the graph: up to the next multiple of `iterations_per_loop`,
  never past a checkpoint step, an evaluation step or `num_train_steps`.

  On one machine the call is also kept to about `config.progress_seconds` at the speed of the
  previous call, and the first call to 10 steps while the speed is unknown, as the original's
  Estimator logged every 100 steps off TPU. With several workers every worker must run the same
  number of steps, so there the calls are always whole loops.
  """
  next_save = (step // config.save_checkpoints_steps + 1) * config.save_checkpoints_steps
  next_loop_end = (step // config.iterations_per_loop + 1) * config.iterations_per_loop
  num_steps = min(next_loop_end, next_save, config.num_train_steps, next_eval or math.inf) - step
  if strategy.extended._in_multi_worker_mode():  # pylint: disable=protected-access
    return num_steps
  if seconds_per_step is None:
    return min(num_steps, 10)
  return max(1, min(num_steps, int(config.progress_seconds / max(seconds_per_step, 1e-9))))


def _restore_or_initialize(model, named_variables, config) -> tuple:
  """Resumes from output_dir's newest intact checkpoint, else loads init_checkpoint. Returns
  (step, the checkpoint resumed from or None)."""
  prefix = checkpoints.restore_newest_intact(config.output_dir,
                                 lambda p: checkpoints.restore_variables(named_variables, p))
  if prefix:
    step = int(named_variables["global_step"].numpy())
    logging.info("Resuming from %s (step %d)", prefix, step)
    return step, prefix
  if config.init_checkpoint:
    checkpoints.load_init_checkpoint(model, config.init_checkpoint,
                                     config.allow_partial_init_checkpoint)
  return 0, None


SETTINGS_FILE = "training_settings.json"

# The TrainConfig fields that shape what is trained; with `model_settings` they are recorded and
# checked on resume. gradient_accumulation_steps and pack_sequences give the same updates with
# dropout off, but other dropout draws with it on (other micro-batches, other row shapes), so a
# resume that changed them would not end with the uninterrupted run's weights. Not the
# checkpointing, XLA and evaluation options, nor init_checkpoint (a resume does not read it).
_RECORDED_FIELDS = ("train_batch_size", "learning_rate", "optimizer", "lr_schedule",
                    "num_train_steps", "num_warmup_steps", "num_train_epochs", "warmup_proportion",
                    "random_seed", "gradient_accumulation_steps", "pack_sequences")
# Fields recorded only by later versions, with the value a record without them implies.
_IMPLIED_SETTINGS = {"lr_schedule": "original", "gradient_accumulation_steps": 1,
                     "pack_sequences": False}
# Settings recorded only by later versions that a record without them leaves unchecked, and that
# a script without them (run_pretraining has no --task_name) does not compare.
_UNCHECKED_WHEN_UNRECORDED = ("task", "train_features", "vocab", "output_names", "do_lower_case",
                              "mixed_precision",
                              "task_name", "multi_label", "version_2_with_negative",
                              "bucket_by_length", "group_by_length", "dynamic_masking",
                              "masked_lm_prob", "do_whole_word_mask")
# Model settings that evaluation, prediction and export may change: they do not change what the
# trained model computes (texts are cut at another length; dropout is off; the initializer is
# not used; batches are composed as evaluation composes them).
_SETTINGS_FREE_AT_INFERENCE = ("max_seq_length", "bert_config.hidden_dropout_prob",
                               "bert_config.attention_probs_dropout_prob",
                               "bert_config.initializer_range", "bucket_by_length",
                               "group_by_length", "dynamic_masking", "masked_lm_prob",
                               "do_whole_word_mask")
# The flag a model setting comes from, where its name differs.
_SETTING_FLAGS = {"bert_config": "bert_config_file", "vocab": "vocab_file"}
# What names a model setting that no flag sets.
_SETTING_FILES = {"output_names": "the label list (label_list.txt or tag_list.txt)",
                  "task": "the task (what the run's script trains)",
                  "train_features": "the training data (the train file's features)"}


def _recorded_settings(config: TrainConfig) -> dict:
  """The run's settings as JSON values: the fields of _RECORDED_FIELDS that are set, the compute
  precision (`mixed_precision`: Keras's global policy, bfloat16 rounds every activation) and
  `model_settings`."""
  settings = {name: getattr(config, name) for name in _RECORDED_FIELDS
              if getattr(config, name) is not None}
  settings["mixed_precision"] = keras.mixed_precision.global_policy().name.replace("mixed_", "")
  return json.loads(json.dumps(dict(settings, **config.model_settings)))


def _flatten(settings: Mapping[str, Any], prefix: str = "") -> dict:
  """{"bert_config": {"hidden_size": 768}} -> {"bert_config.hidden_size": 768}."""
  flat = {}
  for name, value in settings.items():
    if isinstance(value, Mapping):
      flat.update(_flatten(value, prefix + name + "."))
    else:
      flat[prefix + name] = value
  return flat


def _setting_name(key: str, in_epochs: bool) -> str:
  """The flag a difference names (a field of a config file in parentheses); the step counts of
  a schedule in epochs come from the epochs and the number of examples, not from a flag."""
  if in_epochs and key in ("num_train_steps", "num_warmup_steps"):
    return "%s (from the epochs and the number of examples)" % key
  setting, _, field = key.partition(".")
  if setting in _SETTING_FILES:
    return _SETTING_FILES[setting]
  flag = "`%s`" % _SETTING_FLAGS.get(setting, setting)
  return "%s (%s)" % (flag, field) if field else flag


def _settings_differences(recorded: Mapping[str, Any], current: Mapping[str, Any],
                          in_epochs: bool) -> list:
  """`<flag>: recorded X, now Y` for each setting that differs (`unset` for a missing one; an
  older record's missing setting of _IMPLIED_SETTINGS is the value it implies)."""
  recorded, current = _flatten(dict(_IMPLIED_SETTINGS, **recorded)), _flatten(current)
  current = {key: value for key, value in current.items()
             if key in recorded or key not in _UNCHECKED_WHEN_UNRECORDED}
  recorded = {key: value for key, value in recorded.items()  # Settings this script lacks.
              if key in current or key not in _UNCHECKED_WHEN_UNRECORDED}
  return [_difference(key, recorded, current, in_epochs)
          for key in sorted(set(recorded) | set(current)) if recorded.get(key) != current.get(key)]


def _difference(key: str, recorded: Mapping[str, Any], current: Mapping[str, Any],
                in_epochs: bool) -> str:
  """`<flag>: recorded X, now Y` (`unset` for a missing value; a list as its items)."""
  shown = [value if not isinstance(value, list) else "[%s]" % ", ".join(map(str, value))
           for value in (recorded.get(key, "unset"), current.get(key, "unset"))]
  return "%s: recorded %s, now %s" % (_setting_name(key, in_epochs), shown[0], shown[1])


def check_model_settings_of_recorded_run(run_dir: str, model_settings: Mapping[str, Any],
                                         what: str = "`output_dir`") -> None:
  """Raises TrainingError naming each difference when `run_dir` records a training run (its
  newest phase) whose model settings differ from `model_settings` in what the trained model
  computes: using its model with another vocab (of the same size) reads every id as another
  token, another casing gives other tokens, another config (fewer layers, other heads or
  activation) another network, another task other inputs, and a reordered label list names
  outputs after other labels. Settings a record lacks (older versions), settings
  `model_settings` lacks and those of _SETTINGS_FREE_AT_INFERENCE are not compared (a tag list
  that lost or gained a tag is a difference too, named as the label list). `what` names the
  directory's setting."""
  phases = _read_settings(os.path.join(run_dir, SETTINGS_FILE))
  if not phases:
    return
  recorded = _flatten(phases[max(phases, key=int)])
  current = _flatten(model_settings)
  differences = [_difference(key, recorded, current, False)
                 for key in sorted(set(recorded) & set(current))
                 if key not in _SETTINGS_FREE_AT_INFERENCE and recorded[key] != current[key]]
  if differences:
    raise errors.TrainingError(
        "the model in %s=%s was trained with other settings (recorded in %s): %s. "
        "Use it with the run's settings and files" % (
            what, run_dir, SETTINGS_FILE, "; ".join(differences)))


def check_task_of_recorded_run(run_dir: str, task: str, what: str = "`output_dir`") -> None:
  """Raises TrainingError when `run_dir` records a training run of another task (its `task`
  model setting: its checkpoints hold another head, its files another task's)."""
  recorded = recorded_setting(run_dir, "task")
  if recorded and recorded != task:
    raise errors.TrainingError(
        "%s=%s holds a %s run (recorded in %s), not a %s run: give this run a directory of its "
        "own" % (what, run_dir, recorded, SETTINGS_FILE, task))


def recorded_setting(run_dir: str, name: str) -> Any:
  """The value of the setting `name` (a field of _RECORDED_FIELDS) that the newest phase of the
  training run in `run_dir` recorded (for a record without it, the value _IMPLIED_SETTINGS says
  it implies), or None where `run_dir` records no training."""
  phases = _read_settings(os.path.join(run_dir, SETTINGS_FILE))
  if not phases:
    return None
  return dict(_IMPLIED_SETTINGS, **phases[max(phases, key=int)]).get(name)


def _read_settings(path: str) -> dict:
  """{first step of a phase (str): its settings} from a settings file ({} when there is none)."""
  if not tf.io.gfile.exists(path):
    return {}
  with tf.io.gfile.GFile(path) as f:
    try:
      return dict(json.load(f)["phases"])
    except (ValueError, KeyError, TypeError) as error:
      raise errors.TrainingError(
          "%s is not a record of training settings (%s); remove it to record this run's" %
          (path, error)) from None


def _check_and_record_settings(config: TrainConfig, step: int) -> None:
  """Records the settings of this phase of training in `output_dir/training_settings.json`
  and, when it resumes (it has trained past its first step), checks them first.

  A resume with other settings than the recorded ones is an error naming each difference, or
  with `allow_changed_settings` a WARNING (the new ones are recorded when a step trains with
  them: a run that has nothing left to train keeps the record of its model). Phases are keyed
  by their first step (`phase_start_step`), so pretraining's phase 2 starts with settings of its
  own. An output_dir trained without a record (by an older version) resumes and records these.
  The chief calls this under the output directory's lock; the other workers follow it.
  """
  path = os.path.join(config.output_dir, SETTINGS_FILE)
  phases = _read_settings(path)
  phase = str(config.phase_start_step)
  recorded, current = phases.get(phase), _recorded_settings(config)
  if step > config.phase_start_step and recorded is None:
    logging.info("%s has no settings for the training resumed at step %d (it was started by an "
                 "older version): recording these", path, step)
  elif step > config.phase_start_step:
    differences = _settings_differences(recorded, current, config.num_train_epochs is not None)
    where = "" if phase == "0" else " for the phase that starts at step %s" % phase
    if differences and not config.allow_changed_settings:
      raise errors.TrainingError(
          "`output_dir`=%s was trained with other settings (recorded in %s%s): %s. Resume with "
          "the recorded values, use another `output_dir`, or pass `allow_changed_settings` to "
          "continue this run with the new ones" % (config.output_dir, path, where,
                                                   "; ".join(differences)))
    if differences:
      logging.warning("Resuming %s with settings that differ from those recorded%s "
                      "(`allow_changed_settings`): %s", config.output_dir, where,
                      "; ".join(differences))
  trains = step < config.num_train_steps
  if recorded != current and (recorded is None or trains):
    phases[phase] = current
    atomic_files.write_text(path, json.dumps({"phases": phases}, indent=1, sort_keys=True) + "\n")


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


def write_eval_results(path: str, results: Mapping[str, Any],
                       scored_files: Optional[Mapping[str, str]] = None) -> None:
  """Writes `key = value` lines in sorted key order, as the original's eval_results.txt, with the
  files they score ({path: text}, e.g. SQuAD's predictions) as one unit
  (`atomic_files.write_texts`). Only the chief writes; every process logs them."""
  tf.io.gfile.makedirs(os.path.dirname(path) or ".")
  logging.info("***** Eval results *****")
  for key in sorted(results):
    logging.info("  %s = %s", key, results[key])
  if not distribution.is_chief():
    return
  atomic_files.write_texts(dict(scored_files or {}, **{path: "".join(
      "%s = %s\n" % (key, results[key]) for key in sorted(results))}))
