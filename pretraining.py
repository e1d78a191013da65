# coding=utf-8
"""Masked LM + next sentence pretraining: input pipeline, loss and metrics of the original.

The records are those create_pretraining_data.py writes (feature names in DESIGN.md). The loss is
the original's: masked-LM cross-entropy weighted by `masked_lm_weights` and normalized by the sum
of the weights (+1e-5), plus the mean next-sentence cross-entropy. The training loop, checkpoints
and strategies come from training_loop.py and distribution.py; run_pretraining.py maps the
original's flags onto this. Records are checked against the flags before training: the first
record of every input file, and every later one as it is decoded (`RecordLengthError`).
"""

import concurrent.futures
import contextlib
import dataclasses
import os
import re
from typing import Callable, Iterator, Mapping, Optional

from absl import logging
from google.protobuf import message as protobuf_message
import keras
import tensorflow as tf

import checkpoints
import distribution
import errors
import evaluation
import file_patterns
import heads
import modeling
import pretraining_instances
import tfrecord_files
import tokenization
import training_loop

# Training shuffle buffer after interleaving files (records; the original used 100).
SHUFFLE_BUFFER_SIZE = 1000
# The `task` a pretraining run records (fine_tuning.Task.kind of the fine-tuning tasks).
TASK_KIND = "pretraining"
# Records decoded per call when reading evaluation data (decoding is vectorized).
EVAL_DECODE_BATCH = 256
# Input files whose first record is read at once when checking their lengths (remote files).
_PARALLEL_READS = 16


class RecordLengthError(errors.InputError):
  """Pretraining records whose features have other lengths than the flags say (the records were
  written with other --max_seq_length or --max_predictions_per_seq), or other types, or that are
  not examples at all."""


def expand_input_files(input_file: str) -> list:
  """The TFRecord files of `--input_file`, by the one rule of `file_patterns.expand`."""
  return file_patterns.expand(input_file, "`input_file`")


def _feature_lengths(max_seq_length: int, max_predictions_per_seq: int) -> dict:
  """Feature name -> (values per record, flag that sets it, dtype in the record)."""
  seq = (max_seq_length, "max_seq_length", tf.int64)
  predictions = (max_predictions_per_seq, "max_predictions_per_seq", tf.int64)
  return {
      "input_ids": seq,
      "input_mask": seq,
      "segment_ids": seq,
      "masked_lm_positions": predictions,
      "masked_lm_ids": predictions,
      "masked_lm_weights": (max_predictions_per_seq, "max_predictions_per_seq", tf.float32),
      "next_sentence_labels": (1, None, tf.int64),
  }


def _expected(name: str, length: int, flag: Optional[str]) -> str:
  """The end of the message for a record whose feature `name` has other than `length` values."""
  return " values for feature %s but %s: pass the value the data was written with" % (
      name, "`%s`=%d expects %d" % (flag, length, length) if flag else "%d is expected" % length)


def decode_records(filenames: tf.Tensor, serialized: tf.Tensor, max_seq_length: int,
                   max_predictions_per_seq: int) -> dict:
  """Parses a batch of serialized tf.train.Examples into dense features (int64 -> int32).

  Each feature must have exactly the number of values the flags imply; otherwise the op fails
  with a message naming the file, the feature, its length and the flag to fix.
  """
  lengths = _feature_lengths(max_seq_length, max_predictions_per_seq)
  parsed = tf.io.parse_example(
      serialized, {name: tf.io.VarLenFeature(dtype) for name, (_, _, dtype) in lengths.items()})
  batch_size = tf.shape(serialized)[0]
  features = {}
  for name, (length, flag, _) in lengths.items():
    sparse = parsed[name]
    counts = tf.math.bincount(tf.cast(sparse.indices[:, 0], tf.int32), minlength=batch_size,
                              maxlength=batch_size)
    bad = tf.argmax(tf.cast(tf.not_equal(counts, length), tf.int32), output_type=tf.int32)
    message = tf.strings.join(["a record in ", filenames[bad], " has ",
                               tf.strings.as_string(counts[bad]), _expected(name, length, flag)])
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(counts, length)), [message])
    with tf.control_dependencies([check]):
      values = tf.reshape(sparse.values, [-1, length])
    features[name] = tf.cast(values, tf.int32) if values.dtype == tf.int64 else values
  return features


