"""Tests of export.py (versioned SavedModels with text and token-id signatures)."""

import contextlib
import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import export

pytestmark = pytest.mark.slow


class HashingEncoder(tf.Module):
  """A stand-in text encoder: whitespace words hashed into ids 1..99, padded to length 8."""

  max_seq_length = 8
  dynamic_padding = False

  def token_limit(self, max_positions, inputs):  # Its features are always [batch, 8].
    del max_positions, inputs
    return contextlib.nullcontext()

  def __call__(self, text_a, text_b=None):
    ids = tf.strings.to_hash_bucket_fast(tf.strings.split(text_a), 99) + 1
    if text_b is not None:
      ids = tf.concat([ids, tf.strings.to_hash_bucket_fast(tf.strings.split(text_b), 99) + 1], 1)
    ids = tf.cast(ids, tf.int32).to_tensor(shape=[None, 8])
    mask = tf.cast(ids > 0, tf.int32)
    return {"input_ids": ids, "input_mask": mask, "segment_ids": tf.zeros_like(ids)}


def toy_model():
  inputs = keras.Input([None], dtype="int32")
  x = keras.layers.Embedding(100, 4)(inputs)
  x = keras.layers.GlobalAveragePooling1D()(x)
  return keras.Model(inputs, keras.layers.Dense(2)(x), name="toy")


def outputs_of(model):
  def outputs_fn(features):
    logits = model(features["input_ids"] * features["input_mask"], training=False)
    return {"logits": logits, "length": tf.reduce_sum(features["input_mask"], axis=1)}
  return outputs_fn


def export_toy(export_dir, model, encoder, text_inputs, version=None, config=None):
  return export.write_saved_model(
      export_dir, export.EncodedTextServing(encoder, config, outputs_of(model), text_inputs),
      version)


def test_export_writes_numbered_versions_with_both_signatures(tmp_path):
  export_dir = str(tmp_path / "export")
  model, encoder = toy_model(), HashingEncoder()
  first = export_toy(export_dir, model, encoder, ["text_a"])
  second = export_toy(export_dir, model, encoder, ["text_a"])
  assert (first, second) == (os.path.join(export_dir, "1"), os.path.join(export_dir, "2"))
  assert sorted(os.listdir(export_dir)) == ["1", "2"]  # No temporary directory is left behind.
  assert export.next_version(export_dir) == 3
  with pytest.raises(ValueError, match="already exists"):
    export_toy(export_dir, model, encoder, ["text_a"], version=2)

  texts = ["a b c", "", "one two three four five six seven eight nine"]
  features = {k: v.numpy().tolist() for k, v in encoder(tf.constant(texts)).items()}
  expected = model.predict(np.array(features["input_ids"]) * np.array(features["input_mask"]),
                           verbose=0)
  loaded = tf.saved_model.load(second)
  text = loaded.signatures[export.SERVING_DEFAULT](text_a=tf.constant(texts))
  ids = loaded.signatures[export.TOKEN_IDS_SIGNATURE](
      **{k: tf.constant(v, tf.int32) for k, v in features.items()})
  np.testing.assert_allclose(text["logits"], expected, atol=1e-6)
  np.testing.assert_allclose(ids["logits"], expected, atol=1e-6)


def test_signatures_take_any_batch_size_and_pairs(tmp_path):
  model, encoder = toy_model(), HashingEncoder()
  path = export_toy(str(tmp_path), model, encoder, ["text_a", "text_b"], version=7)
  assert path == os.path.join(str(tmp_path), "7")
  loaded = tf.saved_model.load(path)
  serve = loaded.signatures[export.SERVING_DEFAULT]
  assert sorted(serve.structured_input_signature[1]) == ["text_a", "text_b"]
  for batch in (1, 5):
    out = serve(text_a=tf.constant(["x y"] * batch), text_b=tf.constant(["z"] * batch))
    assert out["logits"].shape == (batch, 2)
    assert out["length"].numpy().tolist() == [3] * batch
  ids_signature = loaded.signatures[export.TOKEN_IDS_SIGNATURE]
  assert sorted(ids_signature.structured_input_signature[1]) == sorted(export.ID_INPUTS)
  out = ids_signature(input_ids=tf.ones([3, 5], tf.int32), input_mask=tf.ones([3, 5], tf.int32),
                      segment_ids=tf.zeros([3, 5], tf.int32))
  assert out["length"].numpy().tolist() == [5, 5, 5]


