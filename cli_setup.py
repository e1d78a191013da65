# coding=utf-8
"""What a script's flags describe, built: the strategy, the BERT config, the tokenizer, the
training config, a fine-tuning task's run; and the validation pass's checks that need them.

A script defines its flags with `cli`'s groups; its `main` builds what they describe with
`setup_strategy`, `bert_config`, `tokenizer` and `train_config` (or `setup_task_script` and
`run_task` for a fine-tuning task). `check_input_paths` is the validation pass's last step for
these scripts (`cli.check_model_files`): the config read (and checked against --max_seq_length
and the vocab), the init checkpoint found, the input file patterns matched, the data and export
directories, TF_CONFIG. Like `cli`, and unlike the library below it, this module reads absl's
FLAGS.
"""

import os
from typing import Any

from absl import flags
from absl import logging

import atomic_files
import checkpoints
import choices
import cli
import distribution
import errors
import export
import file_patterns
import fine_tuning
import modeling
import tokenization
import training_loop

FLAGS = flags.FLAGS


# ------------------------------------------------------------------------------------------------
# What the flags describe.
# ------------------------------------------------------------------------------------------------


def request_limits() -> export.RequestLimits:
  """The export's `RequestLimits` from `--max_request_rows` and `--max_request_tokens`."""
  return export.RequestLimits(FLAGS.max_request_rows, FLAGS.max_request_tokens)


def setup_task_script(task_kind: str) -> tuple:
  """A fine-tuning script's setup: (strategy, tokenizer, BERT config). The strategy comes first
  (a multi-worker strategy must exist before other ops run); `--output_dir` and one of the
  script's actions (`--do_train`, `--do_eval`, `--do_predict`, `--export_dir`) are required, and
  `--output_dir` may not hold a run of another task than `task_kind` (`fine_tuning.Task.kind`),
  checked before the script writes its label list or caches there."""
  strategy = setup_strategy()
  cli.require("output_dir")
  cli.require_one_of(*(name for name in ("do_train", "do_eval", "do_predict", "export_dir")
                       if name in FLAGS))
  training_loop.check_task_of_recorded_run(FLAGS.output_dir, task_kind, "--output_dir")
  _follow_the_run()
  return strategy, tokenizer(), bert_config()


def _follow_the_run() -> None:
  """Settings a run in `--output_dir` made that its command line may leave out.

  `--pack_sequences` not given: a run trained on padded rows (recorded with pack_sequences
  false, or by a version from before packing) goes on with padded rows, so an old command line
  resumes its run as before (packed rows draw other dropout masks: the new default would be
  refused as a changed setting); and `--use_tpu` trains on padded rows (packed rows' shapes
  depend on the batch, a TPU needs one static shape).

  `--keep_best_checkpoint`: a run that kept a best checkpoint (`best/`) is answered by it ever
  after, so training it again goes on keeping it (without the flag, a resumed run would leave an
  older best there to answer for a better model); `--keep_best_checkpoint=false` is refused.
  """
  if "pack_sequences" in FLAGS and not FLAGS["pack_sequences"].present:
    if FLAGS.use_tpu:
      FLAGS.pack_sequences = False
    elif training_loop.recorded_setting(FLAGS.output_dir, "pack_sequences") is False:
      logging.info("--output_dir=%s holds a run trained without packing: going on without it "
                   "(--pack_sequences not given)", FLAGS.output_dir)
      FLAGS.pack_sequences = False
  if "keep_best_checkpoint" not in FLAGS or FLAGS.keep_best_checkpoint or not FLAGS.do_train:
    return
  best = checkpoints.best_checkpoint(FLAGS.output_dir)
  if not best:
    return
  if FLAGS["keep_best_checkpoint"].present:
    raise errors.FlagError(
        "--keep_best_checkpoint=false, but --output_dir=%s keeps its best checkpoint (%s), "
        "which answers for the run: train it with --keep_best_checkpoint, or use another "
        "--output_dir" % (FLAGS.output_dir, best))
  logging.info("--output_dir=%s keeps its best checkpoint: training goes on keeping it "
               "(--keep_best_checkpoint)", FLAGS.output_dir)
  FLAGS.keep_best_checkpoint = True


