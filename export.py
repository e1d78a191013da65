"""Versioned SavedModel export for TF Serving, shared by the task scripts (classifier, SQuAD, NER).

A task export is a `tf.Module` that holds the Keras model and the in-graph text encoder
(`in_graph_tokenization.BertInputEncoder`, whose vocab travels as a SavedModel asset) plus two
signatures built here around one task function `outputs_fn(features) -> dict of tensors`:

- `serving_default`: raw strings (e.g. `text_a`, `text_b`, each a [batch] tf.string tensor); the
  encoder turns them into ids inside the graph, then `outputs_fn` runs.
- `token_ids` (`TOKEN_IDS_SIGNATURE`): `input_ids`, `input_mask`, `segment_ids` (int32
  [batch, seq_length]) for clients that tokenize themselves.

`write_saved_model` writes `export_dir/<version>/` with the next integer version (what TF Serving
watches for), through a temporary directory renamed at the end so a server never loads a
half-written model. The result needs only tensorflow and tensorflow_text to load, not this project.

The signatures are traced without AutoGraph (the encoder and the task functions are written with
TensorFlow ops, not Python control flow on tensors), which also keeps tracing fast.
"""

import os
import re
from typing import Callable, Mapping, Optional, Sequence

from absl import logging
import tensorflow as tf

import atomic_files

SERVING_DEFAULT = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
TOKEN_IDS_SIGNATURE = "token_ids"
ID_INPUTS = ("input_ids", "input_mask", "segment_ids")

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


def write_saved_model(module: tf.Module, export_dir: str,
                      signatures: Mapping[str, tf.types.experimental.GenericFunction],
                      version: Optional[int] = None) -> str:
  """Saves `module` with `signatures` as `export_dir/<version>/` and returns that path.

  Every variable and asset the signatures use must be reachable from `module` (keep the model and
  the encoder as its attributes). The version defaults to `next_version(export_dir)`.
  """
  version = next_version(export_dir) if version is None else version
  final_dir = os.path.join(export_dir, str(version))
  if os.path.exists(final_dir):
    raise ValueError("%s already exists: choose another version" % final_dir)
  tf.io.gfile.makedirs(export_dir)
  concrete = {name: fn.get_concrete_function() for name, fn in signatures.items()}
  with atomic_files.atomic_output(final_dir) as temporary_dir:
    tf.saved_model.save(module, temporary_dir, signatures=concrete)
  logging.info("Exported SavedModel %s with signatures %s", final_dir, ", ".join(sorted(concrete)))
  return final_dir


def export_task_model(export_dir: str, model: tf.Module, encoder: tf.Module,
                      outputs_fn: OutputsFn, text_inputs: Sequence[str],
                      version: Optional[int] = None) -> str:
  """Exports a task model with the text (`serving_default`) and `token_ids` signatures.

  Args:
    export_dir: the directory TF Serving watches; the model goes to `export_dir/<version>/`.
    model: the Keras model (its variables are saved).
    encoder: the in-graph text encoder: `encoder(*texts)` returns a dict with the three id tensors.
    outputs_fn: features dict (int32 ids) -> dict of output tensors (inference mode).
    text_inputs: the names of the text signature's string inputs, e.g. ("text_a", "text_b").
    version: the version number, default the next one.

  Returns:
    The SavedModel directory.
  """
  module = tf.Module()
  module.model = model
  module.encoder = encoder
  signatures = {SERVING_DEFAULT: text_signature(encoder, outputs_fn, text_inputs),
                TOKEN_IDS_SIGNATURE: ids_signature(outputs_fn)}
  return write_saved_model(module, export_dir, signatures, version)
