"""Tests for training_loop.py: checkpoints and resume, NaN handling, evaluate/predict, strategies.

The strategy tests run this file as a script in subprocesses (two logical CPU devices must be
configured before TensorFlow starts; multi-worker needs one process per worker) and compare the
losses and final weights with one device on the same global batches.
"""
import dataclasses
import json
import os
import re
import socket
import subprocess
import sys
import warnings

from absl import flags
import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top
from tensorflow.core.util import event_pb2  # pylint: disable=g-import-not-at-top

from conftest import small_tmpfs  # pylint: disable=g-import-not-at-top
import atomic_files  # pylint: disable=g-import-not-at-top
import checkpoints  # pylint: disable=g-import-not-at-top
import cli  # pylint: disable=g-import-not-at-top
import distribution  # pylint: disable=g-import-not-at-top
import errors  # pylint: disable=g-import-not-at-top
import evaluation  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import optimization  # pylint: disable=g-import-not-at-top
import pretraining  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top

pytestmark = pytest.mark.slow

VOCAB_SIZE = 40
SEQ_LENGTH = 8
CONFIG = dict(vocab_size=VOCAB_SIZE, hidden_size=16, num_hidden_layers=1, num_attention_heads=2,
              intermediate_size=24, hidden_act="gelu", hidden_dropout_prob=0.0,
              attention_probs_dropout_prob=0.0, max_position_embeddings=SEQ_LENGTH,
              type_vocab_size=2, initializer_range=0.02)


class TinyClassifier(keras.Model):
  """BERT + a 2-class head on the pooled output (`output_weights`, `output_bias`)."""

  def __init__(self, **config_overrides):
    super().__init__(name="tiny_classifier")
    self.bert = modeling.BertModel(modeling.BertConfig.from_dict(dict(CONFIG, **config_overrides)),
                                   name="bert")

  def build(self, input_shape=None):
    self.bert.build()
    self.output_weights = self.add_weight(name="output_weights", shape=(2, 16))
    self.output_bias = self.add_weight(name="output_bias", shape=(2,), initializer="zeros")

  def call(self, features, training=False):
    pooled = self.bert(features["input_ids"], training=training)["pooled_output"]
    return tf.matmul(pooled, self.output_weights, transpose_b=True) + self.output_bias


def model_fn():
  model = TinyClassifier()
  model.build()
  return model


def per_example_loss(model, features, training):
  log_probs = tf.nn.log_softmax(model(features, training=training), axis=-1)
  return -tf.gather(log_probs, features["label"], batch_dims=1) * features["scale"]


def loss_fn(model, features, training):
  loss = distribution.replica_weighted_mean(per_example_loss(model, features, training))
  return loss, {"scaled_mean": distribution.replica_weighted_mean(features["scale"])}


def metric_fn(model, features):
  real = tf.cast(features[training_loop.REAL_EXAMPLE_KEY], tf.float32)
  predictions = tf.argmax(model(features), -1, output_type=tf.int32)
  correct = tf.cast(tf.equal(predictions, features["label"]), tf.float32)
  return {"accuracy": (tf.reduce_sum(correct * real), tf.reduce_sum(real)),
          "loss": (tf.reduce_sum(per_example_loss(model, features, False) * real),
                   tf.reduce_sum(real))}


def predict_fn(model, features):
  return {"logits": model(features), "first_id": features["input_ids"][:, 0]}


def examples(count, seed=0, bad_after=None):
  """Label = whether token 1 appears in the sequence; `scale` is inf from example `bad_after` on."""
  rng = np.random.RandomState(seed)
  ids = rng.randint(2, VOCAB_SIZE, size=(count, SEQ_LENGTH)).astype(np.int32)
  label = (rng.rand(count) < 0.5).astype(np.int32)
  ids[label == 1, rng.randint(0, SEQ_LENGTH)] = 1
  scale = np.ones(count, np.float32)
  if bad_after is not None:
    scale[bad_after:] = np.inf
  return {"input_ids": ids, "label": label, "scale": scale}


def dataset_fn_of(data):
  def dataset_fn(batch_size, seed):
    del seed  # A fixed order: train() skips the batches a resumed run already trained on.
    batches = tf.data.Dataset.from_tensor_slices(data).batch(batch_size, drop_remainder=True)
    return batches.repeat()
  return dataset_fn


# What cli_setup.train_config records of the model besides the training flags.
MODEL_SETTINGS = {"max_seq_length": SEQ_LENGTH, "bert_config": CONFIG}


def train_config(output_dir, **overrides):
  values = dict(output_dir=output_dir, num_train_steps=6, num_warmup_steps=1, learning_rate=1e-2,
                train_batch_size=8, save_checkpoints_steps=2, iterations_per_loop=2,
                keep_checkpoint_max=2, model_settings=MODEL_SETTINGS)
  values.update(overrides)
  return training_loop.TrainConfig(**values)


def train_and_predict(strategy, output_dir):
  """The scenario every strategy runs: 6 steps on 64 examples, then eval and predict 13."""
  result = training_loop.train(strategy, model_fn, loss_fn, dataset_fn_of(examples(64)),
                               train_config(output_dir))
  dataset = tf.data.Dataset.from_tensor_slices(examples(13, seed=3))
  predictions = evaluation.predict(strategy, result.model, predict_fn, dataset, batch_size=4)
  metrics = evaluation.evaluate(strategy, result.model, metric_fn, dataset, batch_size=4)
  weights = checkpoints.checkpoint_variables(result.model)["output_weights"].numpy()
  return result, {
      "replicas": strategy.num_replicas_in_sync, "metrics": result.metrics,
      "output_weights": weights.tolist(), "logits": predictions["logits"].tolist(),
      "first_id": predictions["first_id"].tolist(), "eval": metrics}


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
  """(output_dir, TrainResult, summary) of the scenario on one device, in this process."""
  output_dir = str(tmp_path_factory.mktemp("one_device"))
  result, summary = train_and_predict(tf.distribute.get_strategy(), output_dir)
  return output_dir, result, summary


def checkpoint_values(prefix):
  reader = tf.train.load_checkpoint(prefix)
  return {name: reader.get_tensor(name) for name in reader.get_variable_to_shape_map()}


