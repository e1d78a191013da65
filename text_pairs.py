# coding=utf-8
"""One text or a pair of texts as BERT's input: examples, features, their TFRecord cache.

The classifier (classifier.py) and multiple choice (multiple_choice.py, one pair per ending) both
turn `InputExample`s into the original run_classifier's features (`convert_single_example`, with
its names: `input_ids`, `input_mask`, `segment_ids`, `label_ids`, `is_real_example`), write them
once to a TFRecord cache in output_dir (`cached_features_file`, rebuilt when the settings that
made it change) and read them back (`features_dataset`); both write the original's
test_results.tsv (`write_test_results`). A text longer than max_seq_length can be cut into
overlapping windows (`window_inputs`, `doc_stride`), each window a feature of its example.
"""

import dataclasses
import hashlib
import json
from typing import Optional, Sequence

from absl import logging
import numpy as np
import tensorflow as tf

import atomic_files
import distribution
import errors
import feature_cache
import progress_log
import tfrecord_files
import tokenization
import windowing


@dataclasses.dataclass
class InputExample:
  """A single training/test example: one text (or a pair) and its label (None when unlabeled)."""
  guid: str
  text_a: str
  text_b: Optional[str] = None
  label: Optional[str] = None


@dataclasses.dataclass
class InputFeatures:
  """The model inputs of one example."""
  input_ids: list[int]
  input_mask: list[int]
  segment_ids: list[int]
  label_id: float | list[int]  # A class index, the score (regression), or 0/1 per label.
  is_real_example: bool = True
  example_index: Optional[int] = None  # The example a window belongs to (with --doc_stride).


def check_max_seq_length(max_seq_length: int, is_pair: bool) -> None:
  """Raises ValueError unless --max_seq_length leaves room for at least one token of each text.

  `[CLS] a [SEP]` needs 3 positions, `[CLS] a [SEP] b [SEP]` 5; below that every example would be
  truncated to its special tokens and the model would learn nothing.
  """
  minimum = 5 if is_pair else 3
  if max_seq_length < minimum:
    raise errors.FlagError("`max_seq_length`=%d is too short for a %s task: at least %d, for %s"
                           % (max_seq_length, "sentence-pair" if is_pair else "single-sentence",
                              minimum, "[CLS] a [SEP] b [SEP]" if is_pair else "[CLS] a [SEP]"))


def check_model_takes_pairs(type_vocab_size: int, is_pair: bool) -> None:
  """Raises FlagError when a sentence-pair task's second text would get a segment id (1) that the
  model has no embedding for: before, a config with `type_vocab_size` 1 passed every check and
  the first training step failed in an embedding lookup that named neither the config nor the
  field."""
  if is_pair and type_vocab_size < 2:
    raise errors.FlagError("`bert_config_file` has type_vocab_size %d, but a sentence-pair task "
                           "gives its second text segment id 1: use the model's own config "
                           "(BERT's have type_vocab_size 2)" % type_vocab_size)


def convert_single_example(ex_index: int, example, label_list: Sequence[str], max_seq_length: int,
                           tokenizer, is_regression: bool = False,
                           label_delimiter: Optional[str] = None) -> InputFeatures:
  """Tokenizes one example into `[CLS] a [SEP] (b [SEP])` features, truncating longest-first.

  Empty texts are fine (they contribute no tokens). Batches are padded for devices by
  `evaluation.evaluate`/`evaluation.predict`, so no padding examples are written.
  With `label_delimiter` (multi-label) the label is 0/1 per entry of `label_list`.
  """
  return convert_example_windows(ex_index, example, label_list, max_seq_length, tokenizer,
                                 is_regression, label_delimiter)[0]