def first_record_features(input_file: str) -> Optional[dict]:
  """Feature name -> (kind of list, number of values) in the first record of a TFRecord file; None
  when the file has no readable record (empty, or its first record is corrupt: the input pipeline
  reports or skips that record)."""
  try:
    serialized = [record.numpy() for record in tf.data.TFRecordDataset(input_file).take(1)]
  except tf.errors.DataLossError:
    return None
  except tf.errors.OpError as error:
    raise tfrecord_files.UnreadableRecordFileError(errors.named(input_file, error)) from None
  if not serialized:
    return None
  try:
    example = tf.train.Example.FromString(serialized[0])
  except protobuf_message.DecodeError as error:
    raise RecordLengthError("%s: its first record is not a tf.train.Example (%s)" %
                            (input_file, error)) from None
  return {name: _kind_and_count(feature) for name, feature in example.features.feature.items()}


def _kind_and_count(feature: tf.train.Feature) -> tuple:
  """(`int64_list`, `float_list` or `bytes_list`, number of values); (None, 0) when empty."""
  kind = feature.WhichOneof("kind")
  return (kind, len(getattr(feature, kind).value)) if kind else (None, 0)


def check_first_record(input_file: str, max_seq_length: int, max_predictions_per_seq: int) -> None:
  """Checks the first record of a file against the flags; a RecordLengthError names the file,
  the feature, its length and the flag's (an empty file is one too)."""
  features = first_record_features(input_file)
  if features is None:
    raise RecordLengthError("%s holds no complete TFRecord records" % input_file)
  _check_lengths(input_file, features, max_seq_length, max_predictions_per_seq)


def _check_lengths(input_file: str, features: dict, max_seq_length: int,
                   max_predictions_per_seq: int, agreeing_file: Optional[str] = None) -> None:
  """A RecordLengthError for the first feature of a record (`first_record_features`) whose kind
  or length the flags disagree with; the message names `agreeing_file` (another file of the
  glob, whose records fit) when given."""
  for name, (length, flag, dtype) in _feature_lengths(max_seq_length,
                                                      max_predictions_per_seq).items():
    if name not in features:
      raise RecordLengthError("a record in %s has no feature %s (it holds %s): it is not a "
                              "pretraining record" % (input_file, name,
                                                      ", ".join(sorted(features)) or "none"))
    kind, count = features[name]
    wanted = "float_list" if dtype == tf.float32 else "int64_list"
    if count and kind != wanted:
      raise RecordLengthError("a record in %s stores feature %s as a %s, not a %s: it is not a "
                              "pretraining record" % (input_file, name, kind, wanted))
    if count != length:
      message = "a record in %s has %d%s" % (input_file, count, _expected(name, length, flag))
      if agreeing_file:
        message += " (%s, also in `input_file`, has %d)" % (agreeing_file, length)
      raise RecordLengthError(message)


def _with_filename(filename: tf.Tensor, record_limit: tf.Tensor) -> tf.data.Dataset:
  """(filename, record) pairs of the file's first `record_limit` records (-1: all)."""
  records = tf.data.TFRecordDataset(filename).take(record_limit)
  return records.map(lambda record: (filename, record))


def _files_dataset(input_files: list, record_limits: Optional[list]) -> tf.data.Dataset:
  """(filename, records to read) pairs; `record_limits` from `tfrecord_files.readable_record_counts`
  (None: read every file whole)."""
  limits = [-1] * len(input_files) if record_limits is None else record_limits
  return tf.data.Dataset.from_tensor_slices(
      (tf.constant(input_files), tf.constant(limits, tf.int64)))


def train_dataset(input_files: list, batch_size: int, seed: int, max_seq_length: int,
                  max_predictions_per_seq: int, num_cpu_threads: int = 4,
                  record_limits: Optional[list] = None) -> tf.data.Dataset:
  """Endless shuffled global batches: files shuffled and read interleaved in parallel, records
  shuffled, batches of exactly `batch_size` (deterministic given `seed`, on every worker)."""
  files = _files_dataset(input_files, record_limits)
  files = files.shuffle(len(input_files), seed=seed, reshuffle_each_iteration=True).repeat()
  records = files.interleave(_with_filename, cycle_length=min(num_cpu_threads, len(input_files)),
                             num_parallel_calls=tf.data.AUTOTUNE, deterministic=True)
  records = records.shuffle(SHUFFLE_BUFFER_SIZE, seed=seed)
  batches = records.batch(batch_size, drop_remainder=True)
  batches = batches.map(
      lambda names, serialized: decode_records(names, serialized, max_seq_length,
                                               max_predictions_per_seq),
      num_parallel_calls=tf.data.AUTOTUNE)
  return batches.prefetch(tf.data.AUTOTUNE)