def setup_strategy():
  """Applies `--mixed_precision` and returns the strategy the flags ask for.

  Call it first in a script's main(): a multi-worker strategy must exist before other ops run.
  """
  strategy = distribution.make_strategy(
      FLAGS.distribution_strategy,
      use_tpu=FLAGS.use_tpu,
      tpu_address=FLAGS.tpu_name or FLAGS.master,
      tpu_zone=FLAGS.tpu_zone,
      gcp_project=FLAGS.gcp_project,
      num_tpu_cores=FLAGS.num_tpu_cores)
  distribution.set_precision(FLAGS.mixed_precision)
  return strategy


def bert_config() -> modeling.BertConfig:
  """`--bert_config_file`, checked against the config beside the model it is used with
  (`modeling.check_config_of_model_directory`) and `--max_seq_length` where the script has it,
  after checking that `--init_checkpoint` is not a checkpoint its run would pass over."""
  _check_init_checkpoint_is_used()
  cli.require("bert_config_file")
  config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  for flag, directory in _model_directories().items():
    modeling.check_config_of_model_directory(config, FLAGS.bert_config_file, directory,
                                             "`%s`" % flag)
  if cli.flag_value("max_seq_length") is None:
    return config
  try:
    config.check_max_seq_length(FLAGS.max_seq_length)
  except ValueError as error:
    raise errors.FlagError("--max_seq_length: %s" % error) from None
  return config


def tokenizer() -> tokenization.FullTokenizer:
  """The tokenizer of `--vocab_file` or `--spm_model_file`, after checking `--do_lower_case`
  against `--init_checkpoint`'s name as the original did (the validation pass checked it against
  a converted model's recorded casing: `check_input_paths`)."""
  if not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise errors.FlagError("--vocab_file (or --spm_model_file) is required")
  if FLAGS.vocab_file and FLAGS.spm_model_file:
    logging.warning("--vocab_file=%s is not read: --spm_model_file=%s tokenizes instead",
                    FLAGS.vocab_file, FLAGS.spm_model_file)
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  full_tokenizer = tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case,
                                              FLAGS.spm_model_file)
  if not FLAGS.spm_model_file:
    tokenization.warn_of_casing_mismatch(full_tokenizer.vocab, FLAGS.do_lower_case,
                                         FLAGS.vocab_file)
  return full_tokenizer


def _check_init_checkpoint_is_used() -> None:
  """Raises FlagError when `--init_checkpoint` is a checkpoint of `--output_dir`'s own run other
  than the one that run answers with (an older step): the script would resume, evaluate,
  predict or export with that one instead (`checkpoints.checkpoint_of_run_passed_over`)."""
  init_checkpoint, output_dir = cli.flag_value("init_checkpoint"), cli.flag_value("output_dir")
  if not init_checkpoint:
    return
  used = checkpoints.checkpoint_of_run_passed_over(init_checkpoint, output_dir)
  if used:
    raise errors.FlagError(
        "--init_checkpoint=%s is a checkpoint of --output_dir=%s, whose run resumes, evaluates, "
        "predicts and exports with %s instead: to use %s, pass another --output_dir" %
        (init_checkpoint, output_dir, used, os.path.basename(init_checkpoint.rstrip("/"))))


def _model_directories() -> dict:
  """{flag: directory} of the model the script reads: `--init_checkpoint`'s directory (or the
  converter's `--model_garden_checkpoint`'s), and for a training script run without training
  `--output_dir` (the model evaluated, predicted or exported is its own; the converter's
  `--output_dir` is only written)."""
  directories = {name: checkpoints.checkpoint_directory(cli.flag_value(name))
                 for name in ("init_checkpoint", "model_garden_checkpoint")
                 if cli.flag_value(name)}
  if cli.flag_value("do_train") is False:
    directories["output_dir"] = cli.flag_value("output_dir")
  return {flag: directory for flag, directory in directories.items() if directory}


