# coding=utf-8
"""Fixed BERT features and the encoder's exports: the library of extract_features.py.

Lines of text (`text_a ||| text_b` for a pair) become batches of the original's features
(`read_batches`, by length bucket where asked), a `FeatureExtractor` runs the encoder on them and
gives the layers asked for (or one pooled vector per text), and `extract` writes them as the
original's JSON Lines or as NPZ batches (`write_npz_batch`), in input order, batch by batch so
that memory does not grow with the input. `export_encoder` writes the same computation as a
SavedModel that serves raw text; `export_tf_hub` writes TF Hub's BERT pair (an encoder and its
preprocessor) for `hub.KerasLayer` and TF Serving.
"""

import io
import itertools
import json
import os
import queue
import re
import threading
from typing import Any, Callable, Iterable, Iterator, Mapping, Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

import atomic_files
import choices
import errors
import export
import in_graph_tokenization
import length_buckets
import modeling
import packing
import progress_log
import tokenization

_PAIR_RE = re.compile(r"^(.*) \|\|\| (.*)$")


def parse_line(line: str) -> tuple[str, Optional[str]]:
  """Splits a line into (text_a, text_b) as the original: `a ||| b`, at the last ` ||| `."""
  line = line.strip()
  match = _PAIR_RE.match(line)
  if match is None:
    return line, None
  return match.group(1), match.group(2)


def example_tokens(tokenizer: tokenization.FullTokenizer, text_a: str, text_b: Optional[str],
                   max_seq_length: int) -> tuple[list[str], list[int]]:
  """The tokens `[CLS] a [SEP] (b [SEP])` and their segment ids, truncated as the original."""
  tokens_a = tokenizer.tokenize(text_a)
  tokens_b = tokenizer.tokenize(text_b) if text_b else []
  if tokens_b:
    tokenization.truncate_seq_pair(tokens_a, tokens_b, max_seq_length - 3)
  else:
    del tokens_a[max_seq_length - 2:]
  tokens = [tokenization.CLS_TOKEN] + tokens_a + [tokenization.SEP_TOKEN]
  segment_ids = [0] * len(tokens)
  if tokens_b:
    tokens += tokens_b + [tokenization.SEP_TOKEN]
    segment_ids += [1] * (len(tokens_b) + 1)
  return tokens, segment_ids


def parse_layer_indexes(layers: str, num_hidden_layers: int) -> list[int]:
  """Parses `layers` (comma-separated), checking every index against the model's depth."""
  try:
    indexes = [int(x) for x in layers.split(",")]
  except ValueError:
    raise errors.FlagError("`layers`=%r must be comma-separated integers" % layers) from None
  for index in indexes:
    if not -num_hidden_layers <= index < num_hidden_layers:
      raise errors.FlagError("`layers`: index %d is out of range for a model with %d layers "
                             "(allowed: %d to %d)" % (index, num_hidden_layers,
                                                     -num_hidden_layers, num_hidden_layers - 1))
  return indexes


# With length bucketing, lines are grouped by length within windows of this many batches.
BUCKETING_WINDOW_BATCHES = 16


class Batch:
  """A batch of examples: their line numbers (`linex_index`), tokens, and int32 arrays padded
  to `width`."""

  def __init__(self, indexes: list[int], tokens: list[list[str]], segment_ids: list[list[int]],
               tokenizer: tokenization.FullTokenizer, width: int):
    self.indexes = indexes
    self.tokens = tokens
    self.input_ids = np.zeros((len(tokens), width), np.int32)
    self.input_mask = np.zeros((len(tokens), width), np.int32)
    self.segment_ids = np.zeros((len(tokens), width), np.int32)
    for row, (row_tokens, row_segments) in enumerate(zip(tokens, segment_ids)):
      self.input_ids[row, :len(row_tokens)] = tokenizer.convert_tokens_to_ids(row_tokens)
      self.input_mask[row, :len(row_tokens)] = 1
      self.segment_ids[row, :len(row_tokens)] = row_segments