def eval_dataset(input_files: list, max_seq_length: int, max_predictions_per_seq: int,
                 record_limits: Optional[list] = None) -> tf.data.Dataset:
  """Unbatched records of the files in their given order (for `evaluation.evaluate`)."""
  files = _files_dataset(input_files, record_limits)
  records = files.flat_map(_with_filename).batch(EVAL_DECODE_BATCH)
  return records.map(lambda names, serialized: decode_records(
      names, serialized, max_seq_length, max_predictions_per_seq)).unbatch()


def build_model(bert_config: modeling.BertConfig) -> keras.Model:
  """The pretraining model with all its variables (`bert/...`, `cls/...`)."""
  model = heads.BertPretrainingModel(bert_config)
  model.build()
  return model


def _per_example_terms(model: keras.Model, features: Mapping[str, tf.Tensor],
                       training: bool) -> dict:
  """Per-prediction and per-example losses and correctness, as the original computed them."""
  outputs = model(features, training=training)
  mlm_log_probs = tf.nn.log_softmax(tf.cast(outputs["masked_lm_logits"], tf.float32), axis=-1)
  mlm_ids = features["masked_lm_ids"]
  nsp_log_probs = tf.nn.log_softmax(tf.cast(outputs["next_sentence_logits"], tf.float32), axis=-1)
  nsp_labels = tf.reshape(features["next_sentence_labels"], [-1])
  return {
      "mlm_loss": -tf.gather(mlm_log_probs, mlm_ids, batch_dims=2),
      "mlm_correct": tf.cast(tf.equal(tf.argmax(mlm_log_probs, -1, output_type=tf.int32),
                                      mlm_ids), tf.float32),
      "mlm_weights": tf.cast(features["masked_lm_weights"], tf.float32),
      "nsp_loss": -tf.gather(nsp_log_probs, nsp_labels, batch_dims=1),
      "nsp_correct": tf.cast(tf.equal(tf.argmax(nsp_log_probs, -1, output_type=tf.int32),
                                      nsp_labels), tf.float32),
  }


def _batch_losses(terms: dict, example_weights: Optional[tf.Tensor] = None) -> tuple:
  """This replica's shares of the global batch's masked-LM and next-sentence losses."""
  masked_lm_loss = distribution.replica_weighted_mean(terms["mlm_loss"], terms["mlm_weights"],
                                                  epsilon=1e-5)
  next_sentence_loss = distribution.replica_weighted_mean(terms["nsp_loss"], example_weights)
  return masked_lm_loss, next_sentence_loss


def loss_fn(model: keras.Model, features: Mapping[str, tf.Tensor], training: bool) -> tuple:
  """The original's total loss (masked LM + next sentence) and its parts, as replica shares."""
  terms = _per_example_terms(model, features, training)
  masked_lm_loss, next_sentence_loss = _batch_losses(terms)
  return masked_lm_loss + next_sentence_loss, {
      "masked_lm_loss": masked_lm_loss,
      "next_sentence_loss": next_sentence_loss,
      "masked_lm_accuracy": distribution.replica_weighted_mean(terms["mlm_correct"],
                                                           terms["mlm_weights"]),
      "next_sentence_accuracy": distribution.replica_weighted_mean(terms["nsp_correct"]),
  }


def metric_fn(model: keras.Model, features: Mapping[str, tf.Tensor]) -> dict:
  """The original's eval metrics as (numerator, denominator) sums for `evaluation.evaluate`.

  masked_lm_* are weighted by `masked_lm_weights` over all predictions, next_sentence_* averaged
  over examples, and `loss` is the mean over batches of each batch's total loss (the Estimator's).
  """
  terms = _per_example_terms(model, features, False)
  real = tf.cast(features[training_loop.REAL_EXAMPLE_KEY], tf.float32)
  weights = terms["mlm_weights"] * real[:, tf.newaxis]

  def weighted_sum(values, value_weights):
    return tf.reduce_sum(values * value_weights), tf.reduce_sum(value_weights)

  masked_lm_loss, next_sentence_loss = _batch_losses(dict(terms, mlm_weights=weights), real)
  return {
      "loss": (masked_lm_loss + next_sentence_loss, distribution.replica_batch_share()),
      "masked_lm_accuracy": weighted_sum(terms["mlm_correct"], weights),
      "masked_lm_loss": weighted_sum(terms["mlm_loss"], weights),
      "next_sentence_accuracy": weighted_sum(terms["nsp_correct"], real),
      "next_sentence_loss": weighted_sum(terms["nsp_loss"], real),
  }


