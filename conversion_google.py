# coding=utf-8
"""Google's format in the checkpoint converter: a TF checkpoint, bert_config.json and vocab.txt.

Reading finds the task head a checkpoint holds by its variable names (a label file beside it, or
`--task_name`, tells run_classifier's from run_ner's) and leaves optimizer slots and `global_step`
out; writing gives the files a script here, or the original code, takes as `--init_checkpoint`,
`--bert_config_file` and `--vocab_file`, with the label file that names the outputs.
"""

import os
from typing import Optional

import tensorflow as tf

import atomic_files
import checkpoints
import classifier
import classifier_data
import conversion
import errors
import modeling
import task_files
import tokenization
import training_loop

# ------------------------------------------------------------------------------------------------
# Google.
# ------------------------------------------------------------------------------------------------


def google_architecture(names, checkpoint_dir: str, task_name: Optional[str],
                        source: str) -> conversion.Architecture:
  """The architecture of a Google checkpoint's variable names: the task head they hold, else the
  pretraining heads they hold. run_classifier's and run_ner's heads have the same names: the label
  file beside the checkpoint tells them apart, or `task_name` (a classifier's task)."""
  heads = [architecture for architecture in conversion.ARCHITECTURES.values()
           if architecture.head_scope is not None and set(architecture.head_names()) <= names]
  if len(heads) > 1:
    files = ["%s (%s)" % (head.label_file, head.script) for head in heads]
    recorded = training_loop.recorded_setting(checkpoint_dir, "task")
    if task_name and recorded not in (None, classifier.ClassifierTask.kind):
      raise errors.FlagError(
          "`task_name` is for run_classifier checkpoints, but %s holds a %s run (recorded in "
          "%s): convert it without `task_name`" % (checkpoint_dir, recorded,
                                                   training_loop.SETTINGS_FILE))
    heads = [conversion.SEQUENCE_CLASSIFICATION] if task_name else [
        head for head in heads
        if tf.io.gfile.exists(os.path.join(checkpoint_dir, head.label_file))]
    if len(heads) != 1:
      raise conversion.ConversionError(
          "%s has a task head, output_weights, and %s beside it: put there the one its run wrote "
          "in its output_dir, or pass `task_name` for a classifier of a task with fixed labels" %
          (source, "both " + " and ".join(files) if heads else "neither " + " nor ".join(files)))
  if heads:
    return heads[0]
  masked_lm = any(name.startswith("cls/predictions/") for name in names)
  next_sentence = any(name.startswith("cls/seq_relationship/") for name in names)
  return conversion.ARCHITECTURES["BertForPreTraining" if masked_lm and next_sentence else
                                  "BertForMaskedLM" if masked_lm else "BertModel"]


def _read_google_labels(model: conversion.ConvertedModel, checkpoint_dir: str,
                        task_name: Optional[str], multi_label: bool) -> None:
  """Sets the labels and problem type of a Google checkpoint's head: from `task_name` (a task
  with fixed labels), else from the label file beside the checkpoint."""
  architecture = model.architecture
  if architecture is not conversion.SEQUENCE_CLASSIFICATION and (task_name or multi_label):
    raise errors.FlagError("`task_name` and `multi_label` are for run_classifier checkpoints; %s "
                           "is a %s" % (model.source, architecture.name))
  if task_name and task_name.lower() != "generic":
    processor = classifier_data.get_processor(task_name)
    if multi_label:
      raise errors.FlagError("`multi_label` needs `task_name`=generic (labels from your files)")
    model.labels = tuple(processor.get_labels())  # Empty for regression.
    if model.labels and architecture.label_file:  # A label file beside names the outputs.
      task_files.check_label_list_names(os.path.join(checkpoint_dir, architecture.label_file),
                                        model.labels)
    model.problem_type = (conversion.REGRESSION if processor.is_regression else
                          conversion.SINGLE_LABEL)
    model.labels_source = "`task_name`=" + task_name
    return
  if architecture.label_file is None:
    return
  path = os.path.join(checkpoint_dir, architecture.label_file)
  if not tf.io.gfile.exists(path):
    raise conversion.ConversionError(
        "%s has a %s head but no %s beside it: put there the one its run wrote "
        "in its output_dir" % (model.source, architecture.script, architecture.label_file))
  model.labels = conversion.read_labels(architecture, checkpoint_dir)
  model.labels_source = path
  # A label file edited since its run trained would name the outputs after other labels.
  training_loop.check_model_settings_of_recorded_run(
      checkpoint_dir, {"output_names": list(model.labels)}, "`init_checkpoint`")
  if architecture is conversion.SEQUENCE_CLASSIFICATION:
    model.problem_type = conversion.MULTI_LABEL if multi_label else conversion.SINGLE_LABEL
    if model.problem_type == conversion.SINGLE_LABEL and len(model.labels) < 2:
      raise conversion.ConversionError(
          "%s lists one label, but a single-label classifier has two or more "
          "(pass `multi_label` for a multi-label one)" % path)


