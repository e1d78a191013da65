"""SQuAD v1.1/v2.0 question answering: the span head, post-processing, metrics and the task.

`run_squad.py` is a thin CLI over this module, `squad_data.py` (the JSON file, examples, windowed
features and their TFRecords) and `squad_serving.py` (the export). Predictions are mapped back
onto the original text with the original's `get_final_text` alignment, from the window where each
token has the most context; the metrics are those of the official SQuAD v1.1 and v2.0 scripts.
"""
import collections
import dataclasses
import json
import os
import re
import string
import time
from typing import Any, Iterable, Mapping, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import atomic_files
import distribution
import feature_cache
import fine_tuning
import heads
import modeling
import squad_data
import squad_serving
import tokenization
import training_loop

# The scope of the span head's variables, as the original's run_squad named it.
HEAD_SCOPE = "cls/squad"


# ---------------------------------------------------------------------------------------------
# Post-processing: logits -> answer text.

RawResult = collections.namedtuple("RawResult", ["unique_id", "start_logits", "end_logits"])

_PrelimPrediction = collections.namedtuple(
    "_PrelimPrediction", ["feature_index", "start_index", "end_index", "start_logit", "end_logit"])

NbestPrediction = collections.namedtuple("NbestPrediction", ["text", "start_logit", "end_logit"])


def best_indexes(logits: Sequence[float], n_best_size: int) -> list[int]:
  """Indexes of the `n_best_size` largest logits, largest first (ties: lower index first)."""
  ranked = sorted(enumerate(logits), key=lambda pair: pair[1], reverse=True)
  return [index for index, _ in ranked[:n_best_size]]


def softmax(scores: Sequence[float]) -> list[float]:
  """Softmax of a list of floats, in float64 (empty list for no scores)."""
  if not scores:
    return []
  values = np.asarray(scores, dtype=np.float64)
  exps = np.exp(values - values.max())
  return (exps / exps.sum()).tolist()


def _strip_spaces(text: str) -> tuple[str, dict[int, int]]:
  """Removes spaces; returns the text and a map from its positions to those in `text`."""
  chars = []
  ns_to_s_map = {}
  for index, char in enumerate(text):
    if char == " ":
      continue
    ns_to_s_map[len(chars)] = index
    chars.append(char)
  return "".join(chars), ns_to_s_map


def get_final_text(pred_text: str, orig_text: str, basic_tokenizer: Any,
                   verbose_logging: bool = False) -> str:
  """Projects a predicted (normalized, sub-token-joined) answer back onto the original words.

  `orig_text` is the original words the prediction spans; `pred_text` is its tokenized form
  (lower-cased, accents stripped, punctuation split off). Both are aligned character by character
  after removing spaces; if the alignment fails the whole `orig_text` is returned, as the original
  does. E.g. pred "steve smith" in orig "Steve Smith's" gives "Steve Smith".
  """
  tok_text = " ".join(basic_tokenizer.tokenize(orig_text))
  start_position = tok_text.find(pred_text)
  if start_position == -1:
    if verbose_logging:
      logging.info("Unable to find text: %r in %r", pred_text, orig_text)
    return orig_text
  end_position = start_position + len(pred_text) - 1

  orig_ns_text, orig_ns_to_s_map = _strip_spaces(orig_text)
  tok_ns_text, tok_ns_to_s_map = _strip_spaces(tok_text)
  if len(orig_ns_text) != len(tok_ns_text):
    if verbose_logging:
      logging.info("Length not equal after stripping spaces: %r vs %r", orig_ns_text, tok_ns_text)
    return orig_text
  tok_s_to_ns_map = {s_index: ns_index for ns_index, s_index in tok_ns_to_s_map.items()}

  def to_orig(tok_position: int) -> int | None:
    ns_position = tok_s_to_ns_map.get(tok_position)
    return None if ns_position is None else orig_ns_to_s_map.get(ns_position)

  orig_start_position = to_orig(start_position)
  orig_end_position = to_orig(end_position)
  if orig_start_position is None or orig_end_position is None:
    if verbose_logging:
      logging.info("Couldn't map the prediction %r back onto %r", pred_text, orig_text)
    return orig_text
  return orig_text[orig_start_position:orig_end_position + 1]


def _detokenize(sub_tokens: Sequence[str]) -> str:
  """Joins WordPiece sub-tokens into words ("un ##aff ##able" -> "unaffable")."""
  text = " ".join(sub_tokens).replace(" ##", "").replace("##", "")
  return " ".join(text.strip().split())


