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

import os

from absl import flags

import modeling
import squad
import tfrecord_files
import tokenization
import training

FLAGS = flags.FLAGS

training.define_fine_tuning_flags(max_seq_length=384)
training.define_predict_flags()

flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_string("spm_model_file", None,
                    "A SentencePiece model to tokenize with instead of --vocab_file.")
flags.DEFINE_string("train_file", None, "SQuAD json for training. E.g., train-v1.1.json")
flags.DEFINE_string("predict_file", None,
                    "SQuAD json for predictions. E.g., dev-v1.1.json or test-v1.1.json")
flags.DEFINE_bool("do_lower_case", True,
                  "Whether to lower case the input text. Should be True for uncased models and "
                  "False for cased models.")
flags.DEFINE_integer("doc_stride", 128,
                     "When splitting up a long document into chunks, how much stride to take "
                     "between chunks.")
flags.DEFINE_integer("max_query_length", 64,
                     "The maximum number of tokens for the question. Questions longer than this "
                     "will be truncated to this length.")
flags.DEFINE_integer("n_best_size", 20,
                     "The total number of n-best predictions to generate in the "
                     "nbest_predictions.json output file.")
flags.DEFINE_integer("max_answer_length", 30,
                     "The maximum length of an answer that can be generated. This is needed "
                     "because the start and end predictions are not conditioned on one another.")
flags.DEFINE_bool("verbose_logging", False,
                  "If true, all of the warnings related to data processing will be printed.")
flags.DEFINE_bool("version_2_with_negative", False,
                  "If true, the SQuAD examples contain some that do not have an answer.")
flags.DEFINE_float("null_score_diff_threshold", 0.0,
                   "If null_score - best_non_null is greater than the threshold predict null.")
flags.DEFINE_string("export_dir", None,
                    "If set, export a SavedModel for TF Serving to <export_dir>/<version>/: "
                    "`serving_default` on raw `question` and `context` strings (first window "
                    "only) and a `token_ids` signature returning start/end logits.")


def validate_flags() -> modeling.BertConfig:
  """Checks the flag combination (as the original's validate_flags_or_throw) and returns the
  model config."""
  if not (FLAGS.do_train or FLAGS.do_predict or FLAGS.export_dir):
    raise ValueError("At least one of `do_train`, `do_predict` or `export_dir` must be set.")
  if not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise ValueError("--vocab_file (or --spm_model_file) is required.")
  if FLAGS.do_train and not FLAGS.train_file:
    raise ValueError("If `do_train` is True, then `train_file` must be specified.")
  if FLAGS.do_predict and not FLAGS.predict_file:
    raise ValueError("If `do_predict` is True, then `predict_file` must be specified.")
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  bert_config.check_max_seq_length(FLAGS.max_seq_length)
  squad.check_feature_settings(FLAGS.max_seq_length, FLAGS.doc_stride, FLAGS.max_query_length)
  return bert_config


def main(_):
  strategy = training.setup_from_flags()
  bert_config = validate_flags()
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                         FLAGS.spm_model_file)
  options = squad.SquadOptions(
      max_seq_length=FLAGS.max_seq_length, doc_stride=FLAGS.doc_stride,
      max_query_length=FLAGS.max_query_length, n_best_size=FLAGS.n_best_size,
      max_answer_length=FLAGS.max_answer_length,
      version_2_with_negative=FLAGS.version_2_with_negative,
      null_score_diff_threshold=FLAGS.null_score_diff_threshold,
      verbose_logging=FLAGS.verbose_logging)

  if FLAGS.do_train:
    model = squad.train(strategy, bert_config, tokenizer, options, FLAGS.train_file,
                        training.TrainConfig.from_flags(0, 0), FLAGS.num_train_epochs,
                        FLAGS.warmup_proportion).model
  else:
    model, _, _ = training.restore_model(strategy, lambda: squad.build_model(bert_config),
                                         FLAGS.output_dir, FLAGS.init_checkpoint,
                                         FLAGS.allow_partial_init_checkpoint)
  if FLAGS.do_predict:
    squad.predict(strategy, model, tokenizer, options, FLAGS.predict_file, FLAGS.output_dir,
                  FLAGS.predict_batch_size)
  if FLAGS.export_dir and training.is_chief(strategy):
    squad.export_model(model, tokenizer, FLAGS.export_dir, options.max_seq_length,
                       options.max_query_length, options.n_best_size, options.max_answer_length,
                       options.version_2_with_negative, options.null_score_diff_threshold)


if __name__ == "__main__":
  flags.mark_flags_as_required(["bert_config_file", "output_dir"])
  training.run_script(
      main, input_errors=(squad.SquadFormatError, tfrecord_files.CorruptRecordError))