def read_google_model(init_checkpoint: str, bert_config_file: Optional[str] = None,
                      vocab_file: Optional[str] = None, do_lower_case: bool = True,
                      task_name: Optional[str] = None, multi_label: bool = False
                      ) -> conversion.ConvertedModel:
  """Reads and checks a Google-format checkpoint and what names its head's outputs.

  The config, vocab and label file default to those in the checkpoint's directory
  (bert_config.json, vocab.txt, label_list.txt or tag_list.txt); `task_name` and `multi_label`
  are run_classifier's flags of its run. Optimizer slots (`*/adam_m`, `*/adam_v`) and
  `global_step` are not model weights and are skipped.
  """
  prefix = checkpoints.resolve_checkpoint_path(init_checkpoint)
  tokenization.validate_case_matches_checkpoint(do_lower_case, prefix)
  checkpoint_dir = checkpoints.checkpoint_directory(prefix)
  config = modeling.BertConfig.from_json_file(
      bert_config_file or os.path.join(checkpoint_dir, conversion.GOOGLE_CONFIG_NAME))
  if bert_config_file:
    modeling.check_config_of_model_directory(config, bert_config_file, checkpoint_dir,
                                             "`init_checkpoint`")
  reader = checkpoints.open_checkpoint(prefix)
  checkpoints.check_name_based(reader, prefix)
  tensors = {name: checkpoints.read_tensor(reader, prefix, name)
             for name in reader.get_variable_to_shape_map()
             if not checkpoints.is_training_state_name(name)}
  model = conversion.ConvertedModel(
      config,
      tensors,
      google_architecture(set(tensors), checkpoint_dir, task_name, prefix),
      prefix,
      vocab=(conversion.read_text(vocab_file) if vocab_file else conversion.text_if_exists(
          os.path.join(checkpoint_dir, conversion.VOCAB_NAME))),
      do_lower_case=do_lower_case)
  _read_google_labels(model, checkpoint_dir, task_name, multi_label)
  conversion.check_model(model, {name: name for name in tensors})
  return model


def google_usage(model: conversion.ConvertedModel, output_dir: str) -> str:
  """The script and flags that run a converted checkpoint in output_dir."""
  usage = ["--init_checkpoint=" + os.path.join(output_dir, conversion.GOOGLE_CHECKPOINT_NAME),
           "--bert_config_file=" + os.path.join(output_dir, conversion.GOOGLE_CONFIG_NAME)]
  if model.vocab:
    usage.append("--vocab_file=" + os.path.join(output_dir, conversion.VOCAB_NAME))
  if model.do_lower_case is not None:
    usage.append("--do_lower_case=%s" % str(model.do_lower_case).lower())
  if model.problem_type:
    usage.append("--task_name=" +
                 ("sts-b" if model.problem_type == conversion.REGRESSION else "generic"))
  if model.problem_type == conversion.MULTI_LABEL:
    usage.append("--multi_label")
  if model.labels:  # Our scripts read the label file in their output_dir.
    usage.append("--output_dir=" + output_dir)
  if any(name.startswith("bert/") for name in model.absent):  # The pooler, which it does not read.
    usage.append("--allow_partial_init_checkpoint")
  script = model.architecture.script
  return "%s %s" % ("python " + script if script else "any script:", " ".join(usage))


def write_google_model(model: conversion.ConvertedModel, output_dir: str) -> str:
  """Writes `bert_model.ckpt`, `bert_config.json` and, when known, `vocab.txt` and the head's
  label file into output_dir; returns the checkpoint prefix."""
  prefix = os.path.join(output_dir, conversion.GOOGLE_CHECKPOINT_NAME)
  with conversion.naming_write_errors(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(prefix) as temporary_prefix:  # Renames .data, then .index.
      checkpoints.write_checkpoint(model.tensors, temporary_prefix)
    atomic_files.write_text(os.path.join(output_dir, conversion.GOOGLE_CONFIG_NAME),
                            model.config.to_json_string())
    if model.vocab:
      atomic_files.write_text(os.path.join(output_dir, conversion.VOCAB_NAME), model.vocab)
    if model.labels:
      conversion.write_labels(model.architecture, model.labels, output_dir)
  return prefix
