# coding=utf-8
"""Where a run executes: `tf.distribute` strategies, precision, and the chief that writes outputs.

The original ran on one TPU through TPUEstimator, or on one CPU/GPU. Here one code path runs under
any strategy: one device, MirroredStrategy, MultiWorkerMirroredStrategy from `TF_CONFIG`, or a
TPU. Batch sizes are global everywhere.

Loss convention under distribution: a task's loss function runs once per replica on that replica's
part of the global batch and returns *this replica's share* of the global-batch value, so that the
shares summed over replicas equal the value one device computes on the whole global batch.
`replica_weighted_mean` computes such a share for any weighted mean (the normalizer is all-reduced),
so losses and metrics do not depend on the number of replicas.

Gradient accumulation (training_loop.py) extends the convention to several micro-batches per
optimizer update: the loop first records every normalizer of the loss over the whole effective
batch (`recording_denominators`), then computes each micro-batch's gradient with those totals
(`effective_batch_denominators`), so the shares of all micro-batches and replicas add up to the
value one device computes on the effective batch.
"""

import contextlib
import json
import os
import re
import threading
from typing import Optional, Sequence

from absl import logging
import keras
import tensorflow as tf

import choices
import errors


class DistributionError(errors.InputError):
  """A `TF_CONFIG` or strategy flag that cannot describe a run; the message names it."""


def _tf_config() -> dict:
  """The TF_CONFIG environment variable, parsed and checked ({} when unset)."""
  text = os.environ.get("TF_CONFIG", "") or "{}"
  try:
    config = json.loads(text)
  except json.JSONDecodeError as error:
    raise DistributionError("TF_CONFIG is not valid JSON: %s" % error) from None
  _check_tf_config(config)
  return config


def _check_tf_config(config) -> None:
  """Raises DistributionError unless `config` has TF_CONFIG's shape: `cluster` maps task types to
  lists of "host:port" addresses, and `task` names one of them by type and index."""
  if not isinstance(config, dict):
    raise DistributionError("TF_CONFIG must be a JSON object, got %s" % type(config).__name__)
  cluster, task = config.get("cluster", {}), config.get("task", {})
  if not isinstance(cluster, dict):
    raise DistributionError("TF_CONFIG: cluster must map task types to address lists")
  for task_type, addresses in cluster.items():
    if not (isinstance(addresses, list) and addresses and
            all(isinstance(a, str) and re.fullmatch(r"[^\s:]+:\d+", a) for a in addresses)):
      raise DistributionError('TF_CONFIG: cluster["%s"] must be a non-empty list of "host:port" '
                              "addresses, got %r" % (task_type, addresses))
  if not isinstance(task, dict):
    raise DistributionError("TF_CONFIG: task must be an object with type and index")
  if task:
    task_type, index = task.get("type"), task.get("index", 0)
    if task_type == "evaluator":  # TensorFlow's side-car evaluator is not in the cluster.
      return
    if task_type not in cluster:
      raise DistributionError("TF_CONFIG: task type %r is not in the cluster (%s)" %
                              (task_type, ", ".join(sorted(cluster)) or "empty"))
    if isinstance(index, bool) or not isinstance(index, int) or not (
        0 <= index < len(cluster[task_type])):
      raise DistributionError("TF_CONFIG: task index %r is not in [0, %d) for type %r" %
                              (index, len(cluster[task_type]), task_type))


def check_tf_config() -> None:
  """Raises DistributionError naming what is wrong with the TF_CONFIG environment variable."""
  _tf_config()


def _tf_config_task_count() -> int:
  """Number of tasks TF_CONFIG's cluster names (0 when TF_CONFIG is unset)."""
  return sum(len(addresses) for addresses in _tf_config().get("cluster", {}).values())


