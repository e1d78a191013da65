"""Every export served the way TF Serving serves it: TF's C++ SavedModel loader, in a fresh process.

The path: `tests/cpp_serving_client.py`, run in a fresh process whose imports include neither
tensorflow_text nor the project. It registers tensorflow-text's ops from the op libraries inside
the installed tensorflow_text package with `tf.load_op_library` (as the model server links them)
and loads every SavedModel with TF's C API `TF_LoadSessionFromSavedModel` from the wheel's
`libtensorflow_cc.so.2` through ctypes (C++ `LoadSavedModel`, behind TF Serving's
`SavedModelBundle`), then runs the signatures with `TF_SessionRun`.

Before the fix in `export.serving_root`, this path reproduced the reported failure on our exports:
they loaded, and then every signature call (`serving_default` and `token_ids`) failed with
FAILED_PRECONDITION "Could not find variable bert_classifier/bert/pooler/dense/bias" (likewise
`squad_model/...`, `bert_tagger/...`), while `tf.saved_model.load` in Python worked.

Here the classifier, NER and SQuAD exports, each with a WordPiece vocab and with a SentencePiece
model, plus the feature-extraction encoder export, are built from small random models; one
subprocess answers every request of every export, and also every request of the exports'
`assets.extra/tf_serving_warmup_requests`, parsed with TF Serving's own `prediction_log_pb2`.
"""

import functools
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

from conftest import REPO_ROOT
from conftest import shared_path
import classifier
import classifier_data
import distribution
import evaluation
import export
import feature_extraction
import in_graph_tokenization
import modeling
import squad
import squad_data
import tagging
import text_pairs
import tokenization
from test_tokenization import train_sentencepiece

pytestmark = [pytest.mark.slow, pytest.mark.serving]

CLIENT = os.path.join(REPO_ROOT, "tests", "cpp_serving_client.py")
MAX_SEQ_LENGTH = 48
ENGLISH = ["Héllo, WORLD! The café's naïve owner.", "東京 is big; isn't it?", "",
           "a very long sentence about cats and dogs " * 6, "Odd\u3000and\u00a0wide spaces",
           "The quick brown fox.", "Jumps over the lazy dog?"]
SYLLABLES = ["karitomen sun", "한국어 데이터 é ль", "", "kato rimen " * 12, "SUN Ka  to",
             "tomen", "데이 ka ri"]


def tiny_config(vocab_size: int) -> modeling.BertConfig:
  """One layer and a wide initializer, so random models give clearly different outputs."""
  return modeling.BertConfig(vocab_size=vocab_size, hidden_size=32, num_hidden_layers=1,
                             num_attention_heads=4, intermediate_size=64,
                             max_position_embeddings=MAX_SEQ_LENGTH, initializer_range=0.3)


def texts_input(texts):
  return {"dtype": "string", "value": list(texts)}


def ids_inputs(features):
  return {name: {"dtype": "int32", "value": np.asarray(features[name]).tolist()}
          for name in export.ID_INPUTS}


def padded_ids(tokenizer, texts_a, texts_b=None, length=MAX_SEQ_LENGTH):
  """do_predict's features: FullTokenizer.encode padded to length."""
  rows = [tokenizer.encode(a, None if texts_b is None else texts_b[i], length)
          for i, a in enumerate(texts_a)]
  return {name: np.array([row[k] for row in rows], np.int32)
          for k, name in enumerate(export.ID_INPUTS)}


def classifier_export(root, tokenizer, texts, pair):
  """A classifier export; expected outputs are do_predict's: the model on padded features."""
  processor = classifier_data.get_processor("mnli" if pair else "sst-2")
  model = classifier.BertClassifier(tiny_config(len(tokenizer.vocab)),
                                    len(processor.get_labels()))
  model.build()
  task = classifier.ClassifierTask(model.config, processor, tokenizer, None, root, MAX_SEQ_LENGTH)
  path = task.export(model, root)
  texts_b = texts[::-1] if pair else None
  features = padded_ids(tokenizer, texts, texts_b)
  probabilities = tf.nn.softmax(model(features)).numpy()
  text_inputs = {"text_a": texts_input(texts)}
  if pair:
    text_inputs["text_b"] = texts_input(texts_b)
  expected = {"probabilities": probabilities,
              "label": [processor.get_labels()[i] for i in probabilities.argmax(1)]}
  return path, [("serving_default", text_inputs, expected),
                ("token_ids", ids_inputs(features), {"probabilities": probabilities})]


