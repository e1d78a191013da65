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

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

from absl import flags

import atomic_files
import choices
import cli
import errors

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The original run_classifier.py's flags and defaults, plus the shared runtime flags."""
  cli.define_task_flags(128, "`serving_default` on raw text (`text_a`, and `text_b` for pair "
                        "tasks) and `token_ids` on token ids")
  cli.define_data_dir_flag("the task's .tsv files, or other data files")
  flags.DEFINE_string("task_name", None, "The name of the task to train: %s." %
                      ", ".join(choices.CLASSIFIER_TASKS))
  cli.define_skip_bad_rows_flag()
  cli.define_packing_flag()
  flags.DEFINE_string("xnli_language", "zh", "The XNLI language to train and evaluate on.")
  flags.DEFINE_string("text_a_column", "text_a",
                      "task_name=generic: the column (header name, JSON key, or 0-based index "
                      "without header) of the first text.")
  flags.DEFINE_string("text_b_column", None,
                      "task_name=generic: the column of the second text, for pair tasks.")
  flags.DEFINE_string("label_column", "label", "task_name=generic: the column of the label.")
  flags.DEFINE_bool("has_header", True,
                    "task_name=generic: whether TSV/CSV files start with a header line.")
  flags.DEFINE_integer("doc_stride", None,
                       "Long texts: cut a text_a longer than max_seq_length into windows starting "
                       "every doc_stride tokens (each window trains with the text's label; "
                       "evaluation, prediction and the export aggregate the windows). Default: "
                       "truncate, as the original.")
  flags.DEFINE_enum("window_aggregation", "mean", list(choices.WINDOW_AGGREGATIONS),
                    "With --doc_stride: how a text's window logits make its logits.")
  flags.DEFINE_bool("multi_label", False,
                    "task_name=generic: each label cell lists any number of labels separated by "
                    "--label_delimiter; one sigmoid per label (binary cross-entropy).")
  flags.DEFINE_string("label_delimiter", ",", "With --multi_label: the separator of labels.")
  flags.DEFINE_float("multi_label_threshold", 0.5,
                     "With --multi_label: a label is predicted when its probability is above "
                     "this.")
  flags.DEFINE_string("class_weights", None,
                      "Single-label tasks: weigh each training example's loss by its class: "
                      "'auto' (inverse class frequency in the training file, mean weight 1) or "
                      "one weight per label, comma-separated, in label-list order.")


def check_input_paths() -> None:
  """The validation pass: `--task_name` is one of the tasks (before TensorFlow loads), then the
  model's files (`cli.check_model_files`)."""
  if FLAGS.task_name:
    choices.classifier_task(FLAGS.task_name)
  cli.check_model_files()


def main(_):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import classifier
  import classifier_data
  import cli_setup
  import fine_tuning
  import text_pairs
  # pylint: enable=g-import-not-at-top
  cli.require("task_name")
  strategy, tokenizer, bert_config = cli_setup.setup_task_script(classifier.ClassifierTask.kind)
  if FLAGS.multi_label and FLAGS.task_name.lower() != "generic":
    raise errors.FlagError("--multi_label needs --task_name=generic (labels from your own files)")
  processor = classifier_data.get_processor(
      FLAGS.task_name, skip_bad_rows=FLAGS.skip_bad_rows, language=FLAGS.xnli_language,
      text_a_column=FLAGS.text_a_column, text_b_column=FLAGS.text_b_column,
      label_column=FLAGS.label_column, has_header=FLAGS.has_header,
      label_delimiter=FLAGS.label_delimiter if FLAGS.multi_label else None)
  text_pairs.check_max_seq_length(FLAGS.max_seq_length, processor.is_pair)
  text_pairs.check_model_takes_pairs(bert_config.type_vocab_size, processor.is_pair)
  processor.load_or_create_label_list(
      FLAGS.data_dir, FLAGS.output_dir,
      list_directory=fine_tuning.output_names_directory(
          FLAGS.output_dir, FLAGS.init_checkpoint, FLAGS.do_train, classifier_data.LABEL_LIST_FILE),
      training_anew=FLAGS.do_train and not atomic_files.holds_training_run(FLAGS.output_dir))
  task = classifier.ClassifierTask(
      bert_config, processor, tokenizer, FLAGS.data_dir, FLAGS.output_dir,
      FLAGS.max_seq_length, bucket_by_length=cli.bucket_by_length(),
      group_by_length=FLAGS.group_by_length,
      pack_sequences=FLAGS.pack_sequences,
      doc_stride=FLAGS.doc_stride, window_aggregation=FLAGS.window_aggregation,
      multi_label_threshold=FLAGS.multi_label_threshold, class_weights=FLAGS.class_weights)
  cli_setup.run_task(task, strategy)
  processor.bad_rows.log_summary()


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, check_input_paths=check_input_paths)
