"""Tests for optimization.py: hand-computed values and a NumPy copy of the original's update."""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import optimization

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


class _TinyTaskModel(keras.Model):
  """Dense + LayerNorm + a bare output bias, named like a task model's head."""

  def __init__(self, **kwargs):
    super().__init__(**kwargs)
    self.dense = keras.layers.Dense(3, name="dense")
    self.layer_norm = keras.layers.LayerNormalization(epsilon=1e-12, name="LayerNorm")

  def build(self, input_shape):
    self.output_bias = self.add_weight(shape=(3,), initializer="ones", name="output_bias")
    super().build(input_shape)

  def call(self, inputs):
    return self.layer_norm(self.dense(inputs)) + self.output_bias


def _build_model(name: str = "bias_probe", seed: int = 0) -> keras.Model:
  """A built model whose name contains `bias`, so exclusions must ignore the task-model prefix."""
  model = _TinyTaskModel(name=name)
  model(np.zeros((1, 4), np.float32))
  rng = np.random.default_rng(seed)
  for variable in model.trainable_variables:
    variable.assign(rng.normal(size=variable.shape).astype(np.float32))
  return model


def _numpy_adamw_steps(params, grads_per_step, lrs, decays, weight_decay_rate, clip_norm=1.0):
  """The original AdamWeightDecayOptimizer + clip_by_global_norm, written out in NumPy (float64)."""
  params = [p.astype(np.float64) for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for grads, lr in zip(grads_per_step, lrs):
    norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads))
    scale = clip_norm / max(norm, clip_norm)
    for i, g in enumerate(grads):
      g = g.astype(np.float64) * scale
      m[i] = 0.9 * m[i] + 0.1 * g
      v[i] = 0.999 * v[i] + 0.001 * g * g
      update = m[i] / (np.sqrt(v[i]) + 1e-6)
      if decays[i]:
        update = update + weight_decay_rate * params[i]
      params[i] = params[i] - lr * update
  return params, m, v


def _schedule_lr(step, init_lr, num_train_steps, num_warmup_steps):
  """The schedule by hand, to feed the NumPy reference."""
  if step < num_warmup_steps:
    return init_lr * step / num_warmup_steps
  return init_lr * (1.0 - min(step, num_train_steps) / num_train_steps)


@pytest.mark.parametrize("step, expected", [
    (0, 0.0),       # warmup starts at zero: the first update uses step 0
    (5, 0.05),      # halfway through warmup
    (9, 0.09),      # last warmup step
    (10, 0.09),     # end of warmup: decay counts from step 0, so 0.1 * (1 - 10/100)
    (50, 0.05),     # midway
    (100, 0.0),     # the end
    (130, 0.0),     # past the end stays at zero
])
def test_learning_rate_schedule(step, expected):
  schedule = optimization.WarmupLinearDecay(0.1, num_train_steps=100, num_warmup_steps=10)
  assert float(schedule(step)) == pytest.approx(expected, abs=1e-7)


def test_learning_rate_without_warmup_starts_at_init_lr():
  schedule = optimization.WarmupLinearDecay(0.1, num_train_steps=100, num_warmup_steps=0)
  assert float(schedule(0)) == pytest.approx(0.1)
  assert float(schedule(25)) == pytest.approx(0.075)


def test_bad_schedule_arguments_name_the_argument():
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.WarmupLinearDecay(0.1, num_train_steps=0)
  with pytest.raises(ValueError, match="compute_dtype"):
    optimization.create_optimizer(0.1, 10, 1, compute_dtype="int8")


def test_weight_decay_exclusions_by_google_name():
  model = _build_model()
  names = {v.path: optimization.google_name(v) for v in model.trainable_variables}
  assert names["bias_probe/dense/kernel"] == "dense/kernel"
  before = {v.path: v.numpy().copy() for v in model.trainable_variables}
  optimizer = optimization.create_optimizer(0.1, num_train_steps=10, num_warmup_steps=0,
                                            weight_decay_rate=0.5)
  # Zero gradients leave m = v = 0, so the update is the weight decay alone: p -= lr * rate * p.
  optimizer.apply([tf.zeros_like(v) for v in model.trainable_variables], model.trainable_variables)
  after = {v.path: v.numpy() for v in model.trainable_variables}
  np.testing.assert_allclose(after["bias_probe/dense/kernel"],
                             before["bias_probe/dense/kernel"] * (1 - 0.1 * 0.5), rtol=1e-6)
  for excluded in ("dense/bias", "LayerNorm/gamma", "LayerNorm/beta", "output_bias"):
    np.testing.assert_array_equal(after["bias_probe/" + excluded], before["bias_probe/" + excluded])


