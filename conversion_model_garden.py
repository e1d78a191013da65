# coding=utf-8
"""TF Hub encoders and Model Garden checkpoints in the checkpoint converter.

TensorFlow's other BERT models come from Model Garden (`official.nlp`): its `BertEncoder`, saved
in object-based checkpoints (`tf.train.Checkpoint(encoder=...)`), and the TF2 SavedModels in TF
Hub's layout that its `export_tfhub_lib` writes (the `bert_en_uncased_L-12_H-768_A-12` encoders of
tfhub.dev and Kaggle): weights, `assets/vocab.txt` and a `do_lower_case` variable. Both keep each
variable's name in the checkpoint's object graph (`word_embeddings/embeddings`,
`transformer/layer_3/self_attention/query/kernel`, ...): this module reads those names, turns
them into Google's by rule (`MODEL_GARDEN_SCOPES`, `MODEL_GARDEN_LAYER_SCOPES`, and
`MODEL_GARDEN_MASKED_LM` for the masked-LM head that tfhub.dev's encoders and Model Garden's
pretrainer carry) and writes the reverse, a checkpoint
`tf.train.Checkpoint(encoder=BertEncoder(...)).restore` loads. Our own
`extract_features.py --export_format=tf_hub` encoders are read the same way (their variables have
Google's names and their root keeps the config as `bert_config`).

A checkpoint's config comes with it (bert_config.json, as Model Garden's released ones have it):
its weights show the shapes and heads, not the activation. A TF Hub SavedModel has none: it is
read off the weights' shapes and the activation found by running the SavedModel
(`check_outputs_of_saved_model`): the converted model must give the SavedModel's own outputs on
the same ids, or nothing is written.
"""

import dataclasses
import json
import os
import re
from typing import Dict, Mapping, Optional

from absl import logging
from google.protobuf import message
import numpy as np
import tensorflow as tf
from tensorflow.core.protobuf import saved_model_pb2
from tensorflow.core.protobuf import trackable_object_graph_pb2

import atomic_files
import checkpoints
import conversion
import errors
import modeling

# ------------------------------------------------------------------------------------------------
# Model Garden's names.
# ------------------------------------------------------------------------------------------------

# Model Garden's BertEncoder variable name -> Google's, outside the transformer layers.
MODEL_GARDEN_SCOPES = {
    "word_embeddings/embeddings": "bert/embeddings/word_embeddings",
    "position_embedding/embeddings": "bert/embeddings/position_embeddings",
    "type_embeddings/embeddings": "bert/embeddings/token_type_embeddings",
    "embeddings/layer_norm/gamma": "bert/embeddings/LayerNorm/gamma",
    "embeddings/layer_norm/beta": "bert/embeddings/LayerNorm/beta",
    "pooler_transform/kernel": "bert/pooler/dense/kernel",
    "pooler_transform/bias": "bert/pooler/dense/bias",
}
# Its masked-LM head (BertPretrainerV2, and the `mlm` of TF Hub's encoders): the original's
# `cls/predictions`, the output bias kept as a layer's `bias`.
MODEL_GARDEN_MASKED_LM = {
    "bert/cls/predictions/transform/dense/kernel": "cls/predictions/transform/dense/kernel",
    "bert/cls/predictions/transform/dense/bias": "cls/predictions/transform/dense/bias",
    "bert/cls/predictions/transform/LayerNorm/gamma": "cls/predictions/transform/LayerNorm/gamma",
    "bert/cls/predictions/transform/LayerNorm/beta": "cls/predictions/transform/LayerNorm/beta",
    "bert/cls/predictions/output_bias/bias": "cls/predictions/output_bias",
}
# Within `transformer/layer_<i>/` there, and `bert/encoder/layer_<i>/` here.
MODEL_GARDEN_LAYER_SCOPES = {
    "self_attention/query": "attention/self/query",
    "self_attention/key": "attention/self/key",
    "self_attention/value": "attention/self/value",
    "self_attention/attention_output": "attention/output/dense",
    "self_attention_layer_norm": "attention/output/LayerNorm",
    "intermediate": "intermediate/dense",
    "output": "output/dense",
    "output_layer_norm": "output/LayerNorm",
}
_MODEL_GARDEN_LAYER = re.compile(r"^transformer/layer_(\d+)/(.+)/(kernel|bias|gamma|beta)$")
_GOOGLE_LAYER = re.compile(r"^bert/encoder/layer_(\d+)/(.+)/(kernel|bias|gamma|beta)$")
# Where a Model Garden BertEncoder keeps each variable among its tracked children, as its
# checkpoints hold them: its layers with weights in the order its functional graph creates them
# (word, position and type embeddings, the embedding LayerNorm, each transformer block, the
# pooler), and each block's sublayers by attribute.
_BLOCK_SUBLAYERS = {
    "self_attention/query": "_attention_layer/_query_dense",
    "self_attention/key": "_attention_layer/_key_dense",
    "self_attention/value": "_attention_layer/_value_dense",
    "self_attention/attention_output": "_attention_layer/_output_dense",
    "self_attention_layer_norm": "_attention_layer_norm",
    "intermediate": "_intermediate_dense",
    "output": "_output_dense",
    "output_layer_norm": "_output_layer_norm",
}
# What Model Garden's `tf_utils.get_activation` computes for each `hidden_act` of its configs,
# as bert_config.json names it here: its "gelu" is the tanh approximation.
MODEL_GARDEN_ACTIVATIONS = {"gelu_approximate": "gelu", "gelu_new": "gelu", "relu": "relu",
                            "swish": "swish", "silu": "swish", "tanh": "tanh"}
