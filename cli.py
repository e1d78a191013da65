# coding=utf-8
"""The command line every script shares: its flags, the validation pass, and how a script runs.

The original's scripts each defined the same flags. Here a script defines its flags in
`define_flags()`, called from `if __name__ == "__main__"` (so several scripts can be imported into
one process, as the tests do), from the shared groups below plus its own. `run_script` then runs
its `main` after the validation pass: every numeric flag against `FLAG_RULES`, the flags that go
together, the files the flags name (plus a script's own checks, e.g. `cli_setup`'s of the config,
checkpoint and TF_CONFIG), and the outputs against the inputs (`atomic_files.check_run_paths`).
A bad flag, a bad input file or a failed run (any `errors.InputError`, an `OSError` on a named file
or of a full disk) ends the script in one line (`<script>: error: <message>`, exit status 1)
instead of a traceback, before anything was written when the validation pass finds it. Anything
else is a bug and keeps its traceback; BERT_TRACEBACK=1 shows the traceback of a one-line error too.
Library modules name a setting in backquotes ("`learning_rate` must be ..."); that line and the
script's log say it as the script's flag, "--learning_rate must be ..." (`as_flags`).

This module is the only one below the scripts that reads absl's FLAGS besides `cli_setup`, which
builds what the flags describe (strategy, config, tokenizer, training config). It imports no
TensorFlow, so that the data scripts (create_pretraining_data.py, create_vocab.py) can run the
validation pass and still fork their workers.

Shared definitions are idempotent per name (`_define`), so a test importing two scripts, or a
script calling two groups that share a flag, defines each flag once.
"""

import dataclasses
import errno
import fnmatch
import glob
import logging
import math
import os
import sys
from typing import Any, Callable, Iterable, Mapping, Optional, Sequence, Union

from absl import app
from absl import flags

import atomic_files
import choices
import errors
import file_patterns

FLAGS = flags.FLAGS
# Set to 1 to see the traceback behind a one-line error (for debugging; users need not).
TRACEBACK_VARIABLE = "BERT_TRACEBACK"


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
          enum_values=choices.STRATEGIES)
  _define(fv, "bool", "use_xla", False,
          "Compile the forward and backward pass with XLA (one replica only; TPUs always "
          "compile).")
  _define(fv, "enum", "mixed_precision", "float32",
          "Compute dtype. float16 adds dynamic loss scaling; bfloat16 suits TPUs and CPUs with "
          "AVX512-BF16. Variables and checkpoints stay float32.",
          enum_values=choices.TRAINING_PRECISIONS)
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
          enum_values=choices.OPTIMIZERS)
  _define(fv, "enum", "lr_schedule", "original",
          "Learning rate schedule: linear warmup to --learning_rate, then linear decay to 0 at the "
          "last step. original: the decay counts from step 0 (the original's; at the end of "
          "warmup the rate is already below the peak). linear: the decay counts from the end of "
          "warmup (Hugging Face's get_linear_schedule_with_warmup; with --optimizer=adamw it "
          "reproduces a Hugging Face recipe).",
          enum_values=choices.SCHEDULES)
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
  """Defines `pack_sequences` (the tasks whose heads read each sequence's [CLS] or tokens:
  run_classifier, run_ner, run_multiple_choice)."""
  _define(flag_values, "bool", "pack_sequences", True,
          "Pack the sequences of each training, evaluation and prediction batch into shared "
          "rows, each sequence attending only to itself with its own positions (the same "
          "examples per step and the same math as padded batches, fewer positions computed; "
          "see packing.py). false: padded rows, as the original. Not given: off with --use_tpu "
          "(static shapes), and a run in --output_dir trained without packing goes on without "
          "it.")


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
          "eval_results.txt; then --do_eval, --do_predict and --export_dir use it (so do later "
          "runs without --do_train, with or without this flag).")


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
          enum_values=choices.EXPORT_PRECISIONS)
  _define(flag_values, "integer", "max_request_rows", choices.DEFAULT_MAX_REQUEST_ROWS,
          "The most rows (texts, questions, id rows) one request to the export may hold; more "
          "fail with InvalidArgument. README: Serving.")
  _define(flag_values, "integer", "max_request_tokens", choices.DEFAULT_MAX_REQUEST_TOKENS,
          "The most token positions (rows x padded sequence length) one request to the export "
          "may make the model compute on; more fail with InvalidArgument. Memory per request "
          "grows with it: benchmarks/RESULTS.md.")


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

