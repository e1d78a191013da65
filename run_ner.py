# coding=utf-8
"""BERT fine-tuning for token tagging (named entities, parts of speech) on CoNLL column files.

Flags follow run_classifier (training, evaluation, prediction, TPU and runtime flags from
`training.py`). `data_dir` holds CoNLL-2003 style files (`word ... tag` per line, blank lines
between sentences, `-DOCSTART-` lines ignored); the tag set is read from the training file and
saved as `output_dir/tag_list.txt`. Outputs in `output_dir`:
- `model.ckpt-<step>` training checkpoints (Google's format; head `output_weights`/`output_bias`);
- with --do_eval: `eval_results.txt` (`key = value`: eval_loss, word accuracy, entity precision,
  recall and F1 overall and per type, as conlleval computes them, global_step), `eval_conlleval.txt`
  (conlleval's report) and `eval_predictions.txt` (`word gold predicted` lines);
- with --do_predict: `test_predictions.txt` and `test_conlleval.txt` likewise for the test file;
- with --export_dir: a versioned SavedModel that tags raw text (see `tagging.export_tagger`).
"""

import os

from absl import flags
from absl import logging

import atomic_files
import modeling
import tagging
import tokenization
import training

FLAGS = flags.FLAGS

training.define_fine_tuning_flags(max_seq_length=128)
training.define_eval_flags()
training.define_predict_flags()
flags.DEFINE_string("data_dir", None, "Directory with the CoNLL files (train.txt, dev.txt, "
                    "test.txt by default).")
flags.DEFINE_string("train_file", "train.txt", "Training file name in --data_dir.")
flags.DEFINE_string("dev_file", "dev.txt", "Evaluation (--do_eval) file name in --data_dir.")
flags.DEFINE_string("test_file", "test.txt", "Prediction (--do_predict) file name in --data_dir.")
flags.DEFINE_string("vocab_file", None, "The vocabulary file that the BERT model was trained on.")
flags.DEFINE_bool("do_lower_case", True, "Whether to lower case the input text. Should be True "
                  "for uncased models and False for cased models.")
flags.DEFINE_string("spm_model_file", None, "SentencePiece model file (instead of --vocab_file).")
flags.DEFINE_string("export_dir", None, "If set, export a SavedModel that tags raw text here "
                    "(versioned subdirectories, for TF Serving).")


def _data_path(file_name: str) -> str:
  if not FLAGS.data_dir:
    raise ValueError("--data_dir is required for --do_train, --do_eval and --do_predict")
  path = os.path.join(FLAGS.data_dir, file_name)
  if not os.path.exists(path):
    raise FileNotFoundError("%s not found (--data_dir=%s, file name flag %r)" %
                            (path, FLAGS.data_dir, file_name))
  return path


def _evaluate_file(strategy, model, tokenizer, tag_list, file_name, prefix, batch_size):
  """Predicts one CoNLL file; writes `<prefix>_predictions.txt` and `<prefix>_conlleval.txt`."""
  sentences = tagging.read_conll(_data_path(file_name))
  features = tagging.convert_sentences_to_features(sentences, tag_list, FLAGS.max_seq_length,
                                                   tokenizer)
  logging.info("%s: %d sentences, %d windows", file_name, len(sentences), len(features))
  predicted = tagging.predict_sentence_tags(strategy, model, sentences, features, tag_list,
                                            batch_size)
  tagging.write_conll_predictions(os.path.join(FLAGS.output_dir, prefix + "_predictions.txt"),
                                  sentences, predicted)
  evaluation = tagging.conll_evaluate([s.tags for s in sentences], predicted)
  report = tagging.format_conlleval_report(evaluation)
  atomic_files.write_text(os.path.join(FLAGS.output_dir, prefix + "_conlleval.txt"), report)
  logging.info("%s (conlleval):\n%s", file_name, report)
  return features, evaluation


def main(_):
  if not (FLAGS.do_train or FLAGS.do_eval or FLAGS.do_predict or FLAGS.export_dir):
    raise ValueError("At least one of --do_train, --do_eval, --do_predict or --export_dir must be "
                     "given.")
  if not FLAGS.output_dir:
    raise ValueError("--output_dir is required")
  if not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise ValueError("--vocab_file (or --spm_model_file) is required")
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  bert_config.check_max_seq_length(FLAGS.max_seq_length)
  strategy = training.setup_from_flags()
  os.makedirs(FLAGS.output_dir, exist_ok=True)
  tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                         FLAGS.spm_model_file)

  model, global_step = None, 0
  if FLAGS.do_train:
    sentences = tagging.read_conll(_data_path(FLAGS.train_file))
    tag_list = tagging.tag_list_from_sentences(sentences)
    tagging.write_tag_list(tag_list, FLAGS.output_dir)
    features = tagging.convert_sentences_to_features(sentences, tag_list, FLAGS.max_seq_length,
                                                     tokenizer)
    num_train_steps, num_warmup_steps = training.fine_tuning_steps(
        len(features), FLAGS.train_batch_size, FLAGS.num_train_epochs, FLAGS.warmup_proportion)
    logging.info("Training on %d sentences (%d windows), %d tags, %d steps", len(sentences),
                 len(features), len(tag_list), num_train_steps)
    dataset = tagging.features_dataset(features)

    def dataset_fn(batch_size, seed):
      return dataset.shuffle(len(features), seed=seed).repeat().batch(batch_size,
                                                                        drop_remainder=True)

    result = training.train(strategy, lambda: tagging.build_tagger(bert_config, len(tag_list)),
                            tagging.loss_fn, dataset_fn,
                            training.TrainConfig.from_flags(num_train_steps, num_warmup_steps))
    model, global_step = result.model, result.global_step
  else:
    tag_list = tagging.read_tag_list(FLAGS.output_dir)
  if model is None:
    model, global_step, _ = training.restore_model(
        strategy, lambda: tagging.build_tagger(bert_config, len(tag_list)), FLAGS.output_dir,
        FLAGS.init_checkpoint, FLAGS.allow_partial_init_checkpoint)

  if FLAGS.do_eval:
    features, evaluation = _evaluate_file(strategy, model, tokenizer, tag_list, FLAGS.dev_file,
                                          "eval", FLAGS.eval_batch_size)
    results = training.evaluate(strategy, model, tagging.metric_fn,
                                tagging.features_dataset(features), FLAGS.eval_batch_size)
    results.update(tagging.evaluation_to_dict(evaluation))
    results["global_step"] = global_step
    training.write_eval_results(os.path.join(FLAGS.output_dir, "eval_results.txt"), results)
  if FLAGS.do_predict:
    _evaluate_file(strategy, model, tokenizer, tag_list, FLAGS.test_file, "test",
                   FLAGS.predict_batch_size)
  if FLAGS.export_dir:
    path = tagging.export_tagger(FLAGS.export_dir, model, tag_list, FLAGS.vocab_file,
                                 FLAGS.do_lower_case, FLAGS.max_seq_length, FLAGS.spm_model_file)
    logging.info("Exported the tagger to %s", path)


if __name__ == "__main__":
  flags.mark_flag_as_required("bert_config_file")
  flags.mark_flag_as_required("output_dir")
  training.run_script(main, input_errors=(tagging.ConllFormatError,))
