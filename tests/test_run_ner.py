"""End-to-end tests of run_ner.py: a tiny BERT learns a generated tagging rule; export = predict."""
import os
import random
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import write_model_files
import checkpoints
import modeling
import tagging
import tokenization

pytestmark = pytest.mark.slow

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
_FILLER = ["the", "a", "visited", "saw", "and", "in", "with", "today", "met", "near"]
_VOCAB = (["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "alice", "bob", "paris", "london",
           "new", "york", "un", "##aff", "##able", ".", ","] + _FILLER)


def _sentence(rng, num_chunks):
  """Words and IOB2 tags: persons, places (incl. "New York"), a 3-piece MISC word, filler."""
  words, tags = [], []
  for _ in range(num_chunks):
    kind = rng.randrange(6)
    if kind == 0:
      words.append(rng.choice(["Alice", "Bob"]))
      tags.append("B-PER")
    elif kind == 1:
      words.append(rng.choice(["Paris", "London"]))
      tags.append("B-LOC")
    elif kind == 2:
      words += ["New", "York"]
      tags += ["B-LOC", "I-LOC"]
    elif kind == 3:
      words.append("unaffable")
      tags.append("B-MISC")
    else:
      words.append(rng.choice(_FILLER + [".", ","]))
      tags.append("O")
  return words, tags


def _write_conll(path, rng, num_sentences, min_chunks, max_chunks):
  with open(path, "w") as writer:
    writer.write("-DOCSTART- -X- -X- O\n\n")
    for _ in range(num_sentences):
      words, tags = _sentence(rng, rng.randint(min_chunks, max_chunks))
      writer.write("".join("%s NN O %s\n" % pair for pair in zip(words, tags)) + "\n")


@pytest.fixture(scope="module")
def trained(tmp_path_factory):
  """Trains, evaluates, predicts and exports once with the CLI; returns the directories."""
  root = str(tmp_path_factory.mktemp("ner"))
  data_dir, output_dir = os.path.join(root, "data"), os.path.join(root, "out")
  os.makedirs(data_dir)
  rng = random.Random(0)
  _write_conll(os.path.join(data_dir, "train.txt"), rng, 400, 2, 8)
  _write_conll(os.path.join(data_dir, "dev.txt"), rng, 60, 2, 8)
  # Test sentences are longer than max_seq_length=16 pieces, so they need several windows.
  _write_conll(os.path.join(data_dir, "test.txt"), rng, 20, 10, 16)
  config = modeling.BertConfig(vocab_size=len(_VOCAB), hidden_size=32, num_hidden_layers=2,
                               num_attention_heads=2, intermediate_size=64,
                               max_position_embeddings=32)
  config_file, vocab_file = write_model_files(root, config, _VOCAB)
  common = ["--data_dir", data_dir, "--output_dir", output_dir, "--vocab_file",
            vocab_file, "--bert_config_file", config_file, "--max_seq_length=16"]
  subprocess.run(
      [sys.executable, "run_ner.py", "--do_train", "--do_eval", "--do_predict",
       "--train_batch_size=16", "--learning_rate=2e-3", "--num_train_epochs=8",
       "--save_checkpoints_steps=100", "--iterations_per_loop=50", "--eval_batch_size=32",
       "--predict_batch_size=7", "--export_dir", os.path.join(root, "export")] + common,
      check=True, cwd=REPO_ROOT, capture_output=True)
  return {"root": root, "data_dir": data_dir, "output_dir": output_dir, "common": common}


def _read_results(path):
  with open(path) as reader:
    return dict(line.strip().split(" = ") for line in reader)


def test_tiny_model_learns_the_rule(trained):
  results = _read_results(os.path.join(trained["output_dir"], "eval_results.txt"))
  assert float(results["eval_f1"]) > 0.95, results
  assert float(results["eval_accuracy"]) > 0.95
  assert float(results["eval_MISC_f1"]) > 0.9  # the 3-piece word, tagged on its first piece
  train_sentences = tagging.read_conll(os.path.join(trained["data_dir"], "train.txt"))
  tokenizer = tokenization.FullTokenizer(os.path.join(trained["root"], "vocab.txt"))
  num_windows = len(tagging.convert_sentences_to_features(
      train_sentences, tagging.tag_list_from_sentences(train_sentences), 16, tokenizer))
  assert num_windows > len(train_sentences)  # some training sentences needed two windows
  assert int(results["global_step"]) == int(num_windows / 16 * 8)
  assert float(results["eval_loss"]) < 0.2
  with open(os.path.join(trained["output_dir"], "eval_conlleval.txt")) as reader:
    assert reader.readline().startswith("processed ")
  assert tagging.read_tag_list(trained["output_dir"]) == [
      "O", "B-LOC", "B-MISC", "B-PER", "I-LOC"]