# The activations tried, in this order, on a SavedModel whose config is read off its weights.
_CANDIDATE_ACTIVATIONS = ("gelu_approximate", "gelu", "relu")
# A SavedModel's outputs and the converted model's agree to this (float32 arithmetic).
OUTPUT_TOLERANCE = 1e-4
# The settings a TF Hub encoder's root keeps beside its weights: its casing (TF Hub's layout) and,
# in ours, the BertConfig as JSON text.
TF_HUB_SETTINGS = ("do_lower_case", "bert_config")
# Keras 3's dropout layers keep their random state as variables: not weights.
_RANDOM_STATE = re.compile(r"^seed_generator(_\d+)?/seed_generator_state$")


def google_name_for_model_garden(name: str) -> Optional[str]:
  """Google's name of a Model Garden BertEncoder variable, or of its masked-LM head's (the `mlm`
  part of TF Hub's encoders, BertPretrainerV2's `masked_lm`), or None for a name it does not
  have."""
  if name in MODEL_GARDEN_SCOPES:
    return MODEL_GARDEN_SCOPES[name]
  if name in MODEL_GARDEN_MASKED_LM:
    return MODEL_GARDEN_MASKED_LM[name]
  layer = _MODEL_GARDEN_LAYER.match(name)
  if layer and layer.group(2) in MODEL_GARDEN_LAYER_SCOPES:
    return "bert/encoder/layer_%s/%s/%s" % (layer.group(1),
                                            MODEL_GARDEN_LAYER_SCOPES[layer.group(2)],
                                            layer.group(3))
  return None


def model_garden_name_for_google(google_name: str) -> str:
  """The inverse of `google_name_for_model_garden`, for an encoder variable."""
  for name, google in MODEL_GARDEN_SCOPES.items():
    if google == google_name:
      return name
  layer = _GOOGLE_LAYER.match(google_name)
  scope = {google: name for name, google in MODEL_GARDEN_LAYER_SCOPES.items()}[layer.group(2)]
  return "transformer/layer_%s/%s/%s" % (layer.group(1), scope, layer.group(3))


