"""Model Garden's own code as the referee of the TF Hub / Model Garden conversions.

Run in a fresh process without the project on its path: `python model_garden_reference.py
request.json result.json`. The request:

  {"root": directory for what is written,
   "models": [{"name": ..., "config": {bert_config.json fields}, "vocab_file": ...,
               "do_lower_case": bool, "seed": int, "with_mlm": bool}, ...],
   "masked_lm_positions": [[...]],
   "ids": {"input_word_ids": [[...]], "input_mask": [[...]], "input_type_ids": [[...]]},
   "restore": [directories holding bert_model.ckpt and bert_config.json, ...],
   "convert": [[Google-format checkpoint prefix, its bert_config.json, output prefix], ...]}

For each model, Model Garden's `BertEncoder` (as its TF Hub export builds it) gets random weights
(every variable, LayerNorms included, so that a transposed or swapped tensor shows), is saved as
`tf.train.Checkpoint(encoder=...)` in `<root>/<name>/checkpoint/` and exported in TF Hub's layout
with `export_tfhub_lib.export_model` to `<root>/<name>/hub/`; `with_mlm` builds Model Garden's
`BertPretrainerV2` around it and exports its masked-LM head too (the `mlm` of TF Hub's BERT
encoders), whose logits at `masked_lm_positions` the result then holds. For each `restore`
directory a `BertEncoder` of its bert_config.json restores its checkpoint (`assert_consumed`: every value of
the checkpoint finds its variable, and the reverse). Each `convert` job runs Model Garden's own
converter of Google's checkpoints (`tf2_bert_encoder_checkpoint_converter.convert_checkpoint`).
The result holds each model's and each restored encoder's sequence and pooled outputs on `ids`,
and the checkpoint and hub paths.
"""

import json
import os
import sys

import numpy as np
import tensorflow as tf
from official.legacy.bert import configs
from official.modeling import tf_utils
from official.nlp.modeling import models
from official.nlp.tools import export_tfhub_lib
from official.nlp.tools import tf2_bert_encoder_checkpoint_converter


def outputs(encoder, ids):
  """The encoder's sequence and pooled outputs on the ids, as lists."""
  result = encoder({name: tf.constant(value, tf.int32) for name, value in ids.items()},
                   training=False)
  return {name: result[name].numpy().tolist() for name in ("sequence_output", "pooled_output")}


def make_model(root, model, ids, positions):
  """Builds, saves and exports one random BertEncoder (in a BertPretrainerV2 `with_mlm`);
  returns its paths and outputs."""
  config = configs.BertConfig.from_dict(model["config"])
  encoder = export_tfhub_lib.get_bert_encoder(config)
  saved = {"encoder": encoder}
  if model["with_mlm"]:
    pretrainer = models.BertPretrainerV2(
        encoder_network=encoder, mlm_activation=tf_utils.get_activation(config.hidden_act))
    pretrainer(pretrainer.inputs)
    saved = pretrainer.checkpoint_items
  random = np.random.RandomState(model["seed"])
  for variable in (pretrainer if model["with_mlm"] else encoder).weights:
    variable.assign(random.normal(0.0, 0.5, variable.shape).astype(np.float32))
  directory = os.path.join(root, model["name"])
  checkpoint = tf.train.Checkpoint(**saved).save(os.path.join(directory, "checkpoint", "ckpt"))
  hub = os.path.join(directory, "hub")
  export_tfhub_lib.export_model(hub, bert_config=config, model_checkpoint_path=checkpoint,
                                with_mlm=model["with_mlm"], vocab_file=model["vocab_file"],
                                do_lower_case=model["do_lower_case"])
  result = {"checkpoint": checkpoint, "hub": hub, **outputs(encoder, ids)}
  if model["with_mlm"]:
    logits = pretrainer(dict({name: tf.constant(value) for name, value in ids.items()},
                             masked_lm_positions=tf.constant(positions)), training=False)
    result["mlm_logits"] = logits["mlm_logits"].numpy().tolist()
  return result


def restore(directory, ids):
  """A BertEncoder of the directory's config restored from its bert_model.ckpt; its outputs."""
  config = configs.BertConfig.from_json_file(os.path.join(directory, "bert_config.json"))
  encoder = export_tfhub_lib.get_bert_encoder(config)
  tf.train.Checkpoint(encoder=encoder).restore(
      os.path.join(directory, "bert_model.ckpt")).assert_consumed()
  return outputs(encoder, ids)


def main(request_file, result_file):
  with open(request_file, encoding="utf-8") as reader:
    request = json.load(reader)
  ids = {name: np.array(value, np.int32) for name, value in request["ids"].items()}
  positions = np.array(request["masked_lm_positions"], np.int32)
  for checkpoint, config_file, output in request["convert"]:
    tf2_bert_encoder_checkpoint_converter.convert_checkpoint(
        configs.BertConfig.from_json_file(config_file), output, checkpoint,
        checkpoint_model_name="encoder")
  result = {"models": {model["name"]: make_model(request["root"], model, ids, positions)
                       for model in request["models"]},
            "restored": {directory: restore(directory, ids) for directory in request["restore"]}}
  with open(result_file, "w", encoding="utf-8") as writer:
    json.dump(result, writer)


if __name__ == "__main__":
  main(*sys.argv[1:])