def read_batches(lines: Iterable[str], tokenizer: tokenization.FullTokenizer, max_seq_length: int,
                 batch_size: int, bucket_by_length: bool = False) -> Iterator[Batch]:
  """Tokenizes input lines and groups them into batches, lazily.

  Without `bucket_by_length`, batches of consecutive lines padded to max_seq_length (the
  original's). With it, the lines of each window of `BUCKETING_WINDOW_BATCHES` batches are
  sorted by length, cut into batches and each padded to the smallest length bucket
  (`length_buckets`) holding its longest line; `Batch.indexes` tells where each row belongs.
  """
  window_size = batch_size * (BUCKETING_WINDOW_BATCHES if bucket_by_length else 1)
  buckets = length_buckets.padded_length_buckets(max_seq_length)
  window = []  # (line number, tokens, segment ids)
  for index, line in enumerate(itertools.chain(lines, [None])):
    if line is not None:
      window.append((index, *example_tokens(tokenizer, *parse_line(line), max_seq_length)))
    if len(window) < window_size and line is not None:
      continue
    if bucket_by_length:
      window.sort(key=lambda row: len(row[1]))
    for start in range(0, len(window), batch_size):
      indexes, tokens, segments = zip(*window[start:start + batch_size])
      longest = max(len(row_tokens) for row_tokens in tokens)
      width = (min(b for b in buckets if b >= longest) if bucket_by_length else max_seq_length)
      yield Batch(list(indexes), list(tokens), list(segments), tokenizer, width)
    window = []


# What a model reads of a request's padded id features: the features themselves or packed rows
# (`export.ServingModule.model_features`).
ModelFeatures = Callable[[Mapping[str, tf.Tensor]], dict]


def request_outputs(bert: modeling.BertModel, features: Mapping[str, tf.Tensor],
                    model_features: ModelFeatures, training: bool = False) -> dict:
  """BertModel's `pooled_output` [B, H], `sequence_output` and `encoder_outputs` (every layer's)
  [B, T, H] for a request's padded id features [B, T], computed on `model_features(features)`.
  On packed rows the per-token outputs are unpacked to the request's rows (`packing.unpack_tokens`:
  each row's values up to its last real token, zero after it, where padded rows hold what the
  model computed on their padding), and a row without real tokens gets zeros."""
  inputs = model_features(features)
  outputs = bert(inputs, training=training)
  if not packing.is_packed(inputs):
    return outputs

  def unpacked(values):
    return packing.zero_empty_sequences(packing.unpack_tokens(
        values, inputs[packing.SEQUENCE_STARTS], inputs[packing.SEQUENCE_IDS]),
                                        features["input_mask"])

  return {"pooled_output": packing.zero_empty_sequences(outputs["pooled_output"],
                                                        features["input_mask"]),
          "sequence_output": unpacked(outputs["sequence_output"]),
          "encoder_outputs": [unpacked(layer) for layer in outputs["encoder_outputs"]]}


