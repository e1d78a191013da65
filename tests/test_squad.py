"""Tests of squad.py: reading, windowing, max-context, span mapping, post-processing, metrics.

Every expectation below was worked out by hand from the original run_squad.py rules (the token
tables are in the comments) or comes from the official SQuAD evaluation definitions.
"""
import json
import math
import os

import numpy as np
import pytest

import errors
import squad
import squad_data
import tokenization

# Whitespace words:  0 The | 1 café's | 2 owner, | 3 José | 4 Núñez, | 5 sold | 6 unaffable |
#                    7 croissants | 8 (1895-1943).
# Sub-tokens (index: token <- word):
#   0 the<-0  1 cafe<-1  2 '<-1  3 s<-1  4 owner<-2  5 ,<-2  6 jose<-3  7 nunez<-4  8 ,<-4
#   9 sold<-5  10 un<-6  11 ##aff<-6  12 ##able<-6  13 croissants<-7  14 (<-8  15 1895<-8
#   16 -<-8  17 1943<-8  18 )<-8  19 .<-8
CONTEXT = "The café's owner, José Núñez, sold unaffable croissants (1895-1943)."
QUESTION = "Who sold croissants?"  # who sold croissants ? = 4 sub-tokens
VOCAB = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "the", "cafe", "'", "s", "owner", ",", "jose", "nunez",
         "sold", "un", "##aff", "##able", "croissants", "(", "1895", "-", "1943", ")", ".", "who",
         "?", "when", "was", "it"]
# With max_seq_length=16 and a 4-token question, windows hold 16 - 4 - 3 = 9 context tokens;
# with doc_stride=4 the 20 context tokens give windows [0..8], [4..12], [8..16], [12..19].
MAX_SEQ_LENGTH = 16
DOC_STRIDE = 4
DOC_OFFSET = 6  # [CLS] + 4 question tokens + [SEP]


@pytest.fixture
def tokenizer(tmp_path):
  vocab_file = tmp_path / "vocab.txt"
  vocab_file.write_text("\n".join(VOCAB) + "\n", encoding="utf-8")
  return tokenization.FullTokenizer(str(vocab_file), do_lower_case=True)


def squad_json(answers: dict[str, str], context: str = CONTEXT, question: str = QUESTION,
               version_2: bool = False) -> list[dict]:
  """A one-paragraph SQuAD `data` list with one question per answer text ("" = impossible)."""
  qas = []
  for qid, text in answers.items():
    qa = {"id": qid, "question": question,
          "answers": [{"text": text, "answer_start": context.index(text)}] if text else []}
    if version_2:
      qa["is_impossible"] = not text
    qas.append(qa)
  return [{"title": "t", "paragraphs": [{"context": context, "qas": qas}]}]


def features_of(tokenizer, answers, is_training=True, version_2=False):
  examples, _ = squad_data.examples_from_data(squad_json(answers, version_2=version_2), is_training,
                                              version_2)
  features = list(squad_data.convert_examples_to_features(
      examples, tokenizer, MAX_SEQ_LENGTH, DOC_STRIDE, max_query_length=8,
      is_training=is_training))
  return examples, features


# ----------------------------------------------------------------------------- reading


def test_split_context_maps_characters_to_words():
  words, offsets = squad_data.split_context(" ab  c\u202fd\n")
  assert words == ["ab", "c", "d"]
  assert offsets == [-1, 0, 0, 0, 0, 1, 1, 2, 2]


def test_read_examples_answer_word_span():
  data = squad_json({"q1": "José Núñez", "q2": "1895"})
  examples, stats = squad_data.examples_from_data(data, True)
  assert [(e.start_position, e.end_position) for e in examples] == [(3, 4), (8, 8)]
  assert examples[0].orig_answer_text == "José Núñez"
  assert stats.questions == 2 and stats.skipped_answer_not_found == 0


def test_read_examples_skips_and_counts_bad_answers_and_empty_context():
  data = squad_json({"ok": "sold"})
  qas = data[0]["paragraphs"][0]["qas"]
  qas.append({"id": "wrong_offset", "question": "q", "answers": [{"text": "sold",
                                                                   "answer_start": 0}]})
  qas.append({"id": "past_end", "question": "q", "answers": [{"text": "sold",
                                                               "answer_start": 500}]})
  qas.append({"id": "none", "question": "q", "answers": []})
  data.append({"title": "e", "paragraphs": [{"context": "  \n ", "qas": [
      {"id": "empty", "question": "q", "answers": []}]}]})
  examples, stats = squad_data.examples_from_data(data, is_training=True)
  assert [e.qas_id for e in examples] == ["ok"]
  assert (stats.questions, stats.skipped_answer_not_found, stats.skipped_no_answer,
          stats.skipped_empty_context) == (5, 2, 1, 1)
  # For prediction, answers are not needed: every question is kept, so each gets a prediction.
  examples, _ = squad_data.examples_from_data(data, is_training=False)
  assert [e.qas_id for e in examples] == ["ok", "wrong_offset", "past_end", "none", "empty"]