def _check_settings_of_converted_model() -> None:
  """Raises FlagError when `--do_lower_case` or `--vocab_file` differs from what convert_checkpoint
  recorded beside the model it wrote (the source's tokenizer: its casing and the vocab it wrote):
  another casing or another vocab of the same size would give other ids than the model was
  trained on; and, read without training, when `--multi_label` differs from the classifier it
  recorded (a softmax over a multi-label model's logits answers other probabilities)."""
  for flag, directory in _model_directories().items():
    mark = atomic_files.read_files_mark(directory, choices.CONVERTED_MARK_NAME)
    mark_file = os.path.join(directory, choices.CONVERTED_MARK_NAME)
    recorded = mark.get("do_lower_case")
    if recorded is not None and cli.flag_value("do_lower_case") not in (None, recorded):
      raise errors.FlagError(
          "--do_lower_case=%s, but convert_checkpoint recorded the model in --%s=%s as %s "
          "(%s): pass --do_lower_case=%s" % (
              str(cli.flag_value("do_lower_case")).lower(), flag, directory,
              "lowercased" if recorded else "cased", mark_file, str(recorded).lower()))
    vocab_flag = "spm_model_file" if cli.flag_value("spm_model_file") else "vocab_file"
    if mark.get("vocab") and cli.flag_value(vocab_flag) and tokenization.tokens_fingerprint(
        cli.flag_value("vocab_file"), cli.flag_value("spm_model_file")) != mark["vocab"]:
      raise errors.FlagError(
          "--%s=%s is not the vocab convert_checkpoint wrote with the model in --%s=%s "
          "(%s records %s): pass that model's vocab.txt" % (
              vocab_flag, cli.flag_value(vocab_flag), flag, directory, mark_file, mark["vocab"]))
    multi_label = mark.get("multi_label")
    if (multi_label is not None and cli.flag_value("multi_label") not in (None, multi_label)
        and not cli.flag_value("do_train")):
      raise errors.FlagError(
          "--multi_label=%s, but convert_checkpoint recorded the model in --%s=%s as a %s "
          "classifier (%s): pass --multi_label=%s" % (
              str(cli.flag_value("multi_label")).lower(), flag, directory,
              "multi-label (a sigmoid per label)" if multi_label else "single-label (softmax)",
              mark_file, str(multi_label).lower()))
    _check_config_of_converted_model(mark.get("bert_config"), "--%s=%s" % (flag, directory),
                                     mark_file)


def _check_config_of_converted_model(recorded: Any, model: str, mark_file: str) -> None:
  """Raises FlagError when `--bert_config_file` computes otherwise than the config that
  convert_checkpoint recorded for the model (`recorded`: its COMPUTATION_FIELDS): the converted
  bert_config.json edited in place (another activation keeps every shape) would make the model
  compute something else."""
  config_file = cli.flag_value("bert_config_file")
  if not isinstance(recorded, dict) or not config_file:
    return
  differences = modeling.computation_differences(
      modeling.BertConfig.from_json_file(config_file), recorded)
  if differences:
    raise errors.FlagError(
        "--bert_config_file=%s has %s: convert_checkpoint recorded the model in %s as made with "
        "the latter (%s); pass a config with its values" % (
            config_file, "; ".join(differences), model, mark_file))



# The shared flags that are TrainConfig settings of the same name.
_TRAIN_CONFIG_FLAGS = ("output_dir", "learning_rate", "optimizer", "lr_schedule",
                       "train_batch_size", "gradient_accumulation_steps", "init_checkpoint",
                       "save_checkpoints_steps", "iterations_per_loop", "keep_checkpoint_max",
                       "use_xla", "random_seed", "allow_partial_init_checkpoint",
                       "allow_changed_settings")
# The same, where only some scripts define them.
_OPTIONAL_TRAIN_CONFIG_FLAGS = ("eval_every_steps", "early_stopping_patience",
                                "early_stopping_metric", "keep_best_checkpoint", "pack_sequences")


def train_config(schedule_in_steps: bool = False) -> training_loop.TrainConfig:
  """The training config the shared flags describe. Fine-tuning scripts give epochs and a warmup
  proportion (the loop turns them into steps from the number of examples); pretraining gives
  steps (`schedule_in_steps`: --num_train_steps, --num_warmup_steps)."""
  if schedule_in_steps:
    schedule = dict(num_train_steps=FLAGS.num_train_steps, num_warmup_steps=FLAGS.num_warmup_steps)
  else:
    schedule = dict(num_train_epochs=FLAGS.num_train_epochs,
                    warmup_proportion=FLAGS.warmup_proportion)
  return training_loop.TrainConfig(
      model_settings=_model_settings(), **schedule,
      **{name: FLAGS[name].value for name in _TRAIN_CONFIG_FLAGS},
      **{name: FLAGS[name].value for name in _OPTIONAL_TRAIN_CONFIG_FLAGS if name in FLAGS})


