# coding=utf-8
"""SQuAD's SavedModel: raw question and context in, `--do_predict`'s answer out, inside the graph.

`SquadServingModule` does in TensorFlow ops what squad_data.py and squad.py's post-processing do
in Python: the context split on SQuAD's whitespace and tokenized once, windows of it every
`doc_stride` sub-tokens, the model on each window, the best valid span over all windows mapped
back onto the context's characters; so TF Serving answers from text what `--do_predict` would.
"""

import dataclasses
from typing import Any

import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

import export
import in_graph_tokenization
import squad_data
import windowing

# The characters `squad_data.is_squad_whitespace` splits contexts on, as an RE2 class.
_SQUAD_WHITESPACE_RE = "[ \\t\\r\\n\\x{202F}]+"
_SPACE = 32


def _per_value(ragged: tf.RaggedTensor, row_values: tf.Tensor) -> tf.Tensor:
  """row_values[i] for every value of row i of `ragged` (flat, like `ragged.values`).

  Comparing a ragged tensor with a [B, 1] column directly broadcasts through ragged shapes, whose
  graph is many times larger and slow to build; gathering each row's value is one op."""
  return tf.gather(row_values, ragged.value_rowids())


def _ragged_take(ragged: tf.RaggedTensor, begin: tf.Tensor, end: tf.Tensor) -> tf.RaggedTensor:
  """Row i of the result is ragged[i, begin[i]:end[i] + 1] (inclusive end)."""
  position = (tf.range(tf.size(ragged.values, out_type=tf.int64)) -
              _per_value(ragged, ragged.row_starts()))
  keep = tf.logical_and(position >= _per_value(ragged, tf.cast(begin, tf.int64)),
                        position <= _per_value(ragged, tf.cast(end, tf.int64)))
  return tf.RaggedTensor.from_value_rowids(
      tf.boolean_mask(ragged.values, keep), tf.boolean_mask(ragged.value_rowids(), keep),
      nrows=ragged.nrows(), validate=False)


def _row_values(ragged: tf.RaggedTensor, index: tf.Tensor) -> tf.Tensor:
  """ragged[i, index[i]] for every row i (int64), 0 where the index is outside the row."""
  index = tf.cast(index, tf.int64)
  values = tf.concat([tf.cast(ragged.values, tf.int64), [0]], axis=0)
  inside = tf.logical_and(index >= 0, index < ragged.row_lengths())
  position = tf.where(inside, ragged.row_starts() + index, tf.size(values, tf.int64) - 1)
  return tf.gather(values, position)


def _non_space_count(texts: tf.Tensor) -> tf.Tensor:
  """Number of code points other than " " in every string [B] (int64)."""
  chars = tf.strings.unicode_decode(texts, "UTF-8")
  return tf.reduce_sum(tf.cast(tf.not_equal(chars, _SPACE), tf.int64), axis=1)


