"""Tests of export.py (versioned SavedModels with text and token-id signatures)."""

import json
import os
import subprocess
import sys

import keras
import numpy as np
import pytest
import tensorflow as tf

import export


class HashingEncoder(tf.Module):
  """A stand-in text encoder: whitespace words hashed into ids 1..99, `[CLS] a [SEP] b`, length 8."""

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


LOAD_SCRIPT = """
import json, sys
import tensorflow as tf
OURS = ("export", "classifier", "modeling", "tokenization", "in_graph_tokenization", "training")
loaded = tf.saved_model.load(sys.argv[1])
text = loaded.signatures["serving_default"](text_a=tf.constant(json.loads(sys.argv[2])))
ids = loaded.signatures["token_ids"](**{k: tf.constant(v, tf.int32) for k, v in
                                        json.loads(sys.argv[3]).items()})
print(json.dumps({"text": text["logits"].numpy().tolist(), "ids": ids["logits"].numpy().tolist(),
                  "ours": sorted(m for m in sys.modules if m in OURS)}))
"""


def test_export_writes_versions_loadable_without_this_project(tmp_path):
  export_dir = str(tmp_path / "export")
  model, encoder = toy_model(), HashingEncoder()
  first = export.export_task_model(export_dir, model, encoder, outputs_of(model), ["text_a"])
  second = export.export_task_model(export_dir, model, encoder, outputs_of(model), ["text_a"])
  assert (first, second) == (os.path.join(export_dir, "1"), os.path.join(export_dir, "2"))
  assert sorted(os.listdir(export_dir)) == ["1", "2"]  # No temporary directory is left behind.
  assert export.next_version(export_dir) == 3
  with pytest.raises(ValueError, match="already exists"):
    export.export_task_model(export_dir, model, encoder, outputs_of(model), ["text_a"], version=2)

  texts = ["a b c", "", "one two three four five six seven eight nine"]
  features = {k: v.numpy().tolist() for k, v in encoder(tf.constant(texts)).items()}
  expected = model.predict(np.array(features["input_ids"]) * np.array(features["input_mask"]),
                           verbose=0)
  result = subprocess.run([sys.executable, "-c", LOAD_SCRIPT, second, json.dumps(texts),
                           json.dumps(features)], capture_output=True, text=True, check=True,
                          env=dict(os.environ, PYTHONPATH=""), cwd=str(tmp_path))
  outputs = json.loads(result.stdout.strip().splitlines()[-1])
  assert outputs["ours"] == []
  np.testing.assert_allclose(outputs["text"], expected, atol=1e-6)
  np.testing.assert_allclose(outputs["ids"], expected, atol=1e-6)


def test_signatures_take_any_batch_size_and_pairs(tmp_path):
  model, encoder = toy_model(), HashingEncoder()
  path = export.export_task_model(str(tmp_path), model, encoder, outputs_of(model),
                                  ["text_a", "text_b"], version=7)
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