SKIP_HINT = "pass `skip_corrupt_records` to read each such file only up to its corrupt record"


def _record_limits(input_files: list, skip_corrupt_records: bool) -> tuple[Optional[list], str]:
  """With `skip_corrupt_records`, how many records of each file to read (files scanned once) and
  a line saying what is skipped, else (None, "")."""
  if not skip_corrupt_records:
    return None, ""
  limits, corrupt = tfrecord_files.readable_record_counts(input_files)
  summary = "`skip_corrupt_records`: " + tfrecord_files.skipped_summary(corrupt)
  logging.info("%s", summary)
  return limits, summary


def run_training(strategy: tf.distribute.Strategy, bert_config: modeling.BertConfig,
                 input_files: list, config: training_loop.TrainConfig, max_seq_length: int,
                 max_predictions_per_seq: int, skip_corrupt_records: bool = False,
                 masking: Optional["DynamicMasking"] = None,
                 model_fn: Optional[Callable[[], keras.Model]] = None
                 ) -> training_loop.TrainResult:
  """Pretrains (or resumes) on the TFRecord files until `config.num_train_steps`.

  A corrupt record is a `tfrecord_files.CorruptRecordError` naming its file, unless
  `skip_corrupt_records`: then each file is read only up to its first corrupt record; a record of
  other lengths than the flags is a `RecordLengthError` naming its file. With
  `masking`, every batch read gets new masks (seeded by the pipeline seed). `model_fn` builds the
  model (default `build_model(bert_config)`), e.g. one with a frozen encoder.
  """
  if config.pack_sequences:  # The masked positions are positions in a padded row.
    raise ValueError("pretraining does not train on packed rows (`pack_sequences`)")
  config = dataclasses.replace(config, model_settings=dict(config.model_settings,
                                                           task=TASK_KIND))
  check_input_records(bert_config, input_files, max_seq_length, max_predictions_per_seq,
                      skip_corrupt_records)
  if masking is not None:
    masking.check_vocab_size(bert_config.vocab_size)
  record_limits, skipped = _record_limits(input_files, skip_corrupt_records)

  def dataset_fn(batch_size: int, seed: int) -> tf.data.Dataset:
    batches = train_dataset(input_files, batch_size, seed, max_seq_length,
                            max_predictions_per_seq, record_limits=record_limits)
    return batches if masking is None else masking.apply(batches, seed)

  with tfrecord_files.naming_corrupt_records(input_files, SKIP_HINT), naming_length_mismatches():
    result = training_loop.train(strategy, model_fn or (lambda: build_model(bert_config)),
                                 loss_fn, dataset_fn, config)
  if skipped:
    logging.info("%s", skipped)  # Again at the end, where a user looks.
  return result


def phase2_config(config: training_loop.TrainConfig, phase2_steps: int, learning_rate: float,
                  num_warmup_steps: int, train_batch_size: int) -> training_loop.TrainConfig:
  """The training config of phase 2 in the same job (the paper's recipe: most steps at length
  128, then a few at 512).

  Phase 2 continues phase 1's `output_dir`: model, optimizer slots and `global_step` come from
  phase 1's last checkpoint (step `config.num_train_steps`) and it trains until that plus
  `phase2_steps`, with its own peak `learning_rate`, warmup and linear decay counted from its
  first step (phase 1's kind of schedule, `lr_schedule`), and its own batch size. A resumed job
  finds phase 1 finished and resumes phase 2.
  """
  if phase2_steps <= 0:
    raise errors.FlagError("`phase2_steps` must be positive with `phase2_input_file`, got %r" %
                           phase2_steps)
  return dataclasses.replace(
      config, num_train_steps=config.num_train_steps + phase2_steps,
      num_warmup_steps=num_warmup_steps, learning_rate=learning_rate,
      train_batch_size=train_batch_size, phase_start_step=config.num_train_steps)