# ------------------------------------------------------------------------------------------------
# The validation pass.
# ------------------------------------------------------------------------------------------------

@dataclasses.dataclass(frozen=True)
class FlagRule:
  """What a numeric flag's value must be: `allowed(value)` is true; `what` describes it."""
  allowed: Callable[[Any], bool]
  what: str


_POSITIVE = FlagRule(lambda v: v >= 1, "an integer >= 1")
_NON_NEGATIVE = FlagRule(lambda v: v >= 0, "an integer >= 0")
_POSITIVE_NUMBER = FlagRule(lambda v: math.isfinite(v) and v > 0, "a finite number > 0")
_FRACTION = FlagRule(lambda v: 0 <= v <= 1, "a number in [0, 1]")  # NaN fails every comparison.
_OPEN_PROBABILITY = FlagRule(lambda v: 0 < v < 1, "a number strictly between 0 and 1")
_FINITE = FlagRule(math.isfinite, "a finite number")
_SEED = FlagRule(lambda v: 0 <= v < 2**32, "an integer in [0, 2**32)")
_SEQ_LENGTH = FlagRule(lambda v: v >= 3, "an integer >= 3 (room for [CLS], a token and [SEP])")

# The rule of every numeric flag of every script, by name: one name means one thing in all of them
# (tests/test_validation.py fails for a numeric flag missing here: it would accept -1). A flag whose
# value is None (not given, no default) is not checked.
FLAG_RULES = {
    "batch_size": _POSITIVE, "train_batch_size": _POSITIVE, "eval_batch_size": _POSITIVE,
    "predict_batch_size": _POSITIVE, "phase2_train_batch_size": _POSITIVE,
    "gradient_accumulation_steps": _POSITIVE, "save_checkpoints_steps": _POSITIVE,
    "iterations_per_loop": _POSITIVE, "keep_checkpoint_max": _POSITIVE,
    "num_tpu_cores": _POSITIVE, "max_eval_steps": _POSITIVE, "num_train_steps": _POSITIVE,
    "num_warmup_steps": _NON_NEGATIVE, "phase2_steps": _NON_NEGATIVE,
    "phase2_num_warmup_steps": _NON_NEGATIVE, "eval_every_steps": _NON_NEGATIVE,
    "early_stopping_patience": _NON_NEGATIVE,
    "max_seq_length": _SEQ_LENGTH, "phase2_max_seq_length": _SEQ_LENGTH,
    "max_predictions_per_seq": _POSITIVE, "phase2_max_predictions_per_seq": _POSITIVE,
    "doc_stride": _POSITIVE, "max_query_length": _POSITIVE, "max_answer_length": _POSITIVE,
    "n_best_size": _POSITIVE, "fill_mask_top_k": _POSITIVE, "random_seed": _SEED,
    "learning_rate": _POSITIVE_NUMBER, "phase2_learning_rate": _POSITIVE_NUMBER,
    "num_train_epochs": _POSITIVE_NUMBER, "warmup_proportion": _FRACTION,
    "multi_label_threshold": _OPEN_PROBABILITY, "null_score_diff_threshold": _FINITE,
    "masked_lm_prob": _FRACTION, "short_seq_prob": _FRACTION,
    "dupe_factor": _POSITIVE, "num_workers": _POSITIVE, "num_shards": _POSITIVE,
    "shard_index": _NON_NEGATIVE, "chunk_size_kb": _POSITIVE, "shuffle_buffer_size": _POSITIVE,
    "vocab_size": _POSITIVE, "max_unique_chars": _POSITIVE, "max_token_length": _POSITIVE,
    "max_input_words": _POSITIVE, "num_iterations": _POSITIVE,
    "slack_ratio": FlagRule(lambda v: 0 <= v < 1, "a number in [0, 1)"),
    "max_request_rows": _POSITIVE, "max_request_tokens": _POSITIVE,
}


@dataclasses.dataclass(frozen=True)
class FlagNeed:
  """A flag that acts only when the flag `needed` has a value that `enables(value)` it, as the
  flags' help says ("With --doc_stride: ..."); `what` names that setting."""
  needed: str
  what: str
  enables: Callable[[Any], bool] = bool