def _model_settings() -> dict:
  """What shapes the trained model besides the training config: `--bert_config_file`'s values,
  `--max_seq_length`, the vocab's content (`vocab`: its SHA-256), `--do_lower_case`,
  `--task_name`, `--multi_label`, `--version_2_with_negative` and the batches' composition
  (`--bucket_by_length`, `--group_by_length`, pretraining's `--dynamic_masking` with its
  masking flags). Recorded with
  the run; a resume must match them, and evaluation, prediction and export must use the run's
  (`training_loop.check_model_settings_of_recorded_run`).
  """
  settings = {}
  if cli.flag_value("max_seq_length") is not None:
    settings["max_seq_length"] = FLAGS.max_seq_length
  if cli.flag_value("task_name"):
    settings["task_name"] = FLAGS.task_name.lower()
  if cli.flag_value("multi_label") is not None:
    settings["multi_label"] = FLAGS.multi_label
  if cli.flag_value("version_2_with_negative") is not None:  # Whether null scores answer.
    settings["version_2_with_negative"] = FLAGS.version_2_with_negative
  if cli.flag_value("bucket_by_length") is not None:  # What a training batch holds, and its shape.
    settings["bucket_by_length"] = cli.bucket_by_length()
  if cli.flag_value("group_by_length") is not None:
    settings["group_by_length"] = FLAGS.group_by_length
  if cli.flag_value("dynamic_masking") is not None:  # What pretraining's batches hold.
    settings["dynamic_masking"] = FLAGS.dynamic_masking
    if FLAGS.dynamic_masking:
      settings.update(masked_lm_prob=FLAGS.masked_lm_prob,
                      do_whole_word_mask=FLAGS.do_whole_word_mask)
  if FLAGS.bert_config_file:
    settings["bert_config"] = modeling.BertConfig.from_json_file(FLAGS.bert_config_file).to_dict()
  # The tokenizer's: a SentencePiece model tokenizes instead of --vocab_file (FullTokenizer).
  vocab = cli.flag_value("spm_model_file") or cli.flag_value("vocab_file")
  if vocab:
    settings["vocab"] = tokenization.vocab_fingerprint(vocab)
    settings["do_lower_case"] = FLAGS.do_lower_case
  return settings


# The model settings of a task head's reading, free when training starts from a checkpoint.
_HEAD_SETTINGS = ("task_name", "multi_label", "version_2_with_negative")


def check_models_of_recorded_runs() -> None:
  """A model read from a training run's directory must be the one the run trained
  (`training_loop.check_model_settings_of_recorded_run` against the flags' settings, with
  `--do_lower_case` wherever the script has it). An `--init_checkpoint` that training starts from
  is compared on what its encoder computes (config, vocab, casing); one used as it is
  (prediction, export, extract_features, convert_checkpoint), and an `--output_dir` read without
  training, on the task too."""
  settings = _model_settings()
  if cli.flag_value("do_lower_case") is not None:
    settings["do_lower_case"] = FLAGS.do_lower_case
  training = bool(cli.flag_value("do_train"))
  if cli.flag_value("init_checkpoint"):
    encoder_settings = {name: value for name, value in settings.items()
                        if name not in _HEAD_SETTINGS}  # A new head may differ.
    training_loop.check_model_settings_of_recorded_run(
        _model_directories()["init_checkpoint"], encoder_settings if training else settings,
        "--init_checkpoint")
    if training:
      _warn_of_a_head_of_another_task(_model_directories()["init_checkpoint"], settings)
  if cli.flag_value("output_dir") and "do_train" in FLAGS and not training:
    training_loop.check_model_settings_of_recorded_run(FLAGS.output_dir, settings, "--output_dir")


def _warn_of_a_head_of_another_task(run_dir: str, settings: dict) -> None:
  """Training from a fine-tuned run of another task (its recorded `task_name`): its head, where its
  shapes fit (two labels of SST-2 for MRPC's two), starts this task's head, as in the original,
  so its outputs begin as the other task's labels. Said, since the log otherwise shows only that
  every variable loaded."""
  recorded = training_loop.recorded_setting(run_dir, "task_name")
  if recorded and settings.get("task_name") and recorded != settings["task_name"]:
    logging.warning("--init_checkpoint=%s is a model fine-tuned for --task_name=%s: where its "
                    "head's shapes fit this task's, it starts this %s run's head (as in the "
                    "original), its outputs first meaning %s's labels", run_dir, recorded,
                    settings["task_name"], recorded)


