"""The original's run_classifier_with_tfhub.py: run_classifier.py on a TF Hub BERT encoder.

  python run_classifier_with_tfhub.py --task_name=MRPC --do_train --do_eval \
    --data_dir=$GLUE_DIR/MRPC --bert_hub_module_handle=$HUB_DIR/bert_en_uncased_L-12_H-768_A-12_4 \
    --max_seq_length=128 --train_batch_size=32 --learning_rate=2e-5 --num_train_epochs=3.0 \
    --output_dir=/tmp/mrpc_output

`--bert_hub_module_handle` is the directory of a TF2 BERT encoder SavedModel in TF Hub's layout
(tfhub.dev's and Kaggle's, downloaded and unpacked: nothing is downloaded at run time; Model
Garden's export; our `extract_features.py --export_format=tf_hub`). Its weights, vocab and casing
come from the module, as in the original: the script converts it
(`convert_checkpoint.convert_tf_hub_to_google`, which checks the converted model gives the
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
  """The validation pass: flags the module replaces are refused, then run_classifier's checks
  (the module's directory among them)."""
  given = [name for name in _MODULE_GIVES if FLAGS[name].present]
  if given:
    raise errors.FlagError("--%s: the model comes from --bert_hub_module_handle (its weights, "
                           "config and vocab)" % given[0])
  cli.check_model_files()


def main(argv):
  # TensorFlow loads here, once the validation pass found nothing wrong (cli.run_script).
  # pylint: disable=g-import-not-at-top
  import cli_setup
  import convert_checkpoint
  import conversion
  # pylint: enable=g-import-not-at-top
  cli.require("output_dir")
  module_dir = os.path.join(FLAGS.output_dir, MODULE_DIR)
  convert_checkpoint.check_output_dir(module_dir, overwrite=False)
  convert_checkpoint.convert_tf_hub_to_google(FLAGS.bert_hub_module_handle, module_dir)
  do_lower_case = atomic_files.read_files_mark(module_dir,
                                               conversion.CONVERTED_MARK_NAME)["do_lower_case"]
  if FLAGS["do_lower_case"].present and FLAGS.do_lower_case != do_lower_case:
    raise errors.FlagError("--do_lower_case=%s, but the module at --bert_hub_module_handle=%s "
                           "has do_lower_case %s" % (str(FLAGS.do_lower_case).lower(),
                                                     FLAGS.bert_hub_module_handle, do_lower_case))
  FLAGS.init_checkpoint = os.path.join(module_dir, conversion.GOOGLE_CHECKPOINT_NAME)
  FLAGS.bert_config_file = os.path.join(module_dir, conversion.GOOGLE_CONFIG_NAME)
  FLAGS.vocab_file = os.path.join(module_dir, conversion.VOCAB_NAME)
  FLAGS.do_lower_case = do_lower_case
  cli_setup.check_input_paths()  # The config and vocab against --max_seq_length and each other.
  run_classifier.main(argv)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("bert_hub_module_handle")
  cli.run_script(main, check_input_paths=check_input_paths)
