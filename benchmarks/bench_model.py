r"""Speed of BERT inference and of one pretraining step, against this machine's matmul peak.

Measures, in one run:
  - TensorFlow's (and PyTorch's, if installed) fp32 matmul peak on this machine, in GFLOP/s;
  - `modeling.BertModel` inference and a `heads.BertPretrainingModel` training step (forward,
    pretraining.py's masked-LM + next-sentence loss, backward, the original's AdamW from
    optimization.py) in
    sequences/s, achieved GFLOP/s and % of the TensorFlow peak, through the default path (plain
    tf.function; `--xla=auto` also tries XLA and keeps it where it is faster with the same outputs);
  - if `torch` and `transformers` import: Hugging Face's PyTorch `BertModel` / `BertForPreTraining`
    (torch.optim.AdamW, gradient clipping; `--peer_threads` threads) on the same shapes, and our
    speed ratio over it.
Our calls and the peer's alternate (one of ours, one of theirs, ...), so load from other processes
falls on both alike; the table gives medians and the load average before and after. Every row of a
batch is full unless `--padded_rows`. Whether TensorFlow's oneDNN kernels are on is printed too:
on, as in the scripts (`tf_defaults`), unless `TF_ENABLE_ONEDNN_OPTS=0` is set.

Quick run:
  python benchmarks/bench_model.py --shapes=128x1 --iterations=2 --modes=inference
Full run (the issue's shapes):
  python benchmarks/bench_model.py
"""
import heads
import os
import statistics
import time
from typing import Callable, Optional

from absl import app
from absl import flags
from absl import logging
import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import benchmark_paths  # Puts the project on sys.path.  pylint: disable=g-bad-import-order

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import modeling  # pylint: disable=g-import-not-at-top
import pretraining  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_list("shapes", ["128x1", "128x8", "128x32", "512x8"],
                  "Shapes to measure, as SEQ_LENGTHxBATCH_SIZE.")
flags.DEFINE_list("modes", ["inference", "training"], "What to measure: inference, training.")
flags.DEFINE_integer("iterations", 10, "Timed calls per measurement (the median is reported).")
flags.DEFINE_integer("warmup", 2, "Untimed calls after compilation, per measurement.")
flags.DEFINE_enum("xla", "off", ["auto", "on", "off"],
                  "off: plain tf.function (the default path of every script); auto: time "
                  "tf.function with and without XLA and keep the faster (XLA only if its outputs "
                  "match); on: force XLA.")
flags.DEFINE_integer("peer_threads", 2, "torch.set_num_threads for the PyTorch peer.")
flags.DEFINE_bool("padded_rows", False, "Pad the second half of each batch's rows by a quarter "
                  "(the mask changes, the work does not); default: every row full.")
flags.DEFINE_bool("peer", True, "Also run Hugging Face's PyTorch BERT if torch and transformers "
                  "import.")
flags.DEFINE_string("bert_config_file", None, "Model config; default BERT-Base uncased.")
flags.DEFINE_integer("max_predictions_per_seq", 20,
                     "Masked positions per sequence at length 128 (scaled with the length, as "
                     "the original's 20 at 128 and 80 at 512).")
flags.DEFINE_integer("peak_size", 2048, "Square matrix size of the matmul peak measurement.")
flags.DEFINE_enum("dtype_policy", "float32", ["float32", "mixed_bfloat16"],
                  "Keras dtype policy of our model (the PyTorch peer always runs float32; % of "
                  "peak stays relative to the fp32 matmul peak).")

BERT_BASE = dict(vocab_size=30522, hidden_size=768, num_hidden_layers=12, num_attention_heads=12,
                 intermediate_size=3072, hidden_act="gelu", max_position_embeddings=512,
                 type_vocab_size=2)


def tf_matmul_peak(size: int) -> float:
  """Best fp32 GFLOP/s of TensorFlow's matmul on square matrices (5 timed rounds of 4 products)."""
  a = tf.random.normal([size, size])
  b = tf.random.normal([size, size])

  @tf.function
  def products(a, b):
    return tf.add_n([tf.matmul(a + float(i), b) for i in range(4)])

  products(a, b).numpy()
  best = min(_timed(lambda: products(a, b).numpy()) for _ in range(5))
  return 4 * 2 * size ** 3 / best / 1e9


def torch_matmul_peak(torch, size: int) -> float:
  """Best fp32 GFLOP/s of PyTorch's matmul on square matrices."""
  a = torch.randn(size, size)
  b = torch.randn(size, size)
  torch.matmul(a, b)
  best = min(_timed(lambda: torch.matmul(a, b)) for _ in range(5))
  return 2 * size ** 3 / best / 1e9


