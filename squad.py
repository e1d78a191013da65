"""SQuAD v1.1/v2.0 question answering: examples, windowed features, head, post-processing, metrics.

The data handling reproduces the original run_squad.py decision for decision, because the
published numbers depend on them: the context is split on whitespace with a character-to-word map,
answers are mapped to word spans and then to tightened sub-token spans, long contexts are cut into
windows of `max_seq_length` every `doc_stride` tokens, and every token is scored only in the window
where it has the most context. Predictions are mapped back onto the original text with the
original's `get_final_text` alignment. The metrics are those of the official SQuAD v1.1 and v2.0
scripts. `SquadServingModule` rebuilds the single-window part of this in TF ops for the SavedModel.
"""
import collections
import dataclasses
import json
import os
import re
import string
import time
from typing import Any, Iterable, Iterator, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf
import tensorflow_text as tf_text

import atomic_files
import distribution
import errors
import export
import feature_cache
import fine_tuning
import in_graph_tokenization
import modeling
import progress_log
import tfrecord_files
import tokenization
import training_loop
import windowing

# The score of a question whose context has no sub-tokens (the export's `score`; its negation is
# the null odds do_predict writes for v2.0): below any real score.
NO_CONTEXT_SCORE = float(np.finfo(np.float32).min)


# The first feature id, as in the original, so feature ids never collide with small integers.
FIRST_UNIQUE_ID = 1000000000
# The scope of the span head's variables, as the original's run_squad named it.
HEAD_SCOPE = "cls/squad"


class SquadFormatError(errors.InputError):
  """A SQuAD JSON file is malformed; the message names the file and the place."""


@dataclasses.dataclass
class SquadExample:
  """One question about one context, with the context split on whitespace.

  `start_position`/`end_position` index `doc_tokens` (inclusive) and are set for training examples
  that have an answer; `char_to_word_offset[i]` is the index of the word holding context char `i`.
  """
  qas_id: str
  question_text: str
  context_text: str
  doc_tokens: list[str]
  char_to_word_offset: list[int]
  orig_answer_text: str = ""
  start_position: int = -1
  end_position: int = -1
  is_impossible: bool = False


@dataclasses.dataclass
class ReadStats:
  """Counts of what `read_squad_examples` had to skip or adjust, for the log and the tests."""
  questions: int = 0
  skipped_empty_context: int = 0
  skipped_answer_not_found: int = 0
  skipped_no_answer: int = 0
  several_answers: int = 0


def is_squad_whitespace(char: str) -> bool:
  """Whitespace as the original splits SQuAD contexts (includes the narrow no-break space)."""
  return char in (" ", "\t", "\r", "\n") or ord(char) == 0x202F


def split_context(context: str) -> tuple[list[str], list[int]]:
  """Splits a context on whitespace; returns the words and the word index of every character.

  Whitespace characters map to the word before them (-1 before the first word), as in the original.
  """
  words = []
  char_to_word_offset = []
  after_space = True
  for char in context:
    if is_squad_whitespace(char):
      after_space = True
    else:
      if after_space:
        words.append(char)
      else:
        words[-1] += char
      after_space = False
    char_to_word_offset.append(len(words) - 1)
  return words, char_to_word_offset


def _require(mapping: Any, key: str, where: str) -> Any:
  """Returns mapping[key] or raises SquadFormatError naming the place of the missing key."""
  if not isinstance(mapping, dict):
    raise SquadFormatError("%s: expected a JSON object, got %s" % (where, type(mapping).__name__))
  if key not in mapping:
    raise SquadFormatError("%s: missing key %r" % (where, key))
  return mapping[key]


