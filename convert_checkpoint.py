# coding=utf-8
"""Converts BERT weights between Hugging Face safetensors and Google's checkpoint format.

Hugging Face -> Google:

  python convert_checkpoint.py --hf_model_path=path/to/hf_model --output_dir=out

reads `model.safetensors` (or a sharded `model.safetensors.index.json`) and `config.json` and writes
`out/bert_model.ckpt.{index,data-00000-of-00001}` and `out/bert_config.json` (plus `vocab.txt` when
the model directory has one): the layout of Google's released models, usable as `--init_checkpoint`
and `--bert_config_file` by every script here and by the original code.

Google -> Hugging Face:

  python convert_checkpoint.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json --output_dir=out

writes `out/model.safetensors` (names with the `bert.` prefix, as `BertForPreTraining` saves
them) and `out/config.json`. Optimizer slots and `global_step` of training checkpoints are left out.

Names are translated by rule, not by table: `.`-scopes become `/`-scopes, `layer.N` becomes
`layer_N`, PyTorch Linear `weight` [out, in] becomes a transposed `kernel` [in, out], LayerNorm
`weight`/`bias` (or old `gamma`/`beta`) become `gamma`/`beta`, embedding tables drop `.weight`, and
the two heads use the original's `output_weights`/`output_bias`. Every tensor is checked against a
model built from the config, so a converted checkpoint always loads into `modeling.BertModel` or
`modeling.BertPretrainingModel`.

Pickle-based PyTorch files (`pytorch_model.bin`) are refused: unpickling runs arbitrary code.
Nothing a file says about itself is taken on trust: each safetensors header is checked against the
file's size before a tensor is read (`read_safetensors_header`), a sharded index must name shards
inside its directory that hold exactly the tensors it places there, and every tensor must fit the
config. Bad input is a `ConversionError` naming the file, printed as one line by `cli.run_script`.
"""

import collections
import contextlib
import json
import math
import os
import posixpath
import re
import struct
import time
from typing import Dict, Iterator, Mapping, Optional, Tuple

from absl import flags
from absl import logging
import numpy as np
import safetensors
import safetensors.numpy
import tensorflow as tf

import atomic_files
import checkpoints
import cli
import errors
import modeling

FLAGS = flags.FLAGS


def define_flags() -> None:
  """The converter's flags."""
  flags.DEFINE_string("hf_model_path", None,
                      "Hugging Face BERT to convert to Google's format: a directory with "
                      "config.json and model.safetensors, or a .safetensors file with config.json "
                      "beside it.")
  flags.DEFINE_string("init_checkpoint", None,
                      "Google-format checkpoint (prefix such as .../bert_model.ckpt, or a "
                      "directory) to convert to Hugging Face safetensors.")
  flags.DEFINE_string("bert_config_file", None,
                      "The bert_config.json of --init_checkpoint (default: bert_config.json in the "
                      "checkpoint's directory).")
  flags.DEFINE_string("output_dir", None, "Directory to write the converted model to.")

GOOGLE_CHECKPOINT_NAME = "bert_model.ckpt"
GOOGLE_CONFIG_NAME = "bert_config.json"
HF_WEIGHTS_NAME = "model.safetensors"
HF_INDEX_NAME = "model.safetensors.index.json"
HF_CONFIG_NAME = "config.json"
VOCAB_NAME = "vocab.txt"

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
  try:
    return modeling.BertConfig.from_dict(fields)
  except ValueError as e:  # BertConfig's check of the values.
    raise ConversionError("%s: %s" % (source, e)) from e


def hf_config_from_google(config: modeling.BertConfig, with_heads: bool) -> dict:
  """A Hugging Face config.json dict for a BERT with (BertForPreTraining) or without heads."""
  fields = {field: getattr(config, field) for field in CONFIG_FIELDS}
  fields["hidden_act"] = GOOGLE_TO_HF_ACTIVATION[config.hidden_act.lower()]
  fields.update({
      "architectures": ["BertForPreTraining" if with_heads else "BertModel"],
      "model_type": "bert",
      "layer_norm_eps": 1e-12,
      "position_embedding_type": "absolute",
      "pad_token_id": 0,
  })
  return fields


