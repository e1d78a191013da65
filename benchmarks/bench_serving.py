r"""Latency and throughput of a classifier export from raw text, as TF Serving runs it.

Builds a sentence classifier (random weights; the shape set by --model) and exports it as
run_classifier --export_dir writes it: padded to max_seq_length (every export before dynamic
padding), with dynamic padding (each request padded to its longest row, rounded up to a length
bucket: 4, 8, ..., 32, 40, ..., 64, 96, ...), and with --bfloat16 also dynamic padding with
--export_precision=bfloat16 (matmuls in bfloat16: fast where the CPU has AVX512_BF16 or AMX,
emulated and slow where it has AVX2 only; `lscpu` tells).
Both are loaded with `tf.saved_model.load` and their `serving_default` signature (tokenization in
the graph included) is timed on real sentences from SST-2's training file:
  - latency of a one-sentence request: p50 and p99 over --num_requests sentences;
  - throughput of batches of --batch_size sentences, over --num_batches batches.
If torch and transformers import, Hugging Face's PyTorch `BertForSequenceClassification` of the
same shape runs in the same loop (its fast tokenizer on the same vocab, padding to the batch's
longest row), so all three see the same machine load. Every system gets --threads threads.
The systems take turns request by request.
The table also gives the largest probability difference of the padded and the bfloat16 export from
the dynamic float32 one over every one-sentence request.

With --pack_comparison it times instead the dynamic-padding export as exported (each request
packed into shared rows, `ServingModule.pack_requests`) against the same export without packing,
each system in a process of its own (this script with --system), on the same requests: medians
over --num_requests one-sentence requests and --num_batches batches of --batch_size, and the
largest probability difference between the two.

Quick run:
  python benchmarks/bench_serving.py --num_requests=20 --num_batches=2
"""
import json
import os
import subprocess
import sys
import time

from absl import app
from absl import flags
import numpy as np

os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
import benchmark_paths  # Also puts the project on sys.path.
from benchmark_paths import SHARED_DIR

import keras  # pylint: disable=g-import-not-at-top
import tensorflow as tf  # pylint: disable=g-import-not-at-top

import classifier  # pylint: disable=g-import-not-at-top
import classifier_data  # pylint: disable=g-import-not-at-top
import export  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top
import bench_model  # pylint: disable=g-import-not-at-top  (this directory: load_peer, BERT_BASE)

FLAGS = flags.FLAGS
flags.DEFINE_string("sst2_file", os.path.join(SHARED_DIR, "glue", "SST-2", "train.tsv"),
                    "SST-2 training file (header `sentence\\tlabel`); the sentences are requests.")
flags.DEFINE_string("vocab_file", os.path.join(SHARED_DIR, "fixtures", "uncased_vocab",
                                               "vocab.txt"), "Uncased WordPiece vocab.")
flags.DEFINE_enum("model", "minilm", ["minilm", "base", "tiny"],
                  "Model shape: minilm = all-MiniLM-L6-v2's (L=6, H=384, A=12), base = BERT-Base, "
                  "tiny = L=2, H=64, A=4 (checks that the script runs; its times mean little).")
flags.DEFINE_integer("max_seq_length", 128, "The export's max_seq_length.")
flags.DEFINE_integer("num_requests", 200, "One-sentence requests per system (latency).")
flags.DEFINE_integer("batch_size", 32, "Sentences per request for the throughput measurement.")
flags.DEFINE_integer("num_batches", 10, "Batched requests per system (throughput).")
flags.DEFINE_integer("threads", 0, "CPU threads for TensorFlow (intra- and inter-op) and PyTorch; "
                     "0: all cores. On a machine shared with other jobs, 1 measures the code "
                     "rather than the scheduler.")
flags.DEFINE_bool("bfloat16", True, "Also time the dynamic-padding export in bfloat16.")
flags.DEFINE_string("export_root", "/tmp/bench_serving", "Where the exports are written.")
flags.DEFINE_bool("pack_comparison", False, "Time the dynamic-padding export packed against "
                  "unpacked, each in its own process, instead of the systems above.")
flags.DEFINE_enum("system", None, ["packed", "unpacked"], "One system of --pack_comparison: "
                  "exports, times and prints its seconds and probabilities as JSON.")

MINILM = dict(vocab_size=30522, hidden_size=384, num_hidden_layers=6, num_attention_heads=12,
              intermediate_size=1536, hidden_act="gelu", max_position_embeddings=512,
              type_vocab_size=2)
TINY = dict(MINILM, hidden_size=64, num_hidden_layers=2, num_attention_heads=4,
            intermediate_size=128)
SHAPES = {"minilm": MINILM, "base": bench_model.BERT_BASE, "tiny": TINY}
SHAPE_NAMES = {"minilm": "all-MiniLM-L6-v2", "base": "BERT-Base", "tiny": "tiny-BERT"}


def read_sentences(path: str) -> list[str]:
  """The sentences of an SST-2 file, in a fixed shuffled order."""
  with open(path, encoding="utf-8") as reader:
    next(reader)
    sentences = [line.split("\t")[0] for line in reader if line.strip()]
  order = np.random.default_rng(0).permutation(len(sentences))
  return [sentences[i] for i in order]


