"""Tests for tagging.py: CoNLL reading, features, windows, conlleval-equivalent metrics."""
import os

import hypothesis
import numpy as np
from hypothesis import strategies as st
import pytest

import tagging


def _write(tmp_path, name, text):
  path = os.path.join(str(tmp_path), name)
  with open(path, "w", encoding="utf-8") as writer:
    writer.write(text)
  return path


# --- CoNLL reading ------------------------------------------------------------------------------

def test_read_conll_skips_docstart_and_splits_on_blank_lines(tmp_path):
  path = _write(tmp_path, "train.txt",
                "-DOCSTART- -X- -X- O\n\n"
                "EU NNP B-NP B-ORG\nrejects VBZ B-VP O\n\n\n"
                "Peter NNP B-NP B-PER\nBlackburn NNP I-NP I-PER\n"
                "-DOCSTART- -X- -X- O\n"
                "BRUSSELS NNP B-NP B-LOC")
  sentences = tagging.read_conll(path)
  assert [s.words for s in sentences] == [["EU", "rejects"], ["Peter", "Blackburn"], ["BRUSSELS"]]
  assert [s.tags for s in sentences] == [["B-ORG", "O"], ["B-PER", "I-PER"], ["B-LOC"]]
  assert len({s.guid for s in sentences}) == 3


def test_read_conll_two_columns(tmp_path):
  path = _write(tmp_path, "dev.txt", "Paris B-LOC\nis O\n")
  sentences = tagging.read_conll(path)
  assert sentences[0].words == ["Paris", "is"] and sentences[0].tags == ["B-LOC", "O"]


def test_read_conll_names_file_and_line_of_bad_line(tmp_path):
  path = _write(tmp_path, "bad.txt", "Paris B-LOC\nlonely\n")
  with pytest.raises(ValueError, match=r"bad\.txt:2"):
    tagging.read_conll(path)


@pytest.mark.parametrize("line", ["lamb NN I-NP", "lamb NN I-NP O extra"])
def test_read_conll_refuses_a_line_with_another_number_of_columns(tmp_path, line):
  # A word line that lost its NER column (or gained one) would make another column a tag class.
  path = _write(tmp_path, "train.txt", "-DOCSTART- -X- -X- O\n\nEU NNP B-NP B-ORG\n\n"
                "Peter NNP B-NP B-PER\n%s\n" % line)
  with pytest.raises(ValueError, match=r"train\.txt:6: %d columns, but line 3 has 4" %
                     len(line.split())):
    tagging.read_conll(path)


def test_tag_list_puts_o_first_and_round_trips(tmp_path):
  sentences = [tagging.TaggedSentence(["a", "b", "c"], ["I-PER", "O", "B-LOC"])]
  tag_list = tagging.tag_list_from_sentences(sentences)
  assert tag_list == ["O", "B-LOC", "I-PER"]
  tagging.write_tag_list(tag_list, str(tmp_path))
  assert tagging.read_tag_list(str(tmp_path)) == tag_list


def test_read_tag_list_missing_says_what_to_do(tmp_path):
  with pytest.raises(tagging.ConllFormatError, match="do_train"):
    tagging.read_tag_list(str(tmp_path))


# --- conlleval-equivalent metrics, hand-computed ------------------------------------------------

def _counts(evaluation):
  overall = evaluation.overall
  return overall.correct, overall.found_gold, overall.found_predicted


def test_perfect_prediction():
  gold = [["B-PER", "I-PER", "O", "B-LOC"], ["B-ORG"]]
  evaluation = tagging.conll_evaluate(gold, gold)
  assert _counts(evaluation) == (3, 3, 3)
  assert evaluation.overall.f1 == 100.0 and evaluation.accuracy == 100.0
  assert evaluation.num_tokens == 5