def windowed_classifier_export(root, tokenizer, texts):
  """A pair classifier with --doc_stride=16 and max aggregation; expected outputs are
  do_predict's: the model on each text's windows (`window_inputs`), the max over them."""
  processor = classifier_data.get_processor("mnli")
  model = classifier.BertClassifier(tiny_config(len(tokenizer.vocab)), 3)
  model.build()
  task = classifier.ClassifierTask(model.config, processor, tokenizer, None, root, MAX_SEQ_LENGTH,
                                   doc_stride=16, window_aggregation="max")
  path = task.export(model, root)
  texts_b = ["Short.", "", "two words"] + texts[3:][::-1]
  logits = []
  for text_a, text_b in zip(texts, texts_b):
    windows = text_pairs.window_inputs(tokenizer, text_a, text_b, MAX_SEQ_LENGTH, 16)
    features = {name: np.array([w[k] for w in windows], np.int32)
                for k, name in enumerate(export.ID_INPUTS)}
    logits.append(model(features).numpy().max(axis=0))
  assert max(len(text_pairs.window_inputs(tokenizer, a, b, MAX_SEQ_LENGTH, 16))
             for a, b in zip(texts, texts_b)) >= 2
  probabilities = tf.nn.softmax(np.array(logits)).numpy()
  expected = {"logits": np.array(logits), "probabilities": probabilities,
              "label": [processor.get_labels()[i] for i in probabilities.argmax(1)]}
  return path, [("serving_default", {"text_a": texts_input(texts), "text_b": texts_input(texts_b)},
                 expected)]


def multi_label_classifier_export(root, tokenizer, texts):
  """A multi-label classifier: per-label sigmoid probabilities and the labels above 0.5."""
  processor = classifier_data.GenericProcessor(label_delimiter=",")
  processor.labels = ("x", "y", "z")
  model = classifier.BertClassifier(tiny_config(len(tokenizer.vocab)), 3)
  model.build()
  task = classifier.ClassifierTask(model.config, processor, tokenizer, None, root, MAX_SEQ_LENGTH)
  path = task.export(model, root)
  features = padded_ids(tokenizer, texts)
  probabilities = 1 / (1 + np.exp(-model(features).numpy().astype(np.float64)))
  labels = [[n for n, p in zip("xyz", row) if p > 0.5] for row in probabilities]
  assert len(set(map(tuple, labels))) > 1  # Random weights that choose differently per text.
  expected = {"probabilities": probabilities, "labels": [row + [""] * (3 - len(row))
                                                          for row in labels]}
  return path, [("serving_default", {"text_a": texts_input(texts)}, expected),
                ("token_ids", ids_inputs(features), expected)]


def tagger_export(root, tokenizer, texts, doc_stride=None):
  """An NER export; expected tags are run_ner's prediction path (windows, first sub-tokens;
  with `doc_stride`, each word from its max-context window)."""
  tag_list = ["O", "B-LOC", "B-PER", "I-PER"]
  task = tagging.TaggingTask(tiny_config(len(tokenizer.vocab)), tokenizer, None, root,
                             MAX_SEQ_LENGTH, tag_list=tag_list, doc_stride=doc_stride)
  model = task.build_model()
  path = task.export(model, root)
  sentences = [tagging.TaggedSentence(text.split(), None) for text in texts]
  features = tagging.convert_sentences_to_features(sentences, tag_list, MAX_SEQ_LENGTH, tokenizer,
                                                   doc_stride)
  outputs = evaluation.predict(distribution.make_strategy("one_device"), model,
                               task.predict_outputs, tagging.features_dataset(features), 4)
  tags = [[tag_list[i] for i in ids]
          for ids in tagging.words_tag_ids(features, outputs["tag_ids"], sentences)]
  longest = max(len(row) for row in tags)
  window = tagging.features_to_arrays(features[:2])
  # The packed export reads no padding: -1 there.
  position_tag_ids = np.where(window["input_mask"] != 0,
                              tagging.predict_tag_ids(model, window).numpy(), -1)
  return path, [
      ("serving_default", {"text": texts_input(texts)},
       {"tags": [row + [""] * (longest - len(row)) for row in tags]}),
      ("token_ids", ids_inputs(window), {"tag_ids": position_tag_ids})]


