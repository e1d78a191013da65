# coding=utf-8
"""What the checkpoint converter's formats share: file names, name translation, configs, heads.

convert_checkpoint.py is the command and says what it converts and by which rules. This module
holds the parts every direction uses: the files of each format, Hugging Face <-> Google variable
names, the configs, the task heads both formats know (`ARCHITECTURES`), the conversion and
checking of tensors against the model of the config (`ConvertedModel`), and the output
directory's files (the converted-model mark, label lists, vocabs, safetensors headers).
conversion_hf.py, conversion_keras_hub.py and conversion_google.py read and write each format.
"""

import collections
import contextlib
import dataclasses
import io
import json
import math
import os
import posixpath
import re
import struct
from typing import Any, Callable, Dict, Iterator, Mapping, Optional, Tuple

from absl import logging
import h5py
import keras
import numpy as np
import safetensors
import safetensors.numpy
import tensorflow as tf

import atomic_files
import checkpoints
import classifier
import classifier_data
import errors
import heads
import modeling
import multiple_choice
import squad
import tagging
import task_files
import tokenization

GOOGLE_CHECKPOINT_NAME = "bert_model.ckpt"
GOOGLE_CONFIG_NAME = modeling.CONFIG_FILE_NAME
HF_WEIGHTS_NAME = "model.safetensors"
HF_INDEX_NAME = "model.safetensors.index.json"
HF_CONFIG_NAME = "config.json"
HF_TOKENIZER_CONFIG_NAME = "tokenizer_config.json"
HF_TOKENIZER_NAME = "tokenizer.json"
VOCAB_NAME = "vocab.txt"
KERAS_HUB_CONFIG_NAME = "config.json"
KERAS_HUB_WEIGHTS_NAME = "model.weights.h5"
KERAS_HUB_TASK_NAME = "task.json"
KERAS_HUB_TASK_WEIGHTS_NAME = "task.weights.h5"
KERAS_HUB_TOKENIZER_NAME = "tokenizer.json"
KERAS_HUB_PREPROCESSOR_NAME = "preprocessor.json"
# Where a KerasHub tokenizer keeps its vocab: assets/<its config file's stem>/vocabulary.txt.
KERAS_HUB_VOCAB_PATH = ("assets", "tokenizer", "vocabulary.txt")

# The fields of Google's bert_config.json; everything else in a Hugging Face config is dropped.
CONFIG_FIELDS = ("vocab_size", "hidden_size", "num_hidden_layers", "num_attention_heads",
                 "intermediate_size", "hidden_act", "hidden_dropout_prob",
                 "attention_probs_dropout_prob", "max_position_embeddings", "type_vocab_size",
                 "initializer_range")
# Hugging Face activation names -> the names modeling.BertConfig understands (same functions).
HF_TO_GOOGLE_ACTIVATION = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_pytorch_tanh": "gelu_new",
                           "gelu_fast": "gelu_new", "relu": "relu", "silu": "silu",
                           "swish": "swish", "tanh": "tanh"}
GOOGLE_TO_HF_ACTIVATION = {"gelu": "gelu", "gelu_new": "gelu_new", "gelu_approximate": "gelu_new",
                           "relu": "relu", "silu": "silu", "swish": "swish", "tanh": "tanh"}
# KerasHub's BertBackbone config field -> bert_config.json's. It has one dropout rate, and always
# computes GELU with the tanh approximation (`gelu_approximate` here).
KERAS_HUB_CONFIG_FIELDS = {"vocabulary_size": "vocab_size", "num_layers": "num_hidden_layers",
                           "num_heads": "num_attention_heads", "hidden_dim": "hidden_size",
                           "intermediate_dim": "intermediate_size",
                           "max_sequence_length": "max_position_embeddings",
                           "num_segments": "type_vocab_size", "dropout": "hidden_dropout_prob"}
KERAS_HUB_ACTIVATION = "gelu_approximate"
# Hugging Face's problem types of BertForSequenceClassification.
SINGLE_LABEL, MULTI_LABEL, REGRESSION = ("single_label_classification",
                                         "multi_label_classification", "regression")
# Registered buffers Hugging Face stores beside the weights; they hold no learned values.
HF_BUFFERS = ("embeddings.position_ids", "embeddings.token_type_ids")
PICKLE_SUFFIXES = (".bin", ".pt", ".pth", ".pkl")
BERT_SCOPES = ("embeddings", "encoder", "pooler")
_LAYER_NORM_LEAVES = {"weight": "gamma", "bias": "beta", "gamma": "gamma", "beta": "beta"}


# Bytes per element of the safetensors dtypes this converter reads, by the format's names.
SAFETENSORS_DTYPE_BYTES = {"BOOL": 1, "U8": 1, "I8": 1, "U16": 2, "I16": 2, "F16": 2, "U32": 4,
                           "I32": 4, "F32": 4, "U64": 8, "I64": 8, "F64": 8}


# The largest header the safetensors format allows (its reference implementation's limit).
SAFETENSORS_MAX_HEADER_BYTES = 100_000_000


class ConversionError(errors.InputError):
  """A file to convert is missing, malformed, says one thing and holds another, or does not fit
  the model's config; the message names the file (and the tensor)."""


