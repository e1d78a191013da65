# coding=utf-8
"""Converts BERT models, fine-tuned heads included, between Google's checkpoint format, Hugging
Face safetensors and KerasHub presets.

Hugging Face -> Google:

  python convert_checkpoint.py --hf_model_path=path/to/hf_model --output_dir=out

reads `model.safetensors` (or a sharded `model.safetensors.index.json`), `config.json` and, when
there, the tokenizer's files (`vocab.txt`, else the vocab in `tokenizer.json`, which is all that
transformers 5 saves; the casing in `tokenizer_config.json`), and writes
`out/bert_model.ckpt.{index,data-00000-of-00001}`, `out/bert_config.json` and `out/vocab.txt`: the
layout of Google's released models, usable as `--init_checkpoint`, `--bert_config_file` and
`--vocab_file` by every script here and by the original code. A fine-tuned model also gets the file
that names its outputs as our scripts write it in their output_dir (`label_list.txt`,
`tag_list.txt`), and the log says which script and flags run it.

KerasHub -> Google:

  python convert_checkpoint.py --keras_hub_preset=path/to/preset --output_dir=out

reads a `BertBackbone` preset as `save_to_preset` writes it (`config.json`, `model.weights.h5`,
`tokenizer.json` and `assets/tokenizer/vocabulary.txt`) into the same files.

Google -> Hugging Face:

  python convert_checkpoint.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json --output_dir=out

writes `out/model.safetensors` (names with the `bert.` prefix, as `transformers` saves them),
`out/config.json` and the tokenizer (`vocab.txt` from --vocab_file or beside the checkpoint, and a
`tokenizer_config.json` with --do_lower_case), so that `AutoTokenizer.from_pretrained(out)` and the
`AutoModelFor...` class of the head load it. With `--output_format=keras_hub` it writes a KerasHub
preset instead (`BertBackbone.from_preset(out)`; a classifier also `BertTextClassifier`). Optimizer
slots and `global_step` of training checkpoints are left out.

The task heads (`ARCHITECTURES`), found by their variable names here and by config.json's
`architectures` there:

  our script           head variables                          Hugging Face class
  run_classifier       output_weights, output_bias             BertForSequenceClassification
  run_ner              output_weights, output_bias             BertForTokenClassification
  run_squad            cls/squad/output_weights, ...           BertForQuestionAnswering
  run_multiple_choice  cls/multiple_choice/output_weights, ... BertForMultipleChoice
  run_pretraining      cls/predictions/..., cls/seq_relationship/...
                                                               BertForPreTraining, BertForMaskedLM

run_classifier and run_ner heads have the same names: `label_list.txt` or `tag_list.txt` beside the
checkpoint tells them apart and names the outputs (Hugging Face's `id2label`); a classifier of a
task with fixed labels (GLUE, XNLI) takes them from `--task_name` instead (`sts-b`: regression),
and `--multi_label` marks one trained with it (Hugging Face's `problem_type`). Hugging Face's
token classification, question answering and masked LM classes have no pooler: their checkpoints
here lack it, and a script loads them with `--allow_partial_init_checkpoint` (the pooler is not
read by those tasks).

Names are translated by rule, not by table: `.`-scopes become `/`-scopes, `layer.N` becomes
`layer_N`, PyTorch Linear `weight` [out, in] becomes a transposed `kernel` [in, out], LayerNorm
`weight`/`bias` (or old `gamma`/`beta`) become `gamma`/`beta`, embedding tables drop `.weight`, and
the heads use the original's `output_weights`/`output_bias` (layout [out, in], as PyTorch's). Every
tensor is checked against our model of that architecture built from the config, so a converted
checkpoint always loads into it. KerasHub's weights file names its groups after Keras layer
classes; `KERAS_HUB_SCOPES` gives the few that BertBackbone has.

Pickle-based PyTorch files (`pytorch_model.bin`) are refused: unpickling runs arbitrary code.
Nothing a file says about itself is taken on trust: each safetensors header is checked against the
file's size before a tensor is read (`read_safetensors_header`), a sharded index must name shards
inside its directory that hold exactly the tensors it places there, a Keras weights file may hold
no links or data stored elsewhere, and every tensor must fit the config. Bad input is a
`ConversionError` naming the file, printed as one line by `cli.run_script`.

`--output_dir` is one unit: the converted model is written into a staging directory beside it,
which then takes its name in one step (`atomic_files`), so a reader, even after a kill, finds the
old model or the new one, never some files of each. It holds `CONVERTED_MARK_NAME`, listing the
files written; a non-empty directory without it (another model), or with files it does not list
(added since), is replaced only with `--overwrite_output_dir`, and a training run's output_dir
never (its checkpoints would meet another model's label list).
"""

import collections
import contextlib
import dataclasses
import json
import math
import os
import posixpath
import re
import struct
import time
from typing import Callable, Dict, Iterator, Mapping, Optional, Tuple

from absl import flags
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
import cli
import errors
import modeling
import multiple_choice
import squad
import tagging
import task_files
import tokenization

FLAGS = flags.FLAGS

OUTPUT_FORMATS = ("hugging_face", "keras_hub")


