# coding=utf-8
"""Masked LM + next sentence pretraining: input pipeline, loss and metrics of the original.

The records are those create_pretraining_data.py writes (feature names in DESIGN.md). The loss is
the original's: masked-LM cross-entropy weighted by `masked_lm_weights` and normalized by the sum
of the weights (+1e-5), plus the mean next-sentence cross-entropy. The training loop, checkpoints
and strategies come from training.py; run_pretraining.py maps the original's flags onto this.
"""

import os
import re
from typing import Mapping, Optional

from absl import logging
import keras
import tensorflow as tf

import modeling
import tfrecord_files
import training

# Training shuffle buffer after interleaving files (records; the original used 100).
SHUFFLE_BUFFER_SIZE = 1000
# Records decoded per call when reading evaluation data (decoding is vectorized).
EVAL_DECODE_BATCH = 256


def expand_input_files(input_file: str) -> list:
  """Expands the comma-separated globs of `--input_file`; a glob matching nothing is an error."""
  patterns = [pattern.strip() for pattern in (input_file or "").split(",") if pattern.strip()]
  if not patterns:
    raise ValueError("--input_file is required: comma-separated TFRecord files or globs")
  files = []
  for pattern in patterns:
    matches = sorted(tf.io.gfile.glob(pattern))
    if not matches:
      raise ValueError("--input_file: %r matches no files" % pattern)
    files.extend(matches)
  return files


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
    message = tf.strings.join([
        "a record in ", filenames[bad], " has ", tf.strings.as_string(counts[bad]),
        " values for feature %s but %s" % (
            name, "--%s=%d expects %d" % (flag, length, length) if flag else
            "%d is expected" % length),
        ": pass the value the data was written with"])
    check = tf.debugging.Assert(tf.reduce_all(tf.equal(counts, length)), [message])
    with tf.control_dependencies([check]):
      values = tf.reshape(sparse.values, [-1, length])
    features[name] = tf.cast(values, tf.int32) if values.dtype == tf.int64 else values
  return features


def check_first_record(input_file: str, max_seq_length: int, max_predictions_per_seq: int) -> None:
  """Decodes the first record of a file now, turning a length mismatch into a ValueError."""
  records = tf.data.TFRecordDataset(input_file).take(1)
  try:
    for serialized in records:
      decode_records(tf.constant([input_file]), serialized[tf.newaxis], max_seq_length,
                     max_predictions_per_seq)
      return
  except tf.errors.InvalidArgumentError as error:
    mismatch = re.search(r"a record in .* was written with", error.message)
    raise ValueError(mismatch.group(0) if mismatch else error.message) from None
  except tf.errors.DataLossError as error:
    raise ValueError("%s is not a readable TFRecord file: %s" %
                     (input_file, error.message)) from None
  raise ValueError("%s holds no complete TFRecord records" % input_file)


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
  """Unbatched records of the files in their given order (for `training.evaluate`)."""
  files = _files_dataset(input_files, record_limits)
  records = files.flat_map(_with_filename).batch(EVAL_DECODE_BATCH)
  return records.map(lambda names, serialized: decode_records(
      names, serialized, max_seq_length, max_predictions_per_seq)).unbatch()


def build_model(bert_config: modeling.BertConfig) -> keras.Model:
  """The pretraining model with all its variables (`bert/...`, `cls/...`)."""
  model = modeling.BertPretrainingModel(bert_config)
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
  masked_lm_loss = training.replica_weighted_mean(terms["mlm_loss"], terms["mlm_weights"],
                                                  epsilon=1e-5)
  next_sentence_loss = training.replica_weighted_mean(terms["nsp_loss"], example_weights)
  return masked_lm_loss, next_sentence_loss


def loss_fn(model: keras.Model, features: Mapping[str, tf.Tensor], training_: bool) -> tuple:
  """The original's total loss (masked LM + next sentence) and its parts, as replica shares."""
  terms = _per_example_terms(model, features, training_)
  masked_lm_loss, next_sentence_loss = _batch_losses(terms)
  return masked_lm_loss + next_sentence_loss, {
      "masked_lm_loss": masked_lm_loss,
      "next_sentence_loss": next_sentence_loss,
      "masked_lm_accuracy": training.replica_weighted_mean(terms["mlm_correct"],
                                                           terms["mlm_weights"]),
      "next_sentence_accuracy": training.replica_weighted_mean(terms["nsp_correct"]),
  }


