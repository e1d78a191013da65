"""Tests for extract_features.py: the original's JSON layout, values, layer indexes, pairs."""
import json
import os
import subprocess
import sys

import numpy as np
import pytest

from conftest import write_model_files
import checkpoints
import extract_features
import feature_extraction
import modeling
import tokenization

pytestmark = pytest.mark.slow

_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "on", "mat", "un",
          "##aff", "##able", "dog", "a", ".", ",", "is", "it"]
_LINES = ["The cat sat on the mat.", "a dog ||| it is unaffable", "", "cat", "the dog, the cat."]


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
  """A tiny random BERT saved as a Google-format checkpoint, with its config and vocab."""
  directory = str(tmp_path_factory.mktemp("bert"))
  config = modeling.BertConfig(vocab_size=len(_VOCAB), hidden_size=16, num_hidden_layers=3,
                               num_attention_heads=2, intermediate_size=32,
                               max_position_embeddings=32)
  write_model_files(directory, config, _VOCAB)
  bert = modeling.BertModel(config, name="bert")
  bert.build()
  checkpoints.save_checkpoint(bert, os.path.join(directory, "bert_model.ckpt"))
  with open(os.path.join(directory, "input.txt"), "w") as writer:
    writer.write("\n".join(_LINES) + "\n")
  return directory


@pytest.fixture(scope="module")
def bert(model_dir):
  config = modeling.BertConfig.from_json_file(os.path.join(model_dir, "bert_config.json"))
  model = modeling.BertModel(config, name="bert")
  model.build()
  checkpoints.init_from_checkpoint(model, os.path.join(model_dir, "bert_model.ckpt"))
  return model


@pytest.fixture(scope="module")
def tokenizer(model_dir):
  return tokenization.FullTokenizer(os.path.join(model_dir, "vocab.txt"), do_lower_case=True)


def _direct(bert, tokenizer, line):
  """Tokens and every encoder layer [layers, T, H] of one line, by a direct model call."""
  text_a, text_b = (line.split(" ||| ") + [None])[:2]
  tokens_a = tokenizer.tokenize(text_a)
  tokens_b = tokenizer.tokenize(text_b) if text_b else []
  tokens = ["[CLS]"] + tokens_a + ["[SEP]"] + (tokens_b + ["[SEP]"] if tokens_b else [])
  segments = [0] * (len(tokens_a) + 2) + [1] * (len(tokens) - len(tokens_a) - 2)
  ids = np.array([tokenizer.convert_tokens_to_ids(tokens)], np.int32)
  outputs = bert(ids, input_mask=np.ones_like(ids), token_type_ids=np.array([segments], np.int32))
  return tokens, np.stack([np.asarray(layer)[0] for layer in outputs["encoder_outputs"]])


def test_cli_writes_the_original_json_layout_and_values(model_dir, bert, tokenizer, tmp_path):
  output_file = os.path.join(str(tmp_path), "features.jsonl")
  subprocess.run(
      [sys.executable, "extract_features.py", "--input_file", os.path.join(model_dir, "input.txt"),
       "--output_file", output_file, "--vocab_file", os.path.join(model_dir, "vocab.txt"),
       "--bert_config_file", os.path.join(model_dir, "bert_config.json"),
       "--init_checkpoint", os.path.join(model_dir, "bert_model.ckpt"), "--layers=-1,0,-2",
       "--batch_size=2", "--max_seq_length=16", "--export_dir", str(tmp_path / "export")],
      check=True, cwd=os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
      capture_output=True)
  with open(output_file) as reader:
    lines = reader.read().splitlines()
  assert len(lines) == len(_LINES)
  for index, (line, text) in enumerate(zip(lines, _LINES)):
    assert line.startswith('{"linex_index": %d, "features": [{"token": "[CLS]", "layers": '
                           '[{"index": -1, "values": [' % index)
    record = json.loads(line)
    assert list(record) == ["linex_index", "features"]
    tokens, layers = _direct(bert, tokenizer, text)
    assert [f["token"] for f in record["features"]] == tokens
    for position, feature in enumerate(record["features"]):
      assert list(feature) == ["token", "layers"]
      assert [layer["index"] for layer in feature["layers"]] == [-1, 0, -2]
      for entry, layer_index in zip(feature["layers"], [-1, 0, -2]):
        assert list(entry) == ["index", "values"]
        values = entry["values"]
        assert all(round(v, 6) == v for v in values)
        np.testing.assert_allclose(values, layers[layer_index][position], atol=2e-6)
  pair = json.loads(lines[1])
  assert [f["token"] for f in pair["features"]] == [
      "[CLS]", "a", "dog", "[SEP]", "it", "is", "un", "##aff", "##able", "[SEP]"]
  assert [f["token"] for f in json.loads(lines[2])["features"]] == ["[CLS]", "[SEP]"]

  # --export_dir: the same run's encoder as a SavedModel; sequence_output = the layers concatenated.
  import tensorflow as tf  # pylint: disable=g-import-not-at-top
  serve = tf.saved_model.load(str(tmp_path / "export" / "1")).signatures["serving_default"]
  served = serve(text=tf.constant([_LINES[0], _LINES[3]]))
  for row, index in enumerate((0, 3)):
    features = json.loads(lines[index])["features"]
    expected = [np.concatenate([layer["values"] for layer in f["layers"]]) for f in features]
    assert served["input_mask"][row].numpy().sum() == len(features)
    np.testing.assert_allclose(served["sequence_output"][row, :len(features)], expected, atol=1e-5)
  assert served["pooled_output"].shape == (2, 16)  # --pooling=none: BERT's pooler output.


