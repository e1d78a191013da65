"""Tests for optimization.py: hand-computed values and NumPy copies of the three update rules."""
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import checkpoints
import choices
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


def _build_model(name: str = "bias_probe", seed: int = 0, scale: float = 1.0) -> keras.Model:
  """A built model whose name contains `bias`, so exclusions must ignore the task-model prefix."""
  model = _TinyTaskModel(name=name)
  model(np.zeros((1, 4), np.float32))
  rng = np.random.default_rng(seed)
  for variable in model.trainable_variables:
    variable.assign(scale * rng.normal(size=variable.shape).astype(np.float32))
  return model


def _numpy_steps(optimizer_name, params, grads_per_step, lrs, excluded, weight_decay_rate,
                 clip_norm=1.0, beta_1=0.9, beta_2=0.999, epsilon=1e-6):
  """The three update rules written out in NumPy (float64) from their formulas.

  bert_adam: the original AdamWeightDecayOptimizer (no bias correction); adamw: the same with
  Adam's bias correction; lamb: adamw's update times the trust ratio ||p|| / ||update|| (1 when
  a norm is 0, and for excluded variables). All clip the gradients by global norm first.
  """
  params = [p.astype(np.float64) for p in params]
  m = [np.zeros_like(p) for p in params]
  v = [np.zeros_like(p) for p in params]
  for t, (grads, lr) in enumerate(zip(grads_per_step, lrs), start=1):
    norm = np.sqrt(sum(np.sum(np.square(g.astype(np.float64))) for g in grads))
    scale = clip_norm / max(norm, clip_norm)
    for i, g in enumerate(grads):
      g = g.astype(np.float64) * scale
      m[i] = beta_1 * m[i] + (1 - beta_1) * g
      v[i] = beta_2 * v[i] + (1 - beta_2) * g * g
      m_hat, v_hat = m[i], v[i]
      if optimizer_name in ("adamw", "lamb"):
        m_hat, v_hat = m[i] / (1 - beta_1**t), v[i] / (1 - beta_2**t)
      update = m_hat / (np.sqrt(v_hat) + epsilon)
      if not excluded[i]:
        update = update + weight_decay_rate * params[i]
      ratio = 1.0
      if optimizer_name == "lamb" and not excluded[i]:
        weight_norm, update_norm = np.linalg.norm(params[i]), np.linalg.norm(update)
        if weight_norm > 0 and update_norm > 0:
          ratio = weight_norm / update_norm
      params[i] = params[i] - lr * ratio * update
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


def test_learning_rate_schedule_from_a_start_step():
  """A later phase's schedule (pretraining phase 2) counts its warmup and decay from start_step."""
  schedule = optimization.WarmupLinearDecay(0.1, num_train_steps=100, num_warmup_steps=10,
                                            start_step=1000)
  for step, expected in ((1000, 0.0), (1005, 0.05), (1010, 0.09), (1050, 0.05), (1100, 0.0),
                         (1200, 0.0)):
    assert float(schedule(step)) == pytest.approx(expected, abs=1e-7), step
  assert schedule.get_config()["start_step"] == 1000


def test_bad_schedule_arguments_name_the_argument():
  with pytest.raises(ValueError, match="num_train_steps"):
    optimization.WarmupLinearDecay(0.1, num_train_steps=0)
  with pytest.raises(ValueError, match="compute_dtype"):
    optimization.create_optimizer(0.1, 10, 1, compute_dtype="int8")


# --lr_schedule=linear (Hugging Face's get_linear_schedule_with_warmup): peak 1e-3, warmup 4,
# 20 steps. After warmup the rate is 1e-3 * (20 - step) / (20 - 4), worked out by hand.
@pytest.mark.parametrize("step, expected", [
    (0, 0.0),         # warmup starts at zero
    (2, 5e-4),        # 1e-3 * 2 / 4
    (4, 1e-3),        # end of warmup: the full peak, 1e-3 * 16 / 16
    (5, 9.375e-4),    # 1e-3 * 15 / 16
    (12, 5e-4),       # 1e-3 * 8 / 16
    (20, 0.0),        # the end
    (25, 0.0),        # past the end stays at zero
])
def test_linear_schedule_decays_from_the_end_of_warmup(step, expected):
  schedule = optimization.LinearDecayAfterWarmup(1e-3, num_train_steps=20, num_warmup_steps=4)
  assert float(schedule(step)) == pytest.approx(expected, rel=1e-6, abs=1e-12)


