# coding=utf-8
"""The original BERT's optimizer on Keras 3 (AdamW without bias correction), AdamW and LAMB.

Google's BERT was pre-trained and fine-tuned with `AdamWeightDecayOptimizer`, a hand-written TF1
optimizer. `AdamWeightDecay` reproduces its update rule exactly, including its two departures from
textbook Adam that matter when continuing from Google's checkpoints or reproducing their numbers:

- no bias correction of the first and second moments, and
- weight decay that is decoupled from the moments and skipped for variables whose name contains
  `LayerNorm`, `layer_norm` or `bias`.

Two alternatives share everything else (clipping, schedule, exclusions, slot names), chosen with
`--optimizer` (`choices.OPTIMIZERS`):

- `AdamW` (`adamw`): the same with bias correction, i.e. Keras's and Hugging Face's AdamW. Without
  bias correction the first updates are several times the learning rate, so rates tuned for
  bias-corrected Adam (e.g. 3e-4) can make the original's optimizer collapse;
- `Lamb` (`lamb`): LAMB (You et al. 2019), AdamW's update scaled per variable by a trust ratio, for
  large-batch pretraining.

Gradients are clipped by their global norm (1.0) before the update, as the original did. The
learning rate warms up linearly, then decays linearly to 0, chosen with `--lr_schedule`
(`choices.SCHEDULES`): `WarmupLinearDecay` (`original`, the default) measures the decay from step
0 as the original did; `LinearDecayAfterWarmup` (`linear`) from the end of warmup, as Hugging
Face's `get_linear_schedule_with_warmup`, so a Hugging Face recipe gets its rates.
`create_optimizer` assembles all of this the way the original's `create_optimizer` did, and wraps
it in a loss-scaling optimizer for float16 training.

Optimizer slots are saved under the original's checkpoint names (`<variable>/adam_m`,
`<variable>/adam_v`; `checkpoints.named_slot_variables`): all three optimizers keep their first and
second moments under these names, so a training checkpoint of any of them resumes and initializes
alike.
"""

import re
from typing import Optional, Sequence

from absl import logging
import keras
import tensorflow as tf

import checkpoints
import choices

# Substrings of a variable's Google name that exempt it from weight decay (as the original).
DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY = ("LayerNorm", "layer_norm", "bias")
# Peak learning rate above which `bert_adam` warns that results may collapse: the original's
# largest fine-tuning rate was 5e-5 and its pretraining rate 1e-4.
BERT_ADAM_WARNING_LEARNING_RATE = 1e-4


@keras.saving.register_keras_serializable(package="bert")
class WarmupLinearDecay(keras.optimizers.schedules.LearningRateSchedule):
  """The original's learning rate: linear warmup, then linear decay to zero.

  For `step < num_warmup_steps` the rate is `init_lr * step / num_warmup_steps`. Otherwise it is
  `init_lr * (1 - min(step, num_train_steps) / num_train_steps)`: the decay is measured from step 0,
  not from the end of warmup, so right after warmup the rate is already slightly below `init_lr`
  (what the original's `polynomial_decay(power=1.0)` combined with warmup computes). The step is
  the number of updates already applied, so the very first update uses step 0 (rate 0 when there
  is warmup). With `start_step` (a later phase of one job, e.g. pretraining's phase 2) the schedule
  counts steps from there: the rate at step `start_step + s` is the rate above at `s`.
  """

  def __init__(self, init_lr: float, num_train_steps: int, num_warmup_steps: int = 0,
               start_step: int = 0):
    if num_train_steps <= 0:
      raise ValueError("num_train_steps must be positive, got %r" % (num_train_steps,))
    if num_warmup_steps < 0:
      raise ValueError("num_warmup_steps must not be negative, got %r" % (num_warmup_steps,))
    self.init_lr = float(init_lr)
    self.num_train_steps = int(num_train_steps)
    self.num_warmup_steps = int(num_warmup_steps)
    self.start_step = int(start_step)

  # How the decay after warmup is measured, for the log (`describe_schedule`).
  decay_description = "decay from step 0"

  def __call__(self, step):
    step = tf.maximum(tf.cast(step, tf.float32) - float(self.start_step), 0.0)
    decayed_lr = self._decayed_lr(step)
    if not self.num_warmup_steps:
      return decayed_lr
    warmup_lr = self.init_lr * step / float(self.num_warmup_steps)
    return tf.where(step < float(self.num_warmup_steps), warmup_lr, decayed_lr)

  def _decayed_lr(self, step):
    """The rate once warmup is over at `step` (counted from `start_step`, float32)."""
    done = tf.minimum(step, float(self.num_train_steps)) / float(self.num_train_steps)
    return self.init_lr * (1.0 - done)

  def get_config(self) -> dict:
    return {"init_lr": self.init_lr, "num_train_steps": self.num_train_steps,
            "num_warmup_steps": self.num_warmup_steps, "start_step": self.start_step}


