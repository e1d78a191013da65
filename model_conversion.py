# coding=utf-8
"""Converting a model between formats as one unit: the conversions of convert_checkpoint.py.

Each direction reads a model into a `conversion.ConvertedModel` (its config, tensors, head,
labels, vocab and casing) with its format's reader and writes it with another's: Google's
checkpoints (`conversion_google`), Hugging Face safetensors (`conversion_hf`), KerasHub presets
(`conversion_keras_hub`), TF Hub encoders and Model Garden checkpoints
(`conversion_model_garden`). `convert` writes the result into a staging directory that takes
the output directory's name in one step (`atomic_files`), with the mark
`choices.CONVERTED_MARK_NAME` listing what it wrote.
"""

import os
import time
from typing import Callable, Optional

from absl import logging
import numpy as np
import tensorflow as tf

import atomic_files
import choices
import conversion
import conversion_google
import conversion_hf
import conversion_keras_hub
import conversion_model_garden
import modeling
import tokenization




def convert(read: Callable[[], conversion.ConvertedModel],
             write: Callable[[conversion.ConvertedModel, str], str], output_dir: str) -> str:
  """Reads a model, writes it to output_dir and logs what was converted; returns what `write`
  returns (under output_dir).

  The directory is written whole: `write` fills a staging directory beside it (with the mark
  `choices.CONVERTED_MARK_NAME`) that then takes output_dir's name in one step (`atomic_files`), so a reader
  sees the old model's files or the new one's, never a mix, even after a kill.
  """
  start = time.time()
  model = read()
  with conversion.naming_write_errors(output_dir):
    tf.io.gfile.makedirs(os.path.dirname(output_dir.rstrip("/")) or ".")
  staged = atomic_files.atomic_output(output_dir)
  with conversion.naming_write_errors(output_dir), staged as staging:
    tf.io.gfile.makedirs(staging)
    target = write(model, staging)
    vocab_file = os.path.join(staging, conversion.VOCAB_NAME)
    atomic_files.write_files_mark(staging, choices.CONVERTED_MARK_NAME, {
        "source": model.source, "architecture": model.architecture.name,
        "do_lower_case": model.do_lower_case,
        # What the model computes with, should its config file be edited in place.
        "bert_config": {field: getattr(model.config, field)
                        for field in modeling.COMPUTATION_FIELDS},
        # How a classifier's outputs are read: run_classifier's --multi_label must agree.
        "multi_label": ({conversion.SINGLE_LABEL: False, conversion.MULTI_LABEL: True}
                        .get(model.problem_type)),
        "vocab": (tokenization.tokens_fingerprint(vocab_file) if tf.io.gfile.exists(vocab_file)
                  else None)})
  target = os.path.join(output_dir, os.path.relpath(target, staging))
  if write is conversion_google.write_google_model:
    logging.info("Use it with %s", conversion_google.google_usage(model, output_dir))
  parameters = sum(int(np.prod(value.shape)) for value in model.tensors.values())
  logging.info("Converted %d tensors (%s parameters) of a %s from %s to %s in %.1f s",
               len(model.tensors), "{:,}".format(parameters), model.architecture.name,
               model.source, target, time.time() - start)
  if model.absent:
    logging.info("Not in the source (a model initialises them when used): %s",
                 conversion.describe_names(model.absent))
  return target


def convert_hf_to_google(hf_model_path: str, output_dir: str) -> str:
  """Converts a Hugging Face BERT to Google's format in output_dir (`write_google_model`).

  Returns:
    The checkpoint prefix written.
  """
  return convert(lambda: conversion_hf.read_hf_model(hf_model_path),
                 conversion_google.write_google_model, output_dir)


def convert_keras_hub_to_google(preset: str, output_dir: str) -> str:
  """Converts a KerasHub BertBackbone preset to Google's format in output_dir; returns the
  checkpoint prefix written."""
  return convert(lambda: conversion_keras_hub.read_keras_hub_preset(preset),
                 conversion_google.write_google_model, output_dir)


def convert_google_to_hf(init_checkpoint: str, output_dir: str,
                         bert_config_file: Optional[str] = None, **options) -> str:
  """Converts a Google-format checkpoint to Hugging Face's format in output_dir
  (`write_hf_model`); `options` are `read_google_model`'s.

  Returns:
    The safetensors file written.
  """
  return convert(
      lambda: conversion_google.read_google_model(init_checkpoint, bert_config_file, **options),
      conversion_hf.write_hf_model, output_dir)


def convert_google_to_keras_hub(init_checkpoint: str, output_dir: str,
                                bert_config_file: Optional[str] = None, **options) -> str:
  """Converts a Google-format checkpoint to a KerasHub preset in output_dir
  (`write_keras_hub_preset`); `options` are `read_google_model`'s. Returns output_dir."""
  return convert(
      lambda: conversion_google.read_google_model(init_checkpoint, bert_config_file, **options),
      conversion_keras_hub.write_keras_hub_preset, output_dir)


def convert_tf_hub_to_google(tf_hub_model_path: str, output_dir: str) -> str:
  """Converts a TF Hub BERT encoder SavedModel to Google's format in output_dir; returns the
  checkpoint prefix written."""
  return convert(lambda: conversion_model_garden.read_tf_hub_encoder(tf_hub_model_path),
                 conversion_google.write_google_model, output_dir)


def convert_model_garden_to_google(checkpoint: str, output_dir: str,
                                   bert_config_file: Optional[str] = None, **options) -> str:
  """Converts a Model Garden BertEncoder checkpoint to Google's format in output_dir; `options`
  are `read_model_garden_checkpoint`'s. Returns the checkpoint prefix written."""
  return convert(lambda: conversion_model_garden.read_model_garden_checkpoint(
      checkpoint, bert_config_file, **options), conversion_google.write_google_model, output_dir)


def convert_google_to_model_garden(init_checkpoint: str, output_dir: str,
                                   bert_config_file: Optional[str] = None, **options) -> str:
  """Converts a Google-format checkpoint to a Model Garden BertEncoder checkpoint in output_dir
  (`write_model_garden_checkpoint`); `options` are `read_google_model`'s. Returns the prefix."""
  return convert(
      lambda: conversion_google.read_google_model(init_checkpoint, bert_config_file, **options),
      conversion_model_garden.write_model_garden_checkpoint, output_dir)
