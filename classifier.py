"""Sentence (pair) classification: the model head, its loss and metrics, the task and its export.

`run_classifier.py` is a thin CLI over this module, `classifier_data.py` (the task processors that
read the data) and `text_pairs.py` (features and their TFRecord cache). The pieces keep the
original run_classifier's names (`InputExample`, `DataProcessor`, `convert_single_example`, ...)
so its users find their way.
"""

import dataclasses
import os
from typing import Callable, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import checkpoints
import choices
import classifier_data
import distribution
import errors
import export
import feature_cache
import fine_tuning
import heads
import in_graph_tokenization
import modeling
import packing
import task_files
import text_pairs
import tokenization
import training_loop
import windowing


# --------------------------------------------------------------------------------------------------
# Metrics (NumPy, on the whole evaluation set).


def accuracy(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Fraction of predictions equal to the labels."""
  return float(np.mean(np.asarray(labels) == np.asarray(predictions)))


def f1_score(labels: np.ndarray, predictions: np.ndarray, positive: int = 1) -> float:
  """F1 of the positive class (MRPC, QQP): harmonic mean of precision and recall, or 0."""
  labels, predictions = np.asarray(labels) == positive, np.asarray(predictions) == positive
  true_positives = np.sum(labels & predictions)
  denominator = np.sum(labels) + np.sum(predictions)
  return float(2 * true_positives / denominator) if denominator else 0.0


def matthews_corrcoef(labels: np.ndarray, predictions: np.ndarray) -> float:
  """Matthews correlation of binary labels (CoLA); 0 when a marginal is constant."""
  labels, predictions = np.asarray(labels) == 1, np.asarray(predictions) == 1
  tp = float(np.sum(labels & predictions))
  tn = float(np.sum(~labels & ~predictions))
  fp = float(np.sum(~labels & predictions))
  fn = float(np.sum(labels & ~predictions))
  denominator = np.sqrt((tp + fp) * (tp + fn) * (tn + fp) * (tn + fn))
  return float((tp * tn - fp * fn) / denominator) if denominator else 0.0


def pearson_correlation(x: np.ndarray, y: np.ndarray) -> float:
  """Pearson's r; 0 when either side is constant."""
  x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
  x, y = x - x.mean(), y - y.mean()
  denominator = np.sqrt(np.sum(x * x) * np.sum(y * y))
  return float(np.sum(x * y) / denominator) if denominator else 0.0


def _average_ranks(values: np.ndarray) -> np.ndarray:
  """1-based ranks; tied values share the mean of their ranks."""
  values = np.asarray(values, np.float64)
  order = np.argsort(values, kind="stable")
  ranks = np.empty(len(values))
  ranks[order] = np.arange(1, len(values) + 1)
  unique, inverse = np.unique(values, return_inverse=True)
  sums = np.bincount(inverse, weights=ranks, minlength=len(unique))
  counts = np.bincount(inverse, minlength=len(unique))
  return (sums / counts)[inverse]


def spearman_correlation(x: np.ndarray, y: np.ndarray) -> float:
  """Spearman's rho: Pearson's r of the (tie-averaged) ranks."""
  return pearson_correlation(_average_ranks(x), _average_ranks(y))


def multi_label_metrics(label_ids: np.ndarray, predicted: np.ndarray,
                        labels: Sequence[str]) -> dict[str, float]:
  """Multi-label metrics of 0/1 matrices [examples, labels]: micro and macro F1 (macro: the mean
  of the per-label F1), micro precision and recall, subset accuracy (every label right), and per
  label precision, recall and F1 (`eval_<label>_precision`, ...). An undefined ratio is 0."""
  gold = np.asarray(label_ids).astype(bool)
  predicted = np.asarray(predicted).astype(bool)
  tp = np.sum(gold & predicted, axis=0).astype(np.float64)
  fp = np.sum(~gold & predicted, axis=0).astype(np.float64)
  fn = np.sum(gold & ~predicted, axis=0).astype(np.float64)
  ratio = lambda a, b: np.divide(a, b, out=np.zeros_like(a), where=b > 0)
  precision, recall, f1 = ratio(tp, tp + fp), ratio(tp, tp + fn), ratio(2 * tp, 2 * tp + fp + fn)
  micro = lambda a, b: float(a.sum() / b.sum()) if b.sum() else 0.0
  results = {
      "eval_micro_f1": micro(2 * tp, 2 * tp + fp + fn),
      "eval_micro_precision": micro(tp, tp + fp),
      "eval_micro_recall": micro(tp, tp + fn),
      "eval_macro_f1": float(np.mean(f1)),
      "eval_subset_accuracy": float(np.mean(np.all(gold == predicted, axis=1))),
  }
  for index, label in enumerate(labels):
    results["eval_%s_precision" % label] = float(precision[index])
    results["eval_%s_recall" % label] = float(recall[index])
    results["eval_%s_f1" % label] = float(f1[index])
  return results


def compute_metrics(processor: classifier_data.DataProcessor, label_ids: np.ndarray,
                    logits: np.ndarray, multi_label_threshold: float = 0.5) -> dict[str, float]:
  """Returns the task's metrics ("eval_accuracy", "eval_f1", ...) for real examples' outputs.

  Classification: accuracy, plus F1 of label "1" for MRPC/QQP and Matthews correlation for CoLA.
  Regression (STS-B): Pearson and Spearman correlation of the predicted and gold scores.
  Multi-label: `multi_label_metrics` of the labels whose sigmoid is above the threshold.
  """
  if processor.is_multi_label:
    probabilities = 1 / (1 + np.exp(-np.asarray(logits, np.float64)))
    return multi_label_metrics(label_ids, probabilities > multi_label_threshold,
                               processor.get_labels())
  if processor.is_regression:
    scores = np.asarray(logits).reshape(-1)
    return {"eval_pearson": pearson_correlation(scores, label_ids),
            "eval_spearman": spearman_correlation(scores, label_ids)}
  predictions = np.argmax(logits, axis=-1)
  label_ids = np.asarray(label_ids).astype(np.int64)
  results = {"eval_accuracy": accuracy(label_ids, predictions)}
  if "f1" in processor.extra_metrics:
    positive = processor.get_labels().index("1")
    results["eval_f1"] = f1_score(label_ids, predictions, positive=positive)
  if "matthews_corrcoef" in processor.extra_metrics:
    results["eval_matthews_corrcoef"] = matthews_corrcoef(label_ids, predictions)
  return results


# --------------------------------------------------------------------------------------------------
# Model, loss, predictions.


class BertClassifier(heads.BertTaskModel):
  """BERT with the original's classification head: dropout + dense on the pooled output.

  Its checkpoints hold `bert/...`, `output_weights` and `output_bias` exactly as the original's.
  Called on a feature dict, it returns float32 logits [batch, num_outputs].
  """

  def __init__(self, config: modeling.BertConfig, num_outputs: int,
               name: str = "bert_classifier", **kwargs):
    # The original hard-codes keep_prob=0.9 here, whatever the config's dropout.
    super().__init__(config, num_outputs, "pooled_output", 0.1, name=name, **kwargs)


def per_example_loss(logits: tf.Tensor, label_ids: tf.Tensor, is_regression: bool,
                     is_multi_label: bool = False) -> tf.Tensor:
  """Softmax cross-entropy per example, squared error of the single output for regression, or
  for multi-label the mean over labels of each label's sigmoid binary cross-entropy."""
  if is_regression:
    return tf.square(logits[:, 0] - tf.cast(label_ids, tf.float32))
  if is_multi_label:
    return tf.reduce_mean(tf.nn.sigmoid_cross_entropy_with_logits(
        labels=tf.cast(label_ids, tf.float32), logits=logits), axis=-1)
  log_probs = tf.nn.log_softmax(logits, axis=-1)
  one_hot = tf.one_hot(label_ids, depth=tf.shape(logits)[-1], dtype=tf.float32)
  return -tf.reduce_sum(one_hot * log_probs, axis=-1)


def class_weights_from_flag(value: Optional[str], labels: Sequence[str],
                            train_label_ids: Optional[Sequence[int]] = None
                            ) -> Optional[np.ndarray]:
  """The per-class loss weights `--class_weights` asks for (float32 [num_classes]), or None.

  "w1,w2,...": one positive number per label, in label-list order. "auto": the inverse frequency
  of each class among the training labels, scaled so that the mean weight over the training
  examples is 1: w_c = N / (K * n_c) for the K classes that occur (a class absent from training
  never weighs a training loss; it gets 1). "auto" needs `train_label_ids`; before they are known
  (None) it returns None.
  """
  if not value:
    return None
  if value == "auto":
    if train_label_ids is None:
      return None
    counts = np.bincount(np.asarray(train_label_ids, np.int64), minlength=len(labels))
    present = counts > 0
    weights = np.ones(len(labels))
    weights[present] = counts.sum() / (present.sum() * counts[present])
    return weights.astype(np.float32)
  try:
    weights = np.array([float(w) for w in value.split(",")])
  except ValueError:
    weights = np.array([])
  if len(weights) != len(labels) or not np.all(np.isfinite(weights) & (weights > 0)):
    raise errors.FlagError("`class_weights`=%s: expected 'auto' or %d positive numbers separated "
                           "by commas, one per label (%s)" % (value, len(labels),
                                                               ", ".join(labels)))
  return weights.astype(np.float32)


def aggregate_windows(window_values: np.ndarray, example_index: np.ndarray,
                      method: str) -> np.ndarray:
  """One row per example from the rows of its windows (`--window_aggregation`): their mean,
  element-wise max, or the first window's row. The windows of an example are consecutive and
  examples come in order (`example_index` non-decreasing, every example has one)."""
  window_values = np.asarray(window_values)
  example_index = np.asarray(example_index)
  starts = np.flatnonzero(np.r_[True, example_index[1:] != example_index[:-1]])
  if method == "first":
    return window_values[starts]
  if method == "max":
    return np.maximum.reduceat(window_values, starts, axis=0)
  if method == "mean":
    counts = np.diff(np.r_[starts, len(example_index)]).astype(window_values.dtype)
    sums = np.add.reduceat(window_values, starts, axis=0)
    return sums / counts.reshape([-1] + [1] * (window_values.ndim - 1))
  raise errors.FlagError("`window_aggregation`=%s: expected one of %s" %
                         (method, ", ".join(choices.WINDOW_AGGREGATIONS)))


def aggregate_windows_in_graph(window_values: tf.Tensor, windows: tf.RaggedTensor,
                               method: str) -> tf.Tensor:
  """`aggregate_windows` in TF ops, `windows` ragged [examples, (windows)] (any values)."""
  row_ids = windows.value_rowids()
  if method == "first":
    return tf.gather(window_values, windows.row_starts())
  if method == "max":
    return tf.math.segment_max(window_values, row_ids)
  return tf.math.segment_mean(window_values, row_ids)


def _ragged_slices(ragged: tf.RaggedTensor, rows: tf.Tensor, starts: tf.Tensor,
                   lengths: tf.Tensor) -> tf.RaggedTensor:
  """Row k of the result is `ragged[rows[k]][starts[k]:starts[k] + lengths[k]]`."""
  begin = tf.gather(ragged.row_starts(), rows) + tf.cast(starts, tf.int64)
  return tf.gather(ragged.flat_values,
                   tf.ragged.range(begin, begin + tf.cast(lengths, tf.int64)))


def window_inputs_in_graph(encoder: "in_graph_tokenization.BertInputEncoder", doc_stride: int,
                           text_a: tf.Tensor, text_b: Optional[tf.Tensor] = None
                           ) -> tuple[dict, tf.RaggedTensor]:
  """`window_inputs` for a batch of strings in TF ops: the windows' features [W, T] and the
  windows' starts, ragged [B, (windows)] (row i holds example i's windows, in order)."""
  ids_a = encoder.tokenize(text_a)
  length_a = ids_a.row_lengths()
  budget = encoder.max_seq_length - 2
  ids_b = None
  if text_b is not None:
    budget -= 1
    ids_b = encoder.tokenize(text_b)
    _, length_b = in_graph_tokenization.truncated_lengths(length_a, ids_b.row_lengths(), budget)
    window_length = budget - length_b
  else:
    window_length = tf.fill(tf.shape(length_a), tf.constant(budget, tf.int64))
  starts = windowing.window_starts(length_a, window_length, doc_stride)
  rows = starts.value_rowids()
  lengths = tf.minimum(tf.gather(window_length, rows),
                       tf.gather(length_a, rows) - starts.flat_values)
  windows_a = _ragged_slices(ids_a, rows, starts.flat_values, lengths)
  windows_b = None
  if ids_b is not None:
    windows_b = _ragged_slices(ids_b, rows, tf.zeros_like(rows), tf.gather(length_b, rows))
  return encoder.pack(windows_a, windows_b), starts


@dataclasses.dataclass
class ClassifierTask(fine_tuning.Task):
  """Sentence (pair) classification, multi-label classification or regression on a processor's
  data (run_classifier).

  Options beyond the original's: `doc_stride` cuts a text longer than max_seq_length into windows
  (`window_inputs`); each window trains as an example with its document's label, and evaluation,
  prediction and the export aggregate the windows' logits per document (`window_aggregation`).
  A multi-label processor gets a sigmoid per label; a label is predicted when its probability is
  above `multi_label_threshold`. `class_weights` (the flag's value; `class_weights_from_flag`)
  weighs each single-label training example's loss by its class's weight.
  """
  kind = "classifier"
  output_names_file = classifier_data.LABEL_LIST_FILE
  bert_config: modeling.BertConfig
  processor: classifier_data.DataProcessor
  tokenizer: tokenization.FullTokenizer
  data_dir: Optional[str]
  output_dir: str
  max_seq_length: int
  bucket_by_length: bool = True  # length_buckets for train, eval and predict
  pack_sequences: bool = False  # packed rows in eval and predict (packing.py)
  group_by_length: bool = False  # training batches of one length bucket (length_buckets.batch)
  doc_stride: Optional[int] = None
  window_aggregation: str = "mean"
  multi_label_threshold: float = 0.5
  class_weights: Optional[str] = None

  def __post_init__(self):
    if self.doc_stride is not None and self.doc_stride <= 0:
      raise errors.FlagError("`doc_stride` must be positive, got %d" % self.doc_stride)
    if self.window_aggregation not in choices.WINDOW_AGGREGATIONS:
      raise errors.FlagError("`window_aggregation`=%s: expected one of %s" %
                             (self.window_aggregation, ", ".join(choices.WINDOW_AGGREGATIONS)))
    processor = self.processor
    if self.class_weights and (processor.is_regression or processor.is_multi_label):
      raise errors.FlagError("`class_weights` is for single-label classification tasks")
    self.class_weight_values = (None if processor.is_regression else
                                class_weights_from_flag(self.class_weights,
                                                        processor.get_labels()))

  def output_names(self) -> list[str]:
    return self.processor.get_labels()  # Empty for regression.

  def write_output_names(self) -> None:
    self.processor.save_label_list()

  @property
  def num_multi_labels(self) -> int:
    return self.processor.num_outputs if self.processor.is_multi_label else 0

  def build_model(self) -> BertClassifier:
    """The classifier; BadInputError when output_dir's checkpoint has a head of another size."""
    self._check_checkpoint_head()
    model = BertClassifier(self.bert_config, self.processor.num_outputs)
    model.build()
    return model

  def _check_checkpoint_head(self) -> None:
    """Raises BadInputError, naming where the labels come from, when the latest checkpoint of
    output_dir (which a resume, evaluation, prediction or export restores) has another number of
    outputs than the task: restoring it would fail on a shape without saying why."""
    prefix = checkpoints.latest_checkpoint(self.output_dir)
    if prefix is None:
      return
    try:
      shape = tf.train.load_checkpoint(prefix).get_variable_to_shape_map().get("output_bias")
    except (tf.errors.OpError, ValueError):
      return  # A damaged checkpoint: the restore skips it and says so.
    if shape and shape[0] != self.processor.num_outputs:
      raise task_files.BadInputError("checkpoint %s has a head of %d outputs, but the task has %s: "
                                     "that output_dir was trained for other labels; use a new "
                                     "`output_dir`" %
                                     (prefix, shape[0], self.processor.describe_labels()))

  def loss(self, model, features, training):
    """Mean (class-weighted) loss over real examples, plus accuracy when single-label."""
    processor = self.processor
    logits = model(features, training=training)
    weights = features[training_loop.REAL_EXAMPLE_KEY]
    losses = per_example_loss(logits, features["label_ids"], processor.is_regression,
                              processor.is_multi_label)
    if self.class_weight_values is not None:
      losses *= tf.gather(tf.constant(self.class_weight_values), features["label_ids"])
    loss = distribution.replica_weighted_mean(losses, weights)
    metrics = {}
    if not (processor.is_regression or processor.is_multi_label):
      correct = tf.equal(tf.argmax(logits, axis=-1, output_type=tf.int32), features["label_ids"])
      metrics["accuracy"] = distribution.replica_weighted_mean(correct, weights)
    return loss, metrics

  def _outputs_of_logits(self, logits: tf.Tensor, label_ids: tf.Tensor) -> dict:
    processor = self.processor
    if processor.is_regression:
      probabilities = logits
    elif processor.is_multi_label:
      probabilities = tf.sigmoid(logits)
    else:
      probabilities = tf.nn.softmax(logits, axis=-1)
    return {"logits": logits, "probabilities": probabilities,
            "per_example_loss": per_example_loss(logits, label_ids, processor.is_regression,
                                                 processor.is_multi_label),
            "label_ids": label_ids}

  def predict_outputs(self, model, features):
    """Logits, probabilities (the score for regression), per-example (unweighted) loss and
    labels; with windows also each window's `example_index`."""
    outputs = self._outputs_of_logits(model(features, training=False), features["label_ids"])
    if "example_index" in features:
      outputs["example_index"] = features["example_index"]
    return outputs

  def _features_file(self, split: str, examples: Sequence) -> str:
    path = os.path.join(self.output_dir, split + ".tf_record")
    text_pairs.cached_features_file(examples, self.processor.get_labels(), self.max_seq_length,
                                    self.tokenizer, path, self.processor.is_regression,
                                    self.processor.label_delimiter, self.doc_stride)
    return path

  def train_data(self) -> fine_tuning.TrainData:
    """The training features: one record per example, or per window (the schedule still counts
    examples, as run_squad's)."""
    examples = self.processor.get_train_examples(self.data_dir)
    if self.class_weights == "auto":
      labels = self.processor.get_labels()
      self.class_weight_values = class_weights_from_flag(
          "auto", labels, [labels.index(example.label) for example in examples])
      logging.info("Class weights (`class_weights`=auto): %s", ", ".join(
          "%s %.4g" % item for item in zip(labels, self.class_weight_values)))
    path = self._features_file("train", examples)
    rows = text_pairs.features_dataset(path, self.max_seq_length, self.processor.is_regression,
                                       self.num_multi_labels)
    return fine_tuning.TrainData(
        fine_tuning.training_dataset_fn(rows, feature_cache.noted_records(path),
                                        self.bucket_by_length, self.group_by_length),
        len(examples), [path],
        unit="examples (their windows not counted)" if self.doc_stride else "examples")

  def _predict_split(self, strategy, model, split: str, examples: Sequence,
                     batch_size: int) -> dict:
    """Outputs per example (windows aggregated), in input order."""
    path = self._features_file(split, examples)
    windowed = self.doc_stride is not None
    dataset = text_pairs.features_dataset(path, self.max_seq_length, self.processor.is_regression,
                                          self.num_multi_labels, windowed)
    outputs = self.predict_dataset(strategy, model, dataset, batch_size, [path])
    if not windowed:
      return outputs
    index = outputs["example_index"]
    logits = aggregate_windows(outputs["logits"], index, self.window_aggregation)
    label_ids = aggregate_windows(outputs["label_ids"], index, "first")
    return {name: np.asarray(value) for name, value in
            self._outputs_of_logits(tf.constant(logits, tf.float32), label_ids).items()}

  def check_inputs(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """The dev and test files as evaluation and prediction read them (labels in the label set)."""
    del do_train  # The label list is known before training (load_or_create_label_list).
    if do_eval:
      self.processor.get_dev_examples(self.data_dir)
    if do_predict:
      self.processor.get_test_examples(self.data_dir)

  def evaluate(self, strategy, model, batch_size: int) -> dict:
    """Loss and the task's metrics on the dev set, as eval_results.txt holds them."""
    outputs = self._predict_split(strategy, model, "eval",
                                  self.processor.get_dev_examples(self.data_dir), batch_size)
    loss = float(np.mean(outputs["per_example_loss"]))
    results = compute_metrics(self.processor, outputs["label_ids"], outputs["logits"],
                              self.multi_label_threshold)
    results.update(eval_loss=loss, loss=loss)
    return results

  def predict(self, strategy, model, batch_size: int) -> str:
    """Writes test_results.tsv: class (or per-label) probabilities, or the score, per test
    example, in order."""
    outputs = self._predict_split(strategy, model, "predict",
                                  self.processor.get_test_examples(self.data_dir), batch_size)
    text_pairs.write_test_results(os.path.join(self.output_dir, "test_results.tsv"),
                                  outputs["probabilities"])
    return "predicted %d examples" % len(outputs["probabilities"])

  def _head_outputs(self, logits: tf.Tensor) -> dict:
    """The export's outputs for [B, C] logits (see `export`)."""
    processor = self.processor
    if processor.is_regression:
      return {"logits": logits, "score": logits[:, 0]}
    class_names = tf.constant(processor.get_labels())
    if processor.is_multi_label:
      probabilities = tf.sigmoid(logits)
      chosen = probabilities > self.multi_label_threshold
      # Chosen labels first (in label-list order), "" after them: sort by (not chosen, index).
      order = tf.argsort(tf.cast(~chosen, tf.int32) * len(processor.get_labels()) +
                         tf.range(len(processor.get_labels())), axis=-1)
      names = tf.where(tf.gather(chosen, order, batch_dims=1), tf.gather(class_names, order), "")
      return {"logits": logits, "probabilities": probabilities, "labels": names}
    return {"logits": logits, "probabilities": tf.nn.softmax(logits, axis=-1),
            "label": tf.gather(class_names, tf.argmax(logits, axis=-1))}

  def serving_module(self, model, dynamic_padding: bool = True) -> export.ServingModule:
    """The export (see export.py): `serving_default` takes raw strings `text_a` (and `text_b` for
    pair tasks), tokenized in the graph exactly as FullTokenizer does; `token_ids` takes the ids.
    Both return `logits` and, for classification, `probabilities` and `label` (class names); for
    regression `score`; for multi-label `probabilities` per label and `labels` [B, num_labels]:
    the names of the labels above the threshold, first, then "". With `doc_stride` the text
    signature windows each text as do_predict does and aggregates the windows' logits
    (`token_ids` reads one window per row). With `dynamic_padding` (the default) the text
    signature pads each request only to a length bucket (`BertInputEncoder`); without it, to
    max_seq_length (fixed shapes, several times slower for short texts).
    """
    encoder = in_graph_tokenization.BertInputEncoder.for_tokenizer(
        self.tokenizer, self.max_seq_length, dynamic_padding=dynamic_padding)
    return ClassifierServing(encoder, model, self._head_outputs,
                             ("text_a", "text_b") if self.processor.is_pair else ("text_a",),
                             self.doc_stride, self.window_aggregation)


class ClassifierServing(export.EncodedTextServing):
  """The classifier's export: `head_outputs` of the model's logits. With `doc_stride` the text
  signature windows every text as do_predict does and aggregates its windows' logits."""

  def __init__(self, encoder: tf.Module, model: keras.Model,
               head_outputs: Callable[[tf.Tensor], dict], text_inputs: Sequence[str],
               doc_stride: Optional[int], window_aggregation: str):
    super().__init__(encoder, model.config, self._outputs_of_ids, text_inputs)
    self.model = model
    self.head_outputs = head_outputs
    self.doc_stride = doc_stride
    self.window_aggregation = window_aggregation

  def _logits(self, features: dict) -> tf.Tensor:
    """The model's logits [rows, C] of padded id features, one row per input row; 0 for a row
    without real tokens when packed (`packing.zero_empty_sequences`)."""
    inputs = self.model_features(features)
    logits = self.model(inputs, training=False)
    if packing.is_packed(inputs):
      logits = packing.zero_empty_sequences(logits, features["input_mask"])
    return logits

  def _outputs_of_ids(self, features: dict) -> dict:
    return self.head_outputs(self._logits(features))

  def text_outputs(self, texts):
    if self.doc_stride is None:
      return super().text_outputs(texts)
    features, windows = window_inputs_in_graph(self.encoder, self.doc_stride,
                                               *[texts[name] for name in self.text_inputs])
    return self.head_outputs(aggregate_windows_in_graph(self._logits(features), windows,
                                                        self.window_aggregation))