_WITH_EXPORT = FlagNeed("export_dir", "--export_dir")
_WITH_PHASE2 = FlagNeed("phase2_steps", "--phase2_steps")
_WITH_DYNAMIC_MASKING = FlagNeed("dynamic_masking", "--dynamic_masking")
_WITH_MULTI_LABEL = FlagNeed("multi_label", "--multi_label")
_WITH_TRAIN = FlagNeed("do_train", "--do_train")

# The flags (this project's, not the original's: an old command line keeps working) that a script
# would ignore without another. Given on the command line without it they are an error, as the
# user asked for something the run would not do. A rule holds only in a script that defines both.
FLAG_NEEDS = {
    "window_aggregation": FlagNeed("doc_stride", "--doc_stride"),
    "label_delimiter": _WITH_MULTI_LABEL, "multi_label_threshold": _WITH_MULTI_LABEL,
    "group_by_length": FlagNeed("bucket_by_length", "--bucket_by_length"),
    "export_precision": _WITH_EXPORT, "max_request_rows": _WITH_EXPORT,
    "max_request_tokens": _WITH_EXPORT, "fill_mask_top_k": _WITH_EXPORT,
    "export_format": _WITH_EXPORT,
    "phase2_input_file": _WITH_PHASE2, "phase2_max_seq_length": _WITH_PHASE2,
    "phase2_max_predictions_per_seq": _WITH_PHASE2, "phase2_learning_rate": _WITH_PHASE2,
    "phase2_num_warmup_steps": _WITH_PHASE2, "phase2_train_batch_size": _WITH_PHASE2,
    "beam_pipeline_options": FlagNeed("runner", "--runner=beam", lambda v: v == "beam"),
    "eval_every_steps": _WITH_TRAIN, "early_stopping_patience": _WITH_TRAIN,
}


def flag_value(name: str) -> Any:
  """The value of the flag `name`, or None where the running script does not define it."""
  return flags.FLAGS[name].value if name in flags.FLAGS else None


def _check_flag_values() -> None:
  """Each flag of FLAG_RULES that has a value obeys its rule."""
  for name, rule in FLAG_RULES.items():
    value = flag_value(name)
    if value is not None and not rule.allowed(value):
      raise errors.FlagError("--%s=%s: must be %s" % (name, value, rule.what))


def _check_flag_combinations() -> None:
  """The rules that tie two flags together; first that no flag is given without the one it acts
  with (a rule between two flags would otherwise judge a default the user never gave)."""
  _check_flag_needs()
  steps = flag_value("gradient_accumulation_steps")
  for batch_flag in ("train_batch_size", "phase2_train_batch_size"):
    batch = flag_value(batch_flag)
    if steps and batch and batch % steps:
      raise errors.FlagError("--gradient_accumulation_steps=%d must divide --%s=%d (each update "
                             "is that many equal micro-batches)" % (steps, batch_flag, batch))
  shard_index, num_shards = flag_value("shard_index"), flag_value("num_shards")
  if shard_index is not None and shard_index >= num_shards:
    raise errors.FlagError("--shard_index=%d must be below --num_shards=%d" %
                           (shard_index, num_shards))
  for prefix in ("", "phase2_"):
    predictions = flag_value(prefix + "max_predictions_per_seq")
    length = flag_value(prefix + "max_seq_length")
    if predictions and length and predictions > length:
      raise errors.FlagError("--%smax_predictions_per_seq=%d must not exceed "
                             "--%smax_seq_length=%d" % (prefix, predictions, prefix, length))
  _check_request_tokens()


def _check_flag_needs() -> None:
  """No flag of FLAG_NEEDS is given without the setting it acts with."""
  for name, need in FLAG_NEEDS.items():
    if (name in FLAGS and need.needed in FLAGS and FLAGS[name].present and
        not need.enables(FLAGS[need.needed].value)):
      raise errors.FlagError("--%s acts only with %s: give %s too, or leave --%s out" %
                             (name, need.what, need.what, name))


def _check_request_tokens() -> None:
  """An export (--export_dir) serves at least one row of --max_seq_length tokens."""
  tokens, length = flag_value("max_request_tokens"), flag_value("max_seq_length")
  if flag_value("export_dir") and tokens and length and tokens < length:
    raise errors.FlagError("--max_request_tokens=%d must be at least --max_seq_length=%d (one "
                           "row of the longest length) for --export_dir" % (tokens, length))