def load_squad_json(input_file: str) -> list[dict]:
  """Reads a SQuAD JSON file and returns its `data` list; errors name the file and position."""
  with open(input_file, "rb") as reader:
    raw = reader.read()
  try:
    dataset = json.loads(raw.decode("utf-8"))
  except UnicodeDecodeError as e:
    line_start = raw.rfind(b"\n", 0, e.start) + 1
    raise SquadFormatError("%s: line %d, column %d: invalid UTF-8 byte 0x%02x" % (
        input_file, raw.count(b"\n", 0, e.start) + 1, e.start - line_start + 1,
        raw[e.start])) from e
  except json.JSONDecodeError as e:
    raise SquadFormatError("%s: not valid JSON (line %d, column %d): %s" %
                           (input_file, e.lineno, e.colno, e.msg)) from e
  data = _require(dataset, "data", input_file)
  if not isinstance(data, list):
    raise SquadFormatError("%s: 'data' must be a list of articles" % input_file)
  return data


def _example_from_qa(qa: dict, context: str, words: list[str], char_to_word_offset: list[int],
                     is_training: bool, version_2_with_negative: bool, where: str,
                     stats: ReadStats) -> SquadExample | None:
  """Builds one example from a `qas` entry, or returns None (counted in stats) to skip it."""
  qas_id = str(_require(qa, "id", where))
  where = "%s, question %s" % (where, qas_id)
  question = _require(qa, "question", where)
  if not isinstance(question, str):
    raise SquadFormatError("%s: the question must be a string, got %r" % (where, question))
  example = SquadExample(qas_id=qas_id, question_text=question, context_text=context,
                         doc_tokens=words, char_to_word_offset=char_to_word_offset)
  if not is_training:
    return example
  if version_2_with_negative:
    example.is_impossible = bool(_require(qa, "is_impossible", where))
  if example.is_impossible:
    return example
  answers = _require(qa, "answers", where)
  if not answers:
    logging.warning("%s: no answer, skipped", where)
    stats.skipped_no_answer += 1
    return None
  if len(answers) > 1:
    stats.several_answers += 1
  answer = answers[0]
  answer_text = _require(answer, "text", where)
  answer_start = _require(answer, "answer_start", where)
  if not isinstance(answer_text, str) or not isinstance(answer_start, int):
    raise SquadFormatError("%s: answer text must be a string and answer_start an integer, got "
                           "%r and %r" % (where, answer_text, answer_start))
  answer_end = answer_start + len(answer_text) - 1
  if answer_start < 0 or not answer_text or answer_end >= len(context):
    logging.warning("%s: answer_start %r outside the context, skipped", where, answer_start)
    stats.skipped_answer_not_found += 1
    return None
  start_word = char_to_word_offset[answer_start]
  end_word = char_to_word_offset[answer_end]
  # Only keep answers whose text can be found in the words they map to (as the original does);
  # this drops annotations with wrong offsets or odd whitespace.
  found_text = " ".join(words[start_word:end_word + 1]) if start_word >= 0 else ""
  wanted_text = " ".join(answer_text.split())
  if not found_text or found_text.find(wanted_text) == -1:
    logging.warning("%s: could not find answer %r in %r, skipped", where, wanted_text, found_text)
    stats.skipped_answer_not_found += 1
    return None
  example.orig_answer_text = answer_text
  example.start_position = start_word
  example.end_position = end_word
  return example