@keras.saving.register_keras_serializable(package="bert")
class LinearDecayAfterWarmup(WarmupLinearDecay):
  """Linear warmup, then linear decay from the end of warmup to zero (`--lr_schedule=linear`).

  The rate of Hugging Face's `get_linear_schedule_with_warmup`, so that a recipe tuned with it
  (usually with `--optimizer=adamw`) gets the same rate at every step: warmup as
  `WarmupLinearDecay`, then `init_lr * max(0, num_train_steps - step) / max(1, num_train_steps -
  num_warmup_steps)`, so the rate is `init_lr` exactly at the end of warmup and falls to 0 over the
  remaining steps. Without warmup it equals `WarmupLinearDecay`. The step convention (updates
  already applied), `start_step` and the config are `WarmupLinearDecay`'s.
  """

  decay_description = "decay from the end of warmup"

  def _decayed_lr(self, step):
    remaining = tf.maximum(float(self.num_train_steps) - step, 0.0)
    return self.init_lr * remaining / float(max(1, self.num_train_steps - self.num_warmup_steps))


@keras.saving.register_keras_serializable(package="bert")
class AdamWeightDecay(keras.optimizers.Optimizer):
  """Adam with decoupled weight decay and no bias correction, as the original BERT's optimizer.

  For each variable `p` with gradient `g` (after global-norm clipping):

      m = beta_1 * m + (1 - beta_1) * g
      v = beta_2 * v + (1 - beta_2) * g**2
      update = m / (sqrt(v) + epsilon)           # no bias correction, as the original
      update += weight_decay_rate * p            # unless the name matches an exclusion
      p -= learning_rate * update

  Under `tf.distribute`, per-replica gradients are summed across replicas first and the sum is
  clipped, so N replicas with loss scaled by 1/global_batch give the update of one device.
  """

  def __init__(self,
               learning_rate=0.001,
               weight_decay_rate: float = 0.0,
               beta_1: float = 0.9,
               beta_2: float = 0.999,
               epsilon: float = 1e-6,
               exclude_from_weight_decay: Optional[Sequence[str]] = (
                   DEFAULT_EXCLUDE_FROM_WEIGHT_DECAY),
               clip_norm: Optional[float] = 1.0,
               name: str = "AdamWeightDecay",
               **kwargs):
    super().__init__(learning_rate=learning_rate, name=name, **kwargs)
    self.weight_decay_rate = weight_decay_rate
    self.beta_1 = beta_1
    self.beta_2 = beta_2
    self.epsilon = epsilon
    self.exclude_from_weight_decay = tuple(exclude_from_weight_decay or ())
    self.clip_norm = clip_norm

  def build(self, var_list):
    """Creates the zero-initialised first and second moment slots of every variable."""
    if self.built:
      return
    super().build(var_list)
    m_name, v_name = checkpoints.SLOT_NAMES
    self._adam_m = [self.add_variable_from_reference(v, name=m_name) for v in var_list]
    self._adam_v = [self.add_variable_from_reference(v, name=v_name) for v in var_list]
    # Decided here from the Keras variables' paths: update_step sees per-device tf.Variables.
    self._excluded = [self.is_excluded(v) for v in var_list]

  def is_excluded(self, variable) -> bool:
    """Whether an exclusion pattern (e.g. `LayerNorm`, `bias`) is in the variable's name below its
    model (`checkpoints.path_below_model`: a task model's variables' Google names)."""
    name = checkpoints.path_below_model(variable)
    return any(re.search(pattern, name) for pattern in self.exclude_from_weight_decay)

  def slot_variables(self, variable) -> dict:
    """Returns `{"adam_m": m, "adam_v": v}` for a model variable the optimizer was built with."""
    index = self._get_variable_index(variable)
    return dict(zip(checkpoints.SLOT_NAMES, (self._adam_m[index], self._adam_v[index])))

  @tf.autograph.experimental.do_not_convert
  def _backend_update_step(self, grads, trainable_variables, learning_rate):
    """Sums gradients across replicas, clips the sum by global norm, then updates each variable.

    Keras clips before its own cross-replica sum (each replica's gradients separately), which would
    make the update depend on the number of replicas; this override keeps it device-independent.
    Nothing here branches on a tensor, so tf.function traces it as plain Python: AutoGraph's
    conversion of the per-variable update functions would only add tracing time.
    """
    grads = [tf.convert_to_tensor(g) for g in grads]  # Embedding gradients arrive as IndexedSlices.
    replica_context = tf.distribute.get_replica_context()
    if replica_context is not None:
      grads = replica_context.all_reduce(tf.distribute.ReduceOp.SUM, grads)
    if self.clip_norm:
      grads, _ = tf.clip_by_global_norm(grads, self.clip_norm)
    variables = [v.value if isinstance(v, keras.Variable) else v for v in trainable_variables]

    def update_one(variable, grad):  # The strategy passes each device's copy of the variable first.
      self.update_step(grad, variable, learning_rate)

    def update_all(strategy, grads):
      for grad, variable in zip(grads, variables):
        strategy.extended.update(variable, update_one, args=(grad,), group=False)

    if replica_context is None:
      update_all(tf.distribute.get_strategy(), grads)
    else:
      replica_context.merge_call(update_all, args=(grads,))

  def update_step(self, gradient, variable, learning_rate):
    """Applies the update rule to one variable (see the class docstring).

    One fused kernel (`ResourceApplyAdam`) updates m, v and the variable in a single pass over
    memory; separate ops took about as long again on all-MiniLM-L6-v2, a quarter of its training
    step at 16 tokens. The kernel divides by `sqrt(v) + epsilon` and scales the learning rate by
    `sqrt(1 - beta2_power) / (1 - beta1_power)`: with both powers 0 that is the original's rule;
    with bias correction (`_beta_powers`) epsilon is scaled by `sqrt(1 - beta2_power)`, which
    turns the kernel's formula into `m_hat / (sqrt(v_hat) + epsilon)` exactly. Weight decay
    `p -= learning_rate * rate * p` (on `p` before the Adam step, as the rule says) comes first.
    """
    dtype = variable.dtype
    gradient = tf.cast(gradient, dtype)
    learning_rate = tf.cast(learning_rate, dtype)
    slots = self.slot_variables(variable)
    if self.weight_decay_rate and not self._excluded[self._get_variable_index(variable)]:
      self.assign_sub(variable, learning_rate * self.weight_decay_rate * variable)
    beta_1_power, beta_2_power = self._beta_powers(dtype)
    tf.raw_ops.ResourceApplyAdam(
        var=variable.handle, m=slots["adam_m"].handle, v=slots["adam_v"].handle,
        beta1_power=beta_1_power, beta2_power=beta_2_power, lr=learning_rate,
        beta1=tf.constant(self.beta_1, dtype), beta2=tf.constant(self.beta_2, dtype),
        epsilon=self.epsilon * tf.sqrt(1.0 - beta_2_power), grad=gradient)

  def _beta_powers(self, dtype) -> tuple:
    """`beta_1**t` and `beta_2**t` of the bias correction: 0 and 0 (none), as the original."""
    return tf.constant(0.0, dtype), tf.constant(0.0, dtype)

  def get_config(self) -> dict:
    config = super().get_config()
    config.update({
        "weight_decay_rate": self.weight_decay_rate,
        "beta_1": self.beta_1,
        "beta_2": self.beta_2,
        "epsilon": self.epsilon,
        "exclude_from_weight_decay": list(self.exclude_from_weight_decay),
        "clip_norm": self.clip_norm,
    })
    return config