def test_checkpoints_hold_google_names_slots_and_step(reference):
  output_dir, result, _ = reference
  assert result.global_step == 6
  assert result.checkpoint == os.path.join(output_dir, "model.ckpt-6")
  # keep_checkpoint_max=2: model.ckpt-2 was pruned, the state file lists 4 and 6.
  assert not tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-2.*"))
  state = tf.train.get_checkpoint_state(output_dir)
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      "model.ckpt-4", "model.ckpt-6"]
  values = checkpoint_values(result.checkpoint)
  assert int(values["global_step"]) == 6
  model_names = set(checkpoints.checkpoint_variables(result.model))
  assert "bert/encoder/layer_0/attention/self/query/kernel" in model_names
  assert "output_weights" in model_names
  for name, variable in checkpoints.checkpoint_variables(result.model).items():
    np.testing.assert_array_equal(values[name], variable.numpy())
    assert values[name + "/adam_m"].shape == tuple(variable.shape)
    assert np.any(values[name + "/adam_v"] != 0)
  assert set(values) == model_names | {"global_step"} | {
      n + s for n in model_names for s in ("/adam_m", "/adam_v")}
  # The checkpoint is a valid init_checkpoint for a fresh model.
  report = checkpoints.init_from_checkpoint(model_fn(), result.checkpoint)
  assert not report.missing and not report.unused


def test_resume_continues_exactly_and_stops_at_num_train_steps(reference, tmp_path, caplog):
  output_dir, straight, _ = reference
  # A run that crashed after step 4: only model.ckpt-4 and a state file naming it (no settings
  # record: an output_dir of an older version).
  for path in tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-4.*")):
    tf.io.gfile.copy(path, str(tmp_path / os.path.basename(path)))
  checkpoints._write_state_file(str(tmp_path), [str(tmp_path / "model.ckpt-4")])
  with caplog.at_level("INFO", logger="absl"):
    resumed = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                                  dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert resumed.global_step == 6
  assert "(it was started by an older version): recording these" in caplog.text
  assert recorded_settings(str(tmp_path)) == recorded_settings(output_dir)
  expected = checkpoint_values(straight.checkpoint)
  actual = checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)
  # Already finished: a rerun trains nothing and keeps the step.
  again = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                         dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert again.global_step == 6 and again.examples_per_second == 0.0


def resume_from_step_4(straight_dir: str, resumed_dir: str, **config_values):
  """Trains in resumed_dir from a copy of straight_dir's step-4 checkpoint (a crash after step 4),
  with the config `train_config(resumed_dir, **config_values)`; returns the TrainResult."""
  tf.io.gfile.makedirs(resumed_dir)
  for path in tf.io.gfile.glob(os.path.join(straight_dir, "model.ckpt-4.*")):
    tf.io.gfile.copy(path, os.path.join(resumed_dir, os.path.basename(path)))
  checkpoints._write_state_file(resumed_dir, [os.path.join(resumed_dir, "model.ckpt-4")])
  return training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                             dataset_fn_of(examples(64)), train_config(resumed_dir, **config_values))


def test_lamb_checkpoints_its_moments_as_adam_slots_and_resumes_exactly(reference, tmp_path):
  """LAMB (and AdamW, which shares its slots: see test_run_classifier) in the Google format."""
  optimizer_name = "lamb"
  straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
  straight = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                            dataset_fn_of(examples(64)),
                            train_config(straight_dir, optimizer=optimizer_name))
  # The config's optimizer was used: the weights differ from the original optimizer's.
  assert not np.allclose(checkpoints.checkpoint_variables(straight.model)["output_weights"].numpy(),
                         reference[2]["output_weights"], rtol=1e-3)
  expected = checkpoint_values(straight.checkpoint)
  assert set(expected) == set(checkpoint_values(reference[1].checkpoint))  # the same names
  report = checkpoints.init_from_checkpoint(model_fn(), straight.checkpoint)
  assert not report.missing and not report.unused
  # A fresh optimizer of the same kind restores its moments from the adam_m/adam_v entries.
  model = model_fn()
  optimizer = optimization.create_optimizer(1e-2, 6, 1, optimizer_name=optimizer_name)
  checkpoints.restore_variables(checkpoints.training_state_variables(model, optimizer),
                             straight.checkpoint)
  slots = checkpoints.named_slot_variables(optimizer, checkpoints.checkpoint_variables(model))
  assert len(slots) == 2 * len(model.trainable_variables)
  for name, slot in slots.items():
    np.testing.assert_array_equal(slot.numpy(), expected[name], err_msg=name)
  assert np.any(expected["output_weights/adam_m"] != 0)
  assert int(optimizer.iterations) == 6
  # Crash after step 4, resume: the moments come back and the run ends where the straight one did.
  resumed = resume_from_step_4(straight_dir, resumed_dir, optimizer=optimizer_name)
  actual = checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_linear_schedule_reaches_the_optimizer_and_resumes_exactly(reference, tmp_path):
  """--lr_schedule=linear over 6 steps with 1 of warmup: after step s the next update uses
  1e-2 * (6 - s) / (6 - 1) (the original's 1e-2 * (1 - s / 6): test_summaries_are_written...)."""
  straight_dir, resumed_dir = str(tmp_path / "straight"), str(tmp_path / "resumed")
  straight = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                                 dataset_fn_of(examples(64)),
                                 train_config(straight_dir, lr_schedule="linear"))
  rates = written_scalars(straight_dir)["learning_rate"]
  assert sorted(rates) == [2, 4, 6]
  for step, rate in rates.items():
    np.testing.assert_allclose(rate, 1e-2 * (6 - step) / 5, rtol=1e-5, atol=1e-9)
  assert not np.allclose(checkpoints.checkpoint_variables(straight.model)["output_weights"].numpy(),
                         reference[2]["output_weights"], rtol=1e-3)
  # Crash after step 4, resume: the rates are a function of the step, so the run ends the same.
  resumed = resume_from_step_4(straight_dir, resumed_dir, lr_schedule="linear")
  expected, actual = checkpoint_values(straight.checkpoint), checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=1e-5, atol=1e-6, err_msg=name)


def test_non_finite_loss_stops_with_clear_error_and_keeps_last_good_checkpoint(tmp_path):
  data = examples(48, bad_after=40)  # Batches 1-5 are finite, batch 6 is not.
  with pytest.raises(errors.TrainingError, match=r"steps 5-6.*model\.ckpt-4"):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(data),
                   train_config(str(tmp_path), num_train_steps=8, keep_checkpoint_max=5))
  assert checkpoints.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-4")
  assert not tf.io.gfile.glob(str(tmp_path / "model.ckpt-6.*"))
  assert np.all(np.isfinite(checkpoint_values(str(tmp_path / "model.ckpt-4"))["output_bias"]))