def examples_from_data(data: list[dict], is_training: bool, version_2_with_negative: bool = False,
                       source: str = "<data>") -> tuple[list[SquadExample], ReadStats]:
  """Turns a SQuAD `data` list into examples; returns them with counts of what was skipped.

  For training, a question with several answers is trained on its first one (the original
  rejected such files; dev files have several answers per question).
  """
  examples = []
  stats = ReadStats()
  first_place_of_id, repeated = {}, []
  for article_index, article in enumerate(data):
    article_where = "%s: article %d" % (source, article_index)
    for paragraph_index, paragraph in enumerate(_require(article, "paragraphs", article_where)):
      where = "%s, paragraph %d" % (article_where, paragraph_index)
      context = _require(paragraph, "context", where)
      if not isinstance(context, str):
        raise SquadFormatError("%s: the context must be a string" % where)
      qas = _require(paragraph, "qas", where)
      for qa in qas:
        qas_id = str(_require(qa, "id", where))
        if qas_id in first_place_of_id:
          repeated.append("%r (%s and %s)" % (qas_id, first_place_of_id[qas_id], where))
        first_place_of_id.setdefault(qas_id, where)
      words, char_to_word_offset = split_context(context)
      stats.questions += len(qas)
      if not words and is_training:
        logging.warning("%s: empty context, %d questions skipped", where, len(qas))
        stats.skipped_empty_context += len(qas)
        continue
      for qa in qas:
        example = _example_from_qa(qa, context, words, char_to_word_offset, is_training,
                                   version_2_with_negative, where, stats)
        if example is not None:
          examples.append(example)
  if repeated:  # Predictions are keyed by id: repeated questions would be merged silently.
    raise SquadFormatError("%s: %d repeated question ids, e.g. %s" % (
        source, len(repeated), "; ".join(repeated[:3])))
  return examples, stats


def read_squad_examples(input_file: str, is_training: bool,
                        version_2_with_negative: bool = False) -> list[SquadExample]:
  """Reads a SQuAD JSON file into examples, logging how many questions were skipped and why."""
  examples, stats = examples_from_data(load_squad_json(input_file), is_training,
                                       version_2_with_negative, source=input_file)
  logging.info("%s: %d questions, %d examples; skipped: %d empty context, %d answer not found, "
               "%d without answer; %d with several answers", input_file, stats.questions,
               len(examples), stats.skipped_empty_context, stats.skipped_answer_not_found,
               stats.skipped_no_answer, stats.several_answers)
  return examples


# ---------------------------------------------------------------------------------------------
# Features: sub-tokens, windows, max-context.


@dataclasses.dataclass
class InputFeatures:
  """One window of one example, as the model sees it, plus what post-processing needs.

  `token_to_orig_map` maps a position in `tokens` to the word index in the example's `doc_tokens`;
  `token_is_max_context` says whether this window is the best one to score that position in.
  """
  unique_id: int
  example_index: int
  doc_span_index: int
  tokens: list[str]
  token_to_orig_map: dict[int, int]
  token_is_max_context: dict[int, bool]
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  start_position: int = 0
  end_position: int = 0
  is_impossible: bool = False




def improve_answer_span(doc_tokens: Sequence[str], input_start: int, input_end: int,
                        tokenizer: Any, orig_answer_text: str) -> tuple[int, int]:
  """Returns the smallest sub-token span inside [input_start, input_end] equal to the answer.

  Word-level answer spans can be too wide: for the answer "1895" in "(1895-1943)." the word span
  covers the whole word, while its sub-tokens "( 1895 - 1943 ) ." allow the exact span.
  """
  answer_tokens = " ".join(tokenizer.tokenize(orig_answer_text))
  for new_start in range(input_start, input_end + 1):
    for new_end in range(input_end, new_start - 1, -1):
      if " ".join(doc_tokens[new_start:new_end + 1]) == answer_tokens:
        return new_start, new_end
  return input_start, input_end


def check_feature_settings(max_seq_length: int, doc_stride: int, max_query_length: int) -> None:
  """Raises FlagError (naming the flags) when the window settings cannot produce features."""
  if max_seq_length <= max_query_length + 3:
    raise errors.FlagError("--max_seq_length=%d must be greater than --max_query_length=%d + 3 "
                           "(room for [CLS], the question, two [SEP] and some context)" %
                           (max_seq_length, max_query_length))
  if doc_stride <= 0:
    raise errors.FlagError("--doc_stride must be positive, got %d" % doc_stride)