def metric_fn(model: keras.Model, features: Mapping[str, tf.Tensor]) -> dict:
  """The original's eval metrics as (numerator, denominator) sums for `training.evaluate`.

  masked_lm_* are weighted by `masked_lm_weights` over all predictions, next_sentence_* averaged
  over examples, and `loss` is the mean over batches of each batch's total loss (the Estimator's).
  """
  terms = _per_example_terms(model, features, False)
  real = tf.cast(features[training.REAL_EXAMPLE_KEY], tf.float32)
  weights = terms["mlm_weights"] * real[:, tf.newaxis]

  def weighted_sum(values, value_weights):
    return tf.reduce_sum(values * value_weights), tf.reduce_sum(value_weights)

  masked_lm_loss, next_sentence_loss = _batch_losses(dict(terms, mlm_weights=weights), real)
  return {
      "loss": (masked_lm_loss + next_sentence_loss, training.replica_batch_share()),
      "masked_lm_accuracy": weighted_sum(terms["mlm_correct"], weights),
      "masked_lm_loss": weighted_sum(terms["mlm_loss"], weights),
      "next_sentence_accuracy": weighted_sum(terms["nsp_correct"], real),
      "next_sentence_loss": weighted_sum(terms["nsp_loss"], real),
  }


SKIP_HINT = "pass --skip_corrupt_records to read each such file only up to its corrupt record"


def _record_limits(input_files: list, skip_corrupt_records: bool) -> tuple[Optional[list], str]:
  """With `skip_corrupt_records`, how many records of each file to read (files scanned once) and
  a line saying what is skipped, else (None, "")."""
  if not skip_corrupt_records:
    return None, ""
  limits, corrupt = tfrecord_files.readable_record_counts(input_files)
  summary = "--skip_corrupt_records: " + tfrecord_files.skipped_summary(corrupt)
  logging.info("%s", summary)
  return limits, summary


def run_training(strategy: tf.distribute.Strategy, bert_config: modeling.BertConfig,
                 input_files: list, config: training.TrainConfig, max_seq_length: int,
                 max_predictions_per_seq: int,
                 skip_corrupt_records: bool = False) -> training.TrainResult:
  """Pretrains (or resumes) on the TFRecord files until `config.num_train_steps`.

  A corrupt record is a `tfrecord_files.CorruptRecordError` naming its file, unless
  `skip_corrupt_records`: then each file is read only up to its first corrupt record.
  """
  _check_lengths(bert_config, input_files, max_seq_length, max_predictions_per_seq)
  record_limits, skipped = _record_limits(input_files, skip_corrupt_records)
  with tfrecord_files.naming_corrupt_records(input_files, SKIP_HINT):
    result = training.train(
        strategy,
        lambda: build_model(bert_config),
        loss_fn,
        lambda batch_size, seed: train_dataset(input_files, batch_size, seed, max_seq_length,
                                               max_predictions_per_seq,
                                               record_limits=record_limits),
        config)
  if skipped:
    logging.info("%s", skipped)  # Again at the end, where a user looks.
  return result


def run_evaluation(strategy: tf.distribute.Strategy, bert_config: modeling.BertConfig,
                   input_files: list, output_dir: str, init_checkpoint: Optional[str],
                   eval_batch_size: int, max_eval_steps: int, max_seq_length: int,
                   max_predictions_per_seq: int, model: Optional[keras.Model] = None,
                   global_step: Optional[int] = None, skip_corrupt_records: bool = False) -> dict:
  """Evaluates the latest checkpoint of `output_dir` (or `init_checkpoint`, or a given model)
  over at most `max_eval_steps` full batches and writes `output_dir/eval_results.txt`.
  Corrupt records: as `run_training`."""
  _check_lengths(bert_config, input_files, max_seq_length, max_predictions_per_seq)
  if model is None:
    model, global_step, _ = training.restore_model(
        strategy, lambda: build_model(bert_config), output_dir, init_checkpoint)
  record_limits, skipped = _record_limits(input_files, skip_corrupt_records)
  with tfrecord_files.naming_corrupt_records(input_files, SKIP_HINT):
    results = training.evaluate(
        strategy, model, metric_fn,
        eval_dataset(input_files, max_seq_length, max_predictions_per_seq, record_limits),
        eval_batch_size, max_steps=max_eval_steps, drop_remainder=True)
  if skipped:
    logging.info("%s", skipped)
  results["global_step"] = int(global_step or 0)
  if training.is_chief(strategy):
    training.write_eval_results(os.path.join(output_dir, "eval_results.txt"), results)
  return results


def _check_lengths(bert_config, input_files, max_seq_length, max_predictions_per_seq) -> None:
  bert_config.check_max_seq_length(max_seq_length)
  logging.info("Input files: %d (%s%s)", len(input_files), ", ".join(input_files[:3]),
               ", ..." if len(input_files) > 3 else "")
  check_first_record(input_files[0], max_seq_length, max_predictions_per_seq)