def run_evaluation(strategy: tf.distribute.Strategy, bert_config: modeling.BertConfig,
                   input_files: list, output_dir: str, init_checkpoint: Optional[str],
                   eval_batch_size: int, max_eval_steps: int, max_seq_length: int,
                   max_predictions_per_seq: int, model: Optional[keras.Model] = None,
                   global_step: Optional[int] = None, skip_corrupt_records: bool = False,
                   allow_partial_init_checkpoint: bool = False) -> dict:
  """Evaluates the latest checkpoint of `output_dir` (or `init_checkpoint`, or a given model)
  over at most `max_eval_steps` full batches and writes `output_dir/eval_results.txt`.
  Corrupt records: as `run_training`."""
  check_input_records(bert_config, input_files, max_seq_length, max_predictions_per_seq,
                      skip_corrupt_records)
  if model is None:
    model, global_step, _ = checkpoints.restore_model(
        strategy, lambda: build_model(bert_config), output_dir, init_checkpoint,
        allow_partial_init_checkpoint)
  record_limits, skipped = _record_limits(input_files, skip_corrupt_records)
  with tfrecord_files.naming_corrupt_records(input_files, SKIP_HINT), naming_length_mismatches():
    results = evaluation.evaluate(
        strategy, model, metric_fn,
        eval_dataset(input_files, max_seq_length, max_predictions_per_seq, record_limits),
        eval_batch_size, max_steps=max_eval_steps, drop_remainder=True)
  if skipped:
    logging.info("%s", skipped)
  results["global_step"] = int(global_step or 0)
  training_loop.write_eval_results(os.path.join(output_dir, "eval_results.txt"), results)
  return results


def check_input_records(bert_config: modeling.BertConfig, input_files: list, max_seq_length: int,
                        max_predictions_per_seq: int, skip_corrupt_records: bool = False) -> None:
  """A ValueError now if the model cannot take `max_seq_length`, a RecordLengthError if the
  first record of any file has other lengths than the flags say, naming the file, both lengths
  and a file that fits (files of a glob written with other lengths are found here, not deep in
  tf.data; a later record that disagrees within a file fails when it is read, named as well),
  a RecordVocabError for a token or segment id outside the model's (`check_record_ids`), and unless
  `skip_corrupt_records` a CorruptRecordError for a file whose first record cannot be read (not a
  TFRecord file: a README a glob matched), which training would otherwise meet only when it
  reaches it."""
  bert_config.check_max_seq_length(max_seq_length)
  logging.info("Input files: %d (%s%s)", len(input_files), ", ".join(input_files[:3]),
               ", ..." if len(input_files) > 3 else "")
  with concurrent.futures.ThreadPoolExecutor(_PARALLEL_READS) as pool:
    features = list(pool.map(first_record_features, input_files))
  for path, found in zip(input_files, features):
    if found is None and not skip_corrupt_records and tf.io.gfile.stat(path).length:
      raise tfrecord_files.CorruptRecordError(
          "%s: its first record is corrupt, or it is not a TFRecord file (`input_file` matched "
          "it); pass `skip_corrupt_records` to read each file only up to a corrupt record" % path)
  readable = [(path, found) for path, found in zip(input_files, features) if found is not None]
  if not readable:
    raise RecordLengthError("`input_file`: none of its %d files holds a complete TFRecord record "
                            "(first: %s)" % (len(input_files), input_files[0]))
  agreeing = None
  for path, found in readable:
    _check_lengths(path, found, max_seq_length, max_predictions_per_seq, agreeing)
    agreeing = agreeing or path
  check_record_ids(input_files, bert_config.vocab_size, bert_config.type_vocab_size)


@contextlib.contextmanager
def naming_length_mismatches() -> Iterator[None]:
  """Re-raises the failed length check of `decode_records` (a later record of a file written with
  other lengths) as a RecordLengthError with its message, instead of TensorFlow's traceback."""
  try:
    yield
  except tf.errors.InvalidArgumentError as error:
    mismatch = re.search(r"a record in .* was written with", error.message)
    if mismatch is None:
      raise
    raise RecordLengthError(mismatch.group(0)) from None


