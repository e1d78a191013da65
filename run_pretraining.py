# coding=utf-8
"""Runs masked LM and next sentence prediction pretraining (the original's CLI and flags).

    python run_pretraining.py --input_file='data/*.tfrecord' --output_dir=out \
      --bert_config_file=bert_config.json --do_train --do_eval \
      --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
      --num_train_steps=10000 --num_warmup_steps=1000 --learning_rate=1e-4

Running the same command again after a crash continues from the last checkpoint in --output_dir.
"""

from absl import app
from absl import flags
from absl import logging

import modeling
import pretraining
import tfrecord_files
import training

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The original run_pretraining.py's flags and defaults, plus the shared runtime flags."""
  training.define_common_flags(max_seq_length=128)
  training.define_eval_flags()
  flags.DEFINE_string("input_file", None,
                      "Input TF example files (can be a glob or comma separated).")
  flags.DEFINE_integer("max_predictions_per_seq", 20,
                       "Maximum number of masked LM predictions per sequence. Must match the data.")
  flags.DEFINE_integer("num_train_steps", 100000, "Number of training steps.")
  flags.DEFINE_integer("num_warmup_steps", 10000, "Number of warmup steps.")
  flags.DEFINE_integer("max_eval_steps", 100, "Maximum number of eval steps.")
  flags.DEFINE_bool("skip_corrupt_records", False,
                    "Read an input file with a corrupt record (bad checksum, cut short) only up to "
                    "it, with a warning, instead of stopping with an error naming the file. The "
                    "files are scanned once before training.")
  flags.DEFINE_bool("dynamic_masking", False,
                    "Draw new masked positions each time a record is read (as RoBERTa), instead of "
                    "the masks stored in the records: the stored masks are undone from "
                    "masked_lm_ids, so any pretraining records work (the original's too). Needs "
                    "--vocab_file; uses --masked_lm_prob, --max_predictions_per_seq and "
                    "--do_whole_word_mask as create_pretraining_data.py does. Eval keeps the "
                    "stored masks.")
  flags.DEFINE_string("vocab_file", None,
                      "With --dynamic_masking: the vocab the records were made with (for the ids "
                      "of [CLS], [SEP], [MASK], random replacements and ## word pieces).")
  flags.DEFINE_float("masked_lm_prob", 0.15, "With --dynamic_masking: masked LM probability.")
  flags.DEFINE_bool("do_whole_word_mask", False,
                    "With --dynamic_masking: mask all of a word's pieces together.")
  flags.adopt_module_key_flags(training)  # --help lists the shared flags too.


def _dynamic_masking():
  """The masking of --dynamic_masking, or None without it."""
  if not FLAGS.dynamic_masking:
    return None
  if not FLAGS.vocab_file:
    raise app.UsageError("--dynamic_masking needs --vocab_file (the vocab the records were made "
                         "with)")
  try:
    masking = pretraining.DynamicMasking.from_vocab_file(
        FLAGS.vocab_file, FLAGS.masked_lm_prob, FLAGS.max_predictions_per_seq,
        FLAGS.do_whole_word_mask)
  except ValueError as error:
    raise app.UsageError(str(error)) from error
  logging.info("Dynamic masking: masked_lm_prob=%g, max_predictions_per_seq=%d, whole words: %s",
               masking.masked_lm_prob, masking.max_predictions_per_seq, masking.do_whole_word_mask)
  return masking


def main(_):
  logging.set_verbosity(logging.INFO)
  if not FLAGS.do_train and not FLAGS.do_eval:
    raise ValueError("At least one of `do_train` or `do_eval` must be True.")
  for name in ("bert_config_file", "output_dir"):
    if not FLAGS[name].value:
      raise ValueError("--%s is required" % name)
  strategy = training.setup_from_flags()
  bert_config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  input_files = pretraining.expand_input_files(FLAGS.input_file)
  result = None
  if FLAGS.do_train:
    result = pretraining.run_training(
        strategy, bert_config, input_files,
        training.TrainConfig.from_flags(FLAGS.num_train_steps, FLAGS.num_warmup_steps),
        FLAGS.max_seq_length, FLAGS.max_predictions_per_seq, FLAGS.skip_corrupt_records,
        masking=_dynamic_masking())
  if FLAGS.do_eval:
    pretraining.run_evaluation(
        strategy, bert_config, input_files, FLAGS.output_dir, FLAGS.init_checkpoint,
        FLAGS.eval_batch_size, FLAGS.max_eval_steps, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq,
        model=result.model if result else None,
        global_step=result.global_step if result else None,
        skip_corrupt_records=FLAGS.skip_corrupt_records,
        allow_partial_init_checkpoint=FLAGS.allow_partial_init_checkpoint)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("input_file")
  training.run_script(main, input_errors=(tfrecord_files.CorruptRecordError,))