class TinyTokenClassifier(TinyClassifier):
  """The head reads the first token of the sequence output: the pooler gets no gradient."""

  def call(self, features, training=False):
    first_token = self.bert(features["input_ids"], training=training)["sequence_output"][:, 0]
    return tf.matmul(first_token, self.output_weights, transpose_b=True) + self.output_bias


def test_variables_without_gradient_are_left_alone(tmp_path):
  initial = {}

  def token_model_fn():
    model = TinyTokenClassifier()
    model.build()
    initial.update({name: variable.numpy() for name, variable in
                    checkpoints.checkpoint_variables(model).items()})
    return model

  with warnings.catch_warnings(record=True) as caught:
    warnings.simplefilter("always")
    result = training_loop.train(tf.distribute.get_strategy(), token_model_fn, loss_fn,
                            dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert not [w for w in caught if "Gradients do not exist" in str(w.message)]
  trained = checkpoints.checkpoint_variables(result.model)
  # As the original's optimizer skips a None gradient: no update and no weight decay.
  np.testing.assert_array_equal(trained["bert/pooler/dense/kernel"].numpy(),
                                initial["bert/pooler/dense/kernel"])
  assert not np.array_equal(trained["output_weights"].numpy(), initial["output_weights"])


def test_loop_length_follows_loops_checkpoints_and_progress_time(tmp_path):
  strategy = tf.distribute.get_strategy()
  config = train_config(str(tmp_path), num_train_steps=2500, iterations_per_loop=1000,
                        save_checkpoints_steps=700, progress_seconds=60.0)
  # Unknown speed: a short first call. Fast steps: to the next checkpoint or loop end.
  assert training_loop._loop_steps(strategy, config, 0, None) == 10
  assert training_loop._loop_steps(strategy, config, 10, 0.001) == 690
  assert training_loop._loop_steps(strategy, config, 700, 0.001) == 300
  assert training_loop._loop_steps(strategy, config, 2100, 0.001) == 400
  assert training_loop._loop_steps(strategy, config, 2400, 0.001) == 100
  # 2.5 s per step: 24 steps make a minute; a step slower than a minute still runs.
  assert training_loop._loop_steps(strategy, config, 10, 2.5) == 24
  assert training_loop._loop_steps(strategy, config, 10, 120.0) == 1


def written_scalars(output_dir):
  """{tag: {step: value}} from the TensorBoard event files the loop wrote in `output_dir`."""
  scalars = {}
  for event_file in tf.io.gfile.glob(os.path.join(output_dir, "events.out.tfevents.*")):
    for record in tf.data.TFRecordDataset(event_file):
      event = event_pb2.Event.FromString(record.numpy())
      for value in event.summary.value:
        scalar = tf.make_ndarray(value.tensor)
        scalars.setdefault(value.tag, {})[event.step] = float(scalar)
  return scalars


def test_summaries_are_written_for_tensorboard(reference):
  scalars = written_scalars(reference[0])
  assert {"loss", "scaled_mean", "learning_rate", "examples_per_second"} <= set(scalars)
  assert sorted(scalars["loss"]) == [2, 4, 6]
  # After step s the next update uses the original's schedule at s: 1e-2 * (1 - s / 6).
  for step, rate in scalars["learning_rate"].items():
    np.testing.assert_allclose(rate, 1e-2 * (1 - step / 6), rtol=1e-5, atol=1e-9)
  np.testing.assert_allclose(scalars["loss"][6], reference[1].metrics["loss"], rtol=1e-6)


def test_replica_weighted_mean_outside_strategy_is_weighted_mean():
  values = np.array([1.0, 2.0, 4.0], np.float32)
  weights = np.array([1.0, 0.0, 3.0], np.float32)
  np.testing.assert_allclose(distribution.replica_weighted_mean(values, weights, epsilon=1e-5),
                             13.0 / (4.0 + 1e-5), rtol=1e-6)
  np.testing.assert_allclose(distribution.replica_weighted_mean(values), 7.0 / 3.0, rtol=1e-6)


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


def test_eval_results_file_format(tmp_path):
  path = str(tmp_path / "eval_results.txt")
  training_loop.write_eval_results(path, {"loss": 1.5, "global_step": 7, "accuracy": 0.25})
  assert open(path).read() == "accuracy = 0.25\nglobal_step = 7\nloss = 1.5\n"


def test_shared_flags_have_the_original_defaults():
  flag_values = flags.FlagValues()
  cli.define_fine_tuning_flags(max_seq_length=384, flag_values=flag_values)
  cli.define_fine_tuning_flags(max_seq_length=384, flag_values=flag_values)  # Idempotent.
  cli.define_eval_flags(flag_values)
  cli.define_predict_flags(flag_values)
  expected = {"train_batch_size": 32, "learning_rate": 5e-5, "num_train_epochs": 3.0,
              "warmup_proportion": 0.1, "save_checkpoints_steps": 1000,
              "iterations_per_loop": 1000, "max_seq_length": 384, "use_tpu": False,
              "num_tpu_cores": 8, "tpu_name": None, "eval_batch_size": 8,
              "predict_batch_size": 8, "do_train": False, "distribution_strategy": "auto",
              "optimizer": "bert_adam", "lr_schedule": "original"}
  assert {name: flag_values[name].default for name in expected} == expected
  schedule = training_loop.TrainConfig("out", train_batch_size=32, num_train_epochs=3.0,
                                       warmup_proportion=0.1).with_schedule(3668)
  assert (schedule.num_train_steps, schedule.num_warmup_steps) == (343, 34)


def test_a_schedule_in_epochs_logs_how_its_steps_were_counted(caplog):
  """The line names what the task counted (SQuAD's original counts questions, Hugging Face their
  windows) and the kind of decay."""
  config = training_loop.TrainConfig("out", train_batch_size=32, num_train_epochs=3.0,
                                     warmup_proportion=0.1)
  with caplog.at_level("INFO", logger="absl"):
    config.with_schedule(3668)
    config = dataclasses.replace(config, num_train_epochs=2.0, lr_schedule="linear")
    assert config.with_schedule(3668, "questions").num_train_steps == 229
  assert ("num_train_steps = int(3668 training examples / batch 32 * 3 epochs) = 343; warmup 34 "
          "steps (0.1 of them); schedule: original (decay from step 0)") in caplog.text
  assert ("num_train_steps = int(3668 questions / batch 32 * 2 epochs) = 229; warmup 22 steps "
          "(0.1 of them); schedule: linear (decay from the end of warmup)") in caplog.text


# ------------------------------------------------------------------------------------------------
# Strategies: this file runs as a worker script in subprocesses.
# ------------------------------------------------------------------------------------------------


def worker_strategy(strategy_name):
  """The strategy of a worker process: "mirrored" over two logical CPUs, or one from TF_CONFIG."""
  if strategy_name == "mirrored":
    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  return distribution.make_strategy(strategy_name)


def _worker_command(strategy_name, output_dir, *init_checkpoint):
  """This file as a worker: the scenario, or with an init checkpoint one accumulated update."""
  return [sys.executable, os.path.abspath(__file__), strategy_name, output_dir] + list(
      init_checkpoint)


def _run_two_workers(output_dir, *init_checkpoint):
  """Runs both workers of a two-process MultiWorkerMirroredStrategy cluster; their results."""
  workers = ["127.0.0.1:%d" % _free_port() for _ in range(2)]
  processes = []
  for index in range(2):
    env = dict(os.environ, TF_CONFIG=json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
    processes.append(subprocess.Popen(
        _worker_command("multi_worker_mirrored", output_dir, *init_checkpoint), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  outputs = []
  try:
    for process in processes:
      stdout, stderr = process.communicate(timeout=150)
      assert process.returncode == 0, stderr[-3000:]
      outputs.append(_parse_result(stdout))
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
  return outputs


def _parse_result(stdout):
  lines = [line for line in stdout.splitlines() if line.startswith("RESULT ")]
  assert lines, stdout
  return json.loads(lines[-1][len("RESULT "):])


def _free_port():
  with socket.socket() as s:
    s.bind(("127.0.0.1", 0))
    return s.getsockname()[1]


def _assert_same_training(actual, expected):
  for name, value in expected["metrics"].items():
    np.testing.assert_allclose(actual["metrics"][name], value, rtol=2e-4, err_msg=name)
  np.testing.assert_allclose(actual["output_weights"], expected["output_weights"], rtol=1e-3,
                             atol=1e-5)
  np.testing.assert_allclose(actual["logits"], expected["logits"], rtol=1e-3, atol=1e-5)
  assert actual["first_id"] == expected["first_id"]
  for name, value in expected["eval"].items():
    np.testing.assert_allclose(actual["eval"][name], value, rtol=1e-3, err_msg=name)


def test_mirrored_two_cpus_matches_one_device(reference, tmp_path):
  run = subprocess.run(_worker_command("mirrored", str(tmp_path)), capture_output=True, text=True,
                       timeout=120)
  assert run.returncode == 0, run.stderr[-3000:]
  result = _parse_result(run.stdout)
  assert result["replicas"] == 2
  _assert_same_training(result, reference[2])


def test_multi_worker_two_processes_match_one_device(reference, tmp_path):
  for result in _run_two_workers(str(tmp_path)):
    assert result["replicas"] == 2
    _assert_same_training(result, reference[2])
  # Only the chief (worker 0) wrote checkpoints, into the shared output_dir.
  assert checkpoints.checkpoint_step(checkpoints.latest_checkpoint(str(tmp_path))) == 6


# ------------------------------------------------------------------------------------------------
# Gradient accumulation (issue 19).
# ------------------------------------------------------------------------------------------------

ACCUMULATION_BATCH = 16
LOSS_FACTOR = 30.0  # Makes the gradient's global norm > 1, so that clipping matters.


def weighted_examples():
  """16 examples whose loss weights differ between micro-batches (0 to 3, mean 1.5 overall)."""
  data = examples(ACCUMULATION_BATCH, seed=5)
  data["scale"] = np.array([0, 1, 0, 0, 3, 3, 2, 1, 1, 1, 1, 3, 2, 3, 1, 2], np.float32)
  return data


def weighted_loss_fn(model, features, training):
  """A weighted mean (epsilon as the MLM loss) whose denominator varies between micro-batches."""
  log_probs = tf.nn.log_softmax(model(features, training=training), axis=-1)
  losses = -tf.gather(log_probs, features["label"], batch_dims=1) * LOSS_FACTOR
  return (distribution.replica_weighted_mean(losses, features["scale"], epsilon=1e-5),
          {"weight": distribution.replica_weighted_mean(features["scale"])})


def linear_adam():
  """The original's AdamWeightDecay with epsilon 1: the update is almost linear in the gradient
  (with the default epsilon one step is about sign(g) * lr and hides a wrong gradient scale)."""
  return optimization.AdamWeightDecay(learning_rate=0.1, weight_decay_rate=0.01, epsilon=1.0)


def accumulation_step(strategy, output_dir, init_checkpoint, accumulation_steps):
  """One update of the 16 weighted examples in `accumulation_steps` micro-batches."""
  result = training_loop.train(
      strategy, model_fn, weighted_loss_fn, dataset_fn_of(weighted_examples()),
      train_config(output_dir, num_train_steps=1, train_batch_size=ACCUMULATION_BATCH,
                   init_checkpoint=init_checkpoint,
                   gradient_accumulation_steps=accumulation_steps),
      optimizer_fn=linear_adam)
  return {name: variable.numpy().tolist()
          for name, variable in checkpoints.checkpoint_variables(result.model).items()}


def expected_accumulation_step(init_checkpoint):
  """Independent expectation: one step of the whole batch of 16, the optimizer in NumPy."""
  model = model_fn()
  checkpoints.init_from_checkpoint(model, init_checkpoint)
  data = weighted_examples()
  named = checkpoints.checkpoint_variables(model)
  with tf.GradientTape() as tape:
    log_probs = tf.nn.log_softmax(model(data), axis=-1)
    losses = -tf.gather(log_probs, data["label"], batch_dims=1) * LOSS_FACTOR
    loss = tf.reduce_sum(losses * data["scale"]) / (np.sum(data["scale"]) + 1e-5)
  grads = dict(zip(named, tape.gradient(loss, list(named.values()))))
  grads = {name: tf.convert_to_tensor(g).numpy() for name, g in grads.items()
           if g is not None}
  norm = np.sqrt(sum(np.sum(g.astype(np.float64) ** 2) for g in grads.values()))
  assert norm > 1.0  # Clipping to 1 takes effect: once, on the sum of the micro-batches'.
  expected = {}
  for name, variable in named.items():
    value = variable.numpy()
    if name in grads:
      g = grads[name] / norm
      m, v = 0.1 * g, 0.001 * g * g
      update = m / (np.sqrt(v) + 1.0)
      if "LayerNorm" not in name and "bias" not in name:
        update = update + 0.01 * value
      value = value - 0.1 * update
    expected[name] = value
  return expected


@pytest.fixture(scope="module")
def accumulation_init(tmp_path_factory):
  keras.utils.set_random_seed(7)
  prefix = os.path.join(str(tmp_path_factory.mktemp("init")), "init.ckpt")
  checkpoints.save_checkpoint(model_fn(), prefix)
  return prefix, expected_accumulation_step(prefix)


def _assert_weights(actual, expected):
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_allclose(actual[name], value, rtol=0, atol=1e-5, err_msg=name)


@pytest.mark.parametrize("accumulation_steps", [1, 4])
def test_accumulated_micro_batches_equal_one_step_of_the_whole_batch(accumulation_init, tmp_path,
                                                                     accumulation_steps):
  init_checkpoint, expected = accumulation_init
  actual = accumulation_step(tf.distribute.get_strategy(), str(tmp_path), init_checkpoint,
                             accumulation_steps)
  _assert_weights(actual, expected)


def test_accumulation_under_mirrored_two_cpus_equals_one_step_of_the_whole_batch(
    accumulation_init, tmp_path):
  init_checkpoint, expected = accumulation_init
  run = subprocess.run(_worker_command("mirrored", str(tmp_path), init_checkpoint),
                       capture_output=True, text=True, timeout=120)
  assert run.returncode == 0, run.stderr[-3000:]
  _assert_weights(_parse_result(run.stdout), expected)


def test_accumulation_under_multi_worker_equals_one_step_of_the_whole_batch(
    accumulation_init, tmp_path):
  """Two worker processes, each 2 micro-batches of 4 per update: the update of all 16."""
  init_checkpoint, expected = accumulation_init
  for result in _run_two_workers(str(tmp_path), init_checkpoint):
    _assert_weights(result, expected)


def test_accumulation_with_dropout_resumes_exactly(tmp_path):
  """Dropout seeds follow the micro-batch, so a resumed run replays the same masks."""

  def dropout_model_fn():
    model = TinyClassifier(hidden_dropout_prob=0.3, attention_probs_dropout_prob=0.3)
    model.build()
    return model

  def run(output_dir, num_train_steps):
    return training_loop.train(
        tf.distribute.get_strategy(), dropout_model_fn, weighted_loss_fn,
        dataset_fn_of(weighted_examples()),
        train_config(str(output_dir), num_train_steps=num_train_steps, keep_checkpoint_max=3,
                     train_batch_size=ACCUMULATION_BATCH, gradient_accumulation_steps=2))

  whole = run(tmp_path / "whole", 4)
  (tmp_path / "resumed").mkdir()
  copy_checkpoints(str(tmp_path / "whole"), str(tmp_path / "resumed"), [2])
  resumed = run(tmp_path / "resumed", 4)
  assert resumed.global_step == 4
  expected = checkpoint_values(whole.checkpoint)
  actual = checkpoint_values(resumed.checkpoint)
  assert set(actual) == set(expected)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)
  # Dropout is on: the same run without it (same initial weights) ends elsewhere.
  without_dropout = training_loop.train(
      tf.distribute.get_strategy(), model_fn, weighted_loss_fn, dataset_fn_of(weighted_examples()),
      train_config(str(tmp_path / "no_dropout"), num_train_steps=4,
                   train_batch_size=ACCUMULATION_BATCH, gradient_accumulation_steps=2))
  difference = checkpoint_values(without_dropout.checkpoint)["output_weights"] - expected[
      "output_weights"]
  assert np.abs(difference).max() > 1e-4


# ------------------------------------------------------------------------------------------------
# Evaluation during training, early stopping (issue 19).
# ------------------------------------------------------------------------------------------------


def scripted_evaluations(values):
  """An evaluate_fn returning the next of `values` as {"m": value, "eval_loss": value}."""
  values = iter(values)

  def evaluate_fn(model):
    del model
    value = next(values)
    return {"m": value, "eval_loss": value}

  return evaluate_fn


def test_early_stopping_state_survives_a_resume(tmp_path):
  def train(output_dir, values, **overrides):
    return training_loop.train(
        tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
        train_config(str(output_dir), **dict(
            dict(num_train_steps=20, save_checkpoints_steps=4, keep_checkpoint_max=5,
                 eval_every_steps=2, early_stopping_patience=2, early_stopping_metric="m"),
            **overrides)),
        evaluate_fn=scripted_evaluations(values))

  whole = train(tmp_path / "whole", [0.1, 0.5, 0.4, 0.3, 0.9])
  assert whole.global_step == 8  # 0.5 at step 4, then two evaluations without improvement.
  assert [(e["step"], e["metrics"]["m"]) for e in whole.evaluations] == [
      (2, 0.1), (4, 0.5), (6, 0.4), (8, 0.3)]
  assert checkpoints.latest_checkpoint(str(tmp_path / "whole")).endswith("model.ckpt-8")
  # Killed after evaluating step 8 but before its checkpoint: resumes from step 4 with the
  # evaluations up to 4 (those after it are evaluated again), and stops at 8 again.
  resumed_dir = tmp_path / "resumed"
  resumed_dir.mkdir()
  copy_checkpoints(str(tmp_path / "whole"), str(resumed_dir), [4])
  tf.io.gfile.copy(str(tmp_path / "whole" / training_loop.EVAL_HISTORY_FILE),
                   str(resumed_dir / training_loop.EVAL_HISTORY_FILE))
  resumed = train(resumed_dir, [0.4, 0.3, 0.9])
  assert resumed.global_step == 8
  assert resumed.evaluations == whole.evaluations
  with open(resumed_dir / training_loop.EVAL_HISTORY_FILE) as f:
    assert json.load(f)["evaluations"] == whole.evaluations
  # A rerun after the early stop trains and evaluates no further.
  again = train(resumed_dir, [])
  assert again.global_step == 8 and again.examples_per_second == 0.0
  # Lower is better for a loss: 0.1 at step 2, then two evaluations without improvement.
  by_loss = train(tmp_path / "loss", [0.1, 0.5, 0.4, 0.3], early_stopping_metric="eval_loss",
                  keep_best_checkpoint=True)
  assert by_loss.global_step == 6
  assert by_loss.best_checkpoint == str(tmp_path / "loss" / "best" / "model.ckpt-2")


def test_an_unknown_early_stopping_metric_names_the_flag_and_the_metrics(tmp_path):
  with pytest.raises(errors.TrainingError, match=r"--early_stopping_metric=f1 is not one of "
                     r"the evaluation's metrics: eval_loss, m"):
    training_loop.train(
        tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
        train_config(str(tmp_path), eval_every_steps=2, early_stopping_patience=1,
                     early_stopping_metric="f1"),
        evaluate_fn=scripted_evaluations([0.1]))


if __name__ == "__main__":
  worker_strategy_name, worker_output_dir = sys.argv[1], sys.argv[2]
  if len(sys.argv) > 3:  # Gradient accumulation: 2 replicas x 2 micro-batches of 4.
    print("RESULT " + json.dumps(accumulation_step(worker_strategy(worker_strategy_name),
                                                   worker_output_dir, sys.argv[3], 2)))
  else:
    _, summary = train_and_predict(worker_strategy(worker_strategy_name), worker_output_dir)
    print("RESULT " + json.dumps(summary))


# ------------------------------------------------------------------------------------------------
# Damaged checkpoints, full disks, the output_dir lock, partial init checkpoints (issue 16).
# ------------------------------------------------------------------------------------------------


def copy_checkpoints(source_dir, target_dir, steps):
  """Copies model.ckpt-<step> files and writes a state file listing them (newest last)."""
  for step in steps:
    for path in tf.io.gfile.glob(os.path.join(source_dir, "model.ckpt-%d.*" % step)):
      tf.io.gfile.copy(path, os.path.join(target_dir, os.path.basename(path)))
  checkpoints._write_state_file(target_dir, [os.path.join(target_dir, "model.ckpt-%d" % step)
                                          for step in steps])


def damage(output_dir, how):
  """Damages model.ckpt-6 (or the state file) of a directory holding model.ckpt-4 and -6."""
  prefix = os.path.join(output_dir, "model.ckpt-6")
  if how == "index_deleted":
    os.remove(prefix + ".index")
  elif how == "data_truncated":
    data = prefix + ".data-00000-of-00001"
    os.truncate(data, os.path.getsize(data) // 2)
  elif how == "data_corrupted":
    data = prefix + ".data-00000-of-00001"
    with open(data, "r+b") as f:
      f.seek(os.path.getsize(data) // 2)
      f.write(b"\xff" * 64)
  elif how == "state_names_missing_step":
    for path in tf.io.gfile.glob(prefix + ".*"):
      os.remove(path)
    checkpoints._write_state_file(output_dir, [os.path.join(output_dir, "model.ckpt-%d" % step)
                                            for step in (4, 6)])
  return "model.ckpt-6"


def warnings_text(caplog):
  return "\n".join(r.getMessage() for r in caplog.records if r.levelname == "WARNING")


@pytest.mark.parametrize("how", ["index_deleted", "data_truncated", "data_corrupted",
                                 "state_names_missing_step"])
def test_damaged_latest_checkpoint_falls_back_to_the_previous_intact_one(reference, tmp_path, how,
                                                                         caplog):
  output_dir, straight, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4, 6])
  damage(str(tmp_path), how)
  step_4 = {p: open(p, "rb").read() for p in tf.io.gfile.glob(str(tmp_path / "model.ckpt-4.*"))}
  with caplog.at_level("INFO", logger="absl"):
    resumed = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                             dataset_fn_of(examples(64)), train_config(str(tmp_path)))
  assert "Checkpoint %s is damaged" % (tmp_path / "model.ckpt-6") in warnings_text(caplog)
  assert "Resuming from %s (step 4)" % (tmp_path / "model.ckpt-4") in caplog.text
  # Steps 5-6 were trained again from step 4 (the same batches) and equal the straight run.
  assert resumed.global_step == 6
  expected, actual = checkpoint_values(straight.checkpoint), checkpoint_values(resumed.checkpoint)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)
  # The intact older checkpoint was not overwritten; the state file lists the new step 6.
  for path, content in step_4.items():
    assert open(path, "rb").read() == content
  assert checkpoints.latest_checkpoint(str(tmp_path)) == str(tmp_path / "model.ckpt-6")


def test_all_checkpoints_unreadable_is_an_error_not_a_fresh_start(reference, tmp_path):
  output_dir, _, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4, 6])
  damage(str(tmp_path), "index_deleted")
  os.truncate(str(tmp_path / "model.ckpt-4.data-00000-of-00001"), 100)
  before = sorted(os.listdir(tmp_path))
  expected = (r"no readable checkpoint in %s: model\.ckpt-6 \(its \.index file is missing\); "
              r"model\.ckpt-4 \(cannot be read \(.*\)\)\. Remove these files" % tmp_path)
  with pytest.raises(errors.TrainingError, match=expected):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   train_config(str(tmp_path)))
  assert sorted(os.listdir(tmp_path)) == before  # Nothing written, nothing removed.
  # Evaluation and prediction refuse too, instead of using a random model.
  with pytest.raises(errors.TrainingError, match=r"model\.ckpt-6, the newest .* is damaged"):
    checkpoints.restore_model(tf.distribute.get_strategy(), model_fn, str(tmp_path))


