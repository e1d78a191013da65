"""Versioned SavedModel export for TF Serving, shared by every export (classifier, SQuAD, NER,
feature extraction).

An export holds the in-graph text encoder (`in_graph_tokenization.BertInputEncoder`, whose vocab
travels as a SavedModel asset) and signatures built around one task function
`outputs_fn(features) -> dict of tensors`:

- `serving_default`: raw strings (e.g. `text_a`, `text_b`, each a [batch] tf.string tensor); the
  encoder turns them into ids inside the graph, then `outputs_fn` runs.
- `token_ids` (`TOKEN_IDS_SIGNATURE`): `input_ids`, `input_mask`, `segment_ids` (int32
  [batch, seq_length]) for clients that tokenize themselves.

`write_saved_model` writes `export_dir/<version>/` with the next integer version (what TF Serving
watches for), through a temporary directory renamed at the end so a server never loads a
half-written model. It saves the variables the signatures read rather than the Keras model
(see `serving_root`: that is what makes TF's C++ loader, and so TF Serving, work), and writes
`assets.extra/tf_serving_warmup_requests`. The result needs only tensorflow and tensorflow-text's
ops to load, not this project.

The signatures are traced without AutoGraph (the encoder and the task functions are written with
TensorFlow ops, not Python control flow on tensors), which also keeps tracing fast.
"""

import os
import re
from typing import Callable, Mapping, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

import atomic_files
import distribution
import in_graph_tokenization

SERVING_DEFAULT = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
TOKEN_IDS_SIGNATURE = "token_ids"
ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
WARMUP_FILE = "tf_serving_warmup_requests"  # In assets.extra/, where TF Serving looks for it.
WARMUP_SENTENCE = ("The quick brown fox jumps over the lazy dog while a small bird sings in an old "
                   "tree near the river.")

OutputsFn = Callable[[Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]


def existing_versions(export_dir: str) -> list[int]:
  """The integer version directories under export_dir, ascending."""
  if not os.path.isdir(export_dir):
    return []
  return sorted(int(name) for name in os.listdir(export_dir)
                if re.fullmatch(r"\d+", name) and os.path.isdir(os.path.join(export_dir, name)))


def next_version(export_dir: str) -> int:
  """One more than the largest existing version (1 for a new export_dir)."""
  return max(existing_versions(export_dir), default=0) + 1


def ids_signature(outputs_fn: OutputsFn) -> tf.types.experimental.GenericFunction:
  """A tf.function on int32 `input_ids`, `input_mask`, `segment_ids` of any [batch, length]."""

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32, name=n) for n in ID_INPUTS],
               autograph=False)
  def serve_token_ids(*ids):
    return dict(outputs_fn(dict(zip(ID_INPUTS, ids))))

  return serve_token_ids


def text_signature(encoder: Callable[..., Mapping[str, tf.Tensor]], outputs_fn: OutputsFn,
                   text_inputs: Sequence[str]) -> tf.types.experimental.GenericFunction:
  """A tf.function on [batch] string tensors named `text_inputs`, encoded by `encoder(*texts)`."""

  @tf.function(input_signature=[tf.TensorSpec([None], tf.string, name=n) for n in text_inputs],
               autograph=False)
  def serve_text(*texts):
    features = encoder(*texts)
    return dict(outputs_fn({name: tf.cast(features[name], tf.int32) for name in ID_INPUTS}))

  return serve_text


def _varint(value: int) -> bytes:
  """Protocol buffer base-128 varint."""
  out = bytearray()
  while True:
    byte, value = value & 0x7F, value >> 7
    out.append(byte | (0x80 if value else 0))
    if not value:
      return bytes(out)


def _message_field(number: int, payload: bytes) -> bytes:
  """A length-delimited protobuf field (strings, sub-messages, map entries)."""
  return _varint(number << 3 | 2) + _varint(len(payload)) + payload


def prediction_log(signature_name: str, inputs: Mapping[str, np.ndarray]) -> bytes:
  """A serialized `tensorflow.serving.PredictionLog` holding one PredictRequest.

  Written from tensorflow_serving/apis' .proto field numbers (PredictionLog.predict_log = 6,
  PredictLog.request = 1, PredictRequest.model_spec = 1 and inputs = 2 (map<string, TensorProto>),
  ModelSpec.signature_name = 3), so exporting needs no tensorflow-serving-api package.
  """
  model_spec = _message_field(3, signature_name.encode("utf-8"))
  request = _message_field(1, model_spec)
  for name in sorted(inputs):
    entry = (_message_field(1, name.encode("utf-8")) +
             _message_field(2, tf.make_tensor_proto(inputs[name]).SerializeToString()))
    request += _message_field(2, entry)
  return _message_field(6, _message_field(1, request))


def warmup_text(num_words: int) -> str:
  """An English text of num_words words, for warmup requests."""
  words = WARMUP_SENTENCE.split()
  return " ".join(words[i % len(words)] for i in range(num_words))