def _is_google_encoder_name(name: str) -> bool:
  """Whether `name` is Google's name of a BertModel variable (the encoder, no heads)."""
  if name in MODEL_GARDEN_SCOPES.values():
    return True
  layer = _GOOGLE_LAYER.match(name)
  return bool(layer) and layer.group(2) in MODEL_GARDEN_LAYER_SCOPES.values()


def _object_path(name: str, num_layers: int) -> str:
  """Where a variable (Model Garden's name) sits in the object graph of a BertEncoder."""
  embeddings = ("word_embeddings/embeddings", "position_embedding/embeddings",
                "type_embeddings/embeddings")
  if name in embeddings:
    return "layer_with_weights-%d/embeddings" % embeddings.index(name)
  if name.startswith("embeddings/layer_norm/"):
    return "layer_with_weights-3/" + name.rpartition("/")[2]
  if name.startswith("pooler_transform/"):
    return "layer_with_weights-%d/%s" % (4 + num_layers, name.rpartition("/")[2])
  layer = _MODEL_GARDEN_LAYER.match(name)
  return "layer_with_weights-%d/%s/%s" % (4 + int(layer.group(1)),
                                          _BLOCK_SUBLAYERS[layer.group(2)], layer.group(3))


# ------------------------------------------------------------------------------------------------
# Object-based checkpoints, read by the names their object graph keeps.
# ------------------------------------------------------------------------------------------------


def _object_graph(reader, source: str) -> trackable_object_graph_pb2.TrackableObjectGraph:
  """The object graph of an object-based checkpoint (a name-based one has none)."""
  if not reader.has_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"):
    raise conversion.ConversionError(
        "%s is a name-based checkpoint (Google's format), not Model Garden's: pass it as "
        "`init_checkpoint`" % source)
  graph = trackable_object_graph_pb2.TrackableObjectGraph()
  graph.ParseFromString(reader.get_tensor("_CHECKPOINTABLE_OBJECT_GRAPH"))
  return graph


def _training_state_nodes(graph) -> set:
  """The nodes of optimizer slots and of everything under a root `optimizer`: not weights."""
  nodes = {slot.slot_variable_node_id for node in graph.nodes for slot in node.slot_variables}
  pending = [child.node_id for child in graph.nodes[0].children
             if child.local_name == "optimizer"]
  while pending:
    node = pending.pop()
    if node not in nodes:
      nodes.add(node)
      pending.extend(child.node_id for child in graph.nodes[node].children)
  return nodes


def read_named_variables(graph: trackable_object_graph_pb2.TrackableObjectGraph
                         ) -> Dict[str, str]:
  """Variable name -> checkpoint key of every weight of an object-based checkpoint's graph (each
  node's `full_name`, the name the variable had when saved), optimizer state and counters left
  out."""
  skipped = _training_state_nodes(graph)
  counters = {child.node_id for child in graph.nodes[0].children
              if child.local_name in ("save_counter", "global_step", "step")}
  names = {}
  for node_id, node in enumerate(graph.nodes):
    if node_id in skipped or node_id in counters:
      continue
    for attribute in node.attributes:
      if attribute.name == "VARIABLE_VALUE":
        names.setdefault(attribute.full_name.rpartition(":")[0] or attribute.full_name,
                         attribute.checkpoint_key)
  return names


def _root_variable_keys(graph: trackable_object_graph_pb2.TrackableObjectGraph) -> Dict[str, str]:
  """Child name -> checkpoint key of each variable the checkpoint's root holds itself."""
  keys = {}
  for reference in graph.nodes[0].children:
    for attribute in graph.nodes[reference.node_id].attributes:
      if attribute.name == "VARIABLE_VALUE":
        keys[reference.local_name] = attribute.checkpoint_key
  return keys


def _setting_value(reader, key: str):
  """A root setting's value: a scalar as a Python value, text decoded."""
  value = reader.get_tensor(key)
  value = value.item() if isinstance(value, np.ndarray) else value
  return value.decode("utf-8") if isinstance(value, bytes) else value