def squad_export(root, tokenizer, questions, contexts):
  """A SQuAD export; expected answers are do_predict's (`SquadTask.predictions`, its default
  bucketed path) on the same questions and contexts, which span several windows of 48
  sub-tokens every 16."""
  options = squad_data.SquadOptions(max_seq_length=MAX_SEQ_LENGTH, doc_stride=16,
                                    max_query_length=12, n_best_size=20, max_answer_length=10)
  predict_file = os.path.join(root, "predict.json")
  os.makedirs(root, exist_ok=True)
  with open(predict_file, "w", encoding="utf-8") as writer:
    json.dump({"version": "1.1", "data": [{"title": "t", "paragraphs": [
        {"context": context, "qas": [{"id": str(i), "question": question, "answers": []}]}
        for i, (question, context) in enumerate(zip(questions, contexts))]}]}, writer)
  task = squad.SquadTask(tiny_config(len(tokenizer.vocab)), tokenizer, options, root,
                         predict_file=predict_file)
  model = task.build_model()
  path = task.export(model, root)
  predictions, _ = task.predictions(distribution.make_strategy("one_device"), model, 8)
  answers = [predictions[str(i)] for i in range(len(questions))]
  answers = ["" if answer == "empty" else answer for answer in answers]
  assert sum(1 for answer in answers if answer) > len(answers) // 2  # Real spans, mostly.
  with open(predict_file, encoding="utf-8") as reader:
    examples, _ = squad_data.examples_from_data(json.load(reader)["data"], is_training=False)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, MAX_SEQ_LENGTH,
                                                          16, 12, is_training=False))
  assert len(features) >= 3 * len(examples)  # Every answer is chosen among several windows.
  ids = {name: np.array([getattr(f, name) for f in features[:4]], np.int32)
         for name in export.ID_INPUTS}
  logits = model(ids)
  return path, [
      ("serving_default", {"question": texts_input(questions), "context": texts_input(contexts)},
       {"answer": answers}),
      ("token_ids", ids_inputs(ids), {name: logits[name].numpy()
                                      for name in ("start_logits", "end_logits")})]


def real_squad_questions(count):
  """Questions of ../shared's SQuAD articles with their contexts (paragraphs of 100-300 words:
  several windows each at MAX_SEQ_LENGTH)."""
  with open(shared_path("squad", "squad_v1.1_dev_part_a.json"), encoding="utf-8") as reader:
    articles = json.load(reader)["data"]
  pairs = [(qa["question"], paragraph["context"]) for article in articles
           for paragraph in article["paragraphs"] for qa in paragraph["qas"][:1]]
  return [question for question, _ in pairs[:count]], [context for _, context in pairs[:count]]


def bfloat16_classifier_export(root, tokenizer, texts):
  """A classifier exported with --export_precision=bfloat16; returns its requests (checked like
  every export's) and what the float32 model gives for them, which bfloat16 approximates."""
  processor = classifier_data.get_processor("sst-2")
  model = classifier.BertClassifier(tiny_config(len(tokenizer.vocab)), 2)
  model.build()
  task = classifier.ClassifierTask(model.config, processor, tokenizer, None, root, MAX_SEQ_LENGTH)
  path = task.export(model, root, "bfloat16")
  features = padded_ids(tokenizer, texts)
  float32 = {"probabilities": tf.nn.softmax(model(features)).numpy()}
  return (path, [("serving_default", {"text_a": texts_input(texts)}, {}),
                 ("token_ids", ids_inputs(features), {})]), [float32, float32]


