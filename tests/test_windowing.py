"""Tests of windowing.py: run_squad's windows and max-context rule, in Python and in TF ops."""

import tensorflow as tf

import windowing


def test_doc_spans_and_max_context_on_hand_built_windows():
  spans = windowing.doc_spans_for(20, max_tokens_for_doc=9, doc_stride=4)
  assert spans == [(0, 9), (4, 9), (8, 9), (12, 8)]
  # Token 6: min(6, 2) in window 0 ties min(2, 6) in window 1 -> the earlier window wins.
  best = lambda position: [windowing.check_is_max_context(spans, i, position) for i in range(4)]
  assert best(6) == [True, False, False, False]
  # Token 7: 1 in window 0, 3 in window 1.  Token 12: 0 / 4 / 0.  Token 16: 0 / 3 (length 8).
  assert best(7) == [False, True, False, False]
  assert best(12) == [False, False, True, False]
  assert best(16) == [False, False, False, True]
  # The original's docstring example: "bought" is best in window C (1 left, 3 right).
  words = "the man went to the store and bought a gallon of milk".split()
  spans = [windowing.DocSpan(0, 5), windowing.DocSpan(3, 5), windowing.DocSpan(6, 5)]
  assert [windowing.check_is_max_context(spans, i, words.index("bought"))
          for i in range(3)] == [False, False, True]


def test_short_context_gives_one_window_and_stride_limits():
  assert windowing.doc_spans_for(3, max_tokens_for_doc=9, doc_stride=4) == [(0, 3)]
  assert windowing.doc_spans_for(0, max_tokens_for_doc=9, doc_stride=4) == []
  # A stride longer than the window moves by the window's length: no token is skipped.
  assert windowing.doc_spans_for(10, max_tokens_for_doc=4, doc_stride=6) == [(0, 4), (4, 4), (8, 2)]


def test_window_starts_in_tf_equal_doc_spans_for():
  lengths = list(range(0, 30))
  for max_tokens, stride in ((9, 4), (4, 6), (5, 5), (1, 1), (7, 3)):
    starts = windowing.window_starts(tf.constant(lengths), max_tokens, stride).to_list()
    expected = [[span.start for span in windowing.doc_spans_for(n, max_tokens, stride)] or [0]
                for n in lengths]
    assert starts == expected, (max_tokens, stride)


def test_context_score_in_tf_picks_the_window_check_is_max_context_picks():
  for num_tokens, max_tokens, stride in [(10, 4, 2), (23, 8, 3), (7, 7, 5), (30, 9, 4)]:
    spans = windowing.doc_spans_for(num_tokens, max_tokens, stride)
    starts = tf.constant([[span.start for span in spans]], tf.int64)
    lengths = tf.constant([[span.length for span in spans]], tf.int64)
    positions = tf.range(num_tokens, dtype=tf.int64)[:, None]
    scores = windowing.context_score(positions, starts, lengths)  # [tokens, windows]
    best = tf.argmax(scores, axis=1).numpy()  # The first of equal scores, as the original.
    for position in range(num_tokens):
      assert windowing.check_is_max_context(spans, int(best[position]), position), (
          num_tokens, max_tokens, stride, position)