class UnknownTensorError(ConversionError):
  """A tensor name that is not part of BERT (or its pretraining heads)."""


# ------------------------------------------------------------------------------------------------
# Name translation.
# ------------------------------------------------------------------------------------------------


def google_name_for_hf(hf_name: str) -> Optional[Tuple[str, bool]]:
  """Translates a Hugging Face tensor name to `(google name, transpose)`, or None for a buffer.

  Both `bert.encoder...` and bare `encoder...` names are accepted. The MLM decoder's weight and
  bias are tied copies of the word embeddings and of `cls.predictions.bias`, so they translate to
  those Google names (conversion checks that the copies agree).

  Raises:
    UnknownTensorError: for names outside BERT and its pretraining heads.
  """
  parts = hf_name.split(".")
  if parts[0] == "bert":
    parts = parts[1:]
  if ".".join(parts) in HF_BUFFERS:
    return None
  if parts and parts[0] in BERT_SCOPES:
    parts = ["bert"] + parts
  elif not parts or parts[0] != "cls":
    raise UnknownTensorError(hf_name)
  scope = re.sub(r"/layer/(\d+)/", r"/layer_\1/", "/".join(parts[:-1]) + "/")[:-1]
  leaf = parts[-1]
  owner = scope.rsplit("/", 1)[-1]
  if owner == "LayerNorm" and leaf in _LAYER_NORM_LEAVES:
    return "%s/%s" % (scope, _LAYER_NORM_LEAVES[leaf]), False
  if owner.endswith("_embeddings") and leaf == "weight":
    return scope, False
  if scope == "cls/seq_relationship" and leaf in ("weight", "bias"):
    return "cls/seq_relationship/output_%s" % ("weights" if leaf == "weight" else "bias"), False
  if scope in ("cls/predictions", "cls/predictions/decoder") and leaf == "bias":
    return "cls/predictions/output_bias", False
  if scope == "cls/predictions/decoder" and leaf == "weight":
    return "bert/embeddings/word_embeddings", False
  if leaf == "weight":
    return scope + "/kernel", True
  if leaf == "bias":
    return scope + "/bias", False
  raise UnknownTensorError(hf_name)


def hf_name_for_google(google_name: str) -> Tuple[str, bool]:
  """Translates a Google name to `(Hugging Face name with the bert. prefix, transpose)`.

  The inverse of `google_name_for_hf` on the names of `heads.BertPretrainingModel`.
  """
  scope, _, leaf = google_name.rpartition("/")
  if leaf in ("gamma", "beta"):
    leaf = "weight" if leaf == "gamma" else "bias"
  transpose = leaf == "kernel"
  if transpose:
    leaf = "weight"
  elif leaf.endswith("_embeddings"):
    scope, leaf = google_name, "weight"
  elif scope == "cls/seq_relationship":
    leaf = "weight" if leaf == "output_weights" else "bias"
  elif google_name == "cls/predictions/output_bias":
    leaf = "bias"
  hf_name = re.sub(r"/layer_(\d+)/", r"/layer/\1/", scope + "/").replace("/", ".") + leaf
  if google_name_for_hf(hf_name) != (google_name, transpose):
    raise UnknownTensorError(google_name)
  return hf_name, transpose


# ------------------------------------------------------------------------------------------------
# Configs.
# ------------------------------------------------------------------------------------------------


def google_config_from_hf(hf_config: Mapping, source: str) -> modeling.BertConfig:
  """Builds a Google-style BertConfig from a Hugging Face BERT config.json, dropping HF-only keys.

  Raises:
    ConversionError: naming `source` and the key, for configs this architecture cannot represent.
  """
  if not isinstance(hf_config, dict):
    raise ConversionError("%s: expected a JSON object of config values, got %s" %
                          (source, type(hf_config).__name__))
  model_type = hf_config.get("model_type", "bert")
  if model_type != "bert":
    raise ConversionError("%s: model_type %r is not BERT" % (source, model_type))
  if hf_config.get("position_embedding_type", "absolute") != "absolute":
    raise ConversionError("%s: position_embedding_type %r is not supported (BERT uses "
                          "absolute position embeddings)" %
                          (source, hf_config["position_embedding_type"]))
  for key in ("is_decoder", "add_cross_attention"):
    if hf_config.get(key):
      raise ConversionError("%s: %s is set; only the BERT encoder is supported" % (source, key))
  if hf_config.get("layer_norm_eps", 1e-12) != 1e-12:
    logging.warning("%s: layer_norm_eps is %r; the model uses BERT's 1e-12", source,
                    hf_config["layer_norm_eps"])
  missing = [field for field in CONFIG_FIELDS if field not in hf_config]
  if missing:
    raise ConversionError("%s: missing key(s) %s" % (source, ", ".join(missing)))
  fields = {field: hf_config[field] for field in CONFIG_FIELDS}
  activation = fields["hidden_act"]
  if not isinstance(activation, str) or activation not in HF_TO_GOOGLE_ACTIVATION:
    raise ConversionError("%s: hidden_act %r is not supported (known: %s)" % (
        source, activation, ", ".join(sorted(HF_TO_GOOGLE_ACTIVATION))))
  fields["hidden_act"] = HF_TO_GOOGLE_ACTIVATION[activation]
  return _checked_config(fields, source)