def test_predictions_keep_every_word_of_long_sentences(trained):
  gold = tagging.read_conll(os.path.join(trained["data_dir"], "test.txt"))
  predicted = tagging.read_conll(os.path.join(trained["output_dir"], "test_predictions.txt"))
  assert max(len(s.words) for s in gold) > 16
  assert [s.words for s in predicted] == [s.words for s in gold]
  with open(os.path.join(trained["output_dir"], "test_predictions.txt")) as reader:
    rows = [line.split() for line in reader if line.strip()]
  assert [row[1] for row in rows] == [tag for s in gold for tag in s.tags]
  evaluation = tagging.conll_evaluate([s.tags for s in gold], [s.tags for s in predicted])
  assert evaluation.overall.f1 > 90.0


def test_export_agrees_with_predict(trained):
  export_root = os.path.join(trained["root"], "export")
  assert os.listdir(export_root) == ["1"]
  serving = tf.saved_model.load(os.path.join(export_root, "1"))
  sentences = tagging.read_conll(os.path.join(trained["output_dir"], "test_predictions.txt"))
  texts = [" ".join(s.words) for s in sentences] + ["", "Alice  visited\tParis"]
  outputs = serving.signatures["serving_default"](text=tf.constant(texts))
  num_words = outputs["num_words"].numpy()
  tags = outputs["tags"].numpy()
  for row, sentence in enumerate(sentences):
    assert num_words[row] == len(sentence.words)
    assert [t.decode() for t in tags[row, :num_words[row]]] == sentence.tags
  assert num_words[-2] == 0 and num_words[-1] == 3
  assert [t.decode() for t in tags[-1, :3]] == ["B-PER", "O", "B-LOC"]
  assert [w.decode() for w in outputs["words"].numpy()[-1, :3]] == ["Alice", "visited", "Paris"]
  ids = serving.signatures["token_ids"](
      input_ids=tf.constant([[2, 5, 19, 7, 3]]), input_mask=tf.ones([1, 5], tf.int32),
      segment_ids=tf.zeros([1, 5], tf.int32))["tag_ids"].numpy()
  assert ids.shape == (1, 5) and ids[0, 1] == 3 and ids[0, 3] == 1  # alice B-PER, paris B-LOC


def test_eval_only_restores_the_trained_model_and_missing_file_is_named(trained):
  results_file = os.path.join(trained["output_dir"], "eval_results.txt")
  os.remove(results_file)
  result = subprocess.run(
      [sys.executable, "run_ner.py", "--do_eval", "--do_predict", "--test_file=missing.txt"] +
      trained["common"], cwd=REPO_ROOT, capture_output=True, text=True)
  # The missing test file is found before anything runs.
  assert result.returncode == 1 and "Traceback" not in result.stderr
  assert "missing.txt not found" in result.stderr.strip().splitlines()[-1]
  assert not os.path.exists(results_file)
  # Evaluation restores the latest checkpoint and the saved tag list.
  subprocess.run([sys.executable, "run_ner.py", "--do_eval"] + trained["common"], cwd=REPO_ROOT,
                 capture_output=True, text=True, check=True)
  assert float(_read_results(results_file)["eval_f1"]) > 0.95


def test_loss_ignores_non_first_sub_tokens():
  keras.utils.set_random_seed(0)  # Logits whose top two differ clearly at the labeled positions.
  config = modeling.BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16,
                               max_position_embeddings=8)
  task = tagging.TaggingTask(config, None, None, "", 8, tag_list=["O", "B-X", "I-X"])
  model = task.build_model()
  features = {"input_ids": np.array([[2, 5, 6, 7, 3, 0]], np.int32),
              "input_mask": np.array([[1, 1, 1, 1, 1, 0]], np.int32),
              "segment_ids": np.zeros((1, 6), np.int32),
              "label_ids": np.array([[-1, 2, -1, 1, -1, -1]], np.int32)}
  loss, metrics = task.loss(model, features, False)
  logits = model(features).numpy()[0]
  log_probs = logits - np.log(np.exp(logits).sum(-1, keepdims=True))
  np.testing.assert_allclose(float(loss), -(log_probs[1, 2] + log_probs[3, 1]) / 2, rtol=1e-5)
  expected_accuracy = ((logits[1].argmax() == 2) + (logits[3].argmax() == 1)) / 2
  np.testing.assert_allclose(float(metrics["word_accuracy"]), expected_accuracy)
  names = sorted(checkpoints.checkpoint_variables(model))
  assert "output_weights" in names and "output_bias" in names
  assert "bert/pooler/dense/kernel" in names  # saved, though not trained
  assert all(n.startswith("bert/") for n in names if not n.startswith("output_"))


