r"""How long ending a tf.data pass takes: TensorFlow's default options against the loops'.

Every evaluation, prediction and training run reads its input through one tf.data iterator and
deletes it at the end. With tf.data's autotuner on (TensorFlow's default), TensorFlow 2.21 often
blocks that deletion until the autotuner's thread wakes from its current sleep; the sleeps double
from 10 ms up to 60 s, so a pass of 11 s can end with a wait of 9 s.
`distribution.distribute_dataset` turns the autotuner off. This measures both in one run,
alternating, on the same pipeline (an AUTOTUNE map, a batch and an AUTOTUNE prefetch, as in our
input functions) while a consumer keeps the cores busy with matmuls for `--pass_seconds`, then
deletes the iterator and times that.

Quick run:
  python benchmarks/bench_iterator_teardown.py --pass_seconds=11 --repeats=1
"""
import os
import statistics
import time

from absl import app
from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import benchmark_paths  # pylint: disable=unused-import  (puts the project on sys.path)

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import distribution  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_list("pass_seconds", ["5", "11", "25"],
                  "How long each pass reads before its iterator is deleted, in seconds.")
flags.DEFINE_integer("repeats", 4, "Passes per setting and pass length.")
flags.DEFINE_integer("matrix_size", 768, "Side of the consumer's square matmuls.")


def input_pipeline() -> tf.data.Dataset:
  """Batches of 32 int32 rows through AUTOTUNE map and prefetch, like the scripts' input."""
  rows = tf.data.Dataset.range(10**9).map(lambda i: tf.fill([128], tf.cast(i % 30522, tf.int32)),
                                          num_parallel_calls=tf.data.AUTOTUNE)
  return rows.batch(32).prefetch(tf.data.AUTOTUNE)


def consumer(matrix_size: int):
  """A tf.function that keeps TensorFlow's intra-op threads busy for tens of milliseconds."""
  weights = tf.random.stateless_normal([matrix_size, matrix_size], seed=[1, 2]) / matrix_size**0.5

  @tf.function
  def step(batch):
    hidden = weights + tf.cast(tf.reduce_mean(batch), tf.float32) * 1e-9
    for _ in range(20):
      hidden = tf.tanh(tf.matmul(hidden, weights))
    return tf.reduce_sum(hidden)

  return step


def one_pass(iterator_of, step, seconds: float) -> tuple:
  """Reads for `seconds`, deletes the iterator; returns (seconds read, seconds deleting)."""
  iterator = iterator_of()
  start = time.time()
  while time.time() - start < seconds:
    step(next(iterator)).numpy()
  read = time.time() - start
  start = time.time()
  del iterator
  return read, time.time() - start


def main(argv):
  del argv
  step = consumer(FLAGS.matrix_size)
  strategy = tf.distribute.get_strategy()
  distribute = distribution.distribute_dataset
  settings = [
      ("tf.data defaults (autotuner on)", lambda: iter(input_pipeline())),
      ("distribution.distribute_dataset (autotuner off)",
       lambda: iter(distribute(strategy, input_pipeline()))),
  ]
  one_pass(settings[0][1], step, 1.0)  # traces the consumer
  load_before = os.getloadavg()[0]
  results = {}
  for seconds in map(float, FLAGS.pass_seconds):
    for _ in range(FLAGS.repeats):
      for name, iterator_of in settings:  # alternating, so load falls on both alike
        results.setdefault((name, seconds), []).append(one_pass(iterator_of, step, seconds))
        print("%s, %.0f s pass: deleting the iterator took %.2f s" % (
            name, seconds, results[(name, seconds)][-1][1]), flush=True)
  print("\n- %d CPU cores, TensorFlow %s; %d passes per row, the settings alternating. "
        "Load average %.1f before, %.1f after.\n" % (
            os.cpu_count() or 1, tf.__version__, FLAGS.repeats, load_before, os.getloadavg()[0]))
  print("| input options | pass (s) | deleting the iterator: median (s) | mean (s) | slowest (s) | "
        "passes that waited over 1 s | mean added to the pass |")
  print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
  for (name, seconds), passes in results.items():
    read = statistics.median(p[0] for p in passes)
    deletions = [p[1] for p in passes]
    print("| %s | %.1f | %.2f | %.2f | %.2f | %d of %d | %.0f%% |" % (
        name, read, statistics.median(deletions), statistics.mean(deletions), max(deletions),
        sum(d > 1 for d in deletions), len(deletions), 100 * statistics.mean(deletions) / read))


if __name__ == "__main__":
  app.run(main)