def test_read_examples_v2_impossible():
  examples, _ = squad_data.examples_from_data(squad_json({"a": "sold", "b": ""}, version_2=True),
                                              is_training=True, version_2_with_negative=True)
  assert [(e.is_impossible, e.start_position) for e in examples] == [(False, 5), (True, -1)]
  # Without the flag, SQuAD 2.0's unanswerable questions are an error naming the first (before,
  # each was skipped with a warning and half of the data trained).
  with pytest.raises(squad_data.SquadFormatError, match="question b: an unanswerable question "
                     r"\(is_impossible\): SQuAD 2.0 data trains with `version_2_with_negative`"):
    squad_data.examples_from_data(squad_json({"a": "sold", "b": ""}, version_2=True),
                                  is_training=True)


def test_malformed_files_give_errors_naming_the_place(tmp_path):
  bad_json = tmp_path / "bad.json"
  bad_json.write_text('{"data": [\n{"title": }]}', encoding="utf-8")
  with pytest.raises(squad_data.SquadFormatError, match=r"bad.json: not valid JSON \(line 2"):
    squad_data.read_squad_examples(str(bad_json), is_training=False)
  no_question = tmp_path / "no_question.json"
  no_question.write_text(json.dumps({"data": [{"paragraphs": [
      {"context": "x y", "qas": [{"id": "q9", "answers": []}]}]}]}), encoding="utf-8")
  with pytest.raises(squad_data.SquadFormatError,
                     match="no_question.json: article 0, paragraph 0, question q9: missing key "
                     "'question'"):
    squad_data.read_squad_examples(str(no_question), is_training=False)
  with pytest.raises(squad_data.SquadFormatError, match="missing key 'data'"):
    squad_data.load_squad_json(str(_write(tmp_path / "no_data.json", {"version": "1.1"})))
  bad_start = squad_json({"a": "sold"})
  bad_start[0]["paragraphs"][0]["qas"][0]["answers"][0]["answer_start"] = "5"
  with pytest.raises(squad_data.SquadFormatError,
                     match="question a: answer text must be a string and answer_start an integer"):
    squad_data.examples_from_data(bad_start, True)
  v2_without_flag = squad_json({"a": "sold"})
  with pytest.raises(squad_data.SquadFormatError, match="missing key 'is_impossible'"):
    squad_data.examples_from_data(v2_without_flag, True, version_2_with_negative=True)


def _write(path, content):
  path.write_text(json.dumps(content), encoding="utf-8")
  return path


# ----------------------------------------------------------------------------- windows


def test_check_feature_settings_names_the_flags():
  with pytest.raises(errors.FlagError, match=r"`max_seq_length`=10 must be greater than "
                     r"`max_query_length`=7 \+ 3"):
    squad_data.check_feature_settings(10, 4, 7)
  with pytest.raises(errors.FlagError, match="`doc_stride` must be positive"):
    squad_data.check_feature_settings(64, 0, 7)