def convert_examples_to_features(examples: Sequence[SquadExample], tokenizer: Any,
                                 max_seq_length: int, doc_stride: int, max_query_length: int,
                                 is_training: bool) -> Iterator[InputFeatures]:
  """Yields the windowed features of `examples`, in order, with consecutive unique ids.

  Layout: `[CLS] question [SEP] context window [SEP]`, zero-padded to `max_seq_length`. Questions
  longer than `max_query_length` sub-tokens are truncated (counted in the log). For training, a
  window that does not contain the whole answer (and every window of an impossible question)
  points at `[CLS]` (position 0).
  """
  check_feature_settings(max_seq_length, doc_stride, max_query_length)
  unique_id = FIRST_UNIQUE_ID
  truncated_questions = 0
  progress = progress_log.Progress("Converting examples to features", len(examples), "examples")
  for example_index, example in enumerate(examples):
    progress.update(example_index)
    query_tokens = tokenizer.tokenize(example.question_text)
    if len(query_tokens) > max_query_length:
      truncated_questions += 1
      query_tokens = query_tokens[:max_query_length]

    tok_to_orig_index = []
    orig_to_tok_index = []
    all_doc_tokens = []
    for word_index, word in enumerate(example.doc_tokens):
      orig_to_tok_index.append(len(all_doc_tokens))
      for sub_token in tokenizer.tokenize(word):
        tok_to_orig_index.append(word_index)
        all_doc_tokens.append(sub_token)

    tok_start_position = tok_end_position = -1
    if is_training and not example.is_impossible:
      tok_start_position = orig_to_tok_index[example.start_position]
      if example.end_position < len(example.doc_tokens) - 1:
        tok_end_position = orig_to_tok_index[example.end_position + 1] - 1
      else:
        tok_end_position = len(all_doc_tokens) - 1
      tok_start_position, tok_end_position = improve_answer_span(
          all_doc_tokens, tok_start_position, tok_end_position, tokenizer,
          example.orig_answer_text)

    max_tokens_for_doc = max_seq_length - len(query_tokens) - 3
    doc_spans = windowing.doc_spans_for(len(all_doc_tokens), max_tokens_for_doc, doc_stride)
    for doc_span_index, doc_span in enumerate(doc_spans):
      tokens = ["[CLS]"] + query_tokens + ["[SEP]"]
      doc_offset = len(tokens)
      token_to_orig_map = {}
      token_is_max_context = {}
      for i in range(doc_span.length):
        split_token_index = doc_span.start + i
        token_to_orig_map[len(tokens)] = tok_to_orig_index[split_token_index]
        token_is_max_context[len(tokens)] = windowing.check_is_max_context(
            doc_spans, doc_span_index, split_token_index)
        tokens.append(all_doc_tokens[split_token_index])
      tokens.append("[SEP]")
      segment_ids = [0] * doc_offset + [1] * (len(tokens) - doc_offset)
      input_ids = tokenizer.convert_tokens_to_ids(tokens)
      input_mask = [1] * len(input_ids)
      padding = [0] * (max_seq_length - len(input_ids))

      start_position = end_position = 0
      if is_training and not example.is_impossible:
        doc_end = doc_span.start + doc_span.length - 1
        if doc_span.start <= tok_start_position and tok_end_position <= doc_end:
          start_position = tok_start_position - doc_span.start + doc_offset
          end_position = tok_end_position - doc_span.start + doc_offset

      yield InputFeatures(
          unique_id=unique_id, example_index=example_index, doc_span_index=doc_span_index,
          tokens=tokens, token_to_orig_map=token_to_orig_map,
          token_is_max_context=token_is_max_context, input_ids=input_ids + padding,
          input_mask=input_mask + padding, segment_ids=segment_ids + padding,
          start_position=start_position, end_position=end_position,
          is_impossible=example.is_impossible)
      unique_id += 1
  progress.update(len(examples))
  progress.finish("%d features" % (unique_id - FIRST_UNIQUE_ID))
  if truncated_questions:
    logging.warning("%d of %d questions were longer than max_query_length=%d sub-tokens and were "
                    "truncated", truncated_questions, len(examples), max_query_length)