def _checked_config(fields: Mapping, source: str) -> modeling.BertConfig:
  try:
    return modeling.BertConfig.from_dict(fields)
  except ValueError as e:  # BertConfig's check of the values.
    raise ConversionError("%s: %s" % (source, e)) from e


def hf_config_from_google(config: modeling.BertConfig, architecture: str) -> dict:
  """A Hugging Face config.json dict for a BERT of the given class (`BertForPreTraining`, ...)."""
  fields = {field: getattr(config, field) for field in CONFIG_FIELDS}
  fields["hidden_act"] = GOOGLE_TO_HF_ACTIVATION[config.hidden_act.lower()]
  fields.update({
      "architectures": [architecture],
      "model_type": "bert",
      "layer_norm_eps": 1e-12,
      "position_embedding_type": "absolute",
      "pad_token_id": 0,
  })
  return fields


def google_config_from_keras_hub(fields: Mapping, source: str) -> modeling.BertConfig:
  """A BertConfig from the `config` of a KerasHub BertBackbone (see KERAS_HUB_CONFIG_FIELDS)."""
  missing = [field for field in KERAS_HUB_CONFIG_FIELDS if field not in fields]
  if missing:
    raise ConversionError("%s: missing key(s) %s" % (source, ", ".join(missing)))
  values = {google: fields[field] for field, google in KERAS_HUB_CONFIG_FIELDS.items()}
  values.update(hidden_act=KERAS_HUB_ACTIVATION, initializer_range=0.02,
                attention_probs_dropout_prob=values["hidden_dropout_prob"])
  return _checked_config(values, source)


def keras_hub_config_from_google(config: modeling.BertConfig, source: str) -> dict:
  """The `config` of a KerasHub BertBackbone of this BERT; its activation is checked first.

  Raises:
    ConversionError: naming `source`, for an activation BertBackbone cannot compute (not GELU).
  """
  activation = config.hidden_act.lower()
  if activation == "gelu":
    logging.warning("%s: hidden_act is gelu (exact); KerasHub's BertBackbone computes the tanh "
                    "approximation, which differs by less than 1e-3 per activation (the "
                    "original BERT's own gelu is that approximation)", source)
  elif GOOGLE_TO_HF_ACTIVATION.get(activation) != "gelu_new":
    raise ConversionError("%s: hidden_act %r: KerasHub's BertBackbone computes only GELU" %
                          (source, config.hidden_act))
  return {field: getattr(config, google) for field, google in KERAS_HUB_CONFIG_FIELDS.items()}


# ------------------------------------------------------------------------------------------------
# Architectures: what a model's heads are, in both formats.
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class Architecture:
  """A Hugging Face BERT class and our model that holds the same weights.

  Attributes:
    name: the class, as config.json's `architectures` names it.
    build_model: our model from a config and its number of outputs; its variables are the Google
      names and shapes a converted model must have.
    head_scope: the scope of the task head's `output_weights` [N, H] and `output_bias` [N] here
      ("" for the top level); None for the encoder and the pretraining heads (named by rule).
    hf_head: the module holding the head there (`classifier.weight` [N, H], `.bias`): the same
      layout, no transpose.
    label_file: the file that names the head's outputs, beside our checkpoints.
    omits: scopes of our model that the Hugging Face class lacks: it has no pooler, or fewer
      pretraining heads.
    script: our script that fine-tunes the head.
  """
  name: str
  build_model: Callable[[modeling.BertConfig, int], keras.Model]
  head_scope: Optional[str] = None
  hf_head: Optional[str] = None
  label_file: Optional[str] = None
  omits: Tuple[str, ...] = ()
  script: Optional[str] = None

  def head_names(self) -> Dict[str, str]:
    """Google name -> Hugging Face name of the task head's weights and bias (none without one)."""
    if self.head_scope is None:
      return {}
    return {posixpath.join(self.head_scope, "output_weights"): self.hf_head + ".weight",
            posixpath.join(self.head_scope, "output_bias"): self.hf_head + ".bias"}

  def omits_name(self, google_name: str) -> bool:
    return google_name.startswith(self.omits)

  def required_names(self, names) -> list:
    """The names among `names` (of our model) that a source must hold: all but the omitted, and
    for the encoder classes all but the pretraining heads (a model initialises absent ones)."""
    optional = self.omits + (("cls/",) if self.head_scope is None else ())
    return [name for name in names if not name.startswith(optional)]


def _pretraining_model(config: modeling.BertConfig, unused_num_outputs: int) -> keras.Model:
  return heads.BertPretrainingModel(config)