def test_features_layout_positions_and_tightened_spans(tokenizer):
  _, features = features_of(tokenizer, {"name": "José Núñez", "year": "1895",
                                        "word": "unaffable"})
  assert [f.doc_span_index for f in features] == [0, 1, 2, 3] * 3
  assert [f.unique_id for f in features] == list(range(1000000000, 1000000012))
  first = features[0]
  assert first.tokens == ["[CLS]", "who", "sold", "croissants", "?", "[SEP]", "the", "cafe", "'",
                          "s", "owner", ",", "jose", "nunez", ",", "[SEP]"]
  assert first.segment_ids == [0] * 6 + [1] * 10
  assert first.input_mask == [1] * 16
  assert first.input_ids == [VOCAB.index(t) for t in first.tokens]
  assert first.token_to_orig_map == {6: 0, 7: 1, 8: 1, 9: 1, 10: 2, 11: 2, 12: 3, 13: 4, 14: 4}
  last = features[3]
  assert last.tokens[6:] == ["##able", "croissants", "(", "1895", "-", "1943", ")", ".", "[SEP]",
                             ] and last.input_mask == [1] * 15 + [0]
  assert last.input_ids[-1] == 0 and last.segment_ids[-1] == 0
  # "José Núñez" is sub-tokens 6..7 (the comma of "Núñez," is cut off): windows 0 and 1.
  assert [(f.start_position, f.end_position) for f in features[:4]] == [
      (6 + DOC_OFFSET, 7 + DOC_OFFSET), (2 + DOC_OFFSET, 3 + DOC_OFFSET), (0, 0), (0, 0)]
  # "1895" is sub-token 15 of "(1895-1943).": windows 2 and 3.
  assert [(f.start_position, f.end_position) for f in features[4:8]] == [
      (0, 0), (0, 0), (7 + DOC_OFFSET, 7 + DOC_OFFSET), (3 + DOC_OFFSET, 3 + DOC_OFFSET)]
  # "unaffable" is un ##aff ##able = sub-tokens 10..12: windows 1 and 2.
  assert [(f.start_position, f.end_position) for f in features[8:]] == [
      (0, 0), (6 + DOC_OFFSET, 8 + DOC_OFFSET), (2 + DOC_OFFSET, 4 + DOC_OFFSET), (0, 0)]
  # Max-context flags for token 6 (jose) and 7 (nunez), by window.
  assert [f.token_is_max_context.get(6 - f.doc_span_index * 4 + DOC_OFFSET)
          for f in features[:2]] == [True, False]
  assert [f.token_is_max_context.get(7 - f.doc_span_index * 4 + DOC_OFFSET)
          for f in features[:2]] == [False, True]


def test_improve_answer_span_punctuation_and_subwords(tokenizer):
  doc = ["(", "1895", "-", "1943", ")", ".", "un", "##aff", "##able"]
  assert squad_data.improve_answer_span(doc, 0, 5, tokenizer, "1895") == (1, 1)
  assert squad_data.improve_answer_span(doc, 0, 5, tokenizer, "1895-1943") == (1, 3)
  assert squad_data.improve_answer_span(doc, 6, 8, tokenizer, "unaffable") == (6, 8)
  # No exact sub-token match ("aff" is inside a word): the word span stays.
  assert squad_data.improve_answer_span(doc, 6, 8, tokenizer, "aff") == (6, 8)


def test_long_question_is_truncated(tokenizer):
  examples, _ = squad_data.examples_from_data(
      squad_json({"q": "sold"}, question="who sold who sold who sold ?"), is_training=False)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, MAX_SEQ_LENGTH,
                                                          DOC_STRIDE, 3, is_training=False))
  assert features[0].tokens[:5] == ["[CLS]", "who", "sold", "who", "[SEP]"]


def test_impossible_and_out_of_window_point_at_cls(tokenizer):
  _, features = features_of(tokenizer, {"none": ""}, version_2=True)
  assert all((f.start_position, f.end_position, f.is_impossible) == (0, 0, True)
             for f in features)


# ----------------------------------------------------------------------------- post-processing


def test_get_final_text_undoes_case_accents_and_punctuation():
  basic = tokenization.BasicTokenizer(do_lower_case=True)
  assert squad.get_final_text("steve smith", "Steve Smith's", basic) == "Steve Smith"
  assert squad.get_final_text("jose nunez", "José Núñez,", basic) == "José Núñez"
  assert squad.get_final_text("1895", "(1895-1943).", basic) == "1895"
  assert squad.get_final_text("affable", "unaffable", basic) == "affable"
  # Not found: the whole original text.
  assert squad.get_final_text("xyz", "(1895-1943).", basic) == "(1895-1943)."
  cased = tokenization.BasicTokenizer(do_lower_case=False)
  assert squad.get_final_text("Smith", "Smith's", cased) == "Smith"


def _hand_logits(features):
  """Logits of the 4 windows (positions 0..15), -10 except where set.

  window 0: start@12 (token 6 jose) 5, end@13 (token 7 nunez) 4  -> "José Núñez" 9
  window 1: start@8 (token 6) 6, end@9 (token 7) 6 -> 12 but token 6 is not max-context here;
            start@2 (question) 10 -> not in the context
  window 2: start@9 (token 11 ##aff) 4, end@10 (token 12 ##able) 3.5 -> "affable" 7.5
  window 3: start@9 and end@9 (token 15 "1895") 3 each -> "1895" 6; start@11 (1943) 7 only with
            ends before it
  [CLS] (start + end) per window: 4, 2, 6, 10 -> null score 2 (window 1).
  """
  start = np.full((4, MAX_SEQ_LENGTH), -10.0)
  end = np.full((4, MAX_SEQ_LENGTH), -10.0)
  start[0, 12], end[0, 13] = 5, 4
  start[1, 8], end[1, 9], start[1, 2] = 6, 6, 10
  start[2, 9], end[2, 10] = 4, 3.5
  start[3, 9], end[3, 9], start[3, 11] = 3, 3, 7
  for window, cls in enumerate([2, 1, 3, 5]):
    start[window, 0] = end[window, 0] = cls
  return [squad.RawResult(f.unique_id, start[i].tolist(), end[i].tolist())
          for i, f in enumerate(features)]


