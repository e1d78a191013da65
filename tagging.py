# coding=utf-8
"""Token tagging (named entities, parts of speech) on top of BERT.

What lives here, shared by `run_ner.py`, its tests and its SavedModel export:
- reading CoNLL-2003 column files (`word ... tag` per line, blank line between sentences,
  `-DOCSTART-` lines ignored) and the tag list saved beside the model;
- word -> WordPiece features: each word's tag sits on its first sub-token, the other sub-tokens
  carry `IGNORE_LABEL` and count neither in the loss nor in prediction; sentences whose pieces do
  not fit `max_seq_length` are split into windows of whole words so that no word is lost;
- the tagging head (`output_weights`/`output_bias` on BERT's sequence output) and its loss;
- entity-level metrics computed exactly as CoNLL's `conlleval` script (IOB1, IOB2, IOBES);
- CoNLL-format prediction files.
"""

import collections
import dataclasses
import os
import re
from typing import Iterable, Mapping, Optional, Sequence

from absl import logging
import keras
import numpy as np
import tensorflow as tf

import atomic_files
import distribution
import errors
import export
import feature_cache
import fine_tuning
import heads
import in_graph_tokenization
import modeling
import task_files
import tfrecord_files
import tokenization
import windowing

DOCSTART = "-DOCSTART-"
OUTSIDE_TAG = "O"
# Label id of positions that are not a word's first piece ([CLS], [SEP], padding, "##" pieces).
IGNORE_LABEL = -1
TAG_LIST_FILE = "tag_list.txt"


class ConllFormatError(errors.InputError):
  """A CoNLL file cannot be read; the message names the file (and line)."""


@dataclasses.dataclass
class TaggedSentence:
  """One sentence of a CoNLL file: its words and their tags (tags may be None at predict time)."""
  words: list[str]
  tags: Optional[list[str]]
  guid: str = ""
  path: str = ""  # The file and the line of its first word, where it was read from one.
  first_line: int = 0


def read_conll(path: str) -> list[TaggedSentence]:
  """Reads a CoNLL-2003 style file: the first column is the word, the last one its tag.

  Blank lines separate sentences; `-DOCSTART-` lines (document boundaries) are skipped. Every
  word line has as many columns as the file's first: a line that lost its tag column (or gained
  one) would make another column its tag, a new tag class.
  Raises ValueError naming the file and line when a line has a single column, another number of
  columns than the first word line, or bytes that are not UTF-8, and naming the file when it
  holds no sentence.
  """
  sentences = []
  words, tags = [], []
  first_columns = None  # (number of columns, line) of the first word line.
  name = os.path.basename(path)
  errors.check_text_file(path, "the data file")

  def flush(line_number):
    if words:
      sentences.append(TaggedSentence(list(words), list(tags), "%s-%d" % (name, line_number),
                                      path, line_number - len(words)))
      words.clear()
      tags.clear()

  with open(path, "rb") as reader:
    line_number = 0
    for line_number, raw_line in enumerate(reader, start=1):
      try:
        line = raw_line.decode("utf-8")
      except UnicodeDecodeError as e:
        raise ConllFormatError("%s:%d: invalid UTF-8 byte 0x%02x at column %d" %
                         (path, line_number, raw_line[e.start], e.start + 1)) from e
      columns = line.split()
      if not columns:
        flush(line_number)
        continue
      if columns[0] == DOCSTART:
        flush(line_number)
        continue
      if len(columns) < 2:
        raise ConllFormatError("%s:%d: expected `word ... tag`, got %r" %
                         (path, line_number, line.rstrip()))
      first_columns = first_columns or (len(columns), line_number)
      if len(columns) != first_columns[0]:
        raise ConllFormatError("%s:%d: %d columns, but line %d has %d (the tag is the last "
                               "column): %r" % (path, line_number, len(columns),
                                                first_columns[1], first_columns[0],
                                                line.rstrip()))
      words.append(columns[0])
      tags.append(columns[-1])
    flush(line_number + 1)
  if not sentences:
    raise ConllFormatError("%s: no sentences (the file is empty)" % path)
  return sentences


def tag_list_from_sentences(sentences: Iterable[TaggedSentence]) -> list[str]:
  """The tag set of the training data: "O" first (if present), then the others sorted."""
  tags = {tag for sentence in sentences for tag in sentence.tags}
  return sorted(tags, key=lambda tag: (tag != OUTSIDE_TAG, tag))


def write_tag_list(tag_list: Sequence[str], directory: str) -> str:
  """Writes the tag list (one tag per line, id = line number) beside a model; returns its path."""
  path = os.path.join(directory, TAG_LIST_FILE)
  if distribution.is_chief():
    task_files.write_label_list(path, tag_list)
  return path


def read_tag_list(directory: str) -> list[str]:
  """The tags of the tag list written by `write_tag_list` (`task_files.read_label_list`)."""
  path = os.path.join(directory, TAG_LIST_FILE)
  if not os.path.exists(path):
    raise ConllFormatError("%s not found: train first (`do_train`) with this `output_dir`, or "
                           "copy the tag list of the model there" % path)
  return list(task_files.read_label_list(path))