class FeatureExtractor(tf.Module):
  """Runs BERT and returns the requested encoder layers, per token or pooled."""

  def __init__(self, bert: modeling.BertModel, layer_indexes: Sequence[int], pooling: str = "none"):
    super().__init__()
    if pooling not in ("none", "cls", "mean"):
      raise ValueError("pooling must be none, cls or mean, got %r" % pooling)
    self.bert = bert
    self.layer_indexes = list(layer_indexes)
    self.pooling = pooling

  @tf.function(input_signature=[tf.TensorSpec([None, None], tf.int32)] * 3)
  def __call__(self, input_ids, input_mask, segment_ids):
    """Returns float32 [batch, layers, seq, hidden], or [batch, layers, hidden] when pooling."""
    outputs = self.bert(input_ids, input_mask=input_mask, token_type_ids=segment_ids,
                        training=False)
    return self.selected_layers(outputs, input_mask, self.pooling)

  def selected_layers(self, outputs: dict, input_mask: tf.Tensor, pooling: str) -> tf.Tensor:
    """The `layer_indexes` layers of BertModel outputs, stacked on axis 1, pooled per `pooling`."""
    encoder_outputs = outputs["encoder_outputs"]
    layers = tf.stack([encoder_outputs[i] for i in self.layer_indexes], axis=1)
    if pooling == "cls":
      return layers[:, :, 0, :]
    if pooling == "mean":
      weights = tf.cast(input_mask, layers.dtype)[:, tf.newaxis, :, tf.newaxis]
      return tf.reduce_sum(layers * weights, axis=2) / tf.reduce_sum(weights, axis=2)
    return layers

  def serving_outputs(self, features: dict, model_features: ModelFeatures = dict) -> dict:
    """The encoder export's outputs for int32 id features, like TF Hub's BERT encoders.

    `sequence_output` [B, T, len(layers) * H]: the `layer_indexes` layers concatenated per token
    (the values of the JSON Lines `features`); `pooled_output` [B, len(layers) * H]: with
    `pooling` cls or mean those layers pooled and concatenated (the JSON Lines `pooled` values),
    otherwise BERT's pooler output; `input_mask` [B, T] marks the real tokens. The model reads
    `model_features(features)` (`request_outputs`).
    """
    outputs = request_outputs(self.bert, features, model_features)

    def concatenated(layers):  # [B, L, ..., H] -> [B, ..., L * H]
      return tf.concat(tf.unstack(layers, num=len(self.layer_indexes), axis=1), axis=-1)

    pooled = outputs["pooled_output"]
    if self.pooling != "none":
      pooled = concatenated(self.selected_layers(outputs, features["input_mask"], self.pooling))
    return {"sequence_output": concatenated(
                self.selected_layers(outputs, features["input_mask"], "none")),
            "pooled_output": pooled, "input_mask": features["input_mask"]}


TEXT_PAIR_SIGNATURE = "text_pair"


class EncoderServing(export.EncodedTextServing):
  """The encoder export (`FeatureExtractor.serving_outputs`' outputs): `serving_default` on
  `text`, `text_pair` on `text` and `text_b` (a row whose text_b has no tokens is encoded as a
  single text, as this script treats a line without ` ||| `), `token_ids` on the ids. Texts are
  tokenized in the graph as FullTokenizer does, truncated as `example_tokens`, and padded to a
  length bucket (`BertInputEncoder(dynamic_padding=True)`)."""

  def __init__(self, extractor: FeatureExtractor, tokenizer: tokenization.FullTokenizer,
               max_seq_length: int):
    super().__init__(
        in_graph_tokenization.BertInputEncoder.for_tokenizer(tokenizer, max_seq_length),
        extractor.bert.config,
        lambda features: extractor.serving_outputs(features, self.model_features), ["text"])

  def _encode_pair(self, text: tf.Tensor, text_b: tf.Tensor) -> dict:
    """Pairs where text_b has tokens, single texts elsewhere, padded to one width."""
    ids = self.encoder.tokenize(tf.concat([text, text_b], axis=0))
    batch_size = tf.shape(text)[0]
    ids_a, ids_b = ids[:batch_size], ids[batch_size:]
    pair, single = self.encoder.pack(ids_a, ids_b), self.encoder.pack(ids_a)
    width = tf.maximum(tf.shape(pair["input_ids"])[1], tf.shape(single["input_ids"])[1])
    has_b = (ids_b.row_lengths() > 0)[:, tf.newaxis]
    return {name: tf.cast(tf.where(has_b, _pad_columns(pair[name], width),
                                   _pad_columns(single[name], width)), tf.int32)
            for name in export.ID_INPUTS}

  def extra_signatures(self):
    return {TEXT_PAIR_SIGNATURE: self.text_signature(
        {"text": 1, "text_b": 1},
        lambda texts: self.outputs_fn(self._encode_pair(texts["text"], texts["text_b"])))}