def export_classifier(task: classifier.ClassifierTask, model, dynamic_padding: bool,
                      precision: str = "float32", pack_requests: bool = True) -> str:
  """Exports the model as run_classifier does (SST-2's labels), packing requests unless
  `pack_requests` is false; returns the SavedModel directory."""
  export_dir = os.path.join(FLAGS.export_root, "%s-%s%s" % (
      "dynamic" if dynamic_padding else "padded", precision, "" if pack_requests else "-unpacked"))
  if tf.io.gfile.exists(export_dir):
    tf.io.gfile.rmtree(export_dir)
  model = export.model_in_precision(model, task.build_model, precision)
  module = task.serving_module(model, dynamic_padding)
  module.pack_requests = pack_requests
  return export.write_saved_model(export_dir, module)


class ExportRunner:
  """The serving_default signature of a SavedModel, called from Python."""

  def __init__(self, path: str):
    self.signature = tf.saved_model.load(path).signatures["serving_default"]

  def __call__(self, sentences: list[str]) -> np.ndarray:
    return self.signature(text_a=tf.constant(sentences))["probabilities"].numpy()


class HuggingFaceRunner:
  """BertForSequenceClassification with its fast tokenizer, padding to the longest row."""

  def __init__(self, peer, config: modeling.BertConfig):
    self.torch, transformers = peer
    self.tokenizer = transformers.BertTokenizerFast(FLAGS.vocab_file, do_lower_case=True)
    self.model = transformers.BertForSequenceClassification(transformers.BertConfig(
        vocab_size=config.vocab_size, hidden_size=config.hidden_size,
        num_hidden_layers=config.num_hidden_layers, num_attention_heads=config.num_attention_heads,
        intermediate_size=config.intermediate_size, hidden_act=config.hidden_act,
        max_position_embeddings=config.max_position_embeddings, num_labels=2)).eval()

  def __call__(self, sentences: list[str]) -> np.ndarray:
    inputs = self.tokenizer(sentences, padding=True, truncation=True,
                            max_length=FLAGS.max_seq_length, return_tensors="pt")
    with self.torch.inference_mode():
      return self.torch.softmax(self.model(**inputs).logits, -1).numpy()


def timed_calls(runners: dict, requests: list[list[str]]) -> tuple[dict, dict]:
  """Seconds of every request per runner (runners take turns), and each runner's outputs."""
  seconds = {name: [] for name in runners}
  outputs = {name: [] for name in runners}
  for request in requests:
    for name, runner in runners.items():
      start = time.perf_counter()
      outputs[name].append(runner(request))
      seconds[name].append(time.perf_counter() - start)
  return seconds, outputs


def requests_of(sentences: list[str]) -> tuple[list[list[str]], list[list[str]]]:
  """The one-sentence requests and the batches, from disjoint sentences."""
  singles = [[s] for s in sentences[:FLAGS.num_requests]]
  batches = [sentences[FLAGS.num_requests + i * FLAGS.batch_size:
                       FLAGS.num_requests + (i + 1) * FLAGS.batch_size]
             for i in range(FLAGS.num_batches)]
  return singles, batches