# ---------------------------------------------------------------------------------------------
# Words -> WordPiece features.
# ---------------------------------------------------------------------------------------------

@dataclasses.dataclass
class TaggingFeature:
  """One window of a sentence as model input.

  `label_ids` holds the tag id on the first piece of every word of the window and `IGNORE_LABEL`
  elsewhere, so the positions of the window's words are `label_ids != IGNORE_LABEL` in order.
  """
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  label_ids: list[int]
  sentence_index: int
  word_start: int
  num_words: int
  # With --doc_stride: per word of the window, whether this is the window its tag is read from
  # (`windowing.check_is_max_context` at its first piece). None: every word (greedy windows).
  max_context: Optional[list[bool]] = None


def tokenize_words(words: Sequence[str], tokenizer: tokenization.FullTokenizer,
                   max_pieces: int) -> list[list[str]]:
  """Sub-tokens of each word, at least one and at most `max_pieces`.

  A word the tokenizer drops entirely (e.g. a control character) becomes "[UNK]" and a longer word
  keeps its first pieces, so that every word has a first sub-token to carry its tag.
  """
  pieces = []
  for word in words:
    word_pieces = tokenizer.tokenize(word) or [tokenization.UNK_TOKEN]
    pieces.append(word_pieces[:max_pieces])
  return pieces


def window_word_ranges(piece_counts: Sequence[int], max_pieces: int) -> list[tuple[int, int]]:
  """Splits a sentence into `[start, end)` word ranges of at most `max_pieces` pieces each.

  Greedy: a window takes words until the next one would not fit. Every word lands in exactly one
  window (each word must have 1..max_pieces pieces, as `tokenize_words` guarantees). The exported
  SavedModel applies the same rule in the graph.
  """
  ranges = []
  start = 0
  used = 0
  for index, count in enumerate(piece_counts):
    if not 0 < count <= max_pieces:
      raise ValueError("word %d has %d pieces; expected 1..%d" % (index, count, max_pieces))
    if index > start and used + count > max_pieces:
      ranges.append((start, index))
      start, used = index, 0
    used += count
  if piece_counts:
    ranges.append((start, len(piece_counts)))
  return ranges


def stride_windows(piece_counts: Sequence[int], max_pieces: int, doc_stride: int
                   ) -> list[tuple[windowing.DocSpan, int, int, list[bool]]]:
  """`--doc_stride` windows of a sentence: run_squad's windows over its pieces (a window may cut
  a word). Returns per window (span of pieces, first word, end word, max-context flags): the words
  whose first piece is in the window, and for each whether the window is where that piece has
  the most context (the window its tag is read from)."""
  first_pieces = np.cumsum([0] + list(piece_counts))[:-1].tolist()
  spans = windowing.doc_spans_for(sum(piece_counts), max_pieces, doc_stride)
  windows = []
  for index, span in enumerate(spans):
    words = [w for w, p in enumerate(first_pieces) if span.start <= p < span.start + span.length]
    start, end = (words[0], words[-1] + 1) if words else (0, 0)
    windows.append((span, start, end, [windowing.check_is_max_context(spans, index, first_pieces[w])
                                       for w in words]))
  return windows


def convert_sentences_to_features(sentences: Sequence[TaggedSentence], tag_list: Sequence[str],
                                  max_seq_length: int, tokenizer: tokenization.FullTokenizer,
                                  doc_stride: Optional[int] = None) -> list[TaggingFeature]:
  """Turns sentences into `[CLS] pieces [SEP]` windows with tags on first sub-tokens.

  Windows: whole words, greedily (`window_word_ranges`), or with `doc_stride` overlapping windows
  of pieces (`stride_windows`), where every window trains on the tags of its words and prediction
  reads each word in its max-context window.
  Sentences without tags (prediction on raw text) get tag id 0 on first sub-tokens; that value is
  never read, only its position. Raises ConllFormatError for a tag missing from `tag_list`.
  """
  if max_seq_length < 3:
    raise errors.FlagError("`max_seq_length`=%d leaves no room for a word between [CLS] and [SEP]"
                           % max_seq_length)
  tag_ids = {tag: index for index, tag in enumerate(tag_list)}
  cls_id = tokenizer.special_token_id(tokenization.CLS_TOKEN)
  sep_id = tokenizer.special_token_id(tokenization.SEP_TOKEN)
  max_pieces = max_seq_length - 2
  features = []
  for sentence_index, sentence in enumerate(sentences):
    word_pieces = tokenize_words(sentence.words, tokenizer, max_pieces)
    counts = [len(p) for p in word_pieces]
    if doc_stride is None:
      windows = [(windowing.DocSpan(sum(counts[:start]), sum(counts[start:end])), start, end, None)
                 for start, end in window_word_ranges(counts, max_pieces)]
    else:
      windows = stride_windows(counts, max_pieces, doc_stride)
    all_ids = tokenizer.convert_tokens_to_ids([p for pieces in word_pieces for p in pieces])
    is_first = [i == 0 for pieces in word_pieces for i in range(len(pieces))]
    word_of_piece = [w for w, count in enumerate(counts) for _ in range(count)]
    for span, start, end, max_context in windows:
      piece_range = range(span.start, span.start + span.length)
      input_ids = [cls_id] + [all_ids[p] for p in piece_range] + [sep_id]
      label_ids = [IGNORE_LABEL] + [
          _tag_id(sentence, word_of_piece[p], tag_ids) if is_first[p] else IGNORE_LABEL
          for p in piece_range]
      label_ids.append(IGNORE_LABEL)
      padding = max_seq_length - len(input_ids)
      features.append(TaggingFeature(
          input_ids=input_ids + [0] * padding,
          input_mask=[1] * len(input_ids) + [0] * padding,
          segment_ids=[0] * max_seq_length,
          label_ids=label_ids + [IGNORE_LABEL] * padding,
          sentence_index=sentence_index, word_start=start, num_words=end - start,
          max_context=max_context))
  return features