def export_encoder(export_dir: str, extractor: FeatureExtractor,
                   tokenizer: tokenization.FullTokenizer, max_seq_length: int,
                   precision: str = "float32",
                   limits: export.RequestLimits = export.RequestLimits()) -> str:
  """Writes the feature extractor as a SavedModel under `export_dir/<version>/` (`EncoderServing`),
  computing in `precision`, serving requests within `limits`; returns its path."""
  extractor = FeatureExtractor(bert_in_precision(extractor.bert, precision),
                               extractor.layer_indexes, extractor.pooling)
  return export.write_saved_model(export_dir, EncoderServing(extractor, tokenizer, max_seq_length),
                                  limits=limits)


# TF Hub's names of the three BERT inputs, and ours (export.ID_INPUTS).
TF_HUB_INPUTS = {"input_word_ids": "input_ids", "input_mask": "input_mask",
                 "input_type_ids": "segment_ids"}


def tf_hub_inputs(features: dict) -> dict:
  """Our id features under TF Hub's names."""
  return {hub_name: features[name] for hub_name, name in TF_HUB_INPUTS.items()}


class TfHubEncoderServing(export.ServingModule):
  """TF Hub's BERT encoder SavedModel (the API of tfhub.dev's `bert_en_uncased_L-12_H-768_A-12/4`).

  Its root object, which `hub.load` returns and `hub.KerasLayer` wraps:
  - `__call__(inputs, training=False)`: `inputs` a dict of int32 [batch, seq] `input_word_ids`,
    `input_mask`, `input_type_ids`; returns `pooled_output` [batch, H], `sequence_output`
    [batch, seq, H], `encoder_outputs` (a list of every layer's [batch, seq, H]) and `default`
    (= pooled_output), float32. `training=True` applies dropout (hub.KerasLayer passes it).
  - `variables`, `trainable_variables`: what `hub.KerasLayer(..., trainable=True)` fine-tunes.
  - `vocab_file` (or `sp_model_file`) and `do_lower_case`, as TF Hub's encoders keep them, and
    `bert_config`, the model's bert_config.json text (a string variable), so that
    convert_checkpoint.py and run_classifier_with_tfhub.py know its config.
  Its one signature, `serving_default`, takes the same three inputs (checked as every export's
  ids) and returns the same outputs with `encoder_outputs` stacked [batch, layers, seq, H].
  """

  text_inputs = None
  id_inputs = tuple(TF_HUB_INPUTS)
  # Not packed: TF Hub's encoders give every position the model's values, padding included, and
  # their consumers compare them (convert_checkpoint proves a conversion on every position).
  pack_requests = False

  def __init__(self, bert: modeling.BertModel, tokenizer: tokenization.FullTokenizer,
               max_seq_length: int):
    super().__init__(
        in_graph_tokenization.BertInputEncoder.for_tokenizer(tokenizer, max_seq_length),
        bert.config)
    self.bert = bert

  def hub_outputs(self, features: dict, training: bool = False) -> dict:
    """TF Hub's encoder outputs for our id features (`request_outputs`)."""
    outputs = request_outputs(self.bert, features, self.model_features, training)
    pooled = tf.cast(outputs["pooled_output"], tf.float32)
    return {"pooled_output": pooled, "default": pooled,
            "sequence_output": tf.cast(outputs["sequence_output"], tf.float32),
            "encoder_outputs": [tf.cast(layer, tf.float32) for layer in outputs["encoder_outputs"]]}

  def ids_outputs(self, features):
    outputs = self.hub_outputs(features)
    return {**outputs, "encoder_outputs": tf.stack(outputs["encoder_outputs"], axis=1)}

  def saved_attributes(self):

    @tf.function(autograph=False)
    def call(inputs, training=False):
      return self.hub_outputs({name: inputs[hub_name] for hub_name, name in TF_HUB_INPUTS.items()},
                              training)

    specs = {name: tf.TensorSpec([None, None], tf.int32, name=name) for name in TF_HUB_INPUTS}
    variables = export.signature_variables(
        [call.get_concrete_function(specs, training=training) for training in (False, True)])
    tokenization_info = {name: getattr(self.encoder, name)
                         for name in ("vocab_file", "sp_model_file", "do_lower_case")
                         if hasattr(self.encoder, name)}
    return {"__call__": call, "variables": variables,
            "trainable_variables": [variable for variable in variables if variable.trainable],
            "bert_config": tf.Variable(self.bert.config.to_json_string(), trainable=False,
                                       name="bert_config"),
            **tokenization_info}