# ------------------------------------------------------------------------------------------------
# Tensor conversion and checking.
# ------------------------------------------------------------------------------------------------


def expected_shapes(config: modeling.BertConfig) -> Dict[str, Tuple[int, ...]]:
  """Google name -> shape of every variable of a `BertPretrainingModel` built from `config`."""
  model = modeling.BertPretrainingModel(config)
  model.build()
  return {name: tuple(v.shape) for name, v in checkpoints.checkpoint_variables(model).items()}


def _describe(names, limit: int = 8) -> str:
  names = sorted(names)
  more = " and %d more" % (len(names) - limit) if len(names) > limit else ""
  return ", ".join(names[:limit]) + more


def check_tensors(tensors: Mapping[str, np.ndarray], config: modeling.BertConfig,
                  source_names: Mapping[str, str], source: str) -> list:
  """Checks Google-named tensors against the model of `config`; returns the absent head names.

  Args:
    tensors: Google name -> array.
    config: the model's configuration.
    source_names: Google name -> the name it had in `source`, for error messages.
    source: the file being converted, for error messages.

  Raises:
    ConversionError: naming the tensors that the model does not have, that have the wrong shape, or
      that the encoder needs but `source` lacks.
  """
  shapes = expected_shapes(config)
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
  absent_encoder = [name for name in absent if name.startswith("bert/")]
  if absent_encoder:
    raise ConversionError("%s lacks encoder tensor(s) the config needs: %s" %
                          (source, _describe(absent_encoder)))
  return absent


def _check_floating(value: np.ndarray, source: str, name: str) -> None:
  """BERT's weights are floating point: an integer or boolean tensor under a weight's name is
  not one, and casting it would hide that."""
  if not np.issubdtype(np.asarray(value).dtype, np.floating):
    raise ConversionError("%s: tensor %s has dtype %s, but BERT's weights are floating point" %
                          (source, name, np.asarray(value).dtype))


def hf_to_google_tensors(hf_tensors: Mapping[str, np.ndarray],
                         source: str = "<tensors>") -> Tuple[Dict[str, np.ndarray], Dict[str, str]]:
  """Renames (and transposes) Hugging Face tensors to Google names, as float32.

  Returns:
    (Google name -> array, Google name -> Hugging Face name). Buffers are skipped.

  Raises:
    ConversionError: naming unknown tensors, or tied copies (decoder weight/bias) that disagree.
  """
  tensors, source_names, unknown = {}, {}, []
  for hf_name in sorted(hf_tensors):
    try:
      translated = google_name_for_hf(hf_name)
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


def google_to_hf_tensors(tensors: Mapping[str, np.ndarray]) -> Dict[str, np.ndarray]:
  """Renames (and transposes) Google-named tensors to Hugging Face names with the `bert.` prefix."""
  hf_tensors = {}
  for google_name, value in tensors.items():
    hf_name, transpose = hf_name_for_google(google_name)
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


def _read_json(path: str) -> dict:
  """A JSON file's value; a missing, unreadable or malformed file is a ConversionError."""
  if not tf.io.gfile.exists(path):
    raise ConversionError("%s does not exist" % path)
  try:
    with tf.io.gfile.GFile(path, "rb") as f:
      return json.loads(f.read().decode("utf-8"))
  except ValueError as error:  # Not UTF-8 or not JSON.
    raise ConversionError("%s is not valid JSON: %s" % (path, error)) from error
  except tf.errors.OpError as error:
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


def _copy_vocab(source_dir: str, output_dir: str) -> None:
  vocab = os.path.join(source_dir, VOCAB_NAME)
  if tf.io.gfile.exists(vocab):
    target = os.path.join(output_dir, VOCAB_NAME)
    with atomic_files.atomic_output(target) as temporary:
      tf.io.gfile.copy(vocab, temporary, overwrite=True)