def test_existing_versions_ignores_other_entries(tmp_path):
  for name in ("3", "10", ".tmp-11-5", "notes"):
    os.makedirs(tmp_path / name)
  (tmp_path / "12").write_text("a file, not a version")
  assert export.existing_versions(str(tmp_path)) == [3, 10]
  assert export.next_version(str(tmp_path)) == 11
  assert export.next_version(str(tmp_path / "absent")) == 1


# Runs in a fresh process that cannot import the project (PYTHONPATH empty, cwd elsewhere).
CLASSIFIER_SCRIPT = """
import json, sys
import tensorflow as tf
import tensorflow_text  # Registers the tokenization ops the SavedModel uses.
OURS = ("export", "classifier", "modeling", "tokenization", "in_graph_tokenization", "training")
loaded = tf.saved_model.load(sys.argv[1])
texts = json.loads(sys.argv[2])
ids = json.loads(sys.argv[3])
text = loaded.signatures["serving_default"](text_a=tf.constant(texts["a"]),
                                            text_b=tf.constant(texts["b"]))
by_ids = loaded.signatures["token_ids"](**{k: tf.constant(v, tf.int32) for k, v in ids.items()})
one = loaded.signatures["serving_default"](text_a=tf.constant(texts["a"][:1]),
                                           text_b=tf.constant(texts["b"][:1]))
print(json.dumps({"probabilities": text["probabilities"].numpy().tolist(),
                  "label": [x.decode() for x in text["label"].numpy()],
                  "ids_probabilities": by_ids["probabilities"].numpy().tolist(),
                  "one": one["probabilities"].numpy().tolist(),
                  "ours": sorted(m for m in sys.modules if m in OURS)}))
"""


def test_classifier_export_serves_raw_text_like_do_predict(tmp_path, uncased_vocab_file):
  import test_run_classifier as rc  # pylint: disable=g-import-not-at-top
  import tokenization  # pylint: disable=g-import-not-at-top
  config_file = str(tmp_path / "bert_config.json")
  with open(config_file, "w") as f:
    json.dump(dict(vocab_size=30522, hidden_size=32, num_hidden_layers=1, num_attention_heads=2,
                   intermediate_size=64, hidden_act="gelu", hidden_dropout_prob=0.1,
                   attention_probs_dropout_prob=0.1, max_position_embeddings=64,
                   type_vocab_size=2, initializer_range=0.02), f)
  header = ["Quality", "#1 ID", "#2 ID", "#1 String", "#2 String"]
  train = [[str(int(i % 3 == 0)), "1", "2", "the %d cats sat." % i, "a dog %d ran!" % (i * 7)]
           for i in range(24)]
  pairs = [("Héllo, WORLD! The café's naïve owner.", "東京 is big; isn't it?"),
           ("", "only the second text"),
           ("a very long first sentence " * 8, "and an unaffable second one " * 5),
           ("Odd\u3000and\u00a0wide\u200bspaces", ""),
           ("The quick brown fox.", "Jumps over the lazy dog?")]
  test = [["0", str(i), str(i), a, b] for i, (a, b) in enumerate(pairs)]
  data_dir = tmp_path / "data"
  os.makedirs(data_dir)
  rc.write_tsv(data_dir / "train.tsv", header, train)
  rc.write_tsv(data_dir / "test.tsv", ["index"] + header[1:], test)
  output_dir, export_dir = str(tmp_path / "out"), str(tmp_path / "export")
  rc.run(task_name="MRPC", data_dir=str(data_dir), vocab_file=uncased_vocab_file,
         bert_config_file=config_file, output_dir=output_dir, export_dir=export_dir,
         do_train=True, do_predict=True, max_seq_length=32, train_batch_size=8,
         learning_rate=5e-3, num_train_epochs=2.0)
  expected = rc.read_test_results(output_dir)
  assert expected.shape == (5, 2) and np.ptp(expected[:, 0]) > 1e-4  # Not all the same.
  # Its label names beside it, which a later export into export_dir must share.
  with open(os.path.join(export_dir, "1", "assets.extra", "output_names.txt")) as f:
    assert f.read() == "0\n1\n"

  tokenizer = tokenization.FullTokenizer(uncased_vocab_file, do_lower_case=True)
  encoded = [tokenizer.encode(a, b, 32) for a, b in pairs]
  ids = {name: [e[i] for e in encoded] for i, name in enumerate(export.ID_INPUTS)}
  texts = {"a": [a for a, _ in pairs], "b": [b for _, b in pairs]}
  saved_model = os.path.join(export_dir, "1")
  result = subprocess.run([sys.executable, "-c", CLASSIFIER_SCRIPT, saved_model,
                           json.dumps(texts), json.dumps(ids)], capture_output=True, text=True,
                          env=dict(os.environ, PYTHONPATH=""), cwd=str(tmp_path))
  assert result.returncode == 0, result.stderr[-3000:]
  served = json.loads(result.stdout.strip().splitlines()[-1])
  assert served["ours"] == []
  np.testing.assert_allclose(served["probabilities"], expected, atol=1e-5)
  np.testing.assert_allclose(served["ids_probabilities"], expected, atol=1e-5)
  np.testing.assert_allclose(served["one"], expected[:1], atol=1e-5)
  assert served["label"] == [["0", "1"][i] for i in expected.argmax(axis=1)]

  cli = subprocess.run(["saved_model_cli", "show", "--all", "--dir", saved_model],
                       capture_output=True, text=True, check=True).stdout
  for name in ("signature_def['serving_default']", "signature_def['token_ids']",
               "inputs['text_a']", "inputs['text_b']", "inputs['input_ids']",
               "outputs['probabilities']", "outputs['label']", "outputs['logits']"):
    assert name in cli