class TfHubPreprocessorServing(export.ServingModule):
  """TF Hub's BERT preprocessing SavedModel (the API of tfhub.dev's `bert_en_uncased_preprocess/3`),
  tokenizing as `tokenization.FullTokenizer`.

  Its root object:
  - `__call__(sentences)`: strings [batch] -> int32 `input_word_ids`, `input_mask`,
    `input_type_ids` [batch, seq_length], `[CLS] text [SEP]` cut to seq_length;
  - `tokenize(sentences)`: ragged int32 ids [batch, (words), (pieces)]
    (`BertInputEncoder.word_pieces`; [batch, (pieces)] with a SentencePiece model);
  - `bert_pack_inputs(segments, seq_length=seq_length)`: a list of one or two tokenized batches
    (ragged rank 1 or 2) -> the three inputs [batch, seq_length] of `[CLS] a [SEP] (b [SEP])`. A
    pair too long is cut as the original's `truncate_seq_pair`, which for two segments keeps the
    same lengths as TF Hub's round-robin truncation.
  Its one signature, `serving_default` on `text`, returns what `__call__` does.
  """

  ids_rank = None

  def __init__(self, tokenizer: tokenization.FullTokenizer, seq_length: int):
    super().__init__(in_graph_tokenization.BertInputEncoder.for_tokenizer(
        tokenizer, seq_length, dynamic_padding=False), None)

  def text_outputs(self, texts):
    return tf_hub_inputs(self.encoder(texts["text"]))

  def saved_attributes(self):
    strings = [tf.TensorSpec([None], tf.string)]
    default_length = self.encoder.max_seq_length

    @tf.function(autograph=False)
    def bert_pack_inputs(inputs, seq_length=default_length):
      segments = [segment.merge_dims(1, -1) for segment in inputs]  # Words' pieces in a row.
      if len(segments) == 2:  # Rows are paired by position: one batch size, as the text inputs.
        rows = [segment.nrows() for segment in segments]
        with tf.control_dependencies([export.fail_unless(
            tf.equal(rows[0], rows[1]), "bert_pack_inputs: the second segment has {} rows but "
            "the first has {}: the segments are paired row by row and must have one batch size",
            rows[1], rows[0])]):
          segments = [tf.identity(segment) for segment in segments]
      return tf_hub_inputs(self.encoder.pack(*segments, seq_length=seq_length))

    for num_segments in (1, 2):
      for ragged_rank in (1, 2):
        bert_pack_inputs.get_concrete_function(
            [tf.RaggedTensorSpec([None] * (ragged_rank + 1), tf.int32)] * num_segments,
            seq_length=tf.TensorSpec([], tf.int32))
    return {"__call__": tf.function(lambda sentences: self.text_outputs({"text": sentences}),
                                    input_signature=strings, autograph=False),
            "tokenize": tf.function(self.encoder.word_pieces, input_signature=strings,
                                    autograph=False),
            "bert_pack_inputs": bert_pack_inputs}


