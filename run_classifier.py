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

from absl import flags
from absl import logging

import classifier
import cli
import fine_tuning
import tfrecord_files

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The original run_classifier.py's flags and defaults, plus the shared runtime flags."""
  cli.define_fine_tuning_flags(max_seq_length=128)
  cli.define_eval_flags()
  cli.define_predict_flags()
  cli.define_tokenizer_flags()
  cli.define_export_flag("`serving_default` on raw text (`text_a`, and `text_b` for pair tasks) "
                         "and `token_ids` on token ids")
  flags.DEFINE_string("data_dir", None,
                      "The input data dir. Should contain the .tsv files (or other data files) "
                      "for the task.")
  flags.DEFINE_string("task_name", None, "The name of the task to train: %s." %
                      ", ".join(classifier.PROCESSORS))
  flags.DEFINE_bool("skip_bad_rows", False,
                    "Skip (and count) data rows with a wrong number of columns or an unknown "
                    "label instead of stopping with an error naming the file and line.")
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
  strategy = cli.setup_strategy()
  cli.require("task_name", "output_dir")
  cli.require_one_of("do_train", "do_eval", "do_predict", "export_dir")
  tokenizer = cli.tokenizer()
  bert_config = cli.bert_config()
  processor = classifier.get_processor(
      FLAGS.task_name, skip_bad_rows=FLAGS.skip_bad_rows, language=FLAGS.xnli_language,
      text_a_column=FLAGS.text_a_column, text_b_column=FLAGS.text_b_column,
      label_column=FLAGS.label_column, has_header=FLAGS.has_header)
  classifier.check_max_seq_length(FLAGS.max_seq_length, processor.is_pair)
  if isinstance(processor, classifier.GenericProcessor):
    processor.load_or_create_label_list(FLAGS.data_dir, FLAGS.output_dir)
  task = classifier.ClassifierTask(bert_config, processor, tokenizer, FLAGS.data_dir,
                                   FLAGS.output_dir, FLAGS.max_seq_length)
  fine_tuning.run(task, strategy, cli.train_config(), do_train=FLAGS.do_train,
                  do_eval=FLAGS.do_eval, do_predict=FLAGS.do_predict,
                  eval_batch_size=FLAGS.eval_batch_size,
                  predict_batch_size=FLAGS.predict_batch_size, export_dir=FLAGS.export_dir)
  skipped = sum(processor.skipped_rows.values())
  if skipped:
    logging.info("Skipped %d bad rows (--skip_bad_rows): %s", skipped, ", ".join(
        "%s %d" % (path, count) for path, count in processor.skipped_rows.items() if count))


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, input_errors=(classifier.BadInputError, tfrecord_files.CorruptRecordError))