def encoder_export(root, tokenizer, texts):
  """An extract_features export (--layers=-1,0 --pooling=mean) and the same run's JSON Lines.

  Returns the export's requests and, per text request, the JSON Lines values it must give:
  (tokens per row, [rows][tokens, layers * H] per-token values, [rows, layers * H] pooled).
  """
  bert = modeling.BertModel(tiny_config(len(tokenizer.vocab)), name="bert")
  bert.build()
  layer_indexes = [-1, 0]
  extractor = feature_extraction.FeatureExtractor(bert, layer_indexes, "mean")
  path = feature_extraction.export_encoder(root, extractor, tokenizer, MAX_SEQ_LENGTH)
  # A line cannot hold an empty text_a with a text_b: those rows get no text_b.
  texts_b = [b if a else "" for a, b in zip(texts, texts[::-1])]
  texts_b[1] = "\u200b"  # No tokens: encoded as a single text, as a line without " ||| ".
  lines = [a if not b else "%s ||| %s" % (a, b) for a, b in zip(texts, texts_b)]

  def json_lines(lines, pooling):
    output_file = os.path.join(root, "features-%s.jsonl" % pooling)
    feature_extraction.extract(
        feature_extraction.FeatureExtractor(bert, layer_indexes, pooling),
        feature_extraction.read_batches(lines, tokenizer, MAX_SEQ_LENGTH, 3), output_file, "jsonl")
    with open(output_file, encoding="utf-8") as reader:
      return [json.loads(line) for line in reader]

  def values(lines):
    per_token = [[np.concatenate([layer["values"] for layer in feature["layers"]])
                  for feature in record["features"]] for record in json_lines(lines, "none")]
    pooled = [np.concatenate([layer["values"] for layer in record["pooled"]])
              for record in json_lines(lines, "mean")]
    return [np.array(rows) for rows in per_token], np.array(pooled)

  batch = next(feature_extraction.read_batches(texts, tokenizer, MAX_SEQ_LENGTH, len(texts)))
  ids = {"input_ids": batch.input_ids, "input_mask": batch.input_mask,
         "segment_ids": batch.segment_ids}
  requests = [("serving_default", {"text": texts_input(texts)}, {}),
              ("text_pair", {"text": texts_input(texts), "text_b": texts_input(texts_b)}, {}),
              ("token_ids", ids_inputs(ids), {})]
  return path, requests, [values(texts), values(lines), values(texts)]


# Exports whose first request, a batch of texts of very different lengths, is also sent with one
# text changed (CHANGED_ROW) and as its first text alone (`packing_requests`).
PACKED_EXPORTS = ("classifier_wordpiece", "ner_wordpiece", "encoder_wordpiece")
CHANGED_ROW = 3  # ENGLISH's longest text: changing it also changes the request's padded length.


def packing_requests(request):
  """The text request `request` with CHANGED_ROW's texts replaced, and its first row alone."""
  signature, inputs, _ = request
  changed = {name: texts_input([text if row != CHANGED_ROW else "ka" for row, text in
                                enumerate(spec["value"])]) for name, spec in inputs.items()}
  alone = {name: texts_input(spec["value"][:1]) for name, spec in inputs.items()}
  return [(signature, changed, {}), (signature, alone, {})]