def export_tf_hub(export_dir: str, bert: modeling.BertModel,
                  tokenizer: tokenization.FullTokenizer, seq_length: int,
                  precision: str = "float32",
                  limits: export.RequestLimits = export.RequestLimits()) -> tuple[str, str]:
  """Writes TF Hub's BERT pair as one version of both (`export.write_saved_models`): `bert`
  computing in `precision` to `export_dir/encoder/<version>/` (`TfHubEncoderServing`) and its
  preprocessor to `export_dir/preprocessor/<version>/` (`TfHubPreprocessorServing`), both
  serving requests within `limits`; returns their paths."""
  encoder, preprocessor = export.write_saved_models({
      os.path.join(export_dir, choices.TF_HUB_ENCODER):
          TfHubEncoderServing(bert_in_precision(bert, precision), tokenizer, seq_length),
      os.path.join(export_dir, choices.TF_HUB_PREPROCESSOR):
          TfHubPreprocessorServing(tokenizer, seq_length)}, limits=limits)
  return encoder, preprocessor


def check_tf_hub_export_dir(export_dir: str) -> None:
  """Raises InputError unless TF Hub's pair in `export_dir` ends in one version of both
  (`export.check_paired_versions`), before any work."""
  export.check_paired_versions([os.path.join(export_dir, choices.TF_HUB_ENCODER),
                                os.path.join(export_dir, choices.TF_HUB_PREPROCESSOR)])


def bert_in_precision(bert: modeling.BertModel, precision: str) -> modeling.BertModel:
  """`bert`, or a copy with its weights computing in `precision` (`export.model_in_precision`)."""
  return export.model_in_precision(bert, lambda: build_bert(bert.config), precision)


def build_bert(config: modeling.BertConfig) -> modeling.BertModel:
  """The encoder with all its variables, named `bert` as in Google's checkpoints."""
  bert = modeling.BertModel(config, name="bert")
  bert.build()
  return bert


