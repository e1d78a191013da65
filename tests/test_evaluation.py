"""Tests for evaluation.py: every example evaluated and predicted once, in input order, whatever
the batch size, replicas or length buckets; the input read without tf.data's autotuner.
"""
import os
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import distribution  # pylint: disable=g-import-not-at-top
import evaluation  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top
from training_scenario import (  # pylint: disable=g-import-not-at-top
    examples, metric_fn, predict_fn)

pytestmark = pytest.mark.slow


def test_evaluate_and_predict_cover_every_example_in_order(reference):
  strategy = tf.distribute.get_strategy()
  model = reference[1].model
  data = examples(13, seed=3)
  dataset = tf.data.Dataset.from_tensor_slices(data)
  logits = model(data).numpy()
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  results = evaluation.evaluate(strategy, model, metric_fn, dataset, batch_size=4)
  np.testing.assert_allclose(results["accuracy"], np.mean(logits.argmax(-1) == data["label"]))
  np.testing.assert_allclose(results["loss"],
                             -np.mean(log_probs[np.arange(13), data["label"]]), rtol=1e-5)
  dropped = evaluation.evaluate(strategy, model, metric_fn, dataset, batch_size=4,
                                drop_remainder=True, max_steps=2)
  np.testing.assert_allclose(dropped["accuracy"],
                             np.mean(logits[:8].argmax(-1) == data["label"][:8]))
  outputs = evaluation.predict(strategy, model, predict_fn, dataset, batch_size=4)
  np.testing.assert_array_equal(outputs["first_id"], data["input_ids"][:, 0])
  np.testing.assert_allclose(outputs["logits"], logits, rtol=1e-5, atol=1e-6)


def test_the_loops_read_their_input_without_the_tf_data_autotuner():
  """In TensorFlow 2.21 deleting an autotuned iterator while the cores are busy often waits out the
  autotuner's sleep, up to 60 s (benchmarks/bench_iterator_teardown.py). Training, evaluation and
  prediction all read through `distribution.distribute_dataset`, which turns the autotuner off
  and keeps the elements and the DATA sharding."""
  dataset = tf.data.Dataset.range(10).map(lambda i: i * 3, num_parallel_calls=tf.data.AUTOTUNE)
  assert dataset.options().autotune.enabled is not False  # TensorFlow's default: on
  distributed = distribution.distribute_dataset(
      tf.distribute.get_strategy(), dataset.prefetch(tf.data.AUTOTUNE))
  assert distributed.options().autotune.enabled is False
  assert distributed.options().experimental_distribute.auto_shard_policy == (
      tf.data.experimental.AutoShardPolicy.DATA)
  assert [int(value) for value in distributed] == [0, 3, 6, 9, 12, 15, 18, 21, 24, 27]


def test_a_last_partial_batch_is_padded_to_a_multiple_of_the_replicas_or_to_the_whole_batch():
  """13 examples in batches of 4: the last batch has 1 real row. Off TPU it is padded only to the
  number of replicas (2 here: 2 rows); under TPU static shapes (row_multiple = batch) to 4."""
  dataset = tf.data.Dataset.from_tensor_slices({"input_ids": np.arange(13 * 3).reshape(13, 3)})
  for row_multiple, last_rows in ((2, 2), (4, 4)):
    batches = list(evaluation._padded_batches(  # pylint: disable=protected-access
        dataset, 4, False, False, row_multiple))
    assert [len(index) for _, index in batches] == [4, 4, 4, last_rows]
    features, index = batches[-1]
    assert index.numpy().tolist() == [12] + [-1] * (last_rows - 1)
    assert features[training_loop.REAL_EXAMPLE_KEY].numpy().tolist() == [1] + [0] * (last_rows - 1)
    assert features["input_ids"].numpy().tolist() == [[36, 37, 38]] + [[0, 0, 0]] * (last_rows - 1)
  default_strategy = tf.distribute.get_strategy()
  assert evaluation._row_multiple(default_strategy, 32) == 1  # pylint: disable=protected-access
