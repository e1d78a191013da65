"""Tests for distribution.py under training: MirroredStrategy on two logical CPUs and a
two-process MultiWorkerMirroredStrategy train as one device does on the same global batches, and
gradient accumulation equals one step of the whole batch under each (training_scenario.py runs as
the worker script in subprocesses: two logical CPU devices must be configured before TensorFlow
starts; multi-worker needs one process per worker); only the chief writes results. Each strategy
starts its worker processes once (module fixtures): they train the scenario and then make the
accumulated update, whose tests read the two results.
"""
import json
import os
import socket
import subprocess
import sys

import numpy as np
import pytest

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
os.environ.setdefault("KERAS_BACKEND", "tensorflow")

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import checkpoints  # pylint: disable=g-import-not-at-top
import distribution  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top
from training_scenario import (  # pylint: disable=g-import-not-at-top
    ACCUMULATION_BATCH, LOSS_FACTOR, TinyClassifier, accumulation_step, checkpoint_values,
    copy_checkpoints, dataset_fn_of, model_fn, train_config, weighted_examples, weighted_loss_fn)

pytestmark = pytest.mark.slow


# The worker script: the scenario, or with an init checkpoint one accumulated update.
WORKER_SCRIPT = os.path.join(os.path.dirname(os.path.abspath(__file__)), "training_scenario.py")


def _worker_command(strategy_name, output_dir, init_checkpoint):
  """The command of one worker process under `strategy_name`."""
  return [sys.executable, WORKER_SCRIPT, strategy_name, output_dir, init_checkpoint]


def _run_two_workers(output_dir, init_checkpoint):
  """Runs both workers of a two-process MultiWorkerMirroredStrategy cluster; their results."""
  workers = ["127.0.0.1:%d" % _free_port() for _ in range(2)]
  processes = []
  for index in range(2):
    env = dict(os.environ, TF_CONFIG=json.dumps(
        {"cluster": {"worker": workers}, "task": {"type": "worker", "index": index}}))
    processes.append(subprocess.Popen(
        _worker_command("multi_worker_mirrored", output_dir, init_checkpoint), env=env,
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
  outputs = []
  try:
    for process in processes:
      stdout, stderr = process.communicate(timeout=240)
      assert process.returncode == 0, stderr[-3000:]
      outputs.append(_parse_result(stdout))
  finally:
    for process in processes:
      if process.poll() is None:
        process.kill()
  return outputs


def _parse_result(stdout):
  """{"scenario": summary, "accumulation": weights} from a worker's two `RESULT` lines."""
  results = {}
  for line in stdout.splitlines():
    if line.startswith("RESULT "):
      results.update(json.loads(line[len("RESULT "):]))
  assert sorted(results) == ["accumulation", "scenario"], stdout
  return results


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


@pytest.fixture(scope="module")
def mirrored_worker(accumulation_init, tmp_path_factory):
  """(output_dir, results) of one worker process under MirroredStrategy on two logical CPUs."""
  output_dir = str(tmp_path_factory.mktemp("mirrored"))
  run = subprocess.run(_worker_command("mirrored", output_dir, accumulation_init[0]),
                       capture_output=True, text=True, timeout=180)
  assert run.returncode == 0, run.stderr[-3000:]
  return output_dir, _parse_result(run.stdout)


@pytest.fixture(scope="module")
def multi_worker(accumulation_init, tmp_path_factory):
  """(output_dir, [results of worker 0, of worker 1]) of a two-process cluster."""
  output_dir = str(tmp_path_factory.mktemp("multi_worker"))
  return output_dir, _run_two_workers(output_dir, accumulation_init[0])


def test_mirrored_two_cpus_matches_one_device(reference, mirrored_worker):
  result = mirrored_worker[1]["scenario"]
  assert result["replicas"] == 2
  _assert_same_training(result, reference[2])


def test_multi_worker_two_processes_match_one_device(reference, multi_worker):
  output_dir, results = multi_worker
  for result in results:
    assert result["scenario"]["replicas"] == 2
    _assert_same_training(result["scenario"], reference[2])
  # Only the chief (worker 0) wrote checkpoints, into the shared output_dir.
  assert checkpoints.checkpoint_step(checkpoints.latest_checkpoint(
      os.path.join(output_dir, "scenario"))) == 6


def test_replica_weighted_mean_outside_strategy_is_weighted_mean():
  values = np.array([1.0, 2.0, 4.0], np.float32)
  weights = np.array([1.0, 0.0, 3.0], np.float32)
  np.testing.assert_allclose(distribution.replica_weighted_mean(values, weights, epsilon=1e-5),
                             13.0 / (4.0 + 1e-5), rtol=1e-6)
  np.testing.assert_allclose(distribution.replica_weighted_mean(values), 7.0 / 3.0, rtol=1e-6)


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
    accumulation_init, mirrored_worker):
  _, expected = accumulation_init
  _assert_weights(mirrored_worker[1]["accumulation"], expected)


def test_accumulation_under_multi_worker_equals_one_step_of_the_whole_batch(
    accumulation_init, multi_worker):
  """Two worker processes, each 2 micro-batches of 4 per update: the update of all 16."""
  _, expected = accumulation_init
  for result in multi_worker[1]:
    _assert_weights(result["accumulation"], expected)


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