def test_evaluation_refuses_a_damaged_newest_checkpoint(reference, tmp_path):
  # An older checkpoint would answer for another model than the run's last: an error naming it.
  output_dir, _, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4, 6])
  damage(str(tmp_path), "data_truncated")
  with pytest.raises(errors.TrainingError,
                     match=r"checkpoint %s, the newest of its directory, is damaged: cannot be "
                     r"read" % re.escape(str(tmp_path / "model.ckpt-6"))):
    checkpoints.restore_model(tf.distribute.get_strategy(), model_fn, str(tmp_path))


def test_relative_output_dir_keeps_the_checkpoint_history(tmp_path, monkeypatch):
  monkeypatch.chdir(tmp_path)
  training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                 train_config("out", keep_checkpoint_max=2))
  state = tf.train.get_checkpoint_state("out")
  assert [os.path.basename(p) for p in state.all_model_checkpoint_paths] == [
      "model.ckpt-4", "model.ckpt-6"]
  assert not tf.io.gfile.glob("out/model.ckpt-2.*")


@pytest.fixture
def small_filesystem(tmp_path):
  """A directory on a 256 KB tmpfs (skips where mounting is not allowed)."""
  with small_tmpfs(tmp_path / "small", "256k") as mount_point:
    yield str(mount_point)


