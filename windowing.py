"""Overlapping windows over a token sequence longer than the model's input, and which window
each token is read from.

run_squad's rule (the original's `_DocSpan` windows and `_check_is_max_context`), shared by SQuAD,
the classifier's and the tagger's `--doc_stride`: windows of at most `max_tokens` tokens start every
`doc_stride` tokens, the last one ending at the end of the sequence; a token is read from the
window where it has the most context (the most tokens on its shorter side). `window_starts` and
`context_score` are the same rule in TF ops for the exports.
"""

import collections
from typing import Sequence

import tensorflow as tf

DocSpan = collections.namedtuple("DocSpan", ["start", "length"])


def doc_spans_for(num_tokens: int, max_tokens_for_doc: int, doc_stride: int) -> list[DocSpan]:
  """Windows over `num_tokens` context tokens: each at most `max_tokens_for_doc` long, starting
  every `doc_stride` tokens, the last one ending at the end of the context."""
  spans = []
  start = 0
  while start < num_tokens:
    length = min(num_tokens - start, max_tokens_for_doc)
    spans.append(DocSpan(start=start, length=length))
    if start + length == num_tokens:
      break
    start += min(length, doc_stride)
  return spans


def check_is_max_context(doc_spans: Sequence[DocSpan], cur_span_index: int, position: int) -> bool:
  """Whether window `cur_span_index` is the one where token `position` has the most context.

  A token's context in a window is min(tokens to its left, tokens to its right), plus a small bonus
  for longer windows; ties go to the earlier window.
  """
  best_score = None
  best_span_index = None
  for span_index, span in enumerate(doc_spans):
    end = span.start + span.length - 1
    if position < span.start or position > end:
      continue
    score = min(position - span.start, end - position) + 0.01 * span.length
    if best_score is None or score > best_score:
      best_score = score
      best_span_index = span_index
  return cur_span_index == best_span_index


def window_starts(num_tokens: tf.Tensor, max_tokens: tf.Tensor, doc_stride: int) -> tf.RaggedTensor:
  """`doc_spans_for` in TF ops: the start of every window, [B, (windows)] int64.

  A sequence of n tokens gets one window when n <= max_tokens (also when n == 0), else
  ceil((n - max_tokens) / stride) + 1 windows at multiples of stride = min(doc_stride, max_tokens);
  window i covers [start_i, min(start_i + max_tokens, n)).
  """
  num_tokens = tf.cast(num_tokens, tf.int64)
  max_tokens = tf.cast(max_tokens, tf.int64) + tf.zeros_like(num_tokens)
  stride = tf.minimum(tf.constant(doc_stride, tf.int64), max_tokens)
  extra = tf.maximum(num_tokens - max_tokens, 0)
  num_windows = 1 + (extra + stride - 1) // stride
  index = tf.ragged.range(num_windows)
  return index * tf.expand_dims(stride, 1)


def context_score(position: tf.Tensor, window_start: tf.Tensor,
                  window_length: tf.Tensor) -> tf.Tensor:
  """`check_is_max_context`'s score in TF ops, float64 of the broadcast shape: the tokens on the
  shorter side of `position` in the window plus 0.01 per window token, or -1 where the position
  is outside the window (so any window holding it scores higher)."""
  end = window_start + window_length - 1
  inside = (position >= window_start) & (position <= end)
  score = (tf.cast(tf.minimum(position - window_start, end - position), tf.float64) +
           0.01 * tf.cast(window_length, tf.float64))
  return tf.where(inside, score, -1.0)
