# coding=utf-8
"""Tokenizer throughput: the original tokenization.py, our Python, batch and in-graph paths, HF.

Prints a Markdown table of lines/s and word pieces/s (medians over --repeats runs) and, for every
path, the share of lines whose ids equal those of the original's own `FullTokenizer`, read from
--original_dir (../shared/reference/google-research-bert, unchanged; see load_original).

  python benchmarks/bench_tokenization.py --corpus=../shared/corpora/wikitext2_valid.bert.txt
"""

import importlib.util
import os
import statistics
import time
import types

from absl import app
from absl import flags

from benchmark_paths import SHARED_DIR  # (first: it puts the project on sys.path)
import tokenization  # pylint: disable=g-import-not-at-top,wrong-import-position

FLAGS = flags.FLAGS
flags.DEFINE_string("corpus", os.path.join(SHARED_DIR, "corpora", "wikitext2_valid.bert.txt"),
                    "Text file, one text per line (blank lines are skipped).")
flags.DEFINE_string("vocab_file",
                    os.path.join(SHARED_DIR, "fixtures", "uncased_vocab", "vocab.txt"),
                    "WordPiece vocab.")
flags.DEFINE_bool("do_lower_case", True, "Lower-case and strip accents.")
flags.DEFINE_integer("max_lines", 0, "Use only the first N lines (0: all).")
flags.DEFINE_integer("repeats", 3, "Timed runs per path; the median is reported.")
flags.DEFINE_integer("batch_size", 1024, "Texts per call for the batch, in-graph and HF paths.")
flags.DEFINE_bool("huggingface", True, "Include Hugging Face tokenizers if it is installed.")
flags.DEFINE_string("original_dir", os.path.join(SHARED_DIR, "reference", "google-research-bert"),
                    "Folder holding the original repository's tokenization.py (the reference).")


def _batches(lines, batch_size):
  return [lines[i:i + batch_size] for i in range(0, len(lines), batch_size)]


def load_original(original_dir):
  """Imports the original's tokenization.py from original_dir as it is (no copy, no edit).

  It was written for TensorFlow 1, and its one TensorFlow call is `tf.gfile.GFile` in load_vocab;
  TensorFlow 2 has that class as `tf.io.gfile.GFile`. So after the import the module's `tf` is
  pointed at a stand-in module whose `gfile` is TensorFlow 2's.
  """
  path = os.path.join(original_dir, "tokenization.py")
  if not os.path.exists(path):
    raise app.UsageError("%s not found: this benchmark times the original's tokenizer; point "
                         "--original_dir at a google-research/bert checkout" % path)
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  spec = importlib.util.spec_from_file_location("original_bert_tokenization", path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  tf1_stand_in = types.ModuleType("tensorflow_gfile_for_tf1_code")
  tf1_stand_in.gfile = tf.io.gfile
  module.tf = tf1_stand_in
  return module


def original_path(original, vocab_file, do_lower_case):
  """The original's FullTokenizer: tokenize, then convert_tokens_to_ids, one line at a time."""
  tokenizer = original.FullTokenizer(vocab_file, do_lower_case)

  def run(lines):
    return [tokenizer.convert_tokens_to_ids(tokenizer.tokenize(line)) for line in lines]
  return run


def python_path(vocab_file, do_lower_case):
  """FullTokenizer.tokenize_to_ids with a fresh (cold) word cache every run."""
  vocab = tokenization.load_vocab(vocab_file)

  def run(lines):
    tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case)
    tokenizer.vocab = vocab
    return [tokenizer.tokenize_to_ids(line) for line in lines]
  return run


def batch_path(vocab_file, do_lower_case, batch_size):
  """in_graph_tokenization.BatchTokenizer.tokenize: padded numpy ids through TensorFlow."""
  import in_graph_tokenization  # pylint: disable=g-import-not-at-top
  tokenizer = in_graph_tokenization.BatchTokenizer(
      tokenization.FullTokenizer(vocab_file, do_lower_case))

  def run(lines):
    output = []
    for batch in _batches(lines, batch_size):
      ids, lengths = tokenizer.tokenize(batch)
      output.extend(row[:length].tolist() for row, length in zip(ids, lengths))
    return output
  return run