def test_full_disk_while_writing_a_checkpoint_leaves_no_temporaries(reference, small_filesystem):
  output_dir = os.path.join(small_filesystem, "out")
  config = train_config(output_dir, keep_checkpoint_max=5)
  page = 4096
  size = sum(-(-os.path.getsize(p) // page) * page
             for p in tf.io.gfile.glob(reference[1].checkpoint + ".*"))
  # Fill the disk so that one checkpoint (and the small files) fit but not two.
  os.makedirs(output_dir)
  with open(os.path.join(small_filesystem, "ballast"), "wb") as f:
    f.write(b"\0" * (256 * 1024 - size - size // 2 - 4 * page))
  with pytest.raises(errors.TrainingError,
                     match=r"^cannot write checkpoint .*model\.ckpt-(\d+) \("
                     r"ResourceExhaustedError: "
                     r".*No space left on device\); the latest complete checkpoint is "
                     r".*model\.ckpt-\d+$") as error:
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   config)
  failed_step = int(str(error.value).split("model.ckpt-")[1].split(" ")[0])
  names = os.listdir(output_dir)
  assert not [n for n in names if "tempstate" in n or ".tmp-" in n], names
  assert not [n for n in names if n.startswith("model.ckpt-%d." % failed_step)], names
  latest = checkpoints.latest_checkpoint(output_dir)
  assert checkpoints.checkpoint_step(latest) == failed_step - 2
  # With room again, the same command resumes from the last complete checkpoint.
  os.remove(os.path.join(small_filesystem, "ballast"))
  result = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                          dataset_fn_of(examples(64)), config)
  assert result.global_step == 6
  expected = checkpoint_values(reference[1].checkpoint)
  actual = checkpoint_values(result.checkpoint)
  for name, value in expected.items():
    np.testing.assert_array_equal(actual[name], value, err_msg=name)


def test_a_new_run_removes_temporaries_left_by_a_killed_one(reference, tmp_path, caplog):
  output_dir, _, _ = reference
  copy_checkpoints(output_dir, str(tmp_path), [4])
  leftovers = [tmp_path / "model.ckpt-6.data-00000-of-00001.tempstate8372", tmp_path /
               "model.ckpt-6.index.tempstate1234",
               tmp_path / (".checkpoint.tmp-%s-4242" % socket.gethostname())]
  for path in leftovers:
    path.write_bytes(b"x" * 1000)
  with caplog.at_level("INFO", logger="absl"):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   train_config(str(tmp_path)))
  for path in leftovers:
    assert not path.exists()
    assert "Removing %s" % path in warnings_text(caplog)