def _find_prefix(haystacks: tf.Tensor, needles: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """For strings [B]: whether needle i occurs in haystack i, and the text before its first match."""

  def find(pair):
    haystack, needle = pair
    parts = tf.strings.split(haystack, sep=tf.where(needle == "", " ", needle), maxsplit=1)
    return tf.logical_and(tf.size(parts) == 2, needle != ""), parts[0]

  return tf.map_fn(find, (haystacks, needles), fn_output_signature=(tf.bool, tf.string))


@dataclasses.dataclass
class Windows:
  """Where the windows of a batch of (question, context) rows sit, flat over the batch.

  Window i belongs to row `row[i]` and holds context sub-tokens [start[i], start[i] + length[i])
  at positions from `doc_offset[i]` (after [CLS], the question and [SEP]); its logits are ranked up
  to position `ranked[i]`. Per row: the context's sub-token ids and the index of the word each
  comes from, its whitespace words and their byte offsets.
  """
  row: tf.Tensor
  start: tf.Tensor
  length: tf.Tensor
  doc_offset: tf.Tensor
  ranked: tf.Tensor
  context_ids: tf.RaggedTensor
  piece_word: tf.RaggedTensor
  words: tf.RaggedTensor
  word_begin_bytes: tf.RaggedTensor


class SquadServingModule(export.ServingModule):
  """The exported model: do_predict's answer in TF ops, from raw question and context.

  The text signature on `question` and `context` ([B] strings) does what `--do_predict` does:
  tokenizes the question (cut to `max_query_length` sub-tokens) and the whole context, windows the
  context every `doc_stride` sub-tokens (`windowing.window_starts`), runs the model on every
  window, takes in each window the best valid span among its `n_best_size` best starts and ends
  (both in the context, start <= end, at most `max_answer_length` sub-tokens, the start read in
  the window where it has the most context) and answers the best span over all windows, mapped
  back to the context's text by `get_final_text`'s rule. With `bucket_by_length` (do_predict's
  default) a window's logits are ranked up to its length bucket, as the bucketed prediction
  computes them; without it up to `max_seq_length`, as the original. It returns `answer` (the text
  do_predict writes to predictions.json; "" where do_predict writes "empty" because no span is
  valid, and for v2.0 where the null answer wins), `score` (start + end logit of the answer span,
  else the null score: the smallest [CLS] score over the windows; `NO_CONTEXT_SCORE`, the lowest
  float32, when the context has no sub-tokens), `answer_start` and `answer_end`
  (character offsets of the answer's first and one-past-last character in the context; -1 for an
  empty answer). The `token_ids` signature returns one window's `start_logits` and `end_logits`.

  Request limits: question and context batches of one size, at most
  `export.MAX_REQUEST_TEXT_BYTES` (4 MiB) of text in all, the export's `RequestLimits` in rows
  (questions) and token positions (windows x their padded length); anything else fails with
  InvalidArgument (`export.text_input_checks`, `BertInputEncoder.position_checks`). Within them
  memory is linear in the request's bytes: the context is split at whitespace and tokenized
  once, windows are sub-token ranges of it, and the model and the span choice see
  `WINDOWS_PER_STEP` windows at a time, keeping only each window's best span.
  """

  text_inputs = {"question": 1, "context": 1}
  # Windows the model runs on at once: a long context costs the memory of this many windows'
  # activations and span scores, however many windows it has.
  WINDOWS_PER_STEP = 16

  def __init__(self, model: keras.Model, tokenizer: Any, options: squad_data.SquadOptions,
               bucket_by_length: bool = True):
    squad_data.check_feature_settings(options.max_seq_length, options.doc_stride,
                                      options.max_query_length)
    super().__init__(in_graph_tokenization.BertInputEncoder.for_tokenizer(
        tokenizer, options.max_seq_length, dynamic_padding=False), model.config)
    self.model = model
    self.options = options
    self.bucket_by_length = bucket_by_length
    # The basic tokenizer get_final_text aligns the answer with (the encoder keeps its own).
    self._basic_tables = in_graph_tokenization.CharacterTables(
        "lower_strip_accents" if tokenizer.do_lower_case else None)
    num_ids = max(tokenizer.inv_vocab) + 1
    self._id_to_token = tf.constant([tokenizer.inv_vocab.get(i, "") for i in range(num_ids)])
    # A token lies in at most this many windows (max_seq_length - 3 sub-tokens every doc_stride),
    # so the window where it has the most context is among as many neighbours on either side.
    self._max_overlap = -(-(options.max_seq_length - 3) // options.doc_stride)

  def ids_outputs(self, features: dict) -> dict:
    """Start and end logits of int32 id features (the token-ids signature)."""
    outputs = self.model(features, training=False)
    return {"start_logits": outputs["start_logits"], "end_logits": outputs["end_logits"]}

  def encode_windows(self, question: tf.Tensor, context: tf.Tensor) -> tuple[dict, Windows]:
    """Features of every window of every row, as `convert_examples_to_features` makes them, and
    the `Windows` that place them in the contexts. Features are [windows, width]: zero-padded to
    the longest window's length bucket (to max_seq_length without `bucket_by_length`)."""
    words, word_begin_bytes, _ = tf_text.regex_split_with_offsets(
        context, _SQUAD_WHITESPACE_RE, "")
    pieces = self.encoder.tokenize_words(words)  # [B, (words), (pieces)]
    context_ids = pieces.merge_dims(1, 2)
    piece_word = context_ids.with_flat_values(  # The word of every sub-token, within its row.
        pieces.values.value_rowids() - tf.gather(pieces.row_starts(), context_ids.value_rowids()))
    query_ids = self.encoder.leading_ids(question)[:, :self.options.max_query_length]
    max_tokens = self.options.max_seq_length - query_ids.row_lengths() - 3
    starts = windowing.window_starts(context_ids.row_lengths(), max_tokens,
                                     self.options.doc_stride)  # [B, (windows)]
    row = starts.value_rowids()
    start = starts.flat_values
    length = tf.minimum(tf.gather(max_tokens, row),
                        tf.gather(context_ids.row_lengths(), row) - start)
    begin = tf.gather(context_ids.row_starts(), row) + start
    window_ids = tf.gather(context_ids.flat_values, tf.ragged.range(begin, begin + length))
    query = tf.gather(query_ids, row)
    ones = tf.ones([tf.size(row), 1], tf.int32)
    parts = [tf.RaggedTensor.from_tensor(ones * self.encoder.cls_id), tf.cast(query, tf.int32),
             tf.RaggedTensor.from_tensor(ones * self.encoder.sep_id),
             tf.cast(window_ids, tf.int32),
             tf.RaggedTensor.from_tensor(ones * self.encoder.sep_id)]
    input_ids = tf.concat(parts, axis=1)
    segments = tf.concat([tf.zeros_like(p) for p in parts[:3]] +
                         [tf.ones_like(p) for p in parts[3:]], axis=1)
    total = input_ids.row_lengths()
    if self.bucket_by_length:  # Each window's own length bucket, as bucketed prediction pads it.
      buckets = tf.constant(
          in_graph_tokenization.padded_length_buckets(self.options.max_seq_length), tf.int64)
      ranked = tf.gather(buckets, tf.searchsorted(buckets, total, side="left"))
      width = in_graph_tokenization.padded_length(total, self.options.max_seq_length)
    else:
      ranked = tf.fill(tf.shape(total), tf.constant(self.options.max_seq_length, tf.int64))
      width = self.options.max_seq_length
    shape = tf.stack([tf.cast(tf.size(row), tf.int64), tf.cast(width, tf.int64)])
    with tf.control_dependencies(self.encoder.position_checks(shape[0], shape[1], "windows")):
      features = {"input_ids": input_ids.to_tensor(0, shape=shape),
                  "input_mask": tf.ones_like(input_ids).to_tensor(0, shape=shape),
                  "segment_ids": segments.to_tensor(0, shape=shape)}
    windows = Windows(row, start, length, tf.gather(query_ids.row_lengths(), row) + 2, ranked,
                      context_ids, piece_word, words, word_begin_bytes)
    return features, windows

  def _max_context(self, windows: Windows, index: tf.Tensor, width: tf.Tensor) -> tf.Tensor:
    """[chunk, width] bool: whether window `index[i]` is where the context token at position j
    has the most context (`windowing.check_is_max_context`: the most tokens on its shorter side
    plus 0.01 per window token; ties to the earlier window), among its neighbours."""
    num_windows = tf.size(windows.row)
    doc_start = tf.gather(windows.doc_offset, index)
    position = (tf.gather(windows.start, index)[:, None] +
                tf.range(tf.cast(width, tf.int64))[None, :] - doc_start[:, None])

    def score(window):  # [chunk, width]
      return windowing.context_score(position, tf.gather(windows.start, window)[:, None],
                                     tf.gather(windows.length, window)[:, None])

    own = score(index)
    best = tf.ones_like(own, tf.bool)
    for offset in range(1, self._max_overlap + 1):
      for neighbour, beats in ((index - offset, tf.greater), (index + offset, tf.greater_equal)):
        exists = ((neighbour >= 0) & (neighbour < tf.cast(num_windows, tf.int64)))
        safe = tf.clip_by_value(neighbour, 0, tf.cast(num_windows, tf.int64) - 1)
        same_row = exists & tf.equal(tf.gather(windows.row, safe), tf.gather(windows.row, index))
        best &= tf.logical_or(~same_row[:, None], beats(own, score(safe)))
    return best

  def _window_spans(self, features: dict, windows: Windows) -> tuple:
    """Per window: (score, start, end, has_span, null score) of its best valid span, computed
    `WINDOWS_PER_STEP` windows at a time."""
    num_windows = tf.size(windows.row)
    width = tf.shape(features["input_ids"])[1]
    n_best = tf.minimum(self.options.n_best_size, width)
    offsets = tf.range(width, dtype=tf.int64)
    span_length = offsets[None, :] - offsets[:, None] + 1  # [start, end]
    length_ok = (span_length >= 1) & (span_length <= self.options.max_answer_length)

    def step(first, results):
      index = tf.range(first, tf.minimum(first + self.WINDOWS_PER_STEP, num_windows))
      chunk = {name: tf.gather(value, index) for name, value in features.items()}
      outputs = self.model(chunk, training=False)
      index = tf.cast(index, tf.int64)
      ranked = offsets[None, :] < tf.gather(windows.ranked, index)[:, None]
      start_logits = tf.where(ranked, outputs["start_logits"], -np.inf)
      end_logits = tf.where(ranked, outputs["end_logits"], -np.inf)
      doc_start = tf.gather(windows.doc_offset, index)[:, None]
      in_doc = (offsets[None, :] >= doc_start) & (
          offsets[None, :] < doc_start + tf.gather(windows.length, index)[:, None])

      def top(logits):  # [chunk, width]: among the n_best largest (ties: the lower position)
        best = tf.math.top_k(logits, k=n_best).indices
        return tf.reduce_any(tf.equal(best[:, :, None], tf.range(width)[None, None, :]), axis=1)

      start_ok = in_doc & top(start_logits) & self._max_context(windows, index, width)
      end_ok = in_doc & top(end_logits)
      valid = start_ok[:, :, None] & end_ok[:, None, :] & length_ok[None]
      scores = tf.reshape(tf.where(valid, start_logits[:, :, None] + end_logits[:, None, :],
                                   -np.inf), [tf.size(index), -1])
      best = tf.argmax(scores, axis=1)
      found = (tf.reduce_max(scores, axis=1), best // tf.cast(width, tf.int64),
               best % tf.cast(width, tf.int64), tf.reduce_max(scores, axis=1) > -np.inf,
               outputs["start_logits"][:, 0] + outputs["end_logits"][:, 0])
      return first + self.WINDOWS_PER_STEP, [array.write(array.size(), value)
                                             for array, value in zip(results, found)]

    arrays = [tf.TensorArray(dtype, size=0, dynamic_size=True, infer_shape=False,
                             element_shape=tf.TensorShape([None]))
              for dtype in (tf.float32, tf.int64, tf.int64, tf.bool, tf.float32)]
    _, arrays = tf.while_loop(lambda first, _: first < num_windows, step, [0, arrays])
    return tuple(array.concat() for array in arrays)

  def _final_text(self, pred_text: tf.Tensor, orig_text: tf.Tensor) -> tuple:
    """`get_final_text` in TF ops: character positions [B] (inclusive) of the answer in orig_text.

    Finds the first occurrence of pred_text in the basic tokenization of orig_text and aligns the
    two texts on their non-space characters; when that fails, the whole orig_text.
    """
    tok_text = tf.strings.reduce_join(in_graph_tokenization.split_words(orig_text,
                                                                        self._basic_tables),
                                      axis=1, separator=" ")
    found, prefix = _find_prefix(tok_text, pred_text)
    first = _non_space_count(prefix)
    count = _non_space_count(pred_text)
    orig_chars = tf.strings.unicode_decode(orig_text, "UTF-8")
    aligned = found & (count > 0) & tf.equal(_non_space_count(tok_text),
                                             _non_space_count(orig_text))
    non_space_positions = tf.ragged.boolean_mask(
        tf.ragged.range(orig_chars.row_lengths()), tf.not_equal(orig_chars, _SPACE))
    start = tf.where(aligned, _row_values(non_space_positions, first), 0)
    end = tf.where(aligned, _row_values(non_space_positions, first + count - 1),
                   orig_chars.row_lengths() - 1)
    return start, end

  def text_outputs(self, texts: dict) -> dict:
    question, context = texts["question"], texts["context"]
    features, windows = self.encode_windows(question, context)
    score, start, end, has_span, null = self._window_spans(features, windows)
    num_rows = tf.shape(context, out_type=tf.int64)[0]
    row = windows.row
    # The best window of every row: its highest span score, the first window of equal ones.
    row_score = tf.math.unsorted_segment_max(tf.where(has_span, score, -np.inf), row, num_rows)
    is_best = has_span & tf.equal(score, tf.gather(row_score, row))
    window_index = tf.range(tf.size(row, out_type=tf.int64))
    best = tf.math.unsorted_segment_min(tf.where(is_best, window_index, tf.size(row, tf.int64)),
                                        row, num_rows)
    answered = best < tf.size(row, tf.int64)
    best = tf.minimum(best, tf.size(row, tf.int64) - 1)
    null_score = tf.math.unsorted_segment_min(null, row, num_rows)
    if self.options.version_2_with_negative:
      answered &= null_score - row_score <= self.options.null_score_diff_threshold
    # Positions of the best span -> sub-tokens of the context.
    first_piece = tf.gather(windows.start, best) - tf.gather(windows.doc_offset, best)
    piece_start = tf.maximum(first_piece + tf.gather(start, best), 0)
    piece_end = tf.maximum(first_piece + tf.gather(end, best), 0)
    answer = self._answer_text(windows, piece_start, piece_end, context)
    empty = tf.fill(tf.shape(context), "")
    minus_one = -tf.ones_like(piece_start)
    # A context without sub-tokens has no window to answer from (do_predict makes no feature).
    has_context = windows.context_ids.row_lengths() > 0
    answered &= has_context
    return {
        "answer": tf.where(answered, answer["text"], empty),
        "score": tf.where(answered, row_score,
                          tf.where(has_context, null_score,
                                   tf.constant(squad_data.NO_CONTEXT_SCORE, null_score.dtype))),
        "answer_start": tf.where(answered, answer["start"], minus_one),
        "answer_end": tf.where(answered, answer["end"], minus_one),
    }

  def _answer_text(self, windows: Windows, piece_start: tf.Tensor, piece_end: tf.Tensor,
                   context: tf.Tensor) -> dict:
    """The text of every row's span of context sub-tokens [piece_start, piece_end], as
    do_predict's `get_final_text` makes it, and its character offsets in the context."""
    # The prediction as do_predict makes it: sub-tokens -> text, whitespace words -> orig_text.
    pieces = tf.gather(self._id_to_token, _ragged_take(windows.context_ids, piece_start,
                                                       piece_end))
    pred_text = tf.strings.reduce_join(pieces, axis=1, separator=" ")
    pred_text = tf.strings.regex_replace(pred_text, " ##", "")
    pred_text = tf.strings.strip(tf.strings.regex_replace(pred_text, "##", ""))
    word_start = _row_values(windows.piece_word, piece_start)
    word_end = _row_values(windows.piece_word, piece_end)
    span_words = _ragged_take(windows.words, word_start, word_end)
    orig_text = tf.strings.reduce_join(span_words, axis=1, separator=" ")
    char_start, char_end = self._final_text(pred_text, orig_text)
    text = tf.strings.substr(orig_text, char_start, char_end - char_start + 1, unit="UTF8_CHAR")

    # Character offsets in the context: orig_text is the span's words joined by single spaces.
    word_lengths = tf.cast(tf.strings.length(span_words, unit="UTF8_CHAR"), tf.int64)
    word_offsets = tf.math.cumsum(word_lengths + 1, axis=1, exclusive=True)

    def context_offset(char_position):
      # Only the one word holding the position is located in the context: one prefix per row.
      before = word_offsets.with_flat_values(tf.cast(
          word_offsets.values <= _per_value(word_offsets, char_position), tf.int64))
      word = tf.reduce_sum(before, axis=1) - 1
      begin_byte = _row_values(windows.word_begin_bytes, word_start + word)
      begin_char = tf.strings.length(tf.strings.substr(context, tf.zeros_like(begin_byte),
                                                       begin_byte), unit="UTF8_CHAR")
      return tf.cast(begin_char, tf.int64) + char_position - _row_values(word_offsets, word)

    return {"text": text, "start": context_offset(char_start),
            "end": context_offset(char_end) + 1}