# ---------------------------------------------------------------------------------------------
# TFRecords of features (the original's feature names) and their input pipeline.


def write_features_tfrecord(features: Iterable[InputFeatures], path: str,
                            is_training: bool) -> int:
  """Writes features as tf.train.Examples (as the original) and returns how many were written.

  The file appears under `path` only when complete.
  """
  count = 0
  with atomic_files.atomic_output(path) as temporary, tf.io.TFRecordWriter(temporary) as writer:
    for feature in features:
      record = {
          "unique_ids": tfrecord_files.int64_feature([feature.unique_id]),
          "input_ids": tfrecord_files.int64_feature(feature.input_ids),
          "input_mask": tfrecord_files.int64_feature(feature.input_mask),
          "segment_ids": tfrecord_files.int64_feature(feature.segment_ids),
      }
      if is_training:
        record["start_positions"] = tfrecord_files.int64_feature([feature.start_position])
        record["end_positions"] = tfrecord_files.int64_feature([feature.end_position])
        record["is_impossible"] = tfrecord_files.int64_feature([int(feature.is_impossible)])
      writer.write(tf.train.Example(features=tf.train.Features(feature=record))
                   .SerializeToString())
      count += 1
  return count


def feature_spec(seq_length: int, is_training: bool) -> dict[str, tf.io.FixedLenFeature]:
  """The parsing spec of the TFRecords `write_features_tfrecord` writes."""
  spec = dict(unique_ids=tf.io.FixedLenFeature([], tf.int64),
              **tfrecord_files.id_features_spec(seq_length))
  if is_training:
    spec["start_positions"] = tf.io.FixedLenFeature([], tf.int64)
    spec["end_positions"] = tf.io.FixedLenFeature([], tf.int64)
  return spec


def input_dataset(path: str, seq_length: int, is_training: bool) -> tf.data.Dataset:
  """One pass over a features file, in file order: unbatched int32 feature dicts (int64
  `unique_ids`), with the span labels when `is_training` (`fine_tuning.training_dataset_fn`
  shuffles, repeats and batches training data; `training_loop.predict` batches prediction data).
  """
  spec = feature_spec(seq_length, is_training)

  @tf.autograph.experimental.do_not_convert
  def parse(record):
    parsed = tf.io.parse_single_example(record, spec)
    return {name: value if name == "unique_ids" else tf.cast(value, tf.int32)
            for name, value in parsed.items()}

  return tf.data.TFRecordDataset(path).map(parse, num_parallel_calls=tf.data.AUTOTUNE)


@dataclasses.dataclass
class SquadOptions:
  """The run_squad settings the pipeline needs (the original's flag names and defaults)."""
  max_seq_length: int = 384
  doc_stride: int = 128
  max_query_length: int = 64
  n_best_size: int = 20
  max_answer_length: int = 30
  version_2_with_negative: bool = False
  null_score_diff_threshold: float = 0.0
  verbose_logging: bool = False


def features_settings(tokenizer: Any, options: SquadOptions) -> dict:
  """What SQuAD features depend on besides their input file (`feature_cache` settings)."""
  return dict(feature_cache.tokenizer_settings(tokenizer), max_seq_length=options.max_seq_length,
              doc_stride=options.doc_stride, max_query_length=options.max_query_length,
              version_2_with_negative=options.version_2_with_negative)