def test_a_second_writer_is_refused_and_a_dead_holder_is_taken_over(tmp_path, caplog):
  output_dir = str(tmp_path / "out")
  with atomic_files.OutputDirLock(output_dir):
    holder = open(os.path.join(output_dir, ".lock")).read().split()
    assert holder[:2] == [str(os.getpid()), socket.gethostname()]
    with pytest.raises(errors.TrainingError,
                       match=r"--output_dir=%s is in use by pid %d on host %s since "
                       r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d \(lock file %s/\.lock\)" % (
                           output_dir, os.getpid(), socket.gethostname(), output_dir)):
      training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                     dataset_fn_of(examples(64)), train_config(output_dir))
  assert not os.path.exists(os.path.join(output_dir, ".lock"))  # Released.
  assert not tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-*"))
  # A lock file left by a process that is gone (killed: no one holds it) is taken over.
  dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"],
                        capture_output=True, text=True, check=True).stdout.strip()
  with open(os.path.join(output_dir, ".lock"), "w") as f:
    f.write("%s %s 1700000000\n" % (dead, socket.gethostname()))
  with caplog.at_level("INFO", logger="absl"):
    result = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                            dataset_fn_of(examples(64)), train_config(output_dir))
  assert result.global_step == 6
  assert "Taking over the lock of pid %s on host %s" % (dead, socket.gethostname()) in (
      warnings_text(caplog))
  assert not os.path.exists(os.path.join(output_dir, ".lock"))