@pytest.fixture(scope="module")
def served(tmp_path_factory):
  """Builds every export, then serves all requests in one C++-loader subprocess."""
  root = tmp_path_factory.mktemp("serving")
  keras.utils.set_random_seed(3)
  wordpiece = tokenization.FullTokenizer(shared_path("fixtures", "uncased_vocab", "vocab.txt"),
                                         do_lower_case=True)
  spm_file = train_sentencepiece(str(root))
  sentencepiece = tokenization.FullTokenizer(None, do_lower_case=True, spm_model_file=spm_file)
  questions = ["Who sold the café?", "Where is 東京?", "what dogs", "Why?", "ka to", "sun", "ль"]
  exports = {
      "classifier_wordpiece": classifier_export(str(root / "c1"), wordpiece, ENGLISH, pair=True),
      "classifier_sentencepiece": classifier_export(str(root / "c2"), sentencepiece, SYLLABLES,
                                                    pair=False),
      "classifier_windowed": windowed_classifier_export(str(root / "c3"), wordpiece, ENGLISH),
      "classifier_multi_label": multi_label_classifier_export(str(root / "c4"), wordpiece,
                                                              ENGLISH),
      "ner_wordpiece": tagger_export(str(root / "n1"), wordpiece, ENGLISH),
      "ner_sentencepiece": tagger_export(str(root / "n2"), sentencepiece, SYLLABLES),
      "ner_windowed": tagger_export(str(root / "n3"), wordpiece,
                                    ENGLISH + [" ".join(ENGLISH * 3)], doc_stride=10),
      "squad_wordpiece": squad_export(str(root / "s1"), wordpiece, *real_squad_questions(60)),
      "squad_sentencepiece": squad_export(str(root / "s2"), sentencepiece, questions[::-1],
                                          [" ".join([text or "ka"] * 12) for text in SYLLABLES]),
  }
  exports["classifier_bfloat16"], bfloat16_float32_outputs = bfloat16_classifier_export(
      str(root / "c5"), wordpiece, ENGLISH)
  encoder_path, encoder_requests, json_values = encoder_export(str(root / "e1"), wordpiece,
                                                               ENGLISH)
  exports["encoder_wordpiece"] = (encoder_path, encoder_requests)
  for name in PACKED_EXPORTS:  # Packing's requests: a text changed, a text alone.
    exports[name][1].extend(packing_requests(exports[name][1][0]))
  for _, requests in exports.values():  # A request of no rows: every output has none.
    signature, inputs, _ = requests[0]
    requests.append((signature, {name: texts_input([]) for name in inputs}, {}))
  malformed = {name: malformed_requests(name) for name in exports}
  jobs = [{"saved_model": path, "requests": [
      {"signature": signature, "inputs": inputs} for signature, inputs, _ in requests] +
            warmup_requests(path) + [request for _, request in malformed[name]]}
          for name, (path, requests) in exports.items()]
  results = run_cpp_client(str(root), jobs)
  # Per export: its path, its requests with expected outputs, the C++ answers to those requests,
  # the answers to its warmup requests, and (message, answer) of each malformed request.
  exports_served = {}
  for (name, (path, requests)), job in zip(exports.items(), results["jobs"]):
    answers = job["results"]
    num_warmup = len(answers) - len(requests) - len(malformed[name])
    exports_served[name] = (
        path, requests, answers[:len(requests)], answers[len(requests):][:num_warmup],
        job["signatures"], [(message, answer) for (message, _), answer in zip(
            malformed[name], answers[len(requests) + num_warmup:])])
  return {"modules": results["modules"], "encoder_json_values": json_values,
          "bfloat16_float32_outputs": bfloat16_float32_outputs,
          "non_core_ops": {name: job["non_core_ops"]
                           for name, job in zip(exports, results["jobs"])},
          "exports": exports_served}


def run_client(script: str, root: str, request) -> dict:
  """Runs a client script (`script request.json result.json`) on a request in a fresh process
  without the project on its path; its result, parsed. The files go to root, named after it."""
  name = os.path.splitext(os.path.basename(script))[0]
  request_file, result_file = (os.path.join(root, name + "_request.json"),
                               os.path.join(root, name + "_result.json"))
  with open(request_file, "w", encoding="utf-8") as writer:
    json.dump(request, writer)
  completed = subprocess.run([sys.executable, script, request_file, result_file],
                             capture_output=True, text=True, cwd=root, timeout=300,
                             env=dict(os.environ, PYTHONPATH="", TF_CPP_MIN_LOG_LEVEL="2"))
  assert completed.returncode == 0, completed.stderr[-3000:]
  with open(result_file, encoding="utf-8") as reader:
    return json.load(reader)


def run_cpp_client(root: str, jobs: list) -> dict:
  """Runs `cpp_serving_client.py` on jobs in a fresh process; its results, parsed."""
  return run_client(CLIENT, root, jobs)