def test_the_schedules_differ_only_after_warmup_as_their_formulas_say():
  """During warmup both are 1e-3 * step / 4. After it the original's 1e-3 * (1 - step / 20) is
  below the linear 1e-3 * (20 - step) / 16 by 1e-3 * (20 - step) * 4 / (20 * 16)."""
  original = optimization.WarmupLinearDecay(1e-3, num_train_steps=20, num_warmup_steps=4)
  linear = optimization.LinearDecayAfterWarmup(1e-3, num_train_steps=20, num_warmup_steps=4)
  for step in range(4):
    assert float(linear(step)) == float(original(step))
  for step, original_rate, gap in ((4, 8e-4, 2e-4), (5, 7.5e-4, 1.875e-4), (12, 4e-4, 1e-4),
                                   (19, 5e-5, 1.25e-5), (20, 0.0, 0.0)):
    assert float(original(step)) == pytest.approx(original_rate, rel=1e-6, abs=1e-12), step
    assert float(linear(step)) - float(original(step)) == pytest.approx(gap, rel=1e-5,
                                                                         abs=1e-12), step


def test_linear_schedule_without_warmup_is_the_original():
  """Without warmup both decay over all steps from step 0 (up to float32 rounding)."""
  original = optimization.WarmupLinearDecay(1e-3, num_train_steps=20)
  linear = optimization.LinearDecayAfterWarmup(1e-3, num_train_steps=20)
  steps = np.arange(22)
  np.testing.assert_allclose(linear(steps).numpy(), original(steps).numpy(), rtol=1e-6, atol=1e-12)


def test_linear_schedule_from_a_start_step():
  """Pretraining's phase 2 counts the linear schedule from its first step too."""
  schedule = optimization.LinearDecayAfterWarmup(1e-3, num_train_steps=20, num_warmup_steps=4,
                                                 start_step=100)
  for step, expected in ((90, 0.0), (100, 0.0), (102, 5e-4), (104, 1e-3), (105, 9.375e-4),
                         (112, 5e-4), (120, 0.0), (125, 0.0)):
    assert float(schedule(step)) == pytest.approx(expected, rel=1e-6, abs=1e-12), step


@pytest.mark.parametrize("schedule_class", [optimization.WarmupLinearDecay,
                                            optimization.LinearDecayAfterWarmup])
def test_schedules_round_trip_through_their_config(schedule_class):
  """A schedule saved with an optimizer's config comes back as the same class with the same rates
  (keras.saving finds it by its registered name)."""
  schedule = schedule_class(1e-3, num_train_steps=20, num_warmup_steps=4, start_step=3)
  restored = keras.saving.deserialize_keras_object(keras.saving.serialize_keras_object(schedule))
  assert restored.__class__ is schedule_class
  assert schedule_class.from_config(schedule.get_config()).get_config() == schedule.get_config()
  steps = range(0, 30, 3)
  assert [float(restored(s)) for s in steps] == [float(schedule(s)) for s in steps]
  optimizer_config = optimization.AdamW(learning_rate=schedule).get_config()
  assert optimizer_config["learning_rate"]["registered_name"] == "bert>" + schedule_class.__name__
  restored = optimization.AdamW.from_config(optimizer_config)
  assert restored.get_config()["learning_rate"]["config"] == schedule.get_config()


def test_create_optimizer_takes_the_schedule_by_its_flag_name(caplog):
  with caplog.at_level("INFO"):
    optimizer = optimization.create_optimizer(1e-3, 20, 4, optimizer_name="adamw",
                                              schedule="linear", schedule_start_step=7)
  assert optimizer.get_config()["learning_rate"] == keras.saving.serialize_keras_object(
      optimization.LinearDecayAfterWarmup(1e-3, 20, 4, start_step=7))
  assert "learning rate schedule: linear (decay from the end of warmup)" in caplog.text
  assert optimization.create_optimizer(1e-3, 20, 4).get_config()["learning_rate"] == (
      keras.saving.serialize_keras_object(optimization.WarmupLinearDecay(1e-3, 20, 4)))
  with pytest.raises(ValueError, match="`lr_schedule` must be one of original, linear"):
    optimization.create_optimizer(1e-3, 20, 4, schedule="cosine")


def test_weight_decay_exclusions_by_google_name():
  model = _build_model()
  names = {v.path: checkpoints.path_below_model(v) for v in model.trainable_variables}
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


