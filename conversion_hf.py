# coding=utf-8
"""Hugging Face models in the checkpoint converter: safetensors, config.json and the tokenizer.

Reading takes `model.safetensors` (or a sharded index), `config.json` (its `architectures`,
`id2label`, `problem_type`) and the tokenizer's vocab and casing into a `conversion.ConvertedModel`
under Google's names; writing gives a directory that transformers' `AutoModelFor...` and
`AutoTokenizer.from_pretrained` load. Pickle-based PyTorch files are refused.
"""

import os
from typing import Mapping, Optional, Tuple

from absl import logging
import safetensors
import safetensors.numpy
import tensorflow as tf

import atomic_files
import conversion
import modeling
import task_files
import tokenization

# ------------------------------------------------------------------------------------------------
# Hugging Face.
# ------------------------------------------------------------------------------------------------


def hf_architecture(hf_config: Mapping, source: str) -> conversion.Architecture:
  """The first class of config.json's `architectures` known here; without one, the encoder with
  whatever pretraining heads its tensors hold."""
  names = hf_config.get("architectures") or []
  if not (isinstance(names, list) and all(isinstance(name, str) for name in names)):
    raise conversion.ConversionError("%s: architectures %r is not a list of class names" %
                                     (source, names))
  known = [conversion.ARCHITECTURES[name] for name in names if name in conversion.ARCHITECTURES]
  return known[0] if known else conversion.ARCHITECTURES["BertForPreTraining"]