def warmup_requests(signatures: Mapping[str, tf.types.experimental.ConcreteFunction],
                    encoder: tf.Module) -> list[tuple[str, dict[str, np.ndarray]]]:
  """A few requests per signature: one text per padded length bucket, then a batch of 8.

  String inputs get English texts (shared between the inputs of a pair); int32 id inputs get the
  encoder's ids of the same texts, so every request is valid for the model.
  """
  lengths = in_graph_tokenization.padded_length_buckets(encoder.max_seq_length)
  batches = [[length] for length in lengths] + [[lengths[i % len(lengths)] for i in range(8)]]
  requests = []
  for name in sorted(signatures):
    specs = {spec.name: spec for spec in tf.nest.flatten(
        signatures[name].structured_input_signature)}
    num_texts = sum(spec.dtype == tf.string for spec in specs.values())
    for batch in batches:
      texts = [warmup_text(max(1, (length - 3) // max(1, num_texts))) for length in batch]
      features = None
      inputs = {}
      for input_name, spec in specs.items():
        if spec.dtype == tf.string:
          value = np.array([text.encode("utf-8") for text in texts], dtype=object)
        elif input_name in ID_INPUTS:
          features = features or encoder(tf.constant(texts))
          value = features[input_name].numpy().astype(np.int32)
        else:
          raise ValueError("No warmup value for input %r of signature %r" % (input_name, name))
        # An input of higher rank (multiple choice: [batch, choices, ...]) gets each row twice.
        while value.ndim < len(spec.shape):
          value = np.stack([value, value], axis=1)
        inputs[input_name] = value
      requests.append((name, inputs))
  return requests


def write_warmup_requests(saved_model_dir: str,
                          requests: Sequence[tuple[str, Mapping[str, np.ndarray]]]) -> str:
  """Writes `assets.extra/tf_serving_warmup_requests` (TFRecords of PredictionLog) and its path.

  TF Serving runs these requests when it loads the model, before it reports the version
  available, so the first real request does not pay for graph optimization and kernel setup.
  """
  directory = os.path.join(saved_model_dir, "assets.extra")
  tf.io.gfile.makedirs(directory)
  path = os.path.join(directory, WARMUP_FILE)
  with tf.io.TFRecordWriter(path) as writer:
    for signature_name, inputs in requests:
      writer.write(prediction_log(signature_name, inputs))
  return path


def signature_variables(functions: Sequence[tf.types.experimental.ConcreteFunction]
                        ) -> list[tf.Variable]:
  """The distinct tf.Variables the functions read, in first-use order."""
  found = {}
  for function in functions:
    for variable in function.variables:
      found.setdefault(id(variable), variable)
  return list(found.values())


def serving_root(encoder: tf.Module,
                 functions: Sequence[tf.types.experimental.ConcreteFunction]) -> tf.Module:
  """What is saved: the encoder (vocab asset, tokenizer resources) and the functions' variables.

  Keras models are deliberately not tracked. Keras 3 saves each of its variables as a new plain
  tf.Variable; TF's C++ loader (TF Serving, `saved_model_cli run`) restores those copies while
  the signature graphs read the original handles, so every call fails with "Could not find
  variable ..." (`tf.saved_model.load` in Python re-wires them and hides this). Tracking the
  tf.Variables the signatures capture stores every weight once, under the handle the graphs read.
  """
  root = tf.Module()
  root.encoder = encoder
  root.signature_variables = signature_variables(functions)
  return root


def write_saved_model(export_dir: str,
                      signatures: Mapping[str, tf.types.experimental.GenericFunction],
                      encoder: tf.Module, version: Optional[int] = None) -> str:
  """Saves `signatures` as `export_dir/<version>/` for TF Serving and returns that path.

  Saves the variables the signatures read and `encoder` (whose vocab or SentencePiece model
  travels as an asset), plus `assets.extra/tf_serving_warmup_requests` (`warmup_requests`).
  The version defaults to `next_version(export_dir)`. Only the chief of a multi-worker run
  writes; the others return the path the chief writes.
  """
  version = next_version(export_dir) if version is None else version
  final_dir = os.path.join(export_dir, str(version))
  if not distribution.is_chief():
    return final_dir
  if os.path.exists(final_dir):
    raise ValueError("%s already exists: choose another version" % final_dir)
  tf.io.gfile.makedirs(export_dir)
  concrete = {name: fn.get_concrete_function() for name, fn in signatures.items()}
  with atomic_files.atomic_output(final_dir) as temporary_dir:
    tf.saved_model.save(serving_root(encoder, list(concrete.values())), temporary_dir,
                        signatures=concrete)
    write_warmup_requests(temporary_dir, warmup_requests(concrete, encoder))
  logging.info("Exported SavedModel %s with signatures %s", final_dir, ", ".join(sorted(concrete)))
  return final_dir


def export_task_model(export_dir: str, encoder: tf.Module, outputs_fn: OutputsFn,
                      text_inputs: Sequence[str], version: Optional[int] = None) -> str:
  """Exports a task model with the text (`serving_default`) and `token_ids` signatures.

  Args:
    export_dir: the directory TF Serving watches; the model goes to `export_dir/<version>/`.
    encoder: the in-graph text encoder: `encoder(*texts)` returns a dict with the three id tensors.
    outputs_fn: features dict (int32 ids) -> dict of output tensors (inference mode); the
      variables it reads are saved.
    text_inputs: the names of the text signature's string inputs, e.g. ("text_a", "text_b").
    version: the version number, default the next one.

  Returns:
    The SavedModel directory.
  """
  signatures = {SERVING_DEFAULT: text_signature(encoder, outputs_fn, text_inputs),
                TOKEN_IDS_SIGNATURE: ids_signature(outputs_fn)}
  return write_saved_model(export_dir, signatures, encoder, version)