_NO_POOLER = ("bert/pooler/",)
ARCHITECTURES = {architecture.name: architecture for architecture in (
    Architecture("BertModel", _pretraining_model, omits=("cls/",)),
    Architecture("BertForPreTraining", _pretraining_model),
    Architecture("BertForMaskedLM", _pretraining_model,
                 omits=_NO_POOLER + ("cls/seq_relationship/",)),
    Architecture("BertForSequenceClassification", classifier.BertClassifier, "", "classifier",
                 classifier_data.LABEL_LIST_FILE, script="run_classifier.py"),
    Architecture("BertForTokenClassification", tagging.BertTagger, "", "classifier",
                 tagging.TAG_LIST_FILE, _NO_POOLER, "run_ner.py"),
    Architecture("BertForQuestionAnswering", lambda config, _: squad.SquadModel(config),
                 squad.HEAD_SCOPE, "qa_outputs", omits=_NO_POOLER, script="run_squad.py"),
    Architecture("BertForMultipleChoice",
                 lambda config, _: multiple_choice.BertMultipleChoice(config),
                 multiple_choice.HEAD_SCOPE, "classifier", script="run_multiple_choice.py"),
)}
SEQUENCE_CLASSIFICATION = ARCHITECTURES["BertForSequenceClassification"]


# ------------------------------------------------------------------------------------------------
# Tensor conversion and checking.
# ------------------------------------------------------------------------------------------------


@dataclasses.dataclass
class ConvertedModel:
  """A model between formats: what a reader found and a writer needs.

  Attributes:
    config: the model's configuration.
    tensors: Google name -> float32 array.
    architecture: what its heads are.
    source: the file(s) read, for messages.
    labels: the names of the head's outputs in order (a classifier's labels, a tagger's tags);
      empty for other heads and for regression.
    problem_type: BertForSequenceClassification's SINGLE_LABEL, MULTI_LABEL or REGRESSION.
    labels_source: where `labels` (or the problem type) came from, for messages.
    vocab: the text of the tokenizer's vocab file (a token a line), when known.
    do_lower_case: the tokenizer's casing, when known.
    absent: names of our model that the source lacks and a run initialises (set by `check_model`).
  """
  config: modeling.BertConfig
  tensors: Dict[str, np.ndarray]
  architecture: Architecture
  source: str
  labels: Tuple[str, ...] = ()
  problem_type: Optional[str] = None
  labels_source: Optional[str] = None
  vocab: Optional[str] = None
  do_lower_case: Optional[bool] = None
  absent: list = dataclasses.field(default_factory=list)

  @property
  def num_outputs(self) -> int:
    """The head's outputs as the labels say: one per label, one score for regression."""
    return len(self.labels) or 1


def model_shapes(model: keras.Model) -> Dict[str, Tuple[int, ...]]:
  """Google name -> shape of every variable of `model`, built."""
  model.build()
  return {name: tuple(v.shape) for name, v in checkpoints.checkpoint_variables(model).items()}


def describe_names(names, limit: int = 8) -> str:
  """The sorted names, the first `limit` of them, and how many more (for one-line messages)."""
  names = sorted(names)
  more = " and %d more" % (len(names) - limit) if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


def check_model(model: ConvertedModel, source_names: Mapping[str, str]) -> None:
  """Checks a model's tensors against our model of its architecture (`check_tensors`), after its
  vocab against its config and its head against its labels, and records in `model.absent` what
  the source lacks.

  Raises:
    ConversionError: naming the source, for a vocab that does not fit the config
      (`tokenization.check_tokens_fit_model`), a head with another number of outputs than its
      labels and for what `check_tensors` refuses.
  """
  architecture = model.architecture
  if model.vocab:
    try:
      tokenization.check_tokens_fit_model(
          tokenization.vocab_of_lines(io.BytesIO(model.vocab.encode("utf-8")), model.source),
          model.config.vocab_size, "of " + model.source, special_tokens=())  # Scripts check them.
    except tokenization.VocabError as error:
      raise ConversionError(str(error)) from None
  if architecture.label_file:
    bias = model.tensors.get(posixpath.join(architecture.head_scope, "output_bias"))
    if bias is not None and bias.ndim == 1 and bias.shape[0] != model.num_outputs:
      raise ConversionError("%s: its %s head has %d outputs, but %s gives %s" % (
          model.source, architecture.script, bias.shape[0], model.labels_source,
          "%d labels" % len(model.labels) if model.labels else "one score (regression)"))
  shapes = model_shapes(architecture.build_model(model.config, model.num_outputs))
  model.absent = check_tensors(model.tensors, shapes, architecture.required_names(shapes),
                               source_names, model.source)


def check_tensors(tensors: Mapping[str, np.ndarray], shapes: Mapping[str, Tuple[int, ...]],
                  required, source_names: Mapping[str, str], source: str) -> list:
  """Checks Google-named tensors against a model's variables; returns the absent names.

  Args:
    tensors: Google name -> array.
    shapes: Google name -> shape of each variable of the model (`model_shapes`).
    required: the names the source must hold.
    source_names: Google name -> the name it had in `source`, for error messages.
    source: the file being converted, for error messages.

  Raises:
    ConversionError: naming the tensors that the model does not have, that have the wrong shape, or
      that are required but `source` lacks.
  """
  unknown = [source_names[name] for name in tensors if name not in shapes]
  if unknown:
    raise ConversionError("%s: tensor(s) not in a BERT model: %s" %
                          (source, describe_names(unknown)))
  for name, value in sorted(tensors.items()):
    if tuple(value.shape) != shapes[name]:
      raise ConversionError("%s: tensor %s (%s) has shape %s but the config needs %s" %
                            (source, source_names[name], name, list(value.shape),
                             list(shapes[name])))
    check_floating(value, source, source_names[name])
  absent = sorted(set(shapes) - set(tensors))
  missing = sorted(set(required) - set(tensors))
  if missing:
    raise ConversionError("%s lacks tensor(s) the model needs: %s" %
                          (source, describe_names(missing)))
  return absent


