"""The main job, end to end at its tiny size, exactly as a user runs it (`python demo.py`)."""

import json
import os
import subprocess
import sys

import pytest

from conftest import REPO_ROOT
import demo
import errors

pytestmark = pytest.mark.slow


def read_tsv(path):
  with open(path, encoding="utf-8") as tsv_file:
    return [line.rstrip("\n").split("\t") for line in tsv_file]


def test_split_sentences_and_prose_filter():
  paragraphs = list(demo.prose_paragraphs(
      "Return the sum.  It is an int.\n\n>>> add(1, 2)\n3\n\nRaise ValueError if x is\nnegative."))
  assert paragraphs == ["Return the sum.  It is an int.", "Raise ValueError if x is negative."]
  assert demo.split_sentences(paragraphs[0]) == ["Return the sum.", "It is an int."]


def test_topic_of_uses_the_top_level_module():
  assert demo.topic_of(os.path.join("http", "client.py")) == "networking"
  assert demo.topic_of("shutil.py") == "files"
  assert demo.topic_of(os.path.join("json", "decoder.py")) == "text"
  assert demo.topic_of("antigravity.py") is None


def test_pretraining_corpus_leaves_out_dev_and_test_examples(tmp_path):
  # Two-sentence summaries; the split is a hash of the example text.
  candidates = ["Return the value number %d. Then close the file." % i for i in range(100)]
  train_summary = next(text for text in candidates if demo.split_of(text) == "train")
  held_out_summary = next(text for text in candidates if demo.split_of(text) != "train")
  held_out_first = held_out_summary.split(" Then")[0]
  document = demo.StdlibDocument(
      "example.py", "files",
      demo.split_sentences(train_summary) + [held_out_first, "Then close the file.", "Module text."],
      [train_summary, held_out_summary])
  corpus = tmp_path / "corpus.txt"
  demo.write_pretraining_corpus([document], str(corpus))
  # "Then close the file." is in both summaries: a sentence of a dev or test example goes.
  assert corpus.read_text(encoding="utf-8") == (
      train_summary.split(" Then")[0] + "\nModule text.\n\n")


def test_tiny_demo_runs_every_step(tmp_path):
  output_dir = tmp_path / "demo"
  completed = subprocess.run(
      [sys.executable, "demo.py", "--size=tiny", "--output_dir=%s" % output_dir],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=600)
  assert completed.returncode == 0, completed.stderr[-3000:]

  # The corpus is in the original's format: sentences on lines, blank lines between documents.
  with open(output_dir / "stdlib_docs.txt", encoding="utf-8") as corpus:
    documents = corpus.read().split("\n\n")
  assert len(documents) > 10 and all(line.strip() for line in documents[0].split("\n"))

  # The learned vocab starts with the special tokens; pretraining wrote a Google-format checkpoint.
  with open(output_dir / "vocab.txt", encoding="utf-8") as vocab:
    assert [next(vocab).strip() for _ in range(5)] == ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]"]
  assert (output_dir / "pretraining" / "model.ckpt-20.index").exists()

  pretraining = demo.read_key_values(output_dir / "pretraining" / "eval_results.txt")
  assert set(pretraining) >= {"global_step", "loss", "masked_lm_accuracy", "masked_lm_loss",
                              "next_sentence_accuracy", "next_sentence_loss"}
  assert pretraining["global_step"] == "20"
  assert 0.0 <= float(pretraining["masked_lm_accuracy"]) <= 1.0

  classifier_dir = output_dir / "stdlib_topics_classifier"
  assert 0.0 <= float(demo.read_key_values(classifier_dir / "eval_results.txt")["eval_accuracy"])
  # One line of class probabilities per test example, in order.
  test_rows = read_tsv(output_dir / "stdlib_topics" / "test.tsv")[1:]
  probabilities = read_tsv(classifier_dir / "test_results.tsv")
  assert len(probabilities) == len(test_rows)
  for row in probabilities:
    assert abs(sum(float(p) for p in row) - 1.0) < 1e-4

  # The exported model answered every query with one of the task's labels.
  answers = [line.split() for line in completed.stdout.splitlines()
             if line.startswith("  ") and line.strip().split(" ")[0] in demo.TOPIC_MODULES]
  assert len(answers) == len(demo.QUERIES)
  assert os.listdir(output_dir / "export") == ["1"]

  # A demo of another size there would rewrite the vocab, config and records beside this demo's
  # checkpoints (before, it did, then failed at pretraining with a traceback).
  before = {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()}
  assert_refused("--size=full", output_dir,
                 "--output_dir=%s holds an earlier demo of another --size (.bert_demo.json): "
                 "rerun it as it was, or choose a new directory" % output_dir)
  assert {path: path.read_bytes() for path in output_dir.rglob("*") if path.is_file()} == before


def assert_refused(size_flag: str, output_dir, message: str) -> None:
  """demo.py into output_dir stops before any work with the one line `demo.py: error: message`."""
  completed = subprocess.run(
      [sys.executable, "demo.py", size_flag, "--output_dir=%s" % output_dir],
      cwd=REPO_ROOT, capture_output=True, text=True, timeout=120)
  assert completed.returncode == 1 and "Traceback" not in completed.stderr
  assert completed.stderr.strip().splitlines()[-1] == "demo.py: error: " + message


def test_the_demo_writes_only_into_a_new_or_an_earlier_demo_directory(tmp_path):
  """Before, `--output_dir` naming a directory of the user's replaced the vocab.txt in it."""
  output_dir = tmp_path / "mine"
  output_dir.mkdir()
  (output_dir / "vocab.txt").write_text("the user's vocab\n")
  assert_refused("--size=tiny", output_dir,
                 "--output_dir=%s holds files that are not an earlier demo's (vocab.txt): the "
                 "demo writes vocab.txt, bert_config.json and more there; choose a new directory"
                 % output_dir)
  assert os.listdir(output_dir) == ["vocab.txt"]
  assert (output_dir / "vocab.txt").read_text() == "the user's vocab\n"
  # An earlier demo's directory (its mark) and an empty one are the demo's to write in.
  (output_dir / "vocab.txt").unlink()
  settings = demo.demo_settings(demo.SIZES["tiny"], str(tmp_path))
  demo.check_output_dir(str(output_dir), settings)
  (output_dir / demo.DEMO_MARK_NAME).write_text(
      json.dumps({"writer": "demo.py", "settings": settings}))
  (output_dir / "vocab.txt").write_text("an earlier demo's vocab\n")
  demo.check_output_dir(str(output_dir), settings)
  with pytest.raises(errors.FlagError, match="an earlier demo of --stdlib_dir=%s" % tmp_path):
    demo.check_output_dir(str(output_dir), demo.demo_settings(demo.SIZES["tiny"], "/usr/lib"))