# --------------------------------------------------------------------------------------------------
# Dynamic masking (issue 20): new masked positions each time a record is read.

# The records `check_records_vocab` reads, the share of their masked positions that must
# hold [MASK], and how many masked positions it takes to judge that share (below it, a few
# positions could miss [MASK] by chance: 20 positions at 80% fall below half once in ~1800).
RECORDS_CHECKED = 256
MIN_MASK_SHARE = 0.5
MIN_MASKED_POSITIONS = 20


class RecordVocabError(errors.InputError):
  """Pretraining records made with another vocab than --vocab_file (their special ids differ)."""


def _first_examples(input_files: list, limit: int) -> Iterator[tuple]:
  """(file, record number in the file from 1, tf.train.Example) of the first `limit` records of
  the files in order; a file stops at a corrupt record or one that is not an Example (the input
  pipeline names or skips it)."""
  count = 0
  for path in input_files:
    try:
      for number, record in enumerate(tf.data.TFRecordDataset(path), 1):
        if count == limit:
          return
        count += 1
        yield path, number, tf.train.Example.FromString(record.numpy())
    except (tf.errors.DataLossError, protobuf_message.DecodeError):
      continue


def check_record_ids(input_files: list, vocab_size: int, type_vocab_size: int) -> None:
  """A RecordVocabError when one of the first RECORDS_CHECKED records holds a token id (in
  `input_ids` or `masked_lm_ids`) or a segment id (`segment_ids`) that the model's embeddings do
  not have: records made with a larger vocab, or pairs for a config of one segment, found before
  training rather than as a failed gather in its first step."""
  limits = {"input_ids": ("vocab_size", vocab_size), "masked_lm_ids": ("vocab_size", vocab_size),
            "segment_ids": ("type_vocab_size", type_vocab_size)}
  for path, number, example in _first_examples(input_files, RECORDS_CHECKED):
    for name, (field, limit) in limits.items():
      outside = [i for i in example.features.feature[name].int64_list.value
                 if not 0 <= i < limit]
      if outside:
        raise RecordVocabError(
            "%s: record %d holds %s id %d, outside the model's %s %d (`bert_config_file`): the "
            "records were made with another vocab or for another model" % (
                path, number, name, outside[0], field, limit))


def check_records_vocab(input_files: list, vocab: pretraining_instances.VocabIds,
                        vocab_description: str) -> None:
  """A RecordVocabError unless the records were made with `vocab` (`vocab_description` names its
  setting and file, e.g. "`vocab_file` vocab.txt"), judged on their first RECORDS_CHECKED
  records: each opens with its [CLS] id, and at least MIN_MASK_SHARE of their masked positions
  hold its [MASK] id (the data tool writes [MASK] at 80%).

  Records of another vocab train without a word of complaint: the model learns ids that mean
  other tokens in the vocab the run records, re-masks with, and exports for fill-mask. This is
  the moment to say so, before any training.
  """
  checked, masked, holding_mask, paths = 0, 0, 0, []
  for path, number, example in _first_examples(input_files, RECORDS_CHECKED):
    paths += [] if path in paths else [path]
    features = example.features.feature
    input_ids = features["input_ids"].int64_list.value
    if not input_ids or input_ids[0] != vocab.cls_id:
      raise RecordVocabError(
          "%s: record %d starts with id %s, not the [CLS] id %d of %s: the records were made "
          "with another vocab" % (path, number, input_ids[0] if input_ids else "(none)",
                                  vocab.cls_id, vocab_description))
    for position, weight in zip(features["masked_lm_positions"].int64_list.value,
                                features["masked_lm_weights"].float_list.value):
      if weight > 0 and position < len(input_ids):
        masked += 1
        holding_mask += input_ids[position] == vocab.mask_id
    checked += 1
  if masked >= MIN_MASKED_POSITIONS and holding_mask < MIN_MASK_SHARE * masked:
    raise RecordVocabError(
        "%s: only %d of the %d masked positions of its first %d records hold the [MASK] id %d "
        "of %s (the data tool writes [MASK] at 80%%): the records were made with another "
        "vocab" % (",".join(paths), holding_mask, masked, checked, vocab.mask_id,
                   vocab_description))


# Mixed into the pipeline seed so that masking draws differ from the shuffle's.
_MASKING_SEED_SALT = 0x6D61736B