@keras.saving.register_keras_serializable(package="bert")
class AdamW(AdamWeightDecay):
  """AdamWeightDecay with bias correction: Adam with decoupled weight decay (`--optimizer=adamw`).

  At step `t` (1 for the first update) the moments are divided by `1 - beta_1**t` and
  `1 - beta_2**t` before `update = m_hat / (sqrt(v_hat) + epsilon)`; weight decay, exclusions,
  clipping and slots are AdamWeightDecay's. `p -= lr * (update + rate * p)` is Keras's AdamW (which
  first multiplies `p` by `1 - lr * rate`) and PyTorch's, with epsilon added to `sqrt(v_hat)` as
  PyTorch (and Hugging Face) do; Keras adds it to `sqrt(v)`, a difference of order epsilon.
  """

  def __init__(self, *args, name: str = "AdamW", **kwargs):
    super().__init__(*args, name=name, **kwargs)

  def _beta_powers(self, dtype) -> tuple:
    """`beta**t` for bias correction. `iterations` counts the updates applied before this one."""
    step = tf.cast(self.iterations + 1, dtype)
    return tf.pow(tf.cast(self.beta_1, dtype), step), tf.pow(tf.cast(self.beta_2, dtype), step)


@keras.saving.register_keras_serializable(package="bert")
class Lamb(AdamW):
  """LAMB (You et al. 2019, "Large Batch Optimization for Deep Learning"; `--optimizer=lamb`).

  The AdamW update `u = m_hat / (sqrt(v_hat) + epsilon) + rate * p` (bias-corrected moments,
  decoupled weight decay) is scaled per variable by the trust ratio `||p|| / ||u||` (Frobenius
  norms; 1 when either is 0): `p -= lr * ||p|| / ||u|| * u`, so every variable moves by the same
  fraction `lr` of its norm, whatever the size of its gradients.

  Variables excluded from weight decay (`LayerNorm`, `layer_norm`, `bias`) are also excluded from
  the trust ratio (ratio 1, a plain AdamW step), as TF Addons' and ALBERT's LAMB do by default
  (their `exclude_from_layer_adaptation` falls back to `exclude_from_weight_decay`): a bias or
  LayerNorm beta starts at zero, and steps in proportion to its small norm would barely move it.
  Global-norm clipping (1.0) precedes the update as for the other optimizers.
  """

  def __init__(self, *args, name: str = "Lamb", **kwargs):
    super().__init__(*args, name=name, **kwargs)

  def update_step(self, gradient, variable, learning_rate):
    """Applies LAMB's rule to one variable (the class docstring): Adam's moments, then the
    bias-corrected update with weight decay, scaled by the trust ratio unless excluded."""
    dtype = variable.dtype
    gradient = tf.cast(gradient, dtype)
    learning_rate = tf.cast(learning_rate, dtype)
    slots = self.slot_variables(variable)
    next_m = self.beta_1 * slots["adam_m"] + (1.0 - self.beta_1) * gradient
    next_v = self.beta_2 * slots["adam_v"] + (1.0 - self.beta_2) * tf.square(gradient)
    beta_1_power, beta_2_power = self._beta_powers(dtype)
    update = (next_m / (1.0 - beta_1_power)) / (
        tf.sqrt(next_v / (1.0 - beta_2_power)) + self.epsilon)
    if not self._excluded[self._get_variable_index(variable)]:
      if self.weight_decay_rate:
        update += self.weight_decay_rate * variable
      weight_norm = tf.norm(variable)
      update_norm = tf.norm(update)
      update *= tf.where((weight_norm > 0.0) & (update_norm > 0.0),
                         tf.math.divide_no_nan(weight_norm, update_norm), 1.0)
    self.assign_sub(variable, learning_rate * update)
    self.assign(slots["adam_m"], next_m)
    self.assign(slots["adam_v"], next_v)