def make_strategy(name: str = "auto",
                  *,
                  devices: Optional[list] = None,
                  use_tpu: bool = False,
                  tpu_address: Optional[str] = None,
                  tpu_zone: Optional[str] = None,
                  gcp_project: Optional[str] = None,
                  num_tpu_cores: Optional[int] = None) -> tf.distribute.Strategy:
  """Creates a `tf.distribute` strategy. Call it before any other TensorFlow op.

  Args:
    name: one of choices.STRATEGIES. `auto` picks tpu with use_tpu, multi_worker_mirrored when
      TF_CONFIG names several tasks, mirrored with several GPUs, else one_device (the default
      strategy).
    devices: the mirrored strategy's devices (default: all GPUs, else all logical CPUs).
    use_tpu, tpu_address, tpu_zone, gcp_project: where the TPU is (the original's flags).
    num_tpu_cores: cores expected on the TPU; a mismatch is logged.

  Returns:
    The strategy. Batch sizes given to `train`, `evaluate` and `predict` are global.
  """
  if name not in choices.STRATEGIES:
    raise DistributionError("`distribution_strategy` must be one of %s, got %r" %
                            (choices.STRATEGIES, name))
  if name == "auto":
    if use_tpu:
      name = "tpu"
    elif _tf_config_task_count() > 1:
      name = "multi_worker_mirrored"
    elif len(tf.config.list_physical_devices("GPU")) > 1:
      name = "mirrored"
    else:
      name = "one_device"
  logging.info("Distribution strategy: %s", name)
  if name == "one_device":
    return tf.distribute.get_strategy()
  if name == "mirrored":
    if devices is None:
      gpus = tf.config.list_logical_devices("GPU")
      devices = [d.name for d in (gpus or tf.config.list_logical_devices("CPU"))]
    return tf.distribute.MirroredStrategy(devices=devices)
  if name == "multi_worker_mirrored":
    if not os.environ.get("TF_CONFIG"):
      raise DistributionError("`distribution_strategy`=multi_worker_mirrored needs the TF_CONFIG "
                              "environment variable (cluster and task of this worker)")
    return tf.distribute.MultiWorkerMirroredStrategy()
  try:
    resolver = tf.distribute.cluster_resolver.TPUClusterResolver(
        tpu=tpu_address or "", zone=tpu_zone, project=gcp_project)
    tf.config.experimental_connect_to_cluster(resolver)
    tf.tpu.experimental.initialize_tpu_system(resolver)
  except (ValueError, tf.errors.OpError) as error:  # No TPU here, or none of that name.
    raise DistributionError("no TPU to run on (`tpu_name`=%s): %s" % (
        tpu_address, errors.first_line(error))) from None
  strategy = tf.distribute.TPUStrategy(resolver)
  if num_tpu_cores and strategy.num_replicas_in_sync != num_tpu_cores:
    logging.warning("`num_tpu_cores`=%d but the TPU has %d cores; using %d", num_tpu_cores,
                    strategy.num_replicas_in_sync, strategy.num_replicas_in_sync)
  return strategy


def set_precision(precision: str) -> None:
  """Sets Keras's global dtype policy: float32, or mixed float16/bfloat16 (float32 variables)."""
  if precision not in choices.TRAINING_PRECISIONS:
    raise DistributionError("`mixed_precision` must be one of %s, got %r" %
                            (choices.TRAINING_PRECISIONS, precision))
  keras.mixed_precision.set_global_policy(
      "float32" if precision == "float32" else "mixed_" + precision)


def distribute_dataset(strategy: tf.distribute.Strategy, dataset: tf.data.Dataset):
  """Distributes a dataset of global batches so that each global batch is split over replicas.

  Unless the dataset chose a sharding policy itself, every worker reads the same stream and keeps
  its part of each batch (DATA sharding): the global batches are the ones one device would see.

  tf.data's autotuner is off: its thread sleeps in periods that double up to 60 s, and in
  TensorFlow 2.21 deleting an iterator while the cores are busy often waits out the current
  period (the cancellation wakes the thread before the iterator counts as cancelled, so it sleeps
  again). Every evaluation, prediction and training run lost up to a minute when its iterator
  ended (`benchmarks/bench_iterator_teardown.py` measures it). Without the autotuner an AUTOTUNE
  map keeps its starting parallelism, one call per core (at most 16), and prefetching still runs.
  """
  options = tf.data.Options()
  options.autotune.enabled = False
  if dataset.options().experimental_distribute.auto_shard_policy == (
      tf.data.experimental.AutoShardPolicy.AUTO):
    options.experimental_distribute.auto_shard_policy = tf.data.experimental.AutoShardPolicy.DATA
  return strategy.experimental_distribute_dataset(dataset.with_options(options))


