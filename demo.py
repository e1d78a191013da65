"""The main job: the whole BERT pipeline on a built-in default, with no download.

Every machine with Python has a corpus of real English: the docstrings of the installed standard library
and the language reference in `pydoc_data`. This script reads them at run time (by parsing the source
files, nothing is imported or copied into the repository) and then runs the same command lines a user
would run:

  1. create_vocab.py             learns a WordPiece vocab from the docstrings;
  2. create_pretraining_data.py  writes masked-LM / next-sentence TFRecords;
  3. run_pretraining.py          pretrains a small BERT (MLM + NSP) and evaluates it;
  4. run_classifier.py           fine-tunes it on "stdlib topics" and exports a SavedModel;
  5. the exported SavedModel is queried with raw text in a fresh process.

The labeled task, "stdlib topics": given the first paragraph of a function's or class's docstring, say
which area of the standard library it documents: networking, concurrency, files, text, numbers or
testing (the area of the module it comes from; see `TOPIC_MODULES`). Chance is about 1/6.

Usage: python demo.py [--output_dir=demo_output] [--size=full|tiny]
"""

import ast
import dataclasses
import hashlib
import json
import os
import re
import subprocess
import sys
import sysconfig
import time
from typing import Iterator, Optional

from absl import app
from absl import flags

import atomic_files
import cli
import errors

FLAGS = flags.FLAGS


# Top-level standard library modules (or packages) whose docstrings make up each topic.
TOPIC_MODULES = {
    "networking": ["http", "urllib", "email", "smtplib", "imaplib", "nntplib", "ftplib", "poplib",
                   "socket", "socketserver", "ssl", "xmlrpc", "wsgiref", "telnetlib", "mailbox",
                   "cgi", "ipaddress", "mimetypes"],
    "concurrency": ["asyncio", "threading", "multiprocessing", "concurrent", "subprocess", "queue",
                    "sched", "selectors", "_threading_local"],
    "files": ["os", "shutil", "pathlib", "tarfile", "zipfile", "tempfile", "glob", "fnmatch", "_pyio",
              "gzip", "bz2", "lzma", "filecmp", "fileinput", "genericpath", "posixpath", "ntpath",
              "stat", "shelve", "dbm", "zipimport"],
    "text": ["difflib", "re", "textwrap", "string", "codecs", "json", "html", "csv", "configparser",
             "gettext", "locale", "stringprep", "shlex", "xml", "tokenize", "quopri", "base64"],
    "numbers": ["_pydecimal", "statistics", "fractions", "random", "numbers", "datetime",
                "_strptime", "calendar", "colorsys", "bisect", "heapq"],
    "testing": ["unittest", "doctest", "pdb", "bdb", "traceback", "trace", "cProfile", "profile",
                "pstats", "timeit", "tracemalloc", "warnings", "linecache"],
}

# Directories of the standard library that hold no documentation worth reading.
SKIPPED_DIRS = {"site-packages", "test", "tests", "idlelib", "lib2to3", "__pycache__", "ensurepip",
                "turtledemo", "config-3.11-x86_64-linux-gnu"}

_SENTENCE_END = re.compile(r"(?<=[.!?])\s+(?=[A-Z(\"'])")
_CODE_LINE = re.compile(r"^\s*(>>>|\.\.\.|[$%#]|[-=*~^]{3,})")


@dataclasses.dataclass
class StdlibDocument:
  """The documentation of one standard library source file (or one language reference topic)."""
  name: str  # e.g. "http/client.py" or "pydoc_data:assert"
  topic: Optional[str]  # one of TOPIC_MODULES, or None
  sentences: list[str]
  # First paragraphs of the function and class docstrings, for the labeled task.
  summaries: list[str]