@dataclasses.dataclass
class _Weights:
  """What an object-based checkpoint holds: the encoder weights in Google's names and layout,
  the name each had in the source, the number of attention heads where the layout shows it
  (Model Garden keeps heads apart), and the root's settings (TF_HUB_SETTINGS; None if absent)."""
  tensors: Dict[str, np.ndarray]
  source_names: Dict[str, str]
  heads: Optional[int]
  settings: Dict[str, object]


def _read_weights(prefix: str, source: str) -> _Weights:
  """Reads an object-based checkpoint once (`_Weights`). Model Garden's names are translated;
  Google's (our own TF Hub encoders) kept."""
  reader = checkpoints.open_checkpoint(prefix)
  graph = _object_graph(reader, prefix)
  setting_keys = {name: key for name, key in _root_variable_keys(graph).items()
                  if name in TF_HUB_SETTINGS}
  weights = _Weights({}, {}, None, {name: _setting_value(reader, setting_keys[name])
                                     if name in setting_keys else None
                                     for name in TF_HUB_SETTINGS})
  unknown = []
  for name, key in sorted(read_named_variables(graph).items()):
    if key in setting_keys.values() or _RANDOM_STATE.match(name):
      continue
    google_name = name if _is_google_encoder_name(name) else google_name_for_model_garden(name)
    if google_name is None:
      unknown.append(name)
      continue
    value = checkpoints.read_tensor(reader, prefix, key)
    conversion.check_floating(value, source, name)
    value = np.asarray(value, dtype=np.float32)
    if google_name != name:
      if google_name.endswith("/attention/self/query/kernel") and value.ndim == 3:
        weights.heads = value.shape[1]
      value = conversion.join_attention_heads(google_name, value)
    weights.tensors[google_name] = value
    weights.source_names[google_name] = name
  if "bert/embeddings/word_embeddings" not in weights.tensors:
    raise conversion.ConversionError("%s holds no BERT encoder (no word_embeddings/embeddings)" %
                                     source)
  if unknown:
    raise conversion.ConversionError(
        "%s: variable(s) not in a BERT encoder: %s (only a BertEncoder's variables convert; "
        "heads such as a pretrainer's masked LM do not)" %
        (source, conversion.describe_names(unknown)))
  return weights


def _architecture(tensors: Mapping[str, np.ndarray]) -> conversion.Architecture:
  """BertForMaskedLM where the masked-LM head came along, else the encoder alone."""
  masked_lm = any(name.startswith("cls/predictions/") for name in tensors)
  return conversion.ARCHITECTURES["BertForMaskedLM" if masked_lm else "BertModel"]


def config_of_weights(tensors: Mapping[str, np.ndarray], heads: Optional[int], hidden_act: str,
                      source: str) -> modeling.BertConfig:
  """The BertConfig of Google-named weights with `heads` attention heads; dropouts and the
  initializer range are the original's defaults."""
  vocab_size, hidden_size = tensors["bert/embeddings/word_embeddings"].shape
  layers = {int(_GOOGLE_LAYER.match(name).group(1)) for name in tensors
            if _GOOGLE_LAYER.match(name)}
  intermediate = tensors.get("bert/encoder/layer_0/intermediate/dense/kernel")
  if heads is None or intermediate is None or layers != set(range(len(layers))):
    raise conversion.ConversionError(
        "%s: no config, and its weights do not show one (transformer layers numbered 0, 1, ... "
        "with query kernels [hidden, heads, size])" % source)
  for name in ("bert/embeddings/position_embeddings", "bert/embeddings/token_type_embeddings"):
    if name not in tensors:
      raise conversion.ConversionError("%s lacks %s" % (source, name))
  return modeling.BertConfig(
      vocab_size=int(vocab_size), hidden_size=int(hidden_size), num_hidden_layers=len(layers),
      num_attention_heads=int(heads), intermediate_size=int(intermediate.shape[1]),
      hidden_act=hidden_act,
      max_position_embeddings=int(tensors["bert/embeddings/position_embeddings"].shape[0]),
      type_vocab_size=int(tensors["bert/embeddings/token_type_embeddings"].shape[0]))


