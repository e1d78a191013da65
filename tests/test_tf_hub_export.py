"""`extract_features.py --export_format=tf_hub`: TF Hub's BERT pair, used by its real consumers.

The pair is written by the script from a small random checkpoint, then used three ways:
- as TensorFlow's "Classify text with BERT" tutorial does (`tests/tf_hub_consumer.py`, a process
  with tensorflow_hub and tf_keras): preprocessor and encoder as `hub.KerasLayer`s, `tokenize`,
  `bert_pack_inputs`, and a classifier fine-tuned with `model.fit`;
- through TF's C++ SavedModel loader, as TF Serving loads them (`tests/cpp_serving_client.py`);
- in this process, for the SentencePiece preprocessor, the bfloat16 encoder and the edges of
  `bert_pack_inputs` (loaded with `tf.saved_model.load`, as `hub.load` does).
Every answer is checked against `modeling.BertModel` on `FullTokenizer`'s ids.
"""

import os
import re
import shutil
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from conftest import shared_path
from test_serving import ENGLISH
from test_serving import SYLLABLES
from test_serving import ids_inputs
from test_serving import padded_ids
from test_serving import run_client
from test_serving import run_cpp_client
from test_serving import texts_input
from test_serving import warmup_requests
from test_tokenization import train_sentencepiece
import checkpoints
import choices
import conversion
import conversion_model_garden
import errors
import feature_extraction
import modeling
import tokenization

pytestmark = [pytest.mark.slow, pytest.mark.serving, pytest.mark.reference]

CONSUMER = os.path.join(REPO_ROOT, "tests", "tf_hub_consumer.py")
# Pairs whose truncation differs: a long text with a short one (both ways), two long ones.
TEXTS = ENGLISH + ["Short one.", ENGLISH[3] + " and more"]
TEXTS_B = ENGLISH[::-1] + [ENGLISH[3], "tiny"]
SEQ_LENGTH = 16  # --max_seq_length: the preprocessor's default seq_length.
PACK_LENGTH = 12  # bert_pack_inputs' seq_length: most pairs are truncated.
TRAIN_TEXTS = ["a good film", "a bad film", "good and fun", "bad and dull", "really good",
               "really bad", "good story", "bad story"]


def bert_outputs(bert, features):
  """What the hub encoder must return for id features, as numpy arrays."""
  outputs = bert(features["input_ids"], input_mask=features["input_mask"],
                 token_type_ids=features["segment_ids"])
  return {"pooled_output": outputs["pooled_output"].numpy(),
          "sequence_output": outputs["sequence_output"].numpy(),
          "encoder_outputs": [layer.numpy() for layer in outputs["encoder_outputs"]]}


def word_pieces(tokenizer, text):
  """The original's pieces of every word: `basic_tokenizer` words, then WordPiece."""
  return [tokenizer.convert_tokens_to_ids(tokenizer.wordpiece_tokenizer.tokenize(word))
          for word in tokenizer.basic_tokenizer.tokenize(text)]


def hub_lists(features):
  """Our id features (numpy) as nested lists under TF Hub's names."""
  return feature_extraction.tf_hub_inputs({name: value.tolist() for name, value in features.items()})


def as_lists(tensors):
  """A dict of tensors as nested lists."""
  return {name: value.numpy().tolist() for name, value in tensors.items()}