def _log_summary(tensors: Mapping[str, np.ndarray], source: str, target: str, absent: list,
                 start: float) -> None:
  parameters = sum(int(np.prod(value.shape)) for value in tensors.values())
  logging.info("Converted %d tensors (%s parameters) from %s to %s in %.1f s", len(tensors),
               "{:,}".format(parameters), source, target, time.time() - start)
  if absent:
    logging.info("Not in the source (a model initialises them when used): %s", _describe(absent))


def convert_hf_to_google(hf_model_path: str, output_dir: str) -> str:
  """Converts a Hugging Face BERT to `output_dir/bert_model.ckpt` + `bert_config.json`.

  Returns:
    The checkpoint prefix written.
  """
  start = time.time()
  weight_files, config_path = resolve_hf_files(hf_model_path)
  config = google_config_from_hf(_read_json(config_path), config_path)
  source = ", ".join(weight_files)
  tensors, source_names = hf_to_google_tensors(read_safetensors(weight_files), source)
  absent = check_tensors(tensors, config, source_names, source)
  prefix = os.path.join(output_dir, GOOGLE_CHECKPOINT_NAME)
  with _writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(prefix) as temporary_prefix:  # Renames .data, then .index.
      checkpoints.write_checkpoint(tensors, temporary_prefix)
    atomic_files.write_text(os.path.join(output_dir, GOOGLE_CONFIG_NAME),
                            config.to_json_string())
    _copy_vocab(os.path.dirname(config_path), output_dir)
  _log_summary(tensors, source, prefix, absent, start)
  return prefix


def convert_google_to_hf(init_checkpoint: str, output_dir: str,
                         bert_config_file: Optional[str] = None) -> str:
  """Converts a Google-format checkpoint to `output_dir/model.safetensors` + `config.json`.

  Optimizer slots (`*/adam_m`, `*/adam_v`) and `global_step` are not model weights and are skipped.

  Returns:
    The safetensors file written.
  """
  start = time.time()
  prefix = checkpoints.resolve_checkpoint_path(init_checkpoint)
  checkpoint_dir = os.path.dirname(prefix)
  bert_config_file = bert_config_file or os.path.join(checkpoint_dir, GOOGLE_CONFIG_NAME)
  config = modeling.BertConfig.from_json_file(bert_config_file)
  reader = checkpoints.open_checkpoint(prefix)
  tensors = {name: checkpoints.read_tensor(reader, prefix, name)
             for name in reader.get_variable_to_shape_map()
             if not checkpoints.is_training_state_name(name)}
  absent = check_tensors(tensors, config, {name: name for name in tensors}, prefix)
  with_heads = not any(name.startswith("cls/") for name in absent)
  weights_path = os.path.join(output_dir, HF_WEIGHTS_NAME)
  with _writing(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(weights_path) as temporary:
      safetensors.numpy.save_file(google_to_hf_tensors(tensors), temporary,
                                  metadata={"format": "pt"})
    atomic_files.write_text(os.path.join(output_dir, HF_CONFIG_NAME), json.dumps(
        hf_config_from_google(config, with_heads), indent=2, sort_keys=True) + "\n")
    _copy_vocab(checkpoint_dir, output_dir)
  _log_summary(tensors, prefix, weights_path, absent, start)
  return weights_path


def main(argv):
  del argv
  if bool(FLAGS.hf_model_path) == bool(FLAGS.init_checkpoint):
    raise errors.FlagError("pass exactly one of --hf_model_path (Hugging Face -> Google) and "
                           "--init_checkpoint (Google -> Hugging Face)")
  if FLAGS.hf_model_path:
    convert_hf_to_google(FLAGS.hf_model_path, FLAGS.output_dir)
  else:
    convert_google_to_hf(FLAGS.init_checkpoint, FLAGS.output_dir, FLAGS.bert_config_file)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("output_dir")
  cli.run_script(main)
