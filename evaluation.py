# coding=utf-8
"""Evaluation and prediction over fixed-order data, under any strategy: every example exactly once.

Training repeats and shuffles its input; evaluation and prediction must see each example once,
in order, and count none twice. `evaluate` sums each metric's numerator and denominator over the
whole dataset (so the result does not depend on the batch size or the number of replicas);
`predict` returns one row per example in input order. A last partial batch is padded with rows
marked not real (`training_loop.REAL_EXAMPLE_KEY`), which count in no metric and are dropped from
the predictions; each example's position rides along with its features, so bucketing examples by
length (`length_buckets`) can reorder batches and the rows still come back in input order.
`predict` can also pack each batch's sequences into shared rows (`packing`): the same outputs per
example, fewer positions computed.
"""

from typing import Optional

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import distribution
import length_buckets
import packing
import training_loop

# Key under which each example's position in the input rides along with its features.
_INDEX_KEY = "__index__"


def _row_multiple(strategy: tf.distribute.Strategy, batch_size: int) -> int:
  """What evaluation and prediction pad a last partial batch to a multiple of: the whole batch
  under TPUStrategy (static shapes), else the number of replicas (an even split)."""
  if isinstance(strategy, tf.distribute.TPUStrategy):
    return batch_size
  return strategy.num_replicas_in_sync


def _padded_batches(dataset: tf.data.Dataset, batch_size: int, drop_remainder: bool,
                    bucket_by_length: bool, row_multiple: int):
  """Batches (features, index) pairs; a partial batch is padded with zero rows, index -1.

  A partial batch is padded to a multiple of `row_multiple` rows (see `_row_multiple`): with
  `batch_size` every batch has exactly that many rows, the static shapes TPUs need; with the
  number of replicas a last batch of a few examples costs a few rows, split evenly.
  `features[REAL_EXAMPLE_KEY]` is 0 on padding rows (and multiplies an existing value). With
  `bucket_by_length` each batch holds examples of one length bucket (`length_buckets`), trimmed
  to it; `index` gives each row's position in `dataset`.
  """
  static_rows = batch_size if row_multiple == batch_size else None

  @tf.autograph.experimental.do_not_convert
  def pad(features):
    features = dict(features)
    index = features.pop(_INDEX_KEY)
    real = tf.shape(index)[0]
    rows = (real + row_multiple - 1) // row_multiple * row_multiple

    def pad_rows(tensor, value=0):
      paddings = [[0, rows - real]] + [[0, 0]] * (len(tensor.shape) - 1)
      padded = tf.pad(tensor, paddings, constant_values=tf.cast(value, tensor.dtype))
      return tf.ensure_shape(padded, [static_rows] + tensor.shape[1:])

    features = {name: pad_rows(value) for name, value in features.items()}
    index = pad_rows(index, -1)
    is_real = tf.cast(index >= 0, tf.float32)
    existing = features.get(training_loop.REAL_EXAMPLE_KEY)
    if existing is not None:
      is_real = tf.cast(is_real, existing.dtype) * tf.reshape(existing, [rows])
    features[training_loop.REAL_EXAMPLE_KEY] = is_real
    return features, index

  @tf.autograph.experimental.do_not_convert
  def add_index(index, features):
    return dict(features, **{_INDEX_KEY: tf.cast(index, tf.int32)})

  indexed = dataset.enumerate().map(add_index)
  return length_buckets.batch(indexed, batch_size, drop_remainder, bucket_by_length).map(pad)