def _check_model_paths() -> None:
  """`--vocab_file`, `--spm_model_file` and `--bert_config_file`, where a script has them, are
  readable files; a TF Hub encoder to read is a local TF2 SavedModel's directory."""
  for name in ("vocab_file", "spm_model_file", "bert_config_file"):
    path = flag_value(name)
    if path:
      errors.check_regular_file(path, "--" + name)
  for name in ("tf_hub_model_path", "bert_hub_module_handle"):
    if flag_value(name):
      errors.check_tf_hub_encoder_directory(flag_value(name), "--" + name)


def check_flags() -> None:
  """The first checks of the validation pass `run_script` runs before `main`: every numeric flag
  in range, the flags that go together consistent, the vocab and config readable. Raises
  FlagError (or InputError for a file) naming the first flag at fault."""
  _check_flag_values()
  _check_flag_combinations()
  _check_model_paths()


def check_model_files() -> None:
  """The validation pass's checks of the files a TensorFlow script reads: the config, the vocab
  against it, the init checkpoint, the input file patterns, the data and export directories and
  TF_CONFIG (`cli_setup.check_input_paths`). A script passes this to `run_script`, which calls it
  after the checks that need no TensorFlow: it loads TensorFlow, imported here only then."""
  import cli_setup  # pylint: disable=g-import-not-at-top
  cli_setup.check_input_paths()


# ------------------------------------------------------------------------------------------------
# The run's inputs and outputs.
# ------------------------------------------------------------------------------------------------

# The flags that name what a run reads, in every script (a flag a script lacks is skipped).
INPUT_FLAGS = ("input_file", "phase2_input_file", "vocab_file", "spm_model_file",
               "bert_config_file", "init_checkpoint", "hf_model_path", "keras_hub_preset",
               "tf_hub_model_path", "model_garden_checkpoint", "bert_hub_module_handle",
               "data_dir", "stdlib_dir", "train_file", "dev_file", "test_file", "predict_file")
# Input flags whose value is a file name in --data_dir where the script has that flag.
DATA_DIR_FILE_FLAGS = ("train_file", "dev_file", "test_file")
# Input flags naming data files (not models), or a directory of them: none may lie in an output
# directory under a name the run writes there (`atomic_files.NAMES_WRITTEN_IN_OUTPUT_DIRS`).
DATA_FILE_FLAGS = ("input_file", "phase2_input_file", "data_dir", "train_file", "dev_file",
                   "test_file", "predict_file")
# The flags that name what a run writes, and their kind (`atomic_files.OUTPUT_FILE`, ...); a
# script whose flag means another kind says so to `run_script`.
OUTPUT_FLAGS = {"output_file": atomic_files.OUTPUT_FILE,
                "output_dir": atomic_files.OUTPUT_CONTAINER,
                "export_dir": atomic_files.OUTPUT_CONTAINER}

# An output flag's kind, or a function of the flags giving (kind, paths) where the paths are not
# the flag's value as it stands (shard suffixes), or (kind, paths, the paths the job's other runs
# write).
OutputFlag = Union[str, Callable[[], tuple]]


def _input_paths(name: str, value: str) -> list:
  """The paths an input flag names: its comma-separated parts, glob patterns expanded; a
  checkpoint prefix's files."""
  if name in ("init_checkpoint", "model_garden_checkpoint"):
    return [value] + glob.glob(glob.escape(value) + ".*")
  if name == "data_dir":
    return [value] + _symlinks_in(value)
  if name in DATA_DIR_FILE_FLAGS and flag_value("data_dir"):
    value = os.path.join(flag_value("data_dir"), value)
  paths = []
  for part in (part.strip() for part in value.split(",")):
    if part:
      paths.extend(([] if "://" in part else glob.glob(part)) or [part])
  return paths


def _symlinks_in(directory: str) -> list:
  """The symlinks among a local directory's entries. A task reads its data files from
  --data_dir by its own layout's names, and such a file may be a link to a file elsewhere, e.g.
  to the test_results.tsv of the run's output_dir: an input there to check. The directory's other
  files are its own, not any output's."""
  if file_patterns.is_remote(directory) or not os.path.isdir(directory):
    return []
  return sorted(entry.path for entry in os.scandir(directory) if entry.is_symlink())