def test_post_processing_on_hand_computed_logits(tokenizer):
  examples, features = features_of(tokenizer, {"q": "sold"}, is_training=False)
  results = _hand_logits(features)
  predictions, nbest, null_odds = squad.compute_predictions(
      examples, features, results, n_best_size=3, max_answer_length=30, do_lower_case=True)
  assert predictions == {"q": "José Núñez"} and null_odds == {}
  expected = [("José Núñez", 5, 4), ("affable", 4, 3.5), ("1895", 3, 3)]
  assert [(e["text"], e["start_logit"], e["end_logit"]) for e in nbest["q"]] == expected
  exps = [math.exp(s + e) for _, s, e in expected]
  assert [e["probability"] for e in nbest["q"]] == pytest.approx([x / sum(exps) for x in exps])

  predictions, _, _ = squad.compute_predictions(
      examples, features, results, n_best_size=3, max_answer_length=1, do_lower_case=True)
  assert predictions == {"q": "1895"}


def test_post_processing_v2_null_score(tokenizer):
  examples, features = features_of(tokenizer, {"q": "sold"}, is_training=False)
  results = _hand_logits(features)
  predictions, nbest, null_odds = squad.compute_predictions(
      examples, features, results, n_best_size=3, max_answer_length=30, do_lower_case=True,
      version_2_with_negative=True, null_score_diff_threshold=0.0)
  assert predictions == {"q": "José Núñez"}
  assert null_odds == {"q": pytest.approx(2 - 9)}
  assert [(e["text"], e["start_logit"] + e["end_logit"]) for e in nbest["q"]] == [
      ("José Núñez", 9), ("affable", 7.5), ("1895", 6), ("", 2)]
  predictions, _, _ = squad.compute_predictions(
      examples, features, results, n_best_size=3, max_answer_length=30, do_lower_case=True,
      version_2_with_negative=True, null_score_diff_threshold=-7.5)
  assert predictions == {"q": ""}


def test_write_predictions_files(tmp_path):
  squad.write_predictions(str(tmp_path), {"q": "a"}, {"q": [{"text": "a"}]}, {"q": -1.5})
  assert json.loads((tmp_path / "predictions.json").read_text()) == {"q": "a"}
  assert json.loads((tmp_path / "null_odds.json").read_text()) == {"q": -1.5}
  assert os.path.exists(tmp_path / "nbest_predictions.json")


# ----------------------------------------------------------------------------- metrics


def _qa(qid, *answers):
  return {"id": qid, "question": "?", "answers": [{"text": a, "answer_start": 0} for a in answers]}


def _dataset(*qas):
  return [{"title": "t", "paragraphs": [{"context": "c", "qas": list(qas)}]}]


def test_normalize_answer():
  assert squad.normalize_answer("  The  Denver-Broncos, an (AFC) team!") == "denverbroncos afc team"
  assert squad.normalize_answer("theater a") == "theater"


def test_evaluate_v1_hand_computed():
  dataset = _dataset(_qa("1", "Denver Broncos", "The Denver Broncos"),
                     _qa("2", "Saint Bernadette Soubirous"),
                     _qa("3", "a copper statue of Christ"),
                     _qa("4", "unanswered"))
  predictions = {"1": "the denver broncos.", "2": "Bernadette", "3": "statue of christ on top"}
  # EM: 1, 0, 0, 0.  F1: 1; P=1 R=1/3 -> 0.5; P=3/5 R=3/4 -> 2/3; missing -> 0.
  results = squad.evaluate_v1(dataset, predictions)
  assert results == {"exact_match": pytest.approx(25.0),
                     "f1": pytest.approx(100 * (1 + 0.5 + 2 / 3) / 4)}