def _prelim_predictions(features: Sequence[squad_data.InputFeatures], results: dict[int, RawResult],
                        n_best_size: int, max_answer_length: int) -> list[_PrelimPrediction]:
  """Valid candidate spans of one example over all its windows, best first.

  A span is valid when both ends are context tokens of the window, start <= end, its length is at
  most `max_answer_length` and its start token has its maximum context in this window.
  """
  prelim = []
  for feature_index, feature in enumerate(features):
    result = results[feature.unique_id]
    start_indexes = best_indexes(result.start_logits, n_best_size)
    end_indexes = best_indexes(result.end_logits, n_best_size)
    for start_index in start_indexes:
      for end_index in end_indexes:
        if (start_index not in feature.token_to_orig_map or
            end_index not in feature.token_to_orig_map or
            not feature.token_is_max_context.get(start_index, False) or
            end_index < start_index or end_index - start_index + 1 > max_answer_length):
          continue
        prelim.append(_PrelimPrediction(feature_index, start_index, end_index,
                                        result.start_logits[start_index],
                                        result.end_logits[end_index]))
  return prelim


def _null_prediction(features: Sequence[squad_data.InputFeatures],
                     results: dict[int, RawResult]) -> _PrelimPrediction:
  """The smallest [CLS] score (start + end logit at position 0) over the windows (v2.0)."""
  best = None
  for feature_index, feature in enumerate(features):
    result = results[feature.unique_id]
    score = result.start_logits[0] + result.end_logits[0]
    if best is None or score < best.start_logit + best.end_logit:
      best = _PrelimPrediction(feature_index, 0, 0, result.start_logits[0], result.end_logits[0])
  return best


def _nbest_for_example(example: squad_data.SquadExample,
                       features: Sequence[squad_data.InputFeatures],
                       prelim: list[_PrelimPrediction], n_best_size: int,
                       basic_tokenizer: Any, verbose_logging: bool) -> list[NbestPrediction]:
  """Turns the sorted candidate spans into at most `n_best_size` distinct answer texts."""
  nbest = []
  seen_texts = set()
  for pred in prelim:
    if len(nbest) >= n_best_size:
      break
    if pred.start_index > 0:
      feature = features[pred.feature_index]
      tok_text = _detokenize(feature.tokens[pred.start_index:pred.end_index + 1])
      orig_words = example.doc_tokens[feature.token_to_orig_map[pred.start_index]:
                                      feature.token_to_orig_map[pred.end_index] + 1]
      text = get_final_text(tok_text, " ".join(orig_words), basic_tokenizer, verbose_logging)
    else:
      text = ""
    if text in seen_texts:
      continue
    seen_texts.add(text)
    nbest.append(NbestPrediction(text, pred.start_logit, pred.end_logit))
  return nbest