def _output_paths(value: str, declared: OutputFlag) -> tuple:
  """(kind, paths, the job's other paths) of an output flag's value: a function's third value,
  where it gives one, names the files the other runs of the same job write (other shards)."""
  if callable(declared):
    kind, paths, *others = declared()
    return kind, paths, others[0] if others else []
  if declared == atomic_files.OUTPUT_FILE:
    return declared, [part.strip() for part in value.split(",") if part.strip()], []
  return declared, [value], []


def _path_matches(pattern: str, path: str) -> bool:
  """Whether the local glob `pattern` matches `path` (as `glob` would, were it there): component
  by component, so `*` does not cross a `/`, and a hidden name only by a hidden pattern."""
  patterns = os.path.abspath(pattern).split(os.sep)
  names = os.path.abspath(path).split(os.sep)
  return len(patterns) == len(names) and all(
      fnmatch.fnmatchcase(name, part) and (part.startswith(".") or not name.startswith("."))
      for part, name in zip(patterns, names))


def _check_inputs_name_no_output_of_the_job(written: Mapping[str, tuple]) -> None:
  """Raises FlagError when a data input (a file or pattern of DATA_FILE_FLAGS) names a file that
  this run or another run of its job writes, whether or not it exists yet: the run's own output
  would be read by its next run, and a shard's by the shards started after it (each machine
  runs the same command, and `dir/*` matches the shard files written into dir)."""
  for name in DATA_FILE_FLAGS:
    value = flag_value(name)
    if not value or name == "data_dir":
      continue
    for pattern in (part.strip() for part in value.split(",")):
      if not pattern or file_patterns.is_remote(pattern):
        continue
      for what, (kind, paths, others) in written.items():
        for path in paths + others:
          if (kind == atomic_files.OUTPUT_FILE and not file_patterns.is_remote(path)
              and _path_matches(pattern, path)):
            raise errors.FlagError(
                "--%s=%s names %s, which %s: write the output elsewhere or name the inputs "
                "more narrowly" % (name, value, path, (
                    "this run writes (%s): its next run would read it" % what
                    if path in paths else "another run of this job writes (%s of another "
                    "shard): the runs after it would read it" % what)))


def check_run_paths(outputs: Optional[dict[str, OutputFlag]] = None) -> list:
  """Checks the running script's outputs against its inputs and each other
  (`atomic_files.check_run_paths`): `outputs` overrides OUTPUT_FLAGS by flag name. Returns the
  local directories the output directories would create (each missing one on the way to them),
  deepest first."""
  inputs = {"--" + name: _input_paths(name, flag_value(name))
            for name in INPUT_FLAGS if flag_value(name)}
  declared = dict(OUTPUT_FLAGS, **(outputs or {}))
  written = {"--" + name: _output_paths(flag_value(name), kind)
             for name, kind in declared.items() if flag_value(name)}
  atomic_files.check_run_paths(inputs, {what: (kind, paths)
                                        for what, (kind, paths, _) in written.items()},
                               data_files=["--" + name for name in DATA_FILE_FLAGS],
                               exports=["--export_dir"])
  _check_inputs_name_no_output_of_the_job(written)
  return _missing_directories(path for kind, paths, _ in written.values()
                              if kind == atomic_files.OUTPUT_CONTAINER for path in paths)


def _missing_directories(paths: Iterable[str]) -> list:
  """The local directories that do not exist on the way to each of `paths` (themselves
  included), deepest first."""
  missing = set()
  for path in paths:
    if file_patterns.is_remote(path):
      continue
    path = os.path.abspath(path)
    while not os.path.lexists(path):
      missing.add(path)
      path = os.path.dirname(path)
  return sorted(missing, key=lambda path: -path.count(os.sep))


def _remove_if_empty(directories: Sequence[str]) -> None:
  """Removes each of `directories` (deepest first) that exists and is empty: what a refused
  run created on the way to its outputs, so that a refusal leaves nothing behind."""
  for directory in directories:
    try:
      os.rmdir(directory)
    except OSError:  # Gone, not empty, or not ours to remove: it stays.
      pass


# ------------------------------------------------------------------------------------------------
# Running a script.
# ------------------------------------------------------------------------------------------------