def check_floating(value: np.ndarray, source: str, name: str) -> None:
  """BERT's weights are floating point: an integer or boolean tensor under a weight's name is
  not one, and casting it would hide that."""
  if not np.issubdtype(np.asarray(value).dtype, np.floating):
    raise ConversionError("%s: tensor %s has dtype %s, but BERT's weights are floating point" %
                          (source, name, np.asarray(value).dtype))


_SELF_ATTENTION = re.compile(r"/attention/self/(query|key|value)/(kernel|bias)$")
_ATTENTION_OUTPUT_KERNEL = "/attention/output/dense/kernel"


def split_attention_heads(google_name: str, value: np.ndarray,
                          config: modeling.BertConfig) -> np.ndarray:
  """A Google-layout encoder tensor in the layout of Keras's MultiHeadAttention (KerasHub, Model
  Garden), which keeps the heads apart: query, key and value kernels [H, heads, size] and biases
  [heads, size], the output kernel [heads, size, H]. Other tensors are returned as they are."""
  heads = (config.num_attention_heads, config.size_per_head)
  if _SELF_ATTENTION.search(google_name):
    return value.reshape(value.shape[:-1] + heads)
  if google_name.endswith(_ATTENTION_OUTPUT_KERNEL):
    return value.reshape(heads + value.shape[1:])
  return value


def join_attention_heads(google_name: str, value: np.ndarray) -> np.ndarray:
  """The inverse of `split_attention_heads`: the heads of an attention tensor joined again."""
  if _SELF_ATTENTION.search(google_name) and value.ndim >= 2:
    return value.reshape(value.shape[:-2] + (-1,))
  if google_name.endswith(_ATTENTION_OUTPUT_KERNEL) and value.ndim >= 2:
    return value.reshape((-1,) + value.shape[2:])
  return value


def hf_to_google_tensors(hf_tensors: Mapping[str, np.ndarray], architecture: Architecture,
                         source: str = "<tensors>"
                         ) -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
  """Renames (and transposes) Hugging Face tensors to Google names, as float32.

  The task head of `architecture` (`classifier.weight`, ...) becomes its `output_weights` and
  `output_bias`; the rest translates by `google_name_for_hf`.

  Returns:
    (Google name -> array, Google name -> Hugging Face name). Buffers are skipped.

  Raises:
    ConversionError: naming unknown tensors, or tied copies (decoder weight/bias) that disagree.
  """
  head_names = {hf_name: google_name
                for google_name, hf_name in architecture.head_names().items()}
  tensors, source_names, unknown = {}, {}, []
  for hf_name in sorted(hf_tensors):
    try:
      translated = ((head_names[hf_name], False) if hf_name in head_names
                    else google_name_for_hf(hf_name))
    except UnknownTensorError:
      unknown.append(hf_name)
      continue
    if translated is None:
      continue
    google_name, transpose = translated
    check_floating(hf_tensors[hf_name], source, hf_name)
    value = np.asarray(hf_tensors[hf_name], dtype=np.float32)
    value = np.ascontiguousarray(value.T) if transpose else value
    if google_name in tensors:
      if not np.array_equal(tensors[google_name], value):
        raise ConversionError("%s: %s and %s both map to %s but differ (untied weights cannot "
                              "be stored in Google's format)" %
                              (source, source_names[google_name], hf_name, google_name))
      continue
    tensors[google_name] = value
    source_names[google_name] = hf_name
  if unknown:
    raise ConversionError("%s: tensor(s) not in a BERT model: %s" %
                          (source, describe_names(unknown)))
  return tensors, source_names


def google_to_hf_tensors(tensors: Mapping[str, np.ndarray], architecture: Architecture
                         ) -> Dict[str, np.ndarray]:
  """Renames (and transposes) Google-named tensors to Hugging Face names with the `bert.` prefix;
  the task head of `architecture` becomes its `classifier`/`qa_outputs` weight and bias."""
  head_names = architecture.head_names()
  hf_tensors = {}
  for google_name, value in tensors.items():
    hf_name, transpose = ((head_names[google_name], False) if google_name in head_names
                          else hf_name_for_google(google_name))
    value = np.asarray(value, dtype=np.float32)
    hf_tensors[hf_name] = np.ascontiguousarray(value.T if transpose else value)
  return hf_tensors


# ------------------------------------------------------------------------------------------------
# Files.
# ------------------------------------------------------------------------------------------------


def refuse_pickle(path: str) -> None:
  """Raises ConversionError for pickle-based PyTorch checkpoints, saying why and what to use
  instead."""
  raise ConversionError(
      "%s is a pickle-based PyTorch checkpoint. It is not read: unpickling a file can run "
      "arbitrary code from it. Use the model's model.safetensors instead (most hubs publish one), "
      "or convert the file to safetensors once in an environment you trust, e.g. with "
      "transformers: BertModel.from_pretrained(dir).save_pretrained(out, safe_serialization=True)."
      % path)


