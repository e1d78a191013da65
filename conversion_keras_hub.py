# coding=utf-8
"""KerasHub presets in the checkpoint converter: BertBackbone's weight layout, read and written.

A preset as `save_to_preset` writes it (`config.json`, `model.weights.h5`, the tokenizer's
`tokenizer.json` and vocabulary) holds BertBackbone's weights under the names of Keras layer
classes (`KERAS_HUB_SCOPES`); a classifier's preset adds `task.json` and `task.weights.h5`. Reading
turns them into a `conversion.ConvertedModel` under Google's names; writing does the reverse, and
`BertTextClassifier.from_preset` loads what a classifier becomes.
"""

import os
import re

from absl import logging
import numpy as np
import tensorflow as tf

import atomic_files
import conversion
import modeling

# ------------------------------------------------------------------------------------------------
# KerasHub's names and layout.
# ------------------------------------------------------------------------------------------------

# KerasHub's BertBackbone in its weights file: the group of each Google scope. Keras names a
# layer's group after the layer's class (`dense`, then `dense_1`, ...) and keeps its variables
# in `<group>/vars/<index>`, in the order the layer created them (KERAS_VARIABLE_ORDER).
KERAS_HUB_SCOPES = {
    "bert/embeddings/word_embeddings": "layers/reversible_embedding",
    "bert/embeddings/position_embeddings": "layers/position_embedding",
    "bert/embeddings/token_type_embeddings": "layers/embedding",
    "bert/embeddings/LayerNorm": "layers/layer_normalization",
    "bert/pooler/dense": "layers/dense",
}
# Within the group of encoder layer i (`layers/transformer_encoder`, then `..._1`, ...).
KERAS_HUB_LAYER_SCOPES = {
    "attention/self/query": "_self_attention_layer/query_dense",
    "attention/self/key": "_self_attention_layer/key_dense",
    "attention/self/value": "_self_attention_layer/value_dense",
    "attention/output/dense": "_self_attention_layer/output_dense",
    "attention/output/LayerNorm": "_self_attention_layer_norm",
    "intermediate/dense": "_feedforward_intermediate_dense",
    "output/dense": "_feedforward_output_dense",
    "output/LayerNorm": "_feedforward_layer_norm",
}
KERAS_VARIABLE_ORDER = {"kernel": 0, "gamma": 0, "bias": 1, "beta": 1}
# BertTextClassifier's output layer in task.weights.h5: kernel [H, N] and bias [N].
KERAS_HUB_CLASSIFIER_WEIGHTS = ("layers/dense/vars/0", "layers/dense/vars/1")
_ENCODER_LAYER = re.compile(r"^bert/encoder/layer_(\d+)/(.+)$")


def keras_hub_path_for_google(google_name: str) -> str:
  """The path in KerasHub's model.weights.h5 of an encoder variable (a `BertModel` name)."""
  if google_name in KERAS_HUB_SCOPES:  # An embedding table: its layer's only variable.
    return KERAS_HUB_SCOPES[google_name] + "/vars/0"
  scope, _, leaf = google_name.rpartition("/")
  layer = _ENCODER_LAYER.match(scope)
  if layer:
    index = int(layer.group(1))
    group = "layers/transformer_encoder%s/%s" % ("_%d" % index if index else "",
                                                  KERAS_HUB_LAYER_SCOPES[layer.group(2)])
  else:
    group = KERAS_HUB_SCOPES[scope]
  return "%s/vars/%d" % (group, KERAS_VARIABLE_ORDER[leaf])


def _keras_hub_object(module: str, class_name: str, config: dict) -> dict:
  """A KerasHub object as Keras serializes it into a preset's JSON files."""
  return {"module": "keras_hub.src.models.bert." + module, "class_name": class_name,
          "config": config, "registered_name": "keras_hub>" + class_name}


def _check_keras_hub_class(value, class_name: str, source: str) -> dict:
  """The `config` of a serialized KerasHub object, which must be of `class_name`."""
  if not isinstance(value, dict) or "registered_name" not in value:
    hint = (": a Hugging Face config.json, convert it with `hf_model_path`"
            if isinstance(value, dict) and "model_type" in value else "")
    raise conversion.ConversionError("%s is not a KerasHub preset's file%s" % (source, hint))
  if value["registered_name"] != "keras_hub>" + class_name:
    raise conversion.ConversionError("%s: holds a %s, not a %s" % (
        source, value.get("class_name") or value["registered_name"], class_name))
  if not isinstance(value.get("config"), dict):
    raise conversion.ConversionError("%s: its config is not a JSON object" % source)
  return value["config"]


# ------------------------------------------------------------------------------------------------
# KerasHub.
# ------------------------------------------------------------------------------------------------


