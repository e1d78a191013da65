"""Uses a TF Hub BERT pair as TensorFlow's "Classify text with BERT" tutorial does, in a process
of its own.

Run as a script (tests/test_tf_hub_export.py does), never imported by the project:

    python tf_hub_consumer.py request.json result.json

It imports tensorflow_hub, tensorflow_text (which registers the preprocessor's ops) and tf_keras:
with Keras 3 installed, `hub.KerasLayer` is a Keras 2 layer, so the model around it is built with
tf_keras, as the tutorial's code runs today. A process of its own keeps Keras 2 out of the test
process.

request.json: `{"encoder": dir, "preprocessor": dir, "texts": [...], "texts_b": [...],
"seq_length": N, "train_texts": [...], "train_labels": [0 or 1, ...], "epochs": E}`.
result.json: what the handles answered, as nested lists:
- `preprocessed`: `hub.KerasLayer(preprocessor)(texts)`; `encoded`: `hub.KerasLayer(encoder)` of
  that (`pooled_output`, `sequence_output`, `default`, `encoder_outputs`: one list per layer);
- `dropout_changes_outputs`: whether the trainable encoder layer called with `training=True`
  gives other values than with `training=False`;
- `tokenized`: `preprocessor.tokenize(texts)` [batch][words][pieces]; `packed`:
  `preprocessor.bert_pack_inputs([tokenize(texts), tokenize(texts_b)], seq_length=N)`;
  `packed_default_length`: the length `bert_pack_inputs` pads to without `seq_length`;
- the tutorial's classifier (Dense(1) on `pooled_output`), trained with `model.fit` one batch
  per epoch: `trainable_weights` (of the encoder layer), `losses` (`fit`'s, one per step), and
  `max_weight_change` (of the encoder's weights).
"""

import json
import sys

import numpy as np
import tensorflow as tf
import tensorflow_hub as hub
import tensorflow_text  # pylint: disable=unused-import  (registers the preprocessor's ops)
import tf_keras


def as_lists(values):
  """Tensors (in dicts and lists) as nested Python lists."""
  return tf.nest.map_structure(lambda value: value.numpy().tolist(), values)


def classifier(encoder: hub.KerasLayer, preprocessor: hub.KerasLayer) -> tf_keras.Model:
  """The tutorial's model: strings -> preprocessor -> trainable encoder -> Dense(pooled_output)."""
  text_input = tf_keras.layers.Input(shape=(), dtype=tf.string)
  outputs = encoder(preprocessor(text_input))
  model = tf_keras.Model(text_input, tf_keras.layers.Dense(1)(outputs["pooled_output"]))
  model.compile(optimizer=tf_keras.optimizers.Adam(1e-2),
                loss=tf_keras.losses.BinaryCrossentropy(from_logits=True))
  return model


def main(request_file: str, result_file: str) -> None:
  with open(request_file, encoding="utf-8") as reader:
    request = json.load(reader)
  tf_keras.utils.set_random_seed(1)
  preprocessor = hub.KerasLayer(request["preprocessor"])
  encoder = hub.KerasLayer(request["encoder"], trainable=True)
  texts = tf.constant(request["texts"])
  preprocessed = preprocessor(texts)
  encoded = encoder(preprocessed, training=False)
  dropped = encoder(preprocessed, training=True)
  pre = preprocessor.resolved_object
  tokenized = pre.tokenize(texts)
  packed = pre.bert_pack_inputs([tokenized, pre.tokenize(tf.constant(request["texts_b"]))],
                                seq_length=request["seq_length"])
  model = classifier(encoder, preprocessor)
  train_texts = np.array(request["train_texts"], dtype=object)
  train_labels = np.array(request["train_labels"], np.float32)
  before = [weight.numpy() for weight in encoder.trainable_weights]
  history = model.fit(train_texts, train_labels, epochs=request["epochs"],
                      batch_size=len(train_texts), verbose=0)
  result = {
      "preprocessed": as_lists(preprocessed), "encoded": as_lists(encoded),
      "dropout_changes_outputs": bool(np.any(
          dropped["sequence_output"].numpy() != encoded["sequence_output"].numpy())),
      "tokenized": tokenized.to_list(), "packed": as_lists(packed),
      "packed_default_length": int(pre.bert_pack_inputs([tokenized])["input_word_ids"].shape[1]),
      "trainable_weights": len(encoder.trainable_weights), "losses": history.history["loss"],
      "max_weight_change": max(float(np.abs(weight.numpy() - old).max())
                               for weight, old in zip(encoder.trainable_weights, before)),
  }
  with open(result_file, "w", encoding="utf-8") as writer:
    json.dump(result, writer)


if __name__ == "__main__":
  main(*sys.argv[1:])