def cached_train_features(train_file: str, output_dir: str, tokenizer: Any,
                          options: SquadOptions, seed: int = 12345) -> tuple[str, int, int]:
  """Returns (TFRecord path, number of examples, number of features) of the training features.

  The features are written once to `output_dir/train.tf_record` and reused by a later run with the
  same inputs (e.g. a resumed run) instead of re-tokenizing, by `feature_cache`'s rule: the note
  `train.tf_record.json` holds the train file's and the vocab's content digests, the casing, the
  window settings and the seed. Examples are shuffled with a fixed seed before windowing, as in
  the original.
  """
  path = os.path.join(output_dir, "train.tf_record")
  settings = dict(features_settings(tokenizer, options),
                  train_file_sha256=feature_cache.file_sha256(train_file), seed=seed)

  def write(temporary: str) -> dict:
    examples = read_squad_examples(train_file, is_training=True,
                                   version_2_with_negative=options.version_2_with_negative)
    np.random.default_rng(seed).shuffle(examples)
    features = convert_examples_to_features(examples, tokenizer, options.max_seq_length,
                                            options.doc_stride, options.max_query_length,
                                            is_training=True)
    num_features = write_features_tfrecord(features, temporary, is_training=True)
    return {"num_examples": len(examples), "num_features": num_features}

  contents, _ = feature_cache.reuse_or_write(path, settings, write)
  return path, contents["num_examples"], contents["num_features"]


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


def _prelim_predictions(features: Sequence[InputFeatures], results: dict[int, RawResult],
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


def _null_prediction(features: Sequence[InputFeatures],
                     results: dict[int, RawResult]) -> _PrelimPrediction:
  """The smallest [CLS] score (start + end logit at position 0) over the windows (v2.0)."""
  best = None
  for feature_index, feature in enumerate(features):
    result = results[feature.unique_id]
    score = result.start_logits[0] + result.end_logits[0]
    if best is None or score < best.start_logit + best.end_logit:
      best = _PrelimPrediction(feature_index, 0, 0, result.start_logits[0], result.end_logits[0])
  return best


def _nbest_for_example(example: SquadExample, features: Sequence[InputFeatures],
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


def compute_predictions(examples: Sequence[SquadExample], features: Sequence[InputFeatures],
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
      null_odds[example.qas_id] = -NO_CONTEXT_SCORE
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
                      null_odds: dict[str, float] | None = None) -> None:
  """Writes predictions.json, nbest_predictions.json and (v2.0) null_odds.json to output_dir.
  Only the chief writes."""
  if not distribution.is_chief():
    return
  files = [("predictions.json", predictions), ("nbest_predictions.json", nbest)]
  if null_odds is not None:
    files.append(("null_odds.json", null_odds))
  for name, content in files:
    path = os.path.join(output_dir, name)
    atomic_files.write_text(path, json.dumps(content, indent=4) + "\n")
    logging.info("Wrote %s", path)


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


def _questions(dataset: list[dict]) -> Iterator[dict]:
  for article in dataset:
    for paragraph in article["paragraphs"]:
      yield from paragraph["qas"]


def evaluate_v1(dataset: list[dict], predictions: dict[str, str]) -> dict[str, float]:
  """The official SQuAD v1.1 evaluation: EM and F1 (0-100), best over the gold answers.

  A question without a prediction scores 0 (the official script warns and does the same). A
  question without gold answers cannot be scored (the official script stops there) and is left
  out, with a warning counting them.
  """
  total = exact_match = f1 = 0.0
  missing = unanswerable = 0
  for qa in _questions(dataset):
    if not qa["answers"]:
      unanswerable += 1
      continue
    total += 1
    if qa["id"] not in predictions:
      missing += 1
      continue
    truths = [answer["text"] for answer in qa["answers"]]
    prediction = predictions[qa["id"]]
    exact_match += max(exact_match_score(prediction, truth) for truth in truths)
    f1 += max(_f1_v1(prediction, truth) for truth in truths)
  if missing:
    logging.warning("%d questions have no prediction and score 0", missing)
  if unanswerable:
    logging.warning("%d questions have no gold answer and are not scored (v1.1 has none such; "
                    "--version_2_with_negative scores them)", unanswerable)
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
  qid_to_has_ans = {qa["id"]: bool(qa["answers"]) for qa in _questions(dataset)}
  exact_raw = {}
  f1_raw = {}
  for qa in _questions(dataset):
    qid = qa["id"]
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


class SquadModel(modeling.BertTaskModel):
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
# Export: raw question + context -> answer, inside the graph.

# The characters `is_squad_whitespace` splits contexts on, as an RE2 class.
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

  def __init__(self, model: keras.Model, tokenizer: Any, options: SquadOptions,
               bucket_by_length: bool = True):
    check_feature_settings(options.max_seq_length, options.doc_stride, options.max_query_length)
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
                                   tf.constant(NO_CONTEXT_SCORE, null_score.dtype))),
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