def compute_predictions(examples: Sequence[squad_data.SquadExample],
                        features: Sequence[squad_data.InputFeatures],
                        results: Iterable[RawResult], n_best_size: int, max_answer_length: int,
                        do_lower_case: bool, version_2_with_negative: bool = False,
                        null_score_diff_threshold: float = 0.0, verbose_logging: bool = False
                        ) -> tuple[dict[str, str], dict[str, list[dict]], dict[str, float]]:
  """Chooses the answer of every example from the logits of its windows, as the original does.

  Returns (predictions: id -> text, nbest: id -> list of {text, probability, start_logit,
  end_logit}, null_odds: id -> null score minus best span score, only for v2.0). For v2.0 the answer
  is "" when the null score beats the best span score by more than `null_score_diff_threshold`.
  An example without features (a context without words) gets "empty" as the original's v1.1
  does, and for v2.0 the null answer "" (the original fails there) with null odds
  -NO_CONTEXT_SCORE: certainly no answer.
  """
  basic_tokenizer = tokenization.BasicTokenizer(do_lower_case=do_lower_case)
  results_by_id = {result.unique_id: result for result in results}
  features_by_example = collections.defaultdict(list)
  for feature in features:
    features_by_example[feature.example_index].append(feature)

  predictions = {}
  all_nbest = {}
  null_odds = {}
  for example_index, example in enumerate(examples):
    example_features = features_by_example[example_index]
    if version_2_with_negative and not example_features:
      all_nbest[example.qas_id] = [collections.OrderedDict(
          text="", probability=1.0, start_logit=0.0, end_logit=0.0)]
      predictions[example.qas_id] = ""
      null_odds[example.qas_id] = -squad_data.NO_CONTEXT_SCORE
      continue
    prelim = _prelim_predictions(example_features, results_by_id, n_best_size, max_answer_length)
    null_pred = None
    if version_2_with_negative and example_features:
      null_pred = _null_prediction(example_features, results_by_id)
      prelim.append(null_pred)
    prelim.sort(key=lambda p: p.start_logit + p.end_logit, reverse=True)
    nbest = _nbest_for_example(example, example_features, prelim, n_best_size, basic_tokenizer,
                               verbose_logging)
    if null_pred is not None:
      if all(entry.text for entry in nbest):
        nbest.append(NbestPrediction("", null_pred.start_logit, null_pred.end_logit))
      if len(nbest) == 1:
        # Only the null answer survived: keep a non-null entry so there is a best span to compare.
        nbest.insert(0, NbestPrediction("empty", 0.0, 0.0))
    if not nbest:
      nbest.append(NbestPrediction("empty", 0.0, 0.0))

    probabilities = softmax([entry.start_logit + entry.end_logit for entry in nbest])
    all_nbest[example.qas_id] = [
        collections.OrderedDict(text=entry.text, probability=probability,
                                start_logit=float(entry.start_logit),
                                end_logit=float(entry.end_logit))
        for entry, probability in zip(nbest, probabilities)]
    if not version_2_with_negative:
      predictions[example.qas_id] = nbest[0].text
      continue
    best_non_null = next(entry for entry in nbest if entry.text)
    null_score = null_pred.start_logit + null_pred.end_logit if null_pred else 0.0
    score_diff = null_score - best_non_null.start_logit - best_non_null.end_logit
    null_odds[example.qas_id] = float(score_diff)
    predictions[example.qas_id] = "" if score_diff > null_score_diff_threshold else (
        best_non_null.text)
  return predictions, all_nbest, null_odds


def write_predictions(output_dir: str, predictions: dict[str, str], nbest: dict[str, list[dict]],
                      null_odds: dict[str, float] | None = None,
                      metrics: Optional[Mapping[str, float]] = None) -> None:
  """Writes predictions.json, nbest_predictions.json, (v2.0) null_odds.json and (with `metrics`)
  eval_results.txt to output_dir, as one unit: a reader never pairs new predictions with old odds
  or scores. Only the chief writes."""
  files = [("predictions.json", predictions), ("nbest_predictions.json", nbest)]
  if null_odds is not None:
    files.append(("null_odds.json", null_odds))
  texts = {os.path.join(output_dir, name): json.dumps(content, indent=4) + "\n"
           for name, content in files}
  if metrics is not None:
    training_loop.write_eval_results(os.path.join(output_dir, "eval_results.txt"), metrics, texts)
  elif distribution.is_chief():
    atomic_files.write_texts(texts)
  logging.info("Wrote %s", ", ".join(texts))


# ---------------------------------------------------------------------------------------------
# Official evaluation (the SQuAD v1.1 and v2.0 scripts' definitions).

_ARTICLES = re.compile(r"\b(a|an|the)\b", re.UNICODE)
_PUNCTUATION = frozenset(string.punctuation)


def normalize_answer(text: str) -> str:
  """Lower-cases, removes punctuation and the articles a/an/the, and collapses whitespace."""
  text = "".join(char for char in text.lower() if char not in _PUNCTUATION)
  return " ".join(_ARTICLES.sub(" ", text).split())


def exact_match_score(prediction: str, ground_truth: str) -> float:
  """1.0 when the normalized texts are equal, else 0.0."""
  return float(normalize_answer(prediction) == normalize_answer(ground_truth))


def f1_score(prediction: str, ground_truth: str) -> float:
  """Token-level F1 of the normalized texts (v2.0 rule: two empty answers score 1)."""
  prediction_tokens = normalize_answer(prediction).split()
  truth_tokens = normalize_answer(ground_truth).split()
  if not prediction_tokens or not truth_tokens:
    return float(prediction_tokens == truth_tokens)
  num_same = sum((collections.Counter(prediction_tokens) &
                  collections.Counter(truth_tokens)).values())
  if num_same == 0:
    return 0.0
  precision = num_same / len(prediction_tokens)
  recall = num_same / len(truth_tokens)
  return 2 * precision * recall / (precision + recall)