def convert_example_windows(ex_index: int, example, label_list: Sequence[str],
                            max_seq_length: int, tokenizer, is_regression: bool = False,
                            label_delimiter: Optional[str] = None,
                            doc_stride: Optional[int] = None) -> list[InputFeatures]:
  """The features of one example: one, truncated, or with `doc_stride` one per window of
  `window_inputs`, each with the example's label and `example_index=ex_index`."""
  if doc_stride is None:
    windows = [tokenizer.encode(example.text_a, example.text_b, max_seq_length)]
  else:
    windows = window_inputs(tokenizer, example.text_a, example.text_b, max_seq_length, doc_stride)
  if is_regression:
    label_id = float(example.label)
  elif label_delimiter is not None:
    names = set(part.strip() for part in example.label.split(label_delimiter))
    label_id = [int(label in names) for label in label_list]
  else:
    label_id = label_list.index(example.label)
  if ex_index < 3:
    input_ids, input_mask, _ = windows[0]
    logging.info("*** Example %s ***\ntokens: %s\ninput_ids: %s\nlabel: %s (id = %s)%s",
                 example.guid,
                 " ".join(tokenizer.convert_ids_to_tokens(input_ids[:sum(input_mask)])),
                 " ".join(map(str, input_ids)), example.label, label_id,
                 "" if doc_stride is None else "\nwindows: %d" % len(windows))
  example_index = None if doc_stride is None else ex_index
  return [InputFeatures(*window, label_id, example_index=example_index) for window in windows]


def window_inputs(tokenizer, text_a: str, text_b: Optional[str], max_seq_length: int,
                  doc_stride: int) -> list[tuple[list[int], list[int], list[int]]]:
  """`tokenizer.encode` for a text longer than one input: one (input_ids, input_mask,
  segment_ids) per window over text_a's tokens (`windowing.doc_spans_for`, a window starting
  every `doc_stride` tokens).

  text_b (for pairs) is in every window, cut as `truncate_seq_pair` cuts the pair, and text_a's
  windows take the rest of the room. So the first window is exactly what the original's
  truncation gives, and a pair that fits is one window equal to it.
  """
  if doc_stride <= 0:
    raise errors.FlagError("`doc_stride` must be positive, got %d" % doc_stride)
  ids_a = tokenizer.tokenize_to_ids(text_a)
  ids_b = None if text_b is None else tokenizer.tokenize_to_ids(text_b)
  budget = max_seq_length - 2
  if ids_b is not None:
    budget -= 1
    ids_b = list(ids_b)
    tokenization.truncate_seq_pair(list(ids_a), ids_b, budget)
  window_length = budget - len(ids_b or ())
  spans = (windowing.doc_spans_for(len(ids_a), window_length, doc_stride) or
           [windowing.DocSpan(0, 0)])
  cls_id = tokenizer.special_token_id(tokenization.CLS_TOKEN)
  sep_id = tokenizer.special_token_id(tokenization.SEP_TOKEN)
  return [tokenization.build_inputs(list(ids_a[span.start:span.start + span.length]), ids_b,
                                    max_seq_length, cls_id, sep_id) for span in spans]


def record_features(seq_length: int, is_regression: bool = False, num_multi_labels: int = 0,
                    windowed: bool = False) -> list[tfrecord_files.RecordFeature]:
  """The original's record: input_ids, input_mask, segment_ids, label_ids (a float score for
  regression, one 0/1 per label for `num_multi_labels` labels), is_real_example; `windowed`
  records (`doc_stride`) also hold their `example_index`."""
  features = tfrecord_files.id_features(seq_length) + [
      tfrecord_files.RecordFeature("label_ids", num_multi_labels or None,
                                   tf.float32 if is_regression else tf.int64),
      tfrecord_files.RecordFeature("is_real_example")]
  if windowed:
    features.append(tfrecord_files.RecordFeature("example_index"))
  return features