def prose_paragraphs(text: str) -> Iterator[str]:
  """Yields the paragraphs of a docstring that read as prose, each joined onto one line.

  Paragraphs are separated by blank lines. Indented blocks, doctest sessions, headings underlined with
  `===` and lines full of symbols are code or markup, not sentences, and are dropped.
  """
  for block in re.split(r"\n\s*\n", text):
    lines = block.split("\n")
    if any(_CODE_LINE.match(line) for line in lines):
      continue
    if len(lines) > 1 and lines[0].strip() and all(line.startswith("   ") for line in lines):
      continue
    paragraph = " ".join(line.strip() for line in lines if line.strip())
    letters = sum(c.isalpha() or c == " " for c in paragraph)
    if len(paragraph) >= 20 and letters >= 0.8 * len(paragraph):
      yield paragraph


def split_sentences(paragraph: str) -> list[str]:
  """Splits a prose paragraph into sentences at `. ` (or `!`, `?`) followed by a capital."""
  return [s.strip() for s in _SENTENCE_END.split(paragraph) if len(s.strip()) >= 8]


def topic_of(relative_path: str) -> Optional[str]:
  """Returns the topic of a standard library file from its top-level module name, or None."""
  top_level = relative_path.split(os.sep)[0]
  if top_level.endswith(".py"):
    top_level = top_level[:-3]
  for topic, modules in TOPIC_MODULES.items():
    if top_level in modules:
      return topic
  return None


def read_source_document(path: str, relative_path: str) -> Optional[StdlibDocument]:
  """Parses one .py file and collects its docstrings; None if it cannot be parsed or has none."""
  try:
    with open(path, encoding="utf-8") as source_file:
      tree = ast.parse(source_file.read(), filename=path)
  except (SyntaxError, UnicodeDecodeError, ValueError):
    return None
  sentences, summaries = [], []
  for node in ast.walk(tree):
    if not isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
      continue
    docstring = ast.get_docstring(node)
    if not docstring:
      continue
    paragraphs = list(prose_paragraphs(docstring))
    for paragraph in paragraphs:
      sentences.extend(split_sentences(paragraph))
    if paragraphs and not isinstance(node, ast.Module):
      summaries.append(paragraphs[0])
  if not sentences:
    return None
  return StdlibDocument(relative_path, topic_of(relative_path), sentences, summaries)


def read_language_reference(stdlib_dir: str) -> list[StdlibDocument]:
  """Reads the language reference topics that `pydoc` shows (pydoc_data/topics.py), one document each."""
  path = os.path.join(stdlib_dir, "pydoc_data", "topics.py")
  if not os.path.exists(path):
    return []
  with open(path, encoding="utf-8") as source_file:
    tree = ast.parse(source_file.read(), filename=path)
  documents = []
  for node in tree.body:
    if isinstance(node, ast.Assign) and isinstance(node.value, ast.Dict):
      for name, text in ast.literal_eval(node.value).items():
        sentences = [s for p in prose_paragraphs(text) for s in split_sentences(p)]
        if sentences:
          documents.append(StdlibDocument("pydoc_data:" + name, None, sentences, []))
  return documents


def read_stdlib_documents(stdlib_dir: str) -> list[StdlibDocument]:
  """Reads every documented source file of the standard library, in a fixed (sorted) order."""
  documents = []
  for directory, subdirectories, file_names in os.walk(stdlib_dir):
    subdirectories[:] = sorted(d for d in subdirectories if d not in SKIPPED_DIRS)
    for file_name in sorted(file_names):
      if file_name.endswith(".py"):
        path = os.path.join(directory, file_name)
        document = read_source_document(path, os.path.relpath(path, stdlib_dir))
        if document:
          documents.append(document)
  return documents + read_language_reference(stdlib_dir)


def write_pretraining_corpus(documents: list[StdlibDocument], path: str) -> int:
  """Writes the original's input format: one sentence per line, a blank line between documents.

  The sentences of the dev and test examples' paragraphs are left out, so that the fine-tuned model
  is evaluated on text that pretraining never saw. Returns the number of bytes written.
  """
  held_out = {sentence for document in documents for summary in document.summaries
              if split_of(example_text(summary)) != "train"
              for sentence in split_sentences(summary)}
  num_bytes = 0
  with open(path, "w", encoding="utf-8") as corpus_file:
    for document in documents:
      sentences = [sentence for sentence in document.sentences if sentence not in held_out]
      if sentences:
        text = "\n".join(sentences) + "\n\n"
        corpus_file.write(text)
        num_bytes += len(text.encode("utf-8"))
  return num_bytes