def test_chunk_with_wrong_end_is_wrong():
  # Gold PER spans words 0-1, predicted PER only word 0: PER wrong, LOC right.
  evaluation = tagging.conll_evaluate([["B-PER", "I-PER", "O", "B-LOC"]],
                                      [["B-PER", "O", "O", "B-LOC"]])
  assert _counts(evaluation) == (1, 2, 2)
  assert evaluation.overall.precision == 50.0 and evaluation.overall.recall == 50.0
  assert evaluation.overall.f1 == 50.0
  assert evaluation.accuracy == 75.0
  assert evaluation.per_type["PER"].correct == 0 and evaluation.per_type["LOC"].correct == 1


def test_wrong_type_is_wrong_but_found():
  evaluation = tagging.conll_evaluate([["B-PER", "I-PER"]], [["B-ORG", "I-ORG"]])
  assert _counts(evaluation) == (0, 1, 1)
  per_type = evaluation.per_type
  assert per_type["PER"].found_gold == 1 and per_type["PER"].found_predicted == 0
  assert per_type["ORG"].found_predicted == 1 and per_type["ORG"].recall == 0.0


def test_i_after_o_starts_a_chunk():
  # A predicted I- after O is a chunk of its own (IOB1 reading), and here it matches gold B-.
  evaluation = tagging.conll_evaluate([["O", "B-LOC", "I-LOC"]], [["O", "I-LOC", "I-LOC"]])
  assert _counts(evaluation) == (1, 1, 1)
  assert evaluation.accuracy == pytest.approx(200.0 / 3)


def test_i_after_different_type_starts_a_chunk():
  # Predicted "B-PER I-LOC" is two chunks: PER (word 0) and LOC (word 1).
  evaluation = tagging.conll_evaluate([["B-PER", "B-LOC"]], [["B-PER", "I-LOC"]])
  assert _counts(evaluation) == (2, 2, 2)


def test_iob1_b_separates_adjacent_chunks_of_same_type():
  # IOB1: "I-PER I-PER B-PER" is two chunks: words 0-1 and word 2.
  gold = [["I-PER", "I-PER", "B-PER", "O"]]
  evaluation = tagging.conll_evaluate(gold, [["I-PER", "I-PER", "I-PER", "O"]])
  assert _counts(evaluation) == (0, 2, 1)
  assert evaluation.overall.recall == 0.0 and evaluation.overall.f1 == 0.0


def test_sentence_boundary_closes_chunks():
  # The I-PER opening sentence 2 is a new chunk, not the continuation of sentence 1's.
  gold = [["O", "B-PER"], ["I-PER", "O"]]
  evaluation = tagging.conll_evaluate(gold, gold)
  assert _counts(evaluation) == (2, 2, 2)
  assert evaluation.num_tokens == 4


def test_iobes_single_and_end_tags():
  gold = [["S-PER", "S-PER", "B-LOC", "E-LOC", "B-LOC", "I-LOC", "E-LOC", "O"]]
  evaluation = tagging.conll_evaluate(gold, gold)
  assert _counts(evaluation) == (4, 4, 4)
  # Predicting one long LOC where gold has two adjacent ones: both gold LOCs missed.
  predicted = [["S-PER", "S-PER", "B-LOC", "I-LOC", "I-LOC", "I-LOC", "E-LOC", "O"]]
  evaluation = tagging.conll_evaluate(gold, predicted)
  assert _counts(evaluation) == (2, 4, 3)
  assert evaluation.per_type["LOC"].precision == 0.0
  assert evaluation.per_type["PER"].f1 == 100.0


