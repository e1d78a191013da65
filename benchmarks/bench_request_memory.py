r"""Memory of the largest requests: a classifier's per request limits (BERT-Base), SQuAD's context.

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
import classifier_data  # pylint: disable=g-import-not-at-top
import export  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import squad  # pylint: disable=g-import-not-at-top
import squad_data  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
flags.DEFINE_string("limits", "1024:65536,256:16384,64:4096,16:2048",
                    "Comma-separated max_request_rows:max_request_tokens pairs, one export each.")
flags.DEFINE_integer("max_seq_length", 128, "The export's max_seq_length.")
flags.DEFINE_string("vocab_file", os.path.join(SHARED_DIR, "fixtures", "uncased_vocab",
                                               "vocab.txt"), "Uncased WordPiece vocab.")
flags.DEFINE_string("squad_context_bytes", "65536,1048576,4194304",
                    "Comma-separated SQuAD context sizes in bytes (capped at the byte limit); "
                    "empty: no SQuAD table.")
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


def classifier_rows(context) -> list:
  """(limits, request, answer, seconds, growth) for each --limits pair."""
  config = modeling.BertConfig.from_dict(bench_model.BERT_BASE)
  task = classifier.ClassifierTask(config, classifier_data.get_processor("sst-2"),
                                   tokenization.FullTokenizer(FLAGS.vocab_file, True), None,
                                   FLAGS.export_root, FLAGS.max_seq_length)
  model = task.build_model()
  long_text = export.warmup_text(FLAGS.max_seq_length * 2)  # Cut to max_seq_length positions.
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
  return rows


SQUAD_QUESTION = "Who lives in Paris?"
SQUAD_HEAD = "Alice lives in Paris, nobody knows why."


def squad_context(size: int) -> str:
  """A context of `size` bytes: SQUAD_HEAD, then numbered filler words."""
  return (SQUAD_HEAD + " " + " ".join("w%d" % i for i in range(size // 4)))[:size]


def measure_squad(path: str, sizes: list, results) -> None:
  """In a fresh process: loads the SQuAD export and asks SQUAD_QUESTION of a context of each
  size; puts (size, offsets give the answer, seconds, peak RSS growth in bytes) on `results`."""
  signature = tf.saved_model.load(path).signatures["serving_default"]
  for size in sizes:
    context = squad_context(size)
    signature(question=tf.constant([SQUAD_QUESTION]), context=tf.constant(["warm up"]))
    with open("/proc/self/clear_refs", "w", encoding="ascii") as writer:
      writer.write("5")  # Resets VmHWM to the current RSS.
    before = memory_kib("VmRSS")
    start = time.perf_counter()
    out = signature(question=tf.constant([SQUAD_QUESTION]), context=tf.constant([context]))
    seconds = time.perf_counter() - start
    answer = out["answer"].numpy()[0].decode("utf-8")
    begin, end = int(out["answer_start"].numpy()[0]), int(out["answer_end"].numpy()[0])
    offsets_give_it = context[begin:end] == answer if answer else (begin, end) == (-1, -1)
    results.put((len(context.encode("utf-8")), offsets_give_it, seconds,
                 (memory_kib("VmHWM") - before) * 1024))


def squad_rows(context) -> list:
  """(bytes, offsets give the answer, seconds, growth) for each --squad_context_bytes."""
  cap = export.MAX_REQUEST_TEXT_BYTES - len(SQUAD_QUESTION)
  sizes = [min(int(size), cap) for size in FLAGS.squad_context_bytes.split(",")]
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, True)
  config = modeling.BertConfig(vocab_size=len(tokenizer.vocab), hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=64)
  options = squad_data.SquadOptions(max_seq_length=32, doc_stride=16, max_query_length=10)
  export_dir = os.path.join(FLAGS.export_root, "squad")
  shutil.rmtree(export_dir, ignore_errors=True)
  task = squad.SquadTask(config, tokenizer, options, export_dir)
  # A window of max_seq_length positions per doc_stride (half of it) tokens of context, and a
  # token takes at least two bytes here: twice the bytes lets the largest context in.
  limits = export.RequestLimits(max_tokens=2 * max(sizes))
  path = task.export(task.build_model(), export_dir, limits=limits)
  results = context.Queue()
  worker = context.Process(target=measure_squad, args=(path, sizes, results))
  worker.start()
  rows = [results.get() for _ in sizes]
  worker.join()
  return rows


def main(argv):
  del argv  # Unused.
  load_before = os.getloadavg()
  context = multiprocessing.get_context("spawn")
  rows = classifier_rows(context) if FLAGS.limits else []
  squad_results = squad_rows(context) if FLAGS.squad_context_bytes else []
  print("\nCPU: %s; load average (1, 5, 15 min) before %s, after %s" % (
      benchmark_paths.cpu_description(), load_before, os.getloadavg()))
  if rows:
    print("BERT-Base classifier, max_seq_length %d, random weights, serving_default from raw "
          "text\n" % FLAGS.max_seq_length)
    print("| limits rows:tokens | request | answer | seconds | peak RSS growth |")
    print("| --- | --- | --- | ---: | ---: |")
    for pair, name, answer, seconds, growth in rows:
      print("| %s | %s | %s | %.1f | %.0f MiB |" % (pair, name, answer, seconds, growth / MIB))
  if squad_results:
    print("\nSQuAD export (2 layers, 32 wide, max_seq_length 32, doc_stride 16), one question\n")
    print("| context bytes | offsets give the answer | seconds | peak RSS growth |")
    print("| ---: | --- | ---: | ---: |")
    for size, offsets_give_it, seconds, growth in squad_results:
      print("| %d | %s | %.1f | %.0f MiB |" % (size, offsets_give_it, seconds, growth / MIB))


if __name__ == "__main__":
  app.run(main)