def test_mixed_precision_gives_float32_logits():
  config = modeling.BertConfig(vocab_size=20, hidden_size=16, num_hidden_layers=1,
                               num_attention_heads=2, intermediate_size=16,
                               max_position_embeddings=8)
  features = {"input_ids": np.array([[2, 5, 6, 3]], np.int32),
              "input_mask": np.ones((1, 4), np.int32), "segment_ids": np.zeros((1, 4), np.int32)}
  reference = tagging.BertTagger(config, 3)
  reference.build()
  keras.mixed_precision.set_global_policy("mixed_bfloat16")
  try:
    model = tagging.BertTagger(config, 3)
    model.build()
    model.set_weights(reference.get_weights())
    logits = model(features)
  finally:
    keras.mixed_precision.set_global_policy("float32")
  assert logits.dtype == tf.float32 and model.output_weights.dtype == "float32"
  np.testing.assert_allclose(logits.numpy(), reference(features).numpy(), atol=0.05)


def test_doc_stride_windows_read_each_word_where_it_has_most_context(tmp_path):
  vocab = tmp_path / "vocab.txt"
  vocab.write_text("\n".join(_VOCAB) + "\n")
  tokenizer = tokenization.FullTokenizer(str(vocab), do_lower_case=True)
  # 7 one-piece words; windows of 4 pieces every 2: [0, 4), [2, 6), [4, 7). By hand, word p's
  # context min(left, right) + 0.01 * length: p=2 is 1.04 in window 0, 0.04 in window 1; p=3 is
  # 0.04 / 1.04; p=4 is 1.04 / 0.03; p=5 is 0.04 / 1.03. So windows 0, 1, 2 give words 0-2, 3-4,
  # 5-6.
  sentence = tagging.TaggedSentence("alice met bob in paris with london".split(),
                                    ["B-PER", "O", "B-PER", "O", "B-LOC", "O", "B-LOC"])
  tag_list = ["O", "B-LOC", "B-PER"]
  features = tagging.convert_sentences_to_features([sentence], tag_list, 6, tokenizer,
                                                   doc_stride=2)
  assert [(f.word_start, f.num_words, f.max_context) for f in features] == [
      (0, 4, [True, True, True, False]), (2, 4, [False, True, True, False]),
      (4, 3, [False, True, True])]
  # Every window trains on all its words' tags.
  assert features[1].input_ids == [2, 6, 21, 7, 22, 3]  # [CLS] bob in paris with [SEP]
  assert features[1].label_ids == [-1, 2, 0, 1, 0, -1]
  # Window w predicts tag id w everywhere: each word gets its max-context window's id.
  predictions = np.array([[w] * 6 for w in range(3)])
  assert tagging.words_tag_ids(features, predictions, [sentence]) == [[0, 0, 0, 1, 1, 2, 2]]
  # A 3-piece word (un ##aff ##able) cut by a window border keeps its tag on its first piece.
  sentence = tagging.TaggedSentence("alice unaffable bob".split(), ["B-PER", "B-MISC", "B-PER"])
  features = tagging.convert_sentences_to_features([sentence], ["O", "B-MISC", "B-PER"], 5,
                                                   tokenizer, doc_stride=2)
  # Pieces: alice un ##aff ##able bob; windows of 3 every 2: [0, 3), [2, 5).
  assert [f.label_ids for f in features] == [[-1, 2, 1, -1, -1], [-1, -1, -1, 2, -1]]
  assert [(f.word_start, f.num_words, f.max_context) for f in features] == [
      (0, 2, [True, True]), (2, 1, [True])]


def test_doc_stride_predict_and_export_restore_the_trained_model(trained, tmp_path):
  """run_ner --doc_stride on long test sentences (prediction only): overlapping windows tag as
  well, and the export's in-graph windows give the same tags."""
  output_dir = str(tmp_path / "out")
  os.makedirs(output_dir)
  for name in os.listdir(trained["output_dir"]):
    if name.startswith(("model.ckpt", "checkpoint", "tag_list")):
      os.link(os.path.join(trained["output_dir"], name), os.path.join(output_dir, name))
  common = list(trained["common"])
  common[common.index("--output_dir") + 1] = output_dir
  subprocess.run([sys.executable, "run_ner.py", "--do_predict", "--doc_stride=4",
                  "--export_dir", str(tmp_path / "export")] + common,
                 check=True, cwd=REPO_ROOT, capture_output=True)
  gold = tagging.read_conll(os.path.join(trained["data_dir"], "test.txt"))
  predicted = tagging.read_conll(os.path.join(output_dir, "test_predictions.txt"))
  assert [s.words for s in predicted] == [s.words for s in gold]
  evaluation = tagging.conll_evaluate([s.tags for s in gold], [s.tags for s in predicted])
  assert evaluation.overall.f1 > 90.0
  serving = tf.saved_model.load(str(tmp_path / "export" / "1"))
  outputs = serving.signatures["serving_default"](
      text=tf.constant([" ".join(s.words) for s in predicted]))
  tags = outputs["tags"].numpy()
  for row, sentence in enumerate(predicted):
    assert [t.decode() for t in tags[row, :len(sentence.words)]] == sentence.tags