def file_based_convert_examples_to_features(examples: Sequence, label_list: Sequence[str],
                                            max_seq_length: int, tokenizer, output_file: str,
                                            is_regression: bool = False,
                                            label_delimiter: Optional[str] = None,
                                            doc_stride: Optional[int] = None) -> None:
  """Tokenizes `examples` into a TFRecord file of `record_features` (one record per example, or
  per window with `doc_stride`), logging progress (rate and ETA)."""
  progress = progress_log.Progress("Writing %s" % output_file, len(examples), "examples")

  def rows():
    for index, example in enumerate(examples):
      for features in convert_example_windows(index, example, label_list, max_seq_length,
                                              tokenizer, is_regression, label_delimiter,
                                              doc_stride):
        yield {"input_ids": features.input_ids, "input_mask": features.input_mask,
               "segment_ids": features.segment_ids, "label_ids": features.label_id,
               "is_real_example": features.is_real_example,
               "example_index": features.example_index}
      progress.update(index + 1)

  num_multi_labels = len(label_list) if label_delimiter is not None else 0
  tfrecord_files.write_records(
      output_file, record_features(max_seq_length, is_regression, num_multi_labels,
                                   windowed=doc_stride is not None), rows())
  progress.finish()


def feature_settings(examples: Sequence, label_list: Sequence[str], max_seq_length: int,
                     tokenizer, is_regression: bool, label_delimiter: Optional[str] = None,
                     doc_stride: Optional[int] = None) -> dict:
  """Everything the content of a features file depends on, to detect a stale cache.

  The examples and the vocab enter as digests, so a changed data file, column flag, vocab or casing
  invalidates the cache as surely as a changed max_seq_length.
  """
  examples_digest = hashlib.sha256()
  for example in examples:
    fields = (example.text_a, example.text_b, example.label)
    examples_digest.update(json.dumps(fields).encode("utf-8"))
  settings = dict(feature_cache.tokenizer_settings(tokenizer), **{
      "max_seq_length": max_seq_length,
      "label_list": list(label_list),
      "is_regression": is_regression,
      "num_examples": len(examples),
      "examples_sha256": examples_digest.hexdigest(),
  })
  # Only when set, so that the caches of runs without these options stay valid.
  for name, value in (("label_delimiter", label_delimiter), ("doc_stride", doc_stride)):
    if value is not None:
      settings[name] = value
  return settings


def cached_features_file(examples: Sequence, label_list: Sequence[str], max_seq_length: int,
                         tokenizer, output_file: str, is_regression: bool = False,
                         label_delimiter: Optional[str] = None,
                         doc_stride: Optional[int] = None) -> bool:
  """Writes the examples' TFRecord file unless `output_file` already holds exactly these features.

  `feature_cache`'s rule, with `feature_settings` (examples and vocab by content); the note is
  `<output_file>.json`. Returns True when the cache was reused.
  """

  def write(path: str) -> dict:
    file_based_convert_examples_to_features(examples, label_list, max_seq_length, tokenizer, path,
                                            is_regression, label_delimiter, doc_stride)
    return {"num_examples": len(examples)}

  settings = feature_settings(examples, label_list, max_seq_length, tokenizer, is_regression,
                              label_delimiter, doc_stride)
  return feature_cache.reuse_or_write(output_file, settings, write)[1]


def features_dataset(input_file: str, seq_length: int, is_regression: bool = False,
                     num_multi_labels: int = 0, windowed: bool = False) -> tf.data.Dataset:
  """The unbatched feature dicts of a TFRecord file, in file order (int32 ids): the
  `record_features` of these settings."""
  return tfrecord_files.records_dataset(
      input_file, record_features(seq_length, is_regression, num_multi_labels, windowed))


def write_test_results(path: str, probabilities: np.ndarray) -> None:
  """Writes test_results.tsv as the original: a tab-separated line of probabilities per example.
  Only the chief writes."""
  if not distribution.is_chief():
    return
  atomic_files.write_text(path, "".join("\t".join(repr(float(p)) for p in row) + "\n"
                                   for row in probabilities))
  logging.info("Wrote %d predictions to %s", len(probabilities), path)