def test_hand_computed_precision_recall_f1_and_report():
  # Gold chunks: PER(0-1) LOC(3) ORG(5-6) MISC(8) = 4. Predicted: PER(0-1) LOC(3-4) ORG(5-6) = 3.
  gold = [["B-PER", "I-PER", "O", "B-LOC", "O"], ["B-ORG", "I-ORG", "O", "B-MISC"]]
  predicted = [["B-PER", "I-PER", "O", "B-LOC", "I-LOC"], ["B-ORG", "I-ORG", "O", "O"]]
  evaluation = tagging.conll_evaluate(gold, predicted)
  assert _counts(evaluation) == (2, 4, 3)
  assert evaluation.overall.precision == pytest.approx(200.0 / 3)
  assert evaluation.overall.recall == 50.0
  assert evaluation.overall.f1 == pytest.approx(2 * (200.0 / 3) * 50.0 / (200.0 / 3 + 50.0))
  assert evaluation.accuracy == pytest.approx(700.0 / 9)
  report = tagging.format_conlleval_report(evaluation)
  assert report.splitlines() == [
      "processed 9 tokens with 4 phrases; found: 3 phrases; correct: 2.",
      "accuracy:  77.78%; precision:  66.67%; recall:  50.00%; FB1:  57.14",
      "              LOC: precision:   0.00%; recall:   0.00%; FB1:   0.00  1",
      "             MISC: precision:   0.00%; recall:   0.00%; FB1:   0.00  0",
      "              ORG: precision: 100.00%; recall: 100.00%; FB1: 100.00  1",
      "              PER: precision: 100.00%; recall: 100.00%; FB1: 100.00  1",
  ]
  results = tagging.evaluation_to_dict(evaluation)
  assert results["eval_f1"] == pytest.approx(0.5714285714)
  assert results["eval_MISC_recall"] == 0.0


def test_evaluate_rejects_misaligned_input():
  with pytest.raises(ValueError, match="sentence 0"):
    tagging.conll_evaluate([["O", "O"]], [["O"]])


def _spans_iob(tags):
  """Independent chunk extraction for B/I/O tags: a chunk starts at B-, or at I- not continuing."""
  spans = []
  current = None
  for index, tag in enumerate(list(tags) + ["O"]):
    prefix, _, chunk_type = tag.partition("-")
    continues = prefix == "I" and current is not None and current[2] == chunk_type
    if current is not None and not continues:
      spans.append((current[0], index - 1, current[2]))
      current = None
    if prefix == "B" or (prefix == "I" and not continues):
      current = (index, None, chunk_type)
  return spans


_IOB_TAG = st.sampled_from(["O", "B-PER", "I-PER", "B-LOC", "I-LOC"])


@hypothesis.settings(max_examples=150, deadline=None)
@hypothesis.given(st.lists(st.lists(st.tuples(_IOB_TAG, _IOB_TAG), min_size=1, max_size=8),
                           min_size=1, max_size=4))
def test_counts_match_span_sets(sentences):
  gold = [[g for g, _ in sentence] for sentence in sentences]
  predicted = [[p for _, p in sentence] for sentence in sentences]
  gold_spans = {(i,) + span for i, tags in enumerate(gold) for span in _spans_iob(tags)}
  pred_spans = {(i,) + span for i, tags in enumerate(predicted) for span in _spans_iob(tags)}
  evaluation = tagging.conll_evaluate(gold, predicted)
  assert _counts(evaluation) == (len(gold_spans & pred_spans), len(gold_spans), len(pred_spans))


def test_write_conll_predictions(tmp_path):
  path = os.path.join(str(tmp_path), "pred.txt")
  sentences = [tagging.TaggedSentence(["EU", "rejects"], ["B-ORG", "O"]),
               tagging.TaggedSentence(["Paris"], None)]
  tagging.write_conll_predictions(path, sentences, [["B-ORG", "B-PER"], ["B-LOC"]])
  with open(path, encoding="utf-8") as reader:
    assert reader.read() == "EU B-ORG B-ORG\nrejects O B-PER\n\nParis O B-LOC\n\n"


# --- features: first-sub-token labels and windows ------------------------------------------------

_VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "the", "cat", "sat", "un", "##aff",
          "##able", "new", "york", ",", ".", "##s"]


@pytest.fixture
def tokenizer(tmp_path):
  import tokenization  # pylint: disable=g-import-not-at-top
  return tokenization.FullTokenizer(_write(tmp_path, "vocab.txt", "\n".join(_VOCAB) + "\n"),
                                    do_lower_case=True)