def example_text(summary: str, max_words: int = 48) -> str:
  """The text of a labeled example: a docstring's first paragraph, cut to `max_words` words.

  Whitespace (tabs included) is folded to single spaces, as the TSV files need.
  """
  return " ".join(summary.split()[:max_words])


def split_of(text: str) -> str:
  """Assigns an example to train (80%), dev (10%) or test (10%) by a hash of its text.

  Hashing the text (after removing duplicates) keeps every topic in every split and puts no text on
  both sides of the split.
  """
  bucket = int(hashlib.sha256(text.encode("utf-8")).hexdigest(), 16) % 10
  return "train" if bucket < 8 else ("dev" if bucket == 8 else "test")


def write_topic_task(documents: list[StdlibDocument], data_dir: str) -> dict[str, int]:
  """Writes train.tsv, dev.tsv and test.tsv (header `text<TAB>label`) for the stdlib-topics task.

  Each example is the `example_text` of one function's or class's docstring, labeled with the topic
  of its module; duplicates are written once. Returns the number of examples per split.
  """
  os.makedirs(data_dir, exist_ok=True)
  rows = {"train": [], "dev": [], "test": []}
  seen_texts = set()
  for document in documents:
    if document.topic is None:
      continue
    for summary in document.summaries:
      text = example_text(summary)
      if text not in seen_texts:
        seen_texts.add(text)
        rows[split_of(text)].append((text, document.topic))
  for split, examples in rows.items():
    with open(os.path.join(data_dir, split + ".tsv"), "w", encoding="utf-8") as tsv_file:
      tsv_file.write("text\tlabel\n")
      for text, label in examples:
        tsv_file.write("%s\t%s\n" % (text, label))
  return {split: len(examples) for split, examples in rows.items()}


@dataclasses.dataclass
class DemoSize:
  """How big each step of the demo is."""
  max_documents: Optional[int]  # None: the whole standard library.
  vocab_size: int
  max_seq_length: int
  max_predictions_per_seq: int
  dupe_factor: int
  bert_config: dict
  pretraining_steps: int
  pretraining_warmup_steps: int
  pretraining_batch_size: int
  classifier_epochs: float
  max_classifier_examples: Optional[int]


SIZES = {
    # About 4 minutes on 2 AVX2 cores: most of it pretraining a 2-layer, 128-wide BERT for 1,500
    # steps, then 5 epochs over ~3,000 labeled docstrings. The long warmup matters: the original's
    # Adam has no bias correction, and with a 40-step warmup a 4-layer, 256-wide model collapsed
    # to the same output at every position.
    "full": DemoSize(max_documents=None, vocab_size=8000, max_seq_length=64,
                     max_predictions_per_seq=10, dupe_factor=3,
                     bert_config=dict(hidden_size=128, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=512),
                     pretraining_steps=1500, pretraining_warmup_steps=500,
                     pretraining_batch_size=32, classifier_epochs=5.0,
                     max_classifier_examples=None),
    # Seconds of work per step (plus TensorFlow's start-up): proves every step runs.
    "tiny": DemoSize(max_documents=60, vocab_size=600, max_seq_length=32, max_predictions_per_seq=5,
                     dupe_factor=1,
                     bert_config=dict(hidden_size=32, num_hidden_layers=2, num_attention_heads=2,
                                      intermediate_size=64),
                     pretraining_steps=20, pretraining_warmup_steps=2, pretraining_batch_size=8,
                     classifier_epochs=1.0,
                     max_classifier_examples=64),
}

