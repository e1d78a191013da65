# coding=utf-8
"""BERT fine-tuning for token tagging (named entities, parts of speech) on CoNLL column files.

Flags follow run_classifier (training, evaluation, prediction, TPU and runtime flags from
`cli.py`). `data_dir` holds CoNLL-2003 style files (`word ... tag` per line, blank lines
between sentences, `-DOCSTART-` lines ignored); the tag set is read from the training file and
saved as `output_dir/tag_list.txt`. Outputs in `output_dir`:
- `model.ckpt-<step>` training checkpoints (Google's format; head `output_weights`/`output_bias`);
- with --do_eval: `eval_results.txt` (`key = value`: eval_loss, entity precision, recall and F1
  overall and per type, as conlleval computes them, global_step), `eval_conlleval.txt`
  (conlleval's report) and `eval_predictions.txt` (`word gold predicted` lines);
- with --do_predict: `test_predictions.txt` and `test_conlleval.txt` likewise for the test file;
- with --export_dir: a versioned SavedModel that tags raw text (see `tagging.TaggingTask.export`).
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

from absl import flags

import cli

FLAGS = flags.FLAGS


def define_flags() -> None:
  """run_classifier's flags (as the original's) for CoNLL files."""
  cli.define_task_flags(128, "`serving_default` tags raw `text`; `token_ids` gives tag ids")
  cli.define_data_file_flags("CoNLL column files", "train.txt", "dev.txt", "test.txt")
  cli.define_packing_flag()
  flags.DEFINE_integer("doc_stride", None,
                       "Long sentences: overlapping windows of max_seq_length - 2 pieces starting "
                       "every doc_stride pieces (as run_squad), each word's tag read from the "
                       "window where it has the most context. Default: whole-word windows that "
                       "do not overlap.")


def main(_):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import cli_setup
  import fine_tuning
  import tagging
  # pylint: enable=g-import-not-at-top
  strategy, tokenizer, bert_config = cli_setup.setup_task_script(tagging.TaggingTask.kind)
  task = tagging.TaggingTask(bert_config, tokenizer, FLAGS.data_dir, FLAGS.output_dir,
                             FLAGS.max_seq_length, FLAGS.train_file, FLAGS.dev_file,
                             FLAGS.test_file, tag_list_directory=(
                                 fine_tuning.output_names_directory(
                                     FLAGS.output_dir, FLAGS.init_checkpoint, FLAGS.do_train,
                                     tagging.TAG_LIST_FILE)),
                             bucket_by_length=cli.bucket_by_length(),
                             group_by_length=FLAGS.group_by_length,
                             pack_sequences=FLAGS.pack_sequences,
                             doc_stride=FLAGS.doc_stride)
  cli_setup.run_task(task, strategy)


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, check_input_paths=cli.check_model_files)