@pytest.mark.parametrize("gradient_scale", [0.01, 10.0])  # global norm below / above the clip
def test_steps_match_numpy_original(gradient_scale):
  model = _build_model()
  variables = model.trainable_variables
  rng = np.random.default_rng(1)
  grads_per_step = [
      [gradient_scale * rng.normal(size=v.shape).astype(np.float32) for v in variables]
      for _ in range(3)]
  init_lr, num_train_steps, num_warmup_steps = 0.01, 4, 1
  lrs = [_schedule_lr(s, init_lr, num_train_steps, num_warmup_steps) for s in range(3)]
  decays = [not any(p in v.path.split("/", 1)[1] for p in ("LayerNorm", "bias")) for v in variables]
  expected, expected_m, expected_v = _numpy_adamw_steps(
      [v.numpy() for v in variables], grads_per_step, lrs, decays, weight_decay_rate=0.01)

  optimizer = optimization.create_optimizer(init_lr, num_train_steps, num_warmup_steps)
  for grads in grads_per_step:
    optimizer.apply([tf.constant(g) for g in grads], variables)

  assert int(optimizer.iterations) == 3
  slots = optimization.named_slot_variables(
      optimizer, {optimization.google_name(v): v for v in variables})
  for variable, want, want_m, want_v in zip(variables, expected, expected_m, expected_v):
    name = optimization.google_name(variable)
    np.testing.assert_allclose(variable.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(slots[name + "/adam_m"].numpy(), want_m, rtol=1e-5, atol=1e-9)
    np.testing.assert_allclose(slots[name + "/adam_v"].numpy(), want_v, rtol=1e-5, atol=1e-12)


def test_global_norm_clipping_scales_the_gradient_before_the_moments():
  model = _build_model()
  variables = model.trainable_variables
  grads = [np.full(v.shape, 2.0, np.float32) for v in variables]
  global_norm = np.sqrt(sum(g.size * 4.0 for g in grads))
  optimizer = optimization.create_optimizer(0.1, 10, 0)
  optimizer.apply([tf.constant(g) for g in grads], variables)
  for variable in variables:  # First step: m = (1 - beta_1) * clipped gradient.
    np.testing.assert_allclose(optimizer.slot_variables(variable)["adam_m"].numpy(),
                               0.1 * 2.0 / global_norm, rtol=1e-6)


def test_float16_is_loss_scaled_and_matches_float32():
  reference_model, scaled_model = _build_model(), _build_model()
  grads = [np.full(v.shape, 0.01, np.float32) for v in reference_model.trainable_variables]
  reference = optimization.create_optimizer(0.1, 10, 0)
  scaled = optimization.create_optimizer(0.1, 10, 0, compute_dtype="mixed_float16")
  assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
  assert isinstance(optimization.create_optimizer(0.1, 10, 0, compute_dtype="bfloat16"),
                    optimization.AdamWeightDecay)
  loss_scale = float(scaled.scale_loss(1.0))
  reference.apply([tf.constant(g) for g in grads], reference_model.trainable_variables)
  scaled.apply([tf.constant(g * loss_scale) for g in grads], scaled_model.trainable_variables)
  for want, got in zip(reference_model.trainable_variables, scaled_model.trainable_variables):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
  slots = optimization.named_slot_variables(scaled, {"dense/kernel": scaled_model.dense.kernel})
  assert sorted(slots) == ["dense/kernel/adam_m", "dense/kernel/adam_v"]


def _train_under(strategy, inputs, targets, steps: int) -> list:
  """Trains a fresh model for `steps` steps on the global batch; returns the final weights."""
  with strategy.scope():
    model = _build_model(name="task")
    optimizer = optimization.create_optimizer(0.05, num_train_steps=10, num_warmup_steps=0)
    optimizer.build(model.trainable_variables)  # Slots must exist before the first traced step.
  global_batch = len(inputs)
  per_replica = global_batch // strategy.num_replicas_in_sync

  def replica_shard(context):
    start = context.replica_id_in_sync_group * per_replica
    return inputs[start:start + per_replica], targets[start:start + per_replica]

  def replica_step(x, y):
    with tf.GradientTape() as tape:
      # Large loss so the summed gradient is clipped; per-replica clipping would differ.
      loss = 100.0 * tf.reduce_sum(tf.square(model(x) - y)) / global_batch
    variables = model.trainable_variables
    optimizer.apply(tape.gradient(loss, variables), variables)

  @tf.function
  def train_step(x, y):
    strategy.run(replica_step, args=(x, y))

  x, y = strategy.experimental_distribute_values_from_function(replica_shard)
  for _ in range(steps):
    train_step(x, y)
  return [v.numpy().tolist() for v in model.trainable_variables]


def _mirrored_versus_one_device() -> dict:
  """Run in a fresh process: splits the CPU into two logical devices before TF starts."""
  cpu = tf.config.list_physical_devices("CPU")[0]
  tf.config.set_logical_device_configuration(cpu, [tf.config.LogicalDeviceConfiguration()] * 2)
  rng = np.random.default_rng(2)
  inputs = rng.normal(size=(4, 4)).astype(np.float32)
  targets = rng.normal(size=(4, 3)).astype(np.float32)
  mirrored = tf.distribute.MirroredStrategy(["/cpu:0", "/cpu:1"])
  return {"replicas": mirrored.num_replicas_in_sync,
          "one_device": _train_under(tf.distribute.get_strategy(), inputs, targets, steps=2),
          "mirrored": _train_under(mirrored, inputs, targets, steps=2)}


def test_mirrored_strategy_on_two_cpus_matches_one_device():
  env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, check=True,
                          capture_output=True, text=True, timeout=120)
  report = json.loads(result.stdout.strip().splitlines()[-1])
  assert report["replicas"] == 2
  for one_device, mirrored in zip(report["one_device"], report["mirrored"]):
    np.testing.assert_allclose(np.array(mirrored), np.array(one_device), rtol=1e-5, atol=1e-6)


if __name__ == "__main__":
  print(json.dumps(_mirrored_versus_one_device()))