def malformed_requests(name: str) -> list:
  """Requests a client bug makes, for an export of EXPORTS, each with what its error must say.

  Every token_ids signature checks shapes, mask values and negative ids; SQuAD's also knows its
  model's sizes. Text signatures built by export.py or squad.py check batch sizes and size.
  """
  ids = np.array([[2, 7, 8, 3, 0], [2, 9, 3, 0, 0]], np.int32)
  mask, segments = (ids > 0).astype(np.int32), np.zeros_like(ids)

  def token_ids(input_ids=ids, input_mask=mask, segment_ids=segments):
    return {"signature": "token_ids", "inputs": ids_inputs(
        dict(zip(export.ID_INPUTS, (input_ids, input_mask, segment_ids))))}

  requests = [
      ("segment_ids has shape [1 5] but input_ids has [2 5]", token_ids(segment_ids=segments[:1])),
      ("input_mask has shape [2 4] but input_ids has [2 5]", token_ids(input_mask=mask[:, :4])),
      ("input_mask holds values from 0 to 2", token_ids(input_mask=mask * 2)),
      ("input_ids holds values from -1 to 9", token_ids(input_ids=ids - (ids == 0)))]
  if name.startswith("squad"):  # SquadTask.export gives ids_signature the model's config.
    requests += [
        ("segment_ids holds values from 0 to 16: segment ids must be in "
         "[0, type_vocab_size = 16)", token_ids(segment_ids=mask * 16)),  # tiny_config's 16.
        ("input_ids has length %d: the model takes 1 to max_position_embeddings = %d positions"
         % (MAX_SEQ_LENGTH + 1, MAX_SEQ_LENGTH),
         token_ids(*[np.pad(x, [[0, 0], [0, MAX_SEQ_LENGTH - 4]]) for x in (ids, mask, segments)]))]
  if name == "squad_wordpiece":
    vocab_size = 30522  # The uncased vocab's.
    requests.append(("input_ids holds values from 0 to %d: token ids must be in "
                     "[0, vocab_size = %d)" % (vocab_size, vocab_size),
                     token_ids(input_ids=np.where(ids == 9, vocab_size, ids))))
  paired_inputs = {"classifier_wordpiece": ("text_a", "text_b"),
                   "encoder_wordpiece": ("text", "text_b"),
                   "squad_wordpiece": ("context", "question"),
                   "squad_sentencepiece": ("context", "question")}
  if name in paired_inputs:
    first, second = paired_inputs[name]
    signature = "text_pair" if name.startswith("encoder") else "serving_default"
    requests += [
        ("%s has 3 rows but %s has 2: text inputs are matched row by row" % (second, first),
         {"signature": signature, "inputs": {first: texts_input(["a b", "c"]),
                                             second: texts_input(["d", "e", "f"])}}),
        ("the texts of this request have %d bytes in all: at most %d bytes" % (
            export.MAX_REQUEST_TEXT_BYTES + 1, export.MAX_REQUEST_TEXT_BYTES),
         {"signature": signature, "inputs": {
             first: texts_input(["x" * export.MAX_REQUEST_TEXT_BYTES]),
             second: texts_input(["y"])}})]
  return requests


def warmup_requests(saved_model_dir):
  """The warmup file's requests, read with TF Serving's own protos, as client requests."""
  from tensorflow_serving.apis import prediction_log_pb2  # pylint: disable=g-import-not-at-top
  path = os.path.join(saved_model_dir, "assets.extra", "tf_serving_warmup_requests")
  requests = []
  for record in tf.data.TFRecordDataset(path):
    log = prediction_log_pb2.PredictionLog.FromString(record.numpy())
    assert log.WhichOneof("log_type") == "predict_log"
    request = log.predict_log.request
    inputs = {}
    for name, tensor_proto in request.inputs.items():
      value = tf.make_ndarray(tensor_proto)
      if value.dtype == object:
        inputs[name] = texts_input(np.char.decode(value.astype(bytes), "utf-8").tolist())
      else:
        inputs[name] = {"dtype": value.dtype.name, "value": value.tolist()}
    requests.append({"signature": request.model_spec.signature_name, "inputs": inputs})
  return requests


@functools.lru_cache(maxsize=None)
def python_load(path):
  return tf.saved_model.load(path)


def python_outputs(path, request):
  """What tf.saved_model.load in this process answers to a client request."""
  signature = python_load(path).signatures[request["signature"]]
  inputs = {name: tf.constant(spec["value"], tf.string if spec["dtype"] == "string"
                              else spec["dtype"]) for name, spec in request["inputs"].items()}
  return {name: value.numpy() for name, value in signature(**inputs).items()}