def _tag_id(sentence: TaggedSentence, word_index: int, tag_ids: dict[str, int]) -> int:
  if sentence.tags is None:
    return 0
  tag = sentence.tags[word_index]
  if tag not in tag_ids:
    where = ("%s:%d" % (sentence.path, sentence.first_line + word_index) if sentence.path
             else "%s: word %d" % (sentence.guid, word_index))
    raise ConllFormatError("%s: %r has tag %r, which is not in the training tag list %s" %
                           (where, sentence.words[word_index], tag, sorted(tag_ids)))
  return tag_ids[tag]


def features_to_arrays(features: Sequence[TaggingFeature]) -> dict[str, np.ndarray]:
  """Stacks features into int32 arrays: `input_ids`, `input_mask`, `segment_ids`, `label_ids`."""
  names = ("input_ids", "input_mask", "segment_ids", "label_ids")
  return {name: np.array([getattr(f, name) for f in features], dtype=np.int32).reshape(
      len(features), -1) for name in names}


def words_tag_ids(features: Sequence[TaggingFeature], position_tag_ids: np.ndarray,
                  sentences: Sequence[TaggedSentence]) -> list[list[int]]:
  """Reassembles per-position predictions [num_features, seq] into one tag id per word.

  Each word takes the prediction at its first sub-token in the window that holds it (with
  overlapping windows, the one where it has the most context).
  """
  result = [[0] * len(sentence.words) for sentence in sentences]
  for feature, row in zip(features, position_tag_ids):
    positions = [i for i, label in enumerate(feature.label_ids) if label != IGNORE_LABEL]
    for offset, position in enumerate(positions):
      if feature.max_context is None or feature.max_context[offset]:
        result[feature.sentence_index][feature.word_start + offset] = int(row[position])
  return result


# ---------------------------------------------------------------------------------------------
# Entity-level evaluation, as CoNLL's conlleval (version 2004-01-26) computes it.
# ---------------------------------------------------------------------------------------------

_TAG_RE = re.compile(r"^([^-]*)-(.*)$")


def split_tag(tag: str) -> tuple[str, str]:
  """Splits "B-PER" into ("B", "PER") like conlleval: at the first hyphen; "O" -> ("O", "")."""
  match = _TAG_RE.match(tag)
  if match:
    return match.group(1), match.group(2)
  return tag, ""


def end_of_chunk(prev_prefix: str, prefix: str, prev_type: str, chunk_type: str) -> bool:
  """Whether a chunk ended between the previous word and this one (conlleval's endOfChunk).

  For B/I/O tags these are exactly conlleval's rules. For IOBES, an E- or S- word always closes its
  chunk, and B-/S- after B-/I- closes the open one (the S-aware rules of the IOBES version of
  conlleval; the 2004 script has no S- rules and would merge adjacent single-word chunks).
  """
  if prev_prefix in ("E", "S"):
    return True
  if prev_prefix in ("B", "I") and prefix in ("B", "S", "O"):
    return True
  return prev_prefix != "O" and prev_type != chunk_type


def start_of_chunk(prev_prefix: str, prefix: str, prev_type: str, chunk_type: str) -> bool:
  """Whether a chunk starts at this word (conlleval's startOfChunk).

  B- and S- always start one; I- and E- start one after O, E- or S- (an I- after O is a chunk in
  IOB1); any non-O tag whose type differs from the previous word's starts one.
  """
  if prefix in ("B", "S"):
    return True
  if prefix in ("I", "E") and prev_prefix in ("O", "E", "S"):
    return True
  return prefix != "O" and prev_type != chunk_type


@dataclasses.dataclass
class ChunkScores:
  """Precision, recall and F1 in percent, and the counts they come from."""
  precision: float
  recall: float
  f1: float
  correct: int
  found_gold: int
  found_predicted: int


def _scores(correct: int, found_gold: int, found_predicted: int) -> ChunkScores:
  precision = 100.0 * correct / found_predicted if found_predicted else 0.0
  recall = 100.0 * correct / found_gold if found_gold else 0.0
  f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
  return ChunkScores(precision, recall, f1, correct, found_gold, found_predicted)