@dataclasses.dataclass(frozen=True)
class DynamicMasking:
  """Draws masks as create_pretraining_data.py does, inside the tf.data pipeline.

  Any pretraining records work (the original's, ours, any `masked_lm_prob`): the stored masks are
  undone first, since `masked_lm_ids` holds the true ids at the weighted `masked_lm_positions`.
  Then, as `pretraining_instances.create_masked_lm_predictions`: `min(max_predictions_per_seq,
  max(1, round(length * masked_lm_prob)))` positions other than `[CLS]`, `[SEP]` and padding,
  chosen by scanning candidates (whole words with `do_whole_word_mask`) in random order and taking
  each that still fits; each becomes `[MASK]` (80%), a random vocab token (10%) or stays (10%).

  Attributes:
    masked_lm_prob, max_predictions_per_seq, do_whole_word_mask: the data tool's flags.
    vocab: `pretraining_instances.VocabIds` of the vocab the records were made with (special ids,
      the ids random replacements come from, which tokens continue a word).
  """
  masked_lm_prob: float
  max_predictions_per_seq: int
  do_whole_word_mask: bool
  vocab: pretraining_instances.VocabIds

  @classmethod
  def from_vocab_file(cls, vocab_file: str, masked_lm_prob: float, max_predictions_per_seq: int,
                      do_whole_word_mask: bool) -> "DynamicMasking":
    """Reads the vocab; a missing special token or a bad probability is an InputError."""
    if not 0.0 <= masked_lm_prob <= 1.0:
      raise errors.FlagError("`masked_lm_prob` must be in [0, 1], got %r" % masked_lm_prob)
    vocab = pretraining_instances.VocabIds.from_tokenizer(
        tokenization.FullTokenizer(vocab_file), "`vocab_file` %s" % vocab_file,
        is_sentencepiece=False)
    return cls(masked_lm_prob, max_predictions_per_seq, do_whole_word_mask, vocab)

  def check_vocab_size(self, vocab_size: int) -> None:
    """A vocab with ids the model's embeddings do not have is a FlagError (not a failed gather
    deep in training)."""
    largest = max(self.vocab.random_ids)
    if largest >= vocab_size:
      raise errors.FlagError("`vocab_file` has token ids up to %d but the model's vocab_size is "
                             "%d: pass the vocab the model and records were made with" %
                             (largest, vocab_size))

  def apply(self, batches: tf.data.Dataset, seed: int) -> tf.data.Dataset:
    """Re-masks every batch of decoded features; batch i's draws are seeded by (seed, i)."""
    base_seed = tf.constant([seed, _MASKING_SEED_SALT], tf.int64)
    return batches.enumerate().map(
        lambda index, features: self.remask(
            features, tf.random.experimental.stateless_fold_in(base_seed, index)),
        num_parallel_calls=tf.data.AUTOTUNE).prefetch(tf.data.AUTOTUNE)

  def remask(self, features: Mapping[str, tf.Tensor], seed: tf.Tensor) -> dict:
    """A batch of decoded features with new masks (input_ids and the masked_lm_* features)."""
    original_ids = restore_original_ids(features)
    selected = self._choose_positions(original_ids, features["input_mask"], seed)
    seeds = tf.random.experimental.stateless_split(seed, 3)
    shape = tf.shape(original_ids)
    to_mask = selected & (tf.random.stateless_uniform(shape, seeds[0]) < 0.8)
    to_random = (selected & ~to_mask
                 & (tf.random.stateless_uniform(shape, seeds[1]) >= 0.5))
    random_ids = tf.constant(self.vocab.random_ids, tf.int32)
    random_tokens = tf.gather(random_ids, tf.random.stateless_uniform(
        shape, seeds[2], maxval=len(self.vocab.random_ids), dtype=tf.int32))
    input_ids = tf.where(to_mask, self.vocab.mask_id,
                         tf.where(to_random, random_tokens, original_ids))
    positions, weights = _sorted_positions(selected, self.max_predictions_per_seq)
    masked_lm_ids = tf.gather(original_ids, positions, batch_dims=1) * tf.cast(weights, tf.int32)
    return dict(features, input_ids=input_ids, masked_lm_positions=positions,
                masked_lm_ids=masked_lm_ids, masked_lm_weights=weights)

  def _choose_positions(self, input_ids: tf.Tensor, input_mask: tf.Tensor,
                        seed: tf.Tensor) -> tf.Tensor:
    """[B, T] bool: the positions to predict, chosen as the data tool chooses them."""
    length = tf.reduce_sum(tf.cast(input_mask, tf.float64), axis=1)
    num_to_predict = tf.minimum(
        tf.cast(self.max_predictions_per_seq, tf.int32),
        tf.maximum(1, tf.cast(tf.round(length * self.masked_lm_prob), tf.int32)))
    candidate = ((input_mask > 0) & tf.not_equal(input_ids, self.vocab.cls_id)
                 & tf.not_equal(input_ids, self.vocab.sep_id))
    # A word starts at every candidate, or with whole words at the first candidate and at every
    # candidate that does not continue a word (a piece after [SEP] joins the word before it, as in
    # the data tool and the original).
    starts_word = candidate
    if self.do_whole_word_mask:
      continues = tf.gather(tf.constant(list(self.vocab.continues_word), tf.int32) > 0,
                            tf.minimum(input_ids, len(self.vocab.continues_word) - 1))
      first_candidate = candidate & tf.equal(tf.cumsum(tf.cast(candidate, tf.int32), axis=1), 1)
      starts_word = candidate & (~continues | first_candidate)
    word_index = tf.cumsum(tf.cast(starts_word, tf.int32), axis=1) - 1  # Per row, from 0.
    num_words = tf.shape(input_ids)[1]
    word_sizes = tf.math.bincount(  # [B, T]: pieces of word w of each row (0: no such word).
        tf.where(candidate, word_index, num_words), axis=-1, minlength=num_words + 1,
        maxlength=num_words + 1)[:, :num_words]
    # Words in a uniformly random order, then the data tool's scan: take a word if it still fits.
    keys = tf.where(word_sizes > 0, tf.random.stateless_uniform(tf.shape(word_sizes), seed), 2.0)
    order = tf.argsort(keys, axis=1, stable=True)
    sizes_in_order = tf.gather(word_sizes, order, batch_dims=1)

    def take_if_fits(taken_so_far, sizes):
      fits = (sizes > 0) & (taken_so_far + sizes <= num_to_predict)
      return taken_so_far + tf.where(fits, sizes, 0)

    totals = tf.transpose(tf.scan(take_if_fits, tf.transpose(sizes_in_order),
                                  initializer=tf.zeros_like(num_to_predict)))
    taken_in_order = totals > tf.pad(totals, [[0, 0], [1, 0]])[:, :-1]
    taken_word = tf.gather(taken_in_order, tf.argsort(order, axis=1), batch_dims=1)
    return candidate & tf.gather(taken_word, tf.maximum(word_index, 0), batch_dims=1)