def test_token_ids_requests_a_client_bug_makes_fail_naming_the_input(tmp_path):
  """Through TF's C++ loader: inputs of different shapes used to broadcast (a segment_ids of
  batch 1 answered for every row) and ids out of range read other rows (Keras' take wraps -1 to
  the last row; gather on GPUs reads zeros). Each must fail with a message naming the input."""
  import modeling  # pylint: disable=g-import-not-at-top
  from test_serving import run_cpp_client  # pylint: disable=g-import-not-at-top
  model, encoder = toy_model(), HashingEncoder()
  config = modeling.BertConfig(vocab_size=100, max_position_embeddings=8, type_vocab_size=2)
  path = export_toy(str(tmp_path), model, encoder, ["text_a", "text_b"], config=config)
  ids = np.array([[5, 6, 7, 0], [8, 9, 0, 0]], np.int32)
  mask, segments = (ids > 0).astype(np.int32), np.zeros_like(ids)

  def request(input_ids=ids, input_mask=mask, segment_ids=segments):
    return {"signature": "token_ids", "inputs": {
        name: {"dtype": "int32", "value": value.tolist()} for name, value in
        zip(export.ID_INPUTS, (input_ids, input_mask, segment_ids))}}

  def texts(**values):
    return {"signature": "serving_default",
            "inputs": {name: {"dtype": "string", "value": value} for name, value in values.items()}}

  bad = {
      "segment_ids has shape [1 4] but input_ids has [2 4]": request(segment_ids=segments[:1]),
      "input_mask has shape [2 3] but input_ids has [2 4]": request(input_mask=mask[:, :3]),
      "input_mask holds values from 0 to 2: the mask must be 0 (padding) or 1":
          request(input_mask=mask * 2),
      "input_ids holds values from -1 to 9: token ids must be in [0, vocab_size = 100)":
          request(input_ids=ids - (ids == 0)),
      "input_ids holds values from 0 to 100": request(input_ids=np.where(ids == 9, 100, ids)),
      "segment_ids holds values from 0 to 2: segment ids must be in [0, type_vocab_size = 2)":
          request(segment_ids=segments + 2 * mask),
      "input_ids has length 0: the model takes 1 to max_position_embeddings = 8 positions":
          request(ids[:, :0], mask[:, :0], segments[:, :0]),
      "input_ids has length 9": request(*[np.tile(x, [1, 3])[:, :9] for x in (ids, mask,
                                                                              segments)]),
      "text_b has 3 rows but text_a has 2: text inputs are matched row by row":
          texts(text_a=["a b", "c"], text_b=["d", "e", "f"]),
      "the texts of this request have %d bytes in all: at most %d bytes (text_a + text_b)" % (
          export.MAX_REQUEST_TEXT_BYTES + 1, export.MAX_REQUEST_TEXT_BYTES):
          texts(text_a=["x" * export.MAX_REQUEST_TEXT_BYTES], text_b=["y"]),
  }
  good = [request(), texts(text_a=["a b", "c"], text_b=["d", "e"])]
  answers = run_cpp_client(str(tmp_path), [{"saved_model": path,
                                           "requests": list(bad.values()) + good}])
  results = answers["jobs"][0]["results"]
  for message, result in zip(bad, results):
    assert "error" in result, (message, result)
    assert result["error"].startswith("InvalidArgumentError: ") and message in result["error"]
  expected = model.predict(ids * mask, verbose=0)
  for result in results[len(bad):]:
    assert "error" not in result, result
  np.testing.assert_allclose(results[len(bad)]["logits"], expected, atol=1e-6)