@pytest.mark.parametrize("optimizer_name", choices.OPTIMIZERS)
@pytest.mark.parametrize("gradient_scale", [0.01, 10.0])  # global norm below / above the clip
def test_steps_match_numpy(optimizer_name, gradient_scale):
  # Weights of norm ~3x their updates' make LAMB's trust ratio far from 1.
  model = _build_model(scale=3.0)
  variables = model.trainable_variables
  rng = np.random.default_rng(1)
  grads_per_step = [
      [gradient_scale * rng.normal(size=v.shape).astype(np.float32) for v in variables]
      for _ in range(4)]
  init_lr, num_train_steps, num_warmup_steps = 0.01, 5, 2  # warmup, then linear decay
  lrs = [_schedule_lr(s, init_lr, num_train_steps, num_warmup_steps) for s in range(4)]
  excluded = [any(p in v.path.split("/", 1)[1] for p in ("LayerNorm", "bias")) for v in variables]
  assert excluded.count(False) == 1  # dense/kernel is the only decayed variable
  expected, expected_m, expected_v = _numpy_steps(
      optimizer_name, [v.numpy() for v in variables], grads_per_step, lrs, excluded,
      weight_decay_rate=0.01)

  optimizer = optimization.create_optimizer(init_lr, num_train_steps, num_warmup_steps,
                                            optimizer_name=optimizer_name)
  for grads in grads_per_step:
    optimizer.apply([tf.constant(g) for g in grads], variables)

  assert int(optimizer.iterations) == 4
  slots = checkpoints.named_slot_variables(
      optimizer, {checkpoints.path_below_model(v): v for v in variables})
  for variable, want, want_m, want_v in zip(variables, expected, expected_m, expected_v):
    name = checkpoints.path_below_model(variable)
    np.testing.assert_allclose(variable.numpy(), want, rtol=1e-5, atol=1e-6, err_msg=name)
    np.testing.assert_allclose(slots[name + "/adam_m"].numpy(), want_m, rtol=1e-5, atol=1e-9)
    # bert_adam and adamw use TensorFlow's fused Adam kernel, which forms 1 - beta_2 from float32
    # beta_2: 0.00099998713 instead of 0.001, so v's increments differ by 1.3e-5 relative.
    np.testing.assert_allclose(slots[name + "/adam_v"].numpy(), want_v, rtol=2e-5, atol=1e-12)


def test_adamw_is_keras_adamw_with_the_original_exclusions():
  """Keras's own AdamW (decay multiplied by the learning rate) on the same steps. Epsilon is tiny
  because Keras adds it to sqrt(v), not to sqrt(v_hat) as PyTorch and optimization.AdamW do."""
  # Not named `bias_probe`: Keras's TF backend matches var_names against the whole variable path.
  ours, theirs = _build_model(name="task"), _build_model(name="task")
  schedule = optimization.WarmupLinearDecay(0.01, num_train_steps=5, num_warmup_steps=2)
  adamw = optimization.AdamW(learning_rate=schedule, weight_decay_rate=0.01, epsilon=1e-12)
  keras_adamw = keras.optimizers.AdamW(learning_rate=schedule, weight_decay=0.01, epsilon=1e-12,
                                       global_clipnorm=1.0)
  keras_adamw.exclude_from_weight_decay(var_names=["gamma", "beta", "bias"])  # LayerNorm, biases
  rng = np.random.default_rng(3)
  for _ in range(4):
    grads = [rng.normal(size=v.shape).astype(np.float32) for v in ours.trainable_variables]
    adamw.apply([tf.constant(g) for g in grads], ours.trainable_variables)
    keras_adamw.apply([tf.constant(g) for g in grads], theirs.trainable_variables)
  for mine, reference in zip(ours.trainable_variables, theirs.trainable_variables):
    np.testing.assert_allclose(mine.numpy(), reference.numpy(), rtol=1e-5, atol=1e-6,
                               err_msg=mine.path)


def test_lamb_trust_ratio_is_one_for_a_zero_weight():
  model = _build_model()
  model.dense.kernel.assign(tf.zeros_like(model.dense.kernel))
  lamb = optimization.Lamb(learning_rate=0.1, weight_decay_rate=0.01, clip_norm=None)
  gradient = np.full(model.dense.kernel.shape, 0.5, np.float32)
  lamb.apply([tf.constant(gradient)], [model.dense.kernel])
  # First step: m_hat = g, v_hat = g**2, so update = g / (|g| + eps) ~ 1; decay of 0 is 0. (A ratio
  # of 0 / ||update|| would leave the weight at 0 for ever.) float32 bias correction: rtol 1e-5.
  np.testing.assert_allclose(model.dense.kernel.numpy(), -0.1 * 0.5 / (0.5 + 1e-6), rtol=1e-5)


