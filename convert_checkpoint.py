# coding=utf-8
"""Converts BERT models, fine-tuned heads included, between Google's checkpoint format, Hugging
Face safetensors and KerasHub presets, and BERT encoders from and to TF Hub and Model Garden.

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

TF Hub -> Google:

  python convert_checkpoint.py --tf_hub_model_path=path/to/bert_en_uncased_L-12_H-768_A-12_4 \
      --output_dir=out

reads a TF2 BERT encoder SavedModel in TF Hub's layout (tfhub.dev's and Kaggle's, Model Garden's
`export_tfhub_lib.export_model`, our `extract_features.py --export_format=tf_hub`): its weights,
`vocab_file` asset and `do_lower_case`. Its config is read off the weights (ours carry it) and
checked by running the SavedModel: the converted model must give its outputs.

Model Garden -> Google:

  python convert_checkpoint.py --model_garden_checkpoint=path/to/bert_model.ckpt --output_dir=out

reads a `BertEncoder` checkpoint (`tf.train.Checkpoint(encoder=...)` or `model=...`, Model
Garden's released TF2 checkpoints and what its converter writes) with the bert_config.json and
vocab.txt beside it (or --bert_config_file, --vocab_file, --do_lower_case).

Google -> Hugging Face:

  python convert_checkpoint.py --init_checkpoint=uncased_L-12_H-768_A-12/bert_model.ckpt \
      --bert_config_file=uncased_L-12_H-768_A-12/bert_config.json --output_dir=out

writes `out/model.safetensors` (names with the `bert.` prefix, as `transformers` saves them),
`out/config.json` and the tokenizer (`vocab.txt` from --vocab_file or beside the checkpoint, and a
`tokenizer_config.json` with --do_lower_case), so that `AutoTokenizer.from_pretrained(out)` and the
`AutoModelFor...` class of the head load it. With `--output_format=keras_hub` it writes a KerasHub
preset instead (`BertBackbone.from_preset(out)`; a classifier also `BertTextClassifier`), and
with `--output_format=model_garden` a Model Garden checkpoint (`out/bert_model.ckpt`, which
`tf.train.Checkpoint(encoder=BertEncoder(...))` restores, with its bert_config.json and vocab.txt;
heads are left out). Optimizer slots and `global_step` of training checkpoints are left out.

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
old model or the new one, never some files of each. It holds `choices.CONVERTED_MARK_NAME`, listing the
files written; a non-empty directory without it (another model), or with files it does not list
(added since), is replaced only with `--overwrite_output_dir`, and a training run's output_dir
never (its checkpoints would meet another model's label list).
"""

import tf_defaults  # pylint: disable=unused-import  (first: TensorFlow reads it when it loads)

import os

from absl import flags

import atomic_files
import choices
import cli
import errors

FLAGS = flags.FLAGS

OUTPUT_FORMATS = ("hugging_face", "keras_hub", "model_garden")


def define_flags() -> None:
  """The converter's flags."""
  flags.DEFINE_string("hf_model_path", None,
                      "Hugging Face BERT to convert to Google's format: a directory with "
                      "config.json and model.safetensors, or a .safetensors file with config.json "
                      "beside it.")
  flags.DEFINE_string("keras_hub_preset", None,
                      "KerasHub BERT preset to convert to Google's format: a directory with "
                      "config.json (a BertBackbone) and model.weights.h5.")
  flags.DEFINE_string("tf_hub_model_path", None,
                      "TF Hub BERT encoder to convert to Google's format: the directory of a TF2 "
                      "SavedModel in TF Hub's layout (tfhub.dev's and Kaggle's bert_en_* "
                      "encoders, Model Garden's export_tfhub, or extract_features.py "
                      "--export_format=tf_hub), with its vocab_file asset and do_lower_case.")
  flags.DEFINE_string("model_garden_checkpoint", None,
                      "Model Garden BertEncoder checkpoint to convert to Google's format (an "
                      "object-based checkpoint's prefix, or its directory), with "
                      "--bert_config_file and --vocab_file (default: those beside it; a config "
                      "is needed, the checkpoint holds no activation).")
  flags.DEFINE_string("init_checkpoint", None,
                      "Google-format checkpoint (prefix such as .../bert_model.ckpt or "
                      ".../model.ckpt-N, or a directory) to convert to --output_format.")
  flags.DEFINE_enum("output_format", "hugging_face", list(OUTPUT_FORMATS),
                    "With --init_checkpoint: hugging_face (model.safetensors, config.json and the "
                    "tokenizer's files), keras_hub (a preset for BertBackbone.from_preset, and "
                    "BertTextClassifier.from_preset for a run_classifier checkpoint) or "
                    "model_garden (bert_model.ckpt that tf.train.Checkpoint(encoder=BertEncoder("
                    "...)) restores, bert_config.json and vocab.txt).")
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