def run_system(task: classifier.ClassifierTask, sentences: list[str]) -> None:
  """--system: exports the dynamic-padding classifier packed or not (random weights of a fixed
  seed, the same in both processes), warms it up on every length bucket and a batch, and prints
  one JSON line: seconds per one-sentence request and per batch, and the batches' probabilities."""
  keras.utils.set_random_seed(0)
  runner = ExportRunner(export_classifier(task, task.build_model(), True,
                                          pack_requests=FLAGS.system == "packed"))
  singles, batches = requests_of(sentences)
  lengths = sorted(sentences[:2000], key=len)
  timed_calls({"warmup": runner}, [[lengths[-1] * 3], [lengths[0]],
                                   [lengths[len(lengths) // 2]], batches[0]])
  single_seconds, _ = timed_calls({FLAGS.system: runner}, singles)
  batch_seconds, outputs = timed_calls({FLAGS.system: runner}, batches)
  print(json.dumps({"single": single_seconds[FLAGS.system], "batch": batch_seconds[FLAGS.system],
                    "probabilities": [output.tolist() for output in outputs[FLAGS.system]]}))


def compare_packing(config: modeling.BertConfig, threads: int) -> None:
  """--pack_comparison: each system in a process of its own, one after the other; the table."""
  results = {}
  for system in ("unpacked", "packed"):
    completed = subprocess.run(
        [sys.executable, os.path.abspath(__file__), "--system=" + system] +
        [argument for argument in sys.argv[1:] if not argument.startswith("--pack_comparison")],
        capture_output=True, text=True, check=True)
    results[system] = json.loads(completed.stdout.strip().splitlines()[-1])
  difference = max(float(np.max(np.abs(np.subtract(a, b)))) for a, b in zip(
      results["packed"]["probabilities"], results["unpacked"]["probabilities"]))
  print("\n- %s-shaped classifier (L=%d, H=%d, A=%d, random weights), max_seq_length %d, "
        "dynamic padding, %d CPU thread(s), %d cores; each system in its own process. Medians "
        "over %d one-sentence requests and %d batches of %d SST-2 train.tsv sentences. Largest "
        "probability difference, packed against unpacked: %.1e." % (
            SHAPE_NAMES[FLAGS.model], config.num_hidden_layers, config.hidden_size,
            config.num_attention_heads, FLAGS.max_seq_length, threads, os.cpu_count(),
            FLAGS.num_requests, FLAGS.num_batches, FLAGS.batch_size, difference))
  print("- CPU: %s." % benchmark_paths.cpu_description())
  print("| export | median ms, 1 sentence | median ms, batch %d | sentences/s, batch %d | "
        "batch speed-up |" % (FLAGS.batch_size, FLAGS.batch_size))
  print("| --- | ---: | ---: | ---: | ---: |")
  reference = np.median(results["unpacked"]["batch"])
  for system, name in (("unpacked", "dynamic padding, unpacked"),
                       ("packed", "dynamic padding, packed (default)")):
    single, batch = np.median(results[system]["single"]), np.median(results[system]["batch"])
    print("| %s | %.1f | %.1f | %.1f | %.2fx |" % (name, 1e3 * single, 1e3 * batch,
                                                   FLAGS.batch_size / batch, reference / batch))


def main(argv):
  del argv  # Unused.
  threads = FLAGS.threads or os.cpu_count() or 1
  tf.config.threading.set_intra_op_parallelism_threads(threads)
  tf.config.threading.set_inter_op_parallelism_threads(threads)
  config = modeling.BertConfig.from_dict(SHAPES[FLAGS.model])
  if FLAGS.pack_comparison:
    compare_packing(config, threads)
    return
  sentences = read_sentences(FLAGS.sst2_file)
  task = classifier.ClassifierTask(config, classifier_data.get_processor("sst-2"),
                                   tokenization.FullTokenizer(FLAGS.vocab_file, True), None,
                                   FLAGS.export_root, FLAGS.max_seq_length)
  if FLAGS.system:
    run_system(task, sentences)
    return
  model = task.build_model()
  runners = {
      "ours, padded to max_seq_length (before)": ExportRunner(export_classifier(task, model,
                                                                                False)),
      "ours, dynamic padding (after)": ExportRunner(export_classifier(task, model, True))}
  if FLAGS.bfloat16:
    runners["ours, dynamic padding, bfloat16"] = ExportRunner(
        export_classifier(task, model, True, "bfloat16"))
  peer = bench_model.load_peer()
  if peer:
    peer[0].set_num_threads(threads)
    runners["Hugging Face PyTorch, dynamic padding"] = HuggingFaceRunner(peer, config)
  singles, batches = requests_of(sentences)
  # Warm up every runner on every padded length bucket and on a full batch.
  lengths = sorted(sentences[:2000], key=len)
  timed_calls(runners, [[lengths[-1] * 3], [lengths[0]], [lengths[len(lengths) // 2]],
                        batches[0]])
  single_seconds, single_outputs = timed_calls(runners, singles)
  batch_seconds, _ = timed_calls(runners, batches)

  before, after = list(runners)[:2]

  def difference(name):  # The largest probability difference from the dynamic float32 export.
    return max(float(np.max(np.abs(a - b))) for a, b in zip(single_outputs[name],
                                                            single_outputs[after]))

  tokens = [len(s.split()) for s in sentences[:FLAGS.num_requests]]
  print("\n- %s-shaped classifier (L=%d, H=%d, A=%d, random weights), max_seq_length %d, %d CPU "
        "thread(s) for each system, %d cores. Latency: %d one-sentence requests from SST-2 "
        "train.tsv (median %d words); throughput: %d batches of %d. Largest probability "
        "difference from the dynamic float32 export: padded %.1e%s." % (
            SHAPE_NAMES[FLAGS.model], config.num_hidden_layers,
            config.hidden_size, config.num_attention_heads, FLAGS.max_seq_length, threads,
            os.cpu_count(), len(singles), int(np.median(tokens)), len(batches), FLAGS.batch_size,
            difference(before), ", bfloat16 %.1e" % difference("ours, dynamic padding, bfloat16")
            if FLAGS.bfloat16 else ""))
  print("- CPU: %s." % benchmark_paths.cpu_description())
  if not peer:
    print("- Hugging Face PyTorch column skipped: torch and transformers do not import here.")
  print("| system | p50 ms, 1 sentence | p99 ms, 1 sentence | sentences/s, batch %d | "
        "p50 speed-up over padded export |" % FLAGS.batch_size)
  print("| --- | ---: | ---: | ---: | ---: |")
  reference = np.percentile(single_seconds[before], 50)
  for name in runners:
    p50, p99 = np.percentile(single_seconds[name], [50, 99])
    throughput = sum(len(b) for b in batches) / sum(batch_seconds[name])
    print("| %s | %.1f | %.1f | %.1f | %.1fx |" % (name, 1e3 * p50, 1e3 * p99, throughput,
                                                  reference / p50))


if __name__ == "__main__":
  app.run(main)