def test_bert_adam_warns_about_high_learning_rates_once(caplog):
  """The warning says why (no bias correction) and names the flag that fixes it."""

  def warnings_for(learning_rate, optimizer_name):
    caplog.clear()
    with caplog.at_level("WARNING"):
      optimization.create_optimizer(learning_rate, 10, 1, optimizer_name=optimizer_name)
    return [r.getMessage() for r in caplog.records if r.levelname == "WARNING"]

  messages = warnings_for(3e-4, "bert_adam")
  assert len(messages) == 1
  assert "no bias correction" in messages[0] and "`optimizer`=adamw" in messages[0]
  assert not warnings_for(1e-4, "bert_adam")  # the original's own rates stay quiet
  assert not warnings_for(3e-4, "adamw") and not warnings_for(3e-4, "lamb")
  with pytest.raises(ValueError, match="`optimizer` must be one of bert_adam, adamw, lamb"):
    optimization.create_optimizer(1e-4, 10, 1, optimizer_name="adam")


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


@pytest.mark.parametrize("optimizer_name", choices.OPTIMIZERS)
def test_float16_is_loss_scaled_and_matches_float32(optimizer_name):
  reference_model, scaled_model = _build_model(), _build_model()
  grads = [np.full(v.shape, 0.01, np.float32) for v in reference_model.trainable_variables]
  reference = optimization.create_optimizer(0.1, 10, 0, optimizer_name=optimizer_name)
  scaled = optimization.create_optimizer(0.1, 10, 0, compute_dtype="mixed_float16",
                                         optimizer_name=optimizer_name)
  assert isinstance(scaled, keras.optimizers.LossScaleOptimizer)
  assert type(scaled.inner_optimizer) is type(reference)
  assert isinstance(optimization.create_optimizer(0.1, 10, 0, compute_dtype="bfloat16"),
                    optimization.AdamWeightDecay)
  loss_scale = float(scaled.scale_loss(1.0))
  reference.apply([tf.constant(g) for g in grads], reference_model.trainable_variables)
  scaled.apply([tf.constant(g * loss_scale) for g in grads], scaled_model.trainable_variables)
  for want, got in zip(reference_model.trainable_variables, scaled_model.trainable_variables):
    np.testing.assert_allclose(got.numpy(), want.numpy(), rtol=1e-6)
  slots = checkpoints.named_slot_variables(scaled, {"dense/kernel": scaled_model.dense.kernel})
  assert sorted(slots) == ["dense/kernel/adam_m", "dense/kernel/adam_v"]


def _train_under(strategy, inputs, targets, steps: int, optimizer_name: str) -> list:
  """Trains a fresh model for `steps` steps on the global batch; returns the final weights."""
  with strategy.scope():
    model = _build_model(name="task")
    optimizer = optimization.create_optimizer(0.05, num_train_steps=10, num_warmup_steps=0,
                                              optimizer_name=optimizer_name)
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
  report = {"replicas": mirrored.num_replicas_in_sync}
  for name in choices.OPTIMIZERS:
    report[name] = {
        "one_device": _train_under(tf.distribute.get_strategy(), inputs, targets, 3, name),
        "mirrored": _train_under(mirrored, inputs, targets, 3, name)}
  return report


def test_mirrored_strategy_on_two_cpus_matches_one_device():
  env = dict(os.environ, PYTHONPATH=REPO_ROOT, TF_CPP_MIN_LOG_LEVEL="2")
  result = subprocess.run([sys.executable, os.path.abspath(__file__)], env=env, check=True,
                          capture_output=True, text=True, timeout=120)
  report = json.loads(result.stdout.strip().splitlines()[-1])
  assert report["replicas"] == 2
  for name in choices.OPTIMIZERS:
    for one_device, mirrored in zip(report[name]["one_device"], report[name]["mirrored"]):
      np.testing.assert_allclose(np.array(mirrored), np.array(one_device), rtol=1e-5, atol=1e-6,
                                 err_msg=name)


if __name__ == "__main__":
  print(json.dumps(_mirrored_versus_one_device()))