# ------------------------------------------------------------------------------------------------
# Model Garden checkpoints.
# ------------------------------------------------------------------------------------------------


def read_model_garden_checkpoint(checkpoint: str, bert_config_file: Optional[str] = None,
                                 vocab_file: Optional[str] = None,
                                 do_lower_case: Optional[bool] = None
                                 ) -> conversion.ConvertedModel:
  """Reads a Model Garden BertEncoder checkpoint (a prefix, or a directory with a `checkpoint`
  state file) with its config: `bert_config_file`, default bert_config.json beside it, as Model
  Garden's released checkpoints have it (its `hidden_act` "gelu" is what Model Garden computes,
  the tanh approximation). A checkpoint holds no activation, so there is no default. The vocab is
  `vocab_file` or vocab.txt beside it."""
  if tf.io.gfile.exists(os.path.join(checkpoint, "saved_model.pb")):
    raise conversion.ConversionError("%s is a SavedModel: convert a TF Hub encoder with "
                                     "`tf_hub_model_path`" % checkpoint)
  prefix = checkpoints.resolve_checkpoint_path(checkpoint)
  directory = os.path.dirname(prefix)
  weights = _read_weights(prefix, prefix)
  tensors, heads = weights.tensors, weights.heads
  config_path = bert_config_file or os.path.join(directory, conversion.GOOGLE_CONFIG_NAME)
  if not tf.io.gfile.exists(config_path):
    raise conversion.ConversionError(
        "%s has no bert_config.json beside it: pass `bert_config_file` (the config the encoder "
        "was built with: a checkpoint holds no activation)" % prefix)
  config = modeling.BertConfig.from_json_file(config_path)
  if config.hidden_act.lower() == "gelu":
    logging.warning('%s: hidden_act "gelu" is read as Model Garden computes it, the tanh '
                    "approximation (gelu_approximate), which the converted config says",
                    config_path)
    config.hidden_act = "gelu_approximate"
  if heads is not None and heads != config.num_attention_heads:
    raise conversion.ConversionError(
        "%s: its attention weights have %d heads, but %s says num_attention_heads %d" %
        (prefix, heads, config_path, config.num_attention_heads))
  if vocab_file is None:
    vocab_file = os.path.join(directory, conversion.VOCAB_NAME)
    vocab = conversion.text_if_exists(vocab_file)
  else:
    vocab = conversion.read_text(vocab_file)
  model = conversion.ConvertedModel(config, tensors, _architecture(tensors), prefix,
                                    vocab=vocab, do_lower_case=do_lower_case)
  conversion.check_model(model, weights.source_names)
  return model


def _variable_tree(tensors: Mapping[str, np.ndarray], num_layers: int) -> tf.Module:
  """A tree of trackable objects in which each tensor, as a tf.Variable with its Model Garden
  name, sits where a BertEncoder keeps it (`_object_path`)."""
  root = tf.Module()
  for name, value in sorted(tensors.items()):
    *parents, leaf = _object_path(name, num_layers).split("/")
    node = root
    for parent in parents:
      if not hasattr(node, parent):
        setattr(node, parent, tf.Module())
      node = getattr(node, parent)
    setattr(node, leaf, tf.Variable(value, name=name, trainable=True))
  return root


def model_garden_config(config: modeling.BertConfig, source: str) -> dict:
  """bert_config.json as Model Garden reads it (`configs.BertConfig`): its activation named as
  Model Garden computes it."""
  activation = config.hidden_act.lower()
  if activation == "gelu":
    logging.warning("%s: hidden_act is gelu (exact); Model Garden computes the tanh "
                    "approximation, which differs by less than 1e-3 per activation (the original "
                    "BERT's own gelu is that approximation)", source)
    activation = "gelu_approximate"
  if activation not in MODEL_GARDEN_ACTIVATIONS:
    raise conversion.ConversionError("%s: hidden_act %r has no Model Garden name" %
                                     (source, config.hidden_act))
  return dict(config.to_dict(), hidden_act=MODEL_GARDEN_ACTIVATIONS[activation])


