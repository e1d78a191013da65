"""BERT fine-tuning for multiple choice (SWAG, or your own JSON Lines), as the paper describes it.

The same flags, loop and outputs as run_classifier (`eval_results.txt` with `eval_accuracy`,
`test_results.tsv` with one probability per ending) on SWAG's CSV files or JSON Lines files of
`{"context", "question"?, "endings": [...], "label"?}`; `--export_dir` writes a SavedModel that
serves raw text (a context and its endings). Example:

  python run_multiple_choice.py --do_train --do_eval --data_dir=$SWAG_DIR \
    --vocab_file=$BERT_BASE_DIR/vocab.txt --bert_config_file=$BERT_BASE_DIR/bert_config.json \
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt --max_seq_length=128 --train_batch_size=16 \
    --learning_rate=2e-5 --num_train_epochs=3.0 --output_dir=/tmp/swag_output \
    --export_dir=/tmp/swag_export
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

from absl import flags

import cli

FLAGS = flags.FLAGS


def define_flags() -> None:
  """run_classifier's shared flags, plus the data files."""
  cli.define_fine_tuning_flags(max_seq_length=128)
  cli.define_eval_flags()
  cli.define_predict_flags()
  cli.define_tokenizer_flags()
  cli.define_export_flag("`serving_default` on raw text (`context` [batch], `endings` "
                         "[batch, endings], \"\" for a missing ending) and `token_ids` on token "
                         "ids [batch, endings, length]")
  cli.define_data_file_flags("SWAG CSV (.csv) or JSON Lines (.jsonl)", "train.csv", "val.csv",
                             "test.csv")
  cli.define_skip_bad_rows_flag()
  cli.define_packing_flag()


def main(_):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import cli_setup
  import multiple_choice
  # pylint: enable=g-import-not-at-top
  strategy, tokenizer, bert_config = cli_setup.setup_task_script(
      multiple_choice.MultipleChoiceTask.kind)
  task = multiple_choice.MultipleChoiceTask(
      bert_config, tokenizer, FLAGS.data_dir, FLAGS.output_dir, FLAGS.max_seq_length,
      train_file=FLAGS.train_file, dev_file=FLAGS.dev_file, test_file=FLAGS.test_file,
      bucket_by_length=cli.bucket_by_length(), skip_bad_rows=FLAGS.skip_bad_rows,
      group_by_length=FLAGS.group_by_length,
      pack_sequences=FLAGS.pack_sequences)
  cli_setup.run_task(task, strategy)
  task.bad_rows.log_summary()


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, check_input_paths=cli.check_model_files)