def is_chief() -> bool:
  """Whether this process writes outputs (checkpoints, summaries, results, exports).

  One process of a run does: the `chief` task of a TF_CONFIG cluster, or worker 0 of a cluster
  without one (as MultiWorkerMirroredStrategy decides which worker checkpoints), and any process
  run without TF_CONFIG. Every function that writes a run's output asks this itself.
  """
  config = _tf_config()
  task = config.get("task") or {}
  if not config.get("cluster") or not task:
    return True
  if task.get("type") == "chief":
    return True
  return "chief" not in config["cluster"] and task.get("type") == "worker" and (
      int(task.get("index", 0)) == 0)


# The denominators of replica_weighted_mean while the loop accumulates gradients, per thread
# (MirroredStrategy runs each replica's function in its own thread).
_accumulation = threading.local()


@contextlib.contextmanager
def recording_denominators():
  """Within it, `replica_weighted_mean` appends this replica's denominator `sum(w)` (not summed
  over replicas) to the yielded list, one entry per call in call order."""
  _accumulation.recorded, _accumulation.totals = [], None
  try:
    yield _accumulation.recorded
  finally:
    _accumulation.recorded = None


@contextlib.contextmanager
def effective_batch_denominators(totals: Sequence[tf.Tensor]):
  """Within it, the i-th call of `replica_weighted_mean` divides by `totals[i]` (+ epsilon): the
  denominator of that call summed over every replica and micro-batch of the effective batch (as
  `recording_denominators` recorded them), instead of its own all-reduced one."""
  _accumulation.recorded, _accumulation.totals, _accumulation.used = None, list(totals), 0
  try:
    yield
    if _accumulation.used != len(_accumulation.totals):
      raise ValueError("the loss function called replica_weighted_mean %d times on a micro-batch "
                       "but %d times on the effective batch" %
                       (_accumulation.used, len(_accumulation.totals)))
  finally:
    _accumulation.totals = None


def replica_weighted_mean(values: tf.Tensor, weights: Optional[tf.Tensor] = None,
                          epsilon: float = 0.0) -> tf.Tensor:
  """This replica's share of the global-batch mean `sum(w * v) / (sum(w) + epsilon)`.

  The denominator is summed over all replicas, so the shares of all replicas add up to the value
  one device computes on the whole global batch (exactly, not an average of per-replica means).
  Call it inside a loss or metric function (replica context); outside any strategy it is the
  plain weighted mean. While the loop accumulates gradients the denominator is the one of the
  whole effective batch (see `effective_batch_denominators`).
  """
  values = tf.cast(tf.reshape(values, [-1]), tf.float32)
  weights = (tf.ones_like(values) if weights is None else
             tf.cast(tf.reshape(weights, [-1]), tf.float32))
  numerator = tf.reduce_sum(values * weights)
  denominator = tf.reduce_sum(weights)
  recorded = getattr(_accumulation, "recorded", None)
  totals = getattr(_accumulation, "totals", None)
  if recorded is not None:
    recorded.append(denominator)
  elif totals is not None:
    if _accumulation.used >= len(totals):
      raise ValueError("the loss function called replica_weighted_mean more often on a "
                       "micro-batch than on the effective batch")
    denominator = totals[_accumulation.used]
    _accumulation.used += 1
  else:
    context = tf.distribute.get_replica_context()
    if context is not None and context.num_replicas_in_sync > 1:
      denominator = context.all_reduce(tf.distribute.ReduceOp.SUM, denominator)
  return numerator / (denominator + epsilon)


def replica_batch_share() -> float:
  """The denominator that makes a per-batch value count once per global batch in a MetricFn."""
  context = tf.distribute.get_replica_context()
  return 1.0 / (context.num_replicas_in_sync if context is not None else 1)