def evaluate_v1(dataset: list[dict], predictions: dict[str, str]) -> dict[str, float]:
  """The official SQuAD v1.1 evaluation: EM and F1 (0-100), best over the gold answers.

  A question without a prediction scores 0 (the official script warns and does the same). A
  question without gold answers cannot be scored (the official script stops there) and is left
  out, with a warning counting them.
  """
  total = exact_match = f1 = 0.0
  missing = unanswerable = 0
  for qa in squad_data.all_questions(dataset):
    if not qa["answers"]:
      unanswerable += 1
      continue
    total += 1
    if squad_data.question_id(qa) not in predictions:
      missing += 1
      continue
    truths = [answer["text"] for answer in qa["answers"]]
    prediction = predictions[squad_data.question_id(qa)]
    exact_match += max(exact_match_score(prediction, truth) for truth in truths)
    f1 += max(_f1_v1(prediction, truth) for truth in truths)
  if missing:
    logging.warning("%d questions have no prediction and score 0", missing)
  if unanswerable:
    logging.warning("%d questions have no gold answer and are not scored (v1.1 has none such; "
                    "`version_2_with_negative` scores them)", unanswerable)
  return {"exact_match": 100.0 * exact_match / total, "f1": 100.0 * f1 / total}


def _f1_v1(prediction: str, ground_truth: str) -> float:
  """F1 as the v1.1 script computes it: no overlap (including an empty side) scores 0."""
  if not normalize_answer(prediction).split() or not normalize_answer(ground_truth).split():
    return 0.0
  return f1_score(prediction, ground_truth)


def _best_threshold(predictions: dict[str, str], scores: dict[str, float],
                    na_probs: dict[str, float],
                    qid_to_has_ans: dict[str, bool]) -> tuple[float, float]:
  """The no-answer threshold that maximizes the score, and that score (0-100)."""
  # As the official script: start from "no answer anywhere" over all questions of the dataset.
  score = best_score = float(sum(1 for has_ans in qid_to_has_ans.values() if not has_ans))
  best_threshold = 0.0
  for qid in sorted(na_probs, key=lambda k: na_probs[k]):
    if qid not in scores:
      continue
    if qid_to_has_ans[qid]:
      score += scores[qid]
    elif predictions[qid]:
      score -= 1
    if score > best_score:
      best_score = score
      best_threshold = na_probs[qid]
  return 100.0 * best_score / len(scores), best_threshold


def evaluate_v2(dataset: list[dict], predictions: dict[str, str],
                na_probs: dict[str, float] | None = None,
                na_prob_thresh: float = 1.0) -> dict[str, float]:
  """The official SQuAD v2.0 evaluation: overall, HasAns and NoAns EM/F1 (0-100), best thresholds.

  `na_probs` (here the null odds) above `na_prob_thresh` count as predicting no answer. Keys follow
  the official script except that its `exact` is named `exact_match` like v1.1's.
  """
  qid_to_has_ans = {squad_data.question_id(qa): bool(qa["answers"])
                    for qa in squad_data.all_questions(dataset)}
  exact_raw = {}
  f1_raw = {}
  for qa in squad_data.all_questions(dataset):
    qid = squad_data.question_id(qa)
    if qid not in predictions:
      logging.warning("Missing prediction for %s", qid)
      continue
    truths = [a["text"] for a in qa["answers"] if normalize_answer(a["text"])] or [""]
    exact_raw[qid] = max(exact_match_score(predictions[qid], truth) for truth in truths)
    f1_raw[qid] = max(f1_score(predictions[qid], truth) for truth in truths)
  probs = na_probs if na_probs is not None else {qid: 0.0 for qid in predictions}

  def thresholded(scores: dict[str, float]) -> dict[str, float]:
    return {qid: float(not qid_to_has_ans[qid]) if probs[qid] > na_prob_thresh else score
            for qid, score in scores.items()}

  exact = thresholded(exact_raw)
  f1 = thresholded(f1_raw)

  def summary(qids: Sequence[str], prefix: str = "") -> dict[str, float]:
    # Like the official script, questions without a prediction are skipped in the sums but
    # counted in the total.
    return {prefix + "exact_match": 100.0 * sum(exact.get(q, 0.0) for q in qids) / len(qids),
            prefix + "f1": 100.0 * sum(f1.get(q, 0.0) for q in qids) / len(qids),
            prefix + "total": len(qids)}

  results = summary(list(exact)) if exact else {"exact_match": 0.0, "f1": 0.0, "total": 0}
  for prefix, has_answer in (("HasAns_", True), ("NoAns_", False)):
    qids = [qid for qid, has in qid_to_has_ans.items() if has == has_answer]
    if qids:
      results.update(summary(qids, prefix))
  if na_probs is not None and exact_raw:
    results["best_exact"], results["best_exact_thresh"] = _best_threshold(
        predictions, exact_raw, na_probs, qid_to_has_ans)
    results["best_f1"], results["best_f1_thresh"] = _best_threshold(
        predictions, f1_raw, na_probs, qid_to_has_ans)
  return results


