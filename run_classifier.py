"""BERT fine-tuning for sentence (pair) classification: GLUE, XNLI and your own files.

The original run_classifier's flags and outputs (`eval_results.txt`, `test_results.tsv`), on the
shared Keras training loop (strategies, XLA, resume after a kill), plus `--export_dir` for a
SavedModel that TF Serving serves from raw text. Example:

  python run_classifier.py --task_name=MRPC --do_train --do_eval --data_dir=$GLUE_DIR/MRPC \
    --vocab_file=$BERT_BASE_DIR/vocab.txt --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 --train_batch_size=32 \
    --learning_rate=2e-5 --num_train_epochs=3.0 --output_dir=/tmp/mrpc_output \
    --export_dir=/tmp/mrpc_export
"""

import os

from absl import flags
from absl import logging

import classifier
import modeling
import tfrecord_files
import tokenization
import training

FLAGS = flags.FLAGS

training.define_fine_tuning_flags(max_seq_length=128)
training.define_eval_flags()
training.define_predict_flags()

flags.DEFINE_string("data_dir", None,
                    "The input data dir. Should contain the .tsv files (or other data files) for "
                    "the task.")
flags.DEFINE_string("task_name", None, "The name of the task to train: %s." %
                    ", ".join(classifier.PROCESSORS))
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True,
                  "Whether to lower case the input text. Should be True for uncased models and "
                  "False for cased models.")
flags.DEFINE_string("spm_model_file", None,
                    "A SentencePiece model to tokenize with instead of --vocab_file.")
flags.DEFINE_string("export_dir", None,
                    "If set, export a SavedModel for TF Serving to <export_dir>/<version>/: a "
                    "`serving_default` signature on raw text and a `token_ids` signature.")
flags.DEFINE_bool("skip_bad_rows", False,
                  "Skip (and count) data rows with a wrong number of columns or an unknown label "
                  "instead of stopping with an error naming the file and line.")
flags.DEFINE_string("xnli_language", "zh", "The XNLI language to train and evaluate on.")
flags.DEFINE_string("text_a_column", "text_a",
                    "task_name=generic: the column (header name, JSON key, or 0-based index "
                    "without header) of the first text.")
flags.DEFINE_string("text_b_column", None,
                    "task_name=generic: the column of the second text, for pair tasks.")
flags.DEFINE_string("label_column", "label", "task_name=generic: the column of the label.")
flags.DEFINE_bool("has_header", True,
                  "task_name=generic: whether TSV/CSV files start with a header line.")


def main(_):
  strategy = training.setup_from_flags()
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  if not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise ValueError("--vocab_file (or --spm_model_file) is required.")
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
    raise ValueError("At least one of `do_train`, `do_eval`, `do_predict` or `export_dir` must "
                     "be set.")
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  bert_config.check_max_seq_length(FLAGS.max_seq_length)
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  processor = classifier.get_processor(
      FLAGS.task_name, skip_bad_rows=FLAGS.skip_bad_rows, language=FLAGS.xnli_language,
      text_a_column=FLAGS.text_a_column, text_b_column=FLAGS.text_b_column,
      label_column=FLAGS.label_column, has_header=FLAGS.has_header)
  classifier.check_max_seq_length(FLAGS.max_seq_length, processor.is_pair)
  processor.load_or_create_label_list(FLAGS.data_dir, FLAGS.output_dir)
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                         FLAGS.spm_model_file)
  model_fn = classifier.model_fn_builder(bert_config, processor.num_outputs)

  def features_file(split, examples):
    path = os.path.join(FLAGS.output_dir, split + ".tf_record")
    classifier.cached_features_file(examples, processor.get_labels(), FLAGS.max_seq_length,
                                    tokenizer, path, processor.is_regression)
    return path

  model, summary = None, []
  if FLAGS.do_train:
    examples = processor.get_train_examples(FLAGS.data_dir)
    train_file = features_file("train", examples)
    num_train_steps, num_warmup_steps = training.fine_tuning_steps(
        len(examples), FLAGS.train_batch_size, FLAGS.num_train_epochs, FLAGS.warmup_proportion)
    logging.info("***** Training: %d examples, batch %d, %d steps *****", len(examples),
                 FLAGS.train_batch_size, num_train_steps)
    with tfrecord_files.naming_corrupt_records([train_file], tfrecord_files.REBUILD_CACHE_HINT):
      result = training.train(
          strategy, model_fn, classifier.loss_fn_builder(processor.is_regression),
          classifier.train_dataset_fn(train_file, FLAGS.max_seq_length, len(examples),
                                      processor.is_regression),
          training.TrainConfig.from_flags(num_train_steps, num_warmup_steps))
    model, global_step = result.model, result.global_step
    summary.append("trained to step %d (%.1f examples/s)" % (global_step,
                                                            result.examples_per_second))
  if model is None:
    model, global_step, _ = training.restore_model(strategy, model_fn, FLAGS.output_dir,
                                                   FLAGS.init_checkpoint,
                                                   FLAGS.allow_partial_init_checkpoint)

  if FLAGS.do_eval:
    eval_file = features_file("eval", processor.get_dev_examples(FLAGS.data_dir))
    with tfrecord_files.naming_corrupt_records([eval_file], tfrecord_files.REBUILD_CACHE_HINT):
      results = classifier.evaluate(strategy, model, processor, eval_file, FLAGS.max_seq_length,
                                    FLAGS.eval_batch_size, global_step)
    if training.is_chief(strategy):
      training.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), results)
    summary.append("evaluated: " + ", ".join(
        "%s %.4f" % (k, v) for k, v in sorted(results.items()) if k.startswith("eval_")))

  if FLAGS.do_predict:
    predict_file = features_file("predict", processor.get_test_examples(FLAGS.data_dir))
    with tfrecord_files.naming_corrupt_records([predict_file],
                                               tfrecord_files.REBUILD_CACHE_HINT):
      probabilities = classifier.predict(strategy, model, processor.is_regression, predict_file,
                                         FLAGS.max_seq_length, FLAGS.predict_batch_size)
    if training.is_chief(strategy):
      classifier.write_test_results(os.path.join(FLAGS.output_dir, "test_results.tsv"),
                                    probabilities)
    summary.append("predicted %d examples" % len(probabilities))

  if FLAGS.export_dir and training.is_chief(strategy):
    path = classifier.export_saved_model(model, processor, FLAGS.export_dir, FLAGS.vocab_file,
                                         FLAGS.do_lower_case, FLAGS.spm_model_file,
                                         FLAGS.max_seq_length)
    summary.append("exported " + path)
  skipped = sum(processor.skipped_rows.values())
  if skipped:
    summary.append("skipped %d bad rows (--skip_bad_rows): %s" % (skipped, ", ".join(
        "%s %d" % (path, count) for path, count in processor.skipped_rows.items() if count)))
  logging.info("run_classifier %s: %s", FLAGS.task_name, "; ".join(summary))


if __name__ == "__main__":
  flags.mark_flags_as_required(["task_name", "bert_config_file", "output_dir"])
  training.run_script(
      main, input_errors=(classifier.BadInputError, tfrecord_files.CorruptRecordError))