def assert_same(actual, expected, what):
  expected = np.asarray(expected)
  if expected.dtype.kind in "OSU":
    decoded = [v.decode("utf-8") if isinstance(v, bytes) else v for v in expected.reshape(-1)]
    assert np.asarray(actual, dtype=object).reshape(-1).tolist() == decoded, what
  else:
    np.testing.assert_allclose(np.asarray(actual, np.float64), expected, atol=1e-5,
                               err_msg=what)


EXPORTS = ["classifier_wordpiece", "classifier_sentencepiece", "classifier_windowed",
           "classifier_multi_label", "ner_wordpiece", "ner_windowed",
           "ner_sentencepiece", "squad_wordpiece", "squad_sentencepiece", "encoder_wordpiece",
           "classifier_bfloat16"]


def test_client_imports_neither_tensorflow_text_nor_the_project(served):
  assert served["modules"] == []


@pytest.mark.parametrize("name", EXPORTS)
def test_cpp_loader_answers_like_python_load_and_do_predict(served, name):
  path, requests, answered, _, signatures, _ = served["exports"][name]
  assert set(signatures) >= {"serving_default", "token_ids"}
  assert len(answered) == len(requests)
  for (signature, inputs, expected), outputs in zip(requests, answered):
    assert "error" not in outputs, outputs.get("error")
    python = python_outputs(path, {"signature": signature, "inputs": inputs})
    assert sorted(outputs) == sorted(python)
    if not any(value["value"] for value in inputs.values()):  # No rows: nothing in any output.
      assert all(len(output) == 0 for output in [*outputs.values(), *python.values()]), outputs
      continue
    for key in outputs:
      assert_same(outputs[key], python[key], "%s %s %s vs tf.saved_model.load" % (
          name, signature, key))
    for key, value in expected.items():
      assert_same(outputs[key], value, "%s %s %s vs do_predict" % (name, signature, key))


@pytest.mark.parametrize("name", EXPORTS)
def test_warmup_requests_parse_and_run_through_the_cpp_loader(served, name):
  path, _, _, warmed, _, _ = served["exports"][name]
  requests = warmup_requests(path)
  signatures = [request["signature"] for request in requests]
  for signature in ("serving_default", "token_ids"):
    assert signatures.count(signature) >= 3
  batch_sizes = {len(next(iter(r["inputs"].values()))["value"]) for r in requests}
  assert batch_sizes == {1, 8}
  assert len(warmed) == len(requests)
  for request, outputs in zip(requests, warmed):
    assert "error" not in outputs, outputs.get("error")
    python = python_outputs(path, request)
    for key in python:
      assert_same(outputs[key], python[key], "%s warmup %s" % (name, key))


@pytest.mark.parametrize("name", EXPORTS)
def test_malformed_requests_fail_with_a_message_naming_the_input(served, name):
  """Inputs of different shapes used to broadcast or be cut, and ids out of range gave garbage or
  an error naming no input; now each is InvalidArgument saying what is wrong."""
  malformed = served["exports"][name][5]
  assert malformed
  for message, answer in malformed:
    assert "error" in answer, (name, message, answer)
    assert answer["error"].startswith("InvalidArgumentError: "), (name, answer["error"])
    assert message in answer["error"], (name, answer["error"])


def test_encoder_export_equals_the_json_lines_of_the_same_run(served):
  """sequence_output holds the --layers concatenated per token, pooled_output the --pooling=mean
  vectors concatenated, input_mask the real tokens: the JSON Lines values, to their rounding."""
  _, requests, answered, _, signatures, _ = served["exports"]["encoder_wordpiece"]
  assert set(signatures) >= {"serving_default", "text_pair", "token_ids"}
  for (signature, _, _), outputs, (per_token, pooled) in zip(requests, answered,
                                                           served["encoder_json_values"]):
    sequence_output = np.array(outputs["sequence_output"])
    lengths = [len(rows) for rows in per_token]
    assert np.array(outputs["input_mask"]).sum(axis=1).tolist() == lengths, signature
    if signature != "token_ids":  # Padded to the longest row, rounded up to a bucket.
      assert sequence_output.shape[1] == min(
          length for length in in_graph_tokenization.padded_length_buckets(MAX_SEQ_LENGTH)
          if length >= max(lengths))
    for row, rows in enumerate(per_token):
      np.testing.assert_allclose(sequence_output[row, :len(rows)], rows, atol=1e-5,
                                 err_msg=signature)
    np.testing.assert_allclose(outputs["pooled_output"], pooled, atol=1e-5, err_msg=signature)