def read_keras_hub_preset(preset: str) -> conversion.ConvertedModel:
  """Reads and checks a KerasHub BertBackbone preset: config.json, model.weights.h5 and, when
  there, its BertTokenizer (tokenizer.json and the vocab) and a BertTextClassifier's output layer
  (`_read_classifier_head`). Other task heads are not read (a warning says so)."""
  config_path = os.path.join(preset, conversion.KERAS_HUB_CONFIG_NAME)
  config = conversion.google_config_from_keras_hub(
      _check_keras_hub_class(conversion.read_json(config_path), "BertBackbone", config_path),
      config_path)
  weights_path = os.path.join(preset, conversion.KERAS_HUB_WEIGHTS_NAME)
  google_names = {keras_hub_path_for_google(name): name
                  for name in conversion.model_shapes(modeling.BertModel(config))}
  tensors, source_names, unknown = {}, {}, []
  for path, value in sorted(conversion.read_keras_weights(weights_path).items()):
    if path not in google_names:
      unknown.append(path)
      continue
    name = google_names[path]
    conversion.check_floating(value, weights_path, path)
    tensors[name] = conversion.join_attention_heads(name, np.asarray(value, dtype=np.float32))
    source_names[name] = path
  if unknown:
    raise conversion.ConversionError("%s: tensor(s) not in a BertBackbone: %s" %
                                     (weights_path, conversion.describe_names(unknown)))
  tokenizer_path = os.path.join(preset, conversion.KERAS_HUB_TOKENIZER_NAME)
  tokenizer = (_check_keras_hub_class(conversion.read_json(tokenizer_path), "BertTokenizer",
                                      tokenizer_path) if tf.io.gfile.exists(tokenizer_path) else {})
  conversion.check_tokenizer_settings(tokenizer, {"lowercase": "lowercase",
                                                  "strip_accents": "strip_accents",
                                                  "chinese_chars": "split_on_cjk"},
                                      tokenizer_path, accents_by_default=True)
  model = conversion.ConvertedModel(
      config,
      tensors,
      conversion.ARCHITECTURES["BertModel"],
      weights_path,
      vocab=(conversion.text_if_exists(os.path.join(preset, *conversion.KERAS_HUB_VOCAB_PATH))
             if tokenizer else None),
      do_lower_case=tokenizer.get("lowercase"))
  _read_classifier_head(model, preset, source_names)
  conversion.check_model(model, source_names)
  return model


def _read_classifier_head(model: conversion.ConvertedModel, preset: str,
                          source_names: dict) -> None:
  """Adds a BertTextClassifier preset's output layer (task.weights.h5) to `model` as
  run_classifier's head. KerasHub keeps no label names: the labels are transformers' defaults,
  `LABEL_<i>` (a warning says so). Another task, or a task without its weights, leaves the
  encoder alone, with a warning that the checkpoint has no head."""
  task_path = os.path.join(preset, conversion.KERAS_HUB_TASK_NAME)
  if not tf.io.gfile.exists(task_path):
    return
  task = conversion.read_json(task_path)
  task_weights_path = os.path.join(preset, conversion.KERAS_HUB_TASK_WEIGHTS_NAME)
  if (not isinstance(task, dict) or task.get("registered_name") != "keras_hub>BertTextClassifier"
      or not tf.io.gfile.exists(task_weights_path)):
    logging.warning("%s: the preset holds a task, but only its BertBackbone is converted: the "
                    "checkpoint has no task head, so fine-tune it (`do_train`) before evaluating, "
                    "predicting or exporting with it", task_path)
    return
  weights = {path: value for path, value in conversion.read_keras_weights(task_weights_path).items()
             if not path.startswith("optimizer/")}  # The compiled task's optimizer state.
  if set(weights) != set(KERAS_HUB_CLASSIFIER_WEIGHTS):
    raise conversion.ConversionError("%s: holds %s, not BertTextClassifier's output layer (%s)" % (
        task_weights_path, conversion.describe_names(sorted(weights)),
        ", ".join(KERAS_HUB_CLASSIFIER_WEIGHTS)))
  kernel, bias = (np.asarray(weights[path], np.float32) for path in KERAS_HUB_CLASSIFIER_WEIGHTS)
  num_classes = _check_keras_hub_class(task, "BertTextClassifier", task_path).get("num_classes")
  if kernel.ndim != 2 or bias.shape != (kernel.shape[1],) or num_classes != kernel.shape[1]:
    raise conversion.ConversionError(
        "%s: an output layer of shapes %s and %s does not give num_classes=%s of %s" % (
            task_weights_path, kernel.shape, bias.shape, num_classes, task_path))
  for path, value in zip(KERAS_HUB_CLASSIFIER_WEIGHTS, (kernel, bias)):
    conversion.check_floating(value, task_weights_path, path)
  weights_name, bias_name = conversion.SEQUENCE_CLASSIFICATION.head_names()
  model.tensors.update({weights_name: kernel.T, bias_name: bias})
  source_names.update({weights_name: KERAS_HUB_CLASSIFIER_WEIGHTS[0],
                       bias_name: KERAS_HUB_CLASSIFIER_WEIGHTS[1]})
  model.architecture = conversion.SEQUENCE_CLASSIFICATION
  model.labels = tuple("LABEL_%d" % i for i in range(num_classes))
  model.problem_type = conversion.SINGLE_LABEL
  model.labels_source = task_path
  logging.warning("%s: KerasHub keeps no label names: the classifier's %d outputs are named %s "
                  "in label_list.txt; rename them there, in their order, before the model is "
                  "used", task_path, num_classes, ", ".join(model.labels))