def resolve_hf_files(hf_model_path: str) -> Tuple[list, str]:
  """Returns (safetensors files, config.json path) for a model directory or a .safetensors file.

  A sharded model's index is checked against its shards (`_index_shards`).
  """
  if hf_model_path.endswith(PICKLE_SUFFIXES):
    refuse_pickle(hf_model_path)
  if not tf.io.gfile.isdir(hf_model_path):
    if not tf.io.gfile.exists(hf_model_path):
      raise ConversionError("`hf_model_path` %s does not exist" % hf_model_path)
    if not hf_model_path.endswith(".safetensors"):
      raise ConversionError("`hf_model_path` %s is neither a directory nor a .safetensors file" %
                            hf_model_path)
    return [hf_model_path], os.path.join(os.path.dirname(hf_model_path), HF_CONFIG_NAME)
  config_path = os.path.join(hf_model_path, HF_CONFIG_NAME)
  weights_path = os.path.join(hf_model_path, HF_WEIGHTS_NAME)
  index_path = os.path.join(hf_model_path, HF_INDEX_NAME)
  if tf.io.gfile.exists(weights_path):
    return [weights_path], config_path
  if tf.io.gfile.exists(index_path):
    return _index_shards(index_path), config_path
  pickles = [name for name in tf.io.gfile.listdir(hf_model_path) if name.endswith(PICKLE_SUFFIXES)]
  if pickles:
    refuse_pickle(os.path.join(hf_model_path, pickles[0]))
  raise ConversionError("%s has no %s or %s" % (hf_model_path, HF_WEIGHTS_NAME, HF_INDEX_NAME))


def _index_shards(index_path: str) -> list:
  """The shard files of a sharded model's `model.safetensors.index.json`, in name order.

  The index's `weight_map` (tensor name -> shard file) must name files inside its directory that
  exist, and must say exactly which tensors each shard holds (checked against the shards'
  headers): an index that says one thing while the shards hold another is not used.
  """
  index = read_json(index_path)
  weight_map = index.get("weight_map") if isinstance(index, dict) else None
  if not (isinstance(weight_map, dict) and weight_map and
          all(isinstance(shard, str) for shard in weight_map.values())):
    raise ConversionError('%s: expected {"weight_map": {tensor name: shard file name, ...}}' %
                          index_path)
  paths = []
  for shard in sorted(set(weight_map.values())):
    path = _shard_path(index_path, shard)
    listed = {name for name, named in weight_map.items() if named == shard}
    held = set(read_safetensors_header(path))
    if listed - held:
      raise ConversionError("%s places tensor(s) %s in %s, which does not hold them" %
                            (index_path, describe_names(listed - held), path))
    if held - listed:
      raise ConversionError("%s holds tensor(s) %s that %s does not place there" %
                            (path, describe_names(held - listed), index_path))
    paths.append(path)
  return paths


def _shard_path(index_path: str, shard: str) -> str:
  """The path of a shard an index names, which must be a file in the index's directory (or below
  it): `../x`, absolute paths and URLs are refused, so that a downloaded index cannot make us read
  other files. The check is on the name, not on where symbolic links lead: Hugging Face's cache
  links each snapshot's files to blobs elsewhere."""
  normal = posixpath.normpath(shard)
  if ("://" in shard or "\\" in shard or posixpath.isabs(shard) or os.path.isabs(shard) or
      normal in (".", "..") or normal.startswith("../")):
    raise ConversionError("%s: shard %r is not a file name inside the index's directory" %
                          (index_path, shard))
  path = os.path.join(os.path.dirname(index_path), normal)
  if not tf.io.gfile.exists(path) or tf.io.gfile.isdir(path):
    raise ConversionError("%s names shard %s, which does not exist" % (index_path, path))
  return path


def _unique_keys(pairs: list) -> dict:
  """A JSON object's pairs as a dict; a repeated key is a ValueError (json keeps the last one)."""
  result = dict(pairs)
  if len(result) != len(pairs):
    counts = collections.Counter(name for name, _ in pairs)
    raise ValueError("key %r appears more than once" %
                     min(name for name, count in counts.items() if count > 1))
  return result


def _is_size_list(value) -> bool:
  """Whether a JSON value is a list of non-negative integers."""
  return isinstance(value, list) and all(
      isinstance(item, int) and not isinstance(item, bool) and item >= 0 for item in value)


def _tensor_entry(path: str, name: str, entry, data_bytes: int) -> tuple:
  """(dtype, shape, (begin, end)) of a safetensors header entry, checked against the data size."""
  tensor = "%s: tensor %s" % (path, name)
  if not (isinstance(entry, dict) and {"dtype", "shape", "data_offsets"} <= set(entry)):
    raise ConversionError("%s: its header entry lacks dtype, shape or data_offsets" % tensor)
  dtype, shape, offsets = entry["dtype"], entry["shape"], entry["data_offsets"]
  if not isinstance(dtype, str) or dtype not in SAFETENSORS_DTYPE_BYTES:
    raise ConversionError("%s has dtype %r, not one of %s" %
                          (tensor, dtype, ", ".join(SAFETENSORS_DTYPE_BYTES)))
  if not _is_size_list(shape):
    raise ConversionError("%s has shape %r, not a list of sizes" % (tensor, shape))
  if not (_is_size_list(offsets) and len(offsets) == 2 and
          offsets[0] <= offsets[1] <= data_bytes):
    raise ConversionError("%s has data_offsets %r, not a range within the file's %d bytes of "
                          "data" % (tensor, offsets, data_bytes))
  size = math.prod(shape) * SAFETENSORS_DTYPE_BYTES[dtype]
  if size != offsets[1] - offsets[0]:
    raise ConversionError("%s: shape %s of %s is %d bytes, but its data_offsets %s hold %d" %
                          (tensor, shape, dtype, size, offsets, offsets[1] - offsets[0]))
  return dtype, tuple(shape), tuple(offsets)