def interleaved_median_seconds(fns: list, iterations: int, warmup: int) -> list:
  """Median wall time of each of `fns`, called in turn (a, b, a, b, ...) after `warmup` rounds."""
  for _ in range(warmup):
    for fn in fns:
      fn()
  times = [[] for _ in fns]
  for _ in range(iterations):
    for fn, fn_times in zip(fns, times):
      fn_times.append(_timed(fn))
  return [statistics.median(fn_times) for fn_times in times]


def onednn_enabled() -> bool:
  """Whether this TensorFlow process rewrites ops to oneDNN kernels."""
  from tensorflow.python.util import _pywrap_util_port  # pylint: disable=g-import-not-at-top
  return _pywrap_util_port.IsMklEnabled()


def _timed(fn: Callable[[], object]) -> float:
  start = time.perf_counter()
  fn()
  return time.perf_counter() - start


def encoder_flops(config: modeling.BertConfig, seq_length: int) -> float:
  """Forward FLOPs of the encoder and pooler for one sequence (multiply-add = 2)."""
  hidden, inner = config.hidden_size, config.intermediate_size
  per_layer = (2 * seq_length * (4 * hidden * hidden + 2 * hidden * inner) +
               2 * 2 * seq_length * seq_length * hidden)
  return config.num_hidden_layers * per_layer + 2 * hidden * hidden


def training_flops(config: modeling.BertConfig, seq_length: int, predictions: int) -> float:
  """FLOPs of one pretraining step for one sequence: forward + backward (2x forward)."""
  heads = 2 * predictions * (config.hidden_size ** 2 + config.hidden_size * config.vocab_size)
  return 3 * (encoder_flops(config, seq_length) + heads)


