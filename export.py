"""Versioned SavedModel export for TF Serving, the one export shape of every task and script.

A task hands `write_saved_model` a `ServingModule`: the in-graph text encoder
(`in_graph_tokenization.BertInputEncoder`, whose vocab travels as a SavedModel asset), the model's
config and what its two signatures compute:

- `serving_default`: raw strings (e.g. `text_a`, `text_b`, each a [batch] tf.string tensor),
  tokenized inside the graph;
- `token_ids` (`TOKEN_IDS_SIGNATURE`): `input_ids`, `input_mask`, `segment_ids` (int32
  [batch, seq_length]) for clients that tokenize themselves.

`EncodedTextServing` is the common case (encode the texts, then one function of the ids); tasks
whose text path does more (SQuAD's span choice, tagging's words, multiple choice's endings)
subclass `ServingModule`. TF Hub's BERT pair (extract_features) has one of the two each, and a
Python API beside it (`ServingModule.saved_attributes`: `__call__`, `tokenize`, ...).

A malformed request fails with InvalidArgument and a message naming the input, never with a wrong
answer or a crash: text inputs of different batch sizes or more than `MAX_REQUEST_TEXT_BYTES` (4
MiB) of text in all (`text_input_checks`); inputs of another rank (`rank_checks`); id inputs of
different shapes, a mask other than 0/1, ids out of range (`id_input_checks`). A request too large
for the server fails the same way (`RequestLimits`, set at export time): more rows than
`max_rows`, or more token positions than `max_tokens`, counted as rows x the padded sequence
length the model would compute on (x endings for multiple choice; x windows' count instead of rows
for SQuAD's contexts). Bytes alone do not bound memory: a million one-character rows are 1 MB of
text but a million rows of activations. The checks are assert ops in the graph, which TF's C++
loader runs like any other op, and they run before the model.

`write_saved_model` writes `export_dir/<version>/` with the next integer version (what TF Serving
watches for), through a staging directory renamed at the end so a server never loads a
half-written model; that rename claims the version, so concurrent exports get distinct ones. It
saves the variables the signatures read rather than the Keras model (see `serving_root`: that is
what makes TF's C++ loader, and so TF Serving, work), the module's `saved_attributes`, and writes
`assets.extra/tf_serving_warmup_requests`. The result needs only tensorflow and tensorflow-text's
ops to load, not this project.

The signatures are traced without AutoGraph (the encoder and the task functions are written with
TensorFlow ops, not Python control flow on tensors), which also keeps tracing fast.
"""

import contextlib
import dataclasses
import errno
import os
import re
import threading
from typing import Any, Callable, Iterator, Mapping, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2

import atomic_files
import checkpoints
import choices
import distribution
import errors
import file_patterns
import in_graph_tokenization
import modeling
import packing
import task_files
import tfrecord_encoding

SERVING_DEFAULT = tf.saved_model.DEFAULT_SERVING_SIGNATURE_DEF_KEY
TOKEN_IDS_SIGNATURE = "token_ids"
ID_INPUTS = ("input_ids", "input_mask", "segment_ids")
# The most bytes of text one request may hold (all its string inputs together). Memory per request
# grows linearly with its bytes; this bounds it. A SQuAD context is ~1 KB, a long article ~100 KB.
MAX_REQUEST_TEXT_BYTES = 4 * 2**20
WARMUP_FILE = "tf_serving_warmup_requests"  # In assets.extra/, where TF Serving looks for it.
# The names of the model's outputs (a classifier's labels, a tagger's tags), one a line, also in
# assets.extra/ (TF Serving reads nothing else there): what a next version must name alike.
OUTPUT_NAMES_FILE = "output_names.txt"
WARMUP_SENTENCE = ("The quick brown fox jumps over the lazy dog while a small bird sings in an old "
                   "tree near the river.")