def run_task(task: fine_tuning.Task, strategy) -> list:
  """Runs a fine-tuning task as the flags ask (`fine_tuning.run`); returns the summary. A script
  without --do_eval (run_squad) evaluates during training with --predict_batch_size."""
  has_eval = "do_eval" in FLAGS
  return fine_tuning.run(
      task, strategy, train_config(), do_train=FLAGS.do_train,
      do_eval=has_eval and FLAGS.do_eval, do_predict=FLAGS.do_predict,
      eval_batch_size=FLAGS.eval_batch_size if has_eval else FLAGS.predict_batch_size,
      predict_batch_size=FLAGS.predict_batch_size, export_dir=FLAGS.export_dir,
      export_precision=FLAGS.export_precision, export_limits=request_limits())


# ------------------------------------------------------------------------------------------------
# The checks of the validation pass that read the config, checkpoint and TF_CONFIG.
# ------------------------------------------------------------------------------------------------


def check_input_paths() -> None:
  """The files the flags of TensorFlow's scripts name: the config (read, and checked against
  --max_seq_length where the script has it), the init checkpoint (or the Model Garden checkpoint
  to convert), the input file patterns, the data directory, the export directory
  (`export.check_export_dir`), the TF_CONFIG variable, and that a training run's model, or a
  converted one, is read with its settings (`check_models_of_recorded_runs`,
  `_check_settings_of_converted_model`) and with the vocab beside it
  (`_check_vocab_of_model_directories`)."""
  distribution.check_tf_config()
  if cli.flag_value("bert_config_file"):
    _check_vocab_fits_model(bert_config())
  for name in ("init_checkpoint", "model_garden_checkpoint"):
    if cli.flag_value(name):
      prefix = checkpoints.resolve_checkpoint_path(cli.flag_value(name))
      if name == "init_checkpoint":  # Model Garden's are object-based; it converts them.
        checkpoints.check_name_based(checkpoints.open_checkpoint(prefix), prefix)
  for name in ("input_file", "phase2_input_file"):
    if cli.flag_value(name):
      for path in file_patterns.expand(cli.flag_value(name), "--" + name):
        atomic_files.recover_interrupted_publish(path)  # Never half a unit of records.
  data_dir = cli.flag_value("data_dir")
  if data_dir and not file_patterns.is_remote(data_dir) and not os.path.isdir(data_dir):
    raise errors.FlagError("--data_dir=%s is not a directory" % data_dir)
  if cli.flag_value("export_dir"):
    export.check_export_dir(cli.flag_value("export_dir"), cli.flag_value("output_dir"),
                            tf_hub_pair=cli.flag_value("export_format") == "tf_hub")
  check_models_of_recorded_runs()
  _check_settings_of_converted_model()
  _check_vocab_of_model_directories()


def _check_vocab_of_model_directories() -> None:
  """The tokenizer's vocab (`--vocab_file`, or `--spm_model_file`'s pieces) against the vocab.txt
  released or converted beside each model the script reads
  (`tokenization.check_vocab_of_model_directory`): another token at one of its ids reads that id
  as another word."""
  vocab_file, spm_model_file = cli.flag_value("vocab_file"), cli.flag_value("spm_model_file")
  if not (vocab_file or spm_model_file):
    return
  for flag, directory in _model_directories().items():
    tokenization.check_vocab_of_model_directory(vocab_file, directory, "--" + flag,
                                                spm_model_file)


def _check_vocab_fits_model(config: modeling.BertConfig) -> None:
  """`--vocab_file` (or `--spm_model_file`), where given with the config, is the model's vocab
  (`tokenization.check_vocab_fits_model`) with the special tokens the flags need: [MASK] too for
  --dynamic_masking and for run_pretraining's fill-mask export."""
  vocab_file, spm_model_file = cli.flag_value("vocab_file"), cli.flag_value("spm_model_file")
  if not (vocab_file or spm_model_file):
    return
  special_tokens = tokenization.INPUT_SPECIAL_TOKENS
  if cli.flag_value("dynamic_masking") or (
      "fill_mask_top_k" in FLAGS and cli.flag_value("export_dir")):
    special_tokens += (tokenization.MASK_TOKEN,)
  try:
    tokenization.check_vocab_fits_model(vocab_file, config.vocab_size, spm_model_file,
                                        special_tokens)
  except tokenization.VocabError as error:
    raise errors.FlagError("--%s: %s (--bert_config_file=%s)" % (
        "spm_model_file" if spm_model_file else "vocab_file", error,
        FLAGS.bert_config_file)) from None