def _check_no_overlap(path: str, entries: Mapping[str, tuple]) -> None:
  """Two tensors of one file may not share bytes (each entry is (dtype, shape, (begin, end)))."""
  spans = sorted((entry[2], name) for name, entry in entries.items())
  for (first, first_name), (second, second_name) in zip(spans, spans[1:]):
    if second[0] < first[1]:
      raise ConversionError("%s: tensors %s (data bytes %d-%d) and %s (data bytes %d-%d) "
                            "overlap" % (path, first_name, first[0], first[1], second_name,
                                         second[0], second[1]))


def _read_header_bytes(path: str) -> Tuple[int, bytes]:
  """(file size, header bytes) of a safetensors file, its length field checked against the size."""
  try:
    size = tf.io.gfile.stat(path).length
    with tf.io.gfile.GFile(path, "rb") as f:
      length_field = f.read(8)
      if len(length_field) < 8:
        raise ConversionError("%s: %d bytes is too short for a safetensors file (its header "
                              "length alone takes 8)" % (path, size))
      (header_length,) = struct.unpack("<Q", length_field)
      if header_length > SAFETENSORS_MAX_HEADER_BYTES:
        raise ConversionError("%s: its header length says %d bytes, more than the format allows "
                              "(%d)" % (path, header_length, SAFETENSORS_MAX_HEADER_BYTES))
      if header_length > size - 8:
        raise ConversionError("%s: its header length says %d bytes but only %d follow: not a "
                              "safetensors file, or cut short" % (path, header_length, size - 8))
      return size, f.read(header_length)
  except tf.errors.OpError as error:
    raise ConversionError(errors.named(path, error)) from error


def read_safetensors_header(path: str) -> Dict[str, Tuple[str, Tuple[int, ...]]]:
  """Reads and checks the header of a safetensors file against the file's size.

  The format: an 8-byte little-endian length N, then N bytes of JSON giving each tensor's dtype,
  shape and `data_offsets` [begin, end) into the data that follows (and optional `__metadata__`
  strings). Each entry must describe exactly its bytes: a known dtype, a range inside the file
  that overlaps no other, and a shape whose size times the dtype's width is the range's length.

  Returns:
    Tensor name -> (dtype, shape).

  Raises:
    ConversionError: naming the file (and tensor) and what its header gets wrong.
  """
  size, header_bytes = _read_header_bytes(path)
  try:
    header = json.loads(header_bytes.decode("utf-8"), object_pairs_hook=_unique_keys)
  except ValueError as error:  # Not UTF-8, not JSON or a repeated name.
    raise ConversionError("%s: its header is not valid JSON (%s)" % (path, error)) from error
  if not isinstance(header, dict):
    raise ConversionError("%s: its header is not a JSON object" % path)
  metadata = header.pop("__metadata__", {})
  if not (isinstance(metadata, dict) and all(isinstance(v, str) for v in metadata.values())):
    raise ConversionError("%s: its __metadata__ is not an object of strings" % path)
  data_bytes = size - 8 - len(header_bytes)
  entries = {name: _tensor_entry(path, name, entry, data_bytes) for name, entry in header.items()}
  _check_no_overlap(path, entries)
  return {name: entry[:2] for name, entry in entries.items()}


def read_safetensors(paths) -> Dict[str, np.ndarray]:
  """Reads every tensor of one or more safetensors files (shards) into NumPy arrays, each file's
  header checked first (`read_safetensors_header`); a tensor in two files is an error."""
  tensors, origins = {}, {}
  for path in paths:
    logging.info("Reading %s", path)
    names = read_safetensors_header(path)
    for name in names:
      if name in origins:
        raise ConversionError("tensor %s is in both %s and %s" % (name, origins[name], path))
      origins[name] = path
    try:
      with safetensors.safe_open(path, framework="numpy") as f:
        for name in names:
          tensors[name] = f.get_tensor(name)
    except (safetensors.SafetensorError, OSError) as error:
      raise ConversionError(errors.named(path, error)) from error
  return tensors


def read_text(path: str) -> str:
  """A UTF-8 text file's text; a missing, unreadable or undecodable file is a ConversionError."""
  if not tf.io.gfile.exists(path):
    raise ConversionError("%s does not exist" % path)
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      return f.read().decode("utf-8")
  except UnicodeDecodeError as error:
    raise ConversionError("%s is not UTF-8 text: %s" % (path, error)) from error
  except tf.errors.OpError as error:
    raise ConversionError(errors.named(path, error)) from error


def read_json(path: str):
  """A JSON file's value; a missing, unreadable or malformed file is a ConversionError."""
  text = read_text(path)
  try:
    return json.loads(text)
  except ValueError as error:
    raise ConversionError("%s is not valid JSON: %s" % (path, error)) from error