def hf_labels(hf_config: Mapping, architecture: conversion.Architecture,
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
  if architecture is not conversion.SEQUENCE_CLASSIFICATION:
    return labels, None
  problem_type = hf_config.get("problem_type") or (conversion.REGRESSION if len(labels) == 1
                                                   else conversion.SINGLE_LABEL)
  if problem_type not in (conversion.SINGLE_LABEL, conversion.MULTI_LABEL, conversion.REGRESSION):
    raise conversion.ConversionError("%s: problem_type %r is not one of %s, %s, %s" %
                                     (source, problem_type, conversion.SINGLE_LABEL,
                                      conversion.MULTI_LABEL, conversion.REGRESSION))
  return (() if problem_type == conversion.REGRESSION else labels), problem_type


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
    raise conversion.ConversionError(
        "%s: id2label must give the ids 0..N-1 each a name of one line, got "
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


# FullTokenizer's settings under the names of transformers' tokenizer_config.json and of the
# BertNormalizer of its tokenizer.json (`conversion.check_tokenizer_settings`).
_TOKENIZER_CONFIG_NAMES = {"lowercase": "do_lower_case", "strip_accents": "strip_accents",
                           "chinese_chars": "tokenize_chinese_chars"}
_NORMALIZER_NAMES = {"lowercase": "lowercase", "strip_accents": "strip_accents",
                     "chinese_chars": "handle_chinese_chars"}


# transformers' BERT tokenizers make a word of more characters one [UNK] (not configurable in
# its files); FullTokenizer splits words up to tokenization.MAX_INPUT_CHARS_PER_WORD.
HF_MAX_INPUT_CHARS_PER_WORD = 100


def warn_of_long_words(direction: str) -> None:
  """The one tokenizer difference a conversion cannot carry, said where a tokenizer crosses."""
  logging.warning(
      "%s: transformers' BERT tokenizer makes a word of more than %d characters one [UNK], "
      "where Google's FullTokenizer splits words of up to %d into pieces; texts with such words "
      "(hashes, URLs) tokenize differently", direction, HF_MAX_INPUT_CHARS_PER_WORD,
      tokenization.MAX_INPUT_CHARS_PER_WORD)


def hf_vocab(model_dir: str) -> Optional[str]:
  """The text of a Hugging Face model's vocab: its vocab.txt and the WordPiece vocab of its
  tokenizer.json (all transformers 5 saves; what AutoTokenizer reads), which must hold the same
  tokens where both are there; None without either."""
  vocab = conversion.text_if_exists(os.path.join(model_dir, conversion.VOCAB_NAME))
  tokenizer_path = os.path.join(model_dir, conversion.HF_TOKENIZER_NAME)
  if not tf.io.gfile.exists(tokenizer_path):
    return vocab
  tokenizer_vocab = _tokenizer_json_vocab(tokenizer_path)
  if vocab is not None and vocab.splitlines() != tokenizer_vocab.splitlines():
    raise conversion.ConversionError(
        "%s and %s hold different vocabs (transformers' AutoTokenizer reads the second): make "
        "them the same, or remove the one the model was not trained with" % (
            os.path.join(model_dir, conversion.VOCAB_NAME), tokenizer_path))
  return vocab if vocab is not None else tokenizer_vocab


def _tokenizer_json_vocab(tokenizer_path: str) -> str:
  """The WordPiece vocab of a tokenizer.json as a vocab.txt's text, after checking its
  normalizer's settings against FullTokenizer's."""
  tokenizer = conversion.read_json(tokenizer_path)
  normalizer = tokenizer.get("normalizer") if isinstance(tokenizer, dict) else None
  if isinstance(normalizer, dict) and normalizer.get("type") == "BertNormalizer":
    conversion.check_tokenizer_settings(normalizer, _NORMALIZER_NAMES,
                                        tokenizer_path + " (its normalizer)")
  wordpiece = tokenizer.get("model") if isinstance(tokenizer, dict) else None
  if not (isinstance(wordpiece, dict) and wordpiece.get("type") == "WordPiece" and
          isinstance(wordpiece.get("vocab"), dict)):
    raise conversion.ConversionError("%s: not a WordPiece tokenizer, which BERT's is" %
                                     tokenizer_path)
  ids = wordpiece["vocab"]
  tokens = {token_id: token for token, token_id in ids.items()
            if isinstance(token_id, int) and "\n" not in token and "\r" not in token}
  if sorted(tokens) != list(range(len(ids))):
    raise conversion.ConversionError(
        "%s: its vocab does not give the ids 0..N-1 each a token of one line" % tokenizer_path)
  return "".join(tokens[i] + "\n" for i in range(len(tokens)))


def read_hf_model(hf_model_path: str) -> conversion.ConvertedModel:
  """Reads and checks a Hugging Face BERT: its weights, config and, when there, tokenizer files."""
  weight_files, config_path = conversion.resolve_hf_files(hf_model_path)
  hf_config = conversion.read_json(config_path)
  config = conversion.google_config_from_hf(hf_config, config_path)
  architecture = hf_architecture(hf_config, config_path)
  labels, problem_type = hf_labels(hf_config, architecture, config_path)
  source = ", ".join(weight_files)
  tensors, source_names = conversion.hf_to_google_tensors(conversion.read_safetensors(weight_files),
                                                          architecture, source)
  model_dir = os.path.dirname(config_path)
  tokenizer_path = os.path.join(model_dir, conversion.HF_TOKENIZER_CONFIG_NAME)
  tokenizer = conversion.read_json(tokenizer_path) if tf.io.gfile.exists(tokenizer_path) else {}
  if isinstance(tokenizer, dict):
    conversion.check_tokenizer_settings(tokenizer, _TOKENIZER_CONFIG_NAMES, tokenizer_path)
  model = conversion.ConvertedModel(config, tensors, architecture, source, labels, problem_type,
                                    labels_source="the id2label of " + config_path,
                                    vocab=hf_vocab(model_dir),
                                    do_lower_case=(tokenizer.get("do_lower_case")
                                                   if isinstance(tokenizer, dict) else None))
  conversion.check_model(model, source_names)
  if model.vocab:
    warn_of_long_words("Hugging Face -> Google")
  return model


def _hf_label_fields(model: conversion.ConvertedModel) -> dict:
  """config.json's `id2label`, `label2id` and `problem_type` of a model's head."""
  fields = {}
  if model.labels:
    fields["id2label"] = {str(i): label for i, label in enumerate(model.labels)}
    fields["label2id"] = {label: i for i, label in enumerate(model.labels)}
  if model.problem_type:
    fields["problem_type"] = model.problem_type
  if model.problem_type == conversion.REGRESSION:
    fields["num_labels"] = 1
  return fields


def write_hf_model(model: conversion.ConvertedModel, output_dir: str) -> str:
  """Writes `model.safetensors`, the tokenizer's `vocab.txt` and `tokenizer_config.json` (when the
  vocab is known) and `config.json`, last, into output_dir; returns the weights file's path.
  Weights the Hugging Face class lacks (the pooler of BertForTokenClassification) are left out."""
  architecture = model.architecture
  kept = {name: value for name, value in model.tensors.items()
          if not architecture.omits_name(name)}
  hf_config = dict(conversion.hf_config_from_google(model.config, architecture.name),
                   **_hf_label_fields(model))
  weights_path = os.path.join(output_dir, conversion.HF_WEIGHTS_NAME)
  with conversion.naming_write_errors(output_dir):
    tf.io.gfile.makedirs(output_dir)
    with atomic_files.atomic_output(weights_path) as temporary:
      safetensors.numpy.save_file(conversion.google_to_hf_tensors(kept, architecture), temporary,
                                  metadata={"format": "pt"})
    if model.vocab:
      atomic_files.write_text(os.path.join(output_dir, conversion.VOCAB_NAME), model.vocab)
      conversion.write_json(os.path.join(output_dir, conversion.HF_TOKENIZER_CONFIG_NAME),
                            hf_tokenizer_config(model.config, model.do_lower_case))
      warn_of_long_words("Google -> Hugging Face")
    conversion.write_json(os.path.join(output_dir, conversion.HF_CONFIG_NAME), hf_config)
  if not model.vocab:
    logging.warning("No vocab.txt beside %s and no `vocab_file`: the Hugging Face model is "
                    "written without a tokenizer (a model that tokenized with a SentencePiece "
                    "model has none that transformers' BertTokenizer reads)", model.source)
  conversion.log_left_out(model, kept, architecture.name)
  return weights_path