def _pad_columns(values: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
  """Zero-pads a [B, T] tensor to [B, width]."""
  return tf.pad(values, [[0, 0], [0, width - tf.shape(values)[1]]])


def _layer_entries(layer_indexes: Sequence[int], vectors: np.ndarray) -> list[dict]:
  """[{"index": i, "values": [...]}] with values rounded to 6 decimals as the original."""
  return [{"index": index, "values": [round(x, 6) for x in vector.tolist()]}
          for index, vector in zip(layer_indexes, vectors)]


def json_lines(batch: Batch, layer_indexes: Sequence[int], values: np.ndarray,
               pooling: str) -> Iterator[str]:
  """The JSON line of each example of a batch (`values` as `FeatureExtractor` returns them)."""
  for row, tokens in enumerate(batch.tokens):
    output = {"linex_index": batch.indexes[row]}
    if pooling == "none":
      output["features"] = [
          {"token": token, "layers": _layer_entries(layer_indexes, values[row, :, position])}
          for position, token in enumerate(tokens)]
    else:
      output["pooled"] = _layer_entries(layer_indexes, values[row])
    yield json.dumps(output) + "\n"


def write_npz_batch(directory: str, batch_number: int, batch: Batch,
                    layer_indexes: Sequence[int], values: np.ndarray) -> str:
  """Writes one batch as `features-<batch_number>.npz` and returns its path.

  Arrays: `linex_index` int64 [n] (the input line of each row); `layer_indexes` int32 [L];
  `input_ids`, `input_mask` int32 [n, T] (T = the batch's padded length; tokens are
  `input_ids[i, :input_mask[i].sum()]`);
  `layers` float32 [n, L, T, H] per token, or `pooled` float32 [n, L, H] with pooling.
  """
  path = os.path.join(directory, choices.NPZ_PATTERN % batch_number)
  key = "layers" if values.ndim == 4 else "pooled"
  linex_index = np.array(batch.indexes, np.int64)
  buffer = io.BytesIO()  # np.savez seeks, which GFile (e.g. on GCS) cannot.
  np.savez(buffer, linex_index=linex_index, layer_indexes=np.array(layer_indexes, np.int32),
           input_ids=batch.input_ids, input_mask=batch.input_mask, **{key: values})
  with tf.io.gfile.GFile(path, "wb") as writer:
    writer.write(buffer.getvalue())
  return path


def count_lines(path: str) -> int:
  """Number of lines of a text file (one cheap pass, for the progress line's ETA)."""
  with tf.io.gfile.GFile(path, "rb") as reader:
    return sum(1 for _ in reader)


def read_lines(path: str) -> Iterator[str]:
  """Lines of the input file as text (invalid UTF-8 dropped, as the tokenizer does)."""
  with tf.io.gfile.GFile(path, "rb") as reader:
    for line in reader:
      yield tokenization.convert_to_unicode(line)


def prefetch(items: Iterable, depth: int = 2) -> Iterator:
  """Yields `items`, produced `depth` ahead in a background thread.

  Tokenization (Python) then overlaps the model run (TensorFlow releases the GIL), and memory stays
  bounded by `depth` items. An exception in the producer is raised in the consumer.
  """
  buffer = queue.Queue(maxsize=depth)
  done = object()
  stop = threading.Event()

  def produce():
    try:
      for item in items:
        while not stop.is_set():
          try:
            buffer.put((item, None), timeout=0.1)
            break
          except queue.Full:
            continue
        if stop.is_set():
          return
      buffer.put((done, None))
    except Exception as error:  # pylint: disable=broad-except
      buffer.put((done, error))

  thread = threading.Thread(target=produce, daemon=True)
  thread.start()
  try:
    while True:
      item, error = buffer.get()
      if item is done:
        if error is not None:
          raise error
        return
      yield item
  finally:
    stop.set()


def extract(extractor: FeatureExtractor, batches: Iterable[Batch], output_file: str,
            output_format: str, total_lines: Optional[int] = None) -> int:
  """Runs every batch and writes its features; returns the number of examples written.

  The output (a JSON Lines file, or a directory of .npz files) appears under `output_file` only
  when complete; no examples is an error. A later run replaces a directory of .npz files only
  when it holds nothing else (`check_npz_output`).
  """
  with atomic_files.atomic_output(output_file) as temporary:
    if output_format == "npz":
      tf.io.gfile.makedirs(temporary)
      done, elapsed = _extract_to(extractor, batches, None, temporary, total_lines)
    else:
      with tf.io.gfile.GFile(temporary, "w") as writer:
        done, elapsed = _extract_to(extractor, batches, writer, temporary, total_lines)
    if not done:
      raise ValueError("no examples to extract: nothing written to %s" % output_file)
  logging.info("Wrote features of %d examples to %s in %.1f s (%.1f examples/s).", done,
               output_file, elapsed, done / max(elapsed, 1e-9))
  return done


def _extract_to(extractor: FeatureExtractor, batches: Iterable[Batch], writer: Optional[Any],
                npz_directory: str, total_lines: Optional[int]) -> tuple[int, float]:
  """Writes JSON lines to `writer` in input order, or .npz files to `npz_directory` when it is
  None."""
  progress = progress_log.Progress("Extracting features", total_lines, "examples")
  done = 0
  waiting = {}  # JSON lines of rows that come before rows not yet extracted, by linex_index
  for batch_number, batch in enumerate(prefetch(batches)):
    values = extractor(batch.input_ids, batch.input_mask, batch.segment_ids).numpy()
    if writer is None:
      write_npz_batch(npz_directory, batch_number, batch, extractor.layer_indexes, values)
      done += len(batch.tokens)
    else:
      waiting.update(zip(batch.indexes, json_lines(batch, extractor.layer_indexes, values,
                                                   extractor.pooling)))
      while done in waiting:
        writer.write(waiting.pop(done))
        done += 1
    progress.update(done)
  return done, progress.elapsed()