def write_keras_hub_preset(model: conversion.ConvertedModel, output_dir: str) -> str:
  """Writes a KerasHub preset into output_dir: BertBackbone's model.weights.h5 and config.json
  (last), its BertTokenizer (tokenizer.json, the vocab), and for a run_classifier head a
  BertTextClassifier (task.json, task.weights.h5, preprocessor.json: its tokenizer and inputs up
  to the model's positions). KerasHub has no class for the other heads: they are left out.
  Returns output_dir."""
  backbone_config = conversion.keras_hub_config_from_google(model.config, model.source)
  if not model.vocab:
    raise conversion.ConversionError(
        "%s: a KerasHub preset holds its tokenizer, but there is no vocab.txt "
        "beside it: pass `vocab_file`" % model.source)
  lacking = [name for name in model.absent if name.startswith("bert/")]
  if lacking:
    raise conversion.ConversionError("%s lacks %s, which KerasHub's BertBackbone needs" %
                                     (model.source, conversion.describe_names(lacking)))
  kept = {name: value for name, value in model.tensors.items() if name.startswith("bert/")}
  backbone = _keras_hub_object("bert_backbone", "BertBackbone", backbone_config)
  tokenizer = _keras_hub_object("bert_tokenizer", "BertTokenizer", {
      "config_file": conversion.KERAS_HUB_TOKENIZER_NAME, "lowercase": model.do_lower_case,
      "strip_accents": model.do_lower_case})  # As the original's BasicTokenizer.
  is_classifier = model.architecture is conversion.SEQUENCE_CLASSIFICATION
  with conversion.naming_write_errors(output_dir):
    vocab_path = os.path.join(output_dir, *conversion.KERAS_HUB_VOCAB_PATH)
    tf.io.gfile.makedirs(os.path.dirname(vocab_path))
    conversion.write_keras_weights(os.path.join(output_dir, conversion.KERAS_HUB_WEIGHTS_NAME), {
        keras_hub_path_for_google(name): conversion.split_attention_heads(name, value, model.config)
        for name, value in kept.items()})
    atomic_files.write_text(vocab_path, model.vocab)
    conversion.write_json(os.path.join(output_dir, conversion.KERAS_HUB_TOKENIZER_NAME), tokenizer)
    if is_classifier:
      weights_name, bias_name = conversion.SEQUENCE_CLASSIFICATION.head_names()
      kept.update({name: model.tensors[name] for name in (weights_name, bias_name)})
      conversion.write_keras_weights(
          os.path.join(output_dir, conversion.KERAS_HUB_TASK_WEIGHTS_NAME),
          dict(
              zip(KERAS_HUB_CLASSIFIER_WEIGHTS,
                  (model.tensors[weights_name].T, model.tensors[bias_name]))))
      preprocessor = _keras_hub_object(
          "bert_text_classifier_preprocessor", "BertTextClassifierPreprocessor", {
              "tokenizer": tokenizer, "config_file": conversion.KERAS_HUB_PREPROCESSOR_NAME,
              "sequence_length": model.config.max_position_embeddings})
      conversion.write_json(os.path.join(output_dir, conversion.KERAS_HUB_PREPROCESSOR_NAME),
                            preprocessor)
      conversion.write_json(
          os.path.join(output_dir, conversion.KERAS_HUB_TASK_NAME),
          _keras_hub_object("bert_text_classifier", "BertTextClassifier", {
              "backbone": backbone,
              "preprocessor": preprocessor,
              "num_classes": model.num_outputs
          }))
    conversion.write_json(os.path.join(output_dir, conversion.KERAS_HUB_CONFIG_NAME), backbone)
  conversion.log_left_out(model, kept, "KerasHub")
  return output_dir
