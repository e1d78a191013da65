# coding=utf-8
"""One protocol for fine-tuning tasks, and the one driver that runs a task as a script asks.

The original's run_classifier and run_squad each wired TPUEstimator by hand (model_fn, input_fn,
train/eval/predict blocks). Here a task (classifier.py, squad.py, tagging.py, ...) implements
`Task`: it builds its model from a config, gives a loss and a per-batch prediction function, its
training data, its evaluation and prediction steps and its export. `run` then does what the
original scripts did with `--do_train`, `--do_eval`, `--do_predict` (and `--export_dir`), the same
way for every task: train with the shared loop (the schedule computed there from epochs), or
restore the newest checkpoint of `--output_dir` (else `--init_checkpoint`); evaluate into
`eval_results.txt`; predict; export. Writers check `distribution.is_chief()` themselves.
"""

import abc
import dataclasses
import hashlib
import os
from typing import Callable, Mapping, Optional, Sequence

from absl import logging
import keras
import tensorflow as tf

import checkpoints
import evaluation
import export
import feature_cache
import length_buckets
import task_files
import tfrecord_files
import training_loop

# The shuffle policy of every task's training data (`training_dataset_fn`): each epoch the rows
# come in a new order drawn from the run's seed, as Hugging Face's random sampler draws them. The
# shuffle buffer holds the whole training set while its rows (their tensors as parsed) fit in this
# many bytes; a larger set is shuffled through a buffer of that size.
TRAINING_SHUFFLE_BUFFER_BYTES = 512 * 2**20


@dataclasses.dataclass
class TrainData:
  """A task's training input: `dataset_fn(global_batch_size, seed)` as `training_loop.train`
  takes it, the number of examples (the schedule's unit), the cached feature files it reads
  (named if a record turns out corrupt) and what `num_examples` counts, in the plural, for the
  log line of the schedule (e.g. `questions` where a question can give several windows)."""
  dataset_fn: Callable[[int, int], tf.data.Dataset]
  num_examples: int
  feature_files: Sequence[str] = ()
  unit: str = training_loop.EXAMPLES_UNIT


def row_bytes(element_spec: Mapping[str, tf.TensorSpec]) -> int:
  """The bytes of one row's tensors (fixed shapes) as a dataset holds them."""
  return sum((spec.shape.num_elements() or 1) * spec.dtype.size
             for spec in element_spec.values())


