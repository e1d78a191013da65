# coding=utf-8
"""SQuAD v1.1/v2.0 data: the JSON file, examples, windowed features and their TFRecords.

The data handling reproduces the original run_squad.py decision for decision, because the
published numbers depend on them: the context is split on whitespace with a character-to-word map,
answers are mapped to word spans and then to tightened sub-token spans, long contexts are cut into
windows of `max_seq_length` every `doc_stride` tokens, and every token is scored only in the window
where it has the most context (squad.py's post-processing reads that mark). Training features are
cached in output_dir (`cached_train_features`) and read back with the original's feature names
(`input_dataset`).
"""

import dataclasses
import json
import os
from typing import Any, Iterable, Iterator, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

import errors
import feature_cache
import progress_log
import tfrecord_files
import windowing

# The score of a question whose context has no sub-tokens (the export's `score`; its negation is
# the null odds do_predict writes for v2.0): below any real score.
NO_CONTEXT_SCORE = float(np.finfo(np.float32).min)


# The first feature id, as in the original, so feature ids never collide with small integers.
FIRST_UNIQUE_ID = 1000000000


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
  errors.check_text_file(input_file, "the SQuAD file")
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
  elif qa.get("is_impossible") is True:
    raise SquadFormatError(
        "%s: an unanswerable question (is_impossible): SQuAD 2.0 data trains with "
        "`version_2_with_negative`=true (without it, every such question would be left out)" %
        where)
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


def all_questions(dataset: list[dict]) -> Iterator[dict]:
  """The question entries (`qas`) of a SQuAD file's `data`, in file order."""
  for article in dataset:
    for paragraph in article["paragraphs"]:
      yield from paragraph["qas"]


def question_id(qa: dict) -> str:
  """A question's id as predictions.json keys it: SQuAD's ids are strings, and a number in
  their place is read as its text (by the examples and by the scorer alike)."""
  return str(qa["id"])


def has_gold_answers(data: list[dict], version_2_with_negative: bool) -> bool:
  """Whether a predict file can be scored: every question lists answers (v1.1: some non-empty)."""
  questions = list(all_questions(data))
  if not questions or not all("answers" in qa for qa in questions):
    return False
  return version_2_with_negative or any(qa["answers"] for qa in questions)


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
    raise errors.FlagError("`max_seq_length`=%d must be greater than `max_query_length`=%d + 3 "
                           "(room for [CLS], the question, two [SEP] and some context)" %
                           (max_seq_length, max_query_length))
  if doc_stride <= 0:
    raise errors.FlagError("`doc_stride` must be positive, got %d" % doc_stride)


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


def record_features(seq_length: int, is_training: bool) -> list[tfrecord_files.RecordFeature]:
  """The original's records: unique_ids and the model inputs, plus for training the answer span
  (`start_positions`, `end_positions`) and `is_impossible`."""
  features = [tfrecord_files.RecordFeature("unique_ids")] + tfrecord_files.id_features(seq_length)
  if is_training:
    features += [tfrecord_files.RecordFeature(name)
                 for name in ("start_positions", "end_positions", "is_impossible")]
  return features


def write_features_tfrecord(features: Iterable[InputFeatures], path: str, seq_length: int,
                            is_training: bool) -> int:
  """Writes features of `seq_length` tokens as the original's records (`record_features`) and
  returns how many were written. The file appears under `path` only when complete."""
  rows = ({"unique_ids": feature.unique_id, "input_ids": feature.input_ids,
           "input_mask": feature.input_mask, "segment_ids": feature.segment_ids,
           "start_positions": feature.start_position, "end_positions": feature.end_position,
           "is_impossible": feature.is_impossible} for feature in features)
  return tfrecord_files.write_records(path, record_features(seq_length, is_training), rows)


def input_dataset(path: str, seq_length: int, is_training: bool) -> tf.data.Dataset:
  """One pass over a features file, in file order: unbatched int32 feature dicts (int64
  `unique_ids`), with the span labels when `is_training` (`fine_tuning.training_dataset_fn`
  shuffles, repeats and batches training data; `evaluation.predict` batches prediction data).
  """
  # `is_impossible` is written, as the original writes it, but no loss reads it.
  features = [feature for feature in record_features(seq_length, is_training)
              if feature.name != "is_impossible"]
  return tfrecord_files.records_dataset(path, features, int64_names=("unique_ids",))


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
    num_features = write_features_tfrecord(features, temporary, options.max_seq_length,
                                           is_training=True)
    return {"num_examples": len(examples), "num_features": num_features}

  contents, _ = feature_cache.reuse_or_write(path, settings, write)
  return path, contents["num_examples"], contents["num_features"]