# Descriptions written for the demo, one per topic, to query the exported model with.
QUERIES = [
    "Send the message to the mail server and wait for its reply.",
    "Start a pool of worker processes and wait until every task has finished.",
    "Copy the directory tree, then remove the temporary files.",
    "Split the string at each separator and strip surrounding whitespace.",
    "Return the remainder of the division, rounded to the current precision.",
    "Run the test case and report every failed assertion.",
]

# Runs in a fresh interpreter that imports only tensorflow and tensorflow_text, as a server would.
QUERY_PROGRAM = """
import json, os, sys
import tensorflow as tf
import tensorflow_text  # Registers the tokenization ops the SavedModel uses.
export_dir, queries = sys.argv[1], json.loads(sys.argv[2])
version = max(int(v) for v in os.listdir(export_dir) if v.isdigit())
serve = tf.saved_model.load(os.path.join(export_dir, str(version))).signatures["serving_default"]
outputs = serve(text_a=tf.constant(queries))
for text, label, probabilities in zip(queries, outputs["label"].numpy(),
                                      outputs["probabilities"].numpy()):
  print("  %-12s %.2f  %s" % (label.decode(), probabilities.max(), text))
"""


def run_step(title: str, program: str, args: list[str]) -> float:
  """Runs one of the project's command-line programs as a user would; returns the seconds it took."""
  command = [sys.executable, program] + args
  print("\n== %s\n$ %s" % (title, " ".join(command)), flush=True)
  start = time.time()
  subprocess.run(command, check=True, cwd=os.path.dirname(os.path.abspath(__file__)))
  return time.time() - start


def read_key_values(path: str) -> dict[str, str]:
  """Reads an `eval_results.txt` (`key = value` lines)."""
  with open(path, encoding="utf-8") as results_file:
    return dict(line.strip().split(" = ", 1) for line in results_file if " = " in line)