def read_keras_weights(path: str) -> Dict[str, np.ndarray]:
  """Every dataset of a Keras weights file (`*.weights.h5`), by its path in the file.

  Only what the file holds is read: a link (to another object or file) or a dataset whose bytes
  are stored elsewhere (external or virtual) is refused.
  """
  if not tf.io.gfile.exists(path):
    raise ConversionError("%s does not exist" % path)
  links = {}  # Path -> link; the visit stops at a callback's first result that is not None.

  def record(name, link) -> None:
    links[name] = link

  try:
    with h5py.File(path, "r") as f:
      f.visititems_links(record)
      other = [name for name, link in links.items() if not isinstance(link, h5py.HardLink)]
      if other:
        raise ConversionError("%s: %s is a link, not data of the file" % (path, other[0]))
      datasets = {name: f[name] for name in links if isinstance(f[name], h5py.Dataset)}
      outside = [name for name, item in datasets.items() if item.is_virtual or item.external]
      if outside:
        raise ConversionError("%s: dataset %s is stored outside the file" % (path, outside[0]))
      return {name: item[()] for name, item in datasets.items()}
  except OSError as error:  # Not an HDF5 file, or cut short.
    raise ConversionError(errors.named(path, error)) from error


@contextlib.contextmanager
def naming_write_errors(output_dir: str) -> Iterator[None]:
  """Raises what fails while writing the converted model (an --output_dir that is a file or
  cannot be written, a full disk) as a ConversionError naming the directory."""
  try:
    yield
  except (tf.errors.OpError, OSError, safetensors.SafetensorError) as error:
    raise ConversionError("cannot write the converted model to %s (%s)" %
                          (output_dir, errors.first_line(error))) from error


def write_json(path: str, value) -> None:
  """Writes `value` as indented JSON with sorted keys (through the one output path)."""
  atomic_files.write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def write_keras_weights(path: str, weights: Mapping[str, np.ndarray]) -> None:
  """Writes a Keras weights file: each array as a dataset at its path."""
  with atomic_files.atomic_output(path) as temporary:
    with h5py.File(temporary, "w") as f:
      for name, value in sorted(weights.items()):
        f.create_dataset(name, data=np.ascontiguousarray(value, dtype=np.float32))


def check_tokenizer_settings(settings: Mapping[str, Any], names: Mapping[str, str], source: str,
                             accents_by_default: bool = False) -> None:
  """Raises ConversionError where another library's tokenizer settings tokenize otherwise than
  Google's FullTokenizer, which strips accents exactly when it lower-cases and always splits CJK
  characters into words of their own: a converted model would read other tokens than its source.
  `names` maps "lowercase", "strip_accents" and "chinese_chars" to the settings' keys (an absent
  key is that library's default). With `accents_by_default` (KerasHub, whose BertTokenizer keeps
  accents unless told, also in its presets of Google's uncased BERT) other accent handling is a
  WARNING: the converted model reads texts as Google's BERT was trained to."""
  lowercase = settings.get(names["lowercase"])
  strip_accents = settings.get(names["strip_accents"], False if accents_by_default else None)
  if strip_accents is not None and lowercase is not None and bool(strip_accents) != bool(lowercase):
    message = ("%s: %s is %s with %s %s, which Google's tokenizer cannot reproduce (it strips "
               "accents exactly when it lower-cases): the converted model reads texts with "
               "accents as other tokens" % (source, names["strip_accents"],
                                            json.dumps(strip_accents), names["lowercase"],
                                            json.dumps(lowercase)))
    if not accents_by_default:
      raise ConversionError(message)
    logging.warning("%s, as Google's BERT does", message)
  if settings.get(names["chinese_chars"]) is False:
    raise ConversionError(
        "%s: %s is false, which Google's tokenizer cannot reproduce (it makes every CJK "
        "character a word): the converted model would read other tokens" % (
            source, names["chinese_chars"]))


def text_if_exists(path: str) -> Optional[str]:
  """The text of `path`, or None where there is no such file."""
  return read_text(path) if tf.io.gfile.exists(path) else None


def read_labels(architecture: Architecture, directory: str) -> Tuple[str, ...]:
  """The output names in the label file of `architecture` in `directory`, read as our scripts
  read them."""
  if architecture.label_file == tagging.TAG_LIST_FILE:
    return tuple(tagging.read_tag_list(directory))
  return classifier_data.read_label_list(os.path.join(directory, architecture.label_file))


def write_labels(architecture: Architecture, labels, directory: str) -> None:
  """Writes the label file of `architecture` into `directory`, as our scripts write it."""
  if architecture.label_file == tagging.TAG_LIST_FILE:
    tagging.write_tag_list(labels, directory)
  else:
    task_files.write_label_list(os.path.join(directory, architecture.label_file), labels)


def log_left_out(model: ConvertedModel, kept, target: str) -> None:
  """Logs the tensors of `model` that the `target` format has no place for (not in `kept`)."""
  left_out = sorted(set(model.tensors) - set(kept))
  if left_out:
    logging.info("Left out (%s has no such weights): %s", target, describe_names(left_out))