def test_unwritable_output_dir_is_a_one_line_error(tmp_path):
  (tmp_path / "file.txt").write_text("not a directory")
  output_dir = str(tmp_path / "file.txt" / "out")
  with pytest.raises(errors.TrainingError,
                     match=r"^--output_dir=%s cannot be written \(\w+: .+\)$" % output_dir):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   train_config(output_dir))


def test_init_checkpoint_missing_encoder_variables_is_an_error(reference, tmp_path, caplog):
  # Every name under an extra `model/` scope: nothing matches.
  values = checkpoint_values(reference[1].checkpoint)
  prefixed = str(tmp_path / "prefixed" / "model.ckpt")
  checkpoints.write_checkpoint({"model/" + name: value for name, value in values.items()
                             if not checkpoints.is_training_state_name(name)}, prefixed)
  output_dir = str(tmp_path / "out")
  config = train_config(output_dir, init_checkpoint=prefixed)
  with pytest.raises(errors.TrainingError,
                     match=r"--init_checkpoint=.*prefixed/model\.ckpt fills only 0 of the "
                     r"encoder's 23 variables: 23 missing, e\.g\. bert/embeddings/LayerNorm/beta, "
                     r".*; its unused names are e\.g\. model/bert/.*"
                     r"--allow_partial_init_checkpoint"):
    training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn, dataset_fn_of(examples(64)),
                   config)
  assert not tf.io.gfile.glob(os.path.join(output_dir, "model.ckpt-*"))
  with pytest.raises(errors.TrainingError, match="fills only 0 of the encoder's 23"):
    checkpoints.restore_model(tf.distribute.get_strategy(), model_fn, None, prefixed)
  # Allowed explicitly: it trains, and the load report is a warning.
  with caplog.at_level("INFO", logger="absl"):
    result = training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                            dataset_fn_of(examples(64)),
                            train_config(output_dir, init_checkpoint=prefixed,
                                         allow_partial_init_checkpoint=True))
  assert result.global_step == 6
  assert re.search(r"Loaded 0 of the model's 25 variables from .*; 25 model variables not in the "
                   r"checkpoint .*; 25 checkpoint variables unused: model/bert/",
                   warnings_text(caplog))