def as_flags(text: str) -> str:
  """A library's message (or log line) as the command line says it: each backquoted setting that
  is a flag of the running script becomes that flag ("`learning_rate`=-1" -> "--learning_rate=-1",
  `errors.worded`). A backquoted name the script has no flag for (a file's name, a config field)
  keeps its backquotes: it is not something to pass on this command line."""
  return errors.worded(text, lambda name: "--" + name if name in FLAGS else "`%s`" % name)


def _log_as_flags(record: logging.LogRecord) -> bool:
  """The filter on absl's logger while a script runs: its log words settings as flags too
  (`as_flags`). Keeps every record."""
  try:
    message = record.getMessage()
  except Exception:  # pylint: disable=broad-except  # A malformed call: the handler reports it.
    return True
  if "`" in message:
    record.msg, record.args = as_flags(message), None
  return True


def _exit_with_error(message: str) -> None:
  """Ends the script with `<script>: error: <message>` on one line (settings worded as flags,
  `as_flags`) and exit status 1."""
  raise SystemExit("%s: error: %s" % (os.path.basename(sys.argv[0]),
                                      " ".join(as_flags(str(message)).split("\n"))))


def _parse_flags(argv: list[str]) -> list[str]:
  """absl's parse of argv, with a value of the wrong type (or an unknown flag) ended as one line
  naming the flag, like every other bad input."""
  try:
    return flags.FLAGS(argv)
  except flags.Error as error:
    _exit_with_error(str(error).replace("flag --", "--", 1))


# What the system says when it refuses a path, in the message of TensorFlow's file-system errors.
_SYSTEM_REFUSALS = ("No such file or directory", "Permission denied", "Read-only file system",
                    "Not a directory", "Is a directory")


def _is_users_to_fix(error: Exception) -> bool:
  """Whether `error` is bad input rather than a bug: an InputError; an OSError on a named file or
  of a full disk; or TensorFlow's file-system error on a path the system refused (its gfile
  creating an output directory where nothing can be created, say)."""
  if isinstance(error, errors.InputError):
    return True
  if isinstance(error, OSError):
    return bool(error.filename) or _is_disk_full(error)
  tensorflow = sys.modules.get("tensorflow")
  return (tensorflow is not None and isinstance(error, tensorflow.errors.OpError) and
          any(refusal in error.message for refusal in _SYSTEM_REFUSALS))


def _is_disk_full(error: OSError) -> bool:
  """A full disk or quota: the user's to fix (`atomic_files` names the output in the message)."""
  return error.errno in (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)


def run_script(main: Callable[[list], Any],
               check_input_paths: Optional[Callable[[], None]] = None,
               outputs: Optional[dict[str, OutputFlag]] = None) -> None:
  """`app.run(main)` after the validation pass: `check_flags`, then `check_run_paths(outputs)`
  (no output may replace an input, another output or a path of the other kind), then
  `check_input_paths` (the script's files, e.g. `check_model_files`). The first two need no
  TensorFlow: a script that imports it only in `main` refuses bad flags and outputs in a fraction
  of a second, with one line on stderr and none of TensorFlow's start-up lines. An `InputError`
  from anywhere, or an `OSError` on a named file or of a full disk, ends the script with one line
  (`<script>: error: <message>`, exit status 1) instead of a traceback, unless BERT_TRACEBACK=1;
  so does TensorFlow's file-system error on a path the system refused (`_is_users_to_fix`).
  Anything else is a bug and keeps its traceback. The error line, and the log while the script
  runs, name the settings of library messages as the script's flags (`as_flags`)."""

  def main_with_clear_errors(argv):
    absl_logger = logging.getLogger("absl")
    absl_logger.addFilter(_log_as_flags)
    new_directories = []
    try:
      check_flags()
      new_directories = check_run_paths(outputs)
      if check_input_paths:
        check_input_paths()
      return main(argv)
    except Exception as error:  # pylint: disable=broad-except  # Re-raised unless the user's.
      if (not _is_users_to_fix(error) or
          os.environ.get(TRACEBACK_VARIABLE, "") not in ("", "0")):
        raise
      _remove_if_empty(new_directories)
      _exit_with_error(getattr(error, "message", None) or str(error))
    finally:  # A script run in-process (tests) leaves the logger as it was.
      absl_logger.removeFilter(_log_as_flags)

  app.run(main_with_clear_errors, flags_parser=_parse_flags)
