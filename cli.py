# coding=utf-8
"""The preamble every script shares: its flags, and the setup they describe.

The original's scripts each defined the same flags and repeated the same setup. Here a script
defines its flags in `define_flags()`, called from `if __name__ == "__main__"` (so several scripts
can be imported into one process, as the tests do), from the shared groups below plus its own; its
`main` then builds what the flags describe with `setup_strategy`, `bert_config`, `tokenizer` and
`train_config`; `run_script` runs it after the validation pass (`errors.check_flags` plus the
checks here that read the config, checkpoint and TF_CONFIG) and ends a bad flag, a bad input file
or a failed run in one line (`<script>: error: <message>`) instead of a traceback.

Shared definitions are idempotent per name (`_define`), so a test importing two scripts, or a
script calling two groups that share a flag, defines each flag once.
"""

import hashlib
import os
from typing import Any, Callable, Optional

from absl import flags
import tensorflow as tf

import checkpoints
import distribution
import errors
import export
import file_patterns
import fine_tuning
import modeling
import optimization
import tokenization
import training_loop

FLAGS = flags.FLAGS


# ------------------------------------------------------------------------------------------------
# Flag groups.
# ------------------------------------------------------------------------------------------------


def _define(flag_values: flags.FlagValues, kind: str, name: str, default, help_text: str,
            **kwargs) -> None:
  """Defines one flag with `flags.DEFINE_<kind>` in `flag_values`, unless it exists already.

  Checking each name (not each group) keeps the definitions idempotent when another program in
  the same process (e.g. extract_features in a test run) defined some of these flags first.
  """
  if name in flag_values:
    return
  getattr(flags, "DEFINE_" + kind)(name, default, help=help_text, flag_values=flag_values,
                                   **kwargs)


def define_tpu_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the original's TPU flags (`use_tpu`, `tpu_name`, `tpu_zone`, `gcp_project`,
  `master`, `num_tpu_cores`) with its defaults."""
  fv = flag_values
  _define(fv, "bool", "use_tpu", False, "Whether to run on a TPU (TPUStrategy).")
  _define(fv, "string", "tpu_name", None,
          "The Cloud TPU to use: its name or a grpc://ip:port address.")
  _define(fv, "string", "tpu_zone", None,
          "GCE zone of the Cloud TPU; looked up from metadata when not given.")
  _define(fv, "string", "gcp_project", None,
          "GCP project of the Cloud TPU; looked up from metadata when not given.")
  _define(fv, "string", "master", None, "TPU master address, used when --tpu_name is not given.")
  _define(fv, "integer", "num_tpu_cores", 8,
          "Number of TPU cores expected (checked against the TPU's topology).")


def define_runtime_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the flags this reimplementation adds: strategy, XLA, precision, checkpoints, seed."""
  fv = flag_values
  _define(fv, "enum", "distribution_strategy", "auto",
          "How to spread training over devices. auto: tpu with --use_tpu, multi_worker_mirrored "
          "when TF_CONFIG names several tasks, mirrored with several GPUs, else one_device. "
          "mirrored uses all GPUs, or all logical CPU devices when there is no GPU.",
          enum_values=distribution.STRATEGIES)
  _define(fv, "bool", "use_xla", False,
          "Compile the forward and backward pass with XLA (one replica only; TPUs always "
          "compile).")
  _define(fv, "enum", "mixed_precision", "float32",
          "Compute dtype. float16 adds dynamic loss scaling; bfloat16 suits TPUs and CPUs with "
          "AVX512-BF16. Variables and checkpoints stay float32.",
          enum_values=distribution.PRECISIONS)
  _define(fv, "integer", "keep_checkpoint_max", 5,
          "How many of the most recent training checkpoints to keep.")
  _define(fv, "integer", "random_seed", 12345,
          "Seed for initialization, dropout and input shuffling (the same on every worker, so "
          "workers see one consistent stream of global batches).")