def in_graph_path(vocab_file, do_lower_case, batch_size):
  """BertInputEncoder.tokenize in a tf.function, on string tensors (as in a SavedModel)."""
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  import in_graph_tokenization  # pylint: disable=g-import-not-at-top
  encoder = in_graph_tokenization.BertInputEncoder(vocab_file, do_lower_case)
  tokenize = tf.function(encoder.tokenize, autograph=False,
                         input_signature=[tf.TensorSpec([None], tf.string)])

  def run(lines):
    output = []
    for batch in _batches(lines, batch_size):
      output.extend(tokenize(tf.constant(batch)).to_list())
    return output
  return run


def huggingface_path(vocab_file, do_lower_case, batch_size):
  """Hugging Face's Rust BertWordPieceTokenizer (encode_batch), or None if not installed."""
  try:
    from tokenizers import BertWordPieceTokenizer  # pylint: disable=g-import-not-at-top
  except ImportError:
    return None
  tokenizer = BertWordPieceTokenizer(vocab_file, lowercase=do_lower_case,
                                     strip_accents=do_lower_case, clean_text=True,
                                     handle_chinese_chars=True)

  def run(lines):
    output = []
    for batch in _batches(lines, batch_size):
      output.extend(encoding.ids for encoding in
                    tokenizer.encode_batch(batch, add_special_tokens=False))
    return output
  return run


def measure(run, lines, repeats):
  """(median seconds, ids of the last run)."""
  run(lines[:64])  # warm-up: imports, tracing, table building
  times = []
  ids = None
  for _ in range(repeats):
    start = time.perf_counter()
    ids = run(lines)
    times.append(time.perf_counter() - start)
  return statistics.median(times), ids


def main(_):
  with open(FLAGS.corpus, encoding="utf-8") as f:
    lines = [line for line in f.read().splitlines() if line.strip()]
  if FLAGS.max_lines:
    lines = lines[:FLAGS.max_lines]
  original = load_original(FLAGS.original_dir)
  paths = [
      ("original tokenization.py (google-research/bert)",
       original_path(original, FLAGS.vocab_file, FLAGS.do_lower_case)),
      ("FullTokenizer.tokenize (cold cache)", python_path(FLAGS.vocab_file, FLAGS.do_lower_case)),
      ("BatchTokenizer.tokenize (batch %d)" % FLAGS.batch_size,
       batch_path(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.batch_size)),
      ("BertInputEncoder.tokenize (batch %d)" % FLAGS.batch_size,
       in_graph_path(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.batch_size)),
  ]
  if FLAGS.huggingface:
    hf = huggingface_path(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.batch_size)
    if hf is not None:
      paths.append(("HF tokenizers BertWordPiece (batch %d)" % FLAGS.batch_size, hf))
  reference_seconds, reference_ids = None, None
  print("- %d lines, %.1f MB, vocab %s, do_lower_case=%s, median of %d runs\n" % (
      len(lines), sum(len(line.encode("utf-8")) + 1 for line in lines) / 1e6,
      os.path.basename(os.path.dirname(FLAGS.vocab_file)), FLAGS.do_lower_case, FLAGS.repeats))
  print("| path | lines/s | pieces/s | x original | lines with the original's ids |")
  print("| --- | ---: | ---: | ---: | ---: |")
  for name, run in paths:
    seconds, ids = measure(run, lines, FLAGS.repeats)
    if reference_ids is None:
      reference_seconds, reference_ids = seconds, ids
    pieces = sum(len(row) for row in ids)
    same = sum(list(a) == list(b) for a, b in zip(ids, reference_ids))
    print("| %s | %.0f | %.0f | %.1f | %.2f%% |" % (
        name, len(lines) / seconds, pieces / seconds, reference_seconds / seconds,
        100.0 * same / len(lines)))


if __name__ == "__main__":
  app.run(main)