def define_flags() -> None:
  """The converter's flags."""
  flags.DEFINE_string("hf_model_path", None,
                      "Hugging Face BERT to convert to Google's format: a directory with "
                      "config.json and model.safetensors, or a .safetensors file with config.json "
                      "beside it.")
  flags.DEFINE_string("keras_hub_preset", None,
                      "KerasHub BERT preset to convert to Google's format: a directory with "
                      "config.json (a BertBackbone) and model.weights.h5.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Google-format checkpoint (prefix such as .../bert_model.ckpt or "
                      ".../model.ckpt-N, or a directory) to convert to --output_format.")
  flags.DEFINE_enum("output_format", "hugging_face", list(OUTPUT_FORMATS),
                    "With --init_checkpoint: hugging_face (model.safetensors, config.json and the "
                    "tokenizer's files) or keras_hub (a preset for BertBackbone.from_preset, and "
                    "BertTextClassifier.from_preset for a run_classifier checkpoint).")
  flags.DEFINE_string("bert_config_file", None,
                      "The bert_config.json of --init_checkpoint (default: bert_config.json in the "
                      "checkpoint's directory).")
  flags.DEFINE_string("vocab_file", None,
                      "With --init_checkpoint: the vocab the model was trained with, written as "
                      "the converted model's tokenizer (default: vocab.txt in the checkpoint's "
                      "directory).")
  flags.DEFINE_bool("do_lower_case", True,
                    "With --init_checkpoint: whether the model lower-cases its input (True for "
                    "uncased models), written into the tokenizer's files.")
  flags.DEFINE_string("task_name", None,
                      "With a run_classifier checkpoint of a task with fixed labels: its "
                      "--task_name (e.g. MRPC; sts-b is regression), which gives the labels. "
                      "Default: label_list.txt in the checkpoint's directory.")
  flags.DEFINE_bool("multi_label", False,
                    "With a run_classifier checkpoint trained with --multi_label (a sigmoid per "
                    "label).")
  flags.DEFINE_string("output_dir", None,
                      "Directory to write the converted model to, replaced whole. It must be new, "
                      "empty or an earlier output of this script; never a training output_dir.")
  flags.DEFINE_bool("overwrite_output_dir", False,
                    "Replace a non-empty --output_dir that is not an earlier output of this script "
                    "(e.g. another model) with the converted model.")

GOOGLE_CHECKPOINT_NAME = "bert_model.ckpt"
GOOGLE_CONFIG_NAME = "bert_config.json"
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
# Written into every converted model's directory: marks it as one this script may replace.
CONVERTED_MARK_NAME = ".convert_checkpoint.json"
# Names that only a training run's output_dir holds: no conversion ever replaces such a directory.
TRAINING_RUN_NAMES = ("checkpoint", "training_settings.json", atomic_files.LOCK_FILE_NAME)
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

  The inverse of `google_name_for_hf` on the names of `modeling.BertPretrainingModel`.
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
  return modeling.BertPretrainingModel(config)


