"""BERT fine-tuning and prediction for SQuAD v1.1 and v2.0, with the official evaluation.

The original run_squad's flags and outputs (`predictions.json`, `nbest_predictions.json`,
`null_odds.json` for v2.0), on the shared Keras training loop, plus `eval_results.txt` with the
official EM/F1 when the predict file has answers, and `--export_dir` for a SavedModel that answers
a question about a raw-text context. Example:

  python run_squad.py --vocab_file=$BERT_BASE_DIR/vocab.txt \\
    --bert_config_file=$BERT_BASE_DIR/bert_config.json \\
    --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \\
    --do_train --train_file=$SQUAD_DIR/train-v1.1.json \\
    --do_predict --predict_file=$SQUAD_DIR/dev-v1.1.json --train_batch_size=12 \\
    --learning_rate=3e-5 --num_train_epochs=2.0 --max_seq_length=384 --doc_stride=128 \\
    --output_dir=/tmp/squad_base --export_dir=/tmp/squad_export
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

from absl import flags

import cli

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The original run_squad.py's flags and defaults, plus the shared runtime flags."""
  cli.define_task_flags(384, "`serving_default` on raw `question` and `context` strings (first "
                        "window only) and a `token_ids` signature returning start/end logits",
                        with_eval=False)
  flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
  flags.DEFINE_string("predict_file", None,
                      "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json")
  flags.DEFINE_integer("doc_stride", 128,
                       "When splitting up a long document into chunks, how much stride to take "
                       "between chunks.")
  flags.DEFINE_integer("max_query_length", 64,
                       "The maximum number of tokens for the question. Questions longer than "
                       "this will be truncated to this length.")
  flags.DEFINE_integer("n_best_size", 20,
                       "The total number of n-best predictions to generate in the "
                       "nbest_predictions.json output file.")
  flags.DEFINE_integer("max_answer_length", 30,
                       "The maximum length of an answer that can be generated. This is needed "
                       "because the start and end predictions are not conditioned on one "
                       "another.")
  flags.DEFINE_bool("verbose_logging", False,
                    "If true, all of the warnings related to data processing will be printed.")
  flags.DEFINE_bool("version_2_with_negative", False,
                    "If true, the SQuAD examples contain some that do not have an answer.")
  flags.DEFINE_float("null_score_diff_threshold", 0.0,
                     "If null_score - best_non_null is greater than the threshold predict null.")


def main(_):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import cli_setup
  import squad
  import squad_data
  import text_pairs
  # pylint: enable=g-import-not-at-top
  strategy, tokenizer, bert_config = cli_setup.setup_task_script(squad.SquadTask.kind)
  if FLAGS.do_train:
    cli.require("train_file", reason=" with --do_train")
  if FLAGS.do_predict:
    cli.require("predict_file", reason=" with --do_predict")
  squad_data.check_feature_settings(FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length)
  text_pairs.check_model_takes_pairs(bert_config.type_vocab_size, is_pair=True)
  options = squad_data.SquadOptions(
      max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
      max_query_length=FLAGS.max_query_length, n_best_size=FLAGS.n_best_size,
      max_answer_length=FLAGS.max_answer_length,
      version_2_with_negative=FLAGS.version_2_with_negative,
      null_score_diff_threshold=FLAGS.null_score_diff_threshold,
      verbose_logging=FLAGS.verbose_logging)
  task = squad.SquadTask(bert_config, tokenizer, options, FLAGS.output_dir, FLAGS.train_file,
                         FLAGS.predict_file, bucket_by_length=cli.bucket_by_length(),
                         group_by_length=FLAGS.group_by_length)
  if FLAGS.do_train and cli_setup.train_config().evaluates_during_training:
    cli.require("predict_file", reason=" to evaluate during training (the dev set, with answers)")
  cli_setup.run_task(task, strategy)


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, check_input_paths=cli.check_model_files)