def restore_original_ids(features: Mapping[str, tf.Tensor]) -> tf.Tensor:
  """[B, T] input_ids with the stored masks undone: `masked_lm_ids` put back at the positions
  whose `masked_lm_weights` are positive (padding predictions have weight 0)."""
  real = features["masked_lm_weights"] > 0
  positions = features["masked_lm_positions"]
  rows = tf.broadcast_to(tf.range(tf.shape(positions)[0])[:, tf.newaxis], tf.shape(positions))
  indices = tf.boolean_mask(tf.stack([rows, positions], axis=-1), real)
  return tf.tensor_scatter_nd_update(features["input_ids"], indices,
                                     tf.boolean_mask(features["masked_lm_ids"], real))


def _sorted_positions(selected: tf.Tensor, max_predictions_per_seq: int) -> tuple:
  """The selected positions of each row in ascending order, zero-padded to
  `max_predictions_per_seq`, and their float weights (1 for a position, 0 for padding)."""
  length = tf.shape(selected)[1]
  position = tf.range(length)[tf.newaxis, :]
  keys = tf.where(selected, position, length + position)  # Selected first, each part ascending.
  k = min(max_predictions_per_seq, selected.shape[1])  # The sequence length is static.
  _, smallest = tf.math.top_k(-keys, k=k)
  count = tf.reduce_sum(tf.cast(selected, tf.int32), axis=1, keepdims=True)
  real = tf.range(k)[tf.newaxis, :] < count
  positions = tf.where(real, smallest, 0)
  padding = [[0, 0], [0, max_predictions_per_seq - k]]
  return tf.pad(positions, padding), tf.pad(tf.cast(real, tf.float32), padding)