_NO_POOLER = ("bert/pooler/",)
ARCHITECTURES = {architecture.name: architecture for architecture in (
    Architecture("BertModel", _pretraining_model, omits=("cls/",)),
    Architecture("BertForPreTraining", _pretraining_model),
    Architecture("BertForMaskedLM", _pretraining_model,
                 omits=_NO_POOLER + ("cls/seq_relationship/",)),
    Architecture("BertForSequenceClassification", classifier.BertClassifier, "", "classifier",
                 classifier.LABEL_LIST_FILE, script="run_classifier.py"),
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


def _describe(names, limit: int = 8) -> str:
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
          tokenization.vocab_of_lines(model.vocab.splitlines(), model.source),
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
    raise ConversionError("%s: tensor(s) not in a BERT model: %s" % (source, _describe(unknown)))
  for name, value in sorted(tensors.items()):
    if tuple(value.shape) != shapes[name]:
      raise ConversionError("%s: tensor %s (%s) has shape %s but the config needs %s" %
                            (source, source_names[name], name, list(value.shape),
                             list(shapes[name])))
    _check_floating(value, source, source_names[name])
  absent = sorted(set(shapes) - set(tensors))
  missing = sorted(set(required) - set(tensors))
  if missing:
    raise ConversionError("%s lacks tensor(s) the model needs: %s" % (source, _describe(missing)))
  return absent


def _check_floating(value: np.ndarray, source: str, name: str) -> None:
  """BERT's weights are floating point: an integer or boolean tensor under a weight's name is
  not one, and casting it would hide that."""
  if not np.issubdtype(np.asarray(value).dtype, np.floating):
    raise ConversionError("%s: tensor %s has dtype %s, but BERT's weights are floating point" %
                          (source, name, np.asarray(value).dtype))


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
    _check_floating(hf_tensors[hf_name], source, hf_name)
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
    raise ConversionError("%s: tensor(s) not in a BERT model: %s" % (source, _describe(unknown)))
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
_SELF_ATTENTION = re.compile(r"/attention/self/(query|key|value)/(kernel|bias)$")
_ATTENTION_OUTPUT_KERNEL = "/attention/output/dense/kernel"


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


def keras_hub_layout(google_name: str, value: np.ndarray,
                     config: modeling.BertConfig) -> np.ndarray:
  """A Google-layout encoder tensor in KerasHub's layout: its attention keeps heads apart (query,
  key and value kernels [H, heads, size] and biases [heads, size], the output kernel
  [heads, size, H]); everything else is as here."""
  heads = (config.num_attention_heads, config.size_per_head)
  if _SELF_ATTENTION.search(google_name):
    return value.reshape(value.shape[:-1] + heads)
  if google_name.endswith(_ATTENTION_OUTPUT_KERNEL):
    return value.reshape(heads + value.shape[1:])
  return value


def google_layout(google_name: str, value: np.ndarray) -> np.ndarray:
  """The inverse of `keras_hub_layout`: the heads of an attention tensor joined again."""
  if _SELF_ATTENTION.search(google_name) and value.ndim >= 2:
    return value.reshape(value.shape[:-2] + (-1,))
  if google_name.endswith(_ATTENTION_OUTPUT_KERNEL) and value.ndim >= 2:
    return value.reshape((-1,) + value.shape[2:])
  return value


def _keras_hub_object(module: str, class_name: str, config: dict) -> dict:
  """A KerasHub object as Keras serializes it into a preset's JSON files."""
  return {"module": "keras_hub.src.models.bert." + module, "class_name": class_name,
          "config": config, "registered_name": "keras_hub>" + class_name}


def _check_keras_hub_class(value, class_name: str, source: str) -> dict:
  """The `config` of a serialized KerasHub object, which must be of `class_name`."""
  if not isinstance(value, dict) or "registered_name" not in value:
    hint = (": a Hugging Face config.json, convert it with --hf_model_path"
            if isinstance(value, dict) and "model_type" in value else "")
    raise ConversionError("%s is not a KerasHub preset's file%s" % (source, hint))
  if value["registered_name"] != "keras_hub>" + class_name:
    raise ConversionError("%s: holds a %s, not a %s" % (
        source, value.get("class_name") or value["registered_name"], class_name))
  if not isinstance(value.get("config"), dict):
    raise ConversionError("%s: its config is not a JSON object" % source)
  return value["config"]


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
      raise ConversionError("--hf_model_path %s does not exist" % hf_model_path)
    if not hf_model_path.endswith(".safetensors"):
      raise ConversionError("--hf_model_path %s is neither a directory nor a .safetensors file" %
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
  index = _read_json(index_path)
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
                            (index_path, _describe(listed - held), path))
    if held - listed:
      raise ConversionError("%s holds tensor(s) %s that %s does not place there" %
                            (path, _describe(held - listed), index_path))
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


def _read_text(path: str) -> str:
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


def _read_json(path: str):
  """A JSON file's value; a missing, unreadable or malformed file is a ConversionError."""
  text = _read_text(path)
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
def _writing(output_dir: str) -> Iterator[None]:
  """Raises what fails while writing the converted model (an --output_dir that is a file or
  cannot be written, a full disk) as a ConversionError naming the directory."""
  try:
    yield
  except (tf.errors.OpError, OSError, safetensors.SafetensorError) as error:
    raise ConversionError("cannot write the converted model to %s (%s)" %
                          (output_dir, errors.first_line(error))) from error


def _write_json(path: str, value) -> None:
  atomic_files.write_text(path, json.dumps(value, indent=2, sort_keys=True) + "\n")


def _write_keras_weights(path: str, weights: Mapping[str, np.ndarray]) -> None:
  """Writes a Keras weights file: each array as a dataset at its path."""
  with atomic_files.atomic_output(path) as temporary:
    with h5py.File(temporary, "w") as f:
      for name, value in sorted(weights.items()):
        f.create_dataset(name, data=np.ascontiguousarray(value, dtype=np.float32))


def _text_if_exists(path: str) -> Optional[str]:
  return _read_text(path) if tf.io.gfile.exists(path) else None


def _read_labels(architecture: Architecture, directory: str) -> Tuple[str, ...]:
  """The output names in the label file of `architecture` in `directory`, read as our scripts
  read them."""
  if architecture.label_file == tagging.TAG_LIST_FILE:
    return tuple(tagging.read_tag_list(directory))
  return classifier.read_label_list(os.path.join(directory, architecture.label_file))


def _write_labels(architecture: Architecture, labels, directory: str) -> None:
  """Writes the label file of `architecture` into `directory`, as our scripts write it."""
  if architecture.label_file == tagging.TAG_LIST_FILE:
    tagging.write_tag_list(labels, directory)
  else:
    task_files.write_label_list(os.path.join(directory, architecture.label_file), labels)


def _log_left_out(model: ConvertedModel, kept, target: str) -> None:
  left_out = sorted(set(model.tensors) - set(kept))
  if left_out:
    logging.info("Left out (%s has no such weights): %s", target, _describe(left_out))


# ------------------------------------------------------------------------------------------------
# Hugging Face.
# ------------------------------------------------------------------------------------------------


def hf_architecture(hf_config: Mapping, source: str) -> Architecture:
  """The first class of config.json's `architectures` known here; without one, the encoder with
  whatever pretraining heads its tensors hold."""
  names = hf_config.get("architectures") or []
  if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
    raise ConversionError("%s: architectures %r is not a list of class names" % (source, names))
  known = [ARCHITECTURES[name] for name in names if name in ARCHITECTURES]
  return known[0] if known else ARCHITECTURES["BertForPreTraining"]


def hf_labels(hf_config: Mapping, architecture: Architecture,
              source: str) -> Tuple[Tuple[str, ...], Optional[str]]:
  """(labels, problem type) of a Hugging Face config: the names of `id2label` in id order, and for
  sequence classification `problem_type` as transformers decides it (one output: regression,
  which has no labels). A config without `id2label` gets transformers' names, `LABEL_<i>`."""
  if architecture.label_file is None:
    return (), None
  id2label = hf_config.get("id2label")
  if id2label is None:  # Older configs of two labels left it out.
    count = hf_config.get("num_labels", 2)
    id2label = {str(i): "LABEL_%d" % i for i in range(count if isinstance(count, int) else 0)}
  labels = _labels_of_id2label(id2label, source)
  if architecture is not SEQUENCE_CLASSIFICATION:
    return labels, None
  problem_type = hf_config.get("problem_type") or (REGRESSION if len(labels) == 1
                                                   else SINGLE_LABEL)
  if problem_type not in (SINGLE_LABEL, MULTI_LABEL, REGRESSION):
    raise ConversionError("%s: problem_type %r is not one of %s, %s, %s" %
                          (source, problem_type, SINGLE_LABEL, MULTI_LABEL, REGRESSION))
  return (() if problem_type == REGRESSION else labels), problem_type


def _labels_of_id2label(id2label, source: str) -> Tuple[str, ...]:
  """The names of an `id2label` object in id order; its ids must be 0..N-1, its names distinct
  lines."""
  by_id = {}
  if isinstance(id2label, dict):
    for key, name in id2label.items():
      if (isinstance(key, str) and key.isdigit() and isinstance(name, str) and name.strip() and
          "\n" not in name and "\r" not in name):
        by_id[int(key)] = name
  if not by_id or sorted(by_id) != list(range(len(id2label))):
    raise ConversionError("%s: id2label must give the ids 0..N-1 each a name of one line, got "
                          "%.200r" % (source, id2label))
  labels = tuple(by_id[i] for i in range(len(by_id)))
  task_files.check_distinct_names(labels, source + ": id2label", place="id", first=0)
  return labels


def hf_tokenizer_config(config: modeling.BertConfig, do_lower_case: Optional[bool]) -> dict:
  """The tokenizer_config.json of transformers' BertTokenizer that tokenizes as FullTokenizer:
  the original's rules (accents stripped when lower-casing, CJK characters split) and special
  tokens, inputs up to the model's positions."""
  return {"tokenizer_class": "BertTokenizer", "do_lower_case": do_lower_case,
          "strip_accents": None, "tokenize_chinese_chars": True,
          "unk_token": tokenization.UNK_TOKEN, "sep_token": tokenization.SEP_TOKEN,
          "pad_token": tokenization.PAD_TOKEN, "cls_token": tokenization.CLS_TOKEN,
          "mask_token": tokenization.MASK_TOKEN,
          "model_max_length": config.max_position_embeddings}


def hf_vocab(model_dir: str) -> Optional[str]:
  """The text of a Hugging Face model's vocab.txt, else the WordPiece vocab of its tokenizer.json
  (all transformers 5 saves) as such a text; None without either."""
  vocab = _text_if_exists(os.path.join(model_dir, VOCAB_NAME))
  tokenizer_path = os.path.join(model_dir, HF_TOKENIZER_NAME)
  if vocab is not None or not tf.io.gfile.exists(tokenizer_path):
    return vocab
  tokenizer = _read_json(tokenizer_path)
  wordpiece = tokenizer.get("model") if isinstance(tokenizer, dict) else None
  if not (isinstance(wordpiece, dict) and wordpiece.get("type") == "WordPiece" and
          isinstance(wordpiece.get("vocab"), dict)):
    raise ConversionError("%s: not a WordPiece tokenizer, which BERT's is" % tokenizer_path)
  ids = wordpiece["vocab"]
  tokens = {token_id: token for token, token_id in ids.items()
            if isinstance(token_id, int) and "\n" not in token and "\r" not in token}
  if sorted(tokens) != list(range(len(ids))):
    raise ConversionError("%s: its vocab does not give the ids 0..N-1 each a token of one line" %
                          tokenizer_path)
  return "".join(tokens[i] + "\n" for i in range(len(tokens)))


def read_hf_model(hf_model_path: str) -> ConvertedModel:
  """Reads and checks a Hugging Face BERT: its weights, config and, when there, tokenizer files."""
  weight_files, config_path = resolve_hf_files(hf_model_path)
  hf_config = _read_json(config_path)
  config = google_config_from_hf(hf_config, config_path)
  architecture = hf_architecture(hf_config, config_path)
  labels, problem_type = hf_labels(hf_config, architecture, config_path)
  source = ", ".join(weight_files)
  tensors, source_names = hf_to_google_tensors(read_safetensors(weight_files), architecture,
                                               source)
  model_dir = os.path.dirname(config_path)
  tokenizer_path = os.path.join(model_dir, HF_TOKENIZER_CONFIG_NAME)
  tokenizer = _read_json(tokenizer_path) if tf.io.gfile.exists(tokenizer_path) else {}
  model = ConvertedModel(config, tensors, architecture, source, labels, problem_type,
                         labels_source="the id2label of " + config_path,
                         vocab=hf_vocab(model_dir),
                         do_lower_case=(tokenizer.get("do_lower_case")
                                        if isinstance(tokenizer, dict) else None))
  check_model(model, source_names)
  return model


def _hf_label_fields(model: ConvertedModel) -> dict:
  """config.json's `id2label`, `label2id` and `problem_type` of a model's head."""
  fields = {}
  if model.labels:
    fields["id2label"] = {str(i): label for i, label in enumerate(model.labels)}
    fields["label2id"] = {label: i for i, label in enumerate(model.labels)}
  if model.problem_type:
    fields["problem_type"] = model.problem_type
  if model.problem_type == REGRESSION:
    fields["num_labels"] = 1
  return fields


def write_hf_model(model: ConvertedModel, output_dir: str) -> str:
  """Writes `model.safetensors`, the tokenizer's `vocab.txt` and `tokenizer_config.json` (when the
  vocab is known) and `config.json`, last, into output_dir; returns the weights file's path.
  Weights the Hugging Face class lacks (the pooler of BertForTokenClassification) are left out."""
  architecture = model.architecture
  kept = {name: value for name, value in model.tensors.items()
          if not architecture.omits_name(name)}
  hf_config = dict(hf_config_from_google(model.config, architecture.name),
                   **_hf_label_fields(model))
  weights_path = os.path.join(output_dir, HF_WEIGHTS_NAME)
  with _writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(weights_path) as temporary:
      safetensors.numpy.save_file(google_to_hf_tensors(kept, architecture), temporary,
                                  metadata={"format": "pt"})
    if model.vocab:
      atomic_files.write_text(os.path.join(output_dir, VOCAB_NAME), model.vocab)
      _write_json(os.path.join(output_dir, HF_TOKENIZER_CONFIG_NAME),
                  hf_tokenizer_config(model.config, model.do_lower_case))
    _write_json(os.path.join(output_dir, HF_CONFIG_NAME), hf_config)
  if not model.vocab:
    logging.warning("No vocab.txt beside %s and no --vocab_file: %s has no tokenizer",
                    model.source, output_dir)
  _log_left_out(model, kept, architecture.name)
  return weights_path


# ------------------------------------------------------------------------------------------------
# Google.
# ------------------------------------------------------------------------------------------------


def google_architecture(names, checkpoint_dir: str, task_name: Optional[str],
                        source: str) -> Architecture:
  """The architecture of a Google checkpoint's variable names: the task head they hold, else the
  pretraining heads they hold. run_classifier's and run_ner's heads have the same names: the label
  file beside the checkpoint tells them apart, or `task_name` (a classifier's task)."""
  heads = [architecture for architecture in ARCHITECTURES.values()
           if architecture.head_scope is not None and set(architecture.head_names()) <= names]
  if len(heads) > 1:
    files = ["%s (%s)" % (head.label_file, head.script) for head in heads]
    heads = [SEQUENCE_CLASSIFICATION] if task_name else [
        head for head in heads
        if tf.io.gfile.exists(os.path.join(checkpoint_dir, head.label_file))]
    if len(heads) != 1:
      raise ConversionError(
          "%s has a task head, output_weights, and %s beside it: put there the one its run wrote "
          "in its output_dir, or pass --task_name for a classifier of a task with fixed labels" %
          (source, "both " + " and ".join(files) if heads else "neither " + " nor ".join(files)))
  if heads:
    return heads[0]
  masked_lm = any(name.startswith("cls/predictions/") for name in names)
  next_sentence = any(name.startswith("cls/seq_relationship/") for name in names)
  return ARCHITECTURES["BertForPreTraining" if masked_lm and next_sentence else
                       "BertForMaskedLM" if masked_lm else "BertModel"]


def _read_google_labels(model: ConvertedModel, checkpoint_dir: str, task_name: Optional[str],
                        multi_label: bool) -> None:
  """Sets the labels and problem type of a Google checkpoint's head: from `task_name` (a task
  with fixed labels), else from the label file beside the checkpoint."""
  architecture = model.architecture
  if architecture is not SEQUENCE_CLASSIFICATION and (task_name or multi_label):
    raise errors.FlagError("--task_name and --multi_label are for run_classifier checkpoints; %s "
                           "is a %s" % (model.source, architecture.name))
  if task_name and task_name.lower() != "generic":
    processor = classifier.get_processor(task_name)
    if multi_label:
      raise errors.FlagError("--multi_label needs --task_name=generic (labels from your files)")
    model.labels = tuple(processor.get_labels())  # Empty for regression.
    model.problem_type = REGRESSION if processor.is_regression else SINGLE_LABEL
    model.labels_source = "--task_name=" + task_name
    return
  if architecture.label_file is None:
    return
  path = os.path.join(checkpoint_dir, architecture.label_file)
  if not tf.io.gfile.exists(path):
    raise ConversionError("%s has a %s head but no %s beside it: put there the one its run wrote "
                          "in its output_dir" % (model.source, architecture.script,
                                                 architecture.label_file))
  model.labels = _read_labels(architecture, checkpoint_dir)
  model.labels_source = path
  if architecture is SEQUENCE_CLASSIFICATION:
    model.problem_type = MULTI_LABEL if multi_label else SINGLE_LABEL
    if model.problem_type == SINGLE_LABEL and len(model.labels) < 2:
      raise ConversionError("%s lists one label, but a single-label classifier has two or more "
                            "(pass --multi_label for a multi-label one)" % path)


def read_google_model(init_checkpoint: str, bert_config_file: Optional[str] = None,
                      vocab_file: Optional[str] = None, do_lower_case: bool = True,
                      task_name: Optional[str] = None, multi_label: bool = False
                      ) -> ConvertedModel:
  """Reads and checks a Google-format checkpoint and what names its head's outputs.

  The config, vocab and label file default to those in the checkpoint's directory
  (bert_config.json, vocab.txt, label_list.txt or tag_list.txt); `task_name` and `multi_label`
  are run_classifier's flags of its run. Optimizer slots (`*/adam_m`, `*/adam_v`) and
  `global_step` are not model weights and are skipped.
  """
  prefix = checkpoints.resolve_checkpoint_path(init_checkpoint)
  tokenization.validate_case_matches_checkpoint(do_lower_case, prefix)
  checkpoint_dir = os.path.dirname(prefix)
  config = modeling.BertConfig.from_json_file(
      bert_config_file or os.path.join(checkpoint_dir, GOOGLE_CONFIG_NAME))
  reader = checkpoints.open_checkpoint(prefix)
  tensors = {name: checkpoints.read_tensor(reader, prefix, name)
             for name in reader.get_variable_to_shape_map()
             if not checkpoints.is_training_state_name(name)}
  model = ConvertedModel(config, tensors,
                         google_architecture(set(tensors), checkpoint_dir, task_name, prefix),
                         prefix, vocab=(_read_text(vocab_file) if vocab_file else _text_if_exists(
                             os.path.join(checkpoint_dir, VOCAB_NAME))),
                         do_lower_case=do_lower_case)
  _read_google_labels(model, checkpoint_dir, task_name, multi_label)
  check_model(model, {name: name for name in tensors})
  return model


def _google_usage(model: ConvertedModel, output_dir: str) -> str:
  """The script and flags that run a converted checkpoint in output_dir."""
  usage = ["--init_checkpoint=" + os.path.join(output_dir, GOOGLE_CHECKPOINT_NAME),
           "--bert_config_file=" + os.path.join(output_dir, GOOGLE_CONFIG_NAME)]
  if model.vocab:
    usage.append("--vocab_file=" + os.path.join(output_dir, VOCAB_NAME))
  if model.do_lower_case is not None:
    usage.append("--do_lower_case=%s" % str(model.do_lower_case).lower())
  if model.problem_type:
    usage.append("--task_name=" + ("sts-b" if model.problem_type == REGRESSION else "generic"))
  if model.problem_type == MULTI_LABEL:
    usage.append("--multi_label")
  if model.labels:  # Our scripts read the label file in their output_dir.
    usage.append("--output_dir=" + output_dir)
  if any(name.startswith("bert/") for name in model.absent):  # The pooler, which it does not read.
    usage.append("--allow_partial_init_checkpoint")
  script = model.architecture.script
  return "%s %s" % ("python " + script if script else "any script:", " ".join(usage))


def write_google_model(model: ConvertedModel, output_dir: str) -> str:
  """Writes `bert_model.ckpt`, `bert_config.json` and, when known, `vocab.txt` and the head's
  label file into output_dir; returns the checkpoint prefix."""
  prefix = os.path.join(output_dir, GOOGLE_CHECKPOINT_NAME)
  with _writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(prefix) as temporary_prefix:  # Renames .data, then .index.
      checkpoints.write_checkpoint(model.tensors, temporary_prefix)
    atomic_files.write_text(os.path.join(output_dir, GOOGLE_CONFIG_NAME),
                            model.config.to_json_string())
    if model.vocab:
      atomic_files.write_text(os.path.join(output_dir, VOCAB_NAME), model.vocab)
    if model.labels:
      _write_labels(model.architecture, model.labels, output_dir)
  return prefix


# ------------------------------------------------------------------------------------------------
# KerasHub.
# ------------------------------------------------------------------------------------------------


def read_keras_hub_preset(preset: str) -> ConvertedModel:
  """Reads and checks a KerasHub BertBackbone preset: config.json, model.weights.h5 and, when
  there, its BertTokenizer (tokenizer.json and the vocab). Task heads are not read (a warning
  says so when the preset holds a task)."""
  config_path = os.path.join(preset, KERAS_HUB_CONFIG_NAME)
  config = google_config_from_keras_hub(
      _check_keras_hub_class(_read_json(config_path), "BertBackbone", config_path), config_path)
  weights_path = os.path.join(preset, KERAS_HUB_WEIGHTS_NAME)
  google_names = {keras_hub_path_for_google(name): name
                  for name in model_shapes(modeling.BertModel(config))}
  tensors, source_names, unknown = {}, {}, []
  for path, value in sorted(read_keras_weights(weights_path).items()):
    if path not in google_names:
      unknown.append(path)
      continue
    name = google_names[path]
    _check_floating(value, weights_path, path)
    tensors[name] = google_layout(name, np.asarray(value, dtype=np.float32))
    source_names[name] = path
  if unknown:
    raise ConversionError("%s: tensor(s) not in a BertBackbone: %s" %
                          (weights_path, _describe(unknown)))
  tokenizer_path = os.path.join(preset, KERAS_HUB_TOKENIZER_NAME)
  tokenizer = (_check_keras_hub_class(_read_json(tokenizer_path), "BertTokenizer", tokenizer_path)
               if tf.io.gfile.exists(tokenizer_path) else {})
  task_path = os.path.join(preset, KERAS_HUB_TASK_NAME)
  if tf.io.gfile.exists(task_path):
    logging.warning("%s: the preset holds a task, but only its BertBackbone is converted: the "
                    "checkpoint has no task head, so fine-tune it (--do_train) before evaluating, "
                    "predicting or exporting with it", task_path)
  model = ConvertedModel(config, tensors, ARCHITECTURES["BertModel"], weights_path,
                         vocab=(_text_if_exists(os.path.join(preset, *KERAS_HUB_VOCAB_PATH))
                                if tokenizer else None),
                         do_lower_case=tokenizer.get("lowercase"))
  check_model(model, source_names)
  return model


def write_keras_hub_preset(model: ConvertedModel, output_dir: str) -> str:
  """Writes a KerasHub preset into output_dir: BertBackbone's model.weights.h5 and config.json
  (last), its BertTokenizer (tokenizer.json, the vocab), and for a run_classifier head a
  BertTextClassifier (task.json, task.weights.h5, preprocessor.json: its tokenizer and inputs up
  to the model's positions). KerasHub has no class for the other heads: they are left out.
  Returns output_dir."""
  backbone_config = keras_hub_config_from_google(model.config, model.source)
  if not model.vocab:
    raise ConversionError("%s: a KerasHub preset holds its tokenizer, but there is no vocab.txt "
                          "beside it: pass --vocab_file" % model.source)
  lacking = [name for name in model.absent if name.startswith("bert/")]
  if lacking:
    raise ConversionError("%s lacks %s, which KerasHub's BertBackbone needs" %
                          (model.source, _describe(lacking)))
  kept = {name: value for name, value in model.tensors.items() if name.startswith("bert/")}
  backbone = _keras_hub_object("bert_backbone", "BertBackbone", backbone_config)
  tokenizer = _keras_hub_object("bert_tokenizer", "BertTokenizer", {
      "config_file": KERAS_HUB_TOKENIZER_NAME, "lowercase": model.do_lower_case,
      "strip_accents": model.do_lower_case})  # As the original's BasicTokenizer.
  is_classifier = model.architecture is SEQUENCE_CLASSIFICATION
  with _writing(output_dir):
    vocab_path = os.path.join(output_dir, *KERAS_HUB_VOCAB_PATH)
    tf.io.gfile.makedirs(os.path.dirname(vocab_path))
    _write_keras_weights(os.path.join(output_dir, KERAS_HUB_WEIGHTS_NAME), {
        keras_hub_path_for_google(name): keras_hub_layout(name, value, model.config)
        for name, value in kept.items()})
    atomic_files.write_text(vocab_path, model.vocab)
    _write_json(os.path.join(output_dir, KERAS_HUB_TOKENIZER_NAME), tokenizer)
    if is_classifier:
      weights_name, bias_name = SEQUENCE_CLASSIFICATION.head_names()
      kept.update({name: model.tensors[name] for name in (weights_name, bias_name)})
      _write_keras_weights(os.path.join(output_dir, KERAS_HUB_TASK_WEIGHTS_NAME), dict(zip(
          KERAS_HUB_CLASSIFIER_WEIGHTS, (model.tensors[weights_name].T,
                                         model.tensors[bias_name]))))
      preprocessor = _keras_hub_object(
          "bert_text_classifier_preprocessor", "BertTextClassifierPreprocessor", {
              "tokenizer": tokenizer, "config_file": KERAS_HUB_PREPROCESSOR_NAME,
              "sequence_length": model.config.max_position_embeddings})
      _write_json(os.path.join(output_dir, KERAS_HUB_PREPROCESSOR_NAME), preprocessor)
      _write_json(os.path.join(output_dir, KERAS_HUB_TASK_NAME), _keras_hub_object(
          "bert_text_classifier", "BertTextClassifier", {
              "backbone": backbone, "preprocessor": preprocessor,
              "num_classes": model.num_outputs}))
    _write_json(os.path.join(output_dir, KERAS_HUB_CONFIG_NAME), backbone)
  _log_left_out(model, kept, "KerasHub")
  return output_dir


# ------------------------------------------------------------------------------------------------
# Conversions.
# ------------------------------------------------------------------------------------------------


def _convert(read: Callable[[], ConvertedModel], write: Callable[[ConvertedModel, str], str],
             output_dir: str) -> str:
  """Reads a model, writes it to output_dir and logs what was converted; returns what `write`
  returns (under output_dir).

  The directory is written whole: `write` fills a staging directory beside it (with the mark
  CONVERTED_MARK_NAME) that then takes output_dir's name in one step (`atomic_files`), so a reader
  sees the old model's files or the new one's, never a mix, even after a kill.
  """
  start = time.time()
  model = read()
  with _writing(output_dir):
    tf.io.gfile.makedirs(os.path.dirname(output_dir.rstrip("/")) or ".")
  with _writing(output_dir), atomic_files.atomic_output(output_dir) as staging:
    tf.io.gfile.makedirs(staging)
    target = write(model, staging)
    _write_json(os.path.join(staging, CONVERTED_MARK_NAME), {
        "source": model.source, "architecture": model.architecture.name,
        "files": _files_under(staging)})
  target = os.path.join(output_dir, os.path.relpath(target, staging))
  if write is write_google_model:
    logging.info("Use it with %s", _google_usage(model, output_dir))
  parameters = sum(int(np.prod(value.shape)) for value in model.tensors.values())
  logging.info("Converted %d tensors (%s parameters) of a %s from %s to %s in %.1f s",
               len(model.tensors), "{:,}".format(parameters), model.architecture.name,
               model.source, target, time.time() - start)
  if model.absent:
    logging.info("Not in the source (a model initialises them when used): %s",
                 _describe(model.absent))
  return target


def convert_hf_to_google(hf_model_path: str, output_dir: str) -> str:
  """Converts a Hugging Face BERT to Google's format in output_dir (`write_google_model`).

  Returns:
    The checkpoint prefix written.
  """
  return _convert(lambda: read_hf_model(hf_model_path), write_google_model, output_dir)


def convert_keras_hub_to_google(preset: str, output_dir: str) -> str:
  """Converts a KerasHub BertBackbone preset to Google's format in output_dir; returns the
  checkpoint prefix written."""
  return _convert(lambda: read_keras_hub_preset(preset), write_google_model, output_dir)


def convert_google_to_hf(init_checkpoint: str, output_dir: str,
                         bert_config_file: Optional[str] = None, **options) -> str:
  """Converts a Google-format checkpoint to Hugging Face's format in output_dir
  (`write_hf_model`); `options` are `read_google_model`'s.

  Returns:
    The safetensors file written.
  """
  return _convert(lambda: read_google_model(init_checkpoint, bert_config_file, **options),
                  write_hf_model, output_dir)


def convert_google_to_keras_hub(init_checkpoint: str, output_dir: str,
                                bert_config_file: Optional[str] = None, **options) -> str:
  """Converts a Google-format checkpoint to a KerasHub preset in output_dir
  (`write_keras_hub_preset`); `options` are `read_google_model`'s. Returns output_dir."""
  return _convert(lambda: read_google_model(init_checkpoint, bert_config_file, **options),
                  write_keras_hub_preset, output_dir)


def _files_under(directory: str) -> list:
  """The paths of every file below `directory`, relative to it, sorted."""
  return sorted(os.path.relpath(os.path.join(parent, name), directory)
                for parent, _, names in tf.io.gfile.walk(directory) for name in names)


def _files_of_earlier_conversion(output_dir: str) -> set:
  """The files an earlier conversion wrote into output_dir, as its mark lists them (with the
  mark); empty when output_dir holds no readable mark."""
  mark = os.path.join(output_dir, CONVERTED_MARK_NAME)
  try:
    written = json.loads(_read_text(mark)).get("files")
  except (ConversionError, ValueError, AttributeError):
    return set()
  return set(written) | {CONVERTED_MARK_NAME} if isinstance(written, list) else set()


def check_output_dir(output_dir: str, overwrite: bool) -> None:
  """Raises FlagError unless output_dir may be replaced by a converted model: it is missing,
  empty or an earlier converted model holding only the files that conversion wrote (its
  CONVERTED_MARK_NAME lists them), or `overwrite` is set. A file someone added (notes,
  predictions) is never deleted unasked. A training run's output_dir is never replaced: its
  checkpoints and label list belong together."""
  if not tf.io.gfile.isdir(output_dir):
    return
  names = {name.rstrip("/") for name in tf.io.gfile.listdir(output_dir)}
  training = sorted(name for name in names if name in TRAINING_RUN_NAMES or
                    name.startswith(checkpoints.CHECKPOINT_BASENAME + "-"))
  if training:
    raise errors.FlagError("--output_dir=%s holds a training run (%s): write the converted "
                           "model to another directory" % (output_dir, training[0]))
  if not names or overwrite:
    return
  if CONVERTED_MARK_NAME not in names:
    raise errors.FlagError("--output_dir=%s is not empty and is not an earlier output of "
                           "convert_checkpoint.py (it holds %s): pass --overwrite_output_dir to "
                           "replace it, or choose another directory" %
                           (output_dir, ", ".join(sorted(names)[:3])))
  added = sorted(set(_files_under(output_dir)) - _files_of_earlier_conversion(output_dir))
  if added:
    raise errors.FlagError("--output_dir=%s holds files convert_checkpoint.py did not write "
                           "(%s): pass --overwrite_output_dir to replace them with the "
                           "directory, or choose another directory" %
                           (output_dir, ", ".join(added[:3])))


# Flags that only a conversion from --init_checkpoint reads.
_GOOGLE_SOURCE_FLAGS = ("output_format", "bert_config_file", "vocab_file", "do_lower_case",
                        "task_name", "multi_label")


def main(argv):
  del argv
  sources = [name for name in ("hf_model_path", "keras_hub_preset", "init_checkpoint")
             if FLAGS[name].value]
  if len(sources) != 1:
    raise errors.FlagError("pass exactly one of --hf_model_path (Hugging Face -> Google), "
                           "--keras_hub_preset (KerasHub -> Google) and --init_checkpoint "
                           "(Google -> --output_format)")
  if not FLAGS.init_checkpoint:
    given = [name for name in _GOOGLE_SOURCE_FLAGS if FLAGS[name].present]
    if given:
      raise errors.FlagError("--%s: only for --init_checkpoint (the model of --%s says what it "
                             "is)" % (given[0], sources[0]))
  check_output_dir(FLAGS.output_dir, FLAGS.overwrite_output_dir)
  if FLAGS.hf_model_path:
    convert_hf_to_google(FLAGS.hf_model_path, FLAGS.output_dir)
  elif FLAGS.keras_hub_preset:
    convert_keras_hub_to_google(FLAGS.keras_hub_preset, FLAGS.output_dir)
  else:
    convert = (convert_google_to_hf if FLAGS.output_format == "hugging_face"
               else convert_google_to_keras_hub)
    convert(FLAGS.init_checkpoint, FLAGS.output_dir, FLAGS.bert_config_file,
            vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
            task_name=FLAGS.task_name, multi_label=FLAGS.multi_label)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("output_dir")
  cli.run_script(main, outputs={"output_dir": errors.OUTPUT_DIRECTORY})