def check_output_dir(output_dir: str, overwrite: bool) -> None:
  """Raises FlagError unless output_dir may be replaced by a converted model
  (`atomic_files.check_replaceable_directory`: missing, empty, or an earlier converted model
  holding only the files its `choices.CONVERTED_MARK_NAME` lists, or `overwrite`; a training run's
  output_dir never: its checkpoints and label list belong together)."""
  atomic_files.check_replaceable_directory(
      output_dir, "--output_dir", "convert_checkpoint.py",
      mark_name=choices.CONVERTED_MARK_NAME, overwrite_flag="--overwrite_output_dir",
      overwrite=overwrite)


# The flags of the sources, and the flags each reads besides --output_dir.
SOURCES = {
    "hf_model_path": (),
    "keras_hub_preset": (),
    "tf_hub_model_path": (),
    "model_garden_checkpoint": ("bert_config_file", "vocab_file", "do_lower_case"),
    "init_checkpoint": ("output_format", "bert_config_file", "vocab_file", "do_lower_case",
                        "task_name", "multi_label"),
}
def check_input_paths() -> None:
  """The validation pass after the output checks: exactly one source, no flag it does not read,
  and an --output_dir the converted model may replace (`check_output_dir`), before TensorFlow
  loads; then the model's files (`cli.check_model_files`)."""
  sources = [name for name in SOURCES if FLAGS[name].value]
  if len(sources) != 1:
    raise errors.FlagError("pass exactly one of --hf_model_path (Hugging Face -> Google), "
                           "--keras_hub_preset (KerasHub -> Google), --tf_hub_model_path (TF Hub "
                           "-> Google), --model_garden_checkpoint (Model Garden -> Google) and "
                           "--init_checkpoint (Google -> --output_format)")
  source = sources[0]
  unread = [name for name in sorted(set().union(*SOURCES.values()))
            if FLAGS[name].present and name not in SOURCES[source]]
  if unread:
    raise errors.FlagError("--%s: not read with --%s (the model of --%s says what it is)" %
                           (unread[0], source, source))
  check_output_dir(FLAGS.output_dir, FLAGS.overwrite_output_dir)
  cli.check_model_files()
  check_source_as_converted(source, FLAGS[source].value)


def check_source_as_converted(source: str, path: str) -> None:
  """Raises FlagError when the model of `--<source>=path` is an earlier conversion whose files
  (its config, vocab, weights) changed since convert_checkpoint wrote them: converting it would
  carry the edits on, recorded as the new model's own (another activation or two swapped tokens
  keep every shape)."""
  import checkpoints  # pylint: disable=g-import-not-at-top  (TensorFlow is loaded by now)
  directory = (checkpoints.checkpoint_directory(path)
               if source in ("init_checkpoint", "model_garden_checkpoint") else path)
  changed = atomic_files.files_changed_since_marked(directory, choices.CONVERTED_MARK_NAME)
  if changed:
    raise errors.FlagError(
        "--%s=%s: %s changed since convert_checkpoint wrote %s (%s records their digests), so "
        "the model is no longer the one it converted: restore %s, or convert from the source "
        "again" % (source, path, ", ".join(changed), "it" if len(changed) == 1 else "them",
                   os.path.join(directory, choices.CONVERTED_MARK_NAME),
                   "it" if len(changed) == 1 else "them"))


def main(argv):
  del argv
  import model_conversion  # pylint: disable=g-import-not-at-top  (TensorFlow loads here)
  if FLAGS.hf_model_path:
    model_conversion.convert_hf_to_google(FLAGS.hf_model_path, FLAGS.output_dir)
  elif FLAGS.keras_hub_preset:
    model_conversion.convert_keras_hub_to_google(FLAGS.keras_hub_preset, FLAGS.output_dir)
  elif FLAGS.tf_hub_model_path:
    model_conversion.convert_tf_hub_to_google(FLAGS.tf_hub_model_path, FLAGS.output_dir)
  elif FLAGS.model_garden_checkpoint:
    model_conversion.convert_model_garden_to_google(
        FLAGS.model_garden_checkpoint, FLAGS.output_dir, FLAGS.bert_config_file,
        vocab_file=FLAGS.vocab_file,
        do_lower_case=FLAGS.do_lower_case if FLAGS["do_lower_case"].present else None)
  else:
    conversions = {"hugging_face": model_conversion.convert_google_to_hf,
                   "keras_hub": model_conversion.convert_google_to_keras_hub,
                   "model_garden": model_conversion.convert_google_to_model_garden}
    conversions[FLAGS.output_format](
        FLAGS.init_checkpoint, FLAGS.output_dir, FLAGS.bert_config_file,
        vocab_file=FLAGS.vocab_file, do_lower_case=FLAGS.do_lower_case,
        task_name=FLAGS.task_name, multi_label=FLAGS.multi_label)


if __name__ == "__main__":
  define_flags()
  flags.mark_flag_as_required("output_dir")
  cli.run_script(main, check_input_paths=check_input_paths,
                 outputs={"output_dir": atomic_files.OUTPUT_DIRECTORY})