def evaluate(strategy: tf.distribute.Strategy,
             model: keras.Model,
             metric_fn: training_loop.MetricFn,
             dataset: tf.data.Dataset,
             batch_size: int,
             max_steps: Optional[int] = None,
             drop_remainder: bool = False,
             bucket_by_length: bool = False) -> dict:
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
      eval did this); with `bucket_by_length`, the last partial batch of every bucket.
    bucket_by_length: batch examples of similar length, padded only to their length bucket
      (`length_buckets`); the results are the same up to float rounding.

  Returns:
    {name: numerator / denominator over all evaluated examples} as floats.
  """
  batches = _padded_batches(dataset, batch_size, drop_remainder, bucket_by_length,
                            _row_multiple(strategy, batch_size))
  if max_steps:
    batches = batches.take(max_steps)
  distributed = distribution.distribute_dataset(strategy, batches)

  # Traced once for the element spec (length buckets leave the sequence dimension unknown).
  @tf.function(input_signature=[distributed.element_spec], autograph=False)
  def step(inputs):
    features, _ = inputs
    shares = strategy.run(lambda f: dict(metric_fn(model, f)), args=(features,))
    return {name: (strategy.reduce(tf.distribute.ReduceOp.SUM, numerator, axis=None),
                   strategy.reduce(tf.distribute.ReduceOp.SUM, denominator, axis=None))
            for name, (numerator, denominator) in shares.items()}

  totals, num_batches = {}, 0
  for inputs in distributed:
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


def _concatenate_rows(arrays: list) -> np.ndarray:
  """Concatenates batches of outputs along rows; batches narrower than the widest (per-position
  outputs of shorter length buckets) are filled with -inf (floats) or -1 (other types)."""
  widest = tuple(np.max([array.shape[1:] for array in arrays], axis=0).tolist())
  if all(array.shape[1:] == widest for array in arrays):
    return np.concatenate(arrays)
  fill = -np.inf if np.issubdtype(arrays[0].dtype, np.floating) else -1
  return np.concatenate([
      np.pad(array, [(0, 0)] + [(0, w - n) for w, n in zip(widest, array.shape[1:])],
             constant_values=fill) for array in arrays])


def _packed(batches: tf.data.Dataset, num_groups: int) -> tf.data.Dataset:
  """(features, index) batches with their sequences packed into rows (`packing.pack_batch`), one
  group per replica; the index stays one entry per example, [groups, examples]."""

  @tf.autograph.experimental.do_not_convert
  def pack(features, index):
    packed = packing.pack_batch(dict(features, **{_INDEX_KEY: index}), num_groups)
    return packed, packed.pop(_INDEX_KEY)

  return batches.map(pack, num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)


def predict(strategy: tf.distribute.Strategy,
            model: keras.Model,
            predict_fn: training_loop.PredictFn,
            dataset: tf.data.Dataset,
            batch_size: int,
            bucket_by_length: bool = False,
            pack_sequences: bool = False) -> dict:
  """Runs a model over an unbatched, finite dataset; one output row per example, in input order.

  With `bucket_by_length` examples of similar length are batched together and padded only to
  their length bucket (`length_buckets`). Outputs per position ([batch, length, ...]) then come
  back as wide as the longest bucket that occurred: positions below an example's bucket length
  hold what the padded path computes there, positions past it -inf (floats) or -1. With
  `pack_sequences` each batch's sequences share rows (`packing`; for models whose heads read
  packed rows): per-example outputs are the padded path's, per-position ones too up to each
  sequence's length (0 past it, up to the packed row's width).

  Returns:
    {name: np.ndarray with one row per input example}, without padding rows, on every worker.
  """
  batches = _padded_batches(dataset, batch_size, False, bucket_by_length,
                            _row_multiple(strategy, batch_size))
  if pack_sequences:
    batches = _packed(batches, strategy.num_replicas_in_sync)
  distributed = distribution.distribute_dataset(strategy, batches)

  def replica_outputs(features, index):
    if pack_sequences:
      features, index = packing.merge_groups(features), tf.reshape(index, [-1])
    return dict(predict_fn(model, features), **{_INDEX_KEY: index})

  @tf.function(input_signature=[distributed.element_spec], autograph=False)
  def step(inputs):
    outputs = strategy.run(replica_outputs, args=inputs)
    return {name: strategy.gather(value, axis=0) for name, value in outputs.items()}

  collected = {}
  for inputs in distributed:
    for name, value in step(inputs).items():
      collected.setdefault(name, []).append(value.numpy())
  if not collected:
    return {}
  outputs = {name: _concatenate_rows(values) for name, values in collected.items()}
  index = outputs.pop(_INDEX_KEY)
  order = np.argsort(index[index >= 0], kind="stable")
  return {name: value[index >= 0][order] for name, value in outputs.items()}