OutputsFn = Callable[[Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]
# --export_precision (choices.EXPORT_PRECISIONS): the Keras dtype policy an exported model
# computes in. bfloat16 is Keras's mixed policy: float32 variables (so the SavedModel keeps the
# float32 weights), matmuls and activations in bfloat16, softmax, LayerNorm and the logits in
# float32 (modeling.py).
_PRECISION_POLICIES = {"float32": "float32", "bfloat16": "mixed_bfloat16"}


def model_in_precision(model: keras.Model, build_model: Callable[[], keras.Model],
                       precision: str) -> keras.Model:
  """The model to export at `precision`: `model` itself when it computes in that dtype already,
  else a copy built by `build_model` under that precision's policy holding `model`'s weights
  (matched by variable path, i.e. by checkpoint name). A model trained with --mixed_precision
  exports in float32 the same way."""
  policy = _PRECISION_POLICIES[precision]
  if model.dtype_policy.name == policy:
    return model
  previous = keras.config.dtype_policy()
  keras.config.set_dtype_policy(policy)
  try:
    copy = build_model()
  finally:
    keras.config.set_dtype_policy(previous)
  weights = {variable.path: variable for variable in model.weights}
  for variable in copy.weights:
    variable.assign(weights[variable.path])
  logging.info("Exporting in %s (Keras policy %s)", precision, policy)
  return copy


@dataclasses.dataclass(frozen=True)
class RequestLimits:
  """The largest request an export serves (`--max_request_rows`, `--max_request_tokens`).

  max_rows: rows of a request (texts, questions, id rows; multiple choice's endings count once
    per question).
  max_tokens: token positions the model computes on: rows x the padded sequence length (x
    endings), i.e. the size of `input_ids` for the token_ids signature and of the encoded
    features for text. Activation memory grows linearly with it (benchmarks/RESULTS.md has
    BERT-Base's numbers).
  """
  max_rows: int = choices.DEFAULT_MAX_REQUEST_ROWS
  max_tokens: int = choices.DEFAULT_MAX_REQUEST_TOKENS


def existing_versions(export_dir: str) -> list[int]:
  """The integer version directories under export_dir, ascending."""
  if not os.path.isdir(export_dir):
    return []
  return sorted(int(name) for name in os.listdir(export_dir)
                if re.fullmatch(r"\d+", name) and os.path.isdir(os.path.join(export_dir, name)))


def next_version(export_dir: str) -> int:
  """One more than the largest existing version (1 for a new export_dir)."""
  return max(existing_versions(export_dir), default=0) + 1


def fail_unless(condition: tf.Tensor, template: str, *values: tf.Tensor) -> tf.Operation:
  """An assert op that fails the request with InvalidArgument `template` formatted with values."""
  return tf.debugging.Assert(condition, [tf.strings.format(template, values)])


def _range_check(name: str, values: tf.Tensor, low: int, high: Optional[int],
                 allowed: str) -> tf.Operation:
  """Asserts low <= values (< high when given); the message names the input and its range."""
  smallest, largest = tf.reduce_min(values), tf.reduce_max(values)
  condition = smallest >= low
  if high is not None:
    condition = tf.logical_and(condition, largest < high)
  return fail_unless(condition, name + " holds values from {} to {}: " + allowed, smallest,
                     largest)


def rank_checks(features: Mapping[str, tf.Tensor],
                axes: Mapping[str, Sequence[str]]) -> list[tf.Operation]:
  """Asserts that every input has the dimensions `axes[name]` names (e.g. batch, length), with a
  message naming the input."""
  return [fail_unless(tf.equal(tf.rank(value), len(axes[name])),
                      "%s has shape {}: it must have %d dimension%s ([%s])" % (
                          name, len(axes[name]), "" if len(axes[name]) == 1 else "s",
                          ", ".join(axes[name])), tf.shape(value))
          for name, value in features.items()]


def with_rank(features: Mapping[str, tf.Tensor],
              axes: Mapping[str, Sequence[str]]) -> dict[str, tf.Tensor]:
  """The inputs once `rank_checks` passed, with their rank known to the graph.

  The rank comes from reshaping each checked input to its own dimensions, one by one. A static
  shape set on the input itself (`set_shape`, `tf.ensure_shape`) would not do: grappler's shape
  inference carries it back to the input, constant folding then decides the rank check is true
  before any request, and a later op fails instead, with a message naming no input."""
  features = checked(rank_checks(features, axes), features)
  return {name: tf.reshape(value, [tf.shape(value)[axis] for axis in range(len(axes[name]))])
          for name, value in features.items()}


def size_checks(input_ids: tf.Tensor, name: str, limits: RequestLimits) -> list[tf.Operation]:
  """Asserts that ids [batch, ..., length] hold at most `limits.max_rows` rows and
  `limits.max_tokens` positions in all."""
  shape = tf.shape(input_ids, out_type=tf.int64)
  return [fail_unless(shape[0] <= limits.max_rows, name + " has {} rows: at most %d rows per "
                      "request (`max_request_rows`)" % limits.max_rows, shape[0]),
          fail_unless(tf.reduce_prod(shape) <= limits.max_tokens,
                      name + " has shape {}, {} token positions: at most %d per request "
                      "(`max_request_tokens`)" % limits.max_tokens, shape, tf.reduce_prod(shape))]


def id_input_checks(features: Mapping[str, tf.Tensor],
                    config: Optional[modeling.BertConfig] = None,
                    names: Sequence[str] = ID_INPUTS,
                    limits: RequestLimits = RequestLimits()) -> list[tf.Operation]:
  """Asserts that int32 id inputs are one consistent BERT input, with messages naming the input.

  Without these a client's bug becomes a wrong answer: a `segment_ids` or `input_mask` of batch 1
  broadcasts over every row of `input_ids`, and an out-of-range id reads zeros on GPUs. Checked:
  the three inputs have one shape of at least one position (any rank: multiple choice adds a
  choices axis), `input_mask` holds only 0 and 1, ids are not negative and, with a `config`
  (the model's), `input_ids` < vocab_size, `segment_ids` < type_vocab_size and the
  length is at most max_position_embeddings; at most `limits`' rows and positions. All of it is
  a few reductions over the ids.
  `names` are the names of input_ids, input_mask and segment_ids in `features` (TF Hub's are
  input_word_ids, input_mask, input_type_ids).
  """
  ids_name, mask_name, segments_name = names
  input_ids = features[ids_name]
  checks = size_checks(input_ids, ids_name, limits)
  for name in names[1:]:
    checks.append(fail_unless(
        tf.reduce_all(tf.equal(tf.shape(features[name]), tf.shape(input_ids))),
        name + " has shape {} but " + ids_name + " has {}: all three must have one shape",
        tf.shape(features[name]), tf.shape(input_ids)))
  length = tf.shape(input_ids)[-1]
  max_length = None if config is None else config.max_position_embeddings
  long_enough = length >= 1
  if max_length is not None:
    long_enough = tf.logical_and(long_enough, length <= max_length)
  checks.append(fail_unless(long_enough, ids_name + " has length {}: the model takes 1 %s" % (
      "or more positions" if max_length is None else
      "to max_position_embeddings = %d positions" % max_length), length))
  checks.append(_range_check(mask_name, features[mask_name], 0, 2,
                             "the mask must be 0 (padding) or 1"))
  for name, limit, what in ((ids_name, "vocab_size", "token ids"),
                            (segments_name, "type_vocab_size", "segment ids")):
    high = getattr(config, limit) if config is not None else None
    checks.append(_range_check(name, features[name], 0, high, what + " must be in [0, %s)" % (
        "%s = %d" % (limit, high) if high is not None else limit)))
  return checks


def checked(checks: Sequence[tf.Operation], tensors: Mapping[str, tf.Tensor]
            ) -> dict[str, tf.Tensor]:
  """The tensors, readable only after the checks passed (so no op runs on a bad request)."""
  with tf.control_dependencies(checks):
    return {name: tf.identity(value) for name, value in tensors.items()}


def text_input_checks(texts: Mapping[str, tf.Tensor],
                      limits: RequestLimits = RequestLimits()) -> list[tf.Operation]:
  """Asserts that string inputs have one batch size of at most `limits.max_rows` rows, at most
  MAX_REQUEST_TEXT_BYTES in all, and are valid UTF-8.

  Rows of a text pair (or a context and its row of endings) are matched by position, so inputs
  of different batch sizes are a client bug. The byte limit bounds a request's memory:
  tokenization holds a few tensors per byte.
  """
  names = sorted(texts)
  rows = tf.shape(texts[names[0]])[0]
  checks = [fail_unless(tf.equal(tf.shape(texts[name])[0], rows),
                        name + " has {} rows but " + names[0] + " has {}: text inputs are "
                        "matched row by row and must have one batch size",
                        tf.shape(texts[name])[0], rows)
            for name in names[1:]]
  checks.append(fail_unless(rows <= limits.max_rows, names[0] + " has {} rows: at most %d rows "
                            "per request (`max_request_rows`)" % limits.max_rows, rows))
  total = tf.add_n([tf.reduce_sum(tf.cast(tf.strings.length(texts[name]), tf.int64))
                   for name in names])
  checks.append(fail_unless(total <= MAX_REQUEST_TEXT_BYTES,
                            "the texts of this request have {} bytes in all: at most %d "
                            "bytes (%s) per request" % (MAX_REQUEST_TEXT_BYTES, " + ".join(names)),
                            total))
  checks.extend(_utf8_check(name, texts[name]) for name in names)
  return checks


def _utf8_check(name: str, texts: tf.Tensor) -> tf.Operation:
  """Asserts every text is valid UTF-8, as `--do_predict` requires of its files: a text that is
  not is refused naming its row, never answered from the bytes' replacements."""
  valid = tf.reshape(tf.equal(
      tf.strings.unicode_transcode(texts, "UTF-8", "UTF-8", errors="replace"), texts), [-1])
  # A 1 after the rows: argmin has a row to return when a request has none (zero rows are valid).
  first_invalid = tf.argmin(tf.concat([tf.cast(valid, tf.int32), [1]], 0))
  return fail_unless(tf.reduce_all(valid), name + " row {} is not valid UTF-8", first_invalid)


def float32_outputs(outputs: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
  """The outputs with floating tensors in float32, whatever the precision computed them."""
  return {name: tf.cast(value, tf.float32) if value.dtype.is_floating else value
          for name, value in outputs.items()}


class ServingModule:
  """One export: its in-graph text encoder, the model's config and what its signatures compute.

  Every task's export has the same two signatures, which this class builds with the request
  checks around what a task writes:
  - `serving_default` on the string inputs `text_inputs` (name -> rank: 1 for [batch], 2 for
    multiple choice's [batch, endings]); `text_outputs(texts)` computes its outputs;
  - `token_ids` on int32 `input_ids`, `input_mask`, `segment_ids` (`id_inputs`) of rank
    `ids_rank` ([batch, length]; multiple choice's [batch, endings, length]);
    `ids_outputs(features)` computes them from features under those (`ID_INPUTS`) names.
  Both receive inputs that passed `text_input_checks` or `id_input_checks` (ids also against the
  sizes of `config`, when given), so no op runs on a malformed request. TF Hub's pair has one
  of them each: its preprocessor, whose outputs are the ids, sets `ids_rank = None`; its
  encoder sets `text_inputs = None`, and its ids signature is then `serving_default`.
  `extra_signatures` adds further named signatures (built with `text_signature`, they get the
  same checks); `saved_attributes` adds a Python API beside them (TF Hub's `__call__`, ...).
  `write_saved_model` saves a module; its `limits` (`RequestLimits`) bound every signature's
  requests.

  With `pack_requests` (the default) a module's model reads each request packed
  (`model_features`): its rows share rows of the request's padded width, each attending only to
  itself, so the answers are the padded rows' and the model computes fewer positions.
  """

  text_inputs: Optional[Mapping[str, int]] = {"text": 1}
  ids_rank: Optional[int] = 2
  id_inputs: Sequence[str] = ID_INPUTS
  limits: RequestLimits = RequestLimits()
  pack_requests: bool = True

  def __init__(self, encoder: tf.Module, config: Optional[modeling.BertConfig]):
    self.encoder = encoder
    self.config = config

  def text_outputs(self, texts: Mapping[str, tf.Tensor]) -> Mapping[str, tf.Tensor]:
    """The text signature's outputs for checked string inputs (every module with `text_inputs`
    defines it)."""
    raise NotImplementedError("%s has text inputs but no text_outputs" % type(self).__name__)

  def ids_outputs(self, features: Mapping[str, tf.Tensor]) -> Mapping[str, tf.Tensor]:
    """The token-ids signature's outputs for checked int32 id features (every module with an
    `ids_rank` defines it)."""
    raise NotImplementedError("%s has an ids_rank but no ids_outputs" % type(self).__name__)

  def model_features(self, features: Mapping[str, tf.Tensor]) -> dict[str, tf.Tensor]:
    """A request's padded id features ([batch, length] or [batch, endings, length]) as the
    model reads them: packed rows (`packing.pack_request`) with `pack_requests`, else as they
    are. On packed rows a model's per-sequence outputs come in the request's order and its
    per-token ones through `packing.unpack_tokens`."""
    return packing.pack_request(features) if self.pack_requests else dict(features)

  def extra_signatures(self) -> dict[str, tf.types.experimental.GenericFunction]:
    """Signatures beyond the two every export has (none by default)."""
    return {}

  def warmup_text(self, num_words: int) -> str:
    """A text of num_words words for the warmup requests (`warmup_text`'s by default)."""
    return warmup_text(num_words)

  def saved_attributes(self) -> dict[str, Any]:
    """Objects saved as attributes of the SavedModel's root beside the signatures (none by
    default): what `tf.saved_model.load` and `hub.KerasLayer` read, e.g. TF Hub's `__call__` (a
    tf.function with its concrete functions traced), `variables`, `vocab_file`. Every variable
    their functions read must be among them or among the signatures' variables."""
    return {}

  def text_signature(self, text_inputs: Mapping[str, int],
                     outputs_fn: Callable[[Mapping[str, tf.Tensor]], Mapping[str, tf.Tensor]]
                     ) -> tf.types.experimental.GenericFunction:
    """A tf.function on string inputs `text_inputs` (name -> rank) that computes `outputs_fn` of
    the inputs once they passed `rank_checks` and `text_input_checks`. As in `ids_signature`, the
    inputs' rank is left open in the signature so that a request of another rank reaches the
    check naming the input."""
    names = list(text_inputs)
    axes = {name: ["batch"] + ["endings"] * (text_inputs[name] - 1) for name in names}

    @tf.function(input_signature=[tf.TensorSpec(None, tf.string, name=name) for name in names],
                 autograph=False)
    def serve_text(*texts):
      named = with_rank(dict(zip(names, texts)), axes)
      named = checked(text_input_checks(named, self.limits), named)
      with self.encoder.token_limit(self.limits.max_tokens, " + ".join(sorted(names))):
        return float32_outputs(outputs_fn(named))

    return serve_text

  def ids_signature(self) -> tf.types.experimental.GenericFunction:
    """A tf.function on int32 `id_inputs` that computes `ids_outputs` of the inputs once they
    passed `rank_checks` (rank `ids_rank`) and `id_input_checks`. The inputs' rank is left open
    in the signature so that a request of another rank reaches the check naming the input."""

    @tf.function(input_signature=[tf.TensorSpec(None, tf.int32, name=name)
                                  for name in self.id_inputs], autograph=False)
    def serve_token_ids(*ids):
      axes = ["batch"] + ["endings"] * (self.ids_rank - 2) + ["length"]
      named = with_rank(dict(zip(self.id_inputs, ids)), {name: axes for name in self.id_inputs})
      named = checked(id_input_checks(named, self.config, self.id_inputs, self.limits), named)
      return float32_outputs(self.ids_outputs(
          {name: named[input_name] for name, input_name in zip(ID_INPUTS, self.id_inputs)}))

    return serve_token_ids

  def signatures(self) -> dict[str, tf.types.experimental.GenericFunction]:
    """Every signature of the export, by name."""
    signatures = {}
    if self.text_inputs is not None:
      signatures[SERVING_DEFAULT] = self.text_signature(self.text_inputs, self.text_outputs)
    if self.ids_rank is not None:
      signatures[TOKEN_IDS_SIGNATURE if signatures else SERVING_DEFAULT] = self.ids_signature()
    return {**signatures, **self.extra_signatures()}


class EncodedTextServing(ServingModule):
  """The common export: each text row encoded by `encoder(*texts)` (a `BertInputEncoder`: one
  text, or a pair), then one function of the id features for both signatures."""

  def __init__(self, encoder: tf.Module, config: Optional[modeling.BertConfig],
               outputs_fn: OutputsFn, text_inputs: Sequence[str]):
    super().__init__(encoder, config)
    self.outputs_fn = outputs_fn
    self.text_inputs = {name: 1 for name in text_inputs}

  def text_outputs(self, texts):
    features = self.encoder(*[texts[name] for name in self.text_inputs])
    return self.outputs_fn({name: tf.cast(features[name], tf.int32) for name in ID_INPUTS})

  def ids_outputs(self, features):
    return self.outputs_fn(features)


def prediction_log(signature_name: str, inputs: Mapping[str, np.ndarray]) -> bytes:
  """A serialized `tensorflow.serving.PredictionLog` holding one PredictRequest.

  Written from tensorflow_serving/apis' .proto field numbers (PredictionLog.predict_log = 6,
  PredictLog.request = 1, PredictRequest.model_spec = 1 and inputs = 2 (map<string, TensorProto>),
  ModelSpec.signature_name = 3), so exporting needs no tensorflow-serving-api package.
  """
  field = tfrecord_encoding.length_delimited
  model_spec = field(3, signature_name.encode("utf-8"))
  request = field(1, model_spec)
  for name in sorted(inputs):
    entry = (field(1, name.encode("utf-8")) +
             field(2, tf.make_tensor_proto(inputs[name]).SerializeToString()))
    request += field(2, entry)
  return field(6, field(1, request))


def warmup_text(num_words: int) -> str:
  """An English text of num_words words, for warmup requests."""
  words = WARMUP_SENTENCE.split()
  return " ".join(words[i % len(words)] for i in range(num_words))


def warmup_requests(signatures: Mapping[str, tf.types.experimental.ConcreteFunction],
                    module: ServingModule) -> list[tuple[str, dict[str, np.ndarray]]]:
  """A few requests per signature within the module's `limits`: one text per padded length
  bucket, then a batch of up to 8 rows.

  String inputs get texts of `module.warmup_text(num_words)` (shared between the inputs of a
  pair), each with as many words as fit its bucket with the texts beside it in the row (a word
  can be several tokens, so the count comes from the encoder); int32 id inputs
  (`module.id_inputs`) get the encoder's ids of the same texts, so every request is valid for the
  model. An input of higher rank (multiple choice's [batch, endings]) gets each row twice, which
  counts twice against `limits.max_tokens`.
  """
  encoder, limits = module.encoder, module.limits
  id_names = dict(zip(module.id_inputs, ID_INPUTS))
  # The signatures leave their inputs' rank open (`rank_checks` names a wrong one): strings are
  # [batch] unless `text_inputs` says otherwise (multiple choice's endings: [batch, endings]).
  text_ranks = dict(module.text_inputs or {})
  texts_by_words = [module.warmup_text(num_words)
                    for num_words in range(1, encoder.max_seq_length + 1)]
  rows = _encoded_rows(encoder, texts_by_words)
  # Tokens of the warmup text of n words at index n - 1, without [CLS] and [SEP].
  text_tokens = [len(rows[text]["input_ids"]) - 2 for text in texts_by_words]
  requests = []
  for name in sorted(signatures):
    specs = {spec.name: spec for spec in tf.nest.flatten(
        signatures[name].structured_input_signature)}
    ranks = {input_name: module.ids_rank if input_name in id_names
             else text_ranks.get(input_name, 1) for input_name in specs}
    num_texts = max(1, sum(spec.dtype == tf.string for spec in specs.values()))
    # A row of rank 2 (ids) or 1 (strings) stands for one example; a higher rank repeats it twice.
    copies = 2 if any(ranks[input_name] > (2 if input_name in id_names else 1)
                      for input_name in specs) else 1
    for batch in _warmup_batches(encoder, copies, limits):
      texts = [texts_by_words[_words_that_fit(text_tokens, length, num_texts) - 1]
               for length in batch]
      inputs = {}
      for input_name, spec in specs.items():
        if spec.dtype == tf.string:
          value = np.array([text.encode("utf-8") for text in texts], dtype=object)
        elif input_name in id_names:
          value = _padded_rows(encoder, [rows[text][id_names[input_name]] for text in texts])
        else:
          raise ValueError("No warmup value for input %r of signature %r" % (input_name, name))
        while value.ndim < ranks[input_name]:
          value = np.stack([value, value], axis=1)
        inputs[input_name] = value
      requests.append((name, inputs))
  return requests


def _words_that_fit(text_tokens: Sequence[int], length: int, num_texts: int) -> int:
  """The most words (at least one) for each of num_texts texts that share a row of `length`
  positions with their special tokens ([CLS] and a [SEP] per text); text_tokens[n - 1] is the
  number of tokens of the n-word text."""
  fitting = [num_words for num_words, tokens in enumerate(text_tokens, start=1)
             if num_texts * tokens + num_texts + 1 <= length]
  return max(fitting, default=1)


def _encoded_rows(encoder: tf.Module, texts: Sequence[str]) -> dict[str, dict[str, np.ndarray]]:
  """text -> feature name -> its row up to its last real token, from one encoder call on all
  texts: an eager call per batch costs about 0.3 s on the tokenizer's many small ops, and a row's
  values at its real positions do not depend on the rows beside it."""
  features = {name: value.numpy().astype(np.int32)
              for name, value in encoder(tf.constant(list(texts))).items()}
  lengths = features["input_mask"].sum(axis=1)
  return {text: {name: value[row, :lengths[row]] for name, value in features.items()}
          for row, text in enumerate(texts)}


def _padded_rows(encoder: tf.Module, rows: Sequence[np.ndarray]) -> np.ndarray:
  """rows zero-padded into one int32 array as the encoder pads a batch: to max_seq_length, or
  with `dynamic_padding` to the smallest length bucket that holds the longest row."""
  width = encoder.max_seq_length
  if encoder.dynamic_padding:
    width = int(in_graph_tokenization.padded_length([len(row) for row in rows], width))
  padded = np.zeros([len(rows), width], np.int32)
  for index, row in enumerate(rows):
    padded[index, :len(row)] = row
  return padded


def _warmup_batches(encoder: tf.Module, copies: int, limits: RequestLimits) -> list[list[int]]:
  """Warmup requests as the padded lengths of their rows: each length bucket alone, then a batch
  of up to 8 (the buckets in turn), all within `limits`. A row costs `copies` times its padded
  length, or max_seq_length where the encoder pads every row to it."""
  max_length = encoder.max_seq_length

  def cost(length: int) -> int:
    return copies * (length if encoder.dynamic_padding else max_length)

  lengths = [length for length in in_graph_tokenization.padded_length_buckets(max_length)
             if cost(length) <= limits.max_tokens]
  size = min(8, limits.max_rows, limits.max_tokens // max(map(cost, lengths), default=1))
  batch = [[lengths[i % len(lengths)] for i in range(size)]] if lengths and size > 1 else []
  return [[length] for length in lengths] + batch


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


def serving_root(encoder: tf.Module, functions: Sequence[tf.types.experimental.ConcreteFunction],
                 attributes: Optional[Mapping[str, Any]] = None) -> tf.train.Checkpoint:
  """What is saved: the encoder (vocab asset, tokenizer resources), the functions' variables and
  `attributes` (a module's `saved_attributes`).

  Keras models are deliberately not tracked. Keras 3 saves each of its variables as a new plain
  tf.Variable; TF's C++ loader (TF Serving, `saved_model_cli run`) restores those copies while
  the signature graphs read the original handles, so every call fails with "Could not find
  variable ..." (`tf.saved_model.load` in Python re-wires them and hides this). Tracking the
  tf.Variables the signatures capture stores every weight once, under the handle the graphs read.
  The root is a `tf.train.Checkpoint`, TensorFlow's trackable object that takes any attribute
  (`tf.Module` reserves `variables` and `trainable_variables`, which TF Hub's API saves).
  """
  root = tf.train.Checkpoint()
  root.encoder = encoder
  root.signature_variables = signature_variables(functions)
  for name, value in (attributes or {}).items():
    setattr(root, name, value)
  return root


class VersionTakenError(errors.InputError):
  """The export version asked for exists already."""

  def __init__(self, export_dir: str, version: int):
    super().__init__("%s already exists: choose another version" %
                     os.path.join(export_dir, str(version)))


def check_export_dir(export_dir: str, output_dir: Optional[str] = None,
                     tf_hub_pair: bool = False) -> None:
  """Raises FlagError unless a local `export_dir` can hold this run's versions: TF Serving serves
  its newest numbered directory, so it may not be a SavedModel itself (a version directory), be
  the directory where `output_dir`'s run keeps its best checkpoint, or hold another training run
  than this one's (`output_dir`, where exports may go) or a model's files (a Google release, a
  conversion: `atomic_files.model_files`). It holds one model: versions of a served
  model, or TF Hub's pair (`tf_hub_pair`: `encoder/` and `preprocessor/`, each with versions),
  never both. Runs in the validation pass; `check_same_model_kind` checks the versions there
  when exporting."""
  if output_dir and atomic_files.same_place(export_dir,
                                            os.path.join(output_dir, checkpoints.BEST_DIR)):
    raise errors.FlagError("`export_dir`=%s is where `output_dir`=%s keeps its best checkpoint: "
                           "give the exports a directory of their own" % (export_dir, output_dir))
  if file_patterns.is_remote(export_dir) or not os.path.isdir(export_dir):
    return
  names = os.listdir(export_dir)
  if "saved_model.pb" in names:
    raise errors.FlagError("`export_dir`=%s is a SavedModel (a version directory): name the "
                           "directory that holds the versions" % export_dir)
  pair = sorted(name for name in names if name in (choices.TF_HUB_ENCODER,
                                                   choices.TF_HUB_PREPROCESSOR))
  versions = sorted((name for name in names if name.isdigit()), key=int)
  if tf_hub_pair and versions:
    raise errors.FlagError("`export_dir`=%s holds versions of a served model (%s/): give TF Hub's "
                           "pair a directory of its own" % (export_dir, versions[-1]))
  if not tf_hub_pair and pair:
    raise errors.FlagError("`export_dir`=%s holds TF Hub's BERT pair (%s/): give this model's "
                           "versions a directory of their own" % (export_dir, pair[0]))
  if output_dir and os.path.isdir(output_dir) and os.path.samefile(export_dir, output_dir):
    return
  training = sorted(name for name in names if name in ("checkpoint", "training_settings.json") or
                    name.startswith("model.ckpt-"))
  if training:
    raise errors.FlagError("`export_dir`=%s holds another training run (%s): give the exports a "
                           "directory of their own" % (export_dir, training[0]))
  model = atomic_files.model_files(export_dir)
  if model:
    raise errors.FlagError("`export_dir`=%s holds a model's files (%s: a release or a "
                           "conversion): give the exports a directory of their own" %
                           (export_dir, model[0]))


def _signatures(saved_model_dir: str) -> dict:
  """A SavedModel's serving signatures: name -> (input names, output names)."""
  saved_model = saved_model_pb2.SavedModel()
  with tf.io.gfile.GFile(os.path.join(saved_model_dir, "saved_model.pb"), "rb") as reader:
    saved_model.ParseFromString(reader.read())
  return {name: (sorted(signature.inputs), sorted(signature.outputs))
          for meta_graph in saved_model.meta_graphs
          for name, signature in meta_graph.signature_def.items()
          if not name.startswith("__")}


def check_same_model_kind(staged_dir: str, export_dir: str) -> None:
  """Raises InputError when export_dir's newest version serves other signatures than the staged
  export, or names its outputs otherwise (OUTPUT_NAMES_FILE, where both have one): a new version
  there would silently switch TF Serving to another kind of model, or to labels of another
  task under the same signatures (its clients would read "high" where they read "1")."""
  versions = existing_versions(export_dir)
  if not versions:
    return
  newest = os.path.join(export_dir, str(versions[-1]))
  if not tf.io.gfile.exists(os.path.join(newest, "saved_model.pb")):
    return
  old, new = _signatures(newest), _signatures(staged_dir)
  if old != new:
    differing = next(name for name in sorted(set(old) | set(new)) if old.get(name) != new.get(name))
    raise errors.InputError(
        "`export_dir`=%s: version %d serves another model (its %s; this model's %s): export to a "
        "directory of this model's own" % (export_dir, versions[-1],
                                            _described_signature(old, differing),
                                            _described_signature(new, differing)))
  check_output_names(export_dir, _output_names(staged_dir))


def check_output_names(export_dir: str, output_names: Optional[Sequence[str]]) -> None:
  """Raises InputError when export_dir's newest version names its outputs (OUTPUT_NAMES_FILE)
  otherwise than `output_names` (none, as for regression or SQuAD: not compared). Checked on the
  staged export (`check_same_model_kind`), and by `fine_tuning.run` as soon as the run knows its
  names, before training: the export at the end would be refused."""
  versions = existing_versions(export_dir)
  if not output_names or not versions:
    return
  old_names = _output_names(os.path.join(export_dir, str(versions[-1])))
  if old_names is not None and tuple(old_names) != tuple(output_names):
    raise errors.InputError(
        "`export_dir`=%s: version %d names its outputs %s, this model %s: it is another "
        "model's directory; export to a directory of this model's own" % (
            export_dir, versions[-1], ", ".join(old_names), ", ".join(output_names)))


def _described_signature(signatures: Mapping[str, tuple], name: str) -> str:
  """`<name> takes [...] and gives [...]`, or `no <name> signature` (`_signatures`' entries)."""
  if name not in signatures:
    return "no %s signature" % name
  inputs, outputs = signatures[name]
  return "%s takes [%s] and gives [%s]" % (name, ", ".join(inputs), ", ".join(outputs))


def _output_names(saved_model_dir: str) -> Optional[tuple]:
  """The output names an export recorded (OUTPUT_NAMES_FILE), or None where it has none."""
  path = os.path.join(saved_model_dir, "assets.extra", OUTPUT_NAMES_FILE)
  return task_files.read_label_list(path) if os.path.exists(path) else None


def _rename_unless_taken(source: str, target: str) -> bool:
  """Renames directory source to target unless target exists; whether it did.

  On a local disk rename(2) never replaces a non-empty directory, and every version directory
  holds a SavedModel, so of two exports renaming to one version exactly one succeeds. An existing
  empty directory or file is left alone too. On `scheme://` file systems, which have no atomic
  directory rename, tf.io.gfile checks the name just before renaming.
  """
  if file_patterns.is_remote(target):
    try:
      tf.io.gfile.rename(source, target, overwrite=False)
    except tf.errors.AlreadyExistsError:
      return False
    return True
  if os.path.lexists(target):
    return False
  try:
    os.rename(source, target)
  except OSError as error:
    if error.errno in (errno.EEXIST, errno.ENOTEMPTY, errno.ENOTDIR, errno.EISDIR):
      return False
    raise
  return True


def claim_version(staged_dir: str, export_dir: str, version: Optional[int] = None) -> str:
  """Moves a complete SavedModel directory to `export_dir/<version>/` and returns that path.

  The version defaults to `next_version(export_dir)`; when another export takes that number
  first (concurrent jobs sharing an export_dir), the next free one is taken, so two exports never
  end in one version directory. A `version` asked for that is taken raises VersionTakenError.
  """
  candidate = next_version(export_dir) if version is None else version
  while not _rename_unless_taken(staged_dir, os.path.join(export_dir, str(candidate))):
    if version is not None:
      raise VersionTakenError(export_dir, version)
    candidate = max(candidate + 1, next_version(export_dir))
  return os.path.join(export_dir, str(candidate))


# One export at a time per process: they share the process's staging directory.
_EXPORT_LOCK = threading.Lock()


def write_saved_model(export_dir: str, module: ServingModule, version: Optional[int] = None,
                      limits: Optional[RequestLimits] = None,
                      output_names: Optional[Sequence[str]] = None) -> str:
  """Saves a module's signatures as `export_dir/<version>/` for TF Serving; returns that path.

  `output_names` (a classifier's labels, a tagger's tags; none for a regression) are written
  beside the model
  (OUTPUT_NAMES_FILE), so that a later export of other names is refused (`check_same_model_kind`).

  `limits` (default: the module's, `RequestLimits()` unless a task sets them) bound the requests
  of every signature and of the Python API that packs ids (TF Hub's `bert_pack_inputs`).
  The version is claimed only when the model is complete (`_staged_saved_model`), by renaming it
  into place (`claim_version`: the next free number, or `version`). Only the chief of a
  multi-worker run writes; the others return the path of the next version, the one the chief
  takes unless another job exports there at the same time.
  """
  if not distribution.is_chief():
    return os.path.join(export_dir, str(next_version(export_dir) if version is None else version))
  if version is not None and os.path.exists(os.path.join(export_dir, str(version))):
    raise VersionTakenError(export_dir, version)  # Before any work; claim_version checks again.
  with _EXPORT_LOCK, _staged_saved_model(export_dir, module, limits, output_names) as staged_dir:
    final_dir = claim_version(staged_dir, export_dir, version)
  logging.info("Exported SavedModel %s", final_dir)
  return final_dir


def check_paired_versions(export_dirs: Sequence[str]) -> None:
  """Raises InputError unless the export directories of one model's parts (TF Hub's encoder and
  preprocessor) end in the same version: TF Serving serves each directory's newest, and parts of
  two versions (another vocab, another model) would not fit together."""
  newest = {directory: max(existing_versions(directory), default=0) for directory in export_dirs}
  latest = max(newest.values(), default=0)
  behind = sorted(directory for directory, version in newest.items() if version != latest)
  if behind:
    ahead = next(directory for directory, version in newest.items() if version == latest)
    raise errors.InputError(
        "%s has no version %d beside %s/%d (the parts of one model are exported together, "
        "version for version): remove the unpaired versions or export to a new directory" % (
            ", ".join(behind), latest, ahead, latest))


def write_saved_models(modules: Mapping[str, ServingModule],
                       limits: Optional[RequestLimits] = None) -> list[str]:
  """Saves the parts of one model ({export_dir: module}: TF Hub's encoder and preprocessor)
  under one version number, the next free one in all of them; returns their paths.

  Every part is staged complete before any version is claimed, and the claims are renames one
  right after another: a failure or a kill while staging leaves no version, and no part of one
  version is served beside a part of another (`check_paired_versions`, run first)."""
  directories = list(modules)
  if not distribution.is_chief():
    version = max(next_version(directory) for directory in directories)
    return [os.path.join(directory, str(version)) for directory in directories]
  check_paired_versions(directories)
  with _EXPORT_LOCK, contextlib.ExitStack() as stack:
    staged = [stack.enter_context(_staged_saved_model(directory, module, limits))
              for directory, module in modules.items()]
    version = max(next_version(directory) for directory in directories)
    final_dirs = [claim_version(staged_dir, directory, version)
                  for staged_dir, directory in zip(staged, directories)]
  logging.info("Exported SavedModels %s", ", ".join(final_dirs))
  return final_dirs


@contextlib.contextmanager
def _staged_saved_model(export_dir: str, module: ServingModule, limits: Optional[RequestLimits],
                        output_names: Optional[Sequence[str]] = None) -> Iterator[str]:
  """Yields a hidden staging directory in `export_dir` (`.export.tmp-<host>-<pid>`: deleted on
  leaving if anything fails, and by the next export if this process dies) that holds the module's
  complete SavedModel: the variables its signatures read, its encoder (whose vocab or
  SentencePiece model travels as an asset), its `saved_attributes` and
  `assets.extra/tf_serving_warmup_requests` (`warmup_requests`). The caller claims it as a
  version (`claim_version` moves it away: there is nothing left to rename on leaving)."""
  tf.io.gfile.makedirs(export_dir)
  if limits is not None:
    module.limits = limits
  encoder = module.encoder
  with encoder.token_limit(module.limits.max_tokens, "inputs"):
    concrete = {name: fn.get_concrete_function() for name, fn in module.signatures().items()}
  # Outside the limit: the warmup ids come from one encoder call on more rows than a request.
  requests = warmup_requests(concrete, module)
  with (encoder.token_limit(module.limits.max_tokens, "inputs"),
        atomic_files.atomic_output(os.path.join(export_dir, "export"),
                                   named=export_dir) as staged_dir):
    tf.saved_model.save(serving_root(encoder, list(concrete.values()), module.saved_attributes()),
                        staged_dir, signatures=concrete)
    write_warmup_requests(staged_dir, requests)
    if output_names:
      task_files.write_label_list(os.path.join(staged_dir, "assets.extra", OUTPUT_NAMES_FILE),
                                  output_names)
    check_same_model_kind(staged_dir, export_dir)
    logging.info("Staged a SavedModel with signatures %s", ", ".join(sorted(concrete)))
    yield staged_dir
