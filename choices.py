# coding=utf-8
"""The named choices of the library's settings and the serving limits' defaults, as plain data
(and `classifier_task`, the one reading of a classifier task's name).

The library's modules (distribution, optimization, export, classifier) accept these names; the
command line (`cli` and the scripts' flags) offers them as its flags' values. Both read them here
because the scripts define their flags and run the validation pass without TensorFlow (the data
scripts then fork their workers; the others load it only when the pass found nothing wrong),
while those modules import it.
"""

import errors

# Where a run executes (`distribution.make_strategy`): the strategies, and the Keras precisions a
# model trains in (`distribution.set_precision`).
STRATEGIES = ("auto", "one_device", "mirrored", "multi_worker_mirrored", "tpu")
TRAINING_PRECISIONS = ("float32", "float16", "bfloat16")

# How a run trains (`optimization.create_optimizer`): the original's optimizer (the default),
# AdamW, LAMB; the original's learning rate schedule (the default) or Hugging Face's linear one.
OPTIMIZERS = ("bert_adam", "adamw", "lamb")
SCHEDULES = ("original", "linear")

# What an export computes in (`export.model_in_precision`) and how much one request may ask of it
# by default (`export.RequestLimits`: rows, and token positions = rows x padded length).
EXPORT_PRECISIONS = ("float32", "bfloat16")
DEFAULT_MAX_REQUEST_ROWS = 1024
DEFAULT_MAX_REQUEST_TOKENS = 65536

# What extract_features.py writes: with --output_format=npz, a directory of these files (one per
# batch); with --export_format=tf_hub, TF Hub's pair in these two directories of --export_dir.
NPZ_PATTERN = "features-%05d.npz"
# The mark convert_checkpoint.py leaves in a directory it wrote: which files, from what source.
CONVERTED_MARK_NAME = ".convert_checkpoint.json"
TF_HUB_ENCODER = "encoder"
TF_HUB_PREPROCESSOR = "preprocessor"

# The classifier's tasks (`classifier_data.PROCESSORS`: the original's GLUE and XNLI processors and
# the user's own files), and how a long text's window logits make its logits
# (`classifier.aggregate_windows`).
CLASSIFIER_TASKS = ("xnli", "mnli", "mrpc", "cola", "sst-2", "qnli", "qqp", "rte", "wnli", "sts-b",
                    "generic")
# Other spellings of CLASSIFIER_TASKS that `--task_name` accepts.
CLASSIFIER_TASK_ALIASES = {"sst2": "sst-2", "stsb": "sts-b"}
WINDOW_AGGREGATIONS = ("mean", "max", "first")


def classifier_task(task_name: str) -> str:
  """The task of CLASSIFIER_TASKS that `task_name` names (any case, or an alias).

  Raises:
    errors.FlagError: for a name that is none of them.
  """
  name = task_name.lower()
  name = CLASSIFIER_TASK_ALIASES.get(name, name)
  if name not in CLASSIFIER_TASKS:
    raise errors.FlagError("`task_name`=%s: unknown task (known: %s)" %
                           (task_name, ", ".join(CLASSIFIER_TASKS)))
  return name