def has_gold_answers(data: list[dict], version_2_with_negative: bool) -> bool:
  """Whether a predict file can be scored: every question lists answers (v1.1: some non-empty)."""
  questions = list(_questions(data))
  if not questions or not all("answers" in qa for qa in questions):
    return False
  return version_2_with_negative or any(qa["answers"] for qa in questions)


# ---------------------------------------------------------------------------------------------
# The run_squad task.


@dataclasses.dataclass
class SquadTask(fine_tuning.Task):
  """SQuAD v1.1/v2.0 span prediction (run_squad): train on `train_file`, predict `predict_file`
  (and score it when it has answers). The schedule counts examples (questions), not windows, as
  the original did."""
  bert_config: modeling.BertConfig
  tokenizer: Any
  options: SquadOptions
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
    record_path, num_examples, num_features = cached_train_features(
        self.train_file, self.output_dir, self.tokenizer, self.options)
    if num_examples == 0:
      raise SquadFormatError("%s: no usable training examples" % self.train_file)
    logging.info("%s: %d examples, %d features", self.train_file, num_examples, num_features)
    rows = input_dataset(record_path, self.options.max_seq_length, True)
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
      raise SquadFormatError("%s: no question has answers, so it cannot evaluate during "
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
      data = load_squad_json(self.predict_file)
      examples, stats = examples_from_data(data, False, options.version_2_with_negative,
                                           self.predict_file)
      features = list(convert_examples_to_features(examples, self.tokenizer,
                                                   options.max_seq_length, options.doc_stride,
                                                   options.max_query_length, is_training=False))
      record_path = os.path.join(self.output_dir, "eval.tf_record")
      settings = dict(features_settings(self.tokenizer, options),
                      predict_file_sha256=feature_cache.file_sha256(self.predict_file))
      feature_cache.reuse_or_write(record_path, settings, lambda temporary: {
          "num_features": write_features_tfrecord(features, temporary, is_training=False)})
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
    outputs = self.predict_dataset(strategy, model,
                                   input_dataset(record_path, options.max_seq_length, False),
                                   batch_size, [record_path])
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
    if write_files:
      write_predictions(self.output_dir, predictions, nbest,
                        null_odds if options.version_2_with_negative else None)
    if not has_gold_answers(data, options.version_2_with_negative):
      logging.info("%s has no answers: no evaluation", self.predict_file)
      return predictions, None
    if options.version_2_with_negative:
      # The null odds at the same threshold as the predictions: the scores of the predictions
      # as written (the official script with --na-prob-file and --na-prob-thresh=threshold).
      metrics = evaluate_v2(data, predictions, null_odds, options.null_score_diff_threshold)
    else:
      metrics = evaluate_v1(data, predictions)
    if write_files:
      training_loop.write_eval_results(os.path.join(self.output_dir, "eval_results.txt"),
                                       metrics)
    return predictions, metrics

  def serving_module(self, model) -> "SquadServingModule":
    """The export: `serving_default` on question/context, `token_ids` on ids (start and end
    logits). Requests are limited to 4 MiB of text (`export.MAX_REQUEST_TEXT_BYTES`), with memory
    linear in their bytes (see `SquadServingModule`); `token_ids` requests are checked against
    the model's vocab, type vocab and position sizes (`export.id_input_checks`).
    """
    return SquadServingModule(model, self.tokenizer, self.options, self.bucket_by_length)