def shrink_topic_task(topics_dir: str, max_examples: int) -> dict[str, int]:
  """Keeps about `max_examples` evenly spaced rows per split, and in dev/test only training labels."""
  counts, train_labels = {}, set()
  for split in ("train", "dev", "test"):
    path = os.path.join(topics_dir, split + ".tsv")
    with open(path, encoding="utf-8") as tsv_file:
      header, *rows = tsv_file.readlines()
    rows = rows[::max(1, len(rows) // max_examples)]
    if split == "train":
      train_labels = {row.rstrip("\n").split("\t")[1] for row in rows}
    rows = [row for row in rows if row.rstrip("\n").split("\t")[1] in train_labels]
    with open(path, "w", encoding="utf-8") as tsv_file:
      tsv_file.writelines([header] + rows)
    counts[split] = len(rows)
  return counts


def prepare_data(output_dir: str, size: DemoSize, stdlib_dir: str) -> tuple[str, str]:
  """Reads the standard library's docs, writes the corpus and the labeled task; returns both paths."""
  documents = read_stdlib_documents(stdlib_dir)
  if size.max_documents:  # Evenly spaced files, so that every topic keeps some.
    documents = documents[::max(1, len(documents) // size.max_documents)]
  corpus_path = os.path.join(output_dir, "stdlib_docs.txt")
  num_bytes = write_pretraining_corpus(documents, corpus_path)
  topics_dir = os.path.join(output_dir, "stdlib_topics")
  counts = write_topic_task(documents, topics_dir)
  if size.max_classifier_examples:
    counts = shrink_topic_task(topics_dir, size.max_classifier_examples)
  print("== Corpus: %d documents, %d sentences, %.2f MB from %s -> %s" % (
      len(documents), sum(len(d.sentences) for d in documents), num_bytes / 1e6, stdlib_dir,
      corpus_path))
  print("== Task 'stdlib topics' (%s): %s -> %s" % (
      ", ".join(TOPIC_MODULES), ", ".join("%s %d" % kv for kv in counts.items()), topics_dir))
  return corpus_path, topics_dir


# The mark a demo leaves in its output_dir: a later demo of the same settings may write there
# again, nothing else may have been there (the demo writes a vocab.txt, a bert_config.json and
# more by fixed names).
DEMO_MARK_NAME = ".bert_demo.json"


def demo_settings(size: DemoSize, stdlib_dir: str) -> dict:
  """What a demo's files depend on: its size and the standard library it reads."""
  return {"size": dataclasses.asdict(size), "stdlib_dir": os.path.realpath(stdlib_dir)}


def check_output_dir(output_dir: str, settings: dict) -> None:
  """A FlagError unless `output_dir` is new, empty, or an earlier demo's (its mark) of the same
  `settings` (`demo_settings`): a demo of another size or corpus would rewrite the vocab,
  config and records beside the earlier demo's checkpoints."""
  if not os.path.isdir(output_dir):
    return
  names = sorted(os.listdir(output_dir))
  mark = atomic_files.read_files_mark(output_dir, DEMO_MARK_NAME)
  if names and not mark:
    raise errors.FlagError("--output_dir=%s holds files that are not an earlier demo's (%s): "
                           "the demo writes vocab.txt, bert_config.json and more there; choose a "
                           "new directory" % (output_dir, names[0]))
  recorded = mark.get("settings")
  if recorded is not None and recorded != settings:
    what = ("--stdlib_dir=%s" % recorded.get("stdlib_dir")
            if recorded.get("size") == settings["size"] else "another --size")
    raise errors.FlagError("--output_dir=%s holds an earlier demo of %s (%s): rerun it as it was, "
                           "or choose a new directory" % (output_dir, what, DEMO_MARK_NAME))


def run_pipeline(output_dir: str, size: DemoSize, stdlib_dir: str) -> dict[str, str]:
  """Runs every step; returns the artifacts by name."""
  settings = demo_settings(size, stdlib_dir)
  check_output_dir(output_dir, settings)
  os.makedirs(output_dir, exist_ok=True)
  atomic_files.write_text(os.path.join(output_dir, DEMO_MARK_NAME),
                          json.dumps({"writer": "demo.py", "settings": settings}) + "\n")
  corpus_path, topics_dir = prepare_data(output_dir, size, stdlib_dir)
  vocab_file = os.path.join(output_dir, "vocab.txt")
  run_step("1/5 Learn a WordPiece vocab", "create_vocab.py", [
      "--input_file=" + corpus_path, "--output_file=" + vocab_file,
      "--vocab_size=%d" % size.vocab_size, "--do_lower_case=true"])

  bert_config_file = os.path.join(output_dir, "bert_config.json")
  with open(vocab_file, encoding="utf-8") as vocab:
    vocab_size = sum(1 for _ in vocab)
  config = dict(vocab_size=vocab_size, hidden_act="gelu", hidden_dropout_prob=0.1,
                attention_probs_dropout_prob=0.1, max_position_embeddings=size.max_seq_length,
                type_vocab_size=2, initializer_range=0.02, **size.bert_config)
  atomic_files.write_text(bert_config_file, json.dumps(config, indent=2, sort_keys=True) + "\n")

  records = os.path.join(output_dir, "pretraining_data.tfrecord")
  sequence_flags = ["--max_seq_length=%d" % size.max_seq_length,
                    "--max_predictions_per_seq=%d" % size.max_predictions_per_seq]
  run_step("2/5 Write pretraining TFRecords", "create_pretraining_data.py", [
      "--input_file=" + corpus_path, "--output_file=" + records, "--vocab_file=" + vocab_file,
      "--do_lower_case=true", "--dupe_factor=%d" % size.dupe_factor] + sequence_flags)

  pretraining_dir = os.path.join(output_dir, "pretraining")
  run_step("3/5 Pretrain a small BERT (masked LM + next sentence) and evaluate it",
           "run_pretraining.py", [
               "--input_file=" + records, "--output_dir=" + pretraining_dir,
               "--bert_config_file=" + bert_config_file, "--do_train=true", "--do_eval=true",
               "--train_batch_size=%d" % size.pretraining_batch_size, "--learning_rate=5e-4",
               "--num_train_steps=%d" % size.pretraining_steps,
               "--num_warmup_steps=%d" % size.pretraining_warmup_steps,
               "--save_checkpoints_steps=%d" % max(size.pretraining_steps // 3, 1),
               "--iterations_per_loop=%d" % max(size.pretraining_steps // 30, 1),
               "--max_eval_steps=20"] + sequence_flags)
  pretrained_checkpoint = os.path.join(pretraining_dir, "model.ckpt-%d" % size.pretraining_steps)

  classifier_dir = os.path.join(output_dir, "stdlib_topics_classifier")
  export_dir = os.path.join(output_dir, "export")
  run_step("4/5 Fine-tune on stdlib topics, predict and export", "run_classifier.py", [
      "--task_name=generic", "--data_dir=" + topics_dir, "--text_a_column=text",
      "--label_column=label", "--vocab_file=" + vocab_file, "--do_lower_case=true",
      "--bert_config_file=" + bert_config_file, "--init_checkpoint=" + pretrained_checkpoint,
      "--output_dir=" + classifier_dir, "--export_dir=" + export_dir,
      "--do_train=true", "--do_eval=true", "--do_predict=true",
      "--max_seq_length=%d" % size.max_seq_length, "--train_batch_size=32",
      "--learning_rate=2e-4", "--num_train_epochs=%s" % size.classifier_epochs,
      "--save_checkpoints_steps=100000", "--iterations_per_loop=20"])

  print("\n== 5/5 Ask the exported SavedModel about raw text (a process with only tensorflow and "
        "tensorflow_text)", flush=True)
  subprocess.run([sys.executable, "-c", QUERY_PROGRAM, export_dir, json.dumps(QUERIES)], check=True)
  return {
      "corpus": corpus_path, "labeled task": topics_dir, "vocab": vocab_file,
      "bert config": bert_config_file, "pretraining TFRecords": records,
      "pretrained checkpoint": pretrained_checkpoint,
      "pretraining eval": os.path.join(pretraining_dir, "eval_results.txt"),
      "classifier eval": os.path.join(classifier_dir, "eval_results.txt"),
      "test predictions": os.path.join(classifier_dir, "test_results.tsv"),
      "SavedModel": export_dir,
  }


def define_flags() -> None:
  """Defines the demo's flags (only when run as a script, so importing it defines no flags)."""
  flags.DEFINE_string("output_dir", "demo_output", "Where every artifact of the demo is written.")
  flags.DEFINE_enum("size", "full", ["full", "tiny"],
                    "`full` takes about 4 minutes on 2 cores; `tiny` takes seconds and only proves "
                    "that every step runs (the tests use it).")
  flags.DEFINE_string("stdlib_dir", None,
                      "Directory of the Python standard library to read. Default: this interpreter's.")


def main(argv: list[str]) -> None:
  if len(argv) > 1:
    raise app.UsageError("Unexpected arguments: %s" % " ".join(argv[1:]))
  start = time.time()
  size = SIZES[FLAGS.size]
  stdlib_dir = FLAGS.stdlib_dir or sysconfig.get_paths()["stdlib"]
  artifacts = run_pipeline(os.path.abspath(FLAGS.output_dir), size, stdlib_dir)
  pretraining = read_key_values(artifacts["pretraining eval"])
  classification = read_key_values(artifacts["classifier eval"])
  print("\n== Done in %.0f s" % (time.time() - start))
  print("Pretraining: masked_lm_accuracy %s, next_sentence_accuracy %s" % (
      pretraining.get("masked_lm_accuracy"), pretraining.get("next_sentence_accuracy")))
  print("Stdlib topics (dev, 6 classes): eval_accuracy %s" % classification.get("eval_accuracy"))
  for name, path in artifacts.items():
    print("  %-22s %s" % (name, path))


if __name__ == "__main__":
  define_flags()
  cli.run_script(main)