# Exports a toy model (seeded by argv[3]) into argv[1]. Both exports of a test have their model
# complete, with the version each would have taken before claiming, before either claims one.
CONCURRENT_EXPORT_SCRIPT = """
import json, os, sys, time
import keras
import numpy as np
import export
import test_export
export_dir, barrier_dir, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
write_warmup_requests = export.write_warmup_requests

def write_then_wait(*args):
  path = write_warmup_requests(*args)
  open(os.path.join(barrier_dir, str(seed)), "w").close()
  deadline = time.time() + 120
  while len(os.listdir(barrier_dir)) < 2 and time.time() < deadline:
    time.sleep(0.02)
  return path

export.write_warmup_requests = write_then_wait
keras.utils.set_random_seed(seed)
model = test_export.toy_model()
path = test_export.export_toy(export_dir, model, test_export.HashingEncoder(), ["text_a"])
ids = test_export.HashingEncoder()(["a b c", "d"])
logits = model(ids["input_ids"] * ids["input_mask"]).numpy()
print(json.dumps({"path": path, "logits": logits.tolist()}))
"""


def test_concurrent_exports_into_one_directory_get_distinct_versions(tmp_path):
  """Two jobs exporting into one export_dir at once used to both end in `1/` (one model silently
  replaced the other). The version is claimed by the rename that completes an export."""
  from conftest import REPO_ROOT  # pylint: disable=g-import-not-at-top
  export_dir, barrier_dir = tmp_path / "export", tmp_path / "barrier"
  os.makedirs(barrier_dir)
  env = dict(os.environ, PYTHONPATH=os.pathsep.join([REPO_ROOT, os.path.join(REPO_ROOT, "tests")]),
             TF_CPP_MIN_LOG_LEVEL="2")
  jobs = [subprocess.Popen([sys.executable, "-c", CONCURRENT_EXPORT_SCRIPT, str(export_dir),
                            str(barrier_dir), str(seed)], stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, text=True, env=env) for seed in (1, 2)]
  outputs = [job.communicate(timeout=300) for job in jobs]
  for job, (_, stderr) in zip(jobs, outputs):
    assert job.returncode == 0, stderr[-3000:]
  results = [json.loads(stdout.strip().splitlines()[-1]) for stdout, _ in outputs]
  assert sorted(result["path"] for result in results) == [str(export_dir / "1"),
                                                          str(export_dir / "2")]
  assert sorted(os.listdir(export_dir)) == ["1", "2"]
  for result in results:
    served = tf.saved_model.load(result["path"]).signatures[export.SERVING_DEFAULT](
        text_a=tf.constant(["a b c", "d"]))
    np.testing.assert_allclose(served["logits"], result["logits"], atol=1e-6)


def test_claim_version_skips_taken_numbers_and_never_replaces_one(tmp_path):
  """Every existing entry is taken, an empty directory and a file included (rename(2) would
  replace an empty directory); an asked-for version that is taken is an error."""
  export_dir = tmp_path / "export"
  os.makedirs(export_dir / "1")
  (export_dir / "1" / "saved_model.pb").write_text("first")
  os.makedirs(export_dir / "2")
  (export_dir / "3").write_text("a file")

  def staged(text):
    directory = tmp_path / ("staged-" + text)
    os.makedirs(directory)
    (directory / "saved_model.pb").write_text(text)
    return str(directory)

  assert export.claim_version(staged("a"), str(export_dir)) == str(export_dir / "4")
  assert (export_dir / "4" / "saved_model.pb").read_text() == "a"
  assert (export_dir / "1" / "saved_model.pb").read_text() == "first"
  assert os.listdir(export_dir / "2") == []
  assert (export_dir / "3").read_text() == "a file"
  with pytest.raises(export.VersionTakenError, match="already exists"):
    export.claim_version(staged("b"), str(export_dir), version=1)