def write_model_garden_checkpoint(model: conversion.ConvertedModel, output_dir: str) -> str:
  """Writes a Model Garden BertEncoder checkpoint into output_dir: `bert_model.ckpt`, which
  `tf.train.Checkpoint(encoder=encoder)` (or `model=encoder`, Model Garden's other name for it)
  restores into `BertEncoder(...)` of bert_config.json, with vocab.txt. Heads are left out
  (the log says which). Returns the checkpoint prefix."""
  config = model_garden_config(model.config, model.source)
  lacking = [name for name in model.absent if name.startswith("bert/")]
  if lacking:
    raise conversion.ConversionError("%s lacks %s, which Model Garden's BertEncoder needs" %
                                     (model.source, conversion.describe_names(lacking)))
  kept = {name: value for name, value in model.tensors.items() if name.startswith("bert/")}
  tree = _variable_tree({model_garden_name_for_google(name):
                         conversion.split_attention_heads(name, value, model.config)
                         for name, value in kept.items()}, model.config.num_hidden_layers)
  prefix = os.path.join(output_dir, conversion.GOOGLE_CHECKPOINT_NAME)
  with conversion.naming_write_errors(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(prefix) as temporary_prefix:
      checkpoint = tf.train.Checkpoint(encoder=tree, model=tree)
      checkpoint.save_counter.assign(1)  # As `save` leaves it: restoring checks it too.
      checkpoint.write(temporary_prefix)
    conversion.write_json(os.path.join(output_dir, conversion.GOOGLE_CONFIG_NAME), config)
    if model.vocab:
      atomic_files.write_text(os.path.join(output_dir, conversion.VOCAB_NAME), model.vocab)
  conversion.log_left_out(model, kept, "Model Garden's BertEncoder")
  return prefix


# ------------------------------------------------------------------------------------------------
# TF Hub encoders (TF2 SavedModels).
# ------------------------------------------------------------------------------------------------


def _asset_files(path: str) -> Dict[str, str]:
  """Name the SavedModel's objects give their asset (e.g. `vocab_file`) -> the asset's path."""
  saved_model = saved_model_pb2.SavedModel()
  graph_file = os.path.join(path, "saved_model.pb")
  with tf.io.gfile.GFile(graph_file, "rb") as reader:
    try:
      saved_model.ParseFromString(reader.read())
    except message.DecodeError as error:  # Cut short or not a SavedModel's graph.
      raise conversion.ConversionError("%s is not a readable SavedModel graph (%s)" % (
          graph_file, error)) from None
  if not saved_model.meta_graphs:
    raise conversion.ConversionError("%s holds no graph: not a SavedModel" % graph_file)
  meta_graph = saved_model.meta_graphs[0]
  nodes = meta_graph.object_graph_def.nodes
  files = {}
  for child in nodes[0].children if nodes else ():
    node = nodes[child.node_id]
    if node.WhichOneof("kind") == "asset":
      filename = meta_graph.asset_file_def[node.asset.asset_file_def_index].filename
      files[child.local_name] = os.path.join(path, "assets", filename)
  return files


def _saved_model_outputs(path: str, features: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """The sequence and pooled outputs of a TF Hub encoder SavedModel called as TF Hub's users call
  it (`hub.KerasLayer` calls the root object on the dict of inputs)."""
  outputs = tf.saved_model.load(path)(
      {name: tf.constant(value, tf.int32) for name, value in features.items()}, training=False)
  return {name: outputs[name].numpy() for name in ("sequence_output", "pooled_output")}


def _probe_features(config: modeling.BertConfig) -> Dict[str, np.ndarray]:
  """Two short rows of ids (the second padded), for comparing a SavedModel with our model."""
  length = min(8, config.max_position_embeddings)
  ids = np.random.RandomState(0).randint(0, config.vocab_size, size=(2, length))
  mask = np.ones_like(ids)
  mask[1, length // 2:] = 0
  types = np.zeros_like(ids)
  types[:, length // 2:] = min(1, config.type_vocab_size - 1)
  return {"input_word_ids": ids, "input_mask": mask, "input_type_ids": types}


def _our_outputs(model: conversion.ConvertedModel, config: modeling.BertConfig,
                 features: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Our BertModel's outputs with the model's weights under `config`."""
  bert = modeling.BertModel(config, name="bert")
  bert.build()
  variables = checkpoints.checkpoint_variables(bert)
  for name, variable in variables.items():
    variable.assign(model.tensors[name])
  outputs = bert(features["input_word_ids"], input_mask=features["input_mask"],
                 token_type_ids=features["input_type_ids"], training=False)
  return {name: outputs[name].numpy() for name in ("sequence_output", "pooled_output")}


def check_outputs_of_saved_model(model: conversion.ConvertedModel, path: str,
                                 activations) -> None:
  """Sets the model's activation to the first of `activations` with which our BertModel gives the
  SavedModel's own sequence and pooled outputs (to OUTPUT_TOLERANCE); raises ConversionError if
  none does (its config, or its arithmetic, is not BERT's as read off the weights)."""
  features = _probe_features(model.config)
  expected = _saved_model_outputs(path, features)
  differences = {}
  for activation in activations:
    config = modeling.BertConfig.from_dict(dict(model.config.to_dict(), hidden_act=activation))
    ours = _our_outputs(model, config, features)
    differences[activation] = max(float(np.max(np.abs(ours[name] - expected[name])))
                                  for name in expected)
    if differences[activation] <= OUTPUT_TOLERANCE:
      model.config = config
      return
  raise conversion.ConversionError(
      "%s: a BERT of the config read off its weights does not give its outputs (largest "
      "difference %s): another architecture, activation or precision" % (
          path, ", ".join("%.2g with %s" % (difference, activation)
                          for activation, difference in differences.items())))


def read_tf_hub_encoder(path: str, flag: str = "`tf_hub_model_path`"
                        ) -> conversion.ConvertedModel:
  """Reads a BERT encoder SavedModel in TF Hub's layout (Model Garden's `export_model`, or our
  extract_features.py --export_format=tf_hub): its weights, `vocab_file` asset and
  `do_lower_case`; its config from its config asset or its weights, checked by running it
  (`check_outputs_of_saved_model`)."""
  errors.check_tf_hub_encoder_directory(path, flag)
  prefix = os.path.join(path, "variables", "variables")
  weights = _read_weights(prefix, path)
  tensors, settings = weights.tensors, weights.settings
  assets = _asset_files(path)
  if "vocab_file" not in assets:
    raise conversion.ConversionError(
        "%s: no `vocab_file` among its assets (%s): a WordPiece BERT encoder of TF Hub's layout "
        "has one" % (path, ", ".join(sorted(assets)) or "none"))
  if settings["do_lower_case"] is None:
    raise conversion.ConversionError("%s has no `do_lower_case`: not a BERT encoder of TF Hub's "
                                     "layout" % path)
  if settings["bert_config"] is not None:
    config = modeling.BertConfig.from_dict(json.loads(settings["bert_config"]))
    activations = (config.hidden_act,)
  else:
    config = config_of_weights(tensors, weights.heads, _CANDIDATE_ACTIVATIONS[0], path)
    activations = _CANDIDATE_ACTIVATIONS
  model = conversion.ConvertedModel(config, tensors, _architecture(tensors), path,
                                    vocab=conversion.read_text(assets["vocab_file"]),
                                    do_lower_case=bool(settings["do_lower_case"]))
  conversion.check_model(model, weights.source_names)
  check_outputs_of_saved_model(model, path, activations)
  return model