_OPTIMIZER_CLASSES = {"bert_adam": AdamWeightDecay, "adamw": AdamW, "lamb": Lamb}
_SCHEDULE_CLASSES = {"original": WarmupLinearDecay, "linear": LinearDecayAfterWarmup}


def describe_schedule(schedule: str) -> str:
  """`--lr_schedule`'s value and how its decay is measured, e.g. `original (decay from step 0)`."""
  return "%s (%s)" % (schedule, _SCHEDULE_CLASSES[schedule].decay_description)


def create_optimizer(init_lr: float,
                     num_train_steps: int,
                     num_warmup_steps: int,
                     weight_decay_rate: float = 0.01,
                     compute_dtype: str = "float32",
                     clip_norm: Optional[float] = 1.0,
                     optimizer_name: str = "bert_adam",
                     schedule_start_step: int = 0,
                     schedule: str = "original") -> keras.optimizers.Optimizer:
  """Creates the optimizer the way the original did: warmup, linear decay, clipping, decay.

  Args:
    init_lr: peak learning rate, reached at the end of warmup.
    num_train_steps: step at which the learning rate reaches 0.
    num_warmup_steps: steps of linear warmup from 0 (0 for none).
    weight_decay_rate: decoupled weight decay (0.01 in the original).
    compute_dtype: the model's compute dtype, or a Keras mixed-precision policy name. `float16`
      (or `mixed_float16`) returns the optimizer wrapped in a dynamic `keras.optimizers.
      LossScaleOptimizer`: scale the loss with `optimizer.scale_loss(loss)` before taking gradients.
      `bfloat16` has float32's range and needs no loss scaling.
    clip_norm: global gradient norm to clip to (1.0 in the original); None disables clipping.
    optimizer_name: one of choices.OPTIMIZERS: `bert_adam` (the original's AdamWeightDecay),
      `adamw` (`AdamW`: with bias correction) or `lamb` (`Lamb`). `bert_adam` above
      BERT_ADAM_WARNING_LEARNING_RATE logs a warning that names `optimizer`=adamw.
    schedule_start_step: the step the schedule starts at (`WarmupLinearDecay`'s `start_step`):
      warmup and decay then span steps `schedule_start_step` to that plus `num_train_steps`.
    schedule: one of choices.SCHEDULES: `original` (`WarmupLinearDecay`: decay from step 0) or
      `linear` (`LinearDecayAfterWarmup`: decay from the end of warmup, as Hugging Face's).

  Returns:
    An optimizer whose `apply(grads, variables)` applies one step, inside or outside a
    `tf.distribute` strategy's replica context. Create it under the strategy's scope.
  """
  dtype = compute_dtype.replace("mixed_", "")
  if dtype not in ("float32", "float16", "bfloat16"):
    raise ValueError("compute_dtype must be float32, float16 or bfloat16 (optionally mixed_...), "
                     "got %r" % (compute_dtype,))
  if optimizer_name not in _OPTIMIZER_CLASSES:
    raise ValueError("`optimizer` must be one of %s, got %r" % (", ".join(choices.OPTIMIZERS),
                                                                optimizer_name))
  if schedule not in _SCHEDULE_CLASSES:
    raise ValueError("`lr_schedule` must be one of %s, got %r" % (", ".join(choices.SCHEDULES),
                                                                  schedule))
  if optimizer_name == "bert_adam" and init_lr > BERT_ADAM_WARNING_LEARNING_RATE:
    logging.warning(
        "`learning_rate`=%g with `optimizer`=bert_adam, the original's optimizer: it has no bias "
        "correction, so its early updates are several times the learning rate (up to 6.6x near "
        "step 12, 3.2x at step 100, 1.3x at step 1000), and rates above %g, tuned for "
        "bias-corrected Adam, may make training collapse. For such rates use `optimizer`=adamw "
        "(the same with bias correction).", init_lr, BERT_ADAM_WARNING_LEARNING_RATE)
  logging.info("Optimizer: %s (%s); learning rate schedule: %s", optimizer_name,
               _OPTIMIZER_CLASSES[optimizer_name].__name__, describe_schedule(schedule))
  optimizer = _OPTIMIZER_CLASSES[optimizer_name](
      learning_rate=_SCHEDULE_CLASSES[schedule](init_lr, num_train_steps, num_warmup_steps,
                                                schedule_start_step),
      weight_decay_rate=weight_decay_rate,
      clip_norm=clip_norm)
  if dtype == "float16":
    return keras.optimizers.LossScaleOptimizer(optimizer)
  return optimizer
