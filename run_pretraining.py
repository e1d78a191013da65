# coding=utf-8
"""Runs masked LM and next sentence prediction pretraining (the original's CLI and flags).

    python run_pretraining.py --input_file='data/*.tfrecord' --output_dir=out \
      --bert_config_file=bert_config.json --do_train --do_eval \
      --train_batch_size=32 --max_seq_length=128 --max_predictions_per_seq=20 \
      --num_train_steps=10000 --num_warmup_steps=1000 --learning_rate=1e-4

Running the same command again after a crash continues from the last checkpoint in --output_dir.
With --phase2_input_file the job continues at another length after --num_train_steps (phase 2).

With --export_dir the masked-LM head is exported for TF Serving as fill-mask (fill_mask.py): after
training, or without it from a released checkpoint:

    python run_pretraining.py --do_train=false --init_checkpoint=$BERT_BASE_DIR/bert_model.ckpt \
      --bert_config_file=$BERT_BASE_DIR/bert_config.json --vocab_file=$BERT_BASE_DIR/vocab.txt \
      --export_dir=/tmp/fill_mask
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

import dataclasses
from typing import Optional

from absl import flags
from absl import logging

import cli
import cli_setup
import errors
import fill_mask
import modeling
import pretraining
import pretraining_instances
import tokenization
import training_loop

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The original run_pretraining.py's flags and defaults, plus the shared runtime flags."""
  cli.define_common_flags(max_seq_length=128)
  cli.define_eval_flags()
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
  cli.define_dynamic_masking_flags()
  cli.define_tokenizer_flags()
  cli.define_export_flag("the masked-LM head as fill-mask: sentences with [MASK] in, the "
                         "--fill_mask_top_k most probable tokens at each mask out. Without "
                         "--do_train, exports the newest checkpoint of --output_dir or else "
                         "--init_checkpoint, which must hold cls/predictions.")
  flags.DEFINE_integer("fill_mask_top_k", fill_mask.DEFAULT_TOP_K,
                       "With --export_dir: how many tokens the export returns at each [MASK], "
                       "most probable first.")
  flags.DEFINE_string("phase2_input_file", None,
                      "Phase 2 in the same job (the paper trains 90%% of steps at length 128, "
                      "then 10%% at 512): after --num_train_steps steps on --input_file, continue "
                      "for --phase2_steps steps on these records (glob or comma separated) at "
                      "--phase2_max_seq_length, keeping the model, optimizer state and "
                      "global_step. Rerunning the command resumes in whichever phase it stopped.")
  flags.DEFINE_integer("phase2_max_seq_length", 512,
                       "Phase 2's max_seq_length. Must match its data.")
  flags.DEFINE_integer("phase2_max_predictions_per_seq", 80,
                       "Phase 2's max_predictions_per_seq. Must match its data.")
  flags.DEFINE_integer("phase2_steps", 0,
                       "Phase 2's training steps (after --num_train_steps; global_step ends at "
                       "their sum).")
  flags.DEFINE_float("phase2_learning_rate", None,
                     "Phase 2's peak learning rate (default: --learning_rate); its warmup and "
                     "linear decay to 0 span phase 2's steps.")
  flags.DEFINE_integer("phase2_num_warmup_steps", None,
                       "Phase 2's warmup steps (default: 10%% of --phase2_steps).")
  flags.DEFINE_integer("phase2_train_batch_size", None,
                       "Phase 2's global batch size (default: --train_batch_size).")


def _phase2_input_files(bert_config: modeling.BertConfig) -> Optional[list]:
  """Phase 2's input files, checked before phase 1 starts (so a typo does not surface after
  phase 1's days of training), or None without --phase2_input_file."""
  if not FLAGS.phase2_input_file:
    if FLAGS.phase2_steps:
      raise errors.FlagError("--phase2_steps needs --phase2_input_file (phase 2's records)")
    return None
  try:
    input_files = pretraining.expand_input_files(FLAGS.phase2_input_file)
    pretraining.check_input_records(bert_config, input_files, FLAGS.phase2_max_seq_length,
                                    FLAGS.phase2_max_predictions_per_seq,
                                    FLAGS.skip_corrupt_records)
  except ValueError as error:  # Its messages name phase 1's settings.
    message = str(error).replace("`input_file`", "`phase2_input_file`")
    for name in ("max_seq_length", "max_predictions_per_seq"):
      message = message.replace("`%s`=" % name, "`phase2_%s`=" % name)
    raise errors.FlagError(message) from None
  return input_files


def _phase2_config(phase1: training_loop.TrainConfig) -> training_loop.TrainConfig:
  """Phase 2's training config from the --phase2_* flags (defaults from phase 1's)."""
  steps = FLAGS.phase2_steps
  warmup = (FLAGS.phase2_num_warmup_steps if FLAGS.phase2_num_warmup_steps is not None
            else int(0.1 * steps))
  try:
    config = pretraining.phase2_config(
        phase1, steps, FLAGS.phase2_learning_rate or FLAGS.learning_rate, warmup,
        FLAGS.phase2_train_batch_size or FLAGS.train_batch_size)
  except ValueError as error:
    raise errors.FlagError(str(error)) from None
  # Phase 2's record (training_loop's settings check) holds its own length.
  return dataclasses.replace(config, model_settings=dict(
      phase1.model_settings, max_seq_length=FLAGS.phase2_max_seq_length))