def test_numeric_question_ids_are_scored_under_the_keys_predictions_json_gives_them():
  # Before, a file with ids 1000, 1001 got predictions keyed "1000", "1001" and scored 0 with a
  # warning that no question had a prediction (probe 21).
  dataset = _dataset(_qa("1", "Denver Broncos"), _qa("2", "Paris"))
  for qa, number in zip(squad_data.all_questions(dataset), (1000, 1001)):
    qa["id"] = number
  predictions = {"1000": "Denver Broncos", "1001": "London"}
  assert squad.evaluate_v1(dataset, predictions) == {"exact_match": pytest.approx(50.0),
                                                     "f1": pytest.approx(50.0)}
  assert squad.evaluate_v2(dataset, predictions)["exact_match"] == pytest.approx(50.0)


def test_evaluate_v1_leaves_out_questions_without_gold_answers():
  dataset = _dataset(_qa("1", "Denver Broncos"), _qa("2", "Paris"),
                     {"id": "3", "question": "q", "answers": []})
  # Two scored: EM 1, 0 -> 50; F1 1, 0 -> 50. The third has nothing to be scored against.
  results = squad.evaluate_v1(dataset, {"1": "Denver Broncos", "2": "London", "3": "empty"})
  assert results == {"exact_match": pytest.approx(50.0), "f1": pytest.approx(50.0)}


def test_evaluate_v2_hand_computed():
  dataset = _dataset(_qa("a", "Denver Broncos"), _qa("b", "Saint Bernadette Soubirous"), _qa("c"),
                     _qa("d"), _qa("e", "42"))
  predictions = {"a": "Denver Broncos", "b": "Bernadette", "c": "", "d": "in 1999", "e": "42"}
  na_probs = {"a": 0.1, "b": -0.5, "c": 2.0, "d": -1.0, "e": 1.5}
  results = squad.evaluate_v2(dataset, predictions, na_probs, na_prob_thresh=1.0)
  # e's null odds 1.5 > 1.0 turns it into "no answer" (wrong, it has one).
  # exact: a1 b0 c1 d0 e0;  f1: 1, .5, 1, 0, 0.
  assert results["exact_match"] == pytest.approx(40.0)
  assert results["f1"] == pytest.approx(50.0)
  assert results["total"] == 5
  assert (results["HasAns_exact_match"], results["HasAns_f1"], results["HasAns_total"]) == (
      pytest.approx(100 / 3), pytest.approx(50.0), 3)
  assert (results["NoAns_exact_match"], results["NoAns_f1"], results["NoAns_total"]) == (
      pytest.approx(50.0), pytest.approx(50.0), 2)
  # Best threshold walk in na order d, b, a, e, c starting from 2 (the no-answer questions):
  # exact 1, 1, 2, 3, 3 -> 3/5 at 1.5;  f1 1, 1.5, 2.5, 3.5, 3.5 -> 3.5/5 at 1.5.
  assert (results["best_exact"], results["best_exact_thresh"]) == (pytest.approx(60.0), 1.5)
  assert (results["best_f1"], results["best_f1_thresh"]) == (pytest.approx(70.0), 1.5)


def test_evaluate_v2_without_null_odds_scores_predictions_as_they_are():
  dataset = _dataset(_qa("a", "x y"), _qa("b"))
  results = squad.evaluate_v2(dataset, {"a": "x", "b": ""})
  assert results["exact_match"] == pytest.approx(50.0)
  assert results["f1"] == pytest.approx(100 * (2 / 3 + 1) / 2)
  assert "best_f1" not in results


@pytest.mark.parametrize("version_2, expected", [(False, "empty"), (True, "")])
def test_a_question_with_an_empty_context_keeps_its_id_in_the_predictions(tokenizer, version_2,
                                                                        expected):
  """The original's v1.1 writes its stand-in "empty" for a question without windows; for v2.0
  (where the original stops with an IndexError) the answer is the null answer "", certain."""
  data = squad_json({"q": "sold"}, version_2=version_2)
  data.append({"title": "e", "paragraphs": [{"context": " \n\t", "qas": [
      {"id": "no_context", "question": QUESTION, "answers": [], "is_impossible": True}]}]})
  examples, _ = squad_data.examples_from_data(data, False, version_2)
  features = list(squad_data.convert_examples_to_features(examples, tokenizer, MAX_SEQ_LENGTH,
                                                          DOC_STRIDE, 8, is_training=False))
  assert {feature.example_index for feature in features} == {0}  # No window without a context.
  predictions, nbest, null_odds = squad.compute_predictions(
      examples, features, _hand_logits(features), n_best_size=3, max_answer_length=30,
      do_lower_case=True, version_2_with_negative=version_2)
  assert list(predictions) == ["q", "no_context"]
  assert predictions["no_context"] == expected
  assert [entry["text"] for entry in nbest["no_context"]] == [expected]
  if version_2:
    assert null_odds["no_context"] == -float(np.finfo(np.float32).min)