@dataclasses.dataclass
class ConllEvaluation:
  """conlleval's numbers: overall and per chunk type, plus token accuracy (in percent)."""
  overall: ChunkScores
  per_type: dict[str, ChunkScores]
  accuracy: float
  num_tokens: int


def conll_evaluate(gold: Sequence[Sequence[str]], predicted: Sequence[Sequence[str]]
                  ) -> ConllEvaluation:
  """Scores predicted tag sequences against gold ones, sentence by sentence, as conlleval does.

  A chunk counts as correct when gold and prediction start it at the same word with the same type
  and end it at the same word. Sentence boundaries close every open chunk (conlleval reads the
  blank line between sentences as an `O` word that is not counted as a token).
  """
  if len(gold) != len(predicted):
    raise ValueError("%d gold sentences but %d predicted ones" % (len(gold), len(predicted)))
  correct_chunks = collections.Counter()
  found_gold = collections.Counter()
  found_predicted = collections.Counter()
  correct_tags = 0
  num_tokens = 0
  in_correct = False
  last_gold, last_gold_type = OUTSIDE_TAG, ""
  last_pred, last_pred_type = OUTSIDE_TAG, ""

  def tokens():
    for index, (gold_tags, pred_tags) in enumerate(zip(gold, predicted)):
      if len(gold_tags) != len(pred_tags):
        raise ValueError("sentence %d: %d gold tags but %d predicted ones" %
                         (index, len(gold_tags), len(pred_tags)))
      for gold_tag, pred_tag in zip(gold_tags, pred_tags):
        yield gold_tag, pred_tag, True
      yield OUTSIDE_TAG, OUTSIDE_TAG, False  # The sentence boundary.

  for gold_tag, pred_tag, is_word in tokens():
    gold_prefix, gold_type = split_tag(gold_tag)
    pred_prefix, pred_type = split_tag(pred_tag)
    gold_ends = end_of_chunk(last_gold, gold_prefix, last_gold_type, gold_type)
    pred_ends = end_of_chunk(last_pred, pred_prefix, last_pred_type, pred_type)
    if in_correct:
      if gold_ends and pred_ends and last_pred_type == last_gold_type:
        in_correct = False
        correct_chunks[last_gold_type] += 1
      elif gold_ends != pred_ends or pred_type != gold_type:
        in_correct = False
    gold_starts = start_of_chunk(last_gold, gold_prefix, last_gold_type, gold_type)
    pred_starts = start_of_chunk(last_pred, pred_prefix, last_pred_type, pred_type)
    if gold_starts and pred_starts and pred_type == gold_type:
      in_correct = True
    if gold_starts:
      found_gold[gold_type] += 1
    if pred_starts:
      found_predicted[pred_type] += 1
    if is_word:
      correct_tags += gold_tag == pred_tag
      num_tokens += 1
    last_gold, last_gold_type = gold_prefix, gold_type
    last_pred, last_pred_type = pred_prefix, pred_type
  if in_correct:
    correct_chunks[last_gold_type] += 1

  types = sorted(set(found_gold) | set(found_predicted))
  per_type = {t: _scores(correct_chunks[t], found_gold[t], found_predicted[t]) for t in types}
  overall = _scores(sum(correct_chunks.values()), sum(found_gold.values()),
                    sum(found_predicted.values()))
  accuracy = 100.0 * correct_tags / num_tokens if num_tokens else 0.0
  return ConllEvaluation(overall, per_type, accuracy, num_tokens)


def format_conlleval_report(evaluation: ConllEvaluation) -> str:
  """The evaluation as conlleval prints it (overall line, then one line per chunk type)."""
  overall = evaluation.overall
  lines = ["processed %d tokens with %d phrases; found: %d phrases; correct: %d." %
           (evaluation.num_tokens, overall.found_gold, overall.found_predicted, overall.correct)]
  if evaluation.num_tokens:
    lines.append("accuracy: %6.2f%%; precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f" %
                 (evaluation.accuracy, overall.precision, overall.recall, overall.f1))
  for chunk_type, scores in evaluation.per_type.items():
    lines.append("%17s: precision: %6.2f%%; recall: %6.2f%%; FB1: %6.2f  %d" %
                 (chunk_type, scores.precision, scores.recall, scores.f1, scores.found_predicted))
  return "\n".join(lines) + "\n"


def evaluation_to_dict(evaluation: ConllEvaluation) -> dict[str, float]:
  """Flat `name -> value` metrics for eval_results.txt, as fractions (like eval_accuracy)."""
  results = {
      "eval_accuracy": evaluation.accuracy / 100.0,
      "eval_precision": evaluation.overall.precision / 100.0,
      "eval_recall": evaluation.overall.recall / 100.0,
      "eval_f1": evaluation.overall.f1 / 100.0,
  }
  for chunk_type, scores in evaluation.per_type.items():
    results["eval_%s_precision" % chunk_type] = scores.precision / 100.0
    results["eval_%s_recall" % chunk_type] = scores.recall / 100.0
    results["eval_%s_f1" % chunk_type] = scores.f1 / 100.0
  return results