def _dynamic_masking():
  """The masking of --dynamic_masking, or None without it."""
  if not FLAGS.dynamic_masking:
    return None
  if not FLAGS.vocab_file:
    raise errors.FlagError("--dynamic_masking needs --vocab_file (the vocab the records were "
                           "made with)")
  try:
    masking = pretraining.DynamicMasking.from_vocab_file(
        FLAGS.vocab_file, FLAGS.masked_lm_prob, FLAGS.max_predictions_per_seq,
        FLAGS.do_whole_word_mask)
  except ValueError as error:
    raise errors.FlagError(str(error)) from error
  logging.info("Dynamic masking: masked_lm_prob=%g, max_predictions_per_seq=%d, whole words: %s",
               masking.masked_lm_prob, masking.max_predictions_per_seq, masking.do_whole_word_mask)
  return masking


def _check_records_vocab(input_files: list, masking: Optional[pretraining.DynamicMasking],
                         tokenizer: Optional[tokenization.FullTokenizer]) -> None:
  """Records made with another vocab than --vocab_file (or --spm_model_file) are refused before
  any work (`pretraining.check_records_vocab`): the run records that vocab as its model's, and
  re-masks and exports fill-mask with its ids. Without either flag the records are taken as they
  are, as the original took them."""
  if masking is not None:
    vocab = masking.vocab
  elif FLAGS.vocab_file or FLAGS.spm_model_file:
    vocab = pretraining_instances.VocabIds.from_tokenizer(
        tokenizer or cli_setup.tokenizer(), _vocab_description(),
        is_sentencepiece=bool(FLAGS.spm_model_file))
  else:
    return
  pretraining.check_records_vocab(input_files, vocab, _vocab_description())


def _vocab_description() -> str:
  if FLAGS.spm_model_file:
    return "`spm_model_file` %s" % FLAGS.spm_model_file
  return "`vocab_file` %s" % FLAGS.vocab_file


def _export_tokenizer(bert_config: modeling.BertConfig) -> Optional[tokenization.FullTokenizer]:
  """The tokenizer of --export_dir's fill-mask signature, checked against the model before any
  training; None without --export_dir."""
  if not FLAGS.export_dir:
    return None
  tokenizer = cli_setup.tokenizer()
  fill_mask.check_settings(bert_config, tokenizer, FLAGS.fill_mask_top_k)
  return tokenizer


def main(_):
  logging.set_verbosity(logging.INFO)
  strategy = cli_setup.setup_strategy()
  cli.require_one_of("do_train", "do_eval", "export_dir")
  bert_config = cli_setup.bert_config()
  tokenizer = _export_tokenizer(bert_config)
  if FLAGS.do_train or FLAGS.do_eval:
    cli.require("output_dir")
    training_loop.check_task_of_recorded_run(FLAGS.output_dir, pretraining.TASK_KIND,
                                             "--output_dir")
    input_files = pretraining.expand_input_files(FLAGS.input_file)
    if not FLAGS.do_train:
      _check_records_vocab(input_files, None, tokenizer)
  result = None
  if FLAGS.do_train:
    config = cli_setup.train_config(schedule_in_steps=True)
    phase2_files = _phase2_input_files(bert_config)
    config2 = _phase2_config(config) if phase2_files else None
    masking = _dynamic_masking()
    for files in (input_files, phase2_files or []):
      _check_records_vocab(files, masking, tokenizer)
    result = pretraining.run_training(
        strategy, bert_config, input_files, config, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq, FLAGS.skip_corrupt_records, masking=masking)
    if phase2_files:
      logging.info("Phase 2: steps %d to %d at max_seq_length %d, batch %d, learning rate %g "
                   "(%d warmup steps)", config2.phase_start_step, config2.num_train_steps,
                   FLAGS.phase2_max_seq_length, config2.train_batch_size, config2.learning_rate,
                   config2.num_warmup_steps)
      result = pretraining.run_training(
          strategy, bert_config, phase2_files, config2, FLAGS.phase2_max_seq_length,
          FLAGS.phase2_max_predictions_per_seq, FLAGS.skip_corrupt_records,
          masking=None if masking is None else dataclasses.replace(
              masking, max_predictions_per_seq=FLAGS.phase2_max_predictions_per_seq))
  if FLAGS.do_eval:
    pretraining.run_evaluation(
        strategy, bert_config, input_files, FLAGS.output_dir, FLAGS.init_checkpoint,
        FLAGS.eval_batch_size, FLAGS.max_eval_steps, FLAGS.max_seq_length,
        FLAGS.max_predictions_per_seq,
        model=result.model if result else None,
        global_step=result.global_step if result else None,
        skip_corrupt_records=FLAGS.skip_corrupt_records,
        allow_partial_init_checkpoint=FLAGS.allow_partial_init_checkpoint)
  if FLAGS.export_dir:
    model = result.model if result else fill_mask.restore_model(
        strategy, bert_config, FLAGS.output_dir, FLAGS.init_checkpoint,
        FLAGS.allow_partial_init_checkpoint)
    fill_mask.export_fill_mask(FLAGS.export_dir, model, tokenizer, FLAGS.max_seq_length,
                               FLAGS.fill_mask_top_k, FLAGS.export_precision,
                               cli_setup.request_limits())


if __name__ == "__main__":
  define_flags()
  cli.run_script(main, check_input_paths=cli.check_model_files)