def test_parse_line_pairs():
  assert feature_extraction.parse_line("a b\n") == ("a b", None)
  assert feature_extraction.parse_line("a ||| b ||| c") == ("a ||| b", "c")
  assert feature_extraction.parse_line("a|||b") == ("a|||b", None)


def test_truncation_as_the_original(tokenizer):
  tokens, segments = feature_extraction.example_tokens(tokenizer, "the cat sat on the mat", None, 5)
  assert tokens == ["[CLS]", "the", "cat", "sat", "[SEP]"] and segments == [0] * 5
  tokens, segments = feature_extraction.example_tokens(tokenizer, "the cat sat on", "a dog", 8)
  assert tokens == ["[CLS]", "the", "cat", "sat", "[SEP]", "a", "dog", "[SEP]"]
  assert segments == [0, 0, 0, 0, 0, 1, 1, 1]


def test_layer_indexes_are_checked():
  assert feature_extraction.parse_layer_indexes("-1,-3,0,2", 3) == [-1, -3, 0, 2]
  with pytest.raises(ValueError, match="index -4"):
    feature_extraction.parse_layer_indexes("-1,-4", 3)
  with pytest.raises(ValueError, match="`layers`"):
    feature_extraction.parse_layer_indexes("last", 3)


@pytest.mark.parametrize("pooling", ["cls", "mean"])
def test_pooled_vectors_and_npz(bert, tokenizer, tmp_path, pooling):
  extractor = feature_extraction.FeatureExtractor(bert, [-1, 1], pooling)
  batches = feature_extraction.read_batches(_LINES, tokenizer, 16, 3)
  output_dir = os.path.join(str(tmp_path), "npz")
  assert feature_extraction.extract(extractor, batches, output_dir, "npz") == len(_LINES)
  files = sorted(os.listdir(output_dir))
  assert files == ["features-00000.npz", "features-00001.npz"]
  extract_features.check_npz_output(output_dir)  # Its own earlier output: replaceable.
  pooled = []
  for name in files:
    with np.load(os.path.join(output_dir, name)) as arrays:
      pooled.extend(arrays["pooled"])
      np.testing.assert_array_equal(arrays["layer_indexes"], [-1, 1])
  assert len(pooled) == len(_LINES)
  for text, vectors in zip(_LINES, pooled):
    _, layers = _direct(bert, tokenizer, text)
    expected = layers[[-1, 1], 0] if pooling == "cls" else layers[[-1, 1]].mean(axis=1)
    np.testing.assert_allclose(vectors, expected, atol=2e-6)


def test_pooled_json_and_per_token_npz(bert, tokenizer, tmp_path):
  extractor = feature_extraction.FeatureExtractor(bert, [-1], "mean")
  output_file = os.path.join(str(tmp_path), "pooled.jsonl")
  feature_extraction.extract(extractor, feature_extraction.read_batches(_LINES[:2], tokenizer, 16, 8),
                           output_file, "jsonl")
  with open(output_file) as reader:
    records = [json.loads(line) for line in reader]
  assert [list(r) for r in records] == [["linex_index", "pooled"]] * 2
  _, layers = _direct(bert, tokenizer, _LINES[1])
  np.testing.assert_allclose(records[1]["pooled"][0]["values"], layers[-1].mean(axis=0), atol=2e-6)

  extractor = feature_extraction.FeatureExtractor(bert, [-2], "none")
  output_dir = os.path.join(str(tmp_path), "tokens")
  feature_extraction.extract(extractor, feature_extraction.read_batches(_LINES[:2], tokenizer, 16, 8),
                           output_dir, "npz")
  with np.load(os.path.join(output_dir, "features-00000.npz")) as arrays:
    np.testing.assert_array_equal(arrays["linex_index"], [0, 1])
    length = int(arrays["input_mask"][1].sum())
    tokens, layers = _direct(bert, tokenizer, _LINES[1])
    assert length == len(tokens)
    assert arrays["layers"].shape[:2] == (2, 1)
    np.testing.assert_allclose(arrays["layers"][1, 0, :length], layers[-2], atol=2e-6)


def test_prefetch_keeps_order_and_raises_producer_errors():
  assert list(feature_extraction.prefetch(iter(range(10)), depth=2)) == list(range(10))

  def failing():
    yield 1
    raise ValueError("bad line 2")

  items = feature_extraction.prefetch(failing())
  assert next(items) == 1
  with pytest.raises(ValueError, match="bad line 2"):
    next(items)