def write_conll_predictions(path: str, sentences: Sequence[TaggedSentence],
                            predicted_tags: Sequence[Sequence[str]],
                            scored_files: Optional[Mapping[str, str]] = None) -> None:
  """Writes `word gold_tag predicted_tag` lines, a blank line after each sentence, with the files
  that score them ({path: text}: the conlleval report) as one unit (`atomic_files.write_texts`).

  This is the input format of conlleval itself. Sentences without gold tags get "O" as gold.
  """
  lines = []
  for sentence, tags in zip(sentences, predicted_tags):
    gold = sentence.tags or [OUTSIDE_TAG] * len(sentence.words)
    lines.extend("%s %s %s\n" % row for row in zip(sentence.words, gold, tags))
    lines.append("\n")
  if distribution.is_chief():
    atomic_files.write_texts(dict(scored_files or {}, **{path: "".join(lines)}))


# ---------------------------------------------------------------------------------------------
# Model: BERT's sequence output -> one softmax over tags per token.
# ---------------------------------------------------------------------------------------------

class BertTagger(heads.BertTaskModel):
  """BERT with a token-level softmax layer, in the original run_classifier's style.

  Variables (checkpoint names, DESIGN.md's rule): `bert/...`, `output_weights` [num_tags, hidden]
  and `output_bias` [num_tags]. Dropout (`hidden_dropout_prob`) is applied to the sequence output
  in training, as the classifier does to the pooled output. Call with a feature dict
  (`input_ids`, `input_mask`, `segment_ids`); returns float32 logits [batch, seq_length, num_tags].
  Tagging never reads the pooled output: the loop leaves its variables (no gradient) unchanged.
  """

  def __init__(self, config: modeling.BertConfig, num_tags: int, name: str = "bert_tagger",
               **kwargs):
    super().__init__(config, num_tags, "sequence_output", config.hidden_dropout_prob, name=name,
                     **kwargs)