def test_first_sub_token_carries_the_tag(tokenizer):
  tag_list = ["O", "B-LOC", "I-LOC", "B-MISC"]
  sentence = tagging.TaggedSentence(["The", "unaffable", "New", "York", "cats", "."],
                                    ["O", "B-MISC", "B-LOC", "I-LOC", "O", "O"])
  (feature,) = tagging.convert_sentences_to_features([sentence], tag_list, 12, tokenizer)
  # [CLS] the un ##aff ##able new york cat ##s . [SEP] [PAD]
  assert feature.input_ids == [2, 5, 8, 9, 10, 11, 12, 6, 15, 14, 3, 0]
  assert feature.input_mask == [1] * 11 + [0]
  assert feature.segment_ids == [0] * 12
  assert feature.label_ids == [-1, 0, 3, -1, -1, 1, 2, 0, -1, 0, -1, -1]
  assert (feature.sentence_index, feature.word_start, feature.num_words) == (0, 0, 6)


def test_unknown_tag_is_named(tokenizer):
  sentence = tagging.TaggedSentence(["the"], ["B-XYZ"], guid="dev.txt-7")
  with pytest.raises(ValueError, match=r"dev\.txt-7.*B-XYZ"):
    tagging.convert_sentences_to_features([sentence], ["O"], 8, tokenizer)


def test_dropped_and_overlong_words_keep_a_first_piece(tokenizer):
  pieces = tagging.tokenize_words(["\u200b", "unaffable"], tokenizer, max_pieces=2)
  assert pieces == [["[UNK]"], ["un", "##aff"]]


def test_window_word_ranges_greedy():
  assert tagging.window_word_ranges([1, 2, 1, 3, 1], 4) == [(0, 3), (3, 5)]
  assert tagging.window_word_ranges([4, 4], 4) == [(0, 1), (1, 2)]
  assert tagging.window_word_ranges([], 4) == []
  with pytest.raises(ValueError, match="word 1"):
    tagging.window_word_ranges([1, 5], 4)


@hypothesis.settings(max_examples=100, deadline=None)
@hypothesis.given(st.lists(st.integers(1, 5), max_size=30), st.integers(5, 12))
def test_windows_cover_every_word_once_within_budget(counts, max_pieces):
  ranges = tagging.window_word_ranges(counts, max_pieces)
  covered = [i for start, end in ranges for i in range(start, end)]
  assert covered == list(range(len(counts)))
  assert all(sum(counts[start:end]) <= max_pieces for start, end in ranges)
  # Greedy: the next window's first word would not have fitted in the previous window.
  for (start, end), (next_start, _) in zip(ranges, ranges[1:]):
    assert sum(counts[start:end]) + counts[next_start] > max_pieces


def test_long_sentence_is_split_and_reassembled(tokenizer):
  words = ["unaffable", "the", "cat", "sat", "New", "York", ","] * 5
  tag_list = ["O", "B-LOC", "I-LOC"]
  tags = ["O", "O", "O", "O", "B-LOC", "I-LOC", "O"] * 5
  sentences = [tagging.TaggedSentence(["the"], ["O"]), tagging.TaggedSentence(words, tags)]
  features = tagging.convert_sentences_to_features(sentences, tag_list, 10, tokenizer)
  assert len(features) > 3
  assert all(len(f.input_ids) == 10 and f.input_ids[0] == 2 for f in features)
  long_windows = [f for f in features if f.sentence_index == 1]
  assert sum(f.num_words for f in long_windows) == len(words)
  # Predictions equal to the gold labels must reassemble into exactly the gold tags.
  position_ids = np.array([np.maximum(f.label_ids, 0) for f in features])
  assembled = tagging.words_tag_ids(features, position_ids, sentences)
  assert [[tag_list[i] for i in ids] for ids in assembled] == [["O"], tags]
