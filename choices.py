# coding=utf-8
"""The named choices of the library's settings and the serving limits' defaults, as plain data.

The library's modules (distribution, optimization, export) accept these names; the command line
(`cli`) offers them as its flags' values. Both read them here because `cli` imports no TensorFlow
(the data scripts run its validation pass and then fork their workers), while those modules do.
"""

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