# ---------------------------------------------------------------------------------------------
# Model: BERT plus the original's `cls/squad` span head.


class SquadModel(heads.BertTaskModel):
  """BERT with the span head; variables `bert/...`, `cls/squad/output_{weights,bias}` (row 0 of
  the weights scores starts, row 1 ends), as the original's.

  Call with a feature dict (`input_ids`, `input_mask`, `segment_ids`, int32 [B, T]); returns
  {"start_logits", "end_logits"} float32 [B, T].
  """

  def __init__(self, config: modeling.BertConfig, name: str = "squad_model", **kwargs):
    super().__init__(config, 2, "sequence_output", 0.0, head_scope=HEAD_SCOPE, name=name,
                     **kwargs)

  def call(self, features, training=False):
    logits = self.logits(features, training=training)
    return {"start_logits": logits[:, :, 0], "end_logits": logits[:, :, 1]}


def build_model(config: modeling.BertConfig) -> SquadModel:
  """A SquadModel with all its variables created."""
  model = SquadModel(config)
  model.build()
  return model


def squad_loss(model: keras.Model, features: dict, training: bool) -> tuple:
  """The original's loss: mean over examples of (start cross-entropy + end cross-entropy) / 2.

  Returns this replica's share of the global-batch loss (`distribution.replica_weighted_mean`).
  """
  outputs = model(features, training=training)
  start_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=features["start_positions"], logits=outputs["start_logits"])
  end_loss = tf.nn.sparse_softmax_cross_entropy_with_logits(
      labels=features["end_positions"], logits=outputs["end_logits"])
  return distribution.replica_weighted_mean((start_loss + end_loss) / 2.0), {}


def predict_logits(model: keras.Model, features: dict) -> dict:
  """Per-feature outputs for post-processing: unique id and start/end logits."""
  outputs = model(features, training=False)
  return {"unique_ids": features["unique_ids"], "start_logits": outputs["start_logits"],
          "end_logits": outputs["end_logits"]}


# ---------------------------------------------------------------------------------------------
# The run_squad task.


