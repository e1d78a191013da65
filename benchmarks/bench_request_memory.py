r"""Memory of the largest request a classifier export serves, per request limits (BERT-Base).

For each `rows:tokens` pair of --limits, exports a BERT-Base sentence classifier (random weights,
the uncased vocab of ../shared/fixtures, max_seq_length --max_seq_length) with
`export.RequestLimits(rows, tokens)`, as run_classifier does with `--max_request_rows` and
`--max_request_tokens`. A fresh process loads the SavedModel (`tf.saved_model.load`), answers one
short request, and then sends through `serving_default` (raw text; tokenization in the graph):
  - at the limit: min(rows, tokens // max_seq_length) texts long enough to fill max_seq_length
    positions, the most expensive request the limits let through (attention grows with length);
  - rows over: rows + 1 one-word texts;
  - tokens over: tokens // max_seq_length + 1 long texts (when that is within rows);
  - for the default limits, also the outside probe's request: 1,000,000 one-character texts.
For each it reports the answer (ok, or the input the InvalidArgument names), the seconds and the
growth of the process's peak RSS over its RSS before the request (Linux: VmHWM, reset through
/proc/self/clear_refs before each request). The load average before and after is printed too.

Run:
  python benchmarks/bench_request_memory.py
  python benchmarks/bench_request_memory.py --limits=64:4096 --max_seq_length=128   # quick
"""
import multiprocessing
import os
import re
import shutil
import time

from absl import app
from absl import flags

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import benchmark_paths  # Also puts the project on sys.path.
from benchmark_paths import SHARED_DIR

import tensorflow as tf  # pylint: disable=g-import-not-at-top

import bench_model  # pylint: disable=g-import-not-at-top  (this directory: BERT_BASE)
import classifier  # pylint: disable=g-import-not-at-top
import export  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string("limits", "1024:65536,256:16384,64:4096,16:2048",
                    "Comma-separated max_request_rows:max_request_tokens pairs, one export each.")
flags.DEFINE_integer("max_seq_length", 128, "The export's max_seq_length.")
flags.DEFINE_string("vocab_file", os.path.join(SHARED_DIR, "fixtures", "uncased_vocab",
                                               "vocab.txt"), "Uncased WordPiece vocab.")
flags.DEFINE_string("export_root", "/tmp/bench_request_memory", "Where the exports are written.")

PROBE_ROWS = 1_000_000
MIB = 2**20


def memory_kib(field: str) -> int:
  """A field of /proc/self/status (VmRSS, VmHWM) in KiB."""
  with open("/proc/self/status", encoding="ascii") as reader:
    return int(re.search(r"^%s:\s+(\d+) kB" % field, reader.read(), re.M).group(1))


def measure(path: str, requests: list, results) -> None:
  """In a fresh process: loads the export and sends each (name, texts) request; puts (name,
  answer, seconds, peak RSS growth in bytes) on `results` for each."""
  signature = tf.saved_model.load(path).signatures["serving_default"]
  signature(text_a=tf.constant(["warm up"]))
  for name, texts in requests:
    with open("/proc/self/clear_refs", "w", encoding="ascii") as writer:
      writer.write("5")  # Resets VmHWM to the current RSS.
    before = memory_kib("VmRSS")
    start = time.perf_counter()
    try:
      signature(text_a=tf.constant(texts))
      answer = "ok"
    except tf.errors.InvalidArgumentError as error:
      # The message's first clause names the input: "text_a has 1025 rows" or "text_a".
      answer = "InvalidArgument: " + error.message.split("assertion failed: [", 1)[-1].split(
          ":")[0]
    seconds = time.perf_counter() - start
    results.put((name, answer, seconds, (memory_kib("VmHWM") - before) * 1024))


def requests_for(limits: export.RequestLimits, long_text: str, default: bool) -> list:
  """(name, texts) of the requests sent to an export with `limits` (see the module docstring)."""
  length = FLAGS.max_seq_length
  at_limit = min(limits.max_rows, limits.max_tokens // length)
  requests = [("at the limit: %d rows x %d" % (at_limit, length), [long_text] * at_limit),
              ("rows over: %d rows x 3" % (limits.max_rows + 1), ["word"] * (limits.max_rows + 1))]
  over = limits.max_tokens // length + 1
  if over <= limits.max_rows:
    requests.append(("tokens over: %d rows x %d" % (over, length), [long_text] * over))
  if default:
    requests.append(("probe: %d rows of 1 character" % PROBE_ROWS, ["a"] * PROBE_ROWS))
  return requests


def main(argv):
  del argv  # Unused.
  load_before = os.getloadavg()
  config = modeling.BertConfig.from_dict(bench_model.BERT_BASE)
  task = classifier.ClassifierTask(config, classifier.get_processor("sst-2"),
                                   tokenization.FullTokenizer(FLAGS.vocab_file, True), None,
                                   FLAGS.export_root, FLAGS.max_seq_length)
  model = task.build_model()
  long_text = export.warmup_text(FLAGS.max_seq_length * 2)  # Cut to max_seq_length positions.
  context = multiprocessing.get_context("spawn")
  rows = []
  for pair in FLAGS.limits.split(","):
    limits = export.RequestLimits(*map(int, pair.split(":")))
    export_dir = os.path.join(FLAGS.export_root, pair.replace(":", "_"))
    shutil.rmtree(export_dir, ignore_errors=True)
    path = task.export(model, export_dir, limits=limits)
    requests = requests_for(limits, long_text, limits == export.RequestLimits())
    results = context.Queue()
    worker = context.Process(target=measure, args=(path, requests, results))
    worker.start()
    for _ in requests:
      name, answer, seconds, growth = results.get()
      rows.append((pair, name, answer, seconds, growth))
      print("%s | %s | %s | %.1f s | %.0f MiB" % (pair, name, answer, seconds, growth / MIB),
            flush=True)
    worker.join()
  print("\nCPU: %s; load average (1, 5, 15 min) before %s, after %s" % (
      benchmark_paths.cpu_description(), load_before, os.getloadavg()))
  print("BERT-Base classifier, max_seq_length %d, random weights, serving_default from raw text\n"
        % FLAGS.max_seq_length)
  print("| limits rows:tokens | request | answer | seconds | peak RSS growth |")
  print("| --- | --- | --- | ---: | ---: |")
  for pair, name, answer, seconds, growth in rows:
    print("| %s | %s | %s | %.1f | %.0f MiB |" % (pair, name, answer, seconds, growth / MIB))


if __name__ == "__main__":
  app.run(main)