def training_dataset_fn(rows: tf.data.Dataset, num_rows: int, bucket_by_length: bool,
                        group_by_length: bool) -> Callable[[int, int], tf.data.Dataset]:
  """The one training pipeline of every task: `training_loop.train`'s `dataset_fn(global
  batch size, seed)` over `rows`, one pass over the training set in file order (unbatched feature
  dicts; a row is what a batch counts: a feature, a window, a question with all its endings).

  Every epoch is a new permutation of the rows, drawn from the seed (`TRAINING_SHUFFLE_BUFFER_BYTES`
  bounds the buffer), so what a model learns does not depend on the order of the file (a file
  sorted by label, or the original's SQuAD order whose buffer of 100 kept every epoch nearly
  alike). The epochs repeat without end; batches are full, cut to length buckets as
  `length_buckets.batch` says. The same seed gives the same batches, which exact resume needs.
  """
  buffer_size = max(1, min(num_rows, TRAINING_SHUFFLE_BUFFER_BYTES // row_bytes(rows.element_spec)))

  def dataset_fn(batch_size: int, seed: int) -> tf.data.Dataset:
    dataset = rows.shuffle(buffer_size, seed=seed, reshuffle_each_iteration=True).repeat()
    return length_buckets.batch(dataset, batch_size, True, bucket_by_length,
                                group_by_length).prefetch(tf.data.AUTOTUNE)

  return dataset_fn


class Task(abc.ABC):
  """What `run` needs from a fine-tuning task. Batch sizes are global."""

  # What the task trains ("classifier", "tagger", ...): the run records it, and a run of another
  # task is not resumed, read or trained into (its checkpoint holds another head).
  kind = None
  # The file beside a model that names its outputs in order (label_list.txt, tag_list.txt), for
  # a task with `output_names`.
  output_names_file = None
  # The `evaluate` metric that early stopping and the best checkpoint follow by default.
  default_eval_metric = "eval_accuracy"
  # Evaluation and prediction batch examples of similar length (length_buckets); tasks set it
  # from --bucket_by_length.
  bucket_by_length = True
  # Evaluation and prediction pack each batch's sequences into shared rows (packing.py); tasks
  # whose models read packed rows set it from --pack_sequences.
  pack_sequences = False

  @abc.abstractmethod
  def build_model(self) -> keras.Model:
    """The task model with all its variables created (checkpoint names per DESIGN.md)."""

  @abc.abstractmethod
  def loss(self, model: keras.Model, features: Mapping[str, tf.Tensor], training: bool) -> tuple:
    """`training_loop.LossFn`: (this replica's loss share, {metric name: share}).

    Every mean over examples (or tokens) in it must be `distribution.replica_weighted_mean`, called
    the same number of times and in the same order on every batch, whatever the batch holds (no
    call inside a data-dependent branch). Gradient accumulation relies on it: the loop first runs
    the loss to record each call's denominator over the whole effective batch, then matches those
    totals to the calls of each micro-batch by their order (`distribution.recording_denominators`,
    `effective_batch_denominators`; a different number of calls is an error).
    """

  @abc.abstractmethod
  def predict_outputs(self, model: keras.Model, features: Mapping[str, tf.Tensor]) -> dict:
    """`training_loop.PredictFn`: {name: one row per example} for one batch."""

  @abc.abstractmethod
  def train_data(self) -> TrainData:
    """Reads the training set (and caches its features in the task's output directory)."""

  def output_names(self) -> Optional[Sequence[str]]:
    """The names of the model's outputs in output order (a classifier's labels, a tagger's tags),
    as its label file in output_dir gives them; None for a task without such a file. `run`
    records them with the training run and refuses a model whose file was changed since."""
    return None

  def write_output_names(self) -> None:
    """Writes the label file of `output_names` learned from the training data into output_dir
    (the training loop calls it once training is sure to start); nothing for a task without."""

  def check_inputs(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """Reads what evaluation (`do_eval`, also during training) and prediction will read, as they
    will read it: the files exist, their rows parse, their labels or tags are in the label set
    (`do_train`: the one training will learn). `run` calls it before training, so such a fault
    stops the run in one line before any work, not after it. Tasks whose later phases read
    nothing beyond their training data need not."""

  def evaluate(self, strategy: tf.distribute.Strategy, model: keras.Model,
               batch_size: int) -> dict:
    """Metrics on the dev set for eval_results.txt and for evaluation during training (tasks
    without either need not)."""
    raise NotImplementedError("%s has no `do_eval`" % type(self).__name__)

  @abc.abstractmethod
  def predict(self, strategy: tf.distribute.Strategy, model: keras.Model,
              batch_size: int) -> str:
    """Predicts the test set and writes the task's prediction files; returns a summary."""

  @abc.abstractmethod
  def serving_module(self, model: keras.Model) -> export.ServingModule:
    """What the task's SavedModel serves: its text and token-ids signatures (export.py)."""

  def export(self, model: keras.Model, export_dir: str, precision: str = "float32",
             limits: export.RequestLimits = export.RequestLimits()) -> str:
    """Writes the task's SavedModel as the next version under `export_dir`, computing in
    `precision` (`export.model_in_precision`), serving requests within `limits`, with its
    `output_names` beside it; returns its path."""
    model = export.model_in_precision(model, self.build_model, precision)
    return export.write_saved_model(export_dir, self.serving_module(model), limits=limits,
                                    output_names=self.output_names())

  def predict_dataset(self, strategy: tf.distribute.Strategy, model: keras.Model,
                      dataset: tf.data.Dataset, batch_size: int,
                      feature_files: Sequence[str] = ()) -> dict:
    """`predict_outputs` over an unbatched, finite dataset of features, one row per example in
    input order (`evaluation.predict`, by length bucket as `bucket_by_length` says, in packed rows
    as `pack_sequences` says). The one
    prediction path of every task's evaluation and prediction: a corrupt record in one of the
    cached `feature_files` the dataset reads is an error naming the file and how to rebuild it."""
    with tfrecord_files.naming_corrupt_records(list(feature_files),
                                               tfrecord_files.REBUILD_CACHE_HINT):
      return evaluation.predict(strategy, model, self.predict_outputs, dataset, batch_size,
                                self.bucket_by_length, self.pack_sequences)


def _with_task_settings(config: training_loop.TrainConfig, task: Task,
                        train_data: Optional[TrainData] = None) -> training_loop.TrainConfig:
  """`config` whose model settings also hold the task's `kind` (as `task`), its `output_names`
  (where it has them) and, when training, the digest of its training features: the run records
  them, and a resume, evaluation, prediction or export checks them."""
  settings = dict(config.model_settings)
  if task.kind:
    settings["task"] = task.kind
  names = task.output_names()
  if names is not None:
    settings["output_names"] = list(names)
  if train_data is not None:
    settings["train_features"] = _features_digest(train_data.feature_files)
  return dataclasses.replace(config, model_settings=settings)


def _features_digest(feature_files: Sequence[str]) -> str:
  """`sha256:` of the training features' bytes (the cached records): a run records it, and a
  resume on other training data (an edited train file) is refused as a changed setting."""
  digest = hashlib.sha256()
  for path in feature_files:
    digest.update(feature_cache.file_sha256(path).encode("ascii"))
  return "sha256:" + digest.hexdigest()[:16]


def model_directory(output_dir: str, init_checkpoint: Optional[str]) -> Optional[str]:
  """The directory of the model used without training: output_dir when it holds checkpoints
  (its newest answers), else `init_checkpoint`'s (`checkpoints.checkpoint_directory`), else
  None."""
  if checkpoints.list_checkpoints(output_dir):
    return output_dir
  if init_checkpoint:
    return checkpoints.checkpoint_directory(init_checkpoint)
  return None


def output_names_directory(output_dir: str, init_checkpoint: Optional[str], do_train: bool,
                           names_file: str) -> str:
  """Where a run reads the list that names its model's outputs (`names_file`: label_list.txt,
  tag_list.txt): output_dir, unless the run does not train and output_dir holds no such list
  while the model it uses (`model_directory`: another run's, a conversion) has one beside it."""
  directory = None if do_train else model_directory(output_dir, init_checkpoint)
  if (directory and not os.path.exists(os.path.join(output_dir, names_file))
      and os.path.exists(os.path.join(directory, names_file))):
    return directory
  return output_dir


def _check_model_used(task: Task, config: training_loop.TrainConfig) -> None:
  """Without training, the model used (`model_directory`) must be read as it was trained: the
  run that trained it (and a run recorded in output_dir) must have recorded the settings and
  output names this task reads it with (a renamed or reordered label list would name every
  output after another label); and the label file beside it (`task.output_names_file`) must
  name the task's outputs in the task's order, since a model converted from Hugging Face, or
  copied with its label list, records no run, and a task of fixed labels (MRPC's 0, 1) or of
  labels learned from another file would read each output as another label."""
  training_loop.check_model_settings_of_recorded_run(config.output_dir, config.model_settings)
  directory = model_directory(config.output_dir, config.init_checkpoint)
  if directory is None:
    return
  if directory != config.output_dir:
    training_loop.check_model_settings_of_recorded_run(directory, config.model_settings,
                                                       "`init_checkpoint`")
  names = task.output_names()
  if task.output_names_file and names:
    task_files.check_label_list_names(os.path.join(directory, task.output_names_file), names)


def run(task: Task, strategy: tf.distribute.Strategy, config: training_loop.TrainConfig, *,
        do_train: bool, do_eval: bool = False, do_predict: bool = False,
        eval_batch_size: int = 8, predict_batch_size: int = 8,
        export_dir: Optional[str] = None, export_precision: str = "float32",
        export_limits: export.RequestLimits = export.RequestLimits()) -> list:
  """Trains (or restores), evaluates, predicts and exports `task` as the flags ask.

  With `config.eval_every_steps`, `early_stopping_patience` or `keep_best_checkpoint` the task's
  `evaluate` also runs during training (`training_loop.train`'s `evaluate_fn`; metric
  `config.early_stopping_metric`, else the task's `default_eval_metric`); with
  `keep_best_checkpoint` the best checkpoint (`output_dir/best`) is then the model that is
  evaluated, predicted and exported. Returns the summary's parts (also logged as one line).
  """
  tf.io.gfile.makedirs(config.output_dir)
  task.check_inputs(do_train, do_eval or config.evaluates_during_training, do_predict)
  if not do_train:
    _check_model_used(task, _with_task_settings(config, task))
  if not config.early_stopping_metric:
    config = dataclasses.replace(config, early_stopping_metric=task.default_eval_metric)
  summary, known_results = [], {}
  if do_train:
    data = task.train_data()
    if export_dir:  # The names are known now (a tagger learns its tags from the data).
      export.check_output_names(export_dir, task.output_names())
    config = _with_task_settings(config, task, data)  # Known once the training data is read.
    logging.info("***** Training: %d %s, batch %d *****", data.num_examples, data.unit,
                 config.train_batch_size)
    with tfrecord_files.naming_corrupt_records(list(data.feature_files),
                                               tfrecord_files.REBUILD_CACHE_HINT):
      result = training_loop.train(
          strategy, task.build_model, task.loss, data.dataset_fn, config,
          num_examples=data.num_examples,
          evaluate_fn=lambda model: task.evaluate(strategy, model, eval_batch_size),
          examples_unit=data.unit, write_run_files=task.write_output_names)
    model, global_step = result.model, result.global_step
    summary.append("trained to step %d (%.1f examples/s)" % (global_step,
                                                            result.examples_per_second))
    known_results = {entry["step"]: entry["metrics"] for entry in result.evaluations}
  else:
    if export_dir:
      export.check_output_names(export_dir, task.output_names())
    model, global_step, _ = checkpoints.restore_model(
        strategy, task.build_model, config.output_dir, config.init_checkpoint,
        config.allow_partial_init_checkpoint)
  # The run's model is the best it kept, in this run or (without training) in the one before.
  best = ((config.keep_best_checkpoint or not do_train) and
          checkpoints.best_checkpoint(config.output_dir))
  if best:
    checkpoints.init_from_checkpoint(model, best)
    global_step = checkpoints.checkpoint_step(best)
    summary.append("using the best checkpoint %s" % best)
  if do_eval:
    # A model evaluated during training is not evaluated again.
    results = dict(known_results.get(global_step) or
                   task.evaluate(strategy, model, eval_batch_size), global_step=global_step)
    training_loop.write_eval_results(os.path.join(config.output_dir, "eval_results.txt"), results)
    summary.append("evaluated: " + ", ".join(
        "%s %.4f" % (k, v) for k, v in sorted(results.items()) if k != "global_step"))
  if do_predict:
    summary.append(task.predict(strategy, model, predict_batch_size))
  if export_dir:
    summary.append("exported " + task.export(model, export_dir, export_precision,
                                                export_limits))
  logging.info("%s: %s", type(task).__name__, "; ".join(summary))
  return summary