def define_model_flags(max_seq_length: int = 128,
                       flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `bert_config_file`, `init_checkpoint` and `max_seq_length` (the script's default)."""
  fv = flag_values
  _define(fv, "string", "bert_config_file", None,
          "The config json file of the pre-trained BERT model (architecture).")
  _define(fv, "string", "init_checkpoint", None,
          "Initial checkpoint (usually from a pre-trained BERT model).")
  _define(fv, "integer", "max_seq_length", max_seq_length,
          "Maximum total input length in WordPiece tokens after tokenization; longer inputs are "
          "truncated, shorter ones padded.")


def define_common_flags(max_seq_length: int = 128,
                        flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the flags every training script shares, with the original's defaults.

  Also defines the TPU and runtime flags. `max_seq_length` is the script's default (128 for
  pretraining and classification, 384 for SQuAD).
  """
  define_tpu_flags(flag_values)
  define_runtime_flags(flag_values)
  define_model_flags(max_seq_length, flag_values)
  fv = flag_values
  _define(fv, "bool", "allow_partial_init_checkpoint", False,
          "Accept an --init_checkpoint that lacks some of the encoder's variables (they keep "
          "their random initial values). Without it that is an error listing them.")
  _define(fv, "string", "output_dir", None,
          "Where checkpoints, summaries and results are written.")
  _define(fv, "bool", "allow_changed_settings", False,
          "Resume a run in --output_dir whose recorded training settings (batch size, learning "
          "rate, schedule, optimizer, model config, max_seq_length, ...) differ from these flags, "
          "with a WARNING listing the differences. Without it such a resume is an error naming "
          "each one.")
  _define(fv, "bool", "do_train", False, "Whether to run training.")
  _define(fv, "integer", "train_batch_size", 32,
          "Global batch size for training: the examples of one optimizer update.")
  _define(fv, "integer", "gradient_accumulation_steps", 1,
          "Split each training batch into this many micro-batches run one after the other and "
          "update once with their summed gradients: the same training as without it (batch, "
          "schedule and checkpoints unchanged), with the activation memory of a "
          "--train_batch_size / gradient_accumulation_steps batch.")
  _define(fv, "float", "learning_rate", 5e-5, "The initial learning rate for Adam.")
  _define(fv, "enum", "optimizer", "bert_adam",
          "bert_adam: the original's AdamW without bias correction (its results exactly; may "
          "collapse at rates above 1e-4). adamw: the same with bias correction (Keras's and "
          "Hugging Face's AdamW), for rates tuned for it. lamb: LAMB, AdamW scaled per variable "
          "by a trust ratio, for large-batch pretraining. All three decay weights except "
          "LayerNorm and bias variables and save their moments as <name>/adam_m, <name>/adam_v.",
          enum_values=optimization.OPTIMIZERS)
  _define(fv, "enum", "lr_schedule", "original",
          "Learning rate schedule: linear warmup to --learning_rate, then linear decay to 0 at the "
          "last step. original: the decay counts from step 0 (the original's; at the end of "
          "warmup the rate is already below the peak). linear: the decay counts from the end of "
          "warmup (Hugging Face's get_linear_schedule_with_warmup; with --optimizer=adamw it "
          "reproduces a Hugging Face recipe).",
          enum_values=optimization.SCHEDULES)
  _define(fv, "integer", "save_checkpoints_steps", 1000, "How often to save a checkpoint.")
  _define(fv, "integer", "iterations_per_loop", 1000,
          "How many steps to run per call into the graph (and per progress line); on one "
          "machine a call also ends after about a minute, so that progress shows.")


def define_fine_tuning_flags(max_seq_length: int = 128,
                             flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines the common flags plus the fine-tuning schedule (`num_train_epochs`=3.0,
  `warmup_proportion`=0.1), as run_classifier and run_squad had."""
  define_common_flags(max_seq_length, flag_values)
  _define(flag_values, "float", "num_train_epochs", 3.0,
          "Total number of training epochs to perform.")
  _define(flag_values, "float", "warmup_proportion", 0.1,
          "Proportion of training to perform linear learning rate warmup for, e.g. 0.1 = 10% of "
          "training.")
  define_bucketing_flag(flag_values)
  define_eval_during_training_flags(flag_values)


def define_bucketing_flag(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `bucket_by_length` (default true: pad batches only to a length bucket) and
  `group_by_length` (default false: training batches keep the original's composition)."""
  _define(flag_values, "bool", "bucket_by_length", True,
          "Pad each batch only to the smallest of 4, 8, ..., 32 (steps of 4), 40, ..., 64 (steps "
          "of 8), 96, 128, ... (steps of 32), max_seq_length that holds its longest example, "
          "instead of to --max_seq_length (same results, less work on short texts); evaluation "
          "and prediction also batch examples of similar length together. false reproduces the "
          "original's fixed-length batches. Off with --use_tpu (static shapes).")
  _define(flag_values, "bool", "group_by_length", False,
          "With --bucket_by_length, also batch *training* examples of similar length together "
          "(faster on short texts, but a text's length then decides its batch mates, and "
          "fine-tuning learned worse and less reliably that way: see benchmarks/RESULTS.md). "
          "false: each training batch holds what the original's would (random examples), padded "
          "to the length bucket of its longest example.")


def define_packing_flag(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `pack_sequences` (training of the tasks whose heads read each sequence's [CLS] or
  tokens: run_classifier, run_ner, run_multiple_choice)."""
  _define(flag_values, "bool", "pack_sequences", False,
          "Pack the sequences of each training batch into shared rows, each sequence attending "
          "only to itself with its own positions (the same examples per step and the same math "
          "as padded batches, fewer positions computed; see packing.py).")


def bucket_by_length(flag_values: flags.FlagValues = FLAGS) -> bool:
  """`--bucket_by_length`, off on TPUs (they need every batch of one static shape)."""
  return flag_values.bucket_by_length and not flag_values.use_tpu


def define_eval_during_training_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines evaluation on the dev set during training, early stopping and the best checkpoint
  (every fine-tuning script; with any of them set, the dev set is also evaluated at each epoch
  end and at the last step)."""
  fv = flag_values
  _define(fv, "integer", "eval_every_steps", 0,
          "Evaluate on the dev set every this many training steps (and at each epoch end and the "
          "last step), logging the metrics and writing them for TensorBoard to <output_dir>/eval. "
          "0: evaluate during training only if an option below asks for it.")
  _define(fv, "integer", "early_stopping_patience", 0,
          "Stop training after this many evaluations without an improvement of "
          "--early_stopping_metric (0: never stop early). Kept across a resume.")
  _define(fv, "string", "early_stopping_metric", None,
          "The evaluation metric for early stopping and --keep_best_checkpoint, e.g. "
          "eval_accuracy, eval_f1, f1 or exact_match (SQuAD); higher is better unless its name "
          "contains 'loss'. Default: the task's (eval_accuracy; eval_f1 for NER; f1 for SQuAD).")
  _define(fv, "bool", "keep_best_checkpoint", False,
          "Keep the model of the best evaluation as <output_dir>/best/model.ckpt-<step> with its "
          "eval_results.txt; then --do_eval, --do_predict and --export_dir use it.")


def define_eval_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `do_eval` and `eval_batch_size` (default 8, global)."""
  _define(flag_values, "bool", "do_eval", False, "Whether to run evaluation.")
  _define(flag_values, "integer", "eval_batch_size", 8, "Global batch size for evaluation.")


def define_predict_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `do_predict` and `predict_batch_size` (default 8, global)."""
  _define(flag_values, "bool", "do_predict", False, "Whether to run prediction.")
  _define(flag_values, "integer", "predict_batch_size", 8, "Global batch size for prediction.")


def define_task_flags(max_seq_length: int, export_what: str, with_eval: bool = True,
                      flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines a fine-tuning script's shared flags: fine-tuning (schedule in epochs), eval (unless
  the task has no --do_eval, as run_squad), predict, tokenizer and `export_dir` (`export_what`
  says what the export serves)."""
  define_fine_tuning_flags(max_seq_length, flag_values)
  if with_eval:
    define_eval_flags(flag_values)
  define_predict_flags(flag_values)
  define_tokenizer_flags(flag_values)
  define_export_flag(export_what, flag_values)


def define_tokenizer_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `vocab_file`, `do_lower_case` (default True, as the original) and `spm_model_file`."""
  fv = flag_values
  _define(fv, "string", "vocab_file", None,
          "The vocabulary file that the BERT model was trained on.")
  _define(fv, "bool", "do_lower_case", True,
          "Whether to lower case the input text. Should be True for uncased models and False for "
          "cased models.")
  _define(fv, "string", "spm_model_file", None,
          "A SentencePiece model to tokenize with instead of --vocab_file (ALBERT-style models).")


def define_dynamic_masking_flags(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines run_pretraining's `dynamic_masking` and the masking flags it shares with
  create_pretraining_data.py (`vocab_file`, `masked_lm_prob`=0.15, `do_whole_word_mask`=False).
  Through `_define`, so a process that also defined the tokenizer flags keeps one `vocab_file`."""
  fv = flag_values
  _define(fv, "bool", "dynamic_masking", False,
          "Draw new masked positions each time a record is read (as RoBERTa), instead of "
          "the masks stored in the records: the stored masks are undone from "
          "masked_lm_ids, so any pretraining records work (the original's too). Needs "
          "--vocab_file; uses --masked_lm_prob, --max_predictions_per_seq and "
          "--do_whole_word_mask as create_pretraining_data.py does. Eval keeps the "
          "stored masks.")
  _define(fv, "string", "vocab_file", None,
          "The vocab the model and its records were made with: --dynamic_masking reads the ids "
          "of [CLS], [SEP], [MASK], random replacements and ## word pieces from it, "
          "--export_dir tokenizes with it.")
  _define(fv, "float", "masked_lm_prob", 0.15,
          "With --dynamic_masking: masked LM probability.")
  _define(fv, "bool", "do_whole_word_mask", False,
          "With --dynamic_masking: mask all of a word's pieces together.")


def define_export_flag(what: str, flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `export_dir` (where to write a versioned SavedModel for TF Serving),
  `export_precision` (its compute dtype) and `max_request_rows`, `max_request_tokens` (the largest
  request it serves, `export.RequestLimits`)."""
  _define(flag_values, "string", "export_dir", None,
          "If set, export a SavedModel for TF Serving to <export_dir>/<version>/: %s" % what)
  _define(flag_values, "enum", "export_precision", "float32",
          "Compute dtype of the export: bfloat16 runs the matmuls in bfloat16 (weights stay "
          "float32 in the SavedModel, outputs float32); faster on CPUs with AVX512_BF16 or AMX, "
          "slower where bfloat16 is emulated (AVX2 only). README: Serving.",
          enum_values=export.PRECISIONS)
  _define(flag_values, "integer", "max_request_rows", export.DEFAULT_MAX_REQUEST_ROWS,
          "The most rows (texts, questions, id rows) one request to the export may hold; more "
          "fail with InvalidArgument. README: Serving.")
  _define(flag_values, "integer", "max_request_tokens", export.DEFAULT_MAX_REQUEST_TOKENS,
          "The most token positions (rows x padded sequence length) one request to the export "
          "may make the model compute on; more fail with InvalidArgument. Memory per request "
          "grows with it: benchmarks/RESULTS.md.")


def request_limits() -> export.RequestLimits:
  """The export's `RequestLimits` from `--max_request_rows` and `--max_request_tokens`."""
  return export.RequestLimits(FLAGS.max_request_rows, FLAGS.max_request_tokens)


# ------------------------------------------------------------------------------------------------
# Checks and setup.
# ------------------------------------------------------------------------------------------------


def require(*names: str, reason: str = "") -> None:
  """Raises FlagError unless every named flag has a value (`reason`: when it is needed)."""
  for name in names:
    if FLAGS[name].value in (None, ""):
      raise errors.FlagError("--%s is required%s" % (name, reason))


def require_one_of(*names: str) -> None:
  """Raises FlagError unless at least one of the named (boolean or string) flags is set."""
  if not any(FLAGS[name].value for name in names):
    raise errors.FlagError("At least one of %s must be set" % ", ".join("--" + n for n in names))


def define_data_dir_flag(what: str, flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `data_dir`, the directory holding `what`."""
  _define(flag_values, "string", "data_dir", None, "Directory with the data files (%s)." % what)


def define_skip_bad_rows_flag(flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `skip_bad_rows` (default false; `task_files.BadRows`)."""
  _define(flag_values, "bool", "skip_bad_rows", False,
          "Skip (and count) rows of the training and evaluation files that cannot be used (wrong "
          "number of columns, empty or unknown label) instead of stopping with an error naming "
          "the file and line. Rows of the test file are never skipped: test_results.tsv has one "
          "line per test row, in order.")


def define_data_file_flags(what: str, train_file: str, dev_file: str, test_file: str,
                           flag_values: flags.FlagValues = FLAGS) -> None:
  """Defines `data_dir` (holding `what`) and the names of its `train_file`, `dev_file` (for
  --do_eval) and `test_file` (for --do_predict), with the given defaults."""
  fv = flag_values
  define_data_dir_flag(what, fv)
  _define(fv, "string", "train_file", train_file, "Training file name in --data_dir.")
  _define(fv, "string", "dev_file", dev_file, "Evaluation (--do_eval) file name in --data_dir.")
  _define(fv, "string", "test_file", test_file,
          "Prediction (--do_predict) file name in --data_dir; labels not needed.")


def setup_task_script() -> tuple:
  """A fine-tuning script's setup: (strategy, tokenizer, BERT config). The strategy comes first
  (a multi-worker strategy must exist before other ops run); `--output_dir` and one of the
  script's actions (`--do_train`, `--do_eval`, `--do_predict`, `--export_dir`) are required."""
  strategy = setup_strategy()
  require("output_dir")
  require_one_of(*(name for name in ("do_train", "do_eval", "do_predict", "export_dir")
                   if name in FLAGS))
  return strategy, tokenizer(), bert_config()


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
  """`--bert_config_file`, checked against `--max_seq_length` where the script has it."""
  require("bert_config_file")
  config = modeling.BertConfig.from_json_file(FLAGS.bert_config_file)
  if errors.flag_value("max_seq_length") is None:
    return config
  try:
    config.check_max_seq_length(FLAGS.max_seq_length)
  except ValueError as error:
    raise errors.FlagError("--max_seq_length: %s" % error) from None
  return config


def tokenizer() -> tokenization.FullTokenizer:
  """The tokenizer of `--vocab_file` or `--spm_model_file`, after checking `--do_lower_case`
  against `--init_checkpoint`'s name as the original did."""
  if not (FLAGS.vocab_file or FLAGS.spm_model_file):
    raise errors.FlagError("--vocab_file (or --spm_model_file) is required")
  tokenization.validate_case_matches_checkpoint(FLAGS.do_lower_case, FLAGS.init_checkpoint)
  return tokenization.FullTokenizer(FLAGS.vocab_file, FLAGS.do_lower_case, FLAGS.spm_model_file)


def train_config(schedule_in_steps: bool = False) -> training_loop.TrainConfig:
  """The training config the shared flags describe. Fine-tuning scripts give epochs and a warmup
  proportion (the loop turns them into steps from the number of examples); pretraining gives
  steps (`schedule_in_steps`: --num_train_steps, --num_warmup_steps)."""
  return training_loop.TrainConfig(
      output_dir=FLAGS.output_dir,
      num_train_steps=FLAGS.num_train_steps if schedule_in_steps else None,
      num_warmup_steps=FLAGS.num_warmup_steps if schedule_in_steps else None,
      num_train_epochs=None if schedule_in_steps else FLAGS.num_train_epochs,
      warmup_proportion=None if schedule_in_steps else FLAGS.warmup_proportion,
      learning_rate=FLAGS.learning_rate,
      optimizer=FLAGS.optimizer,
      lr_schedule=FLAGS.lr_schedule,
      train_batch_size=FLAGS.train_batch_size,
      gradient_accumulation_steps=FLAGS.gradient_accumulation_steps,
      init_checkpoint=FLAGS.init_checkpoint,
      save_checkpoints_steps=FLAGS.save_checkpoints_steps,
      iterations_per_loop=FLAGS.iterations_per_loop,
      keep_checkpoint_max=FLAGS.keep_checkpoint_max,
      use_xla=FLAGS.use_xla,
      random_seed=FLAGS.random_seed,
      allow_partial_init_checkpoint=FLAGS.allow_partial_init_checkpoint,
      allow_changed_settings=FLAGS.allow_changed_settings,
      model_settings=_model_settings(),
      pack_sequences="pack_sequences" in FLAGS and FLAGS.pack_sequences,
      **{name: FLAGS[name].value for name in _EVAL_DURING_TRAINING_FLAGS if name in FLAGS})


def _model_settings() -> dict:
  """What shapes the trained model besides the training config: `--bert_config_file`'s values,
  `--max_seq_length` and the vocab's content (`vocab`: its SHA-256; recorded with the run; a
  resume must match them, and evaluation, prediction and export must use the run's vocab)."""
  settings = {"max_seq_length": FLAGS.max_seq_length}
  if FLAGS.bert_config_file:
    settings["bert_config"] = modeling.BertConfig.from_json_file(FLAGS.bert_config_file).to_dict()
  vocab = errors.flag_value("vocab_file") or errors.flag_value("spm_model_file")
  if vocab:
    with tf.io.gfile.GFile(vocab, "rb") as reader:
      settings["vocab"] = "sha256:" + hashlib.sha256(reader.read()).hexdigest()[:16]
  return settings


_EVAL_DURING_TRAINING_FLAGS = ("eval_every_steps", "early_stopping_patience",
                               "early_stopping_metric", "keep_best_checkpoint")


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
# The validation pass and the one-line errors.
# ------------------------------------------------------------------------------------------------


def _check_input_paths() -> None:
  """The files the flags of TensorFlow's scripts name: the config (read, and checked against
  --max_seq_length where the script has it), the init checkpoint, the input file patterns, the
  data directory, the export directory (`export.check_export_dir`), and the TF_CONFIG variable."""
  distribution.check_tf_config()
  if errors.flag_value("bert_config_file"):
    errors.check_regular_file(FLAGS.bert_config_file, "--bert_config_file")
    _check_vocab_fits_model(bert_config())
  if errors.flag_value("init_checkpoint"):
    checkpoints.resolve_checkpoint_path(errors.flag_value("init_checkpoint"))
  for name in ("input_file", "phase2_input_file"):
    if errors.flag_value(name):
      file_patterns.expand(errors.flag_value(name), "--" + name)
  data_dir = errors.flag_value("data_dir")
  if data_dir and not file_patterns.is_remote(data_dir) and not os.path.isdir(data_dir):
    raise errors.FlagError("--data_dir=%s is not a directory" % data_dir)
  if errors.flag_value("export_dir"):
    export.check_export_dir(errors.flag_value("export_dir"), errors.flag_value("output_dir"))


def _check_vocab_fits_model(config: modeling.BertConfig) -> None:
  """`--vocab_file` (or `--spm_model_file`), where given with the config, is the model's vocab
  (`tokenization.check_vocab_fits_model`) with the special tokens the flags need: [MASK] too for
  --dynamic_masking and for run_pretraining's fill-mask export."""
  vocab_file, spm_model_file = errors.flag_value("vocab_file"), errors.flag_value("spm_model_file")
  if not (vocab_file or spm_model_file):
    return
  special_tokens = tokenization.INPUT_SPECIAL_TOKENS
  if errors.flag_value("dynamic_masking") or (
      "fill_mask_top_k" in FLAGS and errors.flag_value("export_dir")):
    special_tokens += (tokenization.MASK_TOKEN,)
  try:
    tokenization.check_vocab_fits_model(vocab_file, config.vocab_size, spm_model_file,
                                        special_tokens)
  except tokenization.VocabError as error:
    raise errors.FlagError("--%s: %s (--bert_config_file=%s)" % (
        "spm_model_file" if spm_model_file else "vocab_file", error,
        FLAGS.bert_config_file)) from None


def run_script(main: Callable[[list], Any],
               outputs: Optional[dict[str, errors.OutputFlag]] = None) -> None:
  """`errors.run_script` for a script that uses these flags: the validation pass also reads
  `--bert_config_file` and checks `--init_checkpoint` and TF_CONFIG before `main` runs;
  `outputs` are the script's output flags of another kind than `errors.OUTPUT_FLAGS` says."""
  errors.run_script(main, check_input_paths=_check_input_paths, outputs=outputs)