def test_init_checkpoint_without_the_task_head_is_fine(reference, tmp_path, caplog):
  values = checkpoint_values(reference[1].checkpoint)
  encoder_only = str(tmp_path / "encoder" / "bert_model.ckpt")
  checkpoints.write_checkpoint({name: value for name, value in values.items()
                             if name.startswith("bert/") and
                             not checkpoints.is_training_state_name(name)}, encoder_only)
  with caplog.at_level("INFO", logger="absl"):
    report = checkpoints.load_init_checkpoint(model_fn(), encoder_only)
  assert sorted(report.missing) == ["output_bias", "output_weights"]
  assert "2 model variables not in the checkpoint (left at their initial values): output_bias, " \
         "output_weights" in warnings_text(caplog)


@pytest.mark.parametrize("tf_config,chief", [
    (None, True),
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 0}}, True),
    ({"cluster": {"worker": ["a:1", "b:1"]}, "task": {"type": "worker", "index": 1}}, False),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "chief", "index": 0}},
     True),
    ({"cluster": {"chief": ["c:1"], "worker": ["a:1"]}, "task": {"type": "worker", "index": 0}},
     False),
])
def test_only_the_chief_writes_results(tmp_path, monkeypatch, tf_config, chief):
  """MultiWorkerMirroredStrategy's rule (the chief task, else worker 0); writers ask themselves."""
  if tf_config is None:
    monkeypatch.delenv("TF_CONFIG", raising=False)
  else:
    monkeypatch.setenv("TF_CONFIG", json.dumps(tf_config))
  assert distribution.is_chief() == chief
  path = tmp_path / "eval_results.txt"
  training_loop.write_eval_results(str(path), {"eval_accuracy": 0.5})
  assert path.exists() == chief


# ------------------------------------------------------------------------------------------------
# The run's settings, recorded in output_dir and checked on resume.
# ------------------------------------------------------------------------------------------------


def killed_after_step_4(reference, output_dir):
  """output_dir as the reference run leaves it when killed after writing model.ckpt-4."""
  os.makedirs(output_dir)
  copy_checkpoints(reference[0], output_dir, [4])
  tf.io.gfile.copy(os.path.join(reference[0], training_loop.SETTINGS_FILE),
                   os.path.join(output_dir, training_loop.SETTINGS_FILE))
  return output_dir


def resume(output_dir, **overrides):
  return training_loop.train(tf.distribute.get_strategy(), model_fn, loss_fn,
                             dataset_fn_of(examples(64)), train_config(output_dir, **overrides))


def recorded_settings(output_dir):
  with open(os.path.join(output_dir, training_loop.SETTINGS_FILE)) as f:
    return json.load(f)["phases"]


def test_a_resume_with_changed_settings_is_an_error_naming_each_unless_allowed(reference, tmp_path,
                                                                               caplog):
  assert recorded_settings(reference[0]) == {"0": dict(
      train_batch_size=8, learning_rate=1e-2, optimizer="bert_adam", lr_schedule="original",
      num_train_steps=6, num_warmup_steps=1, random_seed=12345, **MODEL_SETTINGS)}
  output_dir = killed_after_step_4(reference, str(tmp_path / "changed"))
  changes = dict(learning_rate=2e-2, train_batch_size=4,
                 model_settings=dict(MODEL_SETTINGS, bert_config=dict(CONFIG, hidden_size=32)))
  with pytest.raises(errors.TrainingError) as error:
    resume(output_dir, **changes)
  message = str(error.value)
  for difference in ("--learning_rate: recorded 0.01, now 0.02",
                     "--train_batch_size: recorded 8, now 4",
                     "--bert_config_file (hidden_size): recorded 16, now 32",
                     "pass --allow_changed_settings"):
    assert difference in message
  assert "\n" not in message and "max_seq_length" not in message
  assert checkpoints.latest_checkpoint(output_dir) == os.path.join(output_dir, "model.ckpt-4")
  # The same settings resume.
  assert resume(killed_after_step_4(reference, str(tmp_path / "same"))).global_step == 6
  # Accepted: a WARNING lists the differences, the run trains on with them and records them, so
  # that the old values are now the change.
  with caplog.at_level("INFO", logger="absl"):
    changed = resume(output_dir, learning_rate=2e-2, train_batch_size=4,
                     allow_changed_settings=True)
  assert changed.global_step == 6
  assert "--learning_rate: recorded 0.01, now 0.02" in warnings_text(caplog)
  assert recorded_settings(output_dir)["0"]["learning_rate"] == 2e-2
  with pytest.raises(errors.TrainingError, match="--learning_rate: recorded 0.02, now 0.01"):
    resume(output_dir)


def test_a_resume_with_another_lr_schedule_is_refused_and_an_older_record_means_original(
    reference, tmp_path):
  output_dir = killed_after_step_4(reference, str(tmp_path / "out"))
  refused = "--lr_schedule: recorded original, now linear"
  with pytest.raises(errors.TrainingError, match=refused):
    resume(output_dir, lr_schedule="linear")
  # A record written before --lr_schedule existed has none: that run had the original's schedule.
  path = os.path.join(output_dir, training_loop.SETTINGS_FILE)
  phases = recorded_settings(output_dir)
  del phases["0"]["lr_schedule"]
  with open(path, "w") as f:
    json.dump({"phases": phases}, f)
  with pytest.raises(errors.TrainingError, match=refused):
    resume(output_dir, lr_schedule="linear")
  assert resume(output_dir).global_step == 6
  assert recorded_settings(output_dir)["0"]["lr_schedule"] == "original"


def test_pretraining_phase2_keeps_the_schedule_kind():
  phase1 = train_config("out", lr_schedule="linear")
  phase2 = pretraining.phase2_config(phase1, 4, learning_rate=5e-3, num_warmup_steps=1,
                                     train_batch_size=4)
  assert (phase2.lr_schedule, phase2.phase_start_step, phase2.num_train_steps) == ("linear", 6, 10)
