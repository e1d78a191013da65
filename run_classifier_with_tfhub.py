"""The original's run_classifier_with_tfhub.py: run_classifier.py on a TF Hub BERT encoder.

  python run_classifier_with_tfhub.py --task_name=MRPC --do_train --do_eval \
    --data_dir=$GLUE_DIR/MRPC --bert_hub_module_handle=$HUB_DIR/bert_en_uncased_L-12_H-768_A-12_4 \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 \
    --output_dir=/tmp/mrpc_output

`--bert_hub_module_handle` is the directory of a TF2 BERT encoder SavedModel in TF Hub's layout
(tfhub.dev's and Kaggle's, downloaded and unpacked: nothing is downloaded at run time; Model
Garden's export; our `extract_features.py --export_format=tf_hub`). Its weights, vocab and casing
come from the module, as in the original: the script converts it
(`model_conversion.convert_tf_hub_to_google`, which checks the converted model gives the
module's own outputs) into `<output_dir>/tf_hub_module/` (bert_model.ckpt, bert_config.json,
vocab.txt) and runs run_classifier.py from there, with its flags, processors and outputs. The
output_dir is a run_classifier one: `run_classifier.py --do_predict` (or `--export_dir`) with
`--bert_config_file`, `--vocab_file` and `--do_lower_case` of `tf_hub_module/` works on it, and
convert_checkpoint.py converts its checkpoints. The original's TF1 Hub modules (`hub.Module`'s
format) are refused, naming what to use instead: TF2's tensorflow_hub has no `hub.Module`, and
`hub.load` gives such a module's signatures, not a model to fine-tune.
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

import os

from absl import flags

import atomic_files
import choices
import cli
import errors
import run_classifier

FLAGS = flags.FLAGS

# Where in --output_dir the module is written as a Google-format model.
MODULE_DIR = "tf_hub_module"
# run_classifier's flags that the module replaces.
_MODULE_GIVES = ("init_checkpoint", "bert_config_file", "vocab_file", "spm_model_file")


def define_flags() -> None:
  """run_classifier.py's flags and `--bert_hub_module_handle`."""
  run_classifier.define_flags()
  flags.DEFINE_string("bert_hub_module_handle", None,
                      "The directory of a TF2 BERT encoder SavedModel in TF Hub's layout (with "
                      "its vocab_file asset and do_lower_case). It gives the weights, vocab and "
                      "casing; URLs are not downloaded.")


def check_input_paths() -> None:
  """The validation pass: flags the module replaces are refused, and so is a module at the
  place its conversion goes; then run_classifier's checks (the module's directory among them)."""
  given = [name for name in _MODULE_GIVES if FLAGS[name].present]
  if given:
    raise errors.FlagError("--%s: the model comes from --bert_hub_module_handle (its weights, "
                           "config and vocab)" % given[0])
  module_dir = os.path.join(FLAGS.output_dir or "", MODULE_DIR)
  if FLAGS.output_dir and (os.path.realpath(FLAGS.bert_hub_module_handle) ==
                           os.path.realpath(module_dir)):
    raise errors.FlagError("--bert_hub_module_handle=%s is where this run writes the module's "
                           "conversion: pass the module's own directory" % module_dir)
  if os.path.islink(module_dir):
    raise errors.FlagError("%s is a symlink: the run keeps the module it trains from itself "
                           "(remove the link)" % module_dir)
  run_classifier.check_input_paths()


def _holds(module_dir: str, model) -> bool:
  """Whether module_dir holds `model` converted: the same config, vocab, casing and weights."""
  # pylint: disable=g-import-not-at-top
  import numpy as np
  import checkpoints
  import conversion
  import modeling
  # pylint: enable=g-import-not-at-top
  mark = atomic_files.read_files_mark(module_dir, choices.CONVERTED_MARK_NAME)
  if not mark or mark.get("do_lower_case") != model.do_lower_case:
    return False
  config = modeling.BertConfig.from_json_file(os.path.join(module_dir,
                                                           conversion.GOOGLE_CONFIG_NAME))
  if (config.to_dict() != model.config.to_dict() or
      conversion.text_if_exists(os.path.join(module_dir, conversion.VOCAB_NAME)) != model.vocab):
    return False
  prefix = os.path.join(module_dir, conversion.GOOGLE_CHECKPOINT_NAME)
  reader = checkpoints.open_checkpoint(prefix)
  return (set(reader.get_variable_to_shape_map()) == set(model.tensors) and
          all(np.array_equal(checkpoints.read_tensor(reader, prefix, name), value)
              for name, value in model.tensors.items()))


def _write_module(model, module_dir: str) -> None:
  """Writes the converted module into module_dir, unless it holds it already. Another module's
  conversion there is replaced only before the run trained from it."""
  # pylint: disable=g-import-not-at-top
  import checkpoints
  import conversion_google
  import convert_checkpoint
  import model_conversion
  # pylint: enable=g-import-not-at-top
  if os.path.isdir(module_dir):
    if _holds(module_dir, model):
      return
    if checkpoints.latest_checkpoint(FLAGS.output_dir):
      recorded = atomic_files.read_files_mark(module_dir, choices.CONVERTED_MARK_NAME)
      raise errors.FlagError(
          "--output_dir=%s trained from another module (%s, in %s), not --bert_hub_module_handle="
          "%s: use another --output_dir, or that module" % (
              FLAGS.output_dir, recorded.get("source", "unknown"), module_dir,
              FLAGS.bert_hub_module_handle))
  convert_checkpoint.check_output_dir(module_dir, overwrite=False)
  model_conversion.convert(lambda: model, conversion_google.write_google_model, module_dir)


def main(argv):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import conversion
  import conversion_model_garden
  # pylint: enable=g-import-not-at-top
  cli.require("output_dir")
  model = conversion_model_garden.read_tf_hub_encoder(FLAGS.bert_hub_module_handle,
                                                      "--bert_hub_module_handle")
  if FLAGS["do_lower_case"].present and FLAGS.do_lower_case != model.do_lower_case:
    raise errors.FlagError("--do_lower_case=%s, but the module at --bert_hub_module_handle=%s "
                           "has do_lower_case %s" % (str(FLAGS.do_lower_case).lower(),
                                                     FLAGS.bert_hub_module_handle,
                                                     model.do_lower_case))
  try:
    model.config.check_max_seq_length(FLAGS.max_seq_length)
  except ValueError as error:
    raise errors.FlagError("--max_seq_length: %s" % error) from None
  module_dir = os.path.join(FLAGS.output_dir, MODULE_DIR)
  _write_module(model, module_dir)
  FLAGS.init_checkpoint = os.path.join(module_dir, conversion.GOOGLE_CHECKPOINT_NAME)
  FLAGS.bert_config_file = os.path.join(module_dir, conversion.GOOGLE_CONFIG_NAME)
  FLAGS.vocab_file = os.path.join(module_dir, conversion.VOCAB_NAME)
  FLAGS.do_lower_case = model.do_lower_case
  run_classifier.check_input_paths()  # Its checks of the config, vocab and run, with the module's.
  run_classifier.main(argv)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("bert_hub_module_handle")
  cli.run_script(main, check_input_paths=check_input_paths)