@pytest.fixture(scope="module")
def hub_pair(tmp_path_factory):
  """The pair written by the script, the model it came from, and the answers of both consumers."""
  root = str(tmp_path_factory.mktemp("tf_hub"))
  keras.utils.set_random_seed(5)
  vocab_file = shared_path("fixtures", "uncased_vocab", "vocab.txt")
  tokenizer = tokenization.FullTokenizer(vocab_file, do_lower_case=True)
  config = modeling.BertConfig(vocab_size=len(tokenizer.vocab), hidden_size=32,
                               num_hidden_layers=2, num_attention_heads=4, intermediate_size=64,
                               max_position_embeddings=SEQ_LENGTH)
  bert = feature_extraction.build_bert(config)
  with open(os.path.join(root, "bert_config.json"), "w", encoding="utf-8") as writer:
    writer.write(config.to_json_string())
  checkpoints.save_checkpoint(bert, os.path.join(root, "bert_model.ckpt"))
  # Only the export: no --input_file, --output_file, nor --layers (whose default, the last four
  # layers, a 2-layer model lacks; TF Hub's encoder has every layer).
  script = subprocess.run(
      [sys.executable, "extract_features.py", "--vocab_file", vocab_file,
       "--bert_config_file", os.path.join(root, "bert_config.json"),
       "--init_checkpoint", os.path.join(root, "bert_model.ckpt"),
       "--max_seq_length=%d" % SEQ_LENGTH, "--export_dir", os.path.join(root, "hub"),
       "--export_format=tf_hub"], cwd=REPO_ROOT, capture_output=True, text=True)
  assert script.returncode == 0, script.stderr[-3000:]
  encoder_dir = os.path.join(root, "hub", choices.TF_HUB_ENCODER, "1")
  preprocessor_dir = os.path.join(root, "hub", choices.TF_HUB_PREPROCESSOR, "1")
  consumer = run_client(CONSUMER, root, {
      "encoder": encoder_dir, "preprocessor": preprocessor_dir, "texts": TEXTS,
      "texts_b": TEXTS_B, "seq_length": PACK_LENGTH, "train_texts": TRAIN_TEXTS,
      "train_labels": [1, 0] * (len(TRAIN_TEXTS) // 2), "epochs": 16})
  features = padded_ids(tokenizer, TEXTS, length=SEQ_LENGTH)
  hub_ids = feature_extraction.tf_hub_inputs(ids_inputs(features))
  served = run_cpp_client(root, [
      {"saved_model": encoder_dir, "requests": [
          {"signature": "serving_default", "inputs": hub_ids},
          {"signature": "serving_default", "inputs": {**hub_ids, "input_type_ids": {
              "dtype": "int32", "value": features["segment_ids"][:1].tolist()}}}] +
       warmup_requests(encoder_dir)},
      {"saved_model": preprocessor_dir, "requests": [
          {"signature": "serving_default", "inputs": {"text": texts_input(TEXTS)}}] +
       warmup_requests(preprocessor_dir)}])
  return {"tokenizer": tokenizer, "bert": bert, "features": features,
          "expected": bert_outputs(bert, features), "encoder_dir": encoder_dir,
          "preprocessor_dir": preprocessor_dir, "consumer": consumer, "served": served["jobs"]}


def assert_encoder_outputs(outputs, expected, what):
  """The hub encoder's outputs equal the model's, `default` its pooled_output, to 1e-5."""
  assert len(outputs["encoder_outputs"]) == len(expected["encoder_outputs"]) == 2, what
  for name, actual, wanted in [
      ("pooled_output", outputs["pooled_output"], expected["pooled_output"]),
      ("default", outputs["default"], expected["pooled_output"]),
      ("sequence_output", outputs["sequence_output"], expected["sequence_output"])] + [
          ("encoder_outputs[%d]" % i, layer, expected["encoder_outputs"][i])
          for i, layer in enumerate(outputs["encoder_outputs"])]:
    np.testing.assert_allclose(actual, wanted, atol=1e-5, err_msg="%s %s" % (what, name))


def test_hub_keras_layers_equal_the_model_on_full_tokenizer_ids(hub_pair):
  consumer, features = hub_pair["consumer"], hub_pair["features"]
  assert consumer["preprocessed"] == hub_lists(features)
  assert features["input_mask"].sum(axis=1).max() == SEQ_LENGTH  # Long texts cut at seq_length.
  assert_encoder_outputs(consumer["encoded"], hub_pair["expected"], "hub.KerasLayer")
  assert consumer["dropout_changes_outputs"]


def test_tokenize_and_bert_pack_inputs_give_full_tokenizer_pieces_and_truncation(hub_pair):
  """tokenize: the original's words and their pieces. bert_pack_inputs(a, b): FullTokenizer.encode,
  whose longest-first truncate_seq_pair keeps the lengths TF Hub's round robin keeps."""
  consumer, tokenizer = hub_pair["consumer"], hub_pair["tokenizer"]
  assert consumer["tokenized"] == [word_pieces(tokenizer, text) for text in TEXTS]
  expected = padded_ids(tokenizer, TEXTS, TEXTS_B, PACK_LENGTH)
  assert consumer["packed"] == hub_lists(expected)
  lengths = [(len(tokenizer.tokenize(a)), len(tokenizer.tokenize(b)))
             for a, b in zip(TEXTS, TEXTS_B)]
  budget = PACK_LENGTH - 3
  assert {"a longer", "b longer", "both long"} <= {
      "both long" if min(a, b) > budget // 2 else "a longer" if a > b else "b longer"
      for a, b in lengths if a + b > budget}
  assert consumer["packed_default_length"] == SEQ_LENGTH


def test_tutorial_classifier_fine_tunes_the_encoder(hub_pair):
  consumer = hub_pair["consumer"]
  assert consumer["trainable_weights"] == len(hub_pair["bert"].trainable_weights)
  assert consumer["max_weight_change"] > 1e-3
  # At this rate (Adam, 1e-2) the loss hovers near log(2) for 6 to 10 steps, then falls to
  # about 0.05 within three; with dropout on, a step's loss can jump, so the bar is the best of
  # the last three steps against the first.
  losses = consumer["losses"]
  assert min(losses[-3:]) < 0.5 * losses[0], losses


def test_cpp_loader_serves_both_handles(hub_pair):
  """Through TF's C++ loader, as TF Serving chains them: the preprocessor's `serving_default`
  (text -> TF Hub's three inputs) and the encoder's (those inputs, checked -> its outputs, every
  layer stacked), and both warmup files."""
  encoder_job, preprocessor_job = hub_pair["served"]
  features = hub_pair["features"]
  assert encoder_job["non_core_ops"] == []  # The encoder is the model only.
  assert preprocessor_job["non_core_ops"] == ["FastWordpieceTokenizeWithOffsets"]
  for job in (encoder_job, preprocessor_job):
    assert [name for name in job["signatures"] if not name.startswith("__")] == [
        "serving_default"]
  encoded, malformed = encoder_job["results"][:2]
  assert "input_type_ids has shape [1 16] but input_word_ids has [9 16]" in malformed["error"]
  for answer in [encoded] + encoder_job["results"][2:] + preprocessor_job["results"]:
    assert "error" not in answer, answer["error"]
  assert preprocessor_job["results"][0] == hub_lists(features)
  stacked = np.array(encoded["encoder_outputs"])
  assert stacked.shape[:2] == (len(TEXTS), 2)
  assert_encoder_outputs({**encoded, "encoder_outputs": list(np.moveaxis(stacked, 1, 0))},
                         hub_pair["expected"], "serving_default")


def test_encoder_keeps_the_vocab_and_casing_for_clients_that_tokenize(hub_pair):
  encoder = tf.saved_model.load(hub_pair["encoder_dir"])
  tokenizer = tokenization.FullTokenizer(encoder.vocab_file.asset_path.numpy().decode(),
                                         bool(encoder.do_lower_case.numpy()))
  assert tokenizer.vocab == hub_pair["tokenizer"].vocab and tokenizer.do_lower_case


def test_encoder_converts_back_to_its_model_config_and_casing(hub_pair):
  """What convert_checkpoint.py --tf_hub_model_path and run_classifier_with_tfhub.py read from
  the encoder: every weight, the config (kept as `bert_config`) and the vocab and casing."""
  model = conversion_model_garden.read_tf_hub_encoder(hub_pair["encoder_dir"])
  assert model.config.to_dict() == hub_pair["bert"].config.to_dict()
  assert model.do_lower_case is True and model.vocab.split() == list(hub_pair["tokenizer"].vocab)
  variables = checkpoints.checkpoint_variables(hub_pair["bert"])
  assert sorted(model.tensors) == sorted(variables)
  for name, variable in variables.items():
    np.testing.assert_array_equal(model.tensors[name], variable.numpy(), err_msg=name)
  with pytest.raises(conversion.ConversionError, match="holds no BERT encoder"):
    conversion_model_garden.read_tf_hub_encoder(hub_pair["preprocessor_dir"])


def test_sentencepiece_preprocessor_tokenizes_and_packs_as_full_tokenizer(tmp_path):
  """With a SentencePiece model tokenize gives [batch, (pieces)] (no words, as TF Hub's ALBERT
  preprocessors), which bert_pack_inputs and __call__ pack as FullTokenizer.encode does. (The
  module's functions, as saved; the WordPiece pair tests the save.)"""
  tokenizer = tokenization.FullTokenizer(None, do_lower_case=True,
                                         spm_model_file=train_sentencepiece(str(tmp_path)))
  preprocessor = feature_extraction.TfHubPreprocessorServing(tokenizer, 12).saved_attributes()
  texts, texts_b = tf.constant(SYLLABLES), tf.constant(SYLLABLES[::-1])
  tokenized = preprocessor["tokenize"](texts)
  assert tokenized.to_list() == [tokenizer.tokenize_to_ids(text) for text in SYLLABLES]
  packed = preprocessor["bert_pack_inputs"]([tokenized, preprocessor["tokenize"](texts_b)],
                                            seq_length=tf.constant(10))
  assert as_lists(packed) == hub_lists(padded_ids(tokenizer, SYLLABLES, SYLLABLES[::-1], 10))
  assert as_lists(preprocessor["__call__"](texts)) == hub_lists(
      padded_ids(tokenizer, SYLLABLES, length=12))


def test_bfloat16_encoder_computes_in_bfloat16_and_returns_float32(hub_pair):
  """--export_precision=bfloat16: __call__ runs its matmuls in bfloat16 and returns float32
  outputs close to the float32 model's."""
  call = feature_extraction.TfHubEncoderServing(
      feature_extraction.bert_in_precision(hub_pair["bert"], "bfloat16"), hub_pair["tokenizer"],
      SEQ_LENGTH).saved_attributes()["__call__"]
  inputs = feature_extraction.tf_hub_inputs(
      {name: tf.constant(value) for name, value in hub_pair["features"].items()})
  outputs = call(inputs)
  assert outputs["pooled_output"].dtype == tf.float32
  np.testing.assert_allclose(outputs["pooled_output"], hub_pair["expected"]["pooled_output"],
                             atol=0.05)
  graph = call.get_concrete_function(inputs).graph.as_graph_def()
  nodes = list(graph.node) + [node for function in graph.library.function
                              for node in function.node_def]
  assert tf.bfloat16.as_datatype_enum in {node.attr["T"].type for node in nodes
                                          if node.op in ("MatMul", "BatchMatMulV2")}


@pytest.fixture(scope="module")
def preprocessor(hub_pair):
  """The written preprocessor, loaded as `hub.load` loads it, for its Python API."""
  return tf.saved_model.load(hub_pair["preprocessor_dir"])


@pytest.mark.parametrize("seq_length", [0, 1, 2, -5])
def test_bert_pack_inputs_needs_room_for_cls_a_token_and_sep(preprocessor, seq_length):
  segments = [preprocessor.tokenize(tf.constant(["hello world"]))]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="seq_length is %d: it must be at least 3" % seq_length):
    preprocessor.bert_pack_inputs(segments, seq_length=tf.constant(seq_length))


def test_bert_pack_inputs_refuses_segments_of_other_batch_sizes(preprocessor):
  # Before, a RaggedConcat internal error that named neither segment (probe 23 case 53).
  segments = [preprocessor.tokenize(tf.constant(["a"])),
              preprocessor.tokenize(tf.constant(["b c", "d e f"]))]
  with pytest.raises(tf.errors.InvalidArgumentError,
                     match="bert_pack_inputs: the second segment has 2 rows but the first has 1"):
    preprocessor.bert_pack_inputs(segments, seq_length=tf.constant(12))


def test_bert_pack_inputs_at_seq_length_3_gives_cls_a_token_and_sep(preprocessor):
  segments = [preprocessor.tokenize(tf.constant(["hello world"]))]
  packed = preprocessor.bert_pack_inputs(segments, seq_length=tf.constant(3))
  hello = 7592  # "hello" in the uncased vocab.
  assert packed["input_word_ids"].numpy().tolist() == [[101, hello, 102]]
  assert packed["input_mask"].numpy().tolist() == [[1, 1, 1]]


def test_the_pair_is_exported_as_one_version_of_both(tmp_path, monkeypatch):
  """TF Serving serves the newest version of each directory, so the encoder and preprocessor of a
  version are published together: both are staged complete before either version is claimed (a
  kill once left encoder/2 of a new vocab beside preprocessor/1 of the old one), a failure while
  staging the preprocessor leaves no version, and a pair whose newest versions differ is refused
  before any work."""
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("".join(token + "\n" for token in
                                ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "film"]))
  tokenizer = tokenization.FullTokenizer(str(vocab_file), do_lower_case=True)
  bert = feature_extraction.build_bert(modeling.BertConfig(
      vocab_size=7, hidden_size=8, num_hidden_layers=1, num_attention_heads=2,
      intermediate_size=16, max_position_embeddings=8))
  export_dir = str(tmp_path / "hub")
  parts = [os.path.join(export_dir, name)
           for name in (choices.TF_HUB_ENCODER, choices.TF_HUB_PREPROCESSOR)]
  assert feature_extraction.export_tf_hub(export_dir, bert, tokenizer, 8) == tuple(
      os.path.join(part, "1") for part in parts)

  def fail(self):
    raise RuntimeError("the preprocessor failed")

  monkeypatch.setattr(feature_extraction.TfHubPreprocessorServing, "signatures", fail)
  with pytest.raises(RuntimeError, match="the preprocessor failed"):
    feature_extraction.export_tf_hub(export_dir, bert, tokenizer, 8)
  assert [sorted(os.listdir(part)) for part in parts] == [["1"], ["1"]]  # No staging left.
  monkeypatch.undo()
  shutil.copytree(os.path.join(parts[0], "1"), os.path.join(parts[0], "2"))  # An unpaired one.
  expected = "%s has no version 2 beside %s/2" % (parts[1], parts[0])
  with pytest.raises(errors.InputError, match=re.escape(expected)):
    feature_extraction.check_tf_hub_export_dir(export_dir)
  with pytest.raises(errors.InputError, match=re.escape(expected)):
    feature_extraction.export_tf_hub(export_dir, bert, tokenizer, 8)
  assert [sorted(os.listdir(part)) for part in parts] == [["1", "2"], ["1"]]