def random_batch(config: modeling.BertConfig, seq_length: int, batch_size: int,
                 predictions: int, padded_rows: bool = False, seed: int = 0) -> dict:
  """A pretraining batch as the TFRecord features (NumPy); with `padded_rows` the second half of
  the rows ends in a quarter of padding."""
  rng = np.random.default_rng(seed)
  mask = np.ones((batch_size, seq_length), np.int32)
  if padded_rows:
    mask[batch_size // 2:, seq_length * 3 // 4:] = 0
  return {
      "input_ids": rng.integers(1000, config.vocab_size, (batch_size, seq_length)).astype(np.int32),
      "input_mask": mask,
      "segment_ids": (np.arange(seq_length)[None, :] >= seq_length // 2).astype(np.int32).repeat(
          batch_size, 0),
      "masked_lm_positions": np.sort(np.stack([
          rng.choice(seq_length // 2, predictions, replace=False) for _ in range(batch_size)]),
                                     axis=1).astype(np.int32),
      "masked_lm_ids": rng.integers(1000, config.vocab_size, (batch_size, predictions)).astype(
          np.int32),
      "masked_lm_weights": np.ones((batch_size, predictions), np.float32),
      "next_sentence_labels": rng.integers(0, 2, (batch_size, 1)).astype(np.int32),
  }


def make_optimizer():
  """optimization.py's AdamW when present (name, optimizer), else Keras Adam."""
  try:
    import optimization  # pylint: disable=g-import-not-at-top
  except ImportError:
    return "keras Adam (optimization.py missing)", keras.optimizers.Adam(1e-4, epsilon=1e-6)
  return "AdamWeightDecay (optimization.py)", optimization.create_optimizer(
      1e-4, 10000, 100, compute_dtype=FLAGS.dtype_policy)


class OursRunner:
  """Builds our models once per config and compiles inference / training steps."""

  def __init__(self, config: modeling.BertConfig):
    self.config = config
    self.encoder = modeling.BertModel(config)
    self.encoder.build()
    self.pretraining = heads.BertPretrainingModel(config)
    self.pretraining.build()
    self.optimizer_name, self.optimizer = make_optimizer()
    self.optimizer.build(self.pretraining.trainable_variables)

  def inference_fn(self, features: dict, jit_compile: bool) -> Callable[[], np.ndarray]:
    model = self.encoder

    @tf.function(jit_compile=jit_compile)
    def forward(input_ids, input_mask, segment_ids):
      outputs = model(input_ids, input_mask, segment_ids, training=False)
      return [tf.cast(outputs[k], tf.float32) for k in ("sequence_output", "pooled_output")]

    args = [tf.constant(features[k]) for k in ("input_ids", "input_mask", "segment_ids")]
    return lambda: [t.numpy() for t in forward(*args)]

  def training_fn(self, features: dict, jit_compile: bool) -> Callable[[], np.ndarray]:
    model, optimizer = self.pretraining, self.optimizer

    @tf.function(jit_compile=jit_compile)
    def step(features):
      with tf.GradientTape() as tape:
        loss, _ = pretraining.loss_fn(model, features, True)
      variables = model.trainable_variables
      optimizer.apply(tape.gradient(loss, variables), variables)
      return loss

    tensors = {k: tf.constant(v) for k, v in features.items()}
    return lambda: step(tensors).numpy()


def choose_mode(make_fn: Callable[[bool], Callable], check_outputs: bool) -> tuple:
  """Returns (fn, mode name): the faster of tf.function with/without XLA under --xla=auto.

  XLA is only kept when it compiles and, for `check_outputs`, matches the plain outputs (to 1e-4
  in float32, 5e-2 under a mixed policy).
  """
  if FLAGS.xla != "auto":
    jit = FLAGS.xla == "on"
    return make_fn(jit), "tf.function+XLA" if jit else "tf.function"
  plain = make_fn(False)
  try:
    xla = make_fn(True)
    xla_outputs = xla()
  except (tf.errors.OpError, ValueError) as e:  # XLA cannot compile something: keep plain.
    logging.warning("XLA failed (%s); using plain tf.function", str(e).splitlines()[0])
    return plain, "tf.function"
  if check_outputs:
    for got, want in zip(xla_outputs, plain()):
      if not np.allclose(got, want, atol=1e-4 if FLAGS.dtype_policy == "float32" else 5e-2):
        logging.warning("XLA outputs differ from tf.function's; not using XLA")
        return plain, "tf.function"
  trial = max(1, min(3, FLAGS.iterations))
  xla_seconds, plain_seconds = interleaved_median_seconds([xla, plain], trial, 1)
  if xla_seconds < plain_seconds:
    return xla, "tf.function+XLA"
  return plain, "tf.function"


def load_peer():
  """Returns (torch, transformers) or None when they do not import or --nopeer."""
  if not FLAGS.peer:
    return None
  try:
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
  except ImportError as e:
    logging.info("No Hugging Face PyTorch peer: %s", e)
    return None
  torch.set_num_threads(FLAGS.peer_threads)
  transformers.logging.set_verbosity_error()
  return torch, transformers


class PeerRunner:
  """Hugging Face PyTorch BERT with the same config and batches."""

  def __init__(self, peer, config: modeling.BertConfig):
    self.torch, transformers = peer
    hf_config = transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
        hidden_dropout_prob=config.hidden_dropout_prob,
        attention_probs_dropout_prob=config.attention_probs_dropout_prob,
        max_position_embeddings=config.max_position_embeddings,
        type_vocab_size=config.type_vocab_size, initializer_range=config.initializer_range)
    self.encoder = transformers.BertModel(hf_config).eval()
    self.pretraining = transformers.BertForPreTraining(hf_config).train()
    self.optimizer = self.torch.optim.AdamW(self.pretraining.parameters(), lr=1e-4,
                                            weight_decay=0.01, eps=1e-6)

  def _inputs(self, features):
    torch = self.torch
    return dict(input_ids=torch.from_numpy(features["input_ids"]).long(),
                attention_mask=torch.from_numpy(features["input_mask"]).long(),
                token_type_ids=torch.from_numpy(features["segment_ids"]).long())

  def inference_fn(self, features: dict) -> Callable[[], None]:
    inputs = self._inputs(features)

    def forward():
      with self.torch.inference_mode():
        self.encoder(**inputs)

    return forward

  def training_fn(self, features: dict) -> Callable[[], None]:
    torch = self.torch
    inputs = self._inputs(features)
    labels = np.full(features["input_ids"].shape, -100, np.int64)
    np.put_along_axis(labels, features["masked_lm_positions"].astype(np.int64),
                      features["masked_lm_ids"].astype(np.int64), axis=1)
    inputs["labels"] = torch.from_numpy(labels)
    inputs["next_sentence_label"] = torch.from_numpy(
        features["next_sentence_labels"].reshape(-1).astype(np.int64))

    def step():
      self.optimizer.zero_grad(set_to_none=True)
      loss = self.pretraining(**inputs).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(self.pretraining.parameters(), 1.0)
      self.optimizer.step()

    return step


def parse_shape(text: str) -> tuple:
  try:
    seq_length, batch_size = (int(part) for part in text.lower().split("x"))
  except ValueError:
    raise app.UsageError("--shapes entry %r is not SEQxBATCH (e.g. 128x8)" % text) from None
  return seq_length, batch_size


def main(argv):
  del argv
  shapes = [parse_shape(text) for text in FLAGS.shapes]
  unknown = set(FLAGS.modes) - {"inference", "training"}
  if unknown:
    raise app.UsageError("--modes: unknown %s (inference, training)" % sorted(unknown))
  config = (modeling.BertConfig.from_json_file(FLAGS.bert_config_file) if FLAGS.bert_config_file
            else modeling.BertConfig(**BERT_BASE))
  keras.mixed_precision.set_dtype_policy(FLAGS.dtype_policy)
  peer = load_peer()
  load_before = os.getloadavg()
  tf_peak = tf_matmul_peak(FLAGS.peak_size)
  torch_peak = torch_matmul_peak(peer[0], FLAGS.peak_size) if peer else None
  logging.info("matmul peak: TensorFlow %.0f GFLOP/s%s", tf_peak,
               ", PyTorch %.0f GFLOP/s" % torch_peak if torch_peak else "")
  ours = OursRunner(config)
  theirs = PeerRunner(peer, config) if peer else None
  rows = []
  total = len(shapes) * len(FLAGS.modes)
  for mode in FLAGS.modes:
    for seq_length, batch_size in shapes:
      predictions = max(1, round(FLAGS.max_predictions_per_seq * seq_length / 128))
      features = random_batch(config, seq_length, batch_size, predictions, FLAGS.padded_rows)
      start = time.perf_counter()
      if mode == "inference":
        fn, how = choose_mode(lambda jit: ours.inference_fn(features, jit), check_outputs=True)
        flops = encoder_flops(config, seq_length) * batch_size
        peer_fn = theirs.inference_fn(features) if theirs else None
      else:
        fn, how = choose_mode(lambda jit: ours.training_fn(features, jit), check_outputs=False)
        flops = training_flops(config, seq_length, predictions) * batch_size
        peer_fn = theirs.training_fn(features) if theirs else None
      seconds, peer_seconds = (interleaved_median_seconds([fn, peer_fn] if peer_fn else [fn],
                                                          FLAGS.iterations, FLAGS.warmup) +
                               [None])[:2]
      rows.append((mode, seq_length, batch_size, how, batch_size / seconds, flops / seconds / 1e9,
                   batch_size / peer_seconds if peer_seconds else None))
      logging.info("[%d/%d] %s seq %d batch %d: %.2f seq/s (%s)%s, %.0f s", len(rows), total, mode,
                   seq_length, batch_size, batch_size / seconds, how,
                   "; PyTorch %.2f seq/s" % (batch_size / peer_seconds) if peer_seconds else "",
                   time.perf_counter() - start)
  # The best of a measurement before and after the models: other load on the machine only lowers it.
  tf_peak = max(tf_peak, tf_matmul_peak(FLAGS.peak_size))
  print_table(rows, tf_peak, torch_peak, ours.optimizer_name, config,
              (load_before[0], os.getloadavg()[0]))


def print_table(rows: list, tf_peak: float, torch_peak: Optional[float], optimizer_name: str,
                config: modeling.BertConfig, load_averages: tuple) -> None:
  print("\n- BERT (L=%d, H=%d, A=%d), %s, %d CPU cores (TensorFlow's default threads, oneDNN %s; "
        "PyTorch %d threads); %s rows; medians of %d interleaved calls. Training step: forward, "
        "MLM+NSP loss, backward, %s. TensorFlow fp32 matmul peak %.0f GFLOP/s%s. Load average "
        "%.1f before, %.1f after.\n" %
        (config.num_hidden_layers, config.hidden_size, config.num_attention_heads,
         FLAGS.dtype_policy, os.cpu_count() or 1, "on" if onednn_enabled() else "off",
         FLAGS.peer_threads, "padded" if FLAGS.padded_rows else "full", FLAGS.iterations,
         optimizer_name, tf_peak,
         "; PyTorch matmul peak %.0f GFLOP/s" % torch_peak if torch_peak else "",
         *load_averages))
  print("- CPU: %s.\n" % benchmark_paths.cpu_description())
  print("| task | seq | batch | mode | seq/s | GFLOP/s | % of peak | HF PyTorch seq/s | ratio |")
  print("| --- | ---: | ---: | --- | ---: | ---: | ---: | ---: | ---: |")
  for mode, seq_length, batch_size, how, rate, gflops, peer_rate in rows:
    print("| %s | %d | %d | %s | %.2f | %.0f | %.0f%% | %s | %s |" % (
        mode, seq_length, batch_size, how, rate, gflops, 100 * gflops / tf_peak,
        "%.2f" % peer_rate if peer_rate else "-", "%.2fx" % (rate / peer_rate) if peer_rate
        else "-"))


if __name__ == "__main__":
  app.run(main)