@dataclasses.dataclass
class SquadTask(fine_tuning.Task):
  """SQuAD v1.1/v2.0 span prediction (run_squad): train on `train_file`, predict `predict_file`
  (and score it when it has answers). The schedule counts examples (questions), not windows, as
  the original did."""
  kind = "squad"
  bert_config: modeling.BertConfig
  tokenizer: Any
  options: squad_data.SquadOptions
  output_dir: str
  train_file: Optional[str] = None
  predict_file: Optional[str] = None
  bucket_by_length: bool = True  # length_buckets for training and prediction
  group_by_length: bool = False  # training batches of one length bucket (length_buckets.batch)
  _predict_cache: Optional[tuple] = dataclasses.field(default=None, init=False, repr=False)

  def build_model(self) -> SquadModel:
    return build_model(self.bert_config)

  def loss(self, model, features, training):
    return squad_loss(model, features, training)

  def predict_outputs(self, model, features):
    return predict_logits(model, features)

  def train_data(self) -> fine_tuning.TrainData:
    record_path, num_examples, num_features = squad_data.cached_train_features(
        self.train_file, self.output_dir, self.tokenizer, self.options)
    if num_examples == 0:
      raise squad_data.SquadFormatError("%s: no usable training examples" % self.train_file)
    logging.info("%s: %d examples, %d features", self.train_file, num_examples, num_features)
    rows = squad_data.input_dataset(record_path, self.options.max_seq_length, True)
    return fine_tuning.TrainData(
        fine_tuning.training_dataset_fn(rows, num_features, self.bucket_by_length,
                                        self.group_by_length),
        num_examples, [record_path], unit="questions")

  default_eval_metric = "f1"

  def check_inputs(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """The predict file read and tokenized as prediction (and evaluation) will (kept for them)."""
    del do_train
    if (do_eval or do_predict) and self.predict_file:
      self._predict_inputs()

  def evaluate(self, strategy, model, batch_size: int) -> dict:
    """The official metrics of the predictions of the predict file (the dev set, with answers):
    evaluation during training. Writes no prediction files."""
    _, metrics = self.predictions(strategy, model, batch_size, write_files=False)
    if metrics is None:
      raise squad_data.SquadFormatError("%s: no question has answers, so it cannot evaluate during "
                                        "training" % self.predict_file)
    return metrics

  def predict(self, strategy, model, batch_size: int) -> str:
    """Predicts every question of the predict file, writes the prediction files and, when the
    file has answers, the official metrics to `output_dir/eval_results.txt`."""
    predictions, metrics = self.predictions(strategy, model, batch_size)
    return "predicted %d questions%s" % (len(predictions), "; " + ", ".join(
        "%s %.2f" % item for item in sorted(metrics.items())) if metrics else "")

  def _predict_inputs(self) -> tuple:
    """(data, examples, features, features file) of the predict file, read and tokenized once
    per task (evaluation during training predicts the same file many times). The features file,
    `output_dir/eval.tf_record`, follows `feature_cache`'s rule as every task's cached features
    do; the features themselves stay in memory for post-processing."""
    if self._predict_cache is None:
      options = self.options
      data = squad_data.load_squad_json(self.predict_file)
      examples, stats = squad_data.examples_from_data(data, False, options.version_2_with_negative,
                                                      self.predict_file)
      if not examples:  # Prediction would write empty answers, as if it had predicted a file.
        raise squad_data.SquadFormatError("%s: no questions to predict" % self.predict_file)
      features = list(squad_data.convert_examples_to_features(
          examples, self.tokenizer, options.max_seq_length, options.doc_stride,
          options.max_query_length, is_training=False))
      record_path = os.path.join(self.output_dir, "eval.tf_record")
      settings = dict(squad_data.features_settings(self.tokenizer, options),
                      predict_file_sha256=feature_cache.file_sha256(self.predict_file))
      feature_cache.reuse_or_write(record_path, settings, lambda temporary: {
          "num_features": squad_data.write_features_tfrecord(
              features, temporary, options.max_seq_length, is_training=False)})
      self._predict_cache = (data, examples, features, record_path)
    return self._predict_cache

  def predictions(self, strategy, model, batch_size: int, write_files: bool = True) -> tuple:
    """`predict`'s work: returns (predictions, the official metrics or None). With write_files,
    writes the prediction files and eval_results.txt."""
    options = self.options
    data, examples, features, record_path = self._predict_inputs()
    logging.info("***** Predicting: %d examples, %d features, batch %d *****", len(examples),
                 len(features), batch_size)
    start_time = time.time()
    dataset = squad_data.input_dataset(record_path, options.max_seq_length, False)
    outputs = self.predict_dataset(strategy, model, dataset, batch_size, [record_path])
    seconds = time.time() - start_time
    logging.info("Predicted %d examples (%d features) in %.1fs: %.1f examples/s, %.1f features/s",
                 len(examples), len(features), seconds, len(examples) / max(seconds, 1e-9),
                 len(features) / max(seconds, 1e-9))
    results = [RawResult(int(uid), start.tolist(), end.tolist()) for uid, start, end in zip(
        outputs.get("unique_ids", []), outputs.get("start_logits", []),
        outputs.get("end_logits", []))]
    predictions, nbest, null_odds = compute_predictions(
        examples, features, results, options.n_best_size, options.max_answer_length,
        self.tokenizer.do_lower_case, options.version_2_with_negative,
        options.null_score_diff_threshold, options.verbose_logging)
    metrics = None
    if not squad_data.has_gold_answers(data, options.version_2_with_negative):
      logging.info("%s has no answers: no evaluation", self.predict_file)
    elif options.version_2_with_negative:
      # The null odds at the same threshold as the predictions: the scores of the predictions
      # as written (the official script with --na-prob-file and --na-prob-thresh=threshold).
      metrics = evaluate_v2(data, predictions, null_odds, options.null_score_diff_threshold)
    else:
      metrics = evaluate_v1(data, predictions)
    if write_files:
      write_predictions(self.output_dir, predictions, nbest,
                        null_odds if options.version_2_with_negative else None, metrics)
    return predictions, metrics

  def serving_module(self, model) -> "squad_serving.SquadServingModule":
    """The export: `serving_default` on question/context, `token_ids` on ids (start and end
    logits). Requests are limited to 4 MiB of text (`export.MAX_REQUEST_TEXT_BYTES`), with memory
    linear in their bytes (see `SquadServingModule`); `token_ids` requests are checked against
    the model's vocab, type vocab and position sizes (`export.id_input_checks`).
    """
    return squad_serving.SquadServingModule(model, self.tokenizer, self.options,
                                            self.bucket_by_length)