def _token_losses(logits: tf.Tensor, label_ids: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
  """Per-position cross-entropy and the weights (1 on first sub-tokens, 0 elsewhere)."""
  weights = tf.cast(tf.not_equal(label_ids, IGNORE_LABEL), tf.float32)
  labels = tf.maximum(tf.cast(label_ids, tf.int32), 0)
  losses = tf.nn.sparse_softmax_cross_entropy_with_logits(labels=labels, logits=logits)
  return losses, weights


def predict_tag_ids(model: keras.Model, features) -> tf.Tensor:
  """The most likely tag id at every position [batch, seq_length]."""
  return tf.argmax(model(features, training=False), -1, output_type=tf.int32)


def features_dataset(features: Sequence[TaggingFeature]) -> tf.data.Dataset:
  """An unbatched dataset of feature dicts, in order, from features in memory."""
  return tf.data.Dataset.from_tensor_slices(features_to_arrays(features))


def record_features(seq_length: int) -> list[tfrecord_files.RecordFeature]:
  """A tagging record: the model inputs and one `label_ids` per token."""
  return tfrecord_files.id_features(seq_length) + [
      tfrecord_files.RecordFeature("label_ids", seq_length)]


def write_features_tfrecord(features: Iterable[TaggingFeature], path: str, seq_length: int) -> int:
  """Writes features of `seq_length` tokens as records of `record_features`; returns how many
  (the file appears under `path` only when complete)."""
  rows = ({name: getattr(feature, name) for name in tfrecord_files.ID_FEATURES + ("label_ids",)}
          for feature in features)
  return tfrecord_files.write_records(path, record_features(seq_length), rows)


def records_dataset(path: str, seq_length: int) -> tf.data.Dataset:
  """One pass over a features file of `write_features_tfrecord`, in order: int32 feature dicts."""
  return tfrecord_files.records_dataset(path, record_features(seq_length))


# ---------------------------------------------------------------------------------------------
# Export: raw text in, one tag per whitespace-separated word out, all inside the graph.
# ---------------------------------------------------------------------------------------------

class TaggerServing(export.ServingModule):
  """The export: the tagger, the in-graph tokenizer and the tag list.

  The text signature takes `text`, a [batch] string tensor, splits every text on whitespace,
  tokenizes each word on its own, splits long texts into windows with `window_word_ranges`'
  greedy rule (or `doc_stride`'s) and returns dense [batch, max_words] tensors: `words` and `tags`
  (padded with ""), `tag_ids` (padded with -1), and `num_words` [batch]. The same words give the
  same tags as `run_ner`'s prediction. `token_ids` returns `tag_ids` [batch, seq_length] (read
  them at each word's first sub-token), -1 where `input_mask` is 0. The model reads the windows
  (or id rows) of a request packed (`ServingModule.model_features`), its tags unpacked to each
  window's positions.
  """

  def __init__(self, model: BertTagger, encoder: "in_graph_tokenization.BertInputEncoder",
               tag_list: Sequence[str], doc_stride: Optional[int] = None):
    super().__init__(encoder, model.config)
    self.model = model
    self.tag_list = list(tag_list)
    self.doc_stride = doc_stride

  def ids_outputs(self, features):
    return {"tag_ids": tf.where(features["input_mask"] != 0, self._position_tag_ids(features), -1)}

  def _position_tag_ids(self, features: dict) -> tf.Tensor:
    """`predict_tag_ids` of padded id features [rows, T], on the rows as the module packs them."""
    return predict_tag_ids(self.model, self.model_features(features))

  def text_outputs(self, texts: dict) -> dict[str, tf.Tensor]:
    words = in_graph_tokenization.whitespace_split(texts["text"])
    word_pieces = self._clip_word_pieces(self.encoder.tokenize_words(words).values)
    if self.doc_stride is None:
      word_tag_ids = self._greedy_window_tags(words, word_pieces)
    else:
      word_tag_ids = self._stride_window_tags(words, word_pieces)
    tag_ids = words.with_flat_values(word_tag_ids)
    tags = words.with_flat_values(tf.gather(tf.constant(self.tag_list), word_tag_ids))
    return {"words": words.to_tensor(""), "tags": tags.to_tensor(""),
            "tag_ids": tag_ids.to_tensor(-1), "num_words": tf.cast(words.row_lengths(), tf.int32)}

  def _greedy_window_tags(self, words: tf.RaggedTensor,
                          word_pieces: tf.RaggedTensor) -> tf.Tensor:
    """Tag ids of the flat words, windows by `window_word_ranges`' rule."""
    counts = tf.cast(word_pieces.row_lengths(), tf.int32)
    is_first = tf.equal(tf.ragged.range(words.row_lengths()).flat_values, 0)
    window_ids, window_ends = self._greedy_windows(counts, is_first)
    num_windows = tf.reduce_max(tf.concat([[-1], window_ids], 0)) + 1
    window_pieces = tf.RaggedTensor.from_value_rowids(
        word_pieces, tf.cast(window_ids, tf.int64), nrows=tf.cast(num_windows, tf.int64))
    features = self.encoder.pack(window_pieces.merge_dims(1, 2))
    position_tag_ids = self._position_tag_ids(features)
    # A word's first piece sits after [CLS] and the pieces of the window's earlier words.
    first_positions = window_ends - counts + 1
    return tf.gather_nd(position_tag_ids, tf.stack([window_ids, first_positions], 1))

  def _stride_window_tags(self, words: tf.RaggedTensor,
                          word_pieces: tf.RaggedTensor) -> tf.Tensor:
    """Tag ids of the flat words, `stride_windows`' rule: windows of pieces every doc_stride,
    each word read at its first piece in the window where that piece has the most context."""
    max_pieces = self.encoder.max_seq_length - 2
    pieces = words.with_flat_values(word_pieces).merge_dims(1, 2)  # [B, (pieces)]
    num_pieces = pieces.row_lengths()
    starts = windowing.window_starts(num_pieces, max_pieces, self.doc_stride)  # [B, (windows)]
    rows = starts.value_rowids()
    lengths = tf.minimum(tf.constant(max_pieces, tf.int64),
                         tf.gather(num_pieces, rows) - starts.flat_values)
    begin = tf.gather(pieces.row_starts(), rows) + starts.flat_values
    features = self.encoder.pack(tf.gather(pieces.flat_values,
                                           tf.ragged.range(begin, begin + lengths)))
    position_tag_ids = self._position_tag_ids(features)
    # Each word's first piece (offset in its text) against every window of its text.
    word_rows = words.value_rowids()
    first_piece = (tf.math.cumsum(word_pieces.row_lengths(), exclusive=True) -
                   tf.gather(pieces.row_starts(), word_rows))
    window_start = tf.gather(starts, word_rows).to_tensor(-1)  # [words, max windows]
    window_length = tf.gather(starts.with_flat_values(lengths), word_rows).to_tensor(0)
    position = tf.expand_dims(first_piece, 1)
    # Padding windows (length 0) hold no position, so they score -1.
    score = windowing.context_score(position, window_start, window_length)
    # The first of equal scores. A column scoring below every window gives argmax a column to
    # return when a request has no rows (and so no windows); it is never a real word's best.
    best = tf.argmax(tf.pad(score, [[0, 0], [0, 1]], constant_values=-2), axis=1)
    window = tf.gather(starts.row_starts(), word_rows) + best
    offset = position[:, 0] - tf.gather_nd(window_start, tf.stack([tf.range(tf.size(best),
                                                                             dtype=tf.int64),
                                                                    best], 1))
    return tf.gather_nd(position_tag_ids, tf.stack([window, offset + 1], 1))

  def _clip_word_pieces(self, word_pieces: tf.RaggedTensor) -> tf.RaggedTensor:
    """As `tokenize_words`: a word without pieces gets [UNK]; at most max_seq_length-2 pieces."""
    max_pieces = self.encoder.max_seq_length - 2
    unk = tf.fill([word_pieces.nrows(), 1], tf.constant(self.encoder.unk_id, word_pieces.dtype))
    padded = tf.concat([word_pieces.to_tensor(self.encoder.unk_id), unk], axis=1)
    lengths = tf.clip_by_value(word_pieces.row_lengths(), 1, max_pieces)
    return tf.RaggedTensor.from_tensor(padded, lengths=lengths)

  def _greedy_windows(self, counts: tf.Tensor, is_first: tf.Tensor) -> tuple[tf.Tensor, tf.Tensor]:
    """Window id (numbered over the whole batch) and end offset in pieces of every word.

    `window_word_ranges`' rule over the flat words of the batch; `is_first` marks each text's first
    word, which always opens a window.
    """
    max_pieces = self.encoder.max_seq_length - 2

    def step(state, inputs):
      window, used = state
      count, first = inputs
      new_window = tf.logical_or(first, used + count > max_pieces)
      return (tf.where(new_window, window + 1, window),
              tf.where(new_window, count, used + count))

    windows, ends = tf.scan(step, (counts, is_first), initializer=(tf.constant(-1), tf.constant(0)))
    return windows, ends


@dataclasses.dataclass
class TaggingTask(fine_tuning.Task):
  """Token tagging (NER) on CoNLL files (run_ner): train, dev and test files in `data_dir`.

  The tag list is learned from the training file and saved as `output_dir/tag_list.txt`; a run
  without --do_train reads it from `tag_list_directory` (default output_dir; the model's
  directory where output_dir has none: `fine_tuning.output_names_directory`), or takes
  `tag_list`.
  """
  kind = "tagger"
  output_names_file = TAG_LIST_FILE
  default_eval_metric = "eval_f1"  # conlleval's overall F1

  bert_config: modeling.BertConfig
  tokenizer: tokenization.FullTokenizer
  data_dir: Optional[str]
  output_dir: str
  max_seq_length: int
  train_file: str = "train.txt"
  dev_file: str = "dev.txt"
  test_file: str = "test.txt"
  tag_list: Optional[Sequence[str]] = None
  tag_list_directory: Optional[str] = None
  bucket_by_length: bool = True  # length_buckets for train, eval and predict
  pack_sequences: bool = False  # packed rows in eval and predict (packing.py)
  group_by_length: bool = False  # training batches of one length bucket (length_buckets.batch)
  doc_stride: Optional[int] = None
  _feature_cache: dict = dataclasses.field(default_factory=dict, init=False, repr=False)
  _written_splits: set = dataclasses.field(default_factory=set, init=False, repr=False)

  def __post_init__(self):
    if self.doc_stride is not None and self.doc_stride <= 0:
      raise errors.FlagError("`doc_stride` must be positive, got %d" % self.doc_stride)

  def output_names(self) -> list[str]:
    return self.tags()

  def write_output_names(self) -> None:
    write_tag_list(self.tag_list, self.output_dir)

  def tags(self) -> list[str]:
    """The tag list: given, learned from the training file, or read from `tag_list_directory`."""
    if self.tag_list is None:
      self.tag_list = read_tag_list(self.tag_list_directory or self.output_dir)
    return list(self.tag_list)

  def _file_name(self, split: str) -> str:
    return {"train": self.train_file, "eval": self.dev_file, "test": self.test_file}[split]

  def _path(self, split: str) -> str:
    if not self.data_dir:
      raise errors.FlagError("`data_dir` is required for `do_train`, `do_eval` and `do_predict`")
    path = os.path.join(self.data_dir, self._file_name(split))
    if not os.path.exists(path):
      raise ConllFormatError("%s not found (`data_dir`=%s, file name flag %r)" %
                             (path, self.data_dir, self._file_name(split)))
    return path

  def _read(self, split: str) -> list[TaggedSentence]:
    return read_conll(self._path(split))

  def _features(self, sentences: Sequence[TaggedSentence]) -> list[TaggingFeature]:
    return convert_sentences_to_features(sentences, self.tags(), self.max_seq_length,
                                         self.tokenizer, self.doc_stride)

  def _split_features(self, split: str, sentences: Optional[list[TaggedSentence]] = None
                      ) -> tuple[list[TaggedSentence], list[TaggingFeature]]:
    """(sentences, features) of a split (its `sentences` if already read), read and tokenized
    once per task (evaluation during training tags the dev file often); the features stay in
    memory, for reassembling words' tags. A tag outside the tag list is an error here."""
    if split not in self._feature_cache:
      sentences = read_conll(self._path(split)) if sentences is None else sentences
      self._feature_cache[split] = sentences, self._features(sentences)
    return self._feature_cache[split]

  def _split_inputs(self, split: str, sentences: Optional[list[TaggedSentence]] = None
                    ) -> tuple[list[TaggedSentence], list[TaggingFeature], str]:
    """(sentences, features, features file) of a split: `_split_features` and its features
    file, `output_dir/<split>.tf_record`, which follows `feature_cache`'s rule as every task's
    cached features do."""
    sentences, features = self._split_features(split, sentences)
    record_path = os.path.join(self.output_dir, split + ".tf_record")
    if split not in self._written_splits:
      settings = dict(feature_cache.tokenizer_settings(self.tokenizer),
                      data_sha256=feature_cache.file_sha256(self._path(split)),
                      tag_list=self.tags(), max_seq_length=self.max_seq_length,
                      doc_stride=self.doc_stride)
      feature_cache.reuse_or_write(record_path, settings, lambda temporary: {
          "num_sentences": len(sentences),
          "num_windows": write_features_tfrecord(features, temporary, self.max_seq_length)})
      self._written_splits.add(split)
    return sentences, features, record_path

  def build_model(self) -> BertTagger:
    model = BertTagger(self.bert_config, len(self.tags()))
    model.build()
    return model

  def loss(self, model, features, training):
    """Mean cross-entropy over first sub-tokens, plus their tag accuracy."""
    logits = model(features, training=training)
    losses, weights = _token_losses(logits, features["label_ids"])
    correct = tf.cast(tf.equal(tf.argmax(logits, -1, output_type=tf.int32),
                               tf.cast(features["label_ids"], tf.int32)), tf.float32)
    return (distribution.replica_weighted_mean(losses, weights),
            {"word_accuracy": distribution.replica_weighted_mean(correct, weights)})

  def predict_outputs(self, model, features):
    """Tag ids at every position, and the summed loss and count of first sub-tokens."""
    logits = model(features, training=False)
    losses, weights = _token_losses(logits, features["label_ids"])
    return {"tag_ids": tf.argmax(logits, -1, output_type=tf.int32),
            "loss_sum": tf.reduce_sum(losses * weights, axis=-1),
            "loss_count": tf.reduce_sum(weights, axis=-1)}

  def train_data(self) -> fine_tuning.TrainData:
    sentences = self._read("train")
    self.tag_list = tag_list_from_sentences(sentences)
    task_files.check_label_list_can_be_written(os.path.join(self.output_dir, TAG_LIST_FILE),
                                               self.tag_list)  # Written when training starts.
    sentences, features, record_path = self._split_inputs("train", sentences)
    logging.info("Training on %d sentences (%d windows), %d tags", len(sentences), len(features),
                 len(self.tag_list))
    return fine_tuning.TrainData(
        fine_tuning.training_dataset_fn(records_dataset(record_path, self.max_seq_length),
                                        len(features), self.bucket_by_length,
                                        self.group_by_length),
        len(features), [record_path], unit="sentence windows")

  def check_inputs(self, do_train: bool, do_eval: bool, do_predict: bool) -> None:
    """The dev and test files read and converted to features as evaluation and prediction will
    (kept in memory for them; their features files are written when they are used, so a refusal
    writes nothing): a missing file, a bad line or a tag outside the tag list (`do_train`: the
    training file's) is an error before training."""
    if not (do_eval or do_predict):
      return
    if do_train:
      self.tag_list = tag_list_from_sentences(self._read("train"))
    for split, wanted in (("eval", do_eval), ("test", do_predict)):
      if wanted:
        self._split_features(split)

  def _tag_file(self, strategy, model, split: str, batch_size: int) -> tuple:
    """Predicts one CoNLL file; writes `<split>_predictions.txt` and `<split>_conlleval.txt`.
    Returns (the conlleval evaluation, the mean loss over first sub-tokens)."""
    sentences, features, record_path = self._split_inputs(split)
    logging.info("%s: %d sentences, %d windows", self._file_name(split), len(sentences),
                 len(features))
    if features:
      outputs = self.predict_dataset(strategy, model,
                                     records_dataset(record_path, self.max_seq_length),
                                     batch_size, [record_path])
      ids = words_tag_ids(features, outputs["tag_ids"], sentences)
      tag_list = self.tags()
      predicted = [[tag_list[i] for i in sentence_ids] for sentence_ids in ids]
      loss = float(outputs["loss_sum"].sum() / max(outputs["loss_count"].sum(), 1.0))
    else:
      predicted, loss = [[] for _ in sentences], float("nan")
    evaluation = conll_evaluate([s.tags for s in sentences], predicted)
    report = format_conlleval_report(evaluation)
    write_conll_predictions(os.path.join(self.output_dir, split + "_predictions.txt"),
                            sentences, predicted,
                            {os.path.join(self.output_dir, split + "_conlleval.txt"): report})
    logging.info("%s (conlleval):\n%s", self._file_name(split), report)
    return evaluation, loss

  def evaluate(self, strategy, model, batch_size: int) -> dict:
    """conlleval's precision/recall/F1 (overall and per type) and the loss, on the dev file."""
    evaluation, loss = self._tag_file(strategy, model, "eval", batch_size)
    return dict(evaluation_to_dict(evaluation), eval_loss=loss)

  def predict(self, strategy, model, batch_size: int) -> str:
    self._tag_file(strategy, model, "test", batch_size)
    return "tagged %s" % self.test_file

  def serving_module(self, model) -> TaggerServing:
    encoder = in_graph_tokenization.BertInputEncoder.for_tokenizer(self.tokenizer,
                                                                   self.max_seq_length)
    return TaggerServing(model, encoder, self.tags(), self.doc_stride)