@pytest.mark.parametrize("name", PACKED_EXPORTS)
def test_packed_rows_answer_each_text_as_if_it_were_alone(served, name):
  """Packed exports share rows between a request's texts, and still: changing one text changes
  no other text's outputs, and a text alone gets what it gets in a batch (to float rounding;
  per-token outputs over the positions both requests have, since the padded length follows the
  longest text)."""
  _, requests, answered, _, _, _ = served["exports"][name]
  num_requests = len(requests) - 3  # The batch is request 0; packing's two, then the empty one.
  batch, changed, alone = answered[0], answered[num_requests], answered[num_requests + 1]
  others = [row for row in range(len(ENGLISH)) if row != CHANGED_ROW]

  def common(a, b):  # Both cut to the positions (or words) both have.
    a, b = np.asarray(a), np.asarray(b)
    cut = tuple(slice(min(n, m)) for n, m in zip(a.shape[1:], b.shape[1:]))
    return a[(slice(None),) + cut], b[(slice(None),) + cut]

  for key in batch:
    value, changed_value = common(batch[key], changed[key])
    assert_same(changed_value[others], value[others], "%s %s of the other texts" % (name, key))
    alone_value, value = common(alone[key], batch[key])
    assert_same(alone_value, value[:1], "%s %s of a text alone" % (name, key))
  assert any(not np.array_equal(*common(changed[key], batch[key])) for key in batch)


def test_non_core_ops_are_the_tokenizers_the_readme_lists(served):
  wordpiece, sentencepiece = ["FastWordpieceTokenizeWithOffsets"], ["SentencepieceOp",
                                                                     "SentencepieceTokenizeOp"]
  assert served["non_core_ops"] == {
      "classifier_wordpiece": wordpiece, "classifier_sentencepiece": sentencepiece,
      "classifier_windowed": wordpiece, "classifier_multi_label": wordpiece,
      "ner_wordpiece": wordpiece, "ner_sentencepiece": sentencepiece,
      "ner_windowed": wordpiece,
      "squad_wordpiece": wordpiece + ["RegexSplitWithOffsets"],
      "squad_sentencepiece": ["RegexSplitWithOffsets"] + sentencepiece,
      "encoder_wordpiece": wordpiece, "classifier_bfloat16": wordpiece}


def test_bfloat16_export_computes_matmuls_in_bfloat16_from_float32_weights(served):
  """--export_precision=bfloat16: the SavedModel keeps the float32 weights, its matmuls run in
  bfloat16, its outputs are float32 and close to the float32 model's (bfloat16 keeps 8 bits of
  mantissa: probabilities within 0.02 on this model)."""
  path, requests, answered, _, _, _ = served["exports"]["classifier_bfloat16"]
  weights = tf.train.load_checkpoint(os.path.join(path, "variables", "variables"))
  dtypes = [dtype for name, dtype in weights.get_variable_to_dtype_map().items()
            if name.startswith("signature_variables/")]
  assert len(dtypes) > 20 and set(dtypes) == {tf.float32}
  graph = tf.saved_model.load(path).signatures["serving_default"].graph.as_graph_def()
  matmul_types = {node.attr["T"].type for function in graph.library.function
                  for node in function.node_def if node.op in ("MatMul", "BatchMatMulV2")}
  assert tf.bfloat16.as_datatype_enum in matmul_types
  for ((signature, _, _), outputs, float32) in zip(requests, answered,
                                                   served["bfloat16_float32_outputs"]):
    assert "error" not in outputs, outputs.get("error")
    probabilities = np.asarray(outputs["probabilities"])
    assert probabilities.dtype == np.float64  # The client's JSON of a float32 tensor.
    np.testing.assert_allclose(probabilities, float32["probabilities"], atol=0.02,
                               err_msg=signature)
    assert not np.allclose(probabilities, float32["probabilities"], atol=1e-6)  # Not float32.
